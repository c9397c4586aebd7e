// The strategies against known results: pipeline bubbles, activation memory
// of GPipe and 1F1B, DDP's overlap, FSDP's prefetch, Megatron's collectives
// per layer, a small 3D run, and the eight puzzle strategies in seconds and bytes.
#include "dtsim/hw/puzzle_costs.hpp"
#include "dtsim/hw/steps.hpp"
#include "dtsim/hw/strategies.hpp"
#include "dtsim/hw/workload.hpp"
#include "dtsim/hw/run.hpp"
#include "dtsim/puzzle/registry.hpp"
#include "fixtures.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

using namespace dtsim;
using namespace dtsim::hw;
using json = nlohmann::json;
using namespace dtsim::hw::test;

namespace {

RunReport run(const json& doc, bool keep = false, Trace* trace = nullptr) {
    auto r = simulate(parse_config(doc, "test.json"), {.keep_trace = keep});
    if (trace) *trace = std::move(r.trace);
    return r.report;
}

json pipeline(const std::string& schedule, int p, int m) {
    return {{"cluster", ideal_cluster(1, p)},
            {"model", small_model(2 * p)},
            {"training", {{"global_batch", m}, {"micro_batch", 1}}},
            {"strategy", {{"name", schedule}, {"pp", p}}}};
}

}  // namespace

TEST_CASE("GPipe and 1F1B with equal stage times have bubble fraction (p-1)/(m+p-1)") {
    for (const char* schedule : {"gpipe", "1f1b"})
        for (const auto& size : {std::pair{4, 8}, {4, 4}, {2, 16}, {8, 3}}) {
            const int p = size.first, m = size.second;
            CAPTURE(schedule);
            CAPTURE(p);
            CAPTURE(m);
            const RunReport r = run(pipeline(schedule, p, m));
            CHECK(r.split.idle / r.step_time == doctest::Approx(double(p - 1) / (m + p - 1)).epsilon(1e-6));
            CHECK(r.split.comm / r.step_time < 1e-6);
        }
}

TEST_CASE("1F1B stage 0 holds at most min(m, p) microbatches of activations, GPipe all m") {
    for (const auto& size : {std::pair{4, 8}, {4, 2}, {2, 6}}) {
        const int p = size.first, m = size.second;
        json doc = pipeline("1f1b", p, m);
        const Config c = parse_config(doc, "test.json");
        const double per_microbatch =
            (c.model.spec.layers / p) * layer_activation_bytes(c.model.spec, LayerSplit{1, 1, false, Recompute::none});
        const double states = 18 * (c.model.spec.layers / p) * c.model.spec.params_per_layer();
        const RunReport one = run(doc);
        doc["strategy"]["name"] = "gpipe";
        const RunReport all = run(doc);
        CAPTURE(p);
        CAPTURE(m);
        CHECK((one.rank_peaks[0] - states) / per_microbatch == doctest::Approx(std::min(m, p)));
        CHECK((all.rank_peaks[0] - states) / per_microbatch == doctest::Approx(m));
        // The last stage of 1F1B holds one.
        CHECK((one.rank_peaks[static_cast<std::size_t>(p - 1)] - states) / per_microbatch == doctest::Approx(1));
    }
}

TEST_CASE("DDP with overlap never takes longer than without") {
    for (int nodes : {1, 2, 4})
        for (double bucket : {1.0, 25.0, 200.0})
            for (int layers : {4, 12}) {
                json doc{{"cluster", realistic_cluster(nodes)},
                         {"model", small_model(layers, 32000)},
                         {"training", {{"global_batch", 8 * nodes * 2}, {"micro_batch", 1}}},
                         {"strategy", {{"name", "ddp"}, {"dp", 8 * nodes}, {"bucket_MiB", bucket}}}};
                const RunReport overlapped = run(doc);
                doc["strategy"]["overlap"] = false;
                const RunReport sequential = run(doc);
                CAPTURE(nodes);
                CAPTURE(bucket);
                CAPTURE(layers);
                CHECK(overlapped.step_time <= sequential.step_time);
                CHECK(overlapped.split.comm <= sequential.split.comm);
            }
}

TEST_CASE("DDP fills a 1 MiB first bucket, then 25 MiB buckets") {
    GradBuckets b(1 * kMiB, 25 * kMiB);
    CHECK(b.add(0.5 * kMiB) == 0);
    CHECK(b.add(0.75 * kMiB) == doctest::Approx(1.25 * kMiB));
    CHECK(b.add(20 * kMiB) == 0);
    CHECK(b.add(10 * kMiB) == doctest::Approx(30 * kMiB));
    CHECK(b.add(100 * kMiB) == doctest::Approx(100 * kMiB));  // a large tensor fills a bucket alone
    CHECK(b.add(3 * kMiB) == 0);
    CHECK(b.flush() == doctest::Approx(3 * kMiB));
    CHECK(b.closed() == 4);
}

TEST_CASE("FSDP's prefetch never takes longer than gathering each layer when it is needed") {
    for (int nodes : {1, 4}) {
        json doc{{"cluster", realistic_cluster(nodes)},
                 {"model", small_model(8, 32000)},
                 {"training", {{"global_batch", 8 * nodes}, {"micro_batch", 1}}},
                 {"strategy", {{"name", "fsdp"}, {"dp", 8 * nodes}}}};
        const RunReport prefetched = run(doc);
        doc["strategy"]["prefetch"] = false;
        const RunReport on_demand = run(doc);
        CHECK(prefetched.step_time <= on_demand.step_time);
        CHECK(prefetched.split.comm < on_demand.split.comm);
    }
}

TEST_CASE("collectives beside compute take SMs from it: FSDP's by NCCL's rule, userbuffers' by their own") {
    json cluster = realistic_cluster(1);
    cluster["gpu"]["sms"] = 132;
    json doc{{"cluster", cluster},
             {"model", small_model(4)},
             {"training", {{"global_batch", 16}, {"micro_batch", 1}}},
             {"strategy", {{"name", "fsdp"}, {"dp", 8}}}};
    const RunReport taken = run(doc);
    doc["cluster"]["gpu"]["collectives_take_sms"] = false;
    const RunReport free = run(doc);
    // Every gather and reduction inside the node runs on 24 channels: the compute beside them at
    // 108 / 132 of its speed, never slower (two streams at once would take 48).
    CHECK(taken.split.compute > free.split.compute);
    CHECK(taken.split.compute <= free.split.compute * 132.0 / 108);
    CHECK(taken.step_time >= free.step_time);
    // Megatron's tensor parallelism with userbuffers' overlap and no data parallelism: no NCCL
    // kernel runs beside the compute, and the SMs userbuffers' kernels hold (Transformer Engine
    // 1's defaults: 16 for each bulk and pipelined overlap) are theirs, NCCL's switch or not; with
    // the reduce-scatters by ring exchange (copy engines) and the bulk overlaps on 1 SM the compute
    // takes less time.
    doc["strategy"] = {{"name", "megatron"},          {"tp", 8},
                       {"dp", 1},                      {"sequence_parallel", true},
                       {"tp_comm_overlap", true},      {"tp_comm_overlap_cfg", {{"defaults", "te1"}}}};
    doc["training"]["global_batch"] = 2;
    const RunReport held_off = run(doc);
    doc["cluster"]["gpu"]["collectives_take_sms"] = true;
    const RunReport held_on = run(doc);
    CHECK(held_on.step_time == held_off.step_time);
    CHECK(held_on.split.compute == held_off.split.compute);
    for (const char* l : {"proj_fprop", "fc2_fprop"})
        doc["strategy"]["tp_comm_overlap_cfg"][l] = {{"method", "ring_exchange"}};
    for (const char* l : {"qkv_dgrad", "qkv_wgrad", "fc1_dgrad", "fc1_wgrad"})
        doc["strategy"]["tp_comm_overlap_cfg"][l] = {{"num_sm", 1}};
    CHECK(run(doc).split.compute < held_on.split.compute);
}

