// Kernel measurements as calibration/pytorch/dtsim_kernels.py writes them: the fused
// attention rows (AttentionModel), the GEMMs (one by-shape set per data type) and the
// memory-bound kernels (element-wise, cross-entropy and the fused optimizer: one set, whose timed
// kinds give EagerKernelBytes) are read, fitted and predicted; the "launch" section is checked
// for form only. Published attention
// benchmarks ("attention_published": a chart's TFLOP/s of forward and backward together, or of
// the forward alone) are read into the same kind of set.
#include "kernels.hpp"

#include "tables.hpp"

#include "hw/config/reading.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <tuple>

namespace dtsim::hw::calib {

namespace {

using Value = json_reader::Value;

constexpr std::string_view kKernelFileKeys[] = {"source",        "note",      "description", "meta",
                                                "gemm",          "attention", "elementwise", "cross_entropy",
                                                "optimizer",     "launch"};
constexpr std::string_view kAttentionColumns[] = {"backend", "batch",      "heads",     "kv_heads",      "head_dim",
                                                  "seq",     "fwd_us",     "fwd_bwd_us", "tflops_fwd", "tflops_fwd_bwd"};

// Unknowns a, c of t = a F + c F / s (a = 1 / (peak e), c = half_seq / (peak e)), by least
// squares on the relative error: every shape counts alike, short kernels as much as long.
std::pair<double, double> fit_two(const std::vector<std::array<double, 3>>& pts) {  // {F, F / s, t}
    double a00 = 0, a01 = 0, a11 = 0, b0 = 0, b1 = 0;
    for (const auto& [x0, x1, y] : pts) {
        const double w = 1 / (y * y);
        a00 += w * x0 * x0, a01 += w * x0 * x1, a11 += w * x1 * x1, b0 += w * x0 * y, b1 += w * x1 * y;
    }
    const double det = a00 * a11 - a01 * a01;
    if (!(std::abs(det) > 0)) return {0, 0};
    return {(b0 * a11 - b1 * a01) / det, (a00 * b1 - a01 * b0) / det};
}

// The grid of AttentionCurve::half_tiles by 10 query tiles (to kMaxAttentionHalfTiles).
constexpr double kHalfTilesStep = 10;

}  // namespace

bool is_kernel_file(const nlohmann::json& j) {
    return j.is_object() && (j.contains("attention") || j.contains("attention_published") || j.contains("elementwise") ||
                             j.contains("cross_entropy") || j.contains("optimizer"));
}

namespace {

// The attention set of a kernel file: its id, file, source and the GPU its meta.gpu names.
KernelSet kernel_set(const Value& root, const std::string& file, const std::string& stem) {
    KernelSet set;
    set.gpu = measured_gpu(root);
    set.id = stem + ":attention";
    set.file = file;
    set.source = root.has("source") ? root["source"].string() : "";
    return set;
}

constexpr std::string_view kPublishedFileKeys[] = {"source", "note", "description", "meta", "attention_published",
                                                   "not_transcribed", "held_out"};
constexpr std::string_view kPublishedColumns[] = {"backend", "causal", "head_dim", "seq",
                                                  "batch",   "heads",  "direction", "tflops"};

// A published chart of fused attention: forward and backward together ("fwd_bwd"), the forward
// alone ("fwd"), or the backward ("bwd"), which needs the forward row of the same backend and
// shape (the two are one point, its passes timed apart). Counted as FlashAttention's benchmarks
// count them (benchmarks/benchmark_flash_attention.py: the forward 4 batch heads s^2 d, halved
// under a causal mask; the backward 2.5 times that, both together 3.5 times). dtsim prices causal
// attention only, so the rows without a mask are left out, and so are the backends it has no
// kernel for. A forward alone checks a curve, and so does every row of a file that says why it is
// "held_out" (another library version than the curves', for one): no curve is fitted to them.
void read_published_attention(const Value& root, const std::string& file, const std::string& stem, GroundTruth& out) {
    root.keys(kPublishedFileKeys);
    KernelSet set = kernel_set(root, file, stem);
    if (root.has("held_out")) {
        set.held_out = root["held_out"].string();
        if (set.held_out.empty()) root["held_out"].fail("expected why no curve is fitted to this file, not an empty string");
    }
    const std::string gpu = set.gpu;
    const Value sec = root["attention_published"];
    sec.keys(kTableKeys);
    const auto at = table_columns(sec["columns"], kPublishedColumns);
    const Value rows = sec["rows"];
    using Shape = std::tuple<std::string, double, double, double, double>;  // backend, head_dim, seq, batch, heads
    std::map<Shape, std::size_t> forwards;  // the point of each forward row
    std::map<Shape, std::pair<std::size_t, double>> backwards;  // each backward row and its microseconds
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const Value r = table_row(rows, i, sec["columns"].size());
        const std::string backend = r.at(at.at("backend")).choice({"flash_attention_2", "flash_attention_1", "cudnn",
                                                                     "flash_attention_3", "flash_attention_triton",
                                                                     "pytorch_standard", "xformers_cutlass"});
        const std::string direction = r.at(at.at("direction")).choice({"fwd_bwd", "fwd", "bwd"});
        if (!r.at(at.at("causal")).boolean()) continue;
        AttentionPoint p;
        p.gpu = gpu;
        if (backend == "flash_attention_2") p.backend = "flash2";
        else if (backend == "flash_attention_1") p.backend = "flash1";
        else if (backend == "cudnn") p.backend = "cudnn";
        // Unfused PyTorch is priced as its GEMMs; FlashAttention-3, xformers and Triton's kernels
        // are not kernels dtsim names.
        else continue;
        auto col = [&](const char* c, const Range& range) { return r.at(at.at(c)).real(range); };
        p.batch = col("batch", ranges::dimension);
        p.heads = col("heads", ranges::dimension);
        p.head_dim = col("head_dim", ranges::dimension);
        p.seq = col("seq", ranges::timed_tokens);
        p.check_only = !set.held_out.empty();
        const double throughput = col("tflops", ranges::throughput_tflops) * 1e12;
        const Shape shape{p.backend, p.head_dim, p.seq, p.batch, p.heads};
        if (direction == "bwd") {
            if (!backwards.emplace(shape, std::pair{i, attention_flops(p, AttentionPass::backward) / throughput * 1e6}).second)
                r.fail("repeats the backward of an earlier row of the same backend and shape");
            continue;
        }
        if (direction == "fwd") {
            if (!forwards.emplace(shape, set.attention.size()).second)
                r.fail("repeats the forward of an earlier row of the same backend and shape");
            p.forward_only = p.check_only = true;
            p.forward_us = attention_flops(p, AttentionPass::forward) / throughput * 1e6;
        } else {
            p.combined = true;
            p.forward_backward_us = attention_flops(p, AttentionPass::both) / throughput * 1e6;
        }
        set.attention.push_back(p);
    }
    // Each backward joins its forward, whichever row came first; the first row without one is named.
    std::optional<std::size_t> lone;
    for (const auto& [shape, row] : backwards)
        if (!forwards.count(shape) && (!lone || row.first < *lone)) lone = row.first;
    if (lone) rows.at(*lone).fail("a backward row needs the forward row (\"fwd\") of the same backend and shape");
    for (const auto& [shape, row] : backwards) {
        AttentionPoint& p = set.attention[forwards.at(shape)];
        const double backward_us = row.second;
        p.forward_only = false;
        p.check_only = !set.held_out.empty();
        p.forward_backward_us = p.forward_us + backward_us;
    }
    if (set.attention.empty())
        sec.fail("expected at least one causal row of flash_attention_1, flash_attention_2 or cudnn");
    out.kernels.push_back(std::move(set));
}

// The "attention" rows of a kernel file of dtsim_kernels.py: one KernelSet.
void read_attention(const Value& root, const std::string& file, const std::string& stem, GroundTruth& out) {
    KernelSet set = kernel_set(root, file, stem);
    const std::string gpu = set.gpu;
    const Value sec = root["attention"];
    const auto at = table_columns(sec["columns"], kAttentionColumns);
    const Value rows = sec["rows"];
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const Value r = rows.at(i);
        if (r.at(at.at("fwd_us")).json().is_null()) continue;  // a backend that failed on this shape
        AttentionPoint p;
        p.gpu = gpu;
        p.backend = r.at(at.at("backend")).choice({"flash", "cudnn"});
        if (p.backend == "flash") p.backend = "flash2";
        auto col = [&](const char* c, const Range& range) { return r.at(at.at(c)).real(range); };
        p.batch = col("batch", ranges::dimension);
        p.heads = col("heads", ranges::dimension);
        p.head_dim = col("head_dim", ranges::dimension);
        p.seq = col("seq", ranges::timed_tokens);
        p.forward_us = col("fwd_us", ranges::time_us);
        p.forward_backward_us = col("fwd_bwd_us", ranges::time_us);
        if (!(p.forward_backward_us > p.forward_us))
            r.fail(fmt::format("fwd_bwd_us ({}) must exceed fwd_us ({})", p.forward_backward_us, p.forward_us));
        set.attention.push_back(p);
    }
    if (set.attention.empty()) sec.fail("expected at least one measured attention row");
    out.kernels.push_back(std::move(set));

}

}  // namespace

