#include "dtsim/hw/gpu.hpp"
#include "dtsim/hw/topology.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

namespace dtsim::hw {

std::string_view dtype_name(DType d) {
    switch (d) {
        case DType::fp32: return "fp32";
        case DType::tf32: return "tf32";
        case DType::bf16: return "bf16";
        case DType::fp16: return "fp16";
        case DType::fp8: return "fp8";
    }
    return "?";
}

std::optional<DType> parse_dtype(std::string_view name) {
    for (int i = 0; i < kDTypes; ++i)
        if (dtype_name(static_cast<DType>(i)) == name) return static_cast<DType>(i);
    return std::nullopt;
}

double bytes_per_element(DType d) {
    switch (d) {
        case DType::fp32:
        case DType::tf32: return 4;
        case DType::bf16:
        case DType::fp16: return 2;
        case DType::fp8: return 1;
    }
    return 2;
}

double GpuSpec::peak(DType d) const {
    const double p = peak_flops[static_cast<std::size_t>(d)];
    if (p <= 0)
        throw std::invalid_argument(fmt::format("GPU {} has no peak FLOP/s for {}", name, dtype_name(d)));
    return p;
}

double power_clock_exponent() {
    static const double k =
        std::log(kPowerClockNvlTflops / kPowerClockSxmTflops) / std::log(kPowerClockNvlWatts / kPowerClockSxmWatts);
    return k;
}

double GpuSpec::tensor_clock_scale() const {
    if (!(power_limit_watts > 0) || !(tdp_watts > 0) || power_limit_watts >= tdp_watts) return 1;
    return std::pow(power_limit_watts / tdp_watts, power_exponent > 0 ? power_exponent : power_clock_exponent());
}

double GpuSpec::gemm_seconds(double m, double n, double k, DType d, double count) const {
    if (m <= 0 || n <= 0 || k <= 0 || count <= 0) return 0;
    const double flops = 2 * m * n * k;
    const double bytes = (m * k + k * n + m * n) * bytes_per_element(d);
    const double t = gemm.overhead_s + std::max(flops / (peak(d) * tensor_clock_scale() * gemm.efficiency(d)),
                                                bytes / (memory_bandwidth * gemm.bandwidth_fraction));
    return count * t;
}

double GpuSpec::gemm_efficiency(double m, double n, double k, DType d) const {
    const double t = gemm_seconds(m, n, k, d);
    return t > 0 ? 2 * m * n * k / t / peak(d) : 0;
}

double GpuSpec::memory_seconds(double bytes) const {
    return bytes <= 0 ? 0 : bytes / (memory_bandwidth * stream_fraction);
}

const AttentionKernel* AttentionModel::find(std::string_view backend, double head_dim) const {
    const auto it = backends.find(backend);
    if (it == backends.end() || it->second.empty() || !(head_dim > 0)) return nullptr;
    const AttentionKernel* best = nullptr;
    double distance = 0;
    for (const AttentionKernel& k : it->second) {
        const double d = std::abs(std::log(k.head_dim / head_dim));
        if (best == nullptr || d < distance) best = &k, distance = d;
    }
    return best;
}

std::optional<double> GpuSpec::attention_seconds(std::string_view backend, double heads, double seq, double head_dim,
                                                 DType d, bool backward) const {
    const AttentionKernel* k = attention.find(backend, head_dim);
    if (k == nullptr) return std::nullopt;
    if (heads <= 0 || seq <= 0) return 0.0;
    const AttentionCurve& c = backward ? k->backward : k->forward;
    const double flops = (backward ? 2.5 : 1.0) * 2 * heads * seq * seq * head_dim;
    // fp8 runs attention in bf16 (Transformer Engine and torchao keep it there).
    const double p = peak(d == DType::fp8 ? DType::bf16 : d);
    return flops / (p * tensor_clock_scale() * c.efficiency * seq / (seq + c.half_seq)) *
           c.tile_factor(attention_tiles(heads, seq));
}

std::string_view algorithm_name(Algorithm a) {
    switch (a) {
        case Algorithm::automatic: return "auto";
        case Algorithm::ring: return "ring";
        case Algorithm::tree: return "tree";
        case Algorithm::nvls: return "nvls";
    }
    return "?";
}

GroupShape GroupShape::of(const Cluster& cluster, std::span<const int> members) {
    GroupShape g;
    g.ranks = static_cast<int>(members.size());
    std::map<int, int> per_node;
    for (int r : members) ++per_node[cluster.node_of(r)];
    g.nodes = static_cast<int>(per_node.size());
    g.min_per_node = g.ranks;
    g.max_per_node = 0;
    for (const auto& [node, count] : per_node) {
        g.min_per_node = std::min(g.min_per_node, count);
        g.max_per_node = std::max(g.max_per_node, count);
    }
    if (members.empty()) g.min_per_node = g.max_per_node = 0;
    return g;
}

}  // namespace dtsim::hw