TEST_CASE("FSDP2 copies gathered weights out and gradients in on the compute stream; FSDP1 and Megatron-FSDP do not") {
    // One GPU: nothing to wait for, so the copies add their time to the step, each at the memory rate.
    json cluster = realistic_cluster(1);
    cluster["gpus_per_node"] = 1;
    const int layers = 4, microbatches = 2;
    json doc{{"cluster", cluster},
             {"model", small_model(layers)},
             {"training", {{"global_batch", microbatches}, {"micro_batch", 1}}},
             {"strategy", {{"name", "fsdp"}, {"dp", 1}}}};
    const Config config = parse_config(doc, "t.json");
    const Workload w = make_workload(config.model.spec, layer_split(config), config.cluster.gpu);
    const double p = w.layer.params, bf16 = 2, fp32 = 4;
    const auto ms = [&](double bytes) { return config.cluster.gpu.memory_seconds(bytes); };
    Trace two;
    const RunReport fsdp2 = run(doc, true, &two);
    doc["strategy"]["fsdp_impl"] = "fsdp1";
    Trace one;
    const RunReport fsdp1 = run(doc, true, &one);
    doc["strategy"]["fsdp_impl"] = "megatron";
    doc["strategy"]["elementwise_kernels"] = "eager";  // as PyTorch's FSDP runs them: only the copies differ
    const RunReport megatron = run(doc);
    // Per layer and microbatch: the forward's and the backward's gather copied out (read and written
    // in bf16), the gradients copied into the fp32 reduce-scatter input (read bf16, written fp32).
    const double copies = microbatches * layers * (2 * ms(2 * bf16 * p) + ms((bf16 + fp32) * p));
    CHECK(fsdp2.step_time - fsdp1.step_time == doctest::Approx(copies).epsilon(1e-9));
    CHECK(megatron.step_time == fsdp1.step_time);
    const auto copied_out = [&](const Trace& t) {
        int n = 0;
        for (const auto& e : t.ranks[0].events)
            if (e.layer == 1 && e.bytes == 2 * bf16 * p) ++n;
        return n;
    };
    CHECK(copied_out(two) == 2 * microbatches);
    CHECK(copied_out(one) == 0);
    // SHARD_GRAD_OP gathers once a microbatch: one copy out.
    doc["strategy"] = {{"name", "fsdp"}, {"dp", 1}, {"sharding", "grad_op"}};
    const RunReport grad_op2 = run(doc);
    doc["strategy"]["fsdp_impl"] = "fsdp1";
    const RunReport grad_op1 = run(doc);
    CHECK(grad_op2.step_time - grad_op1.step_time ==
          doctest::Approx(microbatches * layers * (ms(2 * bf16 * p) + ms((bf16 + fp32) * p))).epsilon(1e-9));
    // Only fsdp takes the key.
    doc["strategy"] = {{"name", "ddp"}, {"dp", 1}, {"fsdp_impl", "fsdp1"}};
    CHECK_THROWS_WITH_AS(parse_config(doc, "t.json"), doctest::Contains("$.strategy.fsdp_impl"), ConfigError);
}

TEST_CASE("Megatron tensor parallelism: two all-reduces forward and two backward per layer") {
    json doc{{"cluster", realistic_cluster(1)},
             {"model", small_model(4)},
             {"training", {{"global_batch", 6}, {"micro_batch", 1}}},
             {"strategy", {{"name", "megatron"}, {"tp", 4}, {"dp", 2}, {"tp_async_backward", false}}}};
    // Events of rank 0 by name; the data-parallel gradient buckets run on the comm stream, and so
    // do the backward's tensor-parallel collectives beside the first linear's GEMMs (by default).
    auto count = [](const Trace& t) {
        std::map<std::string, int> n;
        for (const auto& e : t.ranks[0].events)
            n[std::string(e.op.name()) + (e.stream == Stream::comm ? " (comm)" : "")] += 1;
        return n;
    };
    Trace t;
    run(doc, true, &t);
    auto n = count(t);
    const int microbatches = 3, layers = 4;
    CHECK(n["all_reduce"] == 4 * layers * microbatches);
    const int buckets = n["all_reduce (comm)"];
    CHECK(buckets > 1);  // DDP-style buckets over the data-parallel pair
    CHECK(n["forward"] == 2 * layers * microbatches);
    CHECK(n["backward"] == 2 * layers * microbatches);
    // Megatron-LM's default: the backward's all-reduces beside the weight-gradient GEMMs, each
    // backward block in two parts (the rest, then the weight-gradient GEMM beside the all-reduce).
    doc["strategy"].erase("tp_async_backward");
    run(doc, true, &t);
    n = count(t);
    CHECK(n["all_reduce"] == 2 * layers * microbatches);
    CHECK(n["all_reduce (comm)"] == 2 * layers * microbatches + buckets);
    CHECK(n["backward"] == 4 * layers * microbatches);
    doc["strategy"]["tp_async_backward"] = false;
    // Full recompute re-runs the forward, its all-reduces included.
    doc["strategy"]["recompute"] = "full";
    run(doc, true, &t);
    n = count(t);
    CHECK(n["all_reduce"] == 6 * layers * microbatches);
    CHECK(n["recompute"] == 2 * layers * microbatches);
    // Sequence parallelism: an all-gather before and a reduce-scatter after each block.
    doc["strategy"]["recompute"] = "none";
    doc["strategy"]["sequence_parallel"] = true;
    run(doc, true, &t);
    n = count(t);
    CHECK(n["all_gather"] == 4 * layers * microbatches);
    CHECK(n["reduce_scatter"] == 4 * layers * microbatches);
    // By default the backward gathers each block's input again and reduce-scatters its input
    // gradient beside the first linear's GEMMs: 6 all-gathers and 4 reduce-scatters per layer.
    doc["strategy"].erase("tp_async_backward");
    run(doc, true, &t);
    n = count(t);
    CHECK(n["all_gather"] == 4 * layers * microbatches);
    CHECK(n["all_gather (comm)"] == 2 * layers * microbatches);
    CHECK(n["reduce_scatter"] == 2 * layers * microbatches);
    CHECK(n["reduce_scatter (comm)"] == 2 * layers * microbatches);
}

TEST_CASE("a 3D run (dp x tp x pp) with tied embeddings finishes and accounts for its time") {
    for (const char* schedule : {"1f1b", "gpipe"}) {
        json doc{{"cluster", realistic_cluster(2)},
                 {"model", small_model(8, 32000)},
                 {"training", {{"global_batch", 16}, {"micro_batch", 2}}},
                 {"strategy", {{"name", schedule}, {"dp", 2}, {"tp", 4}, {"pp", 2}, {"zero_stage", 1}}}};
        Trace t;
        const RunReport r = run(doc, true, &t);
        CHECK(r.gpus == 16);
        CHECK(r.split.compute + r.split.comm + r.split.idle == doctest::Approx(r.step_time));
        CHECK(r.mfu > 0.05);
        CHECK(r.mfu < r.hfu + 1e-12);
        CHECK_FALSE(r.oom.has_value());
        CHECK(t.time_unit == "s");
        CHECK(t.summary.makespan == doctest::Approx(r.step_time));
        int sends = 0, recvs = 0;
        for (const auto& rank : t.ranks)
            for (const auto& e : rank.events) {
                sends += e.op.name() == "send";
                recvs += e.op.name() == "recv";
            }
        CHECK(sends == recvs);
        CHECK(sends == 2 * 4 * 8);  // activations and gradients of 4 microbatches, in 8 pipelines
    }
}

TEST_CASE("the eight puzzle strategies run unchanged in the hardware world, correct, in seconds and bytes") {
    Config c = parse_config({{"cluster", realistic_cluster(1)},
                             {"model", {{"kind", "puzzle"}, {"layers", 2}}},
                             {"training", {{"global_batch", 8}}},
                             {"strategy", {{"name", "puzzle"}, {"puzzle", "ddp"}, {"dp", 8}}}},
                            "test.json");
    for (const auto& p : puzzle::puzzles()) {
        CAPTURE(p.name);
        const HardwareCosts costs(c.cluster, p.ranks);
        auto result = puzzle::run_strategy(p.strategy, p.layers, p.batches, p.ranks, costs);
        CHECK_FALSE(result.check_error.has_value());
        CHECK(result.trace.summary.correct == true);
        CHECK(result.trace.time_unit == "s");
        CHECK(result.trace.memory_unit == "byte");
        CHECK(result.trace.summary.makespan > 0);
        CHECK(result.trace.summary.makespan < 0.1);
        // Memory in bytes: at least the bf16 weights of one layer shard.
        CHECK(result.trace.summary.max_memory >= 2.0 * 512 * 512 / p.ranks);
    }
    // A forward of one batch is one 256 x 512 x 512 GEMM on the GPU model.
    const HardwareCosts costs(c.cluster, 4);
    CHECK(costs.forward(0, IdSet::single(0)) == doctest::Approx(c.cluster.gpu.gemm_seconds(256, 512, 512, DType::bf16)));
    CHECK(costs.weight(1, 1).num == 2 * 512 * 512);
    CHECK(costs.opt_state(1, 4).num == 12 * 512 * 512);
    CHECK(costs.opt_state(1, 4).den == 4);
}