void read_kernels(const json_reader::Value& root, const std::string& file, const std::string& stem, GroundTruth& out) {
    if (root.has("attention_published")) return read_published_attention(root, file, stem, out);
    for (const auto& [key, sec] : root.members()) {
        if (std::find(std::begin(kKernelFileKeys), std::end(kKernelFileKeys), key) == std::end(kKernelFileKeys))
            root.unknown_key(key, kKernelFileKeys);
        if (key == "source" || key == "note" || key == "description" || key == "meta") continue;
        sec.keys(kTableKeys);
        const Value cols = sec["columns"], rows = sec["rows"];
        for (std::size_t i = 0; i < rows.size(); ++i) (void)table_row(rows, i, cols.size());
    }
    const std::string gpu = measured_gpu(root);
    const std::string source = root.has("source") ? root["source"].string() : "";
    if (root.has("attention")) read_attention(root, file, stem, out);
    read_eager_kernels(root, file, stem, out);

    // "gemm": [m, n, k, dtype, tflops, time_us] rows, one GEMM set per data type.
    if (!root.has("gemm")) return;
    const Value g = root["gemm"];
    constexpr std::string_view kGemmColumns[] = {"m", "n", "k", "dtype", "tflops"};
    constexpr double kMinKernelMicroseconds = 50;
    const auto gat = table_columns(g["columns"], kGemmColumns);
    std::map<DType, GemmSet> by_dtype;
    const Value grows = g["rows"];
    for (std::size_t i = 0; i < grows.size(); ++i) {
        const Value r = grows.at(i);
        if (r.at(gat.at("tflops")).json().is_null()) continue;  // a type this build could not run
        // Shorter calls measure eager PyTorch's launch rate (8-18 us per operator on the
        // measuring hosts, the file's "launch" section), not the kernel.
        if (gat.count("time_us") && r.at(gat.at("time_us")).real(ranges::time_us) < kMinKernelMicroseconds) continue;
        const Value dt = r.at(gat.at("dtype"));
        const auto d = parse_dtype(dt.string());
        if (!d) dt.fail(fmt::format("expected one of fp32, tf32, bf16, fp16, fp8, found \"{}\"", json_reader::shorten(dt.string())));
        GemmSet& gs = by_dtype[*d];
        if (gs.id.empty()) {
            gs.id = fmt::format("{}:gemm_{}", stem, dtype_name(*d));
            gs.file = file;
            gs.source = source;
        }
        auto col = [&](const char* c, const Range& range) { return r.at(gat.at(c)).real(range); };
        gs.rows.push_back({gpu, *d, col("m", ranges::dimension), col("n", ranges::dimension), col("k", ranges::dimension),
                           col("tflops", ranges::throughput_tflops)});
    }
    for (auto& [d, gs] : by_dtype) out.gemms.push_back(std::move(gs));
}

