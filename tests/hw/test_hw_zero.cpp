// Sharded data parallelism against the ZeRO paper (Rajbhandari et al. 2020,
// sections 5 and 7): model states per GPU 16Ψ (DDP), 4Ψ + 12Ψ/N (ZeRO-1),
// 2Ψ + 14Ψ/N (ZeRO-2), 16Ψ/N (ZeRO-3 / FSDP full shard) bytes for Ψ
// parameters in mixed-precision Adam, as the simulation allocates them; and
// the communication volume per GPU of one step, in units of the parameter
// bytes moved per rank by a ring collective ((n-1)/n of the array): 2Ψ for
// DDP, ZeRO-1 and ZeRO-2 (a reduce-scatter and an all-gather, or one
// all-reduce), 3Ψ for ZeRO-3 (an all-gather in the forward, another in the
// backward, a reduce-scatter), 2Ψ for FSDP's SHARD_GRAD_OP. Hybrid sharding
// divides the states by the shard group (a node) only.
#include "dtsim/hw/collective_cost.hpp"
#include "dtsim/hw/run.hpp"
#include "fixtures.hpp"

#include <doctest/doctest.h>

#include <string>

using namespace dtsim;
using namespace dtsim::hw;
using json = nlohmann::json;
using namespace dtsim::hw::test;

namespace {

// No vocabulary: every parameter is in a layer, Ψ = layers x params_per_layer.
json data_parallel(const std::string& name, int nodes, int microbatches) {
    return {{"cluster", realistic_cluster(nodes)},
            {"model", {{"name", "small"}, {"layers", 4}, {"hidden", 1024}, {"heads", 16}, {"seq", 512}, {"vocab", 0}}},
            {"training", {{"global_batch", 8 * nodes * microbatches}, {"micro_batch", 1}}},
            {"strategy", {{"name", name}, {"dp", 8 * nodes}}}};
}

struct Measured {
    Config config;
    RunResult result;
    double psi = 0;  // parameters
};

Measured measure(const json& doc) {
    Measured m{parse_config(doc, "test.json"), {}, 0};
    m.result = simulate(m.config, {.keep_trace = true});
    m.psi = m.config.model.spec.layers * m.config.model.spec.params_per_layer();
    return m;
}

// DDP at a ZeRO stage with gradients in `grad`, one microbatch.
Measured measure_ddp(int nodes, int stage, const char* grad) {
    json doc = data_parallel("ddp", nodes, 1);
    doc["strategy"]["zero_stage"] = stage;
    doc["strategy"]["grad_dtype"] = grad;
    return measure(doc);
}

// Rank 0's bytes moved by its collectives, as a ring moves them: bus factor x S.
double moved(const Measured& m, int n) {
    double total = 0;
    for (const auto& e : m.result.trace.ranks[0].events) {
        const std::string op(e.op.name());
        if (op == "all_reduce") total += bus_factor(Collective::all_reduce, n) * e.bytes;
        if (op == "all_gather") total += bus_factor(Collective::all_gather, n) * e.bytes;
        if (op == "reduce_scatter") total += bus_factor(Collective::reduce_scatter, n) * e.bytes;
    }
    return total;
}

}  // namespace

// G bytes per gradient: 4 with fp32 gradients (the default, Megatron-LM's 18Ψ and 6Ψ + 12Ψ/N),
// 2 with grad_dtype bf16 (ZeRO's 16Ψ, 4Ψ+12Ψ/N, 2Ψ+14Ψ/N, 16Ψ/N). PyTorch's DDP (ZeRO-0) and
// FSDP make their gradients in the backward (none are held between steps): at the first forward
// they hold 14Ψ and 12Ψ/N (FSDP's fp32 shard is the master copy: no bf16 shard), all of it by the
// optimizer step.
TEST_CASE("model states per GPU as the simulation allocates them: (14+G)Ψ, (2+G)Ψ+12Ψ/N, 2Ψ+(12+G)Ψ/N, (12+G)Ψ/N") {
    for (const char* grad : {"fp32", "bf16"}) {
        const double G = std::string(grad) == "fp32" ? 4 : 2;
        CAPTURE(grad);
        for (int nodes : {1, 2}) {
            const double N = 8 * nodes;
            CAPTURE(N);
            for (int stage : {0, 1, 2}) {
                CAPTURE(stage);
                const Measured m = measure_ddp(nodes, stage, grad);
                // The first event (layer 0's forward) sees the model states plus layer 0's activations.
                const auto& first = m.result.trace.ranks[0].events.front();
                REQUIRE(first.op.name() == "forward");
                const double activations = layer_activation_bytes(m.config.model.spec, LayerSplit{});
                const double expected = stage == 0   ? (14 + G) * m.psi
                                        : stage == 1 ? (2 + G) * m.psi + 12 * m.psi / N
                                                     : 2 * m.psi + (12 + G) * m.psi / N;
                const double first_step = stage == 0 ? 14 * m.psi : expected;
                CHECK(first.memory - activations == doctest::Approx(first_step));
                for (const auto& e : m.result.trace.ranks[0].events)
                    if (e.op.name() == std::string_view("optimizer")) CHECK(e.memory == doctest::Approx(expected));
            }
            // FSDP: the first event is layer 0's all-gather, its unsharded bf16 weights allocated.
            json doc = data_parallel("fsdp", nodes, 1);
            doc["strategy"]["grad_dtype"] = grad;
            const Measured m = measure(doc);
            const auto& first = m.result.trace.ranks[0].events.front();
            REQUIRE(first.op.name() == "all_gather");
            const double layer_weights = 2 * m.config.model.spec.params_per_layer();
            CHECK(first.memory - layer_weights == doctest::Approx(12 * m.psi / N));
            for (const auto& e : m.result.trace.ranks[0].events)
                if (e.op.name() == std::string_view("optimizer")) CHECK(e.memory == doctest::Approx((12 + G) * m.psi / N));
        }
    }
}

