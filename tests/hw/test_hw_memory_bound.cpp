// Memory-bound work: the streaming rate against STREAM's measurements, the element-wise kernels'
// pass counts and measured constants against the kernels timed on an H100 and an H200
// (calibration/data), and layer_elementwise_bytes against a hand count.
#include "dtsim/hw/config.hpp"
#include "dtsim/hw/gpu.hpp"
#include "dtsim/hw/puzzle_costs.hpp"
#include "dtsim/hw/run.hpp"
#include "dtsim/hw/transformer.hpp"
#include "dtsim/hw/workload.hpp"
#include "hw/runtime/plan_bounds.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

using namespace dtsim::hw;

namespace {

nlohmann::json read(const std::string& relative) {
    std::ifstream in(std::string(DTSIM_CONFIGS) + "/../" + relative);
    REQUIRE(in.good());
    return nlohmann::json::parse(in);
}

double median(std::vector<double> v) {
    REQUIRE(!v.empty());
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// A table's rows as column name -> value.
std::vector<std::map<std::string, nlohmann::json>> rows_of(const nlohmann::json& section) {
    std::vector<std::map<std::string, nlohmann::json>> out;
    for (const auto& r : section.at("rows")) {
        std::map<std::string, nlohmann::json> row;
        for (std::size_t i = 0; i < section.at("columns").size(); ++i) row[section.at("columns")[i]] = r[i];
        out.push_back(row);
    }
    return out;
}

// Each timed element-wise row of `kernels` (one of `names`) as bytes an element at `gpu`'s
// memory_seconds rate, forward and backward (fwd_bwd_us less fwd_us; none where not timed).
struct PerElement {
    std::vector<double> forward, backward;
};
PerElement per_element(const nlohmann::json& file, const std::set<std::string>& names, const GpuSpec& gpu) {
    const double second_per_byte = gpu.memory_seconds(1.0);
    PerElement out;
    for (auto& r : rows_of(file.at("elementwise"))) {
        if (!names.contains(r["kernel"].get<std::string>())) continue;
        const double elements = r["tokens"].get<double>() * r["width"].get<double>();
        const double fwd = r["fwd_us"].get<double>() * 1e-6;
        out.forward.push_back(fwd / second_per_byte / elements);
        if (!r["fwd_bwd_us"].is_null())
            out.backward.push_back((r["fwd_bwd_us"].get<double>() * 1e-6 - fwd) / second_per_byte / elements);
    }
    return out;
}

GpuSpec cluster_gpu(const std::string& name) {
    nlohmann::json doc = read("configs/clusters/" + name);
    doc["cluster"]["nodes"] = 1;
    doc["cluster"]["gpus_per_node"] = 1;
    doc["model"] = {{"name", "m"}, {"layers", 1}, {"hidden", 64}, {"heads", 1}, {"seq", 8}, {"vocab", 8}};
    doc["training"] = {{"global_batch", 1}, {"micro_batch", 1}};
    doc["strategy"] = {{"name", "ddp"}, {"dp", 1}};
    return parse_config(doc, name).cluster.gpu;
}

}  // namespace

TEST_CASE("memory-bound kernels stream at the bandwidth STREAM measured: the shipped clusters' stream_fraction") {
    // H100: the median of dtsim-membw's copy and triad rows with arrays of 64 MiB and more.
    std::vector<double> h100;
    const nlohmann::json membw = read("calibration/data/h100_dtsim_membw.json");
    for (const auto& r : membw.at("memory_bandwidth").at("rows"))
        if (r.at("bytes_per_array").get<double>() >= 64.0 * (1 << 20)) h100.push_back(r.at("GBps").get<double>());
    CHECK(h100.size() == 14);
    const double h100_fraction = median(h100) / 3350;
    // A100 80GB: BabelStream's streaming kernels (copy, mul, add, triad; not dot, a reduction).
    std::vector<double> a100;
    for (auto& r : rows_of(read("calibration/data/a100_membw_published.json").at("a100_sxm4_80gb_babelstream")))
        if (r["kernel"] != "dot") a100.push_back(r["GBps"].get<double>());
    CHECK(a100.size() == 4);
    const double a100_fraction = median(a100) / 2039;
    // The cluster files carry them rounded to 0.0001; the H200's is the H100's (no STREAM run on it).
    for (const char* name : {"dgx-h100.json", "h100-roce.json", "p5-h100-efa.json", "dgx-h200.json", "h200-roce.json"}) {
        CAPTURE(name);
        CHECK(std::abs(cluster_gpu(name).stream_fraction - h100_fraction) <= 0.00005);
    }
    CHECK(std::abs(cluster_gpu("selene-a100.json").stream_fraction - a100_fraction) <= 0.00005);
    // The 40 GB A100's, which llm-foundry's 40 GB set gives its GPU.
    std::vector<double> a100_40;
    for (auto& r : rows_of(read("calibration/data/a100_membw_published.json").at("a100_sxm4_40gb_babelstream")))
        if (r["kernel"] != "dot") a100_40.push_back(r["GBps"].get<double>());
    int sets = 0;
    const nlohmann::json a100_sets = read("calibration/data/end_to_end_a100.json");
    for (const auto& set : a100_sets.at("sets"))
        if (set.at("id") == "llm_foundry_mpt_a100_40gb") {
            const auto& gpu = set.at("cluster_overrides").at("gpu");
            CHECK(std::abs(gpu.at("stream_fraction").get<double>() - median(a100_40) / 1555) <= 0.00005);
            ++sets;
        }
    CHECK(sets == 1);
    CHECK(kStreamFraction == cluster_gpu("dgx-h100.json").stream_fraction);
    // A GEMM's memory-bound side keeps the GEMM fit's own fraction.
    const GpuSpec g = cluster_gpu("dgx-h100.json");
    CHECK(g.memory_seconds(1e9) == doctest::Approx(1e9 / (3.35e12 * 0.8635)));
    CHECK(g.gemm.bandwidth_fraction != g.stream_fraction);
}

TEST_CASE("eager kernels that stream move their counted bytes at the streaming rate, on the H100 and held out on the H200") {
    // Read and written once each, in bf16 (2 bytes): a residual add 2 + 1 tensors, GeLU 1 + 1
    // forward and 2 + 1 backward, SwiGLU's silu then product 5 forward and its two products and
    // silu's gradient 9 backward, dropout's backward (gradient, one-byte mask, gradient) 5.
    struct Count {
        std::set<std::string> kernels;
        double forward, backward;
    };
    const std::vector<Count> counts{{{"residual_add"}, 6, 0}, {{"gelu_tanh"}, 4, 6}, {{"swiglu"}, 10, 18}, {{"dropout"}, 0, 5}};
    const GpuSpec h100 = cluster_gpu("dgx-h100.json"), h200 = cluster_gpu("dgx-h200.json");
    const nlohmann::json on_h100 = read("calibration/data/h100_dtsim_torch_kernels.json");
    const nlohmann::json on_h200 = read("calibration/data/h200_dtsim_torch_kernels.json");
    for (const Count& c : counts) {
        CAPTURE(*c.kernels.begin());
        const PerElement a = per_element(on_h100, c.kernels, h100);
        if (c.forward > 0) CHECK(std::abs(median(a.forward) / c.forward - 1) < 0.04);
        if (c.backward > 0) CHECK(std::abs(median(a.backward) / c.backward - 1) < 0.04);
    }
    // The H200 (its fraction the H100's): residual adds and SwiGLU within 4 % as well.
    for (const Count& c : {counts[0], counts[2]}) {
        CAPTURE(*c.kernels.begin());
        const PerElement a = per_element(on_h200, c.kernels, h200);
        CHECK(std::abs(median(a.forward) / c.forward - 1) < 0.04);
        if (c.backward > 0) CHECK(std::abs(median(a.backward) / c.backward - 1) < 0.04);
    }
}

TEST_CASE("the kernels that do not stream are priced by each GPU's timed bytes: norms, dropout, rotary, the loss, Adam") {
    // Recomputed here from the kernel files, apart from dtsim calibrate's fit: each figure of a
    // shipped cluster's gpu.eager_kernels is the median of its rows at that cluster's rate, rounded
    // to 0.01 byte; the defaults are the H100's.
    struct Gpu {
        const char* cluster;
        const char* file;
    };
    for (const Gpu& g : {Gpu{"dgx-h100.json", "h100_dtsim_torch_kernels.json"}, Gpu{"dgx-h200.json", "h200_dtsim_torch_kernels.json"}}) {
        CAPTURE(g.cluster);
        const GpuSpec gpu = cluster_gpu(g.cluster);
        const EagerKernelBytes& k = gpu.eager_kernels;
        const nlohmann::json file = read(std::string("calibration/data/") + g.file);
        const auto near = [](double measured, double table) { return std::abs(measured - table) <= 0.005 + 1e-9; };
        const PerElement norms = per_element(file, {"rms_norm", "layer_norm"}, gpu);
        CHECK(norms.forward.size() == 16);
        CHECK(near(median(norms.forward), k.norm.forward));
        CHECK(near(median(norms.backward), k.norm.backward));
        const PerElement dropout = per_element(file, {"dropout"}, gpu);
        CHECK(near(median(dropout.forward), k.dropout.forward));
        CHECK(near(median(dropout.backward), k.dropout.backward));
        const PerElement rope = per_element(file, {"rotary_torchtitan"}, gpu);
        CHECK(rope.forward.size() == 8);
        CHECK(near(median(rope.forward), k.rope.forward));
        CHECK(near(median(rope.backward), k.rope.backward));
        // PyTorch's loss: bytes a logit.
        std::vector<double> forward, backward;
        for (auto& r : rows_of(file.at("cross_entropy"))) {
            const double logits = r["tokens"].get<double>() * r["vocab"].get<double>();
            const double fwd = r["fwd_us"].get<double>() * 1e-6, both = r["fwd_bwd_us"].get<double>() * 1e-6;
            forward.push_back(fwd / gpu.memory_seconds(1.0) / logits);
            backward.push_back((both - fwd) / gpu.memory_seconds(1.0) / logits);
        }
        CHECK(forward.size() == 12);
        CHECK(near(median(forward), k.loss.forward));
        CHECK(near(median(backward), k.loss.backward));
        CHECK(loss_bytes_per_logit(CrossEntropy::pytorch, k).forward == k.loss.forward);
        CHECK(loss_bytes_per_logit(CrossEntropy::pytorch, k).backward == k.loss.backward);
        // Fused AdamW: a factor on the 28 bytes moved a parameter (fp32 parameter, gradient and
        // moments read; parameter and moments written).
        std::vector<double> adam;
        for (auto& r : rows_of(file.at("optimizer")))
            if (r["impl"] == "fused")
                adam.push_back(r["step_us"].get<double>() * 1e-6 / gpu.memory_seconds(1.0) / r["params"].get<double>() / 28);
        CHECK(adam.size() == 3);
        CHECK(near(median(adam), k.adam));
        CHECK(k.datasets.size() == 1);
    }
    // The defaults are the H100's, and the H200's kernels that do not stream take longer at its rate.
    const EagerKernelBytes h100 = cluster_gpu("dgx-h100.json").eager_kernels, h200 = cluster_gpu("dgx-h200.json").eager_kernels;
    const EagerKernelBytes defaults;
    CHECK(h100.norm.forward == defaults.norm.forward);
    CHECK(h100.norm.backward == defaults.norm.backward);
    CHECK(h100.dropout.forward == defaults.dropout.forward);
    CHECK(h100.dropout.backward == defaults.dropout.backward);
    CHECK(h100.rope.forward == defaults.rope.forward);
    CHECK(h100.rope.backward == defaults.rope.backward);
    CHECK(h100.loss.forward == defaults.loss.forward);
    CHECK(h100.loss.backward == defaults.loss.backward);
    CHECK(h100.adam == defaults.adam);
    CHECK(h200.norm.forward > 1.1 * h100.norm.forward);
    CHECK(h200.rope.forward > 1.1 * h100.rope.forward);
    // The other H100 and H200 clusters carry their GPU's table; the A100's, without a kernel file,
    // the defaults.
    for (const char* name : {"h100-roce.json", "p5-h100-efa.json"}) CHECK(cluster_gpu(name).eager_kernels.norm.backward == h100.norm.backward);
    CHECK(cluster_gpu("h200-roce.json").eager_kernels.norm.backward == h200.norm.backward);
    CHECK(cluster_gpu("selene-a100.json").eager_kernels.datasets.empty());
    CHECK(cluster_gpu("selene-a100.json").eager_kernels.norm.backward == defaults.norm.backward);
}

TEST_CASE("layer_elementwise_bytes: a layer's element-wise work by block and pass, counted by hand") {
    // h 1,024, ffn 4,096, 2 x 512 tokens, bf16, tp 2.
    TransformerSpec m{"m", 1, 1024, 8, 8, 4096, 512, 0, DType::bf16, Mlp::gelu, false};
    m.dropout = false;
    LayerSplit s{2, 2, false, Recompute::none, true};
    s.elementwise = ElementwiseKernels::fused;
    const double tokens = 1024, h = 1024 * tokens, f = 2048 * tokens;  // f: the FFN's half on this GPU
    const double nf = kNormForwardBytes, nb = kNormBackwardBytes;
    // GeLU, no dropout: a norm and a residual add each block; the activation 4 and 6 bytes.
    ElementwiseBytes e = layer_elementwise_bytes(m, s, EagerKernelBytes{});
    CHECK(e.attention_forward == doctest::Approx((nf + 6) * h));
    CHECK(e.mlp_forward == doctest::Approx((nf + 6) * h + 4 * f));
    CHECK(e.attention_backward == doctest::Approx((nb + 6) * h));
    CHECK(e.mlp_backward == doctest::Approx((nb + 6) * h + 6 * f));
    CHECK(e.residual == doctest::Approx(6 * h));
    // The same eagerly: GeLU is one kernel either way, and a GeLU model's linears are fused (no sums).
    LayerSplit eager = s;
    eager.elementwise = ElementwiseKernels::eager;
    CHECK(layer_elementwise_bytes(m, eager, EagerKernelBytes{}).mlp_backward == doctest::Approx(e.mlp_backward));
    // Sequence parallelism divides the h-wide work by t.
    LayerSplit sp = s;
    sp.sequence_parallel = true;
    CHECK(layer_elementwise_bytes(m, sp, EagerKernelBytes{}).attention_forward == doctest::Approx((nf + 6) * h / 2));
    // Hidden dropout: eager, its own kernel (kDropoutForwardBytes, kDropoutBackwardBytes); fused into
    // the add, its one-byte mask written and the gradient times it.
    TransformerSpec drop = m;
    drop.dropout = true;
    CHECK(layer_elementwise_bytes(drop, s, EagerKernelBytes{}).residual == doctest::Approx(7 * h));
    CHECK(layer_elementwise_bytes(drop, s, EagerKernelBytes{}).attention_backward == doctest::Approx((nb + 6 + 5) * h));
    CHECK(layer_elementwise_bytes(drop, eager, EagerKernelBytes{}).residual == doctest::Approx((6 + kDropoutForwardBytes) * h));
    CHECK(layer_elementwise_bytes(drop, eager, EagerKernelBytes{}).attention_backward ==
          doctest::Approx((nb + 6 + kDropoutBackwardBytes) * h));
    // SwiGLU: fused 6 and 10 bytes over the FFN width; eager 10 and 18, and autograd's sums of the
    // separate linears' input gradients, two (wq, wk, wv) and one (w1, w3) h-wide adds over every token.
    TransformerSpec llama = m;
    llama.mlp = Mlp::swiglu;
    const ElementwiseBytes fused = layer_elementwise_bytes(llama, s, EagerKernelBytes{}), torch = layer_elementwise_bytes(llama, eager, EagerKernelBytes{});
    CHECK(fused.mlp_forward == doctest::Approx((nf + 6) * h + 6 * f));
    CHECK(fused.mlp_backward == doctest::Approx((nb + 6) * h + 10 * f));
    CHECK(fused.attention_backward == doctest::Approx((nb + 6) * h));
    const double sums = 6 * 1024 * 1024.0;
    CHECK(torch.mlp_forward == doctest::Approx((nf + 6) * h + 10 * f));
    CHECK(torch.mlp_backward == doctest::Approx((nb + 6) * h + 18 * f + sums));
    CHECK(torch.attention_backward == doctest::Approx((nb + 6) * h + 2 * sums));
    // fp32 activations: every count doubles.
    TransformerSpec wide = llama;
    wide.dtype = DType::fp32;
    CHECK(layer_elementwise_bytes(wide, eager, EagerKernelBytes{}).mlp_backward == doctest::Approx(2 * torch.mlp_backward));
}

TEST_CASE("elementwise_kernels: eager in PyTorch's code, fused in Megatron-Core's, as given otherwise") {
    auto kernels = [](const std::string& strategy, std::vector<Override> sets = {}) {
        sets.push_back({"strategy.name", strategy});
        const Config c = load_config(std::string(DTSIM_CONFIGS) + "/runs/llama3-8b-16xh100-fsdp.json", sets);
        return layer_split(c).elementwise;
    };
    CHECK(kernels("fsdp") == ElementwiseKernels::eager);
    CHECK(kernels("ddp") == ElementwiseKernels::eager);
    CHECK(kernels("fsdp", {{"strategy.fsdp_impl", "megatron"}}) == ElementwiseKernels::fused);
    CHECK(kernels("megatron") == ElementwiseKernels::fused);
    CHECK(kernels("megatron", {{"strategy.elementwise_kernels", "eager"}}) == ElementwiseKernels::eager);
    CHECK(kernels("fsdp", {{"strategy.elementwise_kernels", "fused"}}) == ElementwiseKernels::fused);
}

TEST_CASE("make_workload prices an eager layer's element-wise work as layer_elementwise_bytes, forward and backward") {
    // Llama-like: h 1,024, 8 heads over 2 kv heads, SwiGLU, dropout, 2 x 512 tokens, tp 2 with
    // sequence parallelism; no rotary embedding, no repeat: only the element-wise work is memory-bound.
    TransformerSpec m{"m", 1, 1024, 8, 2, 4096, 512, 0, DType::bf16, Mlp::swiglu, false};
    m.dropout = true;
    GpuSpec gpu;
    gpu.peak_flops[static_cast<std::size_t>(DType::bf16)] = 989.4e12;
    gpu.memory_bandwidth = 3.35e12;
    // Another GPU's timed norms and dropout, which make_workload must take from the GPU.
    gpu.eager_kernels.norm = {7.5, 17.25};
    gpu.eager_kernels.dropout = {7.25, 5.5};
    for (const ElementwiseKernels k : {ElementwiseKernels::eager, ElementwiseKernels::fused}) {
        CAPTURE(static_cast<int>(k));
        LayerSplit s{2, 2, true, Recompute::none, true};
        s.elementwise = k;
        const ElementwiseBytes e = layer_elementwise_bytes(m, s, gpu.eager_kernels);
        CHECK(e.attention_forward != doctest::Approx(layer_elementwise_bytes(m, s, EagerKernelBytes{}).attention_forward));
        const LayerWork L = make_workload(m, s, gpu).layer;
        CHECK(L.attention_forward.bytes == doctest::Approx(e.attention_forward));
        CHECK(L.mlp_forward.bytes == doctest::Approx(e.mlp_forward));
        CHECK(L.attention_backward.bytes == doctest::Approx(e.attention_backward));
        CHECK(L.mlp_backward.bytes == doctest::Approx(e.mlp_backward));
        // The backward's time: its GEMMs (twice the forward's; the weight-gradient half priced apart)
        // and the core's, plus its own element-wise bytes at the streaming rate.
        CHECK(L.mlp_backward.seconds - 2 * (L.mlp_forward.seconds - gpu.memory_seconds(e.mlp_forward)) ==
              doctest::Approx(gpu.memory_seconds(e.mlp_backward)));
        CHECK(L.mlp_backward_input.bytes == doctest::Approx(e.mlp_backward));
        CHECK(L.mlp_backward_weight.bytes == 0);
    }
    // Eager, the gradient sums are over every token and the whole width even with sequence
    // parallelism (the linears' inputs are gathered): 3 x 2 bytes x 1,024 tokens x 1,024, twice in
    // the attention block. The fused form has none, and its dropout is folded into the add.
    LayerSplit eager{2, 2, true, Recompute::none, true}, fused = eager;
    eager.elementwise = ElementwiseKernels::eager;
    fused.elementwise = ElementwiseKernels::fused;
    const ElementwiseBytes a = layer_elementwise_bytes(m, eager, EagerKernelBytes{}), b = layer_elementwise_bytes(m, fused, EagerKernelBytes{});
    const double hp = 1024.0 * 1024 / 2;  // h-wide elements on this GPU with SP
    const double dropout = (kDropoutBackwardBytes - 5) * hp;
    CHECK(a.attention_backward - b.attention_backward == doctest::Approx(2 * 6 * 1024.0 * 1024 + dropout));
    CHECK(a.residual - b.residual == doctest::Approx((kDropoutForwardBytes - 1) * hp));
}

TEST_CASE("gpu.stream_fraction, gpu.eager_kernels and strategy.elementwise_kernels: defaults and bad values") {
    nlohmann::json doc = read("configs/clusters/dgx-h100.json");
    doc["cluster"]["gpu"].erase("stream_fraction");
    doc["cluster"]["nodes"] = 1;
    doc["cluster"]["gpus_per_node"] = 1;
    doc["model"] = {{"name", "m"}, {"layers", 1}, {"hidden", 64}, {"heads", 1}, {"seq", 8}, {"vocab", 8}};
    doc["training"] = {{"global_batch", 1}, {"micro_batch", 1}};
    doc["strategy"] = {{"name", "ddp"}, {"dp", 1}};
    CHECK(parse_config(doc, "c.json").cluster.gpu.stream_fraction == kStreamFraction);
    const auto error = [](const nlohmann::json& d) -> std::string {
        try {
            parse_config(d, "c.json");
        } catch (const ConfigError& e) {
            return e.what();
        }
        return "no error";
    };
    for (const double bad : {0.0, 1.5}) {
        nlohmann::json d = doc;
        d["cluster"]["gpu"]["stream_fraction"] = bad;
        CHECK(error(d).find("$.cluster.gpu.stream_fraction: expected a number in (0, 1]") != std::string::npos);
    }
    // gpu.eager_kernels: the kinds given replace the H100's, the others stay; each figure in (0, 10 kB].
    {
        nlohmann::json part = doc;
        part["cluster"]["gpu"]["eager_kernels"] = {{"norm", {{"forward", 7.0}, {"backward", 16.0}}}, {"adam", 1.25}};
        const EagerKernelBytes k = parse_config(part, "c.json").cluster.gpu.eager_kernels;
        CHECK(k.norm.forward == 7.0);
        CHECK(k.norm.backward == 16.0);
        CHECK(k.adam == 1.25);
        CHECK(k.rope.forward == kComplexRopeForwardBytes);
        CHECK(k.datasets.empty());
        part["cluster"]["gpu"]["eager_kernels"]["norm"]["forward"] = 0;
        CHECK(error(part).find("$.cluster.gpu.eager_kernels.norm.forward: expected a positive number, found 0") != std::string::npos);
        part["cluster"]["gpu"]["eager_kernels"]["norm"] = {{"forward", 7.0}};
        CHECK(error(part).find("$.cluster.gpu.eager_kernels.norm: missing key \"backward\"") != std::string::npos);
        part["cluster"]["gpu"]["eager_kernels"] = {{"gelu", {{"forward", 4}, {"backward", 6}}}};
        CHECK(error(part).find("$.cluster.gpu.eager_kernels.gelu: unknown key \"gelu\"; the keys here are: norm, dropout") != std::string::npos);
        part["cluster"]["gpu"]["eager_kernels"] = {{"adam", -1}};
        CHECK(error(part).find("$.cluster.gpu.eager_kernels.adam: expected a positive number, found -1") != std::string::npos);
    }
    nlohmann::json d = doc;
    d["strategy"]["elementwise_kernels"] = "compiled";
    CHECK(error(d).find("$.strategy.elementwise_kernels: expected \"eager\" or \"fused\", found \"compiled\"") !=
          std::string::npos);
    // A pipeline whose stages shard with ZeRO-3 is PyTorch's code (torchtitan's 3D): eager.
    const Config pp = load_config(std::string(DTSIM_CONFIGS) + "/runs/llama3-70b-64xh100-1f1b-fsdp.json");
    CHECK(pp.strategy.zero_stage == 3);
    CHECK(layer_split(pp).elementwise == ElementwiseKernels::eager);
    const Config mega = load_config(std::string(DTSIM_CONFIGS) + "/runs/llama3-70b-64xh100-1f1b.json");
    CHECK(layer_split(mega).elementwise == ElementwiseKernels::fused);
}

TEST_CASE("a GPU without timed kernels of its own says so, naming the kinds its run prices by the H100's") {
    const auto caveats = [](const std::string& run, std::vector<Override> sets) {
        const Config c = load_config(std::string(DTSIM_CONFIGS) + "/runs/" + run, sets);
        return prediction_caveats(c, make_workload(c.model.spec, layer_split(c), c.cluster.gpu));
    };
    const auto caveat = [&](const std::string& run, std::vector<Override> sets) -> std::string {
        for (const auto& s : caveats(run, sets))
            if (s.find("priced by the H100's timed bytes") != std::string::npos) return s;
        return "";
    };
    // The shipped H100 cluster has its own, and the defaults are an H100's: nothing to say.
    CHECK(caveat("llama3-8b-16xh100-fsdp.json", {}).empty());
    CHECK(caveat("llama3-8b-16xh100-fsdp.json", {{"cluster.gpu.eager_kernels", "{}"}}).empty());
    // Another GPU with the defaults: torchtitan's Llama prices its norms, complex rotary embedding,
    // PyTorch's loss and Adam so; compiled, Inductor's kernels take the norms and the rotary embedding;
    // a kind the table gives is not named.
    const Override h200{"cluster.gpu.name", "\"H200-SXM\""}, none{"cluster.gpu.eager_kernels", "{}"};
    CHECK(caveat("llama3-8b-16xh100-fsdp.json", {h200, none})
              .starts_with("norms, the rotary embedding, the loss and Adam priced by the H100's timed bytes at "
                           "H200-SXM's streaming rate: none timed on H200-SXM"));
    CHECK(caveat("llama3-8b-16xh100-fsdp.json", {h200, none, {"strategy.compile", "true"}}).starts_with("the loss and Adam priced"));
    CHECK(caveat("llama3-8b-16xh100-fsdp.json", {h200, {"cluster.gpu.eager_kernels", R"({"adam": 1.3})"}})
              .starts_with("norms, the rotary embedding and the loss priced"));
    // GPT-3 on the A100 cluster, which has no kernel file: Megatron's loss is counted, it does not
    // rotate. The caveat comes after those about the collectives.
    const std::vector<std::string> a100 = caveats("gpt3-175b-1024xa100-1f1b-mb64.json", {});
    REQUIRE_FALSE(a100.empty());
    CHECK(a100.back().starts_with("norms and Adam priced by the H100's timed bytes at A100-SXM-80GB's streaming rate"));
}

TEST_CASE("the rotary embedding, the loss and Adam take the GPU's own timed bytes: the layer, the step, the bound") {
    // torchtitan's Llama 3 8B (complex rotary embedding, PyTorch's loss) on the shipped H100, and on
    // a table with those three kinds at twice the H100's figures.
    const std::string run = std::string(DTSIM_CONFIGS) + "/runs/llama3-8b-16xh100-fsdp.json";
    const Config one = load_config(run);
    const nlohmann::json doubled{
        {"rope", {{"forward", 2 * kComplexRopeForwardBytes}, {"backward", 2 * kComplexRopeBackwardBytes}}},
        {"loss", {{"forward", 2 * kPytorchLossForwardBytes}, {"backward", 2 * kPytorchLossBackwardBytes}}},
        {"adam", 2 * kAdamKernelBytes}};
    const Config two = load_config(run, {{"cluster.gpu.eager_kernels", doubled.dump()}});
    REQUIRE(layer_split(one).rope == RopeKernel::complex);
    REQUIRE(layer_split(one).cross_entropy == CrossEntropy::pytorch);
    const Workload a = make_workload(one.model.spec, layer_split(one), one.cluster.gpu);
    const Workload b = make_workload(two.model.spec, layer_split(two), two.cluster.gpu);
    // 8,192 tokens x (32 query + 8 key heads) x 128 rotated, the forward's bytes once more.
    const double rotated = 8192.0 * (32 + 8) * 128;
    CHECK(b.layer.attention_forward.bytes - a.layer.attention_forward.bytes == doctest::Approx(kComplexRopeForwardBytes * rotated));
    CHECK(b.layer.attention_backward.bytes - a.layer.attention_backward.bytes ==
          doctest::Approx(kComplexRopeBackwardBytes * rotated));
    CHECK(b.edge.loss_forward.bytes == doctest::Approx(2 * a.edge.loss_forward.bytes));
    CHECK(b.edge.loss_backward.bytes == doctest::Approx(2 * a.edge.loss_backward.bytes));
    // The step's optimizer operation takes twice as long.
    const auto optimizer = [](const Config& c) {
        const RunResult r = simulate(c, {.keep_trace = true});
        for (const auto& e : r.trace.ranks[0].events)
            if (e.op.name() == std::string_view("optimizer")) return e.duration;
        return 0.0;
    };
    const double adam = optimizer(one);
    REQUIRE(adam > 0);
    CHECK(optimizer(two) == doctest::Approx(2 * adam));
    // The puzzle world's update on the same GPU, and the plan's least step time.
    CHECK(HardwareCosts(two.cluster, 8).update(0, 1, 8) == doctest::Approx(2 * HardwareCosts(one.cluster, 8).update(0, 1, 8)));
    CHECK(plan_bounds::step_time_bound(two, b) > plan_bounds::step_time_bound(one, a));
}