namespace {
// The elementwise section's kernels, by the names the script gives them, and their kinds.
constexpr std::string_view kEagerNames[] = {"rms_norm", "layer_norm", "dropout", "rotary_torchtitan",
                                            "residual_add", "gelu_tanh", "swiglu"};
constexpr EagerKernel kEagerKinds[] = {EagerKernel::norm,         EagerKernel::norm, EagerKernel::dropout,
                                       EagerKernel::rope,         EagerKernel::residual_add,
                                       EagerKernel::gelu,         EagerKernel::swiglu};
static_assert(std::size(kEagerNames) == std::size(kEagerKinds));
// The kind of a name choice() has accepted from kEagerNames.
EagerKernel eager_kind(std::string_view name) {
    return kEagerKinds[static_cast<std::size_t>(std::find(std::begin(kEagerNames), std::end(kEagerNames), name) -
                                                std::begin(kEagerNames))];
}
}  // namespace

void read_eager_kernels(const Value& root, const std::string& file, const std::string& stem, GroundTruth& out) {
    EagerKernelSet set;
    set.gpu = measured_gpu(root);
    set.id = stem + ":eager_kernels";
    set.file = file;
    set.source = root.has("source") ? root["source"].string() : "";
    // A backward timed with its forward: fwd_bwd_us less fwd_us, which must be positive.
    const auto backward = [](const Value& r, double fwd_us, const Value& both) -> std::optional<double> {
        if (both.json().is_null()) return std::nullopt;
        const double us = both.real(ranges::time_us);
        if (!(us > fwd_us)) r.fail(fmt::format("fwd_bwd_us ({}) must exceed fwd_us ({})", us, fwd_us));
        return (us - fwd_us) * 1e-6;
    };
    // A section of rows timed forward and forward + backward over tokens x `width` elements, each
    // row's kind and name from `kind_of` (the elementwise section's "kernel" column).
    const auto passes = [&](const char* key, const char* width, bool named, auto kind_of) {
        if (!root.has(key)) return;
        const Value sec = root[key];
        std::vector<std::string_view> columns{"tokens", width, "fwd_us", "fwd_bwd_us"};
        if (named) columns.push_back("kernel");
        const auto at = table_columns(sec["columns"], columns);
        const Value rows = sec["rows"];
        for (std::size_t i = 0; i < rows.size(); ++i) {
            const Value r = rows.at(i);
            const auto [kind, name] = kind_of(r, at);
            const double tokens = r.at(at.at("tokens")).real(ranges::timed_tokens);
            const double wide = r.at(at.at(width)).real(ranges::dimension);
            const double fwd_us = r.at(at.at("fwd_us")).real(ranges::time_us);
            set.rows.push_back({kind, fmt::format("{} {:g} x {:g}", name, tokens, wide), tokens * wide, fwd_us * 1e-6,
                                backward(r, fwd_us, r.at(at.at("fwd_bwd_us")))});
        }
    };
    passes("elementwise", "width", true, [](const Value& r, const std::map<std::string, std::size_t>& at) {
        const std::string name = r.at(at.at("kernel")).choice(kEagerNames);
        return std::pair{eager_kind(name), name};
    });
    passes("cross_entropy", "vocab", false, [](const Value&, const std::map<std::string, std::size_t>&) {
        return std::pair{EagerKernel::loss, std::string("cross_entropy")};
    });
    if (root.has("optimizer")) {
        // torch.optim.AdamW over fp32 parameters: the fused kernel's rows (the foreach form is not
        // what dtsim prices).
        const Value sec = root["optimizer"];
        constexpr std::string_view kColumns[] = {"optimizer", "impl", "dtype", "params", "step_us"};
        const auto at = table_columns(sec["columns"], kColumns);
        const Value rows = sec["rows"];
        for (std::size_t i = 0; i < rows.size(); ++i) {
            const Value r = rows.at(i);
            (void)r.at(at.at("optimizer")).choice({"adamw"});
            if (r.at(at.at("impl")).choice({"fused", "foreach"}) != "fused") continue;
            (void)r.at(at.at("dtype")).choice({"fp32"});
            const double params = r.at(at.at("params")).real(ranges::dimension);
            set.rows.push_back({EagerKernel::adam, fmt::format("adamw fused {:g} parameters", params), params,
                                r.at(at.at("step_us")).real(ranges::time_us) * 1e-6, std::nullopt});
        }
    }
    if (!set.rows.empty()) out.eager.push_back(std::move(set));
}