TEST_CASE("a puzzle config runs through simulate() with the puzzle's check") {
    const RunReport r = run({{"cluster", realistic_cluster(1)},
                             {"model", {{"kind", "puzzle"}, {"layers", 6}}},
                             {"training", {{"global_batch", 8}}},
                             {"strategy", {{"name", "puzzle"}, {"puzzle", "fsdp"}, {"dp", 8}}}});
    CHECK(r.correct == true);
    CHECK(r.strategy == "puzzle fsdp");
    CHECK(r.split.compute + r.split.comm + r.split.idle == doctest::Approx(r.step_time));
}

namespace {

// The events a run records against the estimate made before it: no more, and at least 1 / `factor` of it.
void check_estimate(const Config& c, double factor = 1.5) {
    const RunSize size = estimate_run_size(c, {.keep_trace = false, .straggler_baseline = false});
    const RunReport r = simulate(c, {.keep_trace = false, .straggler_baseline = false}).report;
    CAPTURE(size.events);
    CAPTURE(r.events);
    CHECK(static_cast<double>(r.events) <= size.events);
    CHECK(size.events <= factor * static_cast<double>(r.events));
}

}  // namespace

TEST_CASE("the events estimated before a run bound what it records, within 1.5 x for every hardware strategy") {
    const json strategies[] = {
        {{"name", "ddp"}, {"dp", 16}},
        {{"name", "ddp"}, {"dp", 16}, {"zero_stage", 1}},
        {{"name", "ddp"}, {"dp", 16}, {"zero_stage", 2}},
        {{"name", "fsdp"}, {"dp", 16}},
        {{"name", "fsdp"}, {"dp", 16}, {"sharding", "grad_op"}},
        {{"name", "fsdp"}, {"dp", 16}, {"sharding", "hybrid"}},
        {{"name", "fsdp"}, {"dp", 4}, {"tp", 4}},
        {{"name", "fsdp"}, {"dp", 8}, {"tp", 2}, {"sequence_parallel", true}, {"sharding", "hybrid"}},
        {{"name", "fsdp"}, {"dp", 4}, {"tp", 4}, {"sequence_parallel", true}, {"tp_comm_overlap", true}},
        {{"name", "megatron"}, {"dp", 4}, {"tp", 4}},
        {{"name", "megatron"}, {"dp", 4}, {"tp", 4}, {"sequence_parallel", true}, {"tp_comm_overlap", true}},
        {{"name", "zbh1"}, {"dp", 2}, {"tp", 2}, {"pp", 4}, {"sequence_parallel", true}, {"tp_comm_overlap", true}},
        {{"name", "megatron"}, {"dp", 4}, {"tp", 4}, {"sequence_parallel", true}},
        {{"name", "gpipe"}, {"dp", 2}, {"tp", 2}, {"pp", 4}},
        {{"name", "1f1b"}, {"dp", 2}, {"tp", 2}, {"pp", 4}, {"sequence_parallel", true}},
        {{"name", "1f1b"}, {"dp", 2}, {"tp", 2}, {"pp", 4}, {"zero_stage", 3}},
        {{"name", "interleaved"}, {"dp", 4}, {"pp", 4}, {"chunks", 2}, {"zero_stage", 3}},
        {{"name", "interleaved"}, {"dp", 4}, {"pp", 4}, {"chunks", 2}},
        {{"name", "zbh1"}, {"dp", 4}, {"pp", 4}},
        {{"name", "zbh1"}, {"dp", 2}, {"tp", 2}, {"pp", 4}, {"sequence_parallel", true}},
        {{"name", "bfs"}, {"dp", 4}, {"pp", 4}, {"chunks", 2}},
        {{"name", "dualpipev"}, {"dp", 4}, {"pp", 4}},
        {{"name", "dualpipev"}, {"dp", 2}, {"tp", 2}, {"pp", 4}, {"sequence_parallel", true}},
        {{"name", "megatron"}, {"dp", 2}, {"tp", 2}, {"cp", 4}, {"flash_attention", true}},
        {{"name", "1f1b"}, {"dp", 2}, {"cp", 2}, {"pp", 4}, {"flash_attention", true}},
        {{"name", "fsdp"}, {"dp", 8}, {"cp", 2}, {"flash_attention", true}},
        // Uneven pipeline stages.
        {{"name", "1f1b"}, {"dp", 2}, {"tp", 2}, {"pp", 4}, {"stage_layers", {1, 7, 7, 1}}},
        {{"name", "gpipe"}, {"dp", 2}, {"tp", 2}, {"pp", 4}, {"first_stage_layers", 2}, {"last_stage_layers", 2}},
        {{"name", "1f1b"}, {"dp", 4}, {"pp", 4}, {"zero_stage", 3}, {"stage_layers", {2, 6, 6, 2}}},
        {{"name", "interleaved"}, {"dp", 4}, {"pp", 4}, {"chunks", 2}, {"stage_layers", {1, 2, 2, 2, 2, 2, 2, 3}}},
        {{"name", "interleaved"}, {"dp", 4}, {"pp", 4}, {"chunks", 2}, {"zero_stage", 3},
         {"first_stage_layers", 2}, {"last_stage_layers", 2}},
        {{"name", "zbh1"}, {"dp", 4}, {"pp", 4}, {"stage_layers", {3, 5, 5, 3}}},
        {{"name", "bfs"}, {"dp", 4}, {"pp", 4}, {"chunks", 2}, {"stage_layers", {3, 1, 1, 3, 3, 1, 1, 3}}},
        {{"name", "dualpipev"}, {"dp", 4}, {"pp", 4}, {"stage_layers", {1, 2, 2, 2, 2, 2, 2, 3}}},
    };
    for (const auto& strategy : strategies)
        for (const char* recompute : {"none", "selective", "full"}) {
            json s = strategy;
            s["recompute"] = recompute;
            CAPTURE(s.dump());
            check_estimate(parse_config({{"cluster", realistic_cluster(2)},
                                         {"model", small_model(16, 32000)},
                                         {"training", {{"global_batch", 64}, {"micro_batch", 1}}},
                                         {"strategy", s}},
                                        "test.json"));
        }
    // The puzzle strategies, a constant per layer for all eight: an upper bound, at their canonical sizes.
    for (const auto& p : puzzle::puzzles()) {
        CAPTURE(p.name);
        check_estimate(parse_config({{"cluster", ideal_cluster(1, p.ranks)},
                                     {"model", {{"kind", "puzzle"}, {"layers", p.layers}}},
                                     {"training", {{"global_batch", p.batches}}},
                                     {"strategy", {{"name", "puzzle"}, {"puzzle", p.name}, {"dp", p.ranks}}}},
                                    "test.json"),
                       std::numeric_limits<double>::infinity());
    }
}

TEST_CASE("the shipped run configs are well inside the event limit, and the estimate bounds their events") {
    std::vector<std::filesystem::path> files;
    for (const auto& f : std::filesystem::directory_iterator(std::string(DTSIM_CONFIGS) + "/runs"))
        if (f.path().extension() == ".json") files.push_back(f.path());
    std::sort(files.begin(), files.end());
    REQUIRE(files.size() >= 19);
    for (const auto& f : files) {
        CAPTURE(f);
        const Config c = load_config(f.string());
        const RunSize size = estimate_run_size(c);
        // What the engine simulates without a trace: the simulated ranks' share where ranks stand for their twins.
        const std::optional<Twins> twins = simulated_twins(c, {.keep_trace = false});
        CHECK(size.events * (twins ? twins->share(c.strategy) : 1) < kMaxRunEvents / 5);
        if (size.events < 2e6)  // the big ones take seconds each
            check_estimate(c, c.strategy.name == "puzzle" ? std::numeric_limits<double>::infinity() : 1.5);
    }
}

