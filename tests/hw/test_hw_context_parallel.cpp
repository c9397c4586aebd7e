// Context parallelism (strategy.cp): each sequence split over cp ranks, the attention core as a
// ring of cp steps passing keys and values, gradients reduced over dp x cp.
#include "dtsim/hw/run.hpp"
#include "dtsim/hw/workload.hpp"
#include "fixtures.hpp"

#include <doctest/doctest.h>

#include <string>
#include <string_view>

using namespace dtsim;
using namespace dtsim::hw;
using namespace dtsim::hw::test;

namespace {

RunReport run(const json& doc, Trace* trace = nullptr) {
    auto r = simulate(parse_config(doc, "cp.json"), {.keep_trace = trace != nullptr});
    if (trace) *trace = std::move(r.trace);
    return r.report;
}

std::string config_error(const json& doc) {
    try {
        parse_config(doc, "cp.json");
    } catch (const ConfigError& e) {
        return e.what();
    }
    return "no error";
}

// Pure compute on `gpus` GPUs: no GEMM overhead, no bandwidth limit, free memory-bound work and links.
json compute_only(int gpus) {
    json c = ideal_cluster(1, gpus);
    c["gpu"]["gemm"] = {{"overhead_us", 0}, {"bandwidth_fraction", 1}};
    return c;
}

// 16 heads of 128 over 4 kv heads, 4,096 tokens; a GPU of 1 PFLOP/s and 3 TB/s.
TransformerSpec gqa_model() { return {"m", 1, 2048, 16, 4, 8192, 4096, 0, DType::bf16, Mlp::swiglu, false}; }
// One microbatch, no tensor parallelism, fused attention, the sequence over `cp` GPUs.
LayerSplit cp_split(int cp) {
    LayerSplit s{1, 1, false, Recompute::none, true};
    s.cp = cp;
    return s;
}
GpuSpec plain_gpu() {
    GpuSpec gpu;
    gpu.peak_flops[static_cast<std::size_t>(DType::bf16)] = 1e15;
    gpu.memory_bandwidth = 3e12;
    return gpu;
}
// gqa_model's queries (and output) and keys and values on one of 4 context-parallel GPUs: 1,024
// tokens, 16 query heads and 4 kv heads of 128, bf16.
constexpr double kQueryBytes = 1024.0 * 16 * 128 * 2, kKvBytes = 2.0 * 1024 * 4 * 128 * 2;

// `with`'s layer over `without`'s (gqa_model on plain_gpu) is `bytes` more memory-bound work in its
// attention passes, forward and backward, each priced at the GPU's streaming rate.
void check_added(const LayerSplit& without, const LayerSplit& with, const PassBytes& bytes) {
    const GpuSpec gpu = plain_gpu();
    const Workload a = make_workload(gqa_model(), without, gpu), b = make_workload(gqa_model(), with, gpu);
    CHECK(b.layer.attention_forward.bytes - a.layer.attention_forward.bytes == doctest::Approx(bytes.forward));
    CHECK(b.layer.attention_backward.bytes - a.layer.attention_backward.bytes == doctest::Approx(bytes.backward));
    CHECK(b.layer.attention_forward.seconds - a.layer.attention_forward.seconds ==
          doctest::Approx(gpu.memory_seconds(bytes.forward)));
}

}  // namespace

TEST_CASE("context parallelism: a GPU's share of each sequence, the attention core a causal call per ring step") {
    const TransformerSpec m = gqa_model();
    const GpuSpec gpu = plain_gpu();
    LayerSplit one{1, 1, false, Recompute::none, true};
    LayerSplit four = one;
    four.cp = 4;
    const Workload whole = make_workload(m, one, gpu);
    const Workload part = make_workload(m, four, gpu);
    // Every linear and the MLP on seq / 4 tokens; the core's FLOPs a quarter of the whole causal core.
    CHECK(part.layer.mlp_forward.flops == doctest::Approx(whole.layer.mlp_forward.flops / 4));
    CHECK(part.layer.attention_forward.flops == doctest::Approx(whole.layer.attention_forward.flops / 4));
    // One step is a causal call on 1,024 tokens: 1/16 of the whole core's FLOPs, four of them a quarter.
    const double core = 2.0 * 4096 * 4096 * 2048;  // 2 products x 2 s^2 h, halved by the mask
    CHECK(part.layer.cp_core_forward.flops == doctest::Approx(core / 16));
    CHECK(part.layer.cp_core_backward.flops == doctest::Approx(2 * core / 16));
    // Keys and values passed on: 2 x 1,024 tokens x 4 kv heads x 128 x 2 bytes.
    CHECK(part.layer.cp_kv_bytes == doctest::Approx(2.0 * 1024 * 4 * 128 * 2));
    // What a layer keeps: its seq / 4 tokens' worth.
    TransformerSpec quarter = m;
    quarter.seq = 1024;
    CHECK(part.layer.activation_bytes == doctest::Approx(layer_activation_bytes(quarter, one)));
    CHECK(whole.layer.cp_kv_bytes == 0);
}