TimedBytes timed_bytes(const EagerKernelSet& s, EagerKernel kind, double bytes_per_s) {
    // Adam's rows give its factor: bytes at the rate over the bytes counted.
    EagerKernelBytes counted;
    counted.adam = 1;
    const double per = kind == EagerKernel::adam ? eager_kernel_bytes(EagerKernel::adam, counted, 2).forward : 1;
    TimedBytes out;
    for (const auto& p : s.rows) {
        if (p.kind != kind) continue;
        out.forward.push_back(p.forward_s * bytes_per_s / p.elements / per);
        if (p.backward_s) out.backward.push_back(*p.backward_s * bytes_per_s / p.elements);
    }
    return out;
}

EagerKernelBytes fit_eager_kernels(const std::vector<const EagerKernelSet*>& sets, double bytes_per_s,
                                   EagerKernelBytes base) {
    for (const EagerKernel kind : kTimedKernels) {
        TimedBytes all;
        for (const EagerKernelSet* s : sets) {
            TimedBytes t = timed_bytes(*s, kind, bytes_per_s);
            all.forward.insert(all.forward.end(), t.forward.begin(), t.forward.end());
            all.backward.insert(all.backward.end(), t.backward.begin(), t.backward.end());
        }
        PassBytes p = timed_figures(base, kind);
        if (!all.forward.empty()) p.forward = std::round(median_of(all.forward) * 100) / 100;
        if (!all.backward.empty()) p.backward = std::round(median_of(all.backward) * 100) / 100;
        set_timed_figures(base, kind, p);
    }
    return base;
}