TEST_CASE("a run too large to simulate is refused before anything is built, saying why") {
    // A billion layers: the out-of-memory verdict is known from the model states alone.
    json doc{{"cluster", realistic_cluster(2)},
             {"model", small_model(1000000000, 32000)},
             {"training", {{"global_batch", 64}, {"micro_batch", 1}}},
             {"strategy", {{"name", "fsdp"}, {"dp", 16}}}};
    const Config c = parse_config(doc, "big.json");
    CHECK(estimate_run_size(c).events > kMaxRunEvents);
    CHECK_THROWS_WITH_AS(simulate(c, {.keep_trace = false}),
                         doctest::Contains("big.json: the run would record about 6.4e+11 events (16 GPUs x 1e+09 "
                                           "layers each x 4 microbatches x about 10 operations per layer and "
                                           "microbatch), above the limit of 1e+08: it was not simulated"),
                         ConfigError);
    CHECK_THROWS_WITH_AS(simulate(c, {.keep_trace = false}), doctest::Contains("out of memory before the first step"),
                         ConfigError);
    // Keeping the events for files has a lower limit.
    doc["model"]["layers"] = 16;
    doc["training"]["global_batch"] = 1 << 19;  // 32,768 microbatches: about 6e7 events
    const Config kept = parse_config(doc, "kept.json");
    CHECK(estimate_run_size(kept).events > kMaxKeptEvents);
    CHECK(estimate_run_size(kept).events < kMaxRunEvents);
    CHECK_THROWS_WITH_AS(simulate(kept, {.keep_trace = true}),
                         doctest::Contains("above the limit of 3e+07 for a run that keeps its events for files"),
                         ConfigError);
}

TEST_CASE("a run whose figures are not finite is an error naming the figure") {
    Config c = parse_config({{"cluster", realistic_cluster(1)},
                             {"model", small_model(2)},
                             {"training", {{"global_batch", 8}, {"micro_batch", 1}}},
                             {"strategy", {{"name", "ddp"}, {"dp", 8}}}},
                            "test.json");
    // A GPU whose GEMMs take forever, beyond what the config reader accepts: set in code.
    c.cluster.gpu.peak_flops[static_cast<std::size_t>(DType::bf16)] = 1e-320;
    CHECK_THROWS_WITH_AS(simulate(c, {.keep_trace = false}),
                         doctest::Contains("the run's step time is not finite (inf): the config's sizes or rates are "
                                           "beyond what the cost models can compute"),
                         std::runtime_error);
    c = parse_config({{"cluster", realistic_cluster(1)},
                      {"model", small_model(2)},
                      {"training", {{"global_batch", 8}, {"micro_batch", 1}}},
                      {"strategy", {{"name", "ddp"}, {"dp", 8}}}},
                     "test.json");
    c.cluster.gpu.memory_bytes = std::numeric_limits<double>::quiet_NaN();
    CHECK_THROWS_WITH_AS(simulate(c, {.keep_trace = false}),
                         doctest::Contains("the run's memory capacity is not finite"), std::runtime_error);
}

// --tp-comm-overlap: per block an all-gather pipelined with the first GEMM's t chunks and a
// reduce-scatter with the last GEMM's splits, and in the backward the bulk overlaps; the same
// bytes as Megatron's backward without it (tp_async_backward), less exposed communication.
TEST_CASE("tensor-parallel communication overlap: each block's gather and scatter beside its GEMMs") {
    // GEMMs large enough for the overlap to pay (on small ones the chunks' overheads cost more).
    json doc{{"cluster", realistic_cluster(1)},
             {"model", {{"name", "big"}, {"layers", 2}, {"hidden", 8192}, {"heads", 64}, {"seq", 4096}, {"vocab", 0}}},
             {"training", {{"global_batch", 1}, {"micro_batch", 1}}},
             {"strategy", {{"name", "megatron"}, {"tp", 8}, {"dp", 1}, {"sequence_parallel", true},
                           {"tp_async_backward", true}}}};  // the same collectives as the overlap
    Trace plain_trace, overlap_trace;
    const RunReport plain = run(doc, true, &plain_trace);
    doc["strategy"]["tp_comm_overlap"] = true;
    const RunReport overlapped = run(doc, true, &overlap_trace);
    auto bytes = [](const Trace& t, const char* op) {
        double b = 0;
        for (const auto& e : t.ranks[0].events)
            if (e.op.name() == std::string_view(op)) b += e.bytes;
        return b;
    };
    CHECK(bytes(overlap_trace, "all_gather") == doctest::Approx(bytes(plain_trace, "all_gather")));
    CHECK(bytes(overlap_trace, "reduce_scatter") == doctest::Approx(bytes(plain_trace, "reduce_scatter")));
    CHECK(overlapped.split.comm < 0.5 * plain.split.comm);
    CHECK(overlapped.step_time < plain.step_time);
    // Layer 0's forward attention block on rank 0: a gather on the comm stream, the first GEMM's
    // head, then the rest once the gather has ended; the next compute waits for the scatter.
    std::vector<Event> block;
    for (const auto& e : overlap_trace.ranks[0].events)
        if (e.layer == 0 && block.size() < 6) block.push_back(e);
    REQUIRE(block.size() == 6);
    CHECK(block[0].op.name() == std::string_view("all_gather"));
    CHECK(block[0].stream == Stream::comm);
    CHECK(block[1].op.name() == std::string_view("forward"));
    CHECK(block[1].start == doctest::Approx(block[0].start));  // the head runs while the gather moves
    CHECK(block[2].op.name() == std::string_view("forward"));
    CHECK(block[2].start == doctest::Approx(std::max(block[1].end(), block[0].end())));
    CHECK(block[3].op.name() == std::string_view("reduce_scatter"));
    CHECK(block[3].start == doctest::Approx(block[2].end()));
    CHECK(block[4].op.name() == std::string_view("forward"));
    CHECK(block[4].start == doctest::Approx(block[2].end()));  // the tail beside the scatter
    CHECK(block[5].start >= block[3].end() - 1e-12);           // the MLP block after both
    // It needs sequence parallelism.
    doc["strategy"]["sequence_parallel"] = false;
    CHECK_THROWS_WITH_AS(parse_config(doc, "t.json"), doctest::Contains("it needs \"tp\" > 1 and \"sequence_parallel\": true"),
                         ConfigError);
}

