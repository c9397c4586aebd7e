// What a collective costs: an alpha-beta model per algorithm, after NCCL's own
// tuning model (src/graph/tuning.cc, ncclTopoTuneModel / ncclTopoGetAlgoTime):
//
//   time = latency + bus_factor * S / bus_bandwidth
//
// with S the buffer size as nccl-tests counts it (the whole array for
// all_gather and reduce_scatter) and bus_factor nccl-tests' doc/PERFORMANCE.md
// conversion: all_reduce 2(n-1)/n, all_gather and reduce_scatter (n-1)/n,
// broadcast, reduce and send/recv 1.
//
// Ring:  latency = base + (steps - inter_steps) * intra_hop + inter_steps * inter_hop,
//        steps = 2(n-1) for all_reduce, n-1 for all_gather/reduce_scatter/broadcast/reduce,
//        inter_steps the same counts over nodes (NCCL: nsteps, nInterSteps).
// Tree (all_reduce only, as in NCCL): latency = base + 2((n/nodes - 1) intra_hop
//        + ceil(log2 nodes) inter_hop); bandwidth 0.9 x the ring's and an algorithm
//        bandwidth of half of it (NCCL: busBw *= .9, ratio .5), i.e. 2S / (0.9 B).
// NVLS (all_reduce inside one node, where the link has nvls_bandwidth):
//        latency = base + 2 intra_hop, ring bus factor at nvls_bandwidth.
//
// The bus bandwidth of a group spanning nodes is bounded by the network: each
// GPU has its own NIC and NCCL runs one ring per NIC, so a group with k members
// on every node gets min(NVLink, k x NIC) (nccl-tests#309: 16 H100 on 2 nodes
// reach ~390 GB/s busbw with NCCL_ALGO=Ring, 8 x 48 GB/s).
#pragma once

#include "dtsim/hw/topology.hpp"

#include <cstdint>
#include <string_view>

namespace dtsim::hw {

enum class Collective : std::uint8_t { all_reduce, all_gather, reduce_scatter, broadcast, reduce };
std::string_view collective_name(Collective c);

// nccl-tests' bus bandwidth factor for `n` ranks.
double bus_factor(Collective c, int n);

struct CollectiveCost {
    double seconds = 0;
    double latency = 0;
    double bus_bandwidth = 0;  // bytes/s
    Algorithm algorithm = Algorithm::ring;
};

// The ring bus bandwidth of a group (see above).
double group_bus_bandwidth(const Cluster& c, const GroupShape& g);

// The time a collective's bandwidth term (bus_factor x S) would take on each
// level alone at that level's full bandwidth, with the bandwidths the bound
// above takes the minimum of: NVLink's, and k x NIC across nodes (k the
// fewest members on a node; NCCL runs one ring per NIC, nccl-tests#309).
// 0 on a level the group does not span. The larger is the ring's bandwidth
// time; the network weighs a collective's use of each level by its share
// of it (network.hpp).
struct LevelSeconds {
    double intra_node = 0;
    double inter_node = 0;
};
LevelSeconds level_seconds(const Cluster& c, Collective coll, double bytes, const GroupShape& g);

// `bytes` is S as above. `algorithm` automatic (or the cluster's choice when
// that is automatic) takes the fastest applicable algorithm; a forced
// algorithm that does not apply (tree for all_gather, NVLS across nodes) falls
// back to ring, and the result says which ran.
CollectiveCost collective_cost(const Cluster& c, Collective coll, double bytes, const GroupShape& g,
                               Algorithm algorithm = Algorithm::automatic);

// One send/recv of `bytes` between two GPUs: base + hop latency of the level
// crossed + bytes / that level's p2p bandwidth; with a "sendrecv" curve on
// that level (nccl-tests sendrecv_perf), the curve.
CollectiveCost p2p_cost(const Cluster& c, double bytes, bool same_node);

// Measured curves (Link::fits, written by `dtsim calibrate`). A group inside
// one node uses the intra_node curves, one across nodes the inter_node ones.
// Where a curve for the operation and algorithm exists, collective_cost
// returns it instead of the alpha-beta model above:
//
//   seconds = min over lines (latency x Ls + bus_factor x S / (bus_bandwidth x Bs))
//
// with Ls and Bs the ratios of the ring's latency and bus bandwidth (above)
// for this group to those for the group measured: 1 for the group measured;
// fewer ranks, fewer ring steps; fewer members per node, fewer NICs. A group
// laid out otherwise than the one measured (members per node) gets no line
// faster than its ring bound (group_bus_bandwidth): 16 GPUs on 2 nodes reach
// 469 GB/s busbw with NCCL's tree (nccl-tests#309), one GPU per node is held
// to its NIC. These extrapolations are validated only on the shapes measured. An
// automatic (NCCL default) curve stands for `automatic`; for everything but
// all-reduce, where ring is the model's only algorithm, ring and automatic
// curves stand for each other, and all_gather and reduce_scatter share a
// curve when only one was measured. Below the smallest size a curve was
// measured at (CollectiveFit::min_bytes) it is not extrapolated: the
// alpha-beta model stands. Without a curve nothing changes.
const CollectiveFit* find_fit(const Cluster& c, std::string_view op, const GroupShape& g,
                              Algorithm algorithm = Algorithm::automatic);
// The curve's time at `scaled_bytes` = bus_factor x S, with the scales above.
double fitted_seconds(const CollectiveFit& f, double scaled_bytes, double latency_scale = 1,
                      double bandwidth_scale = 1);

}  // namespace dtsim::hw
