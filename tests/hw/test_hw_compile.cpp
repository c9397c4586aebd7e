// Compiled blocks (LayerSplit::compiled, strategy.compile): the byte counts against a hand
// computation, the layer's pricing, what a compiled block keeps, and the model against the
// compiled blocks measured on one H100 (calibration/data/h100_dtsim_torch_compile.json).
#include "dtsim/hw/config.hpp"
#include "dtsim/hw/run.hpp"
#include "dtsim/hw/transformer.hpp"
#include "dtsim/hw/workload.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <string>

using namespace dtsim::hw;

namespace {

TransformerSpec compile_llama8b() {
    TransformerSpec m{"llama", 1, 4096, 32, 8, 14336, 8192, 0, DType::bf16, Mlp::swiglu, false};
    m.dropout = false;
    return m;
}

// A measured block as a model and split: the tp8-shapes rows are a TP8 rank's share, so the model
// has 8 x their heads and FFN and the split tp 8 (no sequence parallelism: their norms ran whole).
struct MeasuredBlock {
    TransformerSpec model;
    LayerSplit split;
    nlohmann::json row;
};

MeasuredBlock measured_block(const nlohmann::json& row) {
    const bool share = row["name"].get<std::string>().find("tp8-shapes") != std::string::npos;
    const int t = share ? 8 : 1;
    const bool llama = row["kind"] == "llama";
    TransformerSpec m{row["name"].get<std::string>(), 1, row["hidden"].get<int>(), t * row["heads"].get<int>(),
                      t * row["kv_heads"].get<int>(), t * row["ffn"].get<int>(), row["seq"].get<int>(), 0,
                      DType::bf16, llama ? Mlp::swiglu : Mlp::gelu, false};
    m.dropout = false;
    LayerSplit s{row["batch"].get<int>(), t, false, Recompute::none, true};
    s.fp8 = row["linear"] == "fp8" ? Fp8::torchao : Fp8::none;
    s.compiled = row["mode"] == "compile";
    s.elementwise = ElementwiseKernels::eager;  // PyTorch's modules, as the harness ran them eagerly
    return {m, s, row};
}

nlohmann::json compile_rows() {
    std::ifstream in(std::string(DTSIM_CONFIGS) + "/../calibration/data/h100_dtsim_torch_compile.json");
    REQUIRE(in.good());
    return nlohmann::json::parse(in)["blocks"]["rows"];
}

// The measured block's time outside GEMMs and attention: Inductor's kernels, eager ones, copies.
double memory_bound_ms(const nlohmann::json& row) {
    double ms = 0;
    for (const char* kind : {"triton", "eager", "copy"})
        if (row["kernel_ms"].contains(kind)) ms += row["kernel_ms"][kind].get<double>();
    return ms;
}

}  // namespace

TEST_CASE("compiled blocks: three classes of generated kernels, bytes per token per element of their width") {
    const TransformerSpec m = compile_llama8b();
    LayerSplit s{2, 1, false, Recompute::none, true};
    s.compiled = true;
    // Llama 3 8B at 2 x 8,192 tokens: the norms' class over 16,384 x 4,096, half to each block; the
    // rotary embedding's over 16,384 x (32 + 8) x 128; SwiGLU's over 16,384 x 14,336.
    const double norms = kCompiledNormBytes * 16384 * 4096, rotary = kCompiledRotaryBytes * 16384 * 40 * 128,
                 swiglu = kCompiledSwigluBytes * 16384 * 14336;
    const CompiledElementwiseBytes c = compiled_elementwise_bytes(m, s);
    CHECK(c.attention == doctest::Approx(norms / 2 + rotary));
    CHECK(c.mlp == doctest::Approx(norms / 2 + swiglu));
    // TP 4 divides the rotary and the FFN; sequence parallelism divides the norms as well.
    LayerSplit tp = s;
    tp.tp = 4;
    CHECK(compiled_elementwise_bytes(m, tp).mlp == doctest::Approx(norms / 2 + swiglu / 4));
    tp.sequence_parallel = true;
    CHECK(compiled_elementwise_bytes(m, tp).attention == doctest::Approx((norms / 2 + rotary) / 4));
    // A GeLU block: its activation and the QKV gradient's stacking over q, k and v.
    TransformerSpec gpt{"gpt", 1, 2048, 16, 16, 8192, 2048, 0, DType::bf16, Mlp::gelu, false};
    LayerSplit g{8, 1, false, Recompute::none, true};
    g.compiled = true;
    const double tokens = 8 * 2048.0;
    CHECK(compiled_elementwise_bytes(gpt, g).mlp ==
          doctest::Approx(kCompiledNormBytes * tokens * 2048 / 2 + kCompiledGeluBytes * tokens * 8192));
    CHECK(compiled_elementwise_bytes(gpt, g).attention ==
          doctest::Approx(kCompiledNormBytes * tokens * 2048 / 2 + kCompiledQkvBytes * tokens * 3 * 2048));
}