TEST_CASE("gradients are reduced in their dtype: fp32 moves twice the bytes of bf16, weights are gathered in bf16") {
    for (const char* name : {"ddp", "fsdp"}) {
        CAPTURE(name);
        json doc = data_parallel(name, 1, 1);
        if (std::string(name) == "ddp") doc["strategy"]["zero_stage"] = 1;
        auto bytes = [&](const char* grad, const char* op) {
            doc["strategy"]["grad_dtype"] = grad;
            const Measured m = measure(doc);
            double total = 0;
            for (const auto& e : m.result.trace.ranks[0].events)
                if (e.op.name() == op) total += e.bytes;
            return total;
        };
        CHECK(bytes("fp32", "reduce_scatter") == doctest::Approx(2 * bytes("bf16", "reduce_scatter")));
        CHECK(bytes("fp32", "reduce_scatter") > 0);
        CHECK(bytes("fp32", "all_gather") == doctest::Approx(bytes("bf16", "all_gather")));
        CHECK(bytes("fp32", "all_gather") > 0);
    }
}

TEST_CASE("hybrid sharding keeps 12Ψ/8 (16Ψ/8 with its gradients) on 8-GPU nodes whatever the node count") {
    for (int nodes : {2, 4}) {
        json doc = data_parallel("fsdp", nodes, 1);
        doc["strategy"]["sharding"] = "hybrid";
        const Measured m = measure(doc);
        const auto& first = m.result.trace.ranks[0].events.front();
        const double layer_weights = 2 * m.config.model.spec.params_per_layer();
        CHECK(first.memory - layer_weights == doctest::Approx(12 * m.psi / 8));
        // ... and all-reduces each gradient shard across the nodes: Ψ/8 per layer per step.
        double across = 0;
        for (const auto& e : m.result.trace.ranks[0].events)
            if (e.op.name() == "all_reduce") across += e.bytes;
        CHECK(across == doctest::Approx(4 * m.psi / 8));  // fp32 gradient shards
    }
}

// In units of Ψ bf16 parameters. ZeRO's figures are for bf16 gradients; fp32 gradients (the
// default) double the gradients' share: DDP 4Ψ, ZeRO-1/2 3Ψ, ZeRO-3 4Ψ, SHARD_GRAD_OP 3Ψ.
TEST_CASE("communication volume per step: 2Ψ for DDP, ZeRO-1 and ZeRO-2, 3Ψ for ZeRO-3, 2Ψ for SHARD_GRAD_OP") {
    for (const char* grad : {"bf16", "fp32"}) {
        const double g = std::string(grad) == "fp32" ? 2 : 1;  // the gradients' bytes over bf16's
        CAPTURE(grad);
        for (int nodes : {1, 2}) {
            const int n = 8 * nodes;
            CAPTURE(n);
            // The unit: Ψ bf16 parameters, (n-1)/n of them through each rank.
            auto unit = [&](const Measured& m) { return bus_factor(Collective::all_gather, n) * 2 * m.psi; };
            for (int stage : {0, 1, 2}) {
                CAPTURE(stage);
                const Measured m = measure_ddp(nodes, stage, grad);
                // DDP all-reduces the gradients (2 x their bytes); ZeRO-1/2 reduce-scatter them and gather Ψ.
                CHECK(moved(m, n) / unit(m) == doctest::Approx(stage == 0 ? 2 * g : g + 1));
            }
            json doc = data_parallel("fsdp", nodes, 1);
            doc["strategy"]["grad_dtype"] = grad;
            const Measured full = measure(doc);
            CHECK(moved(full, n) / unit(full) == doctest::Approx(2 + g));
            doc["strategy"]["sharding"] = "grad_op";
            const Measured grad_op = measure(doc);
            CHECK(moved(grad_op, n) / unit(grad_op) == doctest::Approx(1 + g));
        }
    }
}