TEST_CASE("Transformer Engine's ring: its buffers' and partial results' bytes, as counted from its code") {
    // Each rank's steps enumerated as AttnFuncWithCPAndKVP2P runs them, then averaged over the ring:
    // step 0 on all the rank's queries and keys and values; steps 1..r on all its queries and the
    // first half of the keys and values; the later ones on the second half of its queries.
    const double o = 100, kv = 10;
    for (const int cp : {2, 4, 8}) {
        double forward = 0, backward = 0;
        for (int r = 0; r < cp; ++r) {
            double q_steps = 0, kv_steps = 0;  // in full-size steps
            for (int i = 0; i < cp; ++i) {
                q_steps += i <= r ? 1 : 0.5;
                kv_steps += i == 0 || i > r ? 1 : 0.5;
            }
            // Forward: concatenate K and V (read, write), zero the output, fold each step in (3 o).
            forward += 2 * kv + o + 3 * o * q_steps;
            // Backward: copy K and V in; dq added each step (3 o, the first a copy of o); dk and dv
            // concatenated (2 kv a step) and added into the ring's buffer (3 kv, the first a copy).
            backward += 2 * kv + (3 * q_steps - 1) * o + 2 * kv * kv_steps + (3 * kv_steps - 1) * kv;
        }
        const PassBytes te = te_context_parallel_bytes(cp, o, kv);
        CHECK(te.forward == doctest::Approx(forward / cp));
        CHECK(te.backward == doctest::Approx(backward / cp));
    }
    CHECK(te_context_parallel_bytes(1, o, kv).forward == 0);

    // In a layer: on this GPU's 1,024 tokens.
    const TransformerSpec m = gqa_model();
    const GpuSpec gpu = plain_gpu();
    const LayerSplit pytorch = cp_split(4);
    LayerSplit megatron = pytorch;
    megatron.te_context_parallel = true;
    const PassBytes layer = te_context_parallel_bytes(4, kQueryBytes, kKvBytes);
    check_added(pytorch, megatron, layer);
    // Recomputing the core attention (Megatron's selective) runs the ring's forward work again.
    LayerSplit selective = megatron;
    selective.recompute = Recompute::selective;
    LayerSplit selective_pytorch = pytorch;
    selective_pytorch.recompute = Recompute::selective;
    CHECK(make_workload(m, selective, gpu).layer.attention_recompute.bytes -
              make_workload(m, selective_pytorch, gpu).layer.attention_recompute.bytes ==
          doctest::Approx(layer.forward));

    // The config's strategy says whose ring it is: Megatron's (Transformer Engine's) over a ring,
    // not PyTorch's (its own below), nor an all-gather of the keys and values.
    json doc{{"cluster", realistic_cluster(1)},
             {"model", small_model(2)},
             {"training", {{"global_batch", 2}, {"micro_batch", 1}}},
             {"strategy", {{"name", "megatron"}, {"cp", 4}, {"dp", 2}, {"flash_attention", true}}}};
    CHECK(layer_split(parse_config(doc, "cp.json")).te_context_parallel);
    doc["strategy"]["cp_comm"] = "allgather";
    CHECK_FALSE(layer_split(parse_config(doc, "cp.json")).te_context_parallel);
    doc["strategy"] = {{"name", "fsdp"}, {"cp", 4}, {"dp", 2}, {"flash_attention", true}};
    CHECK_FALSE(layer_split(parse_config(doc, "cp.json")).te_context_parallel);
    doc["strategy"] = {{"name", "megatron"}, {"dp", 8}, {"flash_attention", true}};
    doc["training"]["global_batch"] = 8;
    CHECK_FALSE(layer_split(parse_config(doc, "cp.json")).te_context_parallel);
}

