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

LevelSeconds level_seconds(const Cluster& c, Collective coll, double bytes, const GroupShape& g) {
    LevelSeconds t;
    if (g.ranks <= 1) return t;
    const double moved = bus_factor(coll, g.ranks) * bytes;
    if (g.uses(Level::intra_node)) t.intra_node = moved / c.intra_node.bandwidth;
    if (g.uses(Level::inter_node)) t.inter_node = moved / (c.inter_node.bandwidth * g.min_per_node);
    return t;
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

namespace {

CollectiveCost structural(const Cluster& c, Collective coll, double bytes, const GroupShape& g, Algorithm algorithm) {
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

const CollectiveFit* find_in(const Link& l, std::string_view op, Algorithm a) {
    for (const auto& f : l.fits)
        if (f.op == op && f.algorithm == a && !f.lines.empty()) return &f;
    return nullptr;
}

// The curve measured with NCCL's choice stands for `automatic`; one measured
// with NCCL_ALGO=Ring also stands for it where ring is the only algorithm the
// model has (everything but all-reduce), and the other way round.
const CollectiveFit* find_for(const Link& l, std::string_view op, Algorithm a, bool ring_only) {
    if (const auto* f = find_in(l, op, a)) return f;
    if (ring_only && a == Algorithm::automatic) return find_in(l, op, Algorithm::ring);
    if (ring_only && a == Algorithm::ring) return find_in(l, op, Algorithm::automatic);
    return nullptr;
}

double envelope(const CollectiveFit& f, double x, double latency_scale, double bandwidth_scale, double* latency,
                double bandwidth_cap = 0) {
    double best = -1, lat = 0;
    for (const auto& line : f.lines) {
        double bw = line.bus_bandwidth * bandwidth_scale;
        if (bandwidth_cap > 0) bw = std::min(bw, bandwidth_cap);
        const double t = line.latency * latency_scale + x / bw;
        if (best < 0 || t < best) best = t, lat = line.latency * latency_scale;
    }
    if (latency) *latency = lat;
    return best;
}

}  // namespace

const CollectiveFit* find_fit(const Cluster& c, std::string_view op, const GroupShape& g, Algorithm algorithm) {
    if (algorithm == Algorithm::automatic) algorithm = c.algorithm;
    const Link& l = g.nodes > 1 ? c.inter_node : c.intra_node;
    const bool ring_only = op != "all_reduce";
    if (const auto* f = find_for(l, op, algorithm, ring_only)) return f;
    // all_gather and reduce_scatter are the same ring, each half of an all-reduce
    // (nccl-tests#326, stas00: ~360 GB/s busbw for both on 8 x H100/H200).
    if (op == "all_gather") return find_for(l, "reduce_scatter", algorithm, true);
    if (op == "reduce_scatter") return find_for(l, "all_gather", algorithm, true);
    return nullptr;
}

double fitted_seconds(const CollectiveFit& f, double scaled_bytes, double latency_scale, double bandwidth_scale) {
    return envelope(f, scaled_bytes, latency_scale, bandwidth_scale, nullptr);
}

CollectiveCost collective_cost(const Cluster& c, Collective coll, double bytes, const GroupShape& g,
                               Algorithm algorithm) {
    if (g.ranks <= 1) return CollectiveCost{0, 0, 0, Algorithm::ring};
    if (algorithm == Algorithm::automatic) algorithm = c.algorithm;
    CollectiveCost r = structural(c, coll, bytes, g, algorithm);
    const CollectiveFit* f = find_fit(c, collective_name(coll), g, algorithm);
    if (!f || bytes < f->min_bytes) return r;
    // Another group than the one measured: scale by the ring's latency and bus bandwidth.
    const GroupShape fg{f->ranks, f->nodes, f->per_node, f->per_node};
    const CollectiveCost here = ring(c, coll, 0, g), there = ring(c, coll, 0, fg);
    const double ls = there.latency > 0 ? here.latency / there.latency : 1;
    const double bs = there.bus_bandwidth > 0 ? here.bus_bandwidth / there.bus_bandwidth : 1;
    // Across nodes, another layout per node (fewer NICs in use) may not beat the ring bound of that layout.
    const bool same_layout = g.nodes == 1 || (g.min_per_node == f->per_node && g.max_per_node == f->per_node);
    r.seconds = envelope(*f, bus_factor(coll, g.ranks) * bytes, ls, bs, &r.latency, same_layout ? 0 : here.bus_bandwidth);
    r.bus_bandwidth = bus_factor(coll, g.ranks) * bytes / std::max(r.seconds - r.latency, 1e-30);
    return r;
}

CollectiveCost p2p_cost(const Cluster& c, double bytes, bool same_node) {
    const Link& l = same_node ? c.intra_node : c.inter_node;
    CollectiveCost r;
    r.algorithm = Algorithm::ring;
    r.bus_bandwidth = l.p2p_bandwidth;
    r.latency = c.base_latency + l.hop_latency;
    r.seconds = r.latency + bytes / l.p2p_bandwidth;
    if (const auto* f = find_for(l, "sendrecv", Algorithm::automatic, true); f && bytes >= f->min_bytes) r.seconds = envelope(*f, bytes, 1, 1, &r.latency);
    return r;
}

}  // namespace dtsim::hw
