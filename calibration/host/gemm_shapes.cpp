#include "host/gemm_shapes.hpp"

#include "host/cli.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>

namespace dtsim::harness {

double gemm_flops(const GemmShape& s) {
    return 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
}

std::vector<GemmShape> transformer_gemm_shapes(const TransformerDims& d) {
    const std::int64_t ffn = d.ffn == 0 ? 4 * d.hidden : d.ffn;
    const auto positive = [](std::string_view what, std::int64_t v) {
        if (v <= 0) throw ArgError(fmt::format("--{} must be positive, got {}", what, v));
    };
    positive("hidden", d.hidden);
    positive("ffn", ffn);
    positive("seq", d.seq);
    positive("micro-batch", d.micro_batch);
    positive("tp", d.tp);
    if (d.hidden % d.tp != 0)
        throw ArgError(fmt::format("--hidden {} is not divisible by --tp {}", d.hidden, d.tp));
    if (ffn % d.tp != 0) throw ArgError(fmt::format("--ffn {} is not divisible by --tp {}", ffn, d.tp));
    const std::int64_t tokens = d.micro_batch * d.seq;
    struct Linear {
        const char* name;
        std::int64_t in, out;
    };
    const Linear linears[] = {
        {"qkv", d.hidden, 3 * d.hidden / d.tp},
        {"proj", d.hidden / d.tp, d.hidden},
        {"mlp_up", d.hidden, ffn / d.tp},
        {"mlp_down", ffn / d.tp, d.hidden},
    };
    std::vector<GemmShape> out;
    for (const auto& l : linears) {
        out.push_back({fmt::format("{}.fwd", l.name), tokens, l.out, l.in, 'N', 'T'});
        out.push_back({fmt::format("{}.bwd_data", l.name), tokens, l.in, l.out, 'N', 'N'});
        out.push_back({fmt::format("{}.bwd_weight", l.name), l.out, l.in, tokens, 'T', 'N'});
    }
    return out;
}

std::vector<GemmShape> parse_gemm_shapes(std::string_view text) {
    std::vector<GemmShape> out;
    std::size_t pos = 0;
    while (pos < text.size()) {
        const std::size_t end = text.find_first_of("; \t\n", pos);
        const std::string_view item = text.substr(pos, end == std::string_view::npos ? text.npos : end - pos);
        pos = end == std::string_view::npos ? text.size() : end + 1;
        if (item.empty()) continue;
        std::int64_t v[3] = {0, 0, 0};
        std::size_t at = 0;
        for (int i = 0; i < 3; ++i) {
            const char* b = item.data() + at;
            const char* e = item.data() + item.size();
            auto [p, ec] = std::from_chars(b, e, v[i]);
            const bool sep_ok = i == 2 ? p == e : (p != e && (*p == ',' || *p == 'x' || *p == 'X'));
            if (ec != std::errc() || p == b || !sep_ok || v[i] <= 0)
                throw ArgError(fmt::format("--shapes: \"{}\" is not M,N,K with positive integers", item));
            at = static_cast<std::size_t>(p - item.data()) + 1;
        }
        out.push_back({"user", v[0], v[1], v[2], 'N', 'N'});
    }
    if (out.empty()) throw ArgError("--shapes: no shape given (expected e.g. \"4096,4096,4096;8192,1024,4096\")");
    return out;
}

std::string slug(std::string_view text) {
    std::string out;
    bool pending = false;
    for (char c : text) {
        const auto u = static_cast<unsigned char>(c);
        if (std::isalnum(u)) {
            if (pending && !out.empty()) out += '_';
            pending = false;
            out += static_cast<char>(std::tolower(u));
        } else {
            pending = true;
        }
    }
    return out.empty() ? std::string("gpu") : out;
}

nlohmann::json gemm_json(const nlohmann::json& meta, std::string_view gpu, std::string_view dtype,
                         const std::vector<GemmResult>& results, std::optional<double> peak_tflops) {
    const auto round2 = [](double v) { return std::round(v * 100.0) / 100.0; };
    nlohmann::json out = nlohmann::json::object();
    out["description"] =
        "Measured GEMM throughput (dtsim-gemm, calibration/README.md): TFLOP/s = 2*m*n*k / mean time, row-major "
        "C[m,n] = op(A)[m,k] op(B)[k,n] with fp32 accumulation, timed with CUDA events.";
    out["meta"] = meta;
    const std::string source = "measured: dtsim-gemm (this file's meta.command)";
    const GemmResult* best = nullptr;
    for (const auto& r : results)
        if (best == nullptr || r.tflops() > best->tflops()) best = &r;
    nlohmann::json max = nlohmann::json::object();
    max["source"] = source;
    max["rows"] = nlohmann::json::array();
    if (best != nullptr) {
        nlohmann::json row = nlohmann::json::object();
        row["gpu"] = gpu;
        row["dtype"] = dtype;
        row["tflops"] = round2(best->tflops());
        if (peak_tflops) row["peak"] = *peak_tflops;
        row["shape"] = fmt::format("{}x{}x{}", best->shape.m, best->shape.n, best->shape.k);
        max["rows"].push_back(row);
    }
    out["max_achievable"] = max;
    nlohmann::json table = nlohmann::json::object();
    table["source"] = source;
    table["gpu"] = gpu;
    table["dtype"] = dtype;
    table["columns"] = {"m", "n", "k", "tflops", "time_us", "name", "layout"};
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& r : results) {
        rows.push_back({r.shape.m, r.shape.n, r.shape.k, round2(r.tflops()), round2(r.seconds * 1e6), r.shape.name,
                        fmt::format("{}{}", r.shape.a_layout, r.shape.b_layout)});
    }
    table["rows"] = rows;
    out[fmt::format("{}_{}_by_shape", slug(gpu), slug(dtype))] = table;
    return out;
}

}  // namespace dtsim::harness