TEST_CASE("PyTorch's ring: its merges' and gradient sums' bytes, as counted from its code") {
    // Each rank's steps enumerated as _templated_ring_attention and its backward run them, then
    // averaged over the ring. Step 0 on all the rank's queries, keys and values; steps 1..r on all
    // its queries and the first half of the keys and values; the later ones on the second half of
    // its queries (partial: the sum rebuilt whole by torch.cat). o and kv in bytes of e-byte
    // elements: bf16, and fp32, whose casts to fp32 are no-ops.
    const double O = 100, K = 30;
    for (const double e : {2.0, 4.0})
    for (const int cp : {2, 4, 8}) {
        CAPTURE(e);
        CAPTURE(cp);
        const double o = O * e, kv = K * e, cast = e == 2 ? 6 : 0;
        double forward = 0, backward = 0, compiled_forward = 0, compiled_backward = 0, ring_cats = 0;
        for (int r = 0; r < cp; ++r) {
            double f = 2 * kv, bq = 4 * O, bk = 4 * K + 2 * kv;  // contiguous K and V; fp32 sums zeroed
            double cf = 0, cq = 0, ck = 0;
            for (int i = 0; i < cp; ++i) {
                const double q = i > r ? 0.5 : 1, k = i > 0 && i <= r ? 0.5 : 1;
                const bool last = i == cp - 1;
                if (!last) f += 2 * kv, bk += 2 * kv;  // K and V concatenated for the next rank
                if (!last && i > 0) ring_cats += 2 * kv;
                // Eager: cast to fp32; merge (out - block, times the sigmoid, subtracted); torch.cat.
                f += O * q * cast + (i > 0 ? O * q * 32 : 0) + (q < 1 ? O * 8 : 0);
                bq += O * q * (8 + e) + (q < 1 ? O * 8 : 0);
                bk += K * k * (8 + e) + (k < 1 ? K * 8 : 0) + K * 8;  // added in; cat for the next rank
                // Compiled: one pass a step; the first step's output read in e, the last written so.
                if (i > 0) cf += (i == 1 ? e : 4) + q * e + (last ? e : 4);
                cq += (i > 0 ? 4 : 0) + q * e + (last ? e : 4);
                ck += (i > 0 ? 4 : 0) + k * e + 4;
            }
            forward += f + O * cast;
            backward += bq + O * cast + bk + K * cast;
            compiled_forward += O * cf;
            compiled_backward += O * cq + K * (ck + cast);
        }
        // Eager: the same by either method (the concatenations run whatever the rotater sends).
        for (const bool gather : {false, true}) {
            const PassBytes eager = pytorch_context_parallel_bytes(cp, o, kv, e, false, gather);
            CHECK(eager.forward == doctest::Approx(forward / cp));
            CHECK(eager.backward == doctest::Approx(backward / cp));
        }
        // Compiled: the first concatenation (the gather's input) stays; the ring's later ones too.
        for (const bool gather : {false, true}) {
            const PassBytes c = pytorch_context_parallel_bytes(cp, o, kv, e, true, gather);
            const double cats = 2 * kv + (gather ? 0 : ring_cats / cp);
            CHECK(c.forward == doctest::Approx(compiled_forward / cp + cats));
            CHECK(c.backward == doctest::Approx(compiled_backward / cp + cats));
        }
    }
    const double e = 2, o = O * e, kv = K * e;
    // At cp 2 in bf16, eager: 12 + 32.5 bytes an output element forward.
    CHECK(pytorch_context_parallel_bytes(2, o, 0, e, false, false).forward == doctest::Approx(O * 44.5));
    CHECK(pytorch_context_parallel_bytes(1, o, kv, e, false, false).forward == 0);

    // In a layer: on this GPU's 1,024 tokens.
    const TransformerSpec m = gqa_model();
    const GpuSpec gpu = plain_gpu();
    const LayerSplit plain = cp_split(4);
    LayerSplit pytorch = plain;
    pytorch.pytorch_context_parallel = true;
    const Workload a = make_workload(m, plain, gpu), b = make_workload(m, pytorch, gpu);
    const double query = kQueryBytes, keys = kKvBytes;
    check_added(plain, pytorch, pytorch_context_parallel_bytes(4, query, keys, 2, false, false));
    // Its backward passes the key and value gradients in fp32: twice their bf16 bytes.
    CHECK(b.layer.cp_grad_bytes == doctest::Approx(2 * keys));
    CHECK(a.layer.cp_grad_bytes == 0);
    pytorch.cp_gather = true;
    pytorch.compiled = true;
    LayerSplit compiled = plain;
    compiled.compiled = true;
    CHECK(make_workload(m, pytorch, gpu).layer.attention_forward.bytes -
              make_workload(m, compiled, gpu).layer.attention_forward.bytes ==
          doctest::Approx(pytorch_context_parallel_bytes(4, query, keys, 2, true, true).forward));

    // What it holds while the core runs: the gathered keys and values of the 4 ranks and the
    // gather's input (5 kv), or three buffers of them round the ring; the output's fp32 sum (2 o in
    // bf16 bytes); the backward three fp32 sums of the key and value gradients (6 kv) and the
    // query gradient's (2 o).
    const PassBytes gathered = pytorch_context_parallel_memory(4, query, keys, 2, true);
    CHECK(gathered.forward == doctest::Approx(5 * keys + 2 * query));
    CHECK(gathered.backward == doctest::Approx(5 * keys + 6 * keys + 2 * query));
    const PassBytes passed = pytorch_context_parallel_memory(4, query, keys, 2, false);
    CHECK(passed.forward == doctest::Approx(3 * keys + 2 * query));
    CHECK(passed.backward == doctest::Approx(9 * keys + 2 * query));
    CHECK(make_workload(m, pytorch, gpu).layer.cp_buffers.backward == doctest::Approx(gathered.backward));
    CHECK(a.layer.cp_buffers.forward == 0);

    // PyTorch's strategies run it, by either method; Megatron's do not.
    json doc{{"cluster", realistic_cluster(1)},
             {"model", small_model(2)},
             {"training", {{"global_batch", 2}, {"micro_batch", 1}}},
             {"strategy", {{"name", "fsdp"}, {"cp", 4}, {"dp", 2}, {"flash_attention", true}}}};
    LayerSplit split = layer_split(parse_config(doc, "cp.json"));
    CHECK(split.pytorch_context_parallel);
    CHECK_FALSE(split.cp_gather);
    doc["strategy"]["cp_comm"] = "allgather";
    split = layer_split(parse_config(doc, "cp.json"));
    CHECK(split.pytorch_context_parallel);
    CHECK(split.cp_gather);
    doc["strategy"]["name"] = "megatron";
    CHECK_FALSE(layer_split(parse_config(doc, "cp.json")).pytorch_context_parallel);
    doc["strategy"] = {{"name", "fsdp"}, {"dp", 8}, {"flash_attention", true}};
    doc["training"]["global_batch"] = 8;
    CHECK_FALSE(layer_split(parse_config(doc, "cp.json")).pytorch_context_parallel);
}