TEST_CASE("with gradient accumulation ZeRO-2 reduces every microbatch, ZeRO-1 once; SHARD_GRAD_OP holds the weights") {
    const int m = 4, n = 8;
    // bf16 gradients, so that gradients and weights are the same bytes (Ψ below).
    auto run = [&](json doc) {
        doc["strategy"]["grad_dtype"] = "bf16";
        return measure(doc);
    };
    json doc = data_parallel("ddp", 1, m);
    doc["strategy"]["zero_stage"] = 1;
    const Measured one = run(doc);
    doc["strategy"]["zero_stage"] = 2;
    const Measured two = run(doc);
    const double unit = bus_factor(Collective::all_gather, n) * 2 * one.psi;
    CHECK(moved(one, n) / unit == doctest::Approx(2));      // reduce-scatter Ψ, all-gather Ψ
    CHECK(moved(two, n) / unit == doctest::Approx(m + 1));  // reduce-scatter Ψ per microbatch, all-gather Ψ
    // ZeRO-2 never keeps the full gradients: its peak is below ZeRO-1's by about 2Ψ (1 - 1/N).
    CHECK(two.result.report.peak.bytes < one.result.report.peak.bytes);
    // SHARD_GRAD_OP keeps every layer's weights gathered from its forward to its backward: + 2Ψ (1 - 1/N) at the peak.
    const Measured full = run(data_parallel("fsdp", 1, 1));
    json g = data_parallel("fsdp", 1, 1);
    g["strategy"]["sharding"] = "grad_op";
    const Measured grad_op = run(g);
    CHECK(grad_op.result.report.peak.bytes > full.result.report.peak.bytes + 2 * full.psi * (1 - 1.0 / n) * 0.5);
}

// Megatron-LM's --overlap-param-gather: the weights are gathered layer by layer during the
// forward, each layer's forward starting after its own gather, the same bytes as after the step.
TEST_CASE("overlap_param_gather moves ZeRO-1's weight all-gather into the forward, layer by layer") {
    json doc = data_parallel("ddp", 2, 2);
    doc["strategy"]["zero_stage"] = 1;
    const Measured after = measure(doc);
    doc["strategy"]["overlap_param_gather"] = true;
    const Measured during = measure(doc);
    auto gathers = [](const Measured& m) {
        std::vector<Event> g;
        for (const auto& e : m.result.trace.ranks[0].events)
            if (e.op.name() == std::string_view("all_gather")) g.push_back(e);
        return g;
    };
    const auto one = gathers(after), per_layer = gathers(during);
    REQUIRE(one.size() == 1);
    REQUIRE(per_layer.size() == 4);  // one a layer
    double bytes = 0;
    for (const auto& e : per_layer) bytes += e.bytes;
    CHECK(bytes == doctest::Approx(one[0].bytes));
    // Each layer's first forward starts once its gather has ended.
    for (const auto& g : per_layer) {
        for (const auto& e : during.result.trace.ranks[0].events)
            if (e.op.name() == std::string_view("forward") && e.layer == g.layer) {
                CHECK(e.start >= g.end() - 1e-12);
                break;
            }
    }
    // Nothing is gathered after the optimizer step, and the step is shorter.
    CHECK(after.result.trace.ranks[0].events.back().op.name() == std::string_view("all_gather"));
    CHECK(during.result.trace.ranks[0].events.back().op.name() != std::string_view("all_gather"));
    CHECK(during.result.report.step_time < after.result.report.step_time);
}

TEST_CASE("overlap_param_gather is for the distributed optimizer (ZeRO-1/2), not FSDP nor ZeRO-0") {
    json doc = data_parallel("ddp", 1, 1);
    doc["strategy"]["overlap_param_gather"] = true;
    CHECK_THROWS_WITH_AS(parse_config(doc, "t.json"), doctest::Contains("$.strategy.overlap_param_gather: overlaps the "
                                                                        "distributed optimizer's weight all-gather"),
                         ConfigError);
    doc["strategy"]["name"] = "fsdp";
    CHECK_THROWS_WITH_AS(parse_config(doc, "t.json"), doctest::Contains("FSDP, which gathers each layer itself"),
                         ConfigError);
}