TEST_CASE("a compiled layer prices its memory-bound work as the compiled bytes, a third in the forward") {
    const TransformerSpec m = compile_llama8b();
    LayerSplit eager{2, 1, false, Recompute::none, true};
    LayerSplit compiled = eager;
    compiled.compiled = true;
    GpuSpec gpu;
    gpu.peak_flops[static_cast<std::size_t>(DType::bf16)] = 989.4e12;
    gpu.memory_bandwidth = 3.35e12;
    const Workload a = make_workload(m, eager, gpu), b = make_workload(m, compiled, gpu);
    const CompiledElementwiseBytes c = compiled_elementwise_bytes(m, compiled);
    CHECK(b.layer.attention_forward.bytes == doctest::Approx(c.attention / 3));
    CHECK(b.layer.mlp_forward.bytes == doctest::Approx(c.mlp / 3));
    // GEMMs and the attention core are unchanged: the difference is the bytes alone.
    CHECK(b.layer.mlp_forward.seconds - a.layer.mlp_forward.seconds ==
          doctest::Approx(gpu.memory_seconds(c.mlp / 3) - gpu.memory_seconds(a.layer.mlp_forward.bytes)));
    CHECK(b.layer.mlp_forward.flops == a.layer.mlp_forward.flops);
    CHECK(b.layer.mlp_backward.seconds == doctest::Approx(2 * b.layer.mlp_forward.seconds));
    // torchao's casts in a compiled block: kCompiledTorchaoCastShare of the eager counts.
    LayerSplit f8 = eager;
    f8.fp8 = Fp8::torchao;
    LayerSplit f8c = f8;
    f8c.compiled = true;
    CHECK(fp8_cast_bytes(m, f8c).forward == doctest::Approx(kCompiledTorchaoCastShare * fp8_cast_bytes(m, f8).forward));
    CHECK(fp8_cast_bytes(m, f8c).backward == doctest::Approx(kCompiledTorchaoCastShare * fp8_cast_bytes(m, f8).backward));
    CHECK(fp8_cast_bytes(m, f8c).per_weight == doctest::Approx(kCompiledTorchaoCastShare * 5));
}