TEST_CASE("PyTorch's ring in a run: the gather beside the first step, the gradients passed in fp32 after every step") {
    json doc{{"cluster", realistic_cluster(1)},
             {"model", small_model(2)},
             {"training", {{"global_batch", 2}, {"micro_batch", 1}}},
             {"strategy", {{"name", "fsdp"}, {"cp", 4}, {"dp", 2}, {"flash_attention", true}, {"cp_comm", "allgather"}}}};
    const double kv = 2.0 * (1024 / 4) * 16 * 128 * 2;  // this rank's K and V, bf16
    for (const char* method : {"allgather", "ring"}) {
        CAPTURE(method);
        doc["strategy"]["cp_comm"] = method;
        Trace trace;
        run(doc, &trace);
        int gathers = 0, scatters = 0, kv_sends = 0, grad_sends = 0, grad_recvs = 0;
        double held = -1, gather_end = -1, first_step_length = 0;
        std::vector<double> forward_steps;  // the forward core's steps' starts
        std::string backward_core;          // the backward core's steps (K) and gradient receives (R), in order
        const auto& events = trace.ranks[0].events;
        for (std::size_t j = 0; j < events.size(); ++j) {
            const auto& e = events[j];
            if (e.layer != 0) continue;
            const std::string_view op = e.op.name();
            // A step of the core: the attention kernel alone, FLOPs and no element-wise bytes.
            const bool step = e.flops > 0 && e.bytes == 0;
            if (op == "all_gather" && e.bytes == doctest::Approx(4 * kv)) {
                ++gathers;
                if (held < 0) {
                    held = e.memory - events[j - 1].memory;  // allocated as the core starts
                    gather_end = e.start + e.duration;
                }
            }
            if (op == "reduce_scatter" && e.bytes == doctest::Approx(4 * kv)) ++scatters;
            if (op == "send" && e.bytes == doctest::Approx(kv)) ++kv_sends;
            if (op == "send" && e.bytes == doctest::Approx(2 * kv)) ++grad_sends;
            if (op == "recv" && e.bytes == doctest::Approx(2 * kv)) {
                ++grad_recvs;
                backward_core += 'R';
            }
            if (op == "forward" && step) {
                if (forward_steps.empty()) first_step_length = e.duration;
                forward_steps.push_back(e.start);
            }
            if (op == "backward" && step) backward_core += 'K';
        }
        const bool gather = std::string_view(method) == "allgather";
        CHECK(gathers == (gather ? 2 : 0));  // the forward's and the backward's, each started, not waited on
        CHECK(scatters == 0);                // the gradients go round the ring instead
        REQUIRE(forward_steps.size() == 4);
        if (gather) {
            // The first step runs beside the gather, the second waits for it (longer than a step here).
            CHECK(gather_end > forward_steps[0] + first_step_length);
            CHECK(forward_steps[1] == doctest::Approx(gather_end));
            const double query = 256.0 * 16 * 128 * 2;  // this rank's queries, bf16
            CHECK(held == doctest::Approx(pytorch_context_parallel_memory(4, query, kv, 2, true).forward));
        }
        CHECK(kv_sends == (gather ? 0 : 2 * 3));  // cp - 1 passes forward and backward
        CHECK(grad_sends == 4);                   // cp: after every backward step
        CHECK(grad_recvs == 4);
        // Each step from the second on adds its gradients into the previous rank's sum after its
        // kernel; the last sum closes the core.
        CHECK(backward_core == "KKRKRKRR");
        // The buffers: the backward's held at most, and nothing left held after the step.
        const auto& r = trace.ranks[0];
        const std::size_t stride = 1 + kMemoryKinds, buffers = 1 + static_cast<std::size_t>(MemoryKind::buffers);
        REQUIRE(r.memory_by_kind.size() >= stride);
        double most = 0;
        for (std::size_t i = 0; i + stride <= r.memory_by_kind.size(); i += stride)
            most = std::max(most, r.memory_by_kind[i + buffers]);
        const double query = 256.0 * 16 * 128 * 2;
        CHECK(most == doctest::Approx(pytorch_context_parallel_memory(4, query, kv, 2, gather).backward));
        CHECK(r.memory_by_kind[r.memory_by_kind.size() - stride + buffers] == 0);
    }
}