double attention_flops(const AttentionPoint& p, AttentionPass pass) {
    const double forward = 2 * p.batch * p.heads * p.seq * p.seq * p.head_dim;
    return forward * (pass == AttentionPass::forward ? 1.0 : pass == AttentionPass::backward ? 2.5 : 3.5);
}

double attention_measured_seconds(const AttentionPoint& p, AttentionPass pass) {
    switch (pass) {
        case AttentionPass::forward: return p.forward_us * 1e-6;
        case AttentionPass::backward: return (p.forward_backward_us - p.forward_us) * 1e-6;
        case AttentionPass::both: return p.forward_backward_us * 1e-6;
    }
    return 0;
}

std::vector<AttentionPass> attention_passes(const AttentionPoint& p) {
    if (p.forward_only) return {AttentionPass::forward};
    if (p.combined) return {AttentionPass::both};
    return {AttentionPass::forward, AttentionPass::backward};
}

std::optional<double> attention_predicted_seconds(const GpuSpec& gpu, const AttentionPoint& p, AttentionPass pass,
                                                  DType d) {
    const double heads = p.batch * p.heads;
    if (pass != AttentionPass::both) return gpu.attention_seconds(p.backend, heads, p.seq, p.head_dim, d, pass == AttentionPass::backward);
    const auto f = gpu.attention_seconds(p.backend, heads, p.seq, p.head_dim, d, false);
    const auto b = gpu.attention_seconds(p.backend, heads, p.seq, p.head_dim, d, true);
    if (!f || !b) return std::nullopt;
    return *f + *b;
}

bool attention_fitted_from(const AttentionModel& m, const AttentionPoint& p) {
    const auto it = m.backends.find(p.backend);
    if (p.check_only || it == m.backends.end()) return false;
    for (const AttentionKernel& k : it->second)
        if (k.head_dim == static_cast<int>(p.head_dim)) return k.from_sums == p.combined;
    return false;
}