TEST_CASE("a compiled block keeps no SwiGLU product, less again with torchao, and the input under full recompute") {
    const TransformerSpec m = compile_llama8b();
    const double s = 8192, h = 4096, f = 14336;
    auto kept = [&](Recompute r, Fp8 f8, bool compiled, int tp = 1, bool sp = false) {
        LayerSplit l{1, tp, sp, r, true};
        l.fp8 = f8;
        l.compiled = compiled;
        l.elementwise = ElementwiseKernels::eager;  // against PyTorch's eager block
        return layer_activation_bytes(m, l);
    };
    CHECK(kept(Recompute::none, Fp8::none, false) - kept(Recompute::none, Fp8::none, true) == doctest::Approx(2 * s * f));
    CHECK(kept(Recompute::none, Fp8::none, true) - kept(Recompute::none, Fp8::torchao, true) ==
          doctest::Approx(s * (2 * f + 4 * h)));
    // With TP 4 and sequence parallelism the FFN's part and the h-wide part are each /4.
    CHECK(kept(Recompute::none, Fp8::none, true, 4, true) - kept(Recompute::none, Fp8::torchao, true, 4, true) ==
          doctest::Approx(s * (2 * f / 4 + 4 * h / 4)));
    CHECK(kept(Recompute::selective_op, Fp8::none, false) - kept(Recompute::selective_op, Fp8::none, true) ==
          doctest::Approx(2 * s * h));
    CHECK(kept(Recompute::full, Fp8::none, true) == kept(Recompute::full, Fp8::none, false));
    // Megatron-Core's fused SwiGLU keeps what Inductor keeps (its input and output, no product).
    LayerSplit fused{1, 1, false, Recompute::none, true};
    CHECK(layer_activation_bytes(m, fused) == doctest::Approx(kept(Recompute::none, Fp8::none, true)));
    // A GeLU block keeps what it keeps eager.
    TransformerSpec gpt{"gpt", 1, 2048, 16, 16, 8192, 2048, 0, DType::bf16, Mlp::gelu, false};
    LayerSplit e{1, 1, false, Recompute::none, true}, c = e;
    c.compiled = true;
    CHECK(layer_activation_bytes(gpt, c) == layer_activation_bytes(gpt, e));
}

TEST_CASE("compiled blocks measured on one H100: the memory-bound time and what compile keeps less") {
    const Config cfg = load_config(std::string(DTSIM_CONFIGS) + "/runs/llama3-8b-16xh100-fsdp.json");
    const GpuSpec& gpu = cfg.cluster.gpu;
    const nlohmann::json rows = compile_rows();
    int timed = 0, kept = 0;
    for (const auto& row : rows) {
        if (row["recompute"] != "none") continue;
        const MeasuredBlock b = measured_block(row);
        CAPTURE(row["name"].get<std::string>());
        CAPTURE(row["linear"].get<std::string>());
        if (b.split.compiled) {
            // Forward and backward of the compiled memory-bound work, casts included.
            const CompiledElementwiseBytes c = compiled_elementwise_bytes(b.model, b.split);
            double bytes = c.attention + c.mlp;
            if (b.split.fp8 == Fp8::torchao) {
                const Fp8CastBytes f = fp8_cast_bytes(b.model, b.split);
                const double linear = b.model.params_per_layer() / b.split.tp;  // norms are negligible here
                bytes += f.forward + f.backward + f.per_weight * f.weight_casts * linear;
            }
            const double predicted_ms = gpu.memory_seconds(bytes) * 1e3;
            const double measured_ms = memory_bound_ms(row);
            CAPTURE(predicted_ms);
            CAPTURE(measured_ms);
            CHECK(std::abs(predicted_ms / measured_ms - 1) < 0.20);
            ++timed;
        }
        // What compile keeps less than eager, against the measured difference of the two rows.
        if (b.split.compiled) {
            for (const auto& other : rows)
                if (other["name"] == row["name"] && other["linear"] == row["linear"] && other["recompute"] == "none" &&
                    other["mode"] == "eager") {
                    LayerSplit e = b.split;
                    e.compiled = false;
                    // The eager replica of torchao keeps its linears' inputs in bf16 as dtsim's torchao does.
                    const double predicted = layer_activation_bytes(b.model, e) - layer_activation_bytes(b.model, b.split);
                    const double measured = other["kept_bytes"].get<double>() - row["kept_bytes"].get<double>();
                    CAPTURE(predicted);
                    CAPTURE(measured);
                    if (measured == 0) CHECK(predicted == 0);
                    else CHECK(std::abs(predicted / measured - 1) < 0.01);
                    ++kept;
                }
        }
    }
    CHECK(timed == 8);
    CHECK(kept == 8);
}