TEST_CASE("tp_comm_overlap_cfg: userbuffers' SMs, held beside the GEMMs or left to them by a margin") {
    json doc{{"cluster", realistic_cluster(1)},
             {"model", {{"name", "big"}, {"layers", 2}, {"hidden", 8192}, {"heads", 64}, {"seq", 4096}, {"vocab", 0}}},
             {"training", {{"global_batch", 1}, {"micro_batch", 1}}},
             {"strategy", {{"name", "megatron"}, {"tp", 8}, {"dp", 1}, {"sequence_parallel", true},
                           {"tp_comm_overlap", true}}}};
    doc["cluster"]["gpu"]["sms"] = 132;
    const auto ub_of = [](const json& d) { return layer_split(parse_config(d, "t.json")).ub; };
    const auto at = [](const UbConfig& u, UbLayer l) { return u[static_cast<std::size_t>(l)]; };
    // Transformer Engine's defaults from 2.0 (no configuration): the pipelined and bulk overlaps'
    // GEMMs leave 16 SMs throughout; ring exchanges copy with the copy engines.
    const UbConfig te2 = ub_of(doc);
    CHECK(at(te2, UbLayer::qkv_fprop) == UbSms{0, 0});
    CHECK(at(te2, UbLayer::fc2_dgrad) == UbSms{0, 0});
    CHECK(at(te2, UbLayer::proj_fprop) == UbSms{0, 16});
    CHECK(at(te2, UbLayer::qkv_dgrad) == UbSms{0, 16});
    CHECK(at(te2, UbLayer::fc1_wgrad) == UbSms{0, 16});
    // Before 2.0: no margin, so their kernels hold the 16 SMs while they run.
    doc["strategy"]["tp_comm_overlap_cfg"] = {{"defaults", "te1"}};
    const UbConfig te1 = ub_of(doc);
    CHECK(at(te1, UbLayer::proj_fprop) == UbSms{16, 0});
    CHECK(at(te1, UbLayer::qkv_wgrad) == UbSms{16, 0});
    CHECK(at(te1, UbLayer::fc1_fprop) == UbSms{0, 0});
    // Given entries (NeMo's YAML spells flags 0 and 1), a ring exchange by SMs (use_ce false), and
    // reduce-scatters by ring exchange (by the copy engines: nothing held).
    doc["strategy"]["tp_comm_overlap_cfg"] = {
        {"defaults", "te1"},
        {"qkv_wgrad", {{"method", "bulk"}, {"num_sm", 24}, {"cga_size", 2}, {"set_sm_margin", 0}}},
        {"fc1_fprop", {{"num_sm", 2}, {"use_ce", false}}},
        {"fc2_fprop", {{"method", "ring_exchange"}}},
        {"proj_fprop", {{"method", "ring_exchange"}, {"num_sm", 1}, {"set_sm_margin", 1}}}};
    const UbConfig given = ub_of(doc);
    CHECK(at(given, UbLayer::qkv_wgrad) == UbSms{24, 0});
    CHECK(at(given, UbLayer::fc1_fprop) == UbSms{2, 0});
    CHECK(at(given, UbLayer::fc2_fprop) == UbSms{0, 0});
    CHECK(at(given, UbLayer::proj_fprop) == UbSms{0, 1});
    CHECK(at(given, UbLayer::fc1_wgrad) == UbSms{16, 0});
    // A method given alone keeps the layer's own defaults otherwise, as Transformer Engine takes
    // them (get_default_config of the layer, then the given keys): under TE 2 a ring-exchange
    // fc2_fprop keeps the pipelined overlap's 16-SM margin.
    doc["strategy"]["tp_comm_overlap_cfg"] = {{"fc2_fprop", {{"method", "ring_exchange"}}}};
    CHECK(at(ub_of(doc), UbLayer::fc2_fprop) == UbSms{0, 16});
    doc["strategy"]["tp_comm_overlap_cfg"] = {
        {"qkv_wgrad", {{"num_sm", 8}, {"comm_priority", -1}, {"is_reduce_scatter", true}}}};
    CHECK(at(ub_of(doc), UbLayer::qkv_wgrad) == UbSms{0, 8});
    // torchtitan's AsyncTP ("fsdp" with tp_comm_overlap) copies by the copy engines: nothing taken.
    json async_tp = doc;
    async_tp["strategy"] = {
        {"name", "fsdp"}, {"tp", 8}, {"dp", 1}, {"sequence_parallel", true}, {"tp_comm_overlap", true}};
    CHECK(ub_of(async_tp) == UbConfig{});
    CHECK_FALSE(layer_split(parse_config(async_tp, "t.json")).userbuffers);

    auto busy = [](const Trace& t, const char* op) {
        double s = 0;
        for (const auto& e : t.ranks[0].events)
            if (e.op.name() == std::string_view(op) && e.stream == Stream::compute) s += e.duration;
        return s;
    };
    const json ring = {{"method", "ring_exchange"}};
    const auto margin = [](int n) { return json{{"num_sm", n}, {"set_sm_margin", true}}; };
    const auto held = [](int n) { return json{{"num_sm", n}, {"set_sm_margin", false}}; };
    const json quiet = {{"defaults", "te1"}, {"proj_fprop", ring}, {"fc2_fprop", ring}};  // a forward that takes no SM
    const auto traced = [&](const json& cfg) {
        json d = doc;
        d["strategy"]["tp_comm_overlap_cfg"] = cfg;
        Trace t;
        (void)run(d, true, &t);
        const Config c = parse_config(d, "t.json");
        return std::pair{std::move(t), make_workload(c.model.spec, layer_split(c), c.cluster.gpu)};
    };
    // The forward: GPT-3 175B's margins in NVIDIA's DGX Cloud recipe (proj 24 SMs, fc2 20): the
    // projection's chunks on 108 of 132 SMs, fc2's on 112, each of the 2 layers' forwards longer by
    // both; the backward the same.
    json margins = quiet;
    margins["proj_fprop"] = margin(24);
    margins["fc2_fprop"] = margin(20);
    const auto [plain_trace, plain] = traced(quiet);
    const auto [margin_trace, w] = traced(margins);
    const auto proj = static_cast<std::size_t>(UbLayer::proj_fprop), fc2 = static_cast<std::size_t>(UbLayer::fc2_fprop);
    CHECK(w.layer.ub_margin[proj] == doctest::Approx(w.layer.attention_last_gemm * 24 / 108));
    CHECK(w.layer.ub_margin[fc2] == doctest::Approx(w.layer.mlp_last_gemm * 20 / 112));
    CHECK(w.layer.ub_margin[proj] > 0);
    CHECK(busy(margin_trace, "forward") - busy(plain_trace, "forward") ==
          doctest::Approx(2 * (w.layer.ub_margin[proj] + w.layer.ub_margin[fc2])));
    CHECK(busy(margin_trace, "backward") == doctest::Approx(busy(plain_trace, "backward")));
    // The backward's bulk overlaps: per block, the first linear's input gathered beside its
    // input-gradient GEMM and its gradient reduce-scattered beside its weight-gradient GEMM. Per
    // layer: 2 gathers and 2 reduce-scatters forward, 4 and 2 backward.
    const auto count = [](const Trace& t, const char* op) {
        return std::count_if(t.ranks[0].events.begin(), t.ranks[0].events.end(),
                             [&](const auto& e) { return e.op.name() == std::string_view(op); });
    };
    CHECK(count(plain_trace, "all_gather") == 2 * 6);
    CHECK(count(plain_trace, "reduce_scatter") == 2 * 4);
    // A margin on the QKV weight-gradient GEMM: 24 SMs against 12, the linear's whole GEMM longer
    // by the difference in each layer's backward.
    const std::size_t wgrad = static_cast<std::size_t>(UbLayer::qkv_wgrad);
    json m24 = quiet, m12 = quiet;
    m24["qkv_wgrad"] = margin(24);
    m12["qkv_wgrad"] = margin(12);
    const auto [t24, w24] = traced(m24);
    const auto [t12, w12] = traced(m12);
    CHECK(w24.layer.ub_margin[wgrad] == doctest::Approx(w24.layer.attention_first_linear * 24 / 108));
    CHECK(busy(t24, "backward") - busy(t12, "backward") ==
          doctest::Approx(2 * w24.layer.attention_first_linear * (24.0 / 108 - 12.0 / 120)));
    // Held instead: 32 SMs against 16 while the reduce-scatter runs (each layer's last, shorter
    // than the GEMM beside it), the GEMM at (132 - n) / 132 of its speed meanwhile: longer by
    // the reduce-scatter's time x 16 / 132 a layer.
    json h32 = quiet, h16 = quiet;
    h32["qkv_wgrad"] = held(32);
    h16["qkv_wgrad"] = held(16);
    const auto [t32, w32] = traced(h32);
    const auto [t16, w16] = traced(h16);
    double scatters = 0;
    for (int layer = 0; layer < 2; ++layer) {
        const Event* last = nullptr;
        for (const auto& e : t16.ranks[0].events)
            if (e.op.name() == std::string_view("reduce_scatter") && e.layer == layer &&
                (!last || e.start > last->start))
                last = &e;
        REQUIRE(last != nullptr);
        REQUIRE(last->duration < w16.layer.attention_first_linear);
        scatters += last->duration;
    }
    CHECK(scatters > 0);
    CHECK(busy(t32, "backward") - busy(t16, "backward") == doctest::Approx(scatters * 16 / 132));
    CHECK(busy(t32, "forward") == doctest::Approx(busy(t16, "forward")));

    // Errors: without the overlap, with PyTorch's tensor parallelism, without the GPU's SM count,
    // SMs that leave none, and methods Transformer Engine does not run there.
    doc["strategy"]["tp_comm_overlap_cfg"] = margins;
    const auto fails = [](const json& d, const char* message) {
        CHECK_THROWS_WITH_AS(parse_config(d, "t.json"), doctest::Contains(message), ConfigError);
    };
    // (A configuration where no userbuffers run is accepted and unused: dtsim run says so.)
    json no_overlap = doc;
    no_overlap["strategy"]["tp_comm_overlap"] = false;
    CHECK(layer_split(parse_config(no_overlap, "t.json")).ub == UbConfig{});
    async_tp["strategy"]["tp_comm_overlap_cfg"] = margins;
    CHECK(layer_split(parse_config(async_tp, "t.json")).ub == UbConfig{});
    json no_sms = doc;
    no_sms["cluster"]["gpu"].erase("sms");
    fails(no_sms, "$.strategy.tp_comm_overlap_cfg.proj_fprop.num_sm: 24 SMs taken from the GEMMs need the GPU's SM "
                  "count");
    // An entry that gives no SMs of its own takes TE's default, which a GPU without a count leaves unused.
    no_sms["strategy"]["tp_comm_overlap_cfg"]["proj_fprop"] = {{"method", "pipeline"}};
    no_sms["strategy"]["tp_comm_overlap_cfg"].erase("fc2_fprop");
    CHECK(layer_split(parse_config(no_sms, "t.json")).ub[static_cast<std::size_t>(UbLayer::proj_fprop)] ==
          UbSms{16, 0});
    json all = doc;
    all["strategy"]["tp_comm_overlap_cfg"]["proj_fprop"] = held(132);
    fails(all, "$.strategy.tp_comm_overlap_cfg.proj_fprop.num_sm: proj_fprop takes 132 SMs from the GEMMs, which "
               "leaves none of the GPU's 132");
    json few = doc;  // TE's defaults on a GPU of 16 SMs
    few["cluster"]["gpu"]["sms"] = 16;
    few["strategy"].erase("tp_comm_overlap_cfg");
    fails(few, "$.strategy.tp_comm_overlap: proj_fprop takes 16 SMs from the GEMMs, which leaves none of the GPU's 16 "
               "(cluster.gpu.sms): Transformer Engine 2's default");
    json bad = doc;
    bad["strategy"]["tp_comm_overlap_cfg"]["qkv_fprop"] = {{"method", "bulk"}};
    fails(bad, "$.strategy.tp_comm_overlap_cfg.qkv_fprop.method: \"bulk\" is for the first linears' backward GEMMs");
    bad["strategy"]["tp_comm_overlap_cfg"]["qkv_fprop"] = {{"method", "pipeline"}};
    fails(bad, "qkv_fprop all-gathers: Transformer Engine pipelines only reduce-scatters");
    bad["strategy"]["tp_comm_overlap_cfg"]["qkv_fprop"] = ring;
    bad["strategy"]["tp_comm_overlap_cfg"]["qkv_dgrad"] = ring;
    fails(bad, "qkv_dgrad is a bulk overlap: dtsim models no other method for it");
    bad["strategy"]["tp_comm_overlap_cfg"].erase("qkv_dgrad");
    bad["strategy"]["tp_comm_overlap_cfg"]["qkv_wgard"] = held(4);
    fails(bad, "did you mean \"qkv_wgrad\"");
}