TEST_CASE("context parallelism on pure compute: cp GPUs compute 1/cp of one GPU's step each") {
    json doc{{"cluster", compute_only(1)},
             {"model", small_model(2)},
             {"training", {{"global_batch", 2}, {"micro_batch", 1}}},
             {"strategy", {{"name", "megatron"}, {"flash_attention", true}}}};
    const double alone = run(doc).step_time;
    for (int cp : {2, 4}) {
        CAPTURE(cp);
        doc["cluster"] = compute_only(cp);
        doc["strategy"]["cp"] = cp;
        const RunReport r = run(doc);
        CHECK(r.split.compute == doctest::Approx(alone / cp).epsilon(1e-6));
        // The ring and the gradients' reduction pay their latencies, even on free links.
        CHECK(r.step_time >= r.split.compute);
    }
}

TEST_CASE("context parallelism: the ring passes keys and values forward and backward, gradients reduced over dp x cp") {
    json doc{{"cluster", realistic_cluster(1)},
             {"model", small_model(2)},
             {"training", {{"global_batch", 4}, {"micro_batch", 1}}},
             {"strategy", {{"name", "megatron"}, {"cp", 4}, {"dp", 2}, {"flash_attention", true}}}};
    Trace trace;
    const RunReport r = run(doc, &trace);
    CHECK(r.gpus == 8);
    const double kv = 2.0 * (1024 / 4) * 16 * 128 * 2;  // K and V of 256 tokens, 16 heads of 128, bf16
    int forward = 0, backward = 0, reductions = 0;
    for (const auto& e : trace.ranks[0].events) {
        if (e.op.name() == std::string_view("send") && e.layer == 0 && e.batches.contains(0)) {
            if (e.bytes == doctest::Approx(kv)) ++forward;
            if (e.bytes == doctest::Approx(2 * kv)) ++backward;
        }
        if (e.op.name() == std::string_view("all_reduce") || e.op.name() == std::string_view("reduce_scatter"))
            ++reductions;
    }
    CHECK(forward == 3);   // cp - 1 passes
    CHECK(backward == 3);
    CHECK(reductions > 0);
    // dp 1 x cp 2: the gradients are still reduced, over the two context-parallel ranks.
    doc["cluster"] = realistic_cluster(1);
    doc["strategy"] = {{"name", "megatron"}, {"cp", 2}, {"dp", 1}, {"tp", 4}, {"flash_attention", true}};
    Trace t2;
    run(doc, &t2);
    bool reduced = false;
    for (const auto& e : t2.ranks[0].events) reduced = reduced || e.op.name() == std::string_view("all_reduce");
    CHECK(reduced);
}