TEST_CASE("eager blocks measured on one H100: the memory-bound count against the eager kernels' time") {
    // Held out: no constant of layer_elementwise_bytes, rope_bytes or the streaming rate was fitted
    // to these rows. PyTorch's eager kernels (elementwise_kernels eager), torchtitan's complex
    // rotary embedding on the Llama shapes, repeat_kv's copies where the row repeated.
    const Config cfg = load_config(std::string(DTSIM_CONFIGS) + "/runs/llama3-8b-16xh100-fsdp.json");
    const GpuSpec& gpu = cfg.cluster.gpu;
    int timed = 0;
    for (const auto& row : compile_rows()) {
        if (row["mode"] != "eager" || row["linear"] != "bf16" || row["recompute"] != "none") continue;
        MeasuredBlock b = measured_block(row);
        b.split.elementwise = ElementwiseKernels::eager;
        b.split.rope = b.model.mlp == Mlp::swiglu ? RopeKernel::complex : RopeKernel::none;
        b.split.repeat_kv = row.value("attention_form", "") == "repeat_kv";
        const LayerWork L = make_workload(b.model, b.split, gpu).layer;
        const double bytes = L.attention_forward.bytes + L.mlp_forward.bytes + L.attention_backward.bytes +
                             L.mlp_backward.bytes;
        const double predicted_ms = gpu.memory_seconds(bytes) * 1e3, measured_ms = memory_bound_ms(row);
        CAPTURE(row["name"].get<std::string>());
        CAPTURE(predicted_ms);
        CAPTURE(measured_ms);
        CHECK(std::abs(predicted_ms / measured_ms - 1) < 0.05);
        ++timed;
    }
    CHECK(timed == 4);
}

TEST_CASE("torchao's float8 without compile, and compile with Transformer Engine's, are named as caveats") {
    auto caveats = [](std::vector<Override> sets) {
        // (its early stop given, so that the run has nothing else to say)
        sets.push_back({"strategy.recompute_early_stop", "true"});
        const Config c = load_config(std::string(DTSIM_CONFIGS) + "/runs/llama3-8b-16xh100-fsdp.json", sets);
        auto out = prediction_caveats(c, make_workload(c.model.spec, layer_split(c), c.cluster.gpu));
        // (the SMs its collectives take: test_hw_attention's)
        std::erase_if(out, [](const std::string& s) { return s.starts_with("compute beside a collective"); });
        return out;
    };
    auto has = [](const std::vector<std::string>& v, const std::string& text) {
        for (const auto& s : v)
            if (s.find(text) != std::string::npos) return true;
        return false;
    };
    CHECK(has(caveats({{"strategy.fp8", "\"torchao\""}}), "torchao's float8 casts priced as fused kernels"));
    CHECK_FALSE(has(caveats({{"strategy.fp8", "\"torchao\""}, {"strategy.compile", "true"}}), "torchao's float8"));
    CHECK(has(caveats({{"strategy.fp8", "\"te\""}, {"strategy.compile", "true"}}), "Transformer Engine's float8 linears were not measured"));
    CHECK(caveats({{"strategy.compile", "true"}}).empty());
    // A power limit says where its factor comes from: on the H100, the law fitted to GEMMs at 500 W,
    // (5/7)^0.4666 = exp(0.4666 x -0.336472) = 0.855; (3/7)^0.4666 = exp(0.4666 x -0.847298) = 0.673.
    CHECK(has(caveats({{"cluster.gpu.power_limit_W", "500"}}),
              "tensor-core throughput x0.855 under the 500 W power limit on a 700 W part: clock ~ power^0.467, fitted "
              "to GEMMs measured on a power-limited part (h100_gemm_published:h100_hbm2e_500w_bf16_by_shape)"));
    CHECK(caveats({{"cluster.gpu.power_limit_W", "700"}}).empty());
    CHECK(has(caveats({{"cluster.gpu.power_limit_W", "300"}}), "x0.673 under the 300 W power limit"));
    // Without a fitted law (the A100's), the datasheets' estimate: (3/4)^0.302118 = 0.917, and below
    // the NVL's 4/7 of the TDP an extrapolation.
    auto a100 = [](const std::string& watts) {
        const Config c = load_config(std::string(DTSIM_CONFIGS) + "/runs/gpt3-175b-1024xa100-sc21.json",
                                     {{"cluster.gpu.power_limit_W", watts}});
        return prediction_caveats(c, make_workload(c.model.spec, layer_split(c), c.cluster.gpu));
    };
    CHECK(has(a100("300"), "x0.917 under the 300 W power limit on a 400 W part: estimated from NVIDIA's datasheet peaks"));
    CHECK(has(a100("300"), "carried from Hopper to A100"));
    CHECK_FALSE(has(a100("300"), "extrapolated"));
    CHECK(has(a100("150"), "extrapolated below the lower point's share of the TDP"));
}