// Megatron-LM's backward without --tp-comm-overlap (StrategyConfig::tp_async_backward): the block's
// first linear starts the input gradient's all-reduce (reduce-scatter with sequence parallelism)
// before its weight-gradient GEMM, and with sequence parallelism gathers its input again beside
// its input-gradient GEMM. By hand, per backward block of work w, first linear g, collectives
// AR, AG, RS (their times alone on the links): blocking, w + AR (w + AG + RS with sequence
// parallelism); asynchronous, w - g + max(g, AR) (AG + w - 2g + max(g, AG) + max(g, RS)).
TEST_CASE("Megatron's backward: the input gradient's collective beside the first linear's weight-gradient GEMM") {
    for (const bool seq : {false, true}) {
        CAPTURE(seq);
        json doc{{"cluster", realistic_cluster(1)},
                 {"model", small_model(2)},
                 {"training", {{"global_batch", 1}, {"micro_batch", 1}}},
                 {"strategy", {{"name", "megatron"}, {"tp", 8}, {"dp", 1}, {"sequence_parallel", seq},
                               {"tp_async_backward", false}}}};
        Trace blocking_trace, async_trace;
        const RunReport blocking = run(doc, true, &blocking_trace);
        doc["strategy"].erase("tp_async_backward");  // the default for Megatron's strategies: on
        const RunReport async = run(doc, true, &async_trace);
        const Config c = parse_config(doc, "t.json");
        const Workload w = make_workload(c.model.spec, layer_split(c), c.cluster.gpu);
        // The collectives' times, from the blocking run's backward (each alone on the links).
        double ar = 0, ag = 0, rs = 0;
        for (const auto& e : blocking_trace.ranks[0].events) {
            if (e.layer != 1) continue;
            const std::string_view op = e.op.name();
            if (op == "all_reduce") ar = e.duration;
            if (op == "all_gather") ag = e.duration;
            if (op == "reduce_scatter") rs = e.duration;
        }
        double saved = 0;
        for (const double g : {w.layer.attention_first_linear, w.layer.mlp_first_linear}) {
            REQUIRE(g > 0);
            saved += seq ? rs + 2 * g - std::max(g, ag) - std::max(g, rs) : std::min(ar, g);
        }
        REQUIRE((seq ? ag * rs : ar) > 0);
        CHECK(blocking.step_time - async.step_time == doctest::Approx(2 * saved).epsilon(1e-9));  // 2 layers
        // The same collectives' bytes but for the sequence-parallel input's second gather.
        auto count = [](const Trace& t, std::string_view op) {
            int n = 0;
            for (const auto& e : t.ranks[0].events) n += e.op.name() == op && e.layer >= 0;
            return n;
        };
        CHECK(count(async_trace, "all_reduce") == count(blocking_trace, "all_reduce"));
        CHECK(count(async_trace, "reduce_scatter") == count(blocking_trace, "reduce_scatter"));
        CHECK(count(async_trace, "all_gather") == count(blocking_trace, "all_gather") + (seq ? 4 : 0));
        // Layer 0's last backward block (attention), as it ends: the weight-gradient GEMM starts
        // with the collective, and the block ends with the later of the two.
        Event reduce, wgrad;
        for (const auto& e : async_trace.ranks[0].events) {
            if (e.layer != 0) continue;
            if (e.stream == Stream::comm && e.start >= reduce.start) reduce = e;
            if (e.stream == Stream::compute && e.start >= wgrad.start) wgrad = e;
        }
        CHECK(reduce.op.name() == std::string_view(seq ? "reduce_scatter" : "all_reduce"));
        CHECK(wgrad.op.name() == std::string_view("backward"));
        CHECK(wgrad.start == doctest::Approx(reduce.start));
        CHECK(wgrad.duration == doctest::Approx(w.layer.attention_first_linear));
    }
    // torchtitan's tensor parallelism (fsdp) blocks by default; given, the key is taken.
    json fsdp{{"cluster", realistic_cluster(1)},
              {"model", small_model(2)},
              {"training", {{"global_batch", 2}, {"micro_batch", 1}}},
              {"strategy", {{"name", "fsdp"}, {"tp", 4}, {"dp", 2}}}};
    CHECK_FALSE(tp_async_backward(parse_config(fsdp, "t.json").strategy));
    fsdp["strategy"]["tp_async_backward"] = true;
    CHECK(tp_async_backward(parse_config(fsdp, "t.json").strategy));
    json zero3 = pipeline("1f1b", 2, 4);
    zero3["cluster"] = ideal_cluster(1, 4);
    zero3["strategy"]["tp"] = 2;
    CHECK(tp_async_backward(parse_config(zero3, "t.json").strategy));
    zero3["strategy"]["zero_stage"] = 3;
    CHECK_FALSE(tp_async_backward(parse_config(zero3, "t.json").strategy));
    // Never where every backward is split (ZB-H1), nor where tp_comm_overlap pipelines the collectives.
    json zb = pipeline("zbh1", 2, 4);
    zb["cluster"] = ideal_cluster(1, 4);
    zb["strategy"]["tp"] = 2;
    zb["strategy"]["tp_async_backward"] = true;
    CHECK_FALSE(tp_async_backward(parse_config(zb, "t.json").strategy));
    zb["strategy"]["name"] = "1f1b";
    zb["strategy"]["sequence_parallel"] = true;
    CHECK(tp_async_backward(parse_config(zb, "t.json").strategy));
    zb["strategy"]["tp_comm_overlap"] = true;
    CHECK_FALSE(tp_async_backward(parse_config(zb, "t.json").strategy));
}