TEST_CASE("context parallelism runs under every pipeline schedule and FSDP") {
    for (const char* name : {"1f1b", "gpipe", "interleaved", "zbh1", "fsdp"}) {
        CAPTURE(name);
        json doc{{"cluster", realistic_cluster(1)},
                 {"model", small_model(4, 32000)},
                 {"training", {{"global_batch", 8}, {"micro_batch", 1}}},
                 {"strategy", {{"name", name}, {"cp", 2}, {"flash_attention", true}}}};
        if (std::string_view(name) != "fsdp") doc["strategy"]["pp"] = 2;
        const RunReport r = run(doc);
        CHECK(r.step_time > 0);
        CHECK(r.gpus == 8);
    }
}

TEST_CASE("context parallelism: config errors name the key and why") {
    json doc{{"cluster", realistic_cluster(1)},
             {"model", small_model(2)},
             {"training", {{"global_batch", 4}, {"micro_batch", 1}}},
             {"strategy", {{"name", "megatron"}, {"cp", 2}}}};
    CHECK(config_error(doc) == "cp.json: $.strategy.cp: context parallelism runs the attention as a fused kernel on each "
                               "ring step (Transformer Engine's and torchtitan's do): it needs \"flash_attention\": true");
    doc["strategy"]["flash_attention"] = true;
    CHECK(config_error(doc) == "no error");
    doc["model"]["seq"] = 1026;
    CHECK(config_error(doc) == "cp.json: $.strategy.cp: splits each sequence into 2 x cp = 4 chunks (two a rank, for a "
                               "balanced causal mask), but seq 1026 is not a multiple of 4");
    doc["model"]["seq"] = 1024;
    doc["strategy"]["name"] = "ddp";
    CHECK(config_error(doc) == "cp.json: $.strategy.cp: strategy \"ddp\" does not split sequences (cp must be 1, found "
                               "2); \"megatron\", \"fsdp\" and the pipelines do");
    doc["strategy"] = {{"name", "megatron"}, {"cp", 3}, {"flash_attention", true}};
    CHECK(config_error(doc) == "cp.json: $.strategy: tp x cp x pp = 1 x 3 x 1 = 3 does not divide the GPU count: the "
                               "cluster h100 has 8 GPUs (1 node x 8 GPUs per node); data parallelism takes the GPUs "
                               "left over when dp is not given");
}

TEST_CASE("context parallelism by all-gather: keys and values gathered before the core, their gradients reduce-scattered") {
    json doc{{"cluster", realistic_cluster(1)},
             {"model", small_model(2)},
             {"training", {{"global_batch", 2}, {"micro_batch", 1}}},
             {"strategy", {{"name", "megatron"}, {"cp", 4}, {"dp", 2}, {"flash_attention", true}, {"cp_comm", "allgather"}}}};
    Trace trace;
    run(doc, &trace);
    const double kv = 2.0 * (1024 / 4) * 16 * 128 * 2;  // this rank's K and V
    int gathers = 0, scatters = 0, sends = 0;
    for (const auto& e : trace.ranks[0].events) {
        if (e.layer != 0) continue;
        if (e.op.name() == std::string_view("all_gather") && e.bytes == doctest::Approx(4 * kv)) ++gathers;
        if (e.op.name() == std::string_view("reduce_scatter") && e.bytes == doctest::Approx(4 * kv)) ++scatters;
        if (e.op.name() == std::string_view("send")) ++sends;
    }
    CHECK(gathers == 2);  // before the forward's core and again before the backward's
    CHECK(scatters == 1);
    CHECK(sends == 0);
    doc["strategy"]["cp_comm"] = "p2p";
    CHECK(config_error(doc).find("$.strategy.cp_comm: expected \"ring\" or \"allgather\", found \"p2p\"") != std::string::npos);
}