AttentionModel fit_attention(const std::vector<AttentionPoint>& points, double peak_flops) {
    AttentionModel m;
    // A group is one backend and head dimension, and points measured apart or together.
    std::map<std::tuple<std::string, int, bool>, std::vector<const AttentionPoint*>> groups;
    // (A check of a curve is left out: a forward timed alone says nothing of the backward.)
    for (const auto& p : points)
        if (!p.check_only) groups[{p.backend, static_cast<int>(p.head_dim), p.combined}].push_back(&p);
    for (const auto& [key, pts] : groups) {
        const auto& [backend, head_dim, combined] = key;
        if (pts.size() < 2) continue;  // two unknowns per curve
        // Measured apart and together both: the passes measured apart are fitted.
        if (combined && groups.count({backend, head_dim, false}) && groups.at({backend, head_dim, false}).size() >= 2)
            continue;
        AttentionKernel k;
        k.head_dim = head_dim;
        k.from_sums = combined;
        std::vector<double> tiles;  // each point's query tiles
        for (const AttentionPoint* p : pts) tiles.push_back(attention_tiles(p->batch * p->heads, p->seq));
        // The tile term is told apart from the length's only where some length was measured at two
        // tile counts or more; where the count follows the length (one call shape a length, as the
        // published charts and the head dimension 64 timings), it stays 0.
        std::map<double, std::set<double>> tiles_by_seq;
        for (std::size_t i = 0; i < pts.size(); ++i) tiles_by_seq[pts[i]->seq].insert(tiles[i]);
        const bool tiles_vary = std::any_of(tiles_by_seq.begin(), tiles_by_seq.end(),
                                            [](const auto& e) { return e.second.size() > 1; });
        for (const AttentionPass pass : attention_passes(*pts.front())) {
            // For each tile count at half rate (the grid), the two linear unknowns; the best of all
            // by the same relative error; it stays 0 unless it lowers the error.
            double best_error = std::numeric_limits<double>::infinity(), a = 0, c = 0, half_tiles = 0;
            for (double half = 0; half <= (tiles_vary ? kMaxAttentionHalfTiles : 0); half += kHalfTilesStep) {
                const AttentionCurve trial{0, 0, half};
                std::vector<std::array<double, 3>> xy;
                for (std::size_t i = 0; i < pts.size(); ++i) {
                    const double f = attention_flops(*pts[i], pass) * trial.tile_factor(tiles[i]);
                    xy.push_back({f, f / pts[i]->seq, attention_measured_seconds(*pts[i], pass)});
                }
                const auto [ka, kc] = fit_two(xy);
                if (!(ka > 0) || !(kc >= 0)) continue;
                double error = 0;
                for (const auto& [x0, x1, y] : xy) error += std::pow((ka * x0 + kc * x1) / y - 1, 2);
                // (Only a real gain moves it off 0: not one rounding makes where all fit alike.)
                const double gain = std::max(1e-9 * best_error, 1e-12 * static_cast<double>(xy.size()));
                if (std::isinf(best_error) || error < best_error - gain)
                    best_error = error, a = ka, c = kc, half_tiles = half;
            }
            if (!(a > 0)) continue;  // no saturating curve fits: leave the backend out
            AttentionCurve curve;
            curve.efficiency = std::min(1.0, std::round(1 / (a * peak_flops) * 10000) / 10000);
            curve.half_seq = std::round(c / a);
            curve.half_tiles = half_tiles;
            if (pass != AttentionPass::backward) k.forward = curve;
            if (pass != AttentionPass::forward) k.backward = curve;
        }
        if (k.forward.half_tiles > 0 || k.backward.half_tiles > 0) k.min_tiles = *std::min_element(tiles.begin(), tiles.end());
        if (k.forward.efficiency > 0 && k.backward.efficiency > 0) m.backends[backend].push_back(k);
    }
    return m;
}

