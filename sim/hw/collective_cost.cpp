#include "dtsim/hw/collective_cost.hpp"

#include <algorithm>
#include <cmath>

namespace dtsim::hw {

std::string_view collective_name(Collective c) {
    switch (c) {
        case Collective::all_reduce: return "all_reduce";
        case Collective::all_gather: return "all_gather";
        case Collective::reduce_scatter: return "reduce_scatter";
        case Collective::broadcast: return "broadcast";
        case Collective::reduce: return "reduce";
    }
    return "?";
}

double bus_factor(Collective c, int n) {
    if (n <= 1) return 0;
    const double nn = n;
    switch (c) {
        case Collective::all_reduce: return 2 * (nn - 1) / nn;
        case Collective::all_gather:
        case Collective::reduce_scatter: return (nn - 1) / nn;
        case Collective::broadcast:
        case Collective::reduce: return 1;
    }
    return 1;
}

double group_bus_bandwidth(const Cluster& c, const GroupShape& g) {
    if (g.nodes <= 1) return c.intra_node.bandwidth;
    double bw = c.inter_node.bandwidth * g.min_per_node;
    if (g.max_per_node > 1) bw = std::min(bw, c.intra_node.bandwidth);
    return bw;
}

namespace {

int ceil_log2(int n) {
    int k = 0;
    while ((1 << k) < n) ++k;
    return k;
}

CollectiveCost ring(const Cluster& c, Collective coll, double bytes, const GroupShape& g) {
    const int n = g.ranks;
    const int steps = coll == Collective::all_reduce ? 2 * (n - 1) : n - 1;
    const int inter_steps = coll == Collective::all_reduce ? 2 * (g.nodes - 1) : g.nodes - 1;
    CollectiveCost r;
    r.algorithm = Algorithm::ring;
    r.bus_bandwidth = group_bus_bandwidth(c, g);
    r.latency = c.base_latency + (steps - inter_steps) * c.intra_node.hop_latency +
                inter_steps * c.inter_node.hop_latency;
    r.seconds = r.latency + bus_factor(coll, n) * bytes / r.bus_bandwidth;
    return r;
}

CollectiveCost tree(const Cluster& c, double bytes, const GroupShape& g) {
    CollectiveCost r;
    r.algorithm = Algorithm::tree;
    r.bus_bandwidth = 0.9 * group_bus_bandwidth(c, g);
    r.latency = c.base_latency + 2 * ((g.ranks / g.nodes - 1) * c.intra_node.hop_latency +
                                      ceil_log2(g.nodes) * c.inter_node.hop_latency);
    r.seconds = r.latency + bytes / (0.5 * r.bus_bandwidth);
    return r;
}

bool nvls_applies(const Cluster& c, Collective coll, const GroupShape& g) {
    return coll == Collective::all_reduce && g.nodes == 1 && c.intra_node.nvls_bandwidth > 0;
}

CollectiveCost nvls(const Cluster& c, double bytes, const GroupShape& g) {
    CollectiveCost r;
    r.algorithm = Algorithm::nvls;
    r.bus_bandwidth = c.intra_node.nvls_bandwidth;
    r.latency = c.base_latency + 2 * c.intra_node.hop_latency;
    r.seconds = r.latency + bus_factor(Collective::all_reduce, g.ranks) * bytes / r.bus_bandwidth;
    return r;
}

}  // namespace

CollectiveCost collective_cost(const Cluster& c, Collective coll, double bytes, const GroupShape& g,
                               Algorithm algorithm) {
    if (g.ranks <= 1) return CollectiveCost{0, 0, 0, Algorithm::ring};
    if (algorithm == Algorithm::automatic) algorithm = c.algorithm;
    switch (algorithm) {
        case Algorithm::tree:
            return coll == Collective::all_reduce ? tree(c, bytes, g) : ring(c, coll, bytes, g);
        case Algorithm::nvls:
            return nvls_applies(c, coll, g) ? nvls(c, bytes, g) : ring(c, coll, bytes, g);
        case Algorithm::ring:
            return ring(c, coll, bytes, g);
        case Algorithm::automatic:
            break;
    }
    CollectiveCost best = ring(c, coll, bytes, g);
    if (coll == Collective::all_reduce) {
        CollectiveCost t = tree(c, bytes, g);
        if (t.seconds < best.seconds) best = t;
    }
    if (nvls_applies(c, coll, g)) {
        CollectiveCost v = nvls(c, bytes, g);
        if (v.seconds < best.seconds) best = v;
    }
    return best;
}

CollectiveCost p2p_cost(const Cluster& c, double bytes, bool same_node) {
    const Link& l = same_node ? c.intra_node : c.inter_node;
    CollectiveCost r;
    r.algorithm = Algorithm::ring;
    r.bus_bandwidth = l.p2p_bandwidth;
    r.latency = c.base_latency + l.hop_latency;
    r.seconds = r.latency + bytes / l.p2p_bandwidth;
    return r;
}

}  // namespace dtsim::hw