TEST_CASE("the rotary embedding: its kernel's bytes on the query and key heads of this GPU, forward, backward and again") {
    // 16 heads over 4 kv heads of 128, 4,096 tokens, context parallel over 4: 1,024 tokens here.
    const TransformerSpec m = gqa_model();
    const GpuSpec gpu = plain_gpu();
    LayerSplit none{1, 1, false, Recompute::none, true};
    none.cp = 4;
    LayerSplit complex = none, fused = none;
    complex.rope = RopeKernel::complex;
    fused.rope = RopeKernel::fused;
    const Workload w0 = make_workload(m, none, gpu), wc = make_workload(m, complex, gpu), wf = make_workload(m, fused, gpu);
    // 1,024 tokens x (16 + 4) heads x 128: torchtitan's complex kernels at kComplexRopeForwardBytes
    // and kComplexRopeBackwardBytes an element, a fused kernel's read and write of 2 bytes each way.
    const double rotated = 1024.0 * (16 + 4) * 128;
    CHECK(wc.layer.attention_forward.bytes - w0.layer.attention_forward.bytes == doctest::Approx(kComplexRopeForwardBytes * rotated));
    CHECK(wc.layer.attention_backward.bytes - w0.layer.attention_backward.bytes == doctest::Approx(kComplexRopeBackwardBytes * rotated));
    CHECK(wc.layer.attention_forward.seconds - w0.layer.attention_forward.seconds ==
          doctest::Approx(gpu.memory_seconds(kComplexRopeForwardBytes * rotated)));
    CHECK(wf.layer.attention_forward.bytes - w0.layer.attention_forward.bytes == doctest::Approx(4 * rotated));
    CHECK(wf.layer.attention_backward.bytes - w0.layer.attention_backward.bytes == doctest::Approx(4 * rotated));
    CHECK(wf.layer.attention_backward.seconds - w0.layer.attention_backward.seconds ==
          doctest::Approx(gpu.memory_seconds(4 * rotated)));
    // The backward's part is the input gradient's: the weight gradients' GEMMs do not change.
    CHECK(wc.layer.attention_backward_input.bytes - w0.layer.attention_backward_input.bytes ==
          doctest::Approx(kComplexRopeBackwardBytes * rotated));
    CHECK(wc.layer.attention_backward_weight.seconds == w0.layer.attention_backward_weight.seconds);
    // The MLP and the FLOPs do not change.
    CHECK(wc.layer.mlp_forward.bytes == w0.layer.mlp_forward.bytes);
    CHECK(wc.layer.attention_forward.flops == w0.layer.attention_forward.flops);
    // What torchtitan's form adds to a layer split otherwise as `base`, in one of the layer's works.
    const auto added = [&](const TransformerSpec& model, LayerSplit base, Work LayerWork::*work) {
        LayerSplit with = base;
        with.rope = RopeKernel::complex;
        base.rope = RopeKernel::none;
        return (make_workload(model, with, gpu).layer.*work).bytes - (make_workload(model, base, gpu).layer.*work).bytes;
    };
    // The keys are rotated before repeat_kv copies them (4 key heads, not 16), and with sequence
    // parallelism after the input's all-gather (every token: nothing divided by t).
    LayerSplit repeat = none;
    repeat.repeat_kv = true;
    CHECK(added(m, repeat, &LayerWork::attention_forward) == doctest::Approx(kComplexRopeForwardBytes * rotated));
    LayerSplit sp = none;
    sp.tp = 2;
    sp.sequence_parallel = true;
    CHECK(added(m, sp, &LayerWork::attention_forward) == doctest::Approx(kComplexRopeForwardBytes * 1024 * (8 + 2) * 128));
    // Tensor parallelism over 8: 2 query heads and the one kv head each GPU holds (4 kv heads < 8).
    LayerSplit t8 = none;
    t8.tp = 8;
    CHECK(added(m, t8, &LayerWork::attention_forward) == doctest::Approx(kComplexRopeForwardBytes * 1024 * (2 + 1) * 128));
    // Recomputed with the layer's forward (full) and with torchtitan's per-op policy, which keeps no
    // rotated tensor, in a SwiGLU model and a GeLU one; not by Megatron-LM's selective recompute,
    // which reruns the attention core alone.
    TransformerSpec gelu = m;
    gelu.mlp = Mlp::gelu;
    for (const Recompute r : {Recompute::full, Recompute::selective_op, Recompute::selective}) {
        LayerSplit again = none;
        again.recompute = r;
        again.flash_attention = r != Recompute::selective;
        const double expected = r == Recompute::selective ? 0 : kComplexRopeForwardBytes * rotated;
        CHECK(added(m, again, &LayerWork::attention_recompute) == doctest::Approx(expected));
        CHECK(added(gelu, again, &LayerWork::attention_recompute) == doctest::Approx(expected));
    }
    // Compiled blocks count it in their fitted classes.
    LayerSplit compiled = none, compiled_complex = complex;
    compiled.compiled = compiled_complex.compiled = true;
    CHECK(make_workload(m, compiled_complex, gpu).layer.attention_forward.bytes ==
          make_workload(m, compiled, gpu).layer.attention_forward.bytes);
}