ValidationSet validate_attention(const KernelSet& s, const GpuSpec& gpu, const std::string& cluster_file,
                                 bool holdout) {
    ValidationSet v;
    v.id = s.id;
    v.kind = "attention";
    v.source = s.source;
    v.file = s.file;
    v.cluster = cluster_file;
    const DType d = gpu.peak_flops[static_cast<std::size_t>(DType::bf16)] > 0 ? DType::bf16 : DType::fp16;
    const auto& ds = gpu.attention.datasets;
    const bool listed = std::find(ds.begin(), ds.end(), s.id) != ds.end();
    std::set<std::string> missing, nearest;
    bool any_in = false, any_out = false, any_here = false, any_elsewhere = false;
    for (std::size_t i = 0; i < s.attention.size(); ++i) {
        const AttentionPoint& p = s.attention[i];
        // Whether the cluster's curve for this point was fitted to this set (attention_fitted_from):
        // only those points are in-sample, and only those refitted without the point to hold it out.
        const bool from_here = listed && attention_fitted_from(gpu.attention, p);
        // The cluster's GPU, or a copy with this set's curves refitted without the point.
        std::optional<GpuSpec> refit;
        if (holdout && from_here) {
            std::vector<AttentionPoint> rest;
            for (std::size_t j = 0; j < s.attention.size(); ++j)
                if (j != i) rest.push_back(s.attention[j]);
            refit = gpu;
            refit->attention = fit_attention(rest, gpu.peak(d));
        }
        const GpuSpec& g = refit ? *refit : gpu;
        const bool in_sample = from_here && !holdout;
        if (const AttentionKernel* k = g.attention.find(p.backend, p.head_dim);
            k && k->head_dim != static_cast<int>(p.head_dim))
            nearest.insert(
                fmt::format("{} head dimension {:g} by the curve of {}", p.backend, p.head_dim, k->head_dim));
        any_here |= from_here;
        any_elsewhere |= !from_here;
        for (const AttentionPass pass : attention_passes(p)) {
            const auto t = attention_predicted_seconds(g, p, pass, d);
            if (!t) {
                missing.insert(p.backend);
                continue;
            }
            (in_sample ? any_in : any_out) = true;
            const double measured = attention_measured_seconds(p, pass);
            const char* what = pass == AttentionPass::forward ? "fwd" : pass == AttentionPass::backward ? "bwd" : "fwd+bwd";
            v.points.push_back({fmt::format("{} {} b{:.0f} h{:.0f} d{:.0f} s{:.0f}", p.backend, what, p.batch, p.heads,
                                            p.head_dim, p.seq),
                                attention_flops(p, pass), measured * 1e6, *t * 1e6, "us", true, in_sample});
        }
    }
    if (v.points.empty())
        throw ConfigError(s.file, "$.attention",
                          fmt::format("data set \"{}\" cannot be predicted: {} has no attention curve for {}", s.id,
                                      cluster_file, fmt::join(missing, ", ")));
    const std::string others = ds.empty() ? std::string("nothing") : fmt::format("{}", fmt::join(ds, ", "));
    // (A set none of whose curves were fitted to it is held out as it is, with or without --holdout.)
    v.fit = holdout && any_here
                ? (any_elsewhere ? "held out: each shape of a curve fitted to this set predicted from a fit to the "
                                   "set's other shapes (leave one out), the others from curves fitted to other data"
                                 : "held out: each shape predicted from a fit to the other shapes (leave one out)")
            : any_in && any_out
                ? "in-sample where fitted: its rows of kernels whose curves were fitted to other data (passes "
                  "measured apart) are held out"
            : any_in ? "in-sample: the attention curves were fitted to this set"
                     : "held out: curves fitted to " + others;
    v.note = "GpuSpec::attention_seconds (saturating in the sequence length and in the query tiles, per backend and "
             "head dimension)";
    if (!s.held_out.empty()) v.note += fmt::format("; its file fits no curve: {}", s.held_out);
    if (!missing.empty()) v.note += fmt::format("; not predicted (no curve): {}", fmt::join(missing, ", "));
    if (!nearest.empty()) v.note += fmt::format("; priced by the nearest curve: {}", fmt::join(nearest, ", "));
    return v;
}

nlohmann::json attention_json(const AttentionModel& m) {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [backend, kernels] : m.backends) {
        nlohmann::json list = nlohmann::json::array();
        for (const auto& k : kernels) {
            auto curve = [](const AttentionCurve& a) {
                nlohmann::json one{{"efficiency", a.efficiency}, {"half_seq", a.half_seq}};
                if (a.half_tiles > 0) one["half_tiles"] = a.half_tiles;
                return one;
            };
            nlohmann::json c{{"head_dim", k.head_dim}, {"forward", curve(k.forward)}, {"backward", curve(k.backward)}};
            if (k.from_sums) c["from_sums"] = true;
            if (k.min_tiles > 0) c["min_tiles"] = k.min_tiles;
            list.push_back(c);
        }
        j[backend] = list;
    }
    if (!m.datasets.empty()) j["datasets"] = m.datasets;
    return j;
}

}  // namespace dtsim::hw::calib