TEST_CASE("ZB-H1 with sequence parallelism: each weight-gradient pass gathers QKV's and fc1's inputs again") {
    // The zero-bubble schedules' Megatron-LM keeps the sharded input and gathers it, blocking, with
    // the deferred weight-gradient GEMM: two all-gathers per layer and microbatch in the W pass.
    json zb = pipeline("zbh1", 2, 4);
    zb["cluster"] = realistic_cluster(1);
    zb["strategy"]["tp"] = 4;
    zb["strategy"]["sequence_parallel"] = true;
    const int layers_here = 2, microbatches = 4;  // 4 layers over 2 stages
    auto weight_gathers = [](const Trace& t) {
        int n = 0;
        double seconds = 0;
        const auto& ev = t.ranks[0].events;
        for (std::size_t i = 0; i + 1 < ev.size(); ++i)
            // A gather on the compute stream followed by a weight-gradient GEMM of its layer.
            if (ev[i].op.name() == std::string_view("all_gather") && ev[i].stream == Stream::compute &&
                ev[i + 1].op.name() == std::string_view("backward_weight") && ev[i + 1].layer == ev[i].layer) {
                ++n;
                seconds += ev[i].duration;
            }
        return std::pair{n, seconds};
    };
    CHECK(weight_pass_gathers_input(parse_config(zb, "t.json").strategy));
    Trace with;
    run(zb, true, &with);
    const auto [n, seconds] = weight_gathers(with);
    CHECK(n == 2 * layers_here * microbatches);
    REQUIRE(seconds > 0);
    // The same gathers as the forward's, each tokens x hidden bytes over the tensor-parallel group.
    const Config c = parse_config(zb, "t.json");
    const Workload w = make_workload(c.model.spec, layer_split(c), c.cluster.gpu);
    for (const auto& e : with.ranks[0].events)
        if (e.op.name() == std::string_view("all_gather")) CHECK(e.bytes == doctest::Approx(w.layer.tp_bytes));
    // Without sequence parallelism, with tp_comm_overlap or DTensor's tensor parallelism: none.
    for (const auto& setting : std::vector<std::pair<std::string, json>>{
             {"sequence_parallel", false}, {"tp_comm_overlap", true}, {"zero_stage", 3}}) {
        const std::string& key = setting.first;
        json other = zb;
        other["strategy"][key] = setting.second;
        CAPTURE(key);
        CHECK_FALSE(weight_pass_gathers_input(parse_config(other, "t.json").strategy));
        Trace t;
        run(other, true, &t);
        CHECK(weight_gathers(t).first == 0);
    }
}

TEST_CASE("full recompute stops early in PyTorch's code: the MLP's last GEMM and its collective do not run again") {
    // Which code recomputes so: PyTorch's DDP and FSDP, ZeRO-3 inside pipeline stages (torchtitan);
    // not Megatron-LM, nor DeepSpeed's ZeRO-1/2 buckets; a given value wins.
    auto early = [](json doc) { return recompute_early_stop(parse_config(doc, "t.json").strategy); };
    json doc{{"cluster", realistic_cluster(1)},
             {"model", small_model(4)},
             {"training", {{"global_batch", 8}, {"micro_batch", 1}}},
             {"strategy", {{"name", "fsdp"}, {"dp", 4}, {"tp", 2}, {"sequence_parallel", true}, {"recompute", "full"}}}};
    CHECK(early(doc));
    json plain = doc;
    plain["strategy"] = {{"name", "ddp"}, {"dp", 8}, {"recompute", "full"}};
    CHECK(early(plain));
    plain["strategy"]["zero_stage"] = 2;
    CHECK_FALSE(early(plain));
    json mega = pipeline("1f1b", 2, 4);
    mega["strategy"]["recompute"] = "full";
    CHECK_FALSE(early(mega));
    mega["cluster"] = ideal_cluster(1, 4);
    mega["strategy"]["dp"] = 2;
    mega["strategy"]["zero_stage"] = 3;
    CHECK(early(mega));
    mega["strategy"]["recompute_early_stop"] = false;
    CHECK_FALSE(early(mega));
    json given = pipeline("megatron", 1, 4);
    given["strategy"] = {{"name", "megatron"}, {"recompute", "full"}, {"recompute_early_stop", true}};
    CHECK(early(given));

    // The MLP's recompute is its forward less fc2 and the residual add after it. GPT, h 2048, f
    // 8192, 1,024 tokens, tp 2 with sequence parallelism: fc2 is (1024 x 2048 x 4096) x 2 =
    // 17.18 GFLOPs of the MLP's 34.36; the add reads two and writes one h-wide tensor of 1024 / 2
    // tokens, 2 x 3 x 512 x 2048 = 6.29 MB, and the hidden dropout before it, PyTorch's eager
    // kernel, kDropoutForwardBytes an element of the same tensor.
    const Config c = parse_config(doc, "t.json");
    const Workload on = make_workload(c.model.spec, layer_split(c), c.cluster.gpu);
    json off_doc = doc;
    off_doc["strategy"]["recompute_early_stop"] = false;
    const Config off_c = parse_config(off_doc, "t.json");
    const Workload off = make_workload(off_c.model.spec, layer_split(off_c), off_c.cluster.gpu);
    CHECK(on.layer.recompute_early_stop);
    CHECK_FALSE(off.layer.recompute_early_stop);
    CHECK(off.layer.mlp_recompute.flops == doctest::Approx(off.layer.mlp_forward.flops));
    CHECK(off.layer.mlp_forward.flops == doctest::Approx(34.36e9).epsilon(1e-3));
    CHECK(on.layer.mlp_recompute.flops == doctest::Approx(17.18e9).epsilon(1e-3));
    CHECK(off.layer.mlp_recompute.bytes - on.layer.mlp_recompute.bytes == doctest::Approx((2.0 * 3 + kDropoutForwardBytes) * 512 * 2048));
    const double fc2 = c.cluster.gpu.gemm_seconds(1024, 2048, 4096, DType::bf16);
    CHECK(off.layer.mlp_recompute.seconds - on.layer.mlp_recompute.seconds ==
          doctest::Approx(fc2 + c.cluster.gpu.memory_seconds((2.0 * 3 + kDropoutForwardBytes) * 512 * 2048)));
    CHECK(on.layer.attention_recompute.seconds == doctest::Approx(on.layer.attention_forward.seconds));

    // In the run: one reduce-scatter fewer per layer and microbatch (fc2's), the gathers as
    // before, and a shorter step that still recomputes (more than without recompute).
    auto count = [](const Trace& t, std::string_view op) {
        return std::count_if(t.ranks[0].events.begin(), t.ranks[0].events.end(),
                             [&](const auto& e) { return e.op.name() == op; });
    };
    Trace t_on, t_off;
    const RunReport r_on = run(doc, true, &t_on), r_off = run(off_doc, true, &t_off);
    const int layers = 4, microbatches = 2;
    CHECK(count(t_off, "reduce_scatter") - count(t_on, "reduce_scatter") == layers * microbatches);
    CHECK(count(t_off, "all_gather") == count(t_on, "all_gather"));
    CHECK(r_on.step_time < r_off.step_time);
    json none = doc;
    none["strategy"]["recompute"] = "none";
    CHECK(run(none).step_time < r_on.step_time);
    // With the overlap (AsyncTP), the MLP's gather still pipelined with fc1's chunks, no scatter after.
    for (json* d : {&doc, &off_doc}) (*d)["strategy"]["tp_comm_overlap"] = true;
    Trace o_on, o_off;
    const RunReport ro_on = run(doc, true, &o_on), ro_off = run(off_doc, true, &o_off);
    CHECK(count(o_off, "reduce_scatter") - count(o_on, "reduce_scatter") == layers * microbatches);
    CHECK(count(o_off, "all_gather") == count(o_on, "all_gather"));
    CHECK(ro_on.step_time < ro_off.step_time);
}

TEST_CASE("float8 linears: the linears' GEMMs at the fp8 rate, the attention core at the model's") {
    // Pure compute: no GEMM overhead, no bandwidth limit, memory-bound work free.
    json cluster = ideal_cluster(1, 1);
    cluster["gpu"]["peak_tflops"] = {{"bf16", 1000}, {"fp8", 2000}};
    cluster["gpu"]["gemm"] = {{"overhead_us", 0}, {"bandwidth_fraction", 1}};
    json doc{{"cluster", cluster},
             {"model", small_model(2)},
             {"training", {{"global_batch", 1}, {"micro_batch", 1}}},
             {"strategy", {{"name", "megatron"}}}};
    const RunReport bf16 = run(doc);
    doc["strategy"]["fp8"] = "te";
    const RunReport te = run(doc);
    doc["strategy"]["fp8"] = "torchao";
    const RunReport torchao = run(doc);
    // Per layer and token: linears 24 h^2 FLOPs, the unfused attention core 4 s h (both products
    // over the whole s x s matrix): with h 2048 and s 1024 the core is 1/12 of the linears, and
    // halving the linears' time leaves (1/2 + 1/12) / (1 + 1/12) = 7/13 of the step.
    CHECK(te.step_time / bf16.step_time == doctest::Approx(7.0 / 13).epsilon(1e-6));
    CHECK(torchao.step_time / bf16.step_time == doctest::Approx(7.0 / 13).epsilon(1e-6));
    // The model's FLOPs do not change.
    CHECK(te.model_flops == doctest::Approx(bf16.model_flops));
}