TEST_CASE("repeat_kv: the keys and values copied to every query head, kept for the backward and sent round the ring") {
    // 16 heads over 4 kv heads of 128, 4,096 tokens, context parallel over 4: 1,024 tokens here.
    const TransformerSpec m = gqa_model();
    const GpuSpec gpu = plain_gpu();
    const LayerSplit gqa = cp_split(4);
    LayerSplit repeat = gqa;
    repeat.repeat_kv = true;
    const Workload native = make_workload(m, gqa, gpu);
    const Workload copied = make_workload(m, repeat, gpu);
    // The ring passes 16 heads of keys and values, not 4: 2 x 1,024 x 16 x 128 x 2 bytes.
    CHECK(copied.layer.cp_kv_bytes == doctest::Approx(2.0 * 1024 * 16 * 128 * 2));
    CHECK(copied.layer.cp_kv_bytes == doctest::Approx(4 * native.layer.cp_kv_bytes));
    // The copies: read 4 heads and write 16, for keys and values, forward and (their gradients) backward.
    const double copies = 2.0 * 1024 * (4 + 16) * 128 * 2;
    CHECK(copied.layer.attention_forward.bytes - native.layer.attention_forward.bytes == doctest::Approx(copies));
    CHECK(copied.layer.attention_backward.bytes - native.layer.attention_backward.bytes == doctest::Approx(copies));
    CHECK(copied.layer.attention_forward.seconds - native.layer.attention_forward.seconds ==
          doctest::Approx(gpu.memory_seconds(copies)));
    // FLOPs do not change: the core computes over 16 heads either way.
    CHECK(copied.layer.attention_forward.flops == native.layer.attention_forward.flops);
    // Compiled blocks' fitted kernel bytes hold the copies already; the ring still passes 16 heads.
    LayerSplit compiled = gqa, compiled_repeat = repeat;
    compiled.compiled = compiled_repeat.compiled = true;
    CHECK(make_workload(m, compiled_repeat, gpu).layer.attention_forward.bytes ==
          make_workload(m, compiled, gpu).layer.attention_forward.bytes);
    CHECK(make_workload(m, compiled_repeat, gpu).layer.cp_kv_bytes == doctest::Approx(copied.layer.cp_kv_bytes));
    // Kept for the backward (no recompute): Q, the copied K and V and the output, 8 sbh, not (4 + 4 x 4/16) sbh.
    const double sbh = 1024.0 * 2048;
    LayerSplit one_gqa = gqa, one_repeat = repeat;
    one_gqa.cp = one_repeat.cp = 1;
    TransformerSpec here = m;
    here.seq = 1024;
    CHECK(layer_activation_bytes(here, one_repeat) - layer_activation_bytes(here, one_gqa) ==
          doctest::Approx((8 - (4 + 4 * 0.25)) * sbh));
    // Recomputed: a whole layer's forward with full recompute, and with torchtitan's per-op policy too
    // (it keeps no copy: they run again).
    for (const Recompute r : {Recompute::full, Recompute::selective_op}) {
        LayerSplit g = gqa, c = repeat;
        g.recompute = c.recompute = r;
        CHECK(make_workload(m, c, gpu).layer.attention_recompute.bytes -
                  make_workload(m, g, gpu).layer.attention_recompute.bytes ==
              doctest::Approx(copies));
    }
    // Multi-head attention has nothing to repeat.
    TransformerSpec mha = m;
    mha.kv_heads = 16;
    CHECK(make_workload(mha, repeat, gpu).layer.attention_forward.bytes ==
          make_workload(mha, gqa, gpu).layer.attention_forward.bytes);
    CHECK(make_workload(mha, repeat, gpu).layer.cp_kv_bytes == make_workload(mha, gqa, gpu).layer.cp_kv_bytes);
}
