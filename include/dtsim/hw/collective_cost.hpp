// What a collective costs on idle links: NCCL's own cost model, the one its
// tuner uses to choose an algorithm and a protocol for every call
// (src/graph/tuning.cc, ncclTopoTuneModel and ncclTopoGetAlgoTime, NCCL
// 2.30.7; the constants and where each comes from are in collective_cost.cpp).
//
// For every algorithm a (ring; tree, a double binary tree across nodes and a
// chain inside each; NVLS inside a node and NVLS-tree across nodes where the
// NVSwitch reduces; PAT for all-gather and reduce-scatter with one GPU per
// node) and protocol p (LL, LL128, Simple) that NCCL would run:
//
//   time(a, p) = latency(a, p) + S / algorithm_bandwidth(a, p)
//
// with S the buffer size as nccl-tests counts it (the whole array, also for
// all-gather and reduce-scatter; NCCL's nBytes). The latency is NCCL's base
// latency plus its per-step hardware latencies over NVLink and the network;
// the bandwidth is the bandwidth of the links the algorithm uses, from the
// cluster config (NVLink bus bandwidth, k x NIC bandwidth for a group with k
// members per node, the NVLS bus bandwidth), times NCCL's per-protocol and
// per-algorithm factors and under its per-channel ceilings. The automatic
// choice is NCCL's: the pair with the least time. An NVLS-tree so chosen then
// also pays its pipeline's fill, which NCCL's tuner leaves out: its last chunk
// crossing the NVLS scatter, the tree across nodes and the NVLS gather
// (collective_cost.cpp, nvls_tree_fill).
//
// The result's bus bandwidth never exceeds bus_bandwidth_bound: what the
// slowest level a group spans lets through (docs/network-model.md, "The
// bound"). Measured curves replace the model only on the group shape they were
// measured on, under that bound too.
#pragma once

#include "dtsim/hw/topology.hpp"

#include <cstdint>
#include <string_view>

namespace dtsim::hw {

enum class Collective : std::uint8_t { all_reduce, all_gather, reduce_scatter, broadcast, reduce };
std::string_view collective_name(Collective c);

// nccl-tests' bus bandwidth factor for `n` ranks (doc/PERFORMANCE.md):
// all_reduce 2(n-1)/n, all_gather and reduce_scatter (n-1)/n, broadcast and
// reduce 1; 0 for one rank.
double bus_factor(Collective c, int n);

// NCCL's protocols: LL (8-byte stores with a flag, half the bandwidth, least
// latency), LL128 (128-byte lines, 120 of them data), Simple (bulk copies).
enum class Protocol : std::uint8_t { ll, ll128, simple };
std::string_view protocol_name(Protocol p);

// NCCL's algorithms as its tuner names them. A config can force ring, tree or
// nvls (Algorithm, topology.hpp); nvls stands for NVLS inside a node and
// NVLS-tree across nodes; PAT is only ever NCCL's own choice.
enum class NcclAlgorithm : std::uint8_t { tree, ring, nvls, nvls_tree, pat };
std::string_view nccl_algorithm_name(NcclAlgorithm a);

struct CollectiveCost {
    double seconds = 0;
    double latency = 0;
    double bus_bandwidth = 0;  // bytes/s: bus_factor x S over the time after the latency
    Algorithm algorithm = Algorithm::ring;
    NcclAlgorithm nccl_algorithm = NcclAlgorithm::ring;
    Protocol protocol = Protocol::simple;
    bool measured = false;  // the time is a measured curve's (the algorithm and protocol stay the model's choice)
    // The CTAs NCCL launches for it (its nMaxChannels for the choice and the size, enqueue.cc's
    // channel tuning): one per channel, each holding an SM for as long as the kernel runs.
    int ctas = 0;
};

// The bus bandwidth of NCCL's ring for a group: inside a node the NVLink
// bandwidth; across nodes min(k x NIC, NVLink x k/(k-1)) with k the fewest
// members on a node: NCCL runs a ring channel per NIC, and a GPU's NVLink
// carries k-1 of a node's k channels (the k-th leaves through its NIC).
double group_bus_bandwidth(const Cluster& c, const GroupShape& g);

// The most bus bandwidth any algorithm can reach on the group, from the links
// alone. Inside a node: NVLink's (NVLS's for all-reduce where the cluster has
// it). Across nodes, also: a node must send out (all-reduce: 2(N-1)/N x S,
// all-gather and reduce-scatter (N-1)/N x S, broadcast and reduce S, over N
// nodes) through its k NICs, so
//
//   bus bandwidth <= k x NIC x bus_factor(n) / bus_factor(N)
//
// which tends to k x NIC, the NICs of a node, as N grows (NCCL's own model
// never exceeds k x NIC beyond 2 nodes). No in-network reduction (SHARP,
// CollNet) is modeled. Every result of collective_cost obeys it.
double bus_bandwidth_bound(const Cluster& c, Collective coll, const GroupShape& g);

// The time a collective's bandwidth term (bus_factor x S) would take on each
// level alone at that level's bandwidth in NCCL's ring (group_bus_bandwidth's
// two terms: NVLink x k/(k-1) across nodes, or NVLink in one node; k x NIC).
// 0 on a level the group does not span. The network weighs a collective's use
// of each level by its share of the larger (network.hpp).
struct LevelSeconds {
    double intra_node = 0;
    double inter_node = 0;
};
LevelSeconds level_seconds(const Cluster& c, Collective coll, double bytes, const GroupShape& g);

// `bytes` is S as above. `algorithm` automatic (or the cluster's choice when
// that is automatic) takes NCCL's choice; a forced algorithm that does not
// apply (tree for all_gather, NVLS without NVLS) falls back to ring, and the
// result says which ran. A group of one rank costs nothing.
CollectiveCost collective_cost(const Cluster& c, Collective coll, double bytes, const GroupShape& g,
                               Algorithm algorithm = Algorithm::automatic);

// One send/recv of `bytes` between two GPUs: the cluster's
// collective_base_latency + the hop latency of the level crossed + bytes /
// that level's p2p bandwidth; with a "sendrecv" curve on that level
// (nccl-tests sendrecv_perf), the curve.
CollectiveCost p2p_cost(const Cluster& c, double bytes, bool same_node);

// Measured curves (Link::fits, written by `dtsim calibrate`). A group inside
// one node uses the intra_node curves, one across nodes the inter_node ones.
// A curve stands only for the group shape it was measured on (the same
// ranks, nodes and members on every node), from its smallest measured size
// up:
//
//   seconds = min over lines (latency + bus_factor x S / min(bus_bandwidth, bus_bandwidth_bound))
//
// Every other shape, and smaller sizes, get NCCL's model: a curve measured on
// 2 nodes says nothing reliable about 8 (NCCL switches algorithms between
// them). Below the smallest size measured the model's time is kept under the
// curve's time there, so that time never falls as the size grows. An
// automatic (NCCL default) curve stands for `automatic`; one measured with
// NCCL_ALGO forced for that algorithm; for everything but all-reduce, ring
// and automatic curves stand for each other, and all_gather and
// reduce_scatter share a curve when only one was measured.
const CollectiveFit* find_fit(const Cluster& c, std::string_view op, const GroupShape& g,
                              Algorithm algorithm = Algorithm::automatic);
// The curve's time at `scaled_bytes` = bus_factor x S, each line's bandwidth
// scaled by `bandwidth_scale` and latency by `latency_scale`.
double fitted_seconds(const CollectiveFit& f, double scaled_bytes, double latency_scale = 1,
                      double bandwidth_scale = 1);

}  // namespace dtsim::hw