TEST_CASE("an eagerly composed RMSNorm moves 36 bytes an element in place of a fused norm's measured bytes; compiled blocks fuse it") {
    // The hand count of torchtitan's RMSNorm module (x.float(), pow, mean, x * rsqrt, type_as, * weight):
    // 2 + 4 | 4 + 4 | 4 | 4 + 4 | 4 + 2 | 2 + 2 bytes read + written per element.
    CHECK(kComposedRmsNormBytes == 36);
    const TransformerSpec m = compile_llama8b();
    GpuSpec gpu;
    gpu.peak_flops[static_cast<std::size_t>(DType::bf16)] = 989.4e12;
    gpu.memory_bandwidth = 3.35e12;
    LayerSplit fused{2, 1, false, Recompute::none, true};
    LayerSplit composed = fused;
    composed.composed_norm = true;
    const LayerWork a = make_workload(m, fused, gpu).layer, b = make_workload(m, composed, gpu).layer;
    // One norm in front of each block: 36 bytes in place of the fused norm's, per element of 2 x 8,192
    // tokens x 4,096, forward, and twice that backward.
    const double elements = 2.0 * 8192 * 4096, extra = (36 - kNormForwardBytes) * elements,
                 extra_backward = (72 - kNormBackwardBytes) * elements;
    CHECK(b.attention_forward.bytes - a.attention_forward.bytes == doctest::Approx(extra));
    CHECK(b.mlp_forward.bytes - a.mlp_forward.bytes == doctest::Approx(extra));
    CHECK(b.attention_backward.bytes - a.attention_backward.bytes == doctest::Approx(extra_backward));
    CHECK(b.mlp_backward.bytes - a.mlp_backward.bytes == doctest::Approx(extra_backward));
    CHECK(b.mlp_forward.seconds - a.mlp_forward.seconds == doctest::Approx(gpu.memory_seconds(extra)));
    // Recomputed with the rest of the block, under full recompute and torchtitan's per-op policy.
    for (const Recompute r : {Recompute::full, Recompute::selective_op}) {
        LayerSplit f = fused, c = composed;
        f.recompute = c.recompute = r;
        CHECK(make_workload(m, c, gpu).layer.mlp_recompute.bytes - make_workload(m, f, gpu).layer.mlp_recompute.bytes ==
              doctest::Approx(extra));
    }
    // Sequence parallelism: each TP rank normalises its 1/t of the tokens.
    LayerSplit sp = fused;
    sp.tp = 4;
    sp.sequence_parallel = true;
    LayerSplit sp_composed = sp;
    sp_composed.composed_norm = true;
    CHECK(make_workload(m, sp_composed, gpu).layer.mlp_forward.bytes - make_workload(m, sp, gpu).layer.mlp_forward.bytes ==
          doctest::Approx(extra / 4));
    // Compiled blocks: Inductor fuses the norm, whatever module wrote it.
    LayerSplit compiled = fused, compiled_composed = composed;
    compiled.compiled = compiled_composed.compiled = true;
    CHECK(make_workload(m, compiled_composed, gpu).layer.mlp_forward.bytes ==
          make_workload(m, compiled, gpu).layer.mlp_forward.bytes);
}
