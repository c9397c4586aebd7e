// A cluster: identical nodes of GPUs, NVLink (or similar) inside a node and a
// network across nodes. Two levels; every GPU has its own port on each level
// (NVSwitch inside a node, one NIC per GPU across nodes, as DGX nodes are
// built), full duplex (a transmit and a receive side), and those ports are
// where concurrent transfers contend (network.hpp).
#pragma once

#include "dtsim/hw/gpu.hpp"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace dtsim::hw {

// NCCL's algorithms (nccl-tests doc/PERFORMANCE.md, NCCL src/graph/tuning.cc).
// `automatic` picks the fastest of those that apply, as NCCL's tuner does.
enum class Algorithm : std::uint8_t { automatic, ring, tree, nvls };
std::string_view algorithm_name(Algorithm a);

// A measured curve of one operation on one level (written by `dtsim calibrate`):
//
//   time(S) = min over lines (latency + bus_factor x S / bus_bandwidth)
//
// NCCL's own form: it prices every (algorithm, protocol) pair as latency +
// size / bandwidth and runs the cheapest (src/graph/tuning.cc,
// ncclTopoGetAlgoTime), so measured time is the lower envelope of a few lines,
// one per protocol it switches to (LL, LL128, Simple). `ranks`, `nodes` and
// `per_node` are the group that was measured: the curve stands for that group
// shape only; other groups get NCCL's model (collective_cost.hpp).
struct FitLine {
    double latency = 0;        // seconds
    double bus_bandwidth = 0;  // bytes/s (nccl-tests busbw)
};
struct CollectiveFit {
    std::string op;                              // all_reduce, all_gather, reduce_scatter, sendrecv
    Algorithm algorithm = Algorithm::automatic;  // NCCL_ALGO of the measurement; automatic = NCCL's choice
    int ranks = 0, nodes = 1, per_node = 0;
    double min_bytes = 0;  // the smallest size measured: below it NCCL's model stands (no extrapolation down)
    std::vector<FitLine> lines;
    std::vector<std::string> datasets;  // ids of the measurements it was fitted to
};

// One level of the interconnect, as seen by one GPU.
struct Link {
    std::string name;
    double bandwidth = 0;       // bus bandwidth of large collectives, bytes/s (nccl-tests busbw)
    double p2p_bandwidth = 0;   // one send/recv stream, bytes/s
    double hop_latency = 0;     // seconds a send/recv adds crossing this level (collectives take NCCL's latencies)
    double nvls_bandwidth = 0;  // NVLink SHARP all-reduce bus bandwidth; 0 = not available
    std::vector<CollectiveFit> fits{};  // measured curves; they replace NCCL's model on the group shape measured
};

enum class Level : std::uint8_t { intra_node = 0, inter_node = 1 };

// Shared storage that checkpoints are written to and read back from (a parallel
// file system or object store), as the "storage" key of a cluster config. All
// zero when the config gives none.
struct Storage {
    double write_bandwidth = 0;  // aggregate over all writers, bytes/s
    double read_bandwidth = 0;   // aggregate over all readers, bytes/s
    double node_bandwidth = 0;   // one node's own link to storage, bytes/s each way
    [[nodiscard]] bool given() const { return write_bandwidth > 0; }
};

struct Cluster {
    std::string name;
    GpuSpec gpu;
    int gpus_per_node = 8;
    int nodes = 1;
    Link intra_node;
    Link inter_node;
    double base_latency = 0;  // seconds added once per send/recv (collectives take NCCL's baseLat)
    Algorithm algorithm = Algorithm::automatic;
    Storage storage;
    // What the config's own figures rest on least (cluster "caveats"): dtsim run prints each among
    // the weakest points of a prediction on this cluster.
    std::vector<std::string> caveats;

    [[nodiscard]] int gpus() const { return gpus_per_node * nodes; }
    [[nodiscard]] int node_of(int rank) const { return rank / gpus_per_node; }
    [[nodiscard]] const Link& link(Level l) const { return l == Level::intra_node ? intra_node : inter_node; }
};

// Where a group of ranks sits: how many ranks, over how many nodes, and how
// many members the least and most populated node holds.
struct GroupShape {
    int ranks = 1;
    int nodes = 1;
    int min_per_node = 1;
    int max_per_node = 1;

    static GroupShape of(const Cluster& cluster, std::span<const int> members);
    // Transfers of the group cross NVLink (some node holds two members) / the network.
    [[nodiscard]] bool uses(Level l) const { return l == Level::intra_node ? max_per_node > 1 : nodes > 1; }
};

}  // namespace dtsim::hw