TEST_CASE("float8 weight casts: once a step with Megatron-LM and Transformer Engine, every microbatch otherwise") {
    json cluster = realistic_cluster(1);
    cluster["gpu"]["peak_tflops"] = {{"bf16", 989.4}, {"fp8", 1978.9}};
    json doc{{"cluster", cluster},
             {"model", small_model(2)},
             {"training", {{"global_batch", 32}, {"micro_batch", 1}}},
             {"strategy", {{"name", "megatron"}, {"dp", 8}, {"fp8", "te"}}}};
    const Config config = parse_config(doc, "t.json");
    const Workload w = make_workload(config.model.spec, layer_split(config), config.cluster.gpu);
    // GPT: QKV, projection and the two MLP matrices, 12 h^2; a cast with its transpose, 4 bytes each.
    const double linear = 12.0 * 2048 * 2048;
    CHECK(w.layer.linear_params == doctest::Approx(linear));
    CHECK(w.layer.fp8_weight_cast.bytes == doctest::Approx(4 * linear));
    auto casts = [](const json& d) {
        Trace trace;
        run(d, true, &trace);
        const Config c = parse_config(d, "t.json");
        const double cast = make_workload(c.model.spec, layer_split(c), c.cluster.gpu).layer.fp8_weight_cast.bytes;
        int n = 0;
        for (const auto& e : trace.ranks[0].events)
            if (e.layer == 0 && e.bytes == cast) ++n;
        return n;
    };
    CHECK(casts(doc) == 1);  // 4 microbatches, the first casts
    // The fp8 weights and their transposes are kept: one byte each per linear parameter per layer.
    const RunReport cached = run(doc);
    doc["strategy"]["fp8"] = "none";
    const RunReport plain = run(doc);
    const double sbh = 1024.0 * 2048;
    CHECK(cached.rank_peaks[0] - plain.rank_peaks[0] == doctest::Approx(2 * 2 * linear - 2 * 7 * sbh));
    // PyTorch FSDP (Composer's amp_fp8) casts every microbatch; torchao forward and backward.
    doc["strategy"] = {{"name", "fsdp"}, {"dp", 8}, {"fp8", "te"}};
    CHECK(casts(doc) == 4);
    doc["strategy"]["fp8"] = "torchao";
    CHECK(casts(doc) == 8);
    // torchao's backward cast under Megatron-LM's data parallelism and in the pipelines too.
    doc["strategy"] = {{"name", "megatron"}, {"dp", 8}, {"fp8", "torchao"}};
    CHECK(casts(doc) == 8);
    doc["strategy"] = {{"name", "1f1b"}, {"pp", 2}, {"dp", 4}, {"fp8", "torchao"}};
    CHECK(casts(doc) == 16);  // 8 microbatches a pipeline
    doc["model"] = small_model(4);
    doc["strategy"]["name"] = "dualpipev";  // a scheduled pipeline: some backwards whole, some split
    CHECK(casts(doc) == 16);
}

TEST_CASE("recompute of some layers: every k-th (torchtitan), the first n of each stage (Megatron-LM's block)") {
    json doc{{"cluster", ideal_cluster(1, 2)},
             {"model", small_model(8)},
             {"training", {{"global_batch", 2}, {"micro_batch", 1}}},
             {"strategy", {{"name", "megatron"}, {"dp", 2}}}};
    const double none = run(doc).step_time;
    doc["strategy"]["recompute"] = "full";
    const double full = run(doc).step_time;
    REQUIRE(full > none);
    // Layers cost the same and add up: each recomputed layer adds 1/8 of full's extra time.
    doc["strategy"]["recompute_every"] = 2;
    CHECK(run(doc).step_time == doctest::Approx(none + (full - none) / 2).epsilon(1e-9));
    doc["strategy"]["recompute_every"] = 4;
    CHECK(run(doc).step_time == doctest::Approx(none + (full - none) / 4).epsilon(1e-9));
    doc["strategy"].erase("recompute_every");
    doc["strategy"]["recompute_num_layers"] = 3;
    CHECK(run(doc).step_time == doctest::Approx(none + 3 * (full - none) / 8).epsilon(1e-9));
    // Which layers: torchtitan's k-th, 2k-th, ... (1-based); Megatron's first n of each stage.
    auto recomputed = [](const json& d, int rank) {
        Trace trace;
        run(d, true, &trace);
        std::vector<int> layers;
        for (const auto& e : trace.ranks[static_cast<std::size_t>(rank)].events)
            if (e.op.name() == std::string_view("recompute") && e.batches.contains(0) &&
                std::find(layers.begin(), layers.end(), e.layer) == layers.end())
                layers.push_back(e.layer);
        std::sort(layers.begin(), layers.end());
        return layers;
    };
    doc["strategy"] = {{"name", "megatron"}, {"dp", 2}, {"recompute", "full"}, {"recompute_every", 3}};
    CHECK(recomputed(doc, 0) == std::vector<int>{2, 5});
    doc["strategy"] = {{"name", "1f1b"}, {"pp", 2}, {"recompute", "full"}, {"recompute_num_layers", 1}};
    CHECK(recomputed(doc, 0) == std::vector<int>{0});
    CHECK(recomputed(doc, 1) == std::vector<int>{4});
    doc["strategy"] = {{"name", "interleaved"}, {"pp", 2}, {"chunks", 2}, {"recompute", "full"}, {"recompute_num_layers", 1}};
    CHECK(recomputed(doc, 0) == std::vector<int>{0, 4});
    CHECK(recomputed(doc, 1) == std::vector<int>{2, 6});
}

TEST_CASE("a trace's memory by kind sums to the peak the run reports, with the same parts, for every strategy") {
    for (const char* file : {"llama3-8b-16xh100-ddp.json", "llama3-8b-16xh100-fsdp.json", "llama3-8b-16xh100-zero2.json",
                             "llama3-8b-8xh100-megatron.json", "llama3-70b-64xh100-zbh1.json",
                             "llama3-70b-64xh100-1f1b-fsdp.json"}) {
        INFO(file);
        const Config c = load_config(std::string(DTSIM_CONFIGS) + "/runs/" + file, {{"model.layers", "8"}});
        const hw::RunResult r = simulate(c, {.keep_trace = true});
        const Trace& t = r.trace;
        REQUIRE(t.memory_kinds.size() == kMemoryKinds);
        REQUIRE(r.report.peak.by_kind);
        double most = -1;
        int most_rank = -1;
        std::vector<double> parts;
        for (const auto& rank : t.ranks) {
            const std::size_t n = t.memory_samples(rank);
            REQUIRE(n > 0);
            CHECK(rank.memory_by_kind.size() == n * (1 + kMemoryKinds));
            for (std::size_t i = 0; i < n; ++i) {
                const double* s = rank.memory_by_kind.data() + i * (1 + kMemoryKinds);
                if (i > 0) CHECK(s[0] >= s[-static_cast<std::ptrdiff_t>(1 + kMemoryKinds)]);
                double total = 0;
                for (std::size_t k = 0; k < kMemoryKinds; ++k) total += s[1 + k];
                if (total > most) {
                    most = total;
                    most_rank = rank.rank;
                    parts.assign(s + 1, s + 1 + kMemoryKinds);
                }
            }
        }
        CHECK(most_rank == r.report.peak.rank);
        CHECK(most == doctest::Approx(r.report.peak.bytes).epsilon(1e-12));
        for (std::size_t k = 0; k < kMemoryKinds; ++k) CHECK(parts[k] == doctest::Approx((*r.report.peak.by_kind)[k]).epsilon(1e-12));
    }
}
