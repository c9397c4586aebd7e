// dtsim plan (plan.hpp): the layouts enumerated on a space small enough to list by hand, the
// reasons layouts are rejected, the memory and step-time bounds against full simulations of
// every candidate (a bound above what the simulation finds would prune a layout that fits or is
// fastest), the best-first search against simulating everything, the same result on 1 and 3
// threads, a search split into shards and merged against one process's, and bad requests.
#include "dtsim/hw/plan.hpp"

#include "dtsim/hw/config.hpp"
#include "dtsim/hw/run.hpp"
#include "dtsim/sched/format.hpp"
#include "dtsim/sched/generators.hpp"
#include "fixtures.hpp"
#include "hw/runtime/plan_bounds.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using namespace dtsim::hw;
using dtsim::hw::test::json;

namespace {

// 8 H100-like GPUs on one node, a 4-layer model (16 heads, ffn 4 x 2048), 8 sequences a step.
json base_document(double hbm_GiB = 80) {
    json cluster = test::realistic_cluster(1);
    cluster["gpu"]["hbm_GiB"] = hbm_GiB;
    return {{"name", "plan test"},
            {"cluster", cluster},
            {"model", test::small_model(4, 32000)},
            {"training", {{"global_batch", 8}}},
            {"strategy", {{"name", "ddp"}, {"flash_attention", true}}}};
}

PlanRequest request_for(const json& doc, const std::vector<std::string>& space) {
    PlanRequest r;
    r.document = doc;
    r.file = "plan test";
    for (const auto& s : space) set_space(r.space, s);
    return r;
}

// The search the best-first, shard and headroom tests share: 8 GPUs of 3 GiB, 16 sequences, four
// strategies, three micro-batch sizes, two recompute policies, three ZeRO stages.
PlanRequest small_search() {
    json doc = base_document(3);
    doc["training"]["global_batch"] = 16;
    return request_for(doc, {"strategy=megatron,1f1b,interleaved,fsdp", "micro_batch=1,2,4", "recompute=none,full",
                             "zero_stage=0,1,3"});
}

bool label_has(const std::string& label, const char* part) { return label.find(part) != std::string::npos; }

std::vector<std::string> labels(const Enumeration& e) {
    std::vector<std::string> out;
    for (const auto& c : e.candidates) out.push_back(c.label);
    return out;
}

}  // namespace

TEST_CASE("enumeration: every megatron and 1f1b layout of 8 GPUs and 4 layers, listed by hand") {
    const auto e = enumerate_layouts(request_for(
        base_document(), {"strategy=megatron,1f1b", "recompute=none", "sequence_parallel=false", "zero_stage=0,1"}));
    // megatron: tp 1, 2, 4, 8 (dp 8, 4, 2, 1: 1, 2, 4 and 8 sequences a replica), micro_batch a
    // divisor of those, ZeRO 0 and 1: (1 + 2 + 3 + 4) x 2 = 20.
    // 1f1b: pp 2 and 4 (the divisors >= 2 of 4 layers) with tp 1, 2, 4, 8: tp 4 x pp 4, tp 8 x pp 2
    // and tp 8 x pp 4 pass the 8 GPUs (3 rejected); the others: tp1 pp2 dp4 (mb 1, 2), tp1 pp4 dp2
    // (1, 2, 4), tp2 pp2 dp2 (1, 2, 4), tp2 pp4 dp1 (1, 2, 4, 8), tp4 pp2 dp1 (1, 2, 4, 8): 16,
    // each with ZeRO 0 and 1: 32 + 6 rejected.
    CHECK(e.enumerated == 20 + 38);
    CHECK(e.rejected_total() == 6);
    CHECK(e.rejected.at(reject::gpus) == 6);
    REQUIRE(e.candidates.size() == 52);
    std::vector<std::string> expected;
    for (int tp : {1, 2, 4, 8})
        for (int zero : {0, 1})
            for (int mb = 1; mb <= tp; mb *= 2)
                expected.push_back(fmt::format("megatron tp={} pp=1 dp={} zero_stage={} micro_batch={} recompute=none",
                                               tp, 8 / tp, zero, mb));
    const std::vector<std::pair<int, int>> pipes = {{1, 2}, {1, 4}, {2, 2}, {2, 4}, {4, 2}};
    for (const auto& [tp, pp] : pipes)
        for (int zero : {0, 1}) {
            const int dp = 8 / (tp * pp);
            for (int mb = 1; mb <= 8 / dp; mb *= 2)
                expected.push_back(fmt::format("1f1b tp={} pp={} dp={} zero_stage={} micro_batch={} recompute=none",
                                               tp, pp, dp, zero, mb));
        }
    CHECK(labels(e) == expected);
    // The candidates' indices are their places in this order.
    for (std::size_t i = 0; i < e.candidates.size(); ++i) CHECK(e.candidates[i].index == i);
}

TEST_CASE("enumeration: the default space and its rejection reasons") {
    json doc = base_document();
    doc["model"]["heads"] = 12;  // tp 8 does not split 12 heads
    doc["model"]["hidden"] = 1536;
    const auto e = enumerate_layouts(request_for(doc, {"strategy=megatron", "recompute=none", "zero_stage=0"}));
    // tp 1, 2, 4, 8; sequence parallelism and its overlap where tp > 1: tp 1: 1 micro_batch;
    // tp 2: 2 x 3 (sp off; sp on, overlap off and on); tp 4: 3 x 3; tp 8: 4 x 3, all rejected.
    CHECK(e.enumerated == 1 + 6 + 9 + 12);
    CHECK(e.rejected.at(reject::tp_heads) == 12);
    CHECK(e.candidates.size() == 16);
    // A tp the node cannot hold, a pp the layers cannot take, micro-batches the batch cannot.
    const auto odd = enumerate_layouts(
        request_for(base_document(), {"strategy=1f1b", "tp=3,1", "pp=3,2", "micro_batch=3,1", "recompute=none", "sequence_parallel=false",
                                      "zero_stage=0"}));
    CHECK(odd.rejected.at(reject::tp_node) == 4);
    CHECK(odd.rejected.at(reject::pp_layers) == 2);
    CHECK(odd.rejected.at(reject::batch) == 1);
    REQUIRE(odd.candidates.size() == 1);
    CHECK(odd.candidates[0].label == "1f1b tp=1 pp=2 dp=4 zero_stage=0 micro_batch=1 recompute=none");
}

TEST_CASE("the memory bound counts the activations the first rank holds when its first backward starts") {
    // 4 layers; global batch 8 on dp 1 and micro_batch 1: 8 microbatches. Against the same layout
    // with one microbatch (global batch 1): the model states are the same, and the activations
    // differ by the forwards that run before the first backward, less one.
    json doc = base_document();
    const auto bound = [&](const std::string& name, int pp, int global_batch, int chunks = 0) {
        json d = doc;
        d["training"] = {{"global_batch", global_batch}, {"micro_batch", 1}};
        d["strategy"] = {{"name", name}, {"flash_attention", true}, {"tp", 8 / pp}, {"pp", pp}, {"dp", 1}};
        if (chunks > 0) d["strategy"]["chunks"] = chunks;
        return memory_lower_bound(parse_config(d, "plan test"));
    };
    json d = doc;
    d["strategy"] = {{"name", "1f1b"}, {"flash_attention", true}, {"tp", 4}, {"pp", 2}, {"dp", 1}};
    const Config c = parse_config(d, "plan test");
    const Workload w = make_workload(c.model.spec, layer_split(c), c.cluster.gpu);
    const double stage = 2 * w.layer.activation_bytes;  // 4 layers over 2 stages
    // 1F1B, pp 2: the warm-up forward and the first steady one, min(pp, m) = 2 of 8.
    CHECK(bound("1f1b", 2, 8) - bound("1f1b", 2, 1) == doctest::Approx(stage * (2 - 1)).epsilon(1e-6));
    // GPipe: all 8 forwards.
    CHECK(bound("gpipe", 2, 8) - bound("gpipe", 2, 1) == doctest::Approx(stage * (8 - 1)).epsilon(1e-6));
    // Interleaved, 2 chunks of 1 layer: rank 0 runs (pp - 1) x 2 + (chunks - 1) x pp + 1 = 5
    // forwards before its first backward (Megatron-LM's warm-up plus the first steady forward).
    CHECK(bound("interleaved", 2, 8, 2) - bound("interleaved", 2, 2, 2) ==
          doctest::Approx(w.layer.activation_bytes * (5 - 4)).epsilon(1e-6));

    // With full recompute a layer keeps its input (k) and its recompute allocates r before the
    // backward releases. ZB-H1, pp 2, 3 microbatches, 2 layers a stage; rank 0 runs
    // 0F0 0F1 0I0 0W0 0F2 0I1 0W1 0I2 0W2 and holds 2k, 4k, 4k + 2r (I0 keeps its recompute until
    // W0), 2k, 4k, 4k + 2r, 2k, 2k + 2r, 0: at most 4k + 2r. 1F1B: 2 forwards, then its first
    // backward's first layer's recompute, 4k + r.
    for (const char* name : {"zbh1", "1f1b"}) {
        json full = doc;
        full["training"] = {{"global_batch", 3}, {"micro_batch", 1}};
        full["strategy"] = {{"name", name}, {"flash_attention", true}, {"tp", 4}, {"pp", 2}, {"dp", 1},
                            {"recompute", "full"}};
        const Config f = parse_config(full, "plan test");
        const Workload fw = make_workload(f.model.spec, layer_split(f), f.cluster.gpu);
        const double k = fw.layer.activation_bytes, r = fw.layer.recompute_peak_bytes;
        REQUIRE(r > k);
        // The actions the plan walks: ZB-H1's generated schedule, 1F1B's own order.
        auto schedule = plan_bounds::generated_schedule(f);
        if (!schedule) schedule = plan_bounds::builtin_schedule(f);
        const std::string strategy = name;
        CAPTURE(strategy);
        CHECK(plan_bounds::activations_bound(f, fw, schedule ? &*schedule : nullptr,
                                             estimate_run_size(f, plan_bounds::kEstimate)) ==
              doctest::Approx(std::string_view(name) == "zbh1" ? 4 * k + 2 * r : 4 * k + r));
        CHECK(memory_lower_bound(f) <= simulate(f, {.keep_trace = false}).report.peak.bytes);
    }

    // The rank of the last stage also keeps each microbatch's logits (g) from its F to its B or I, and
    // holds the loss's temporaries on top while the loss runs (x forward, y backward). ZB-H1's rank 1
    // runs 1F0 1I0 1F1 1I1 1W0 1F2 1I2 1W1 1W2: 2k + g + x at the loss, then 2k + g, 2k + g + y,
    // 2k + 2r, 4k + 2r + g + x, 4k + 2r + g, 4k + 2r + g + y, 4k + 4r, 2k + 2r, ... 0.
    const auto zb = dtsim::sched::zb_h1(2, 3);
    EdgeWork e;
    e.logits_forward.seconds = 1;
    e.logits_activation_bytes = 100;
    e.loss_forward_extra_bytes = 30;
    e.loss_backward_extra_bytes = 20;
    const double k = 10, r = 5;
    CHECK(plan_bounds::most_held(zb, 1, {2, 2}, k, r, &e) == 4 * k + 2 * r + 100 + 30);
    CHECK(plan_bounds::most_held(zb, 1, {2, 2}, k, r, nullptr) == 4 * k + 4 * r);
    CHECK(plan_bounds::most_held(zb, 0, {2, 2}, k, r, nullptr) == 4 * k + 2 * r);
    // FSDP holds its root unit gathered all step, and SHARD_GRAD_OP each layer's gathered weights from
    // its forward through its backward: at the loss of the first microbatch, every layer's.
    json fsdp = doc;
    fsdp["training"] = {{"global_batch", 8}, {"micro_batch", 1}};
    double full_bound = 0;
    for (const char* sharding : {"full", "grad_op"}) {
        fsdp["strategy"] = {{"name", "fsdp"}, {"flash_attention", true}, {"sharding", sharding}};
        const Config f = parse_config(fsdp, "plan test");
        const Workload fw = make_workload(f.model.spec, layer_split(f), f.cluster.gpu);
        const double held =
            plan_bounds::activations_bound(f, fw, nullptr, estimate_run_size(f, plan_bounds::kEstimate));
        const double el = bytes_per_element(f.model.spec.dtype), layers = f.model.spec.layers;
        const std::string shard = sharding;
        CAPTURE(shard);
        if (shard == "full") {
            full_bound = held;
            CHECK(held == doctest::Approx(layers * fw.layer.activation_bytes + fw.edge.logits_activation_bytes +
                                          fw.edge.loss_forward_extra_bytes + el * fw.edge.embedding_params));
        } else {
            CHECK(held - full_bound == doctest::Approx(layers * el * fw.layer.params));
        }
        CHECK(memory_lower_bound(f) <= simulate(f, {.keep_trace = false}).report.peak.bytes);
    }

    // The built-in pipelines' last rank: 1F1B's 1F0 1B0 1F1 1B1 1F2 1B2 holds 2k + g + x at most (each
    // backward starts from 2k + g); GPipe's three forwards 3 (2k + g) + x.
    const auto one_f_one_b = dtsim::sched::one_f_one_b(2, 3);
    CHECK(plan_bounds::most_held(one_f_one_b, 1, {2, 2}, k, r, &e) == 2 * k + 100 + 30);
    CHECK(plan_bounds::most_held(dtsim::sched::gpipe(2, 3), 1, {2, 2}, k, r, &e) == 3 * (2 * k + 100) + 30);
    // Which the bounds walk for them: their own order (pipeline.cpp), none for one stage.
    json builtin = doc;
    builtin["training"] = {{"global_batch", 3}, {"micro_batch", 1}};
    for (const char* name : {"1f1b", "gpipe", "megatron"}) {
        const bool one_stage = std::string_view(name) == "megatron";
        builtin["strategy"] = {{"name", name}, {"flash_attention", true}, {"tp", one_stage ? 8 : 4},
                               {"pp", one_stage ? 1 : 2}, {"dp", 1}};
        const auto order = plan_bounds::builtin_schedule(parse_config(builtin, "plan test"));
        const std::string strategy = name;
        CAPTURE(strategy);
        if (strategy == "megatron") {
            CHECK_FALSE(order);
            continue;
        }
        REQUIRE(order);
        if (strategy == "1f1b") {
            CHECK(order->ranks == one_f_one_b.ranks);
            continue;
        }
        // GPipe's backwards from the last microbatch to the first (pipeline.cpp).
        using dtsim::sched::act::B;
        using dtsim::sched::act::F;
        for (int at = 0; at < 2; ++at)
            CHECK(order->ranks[static_cast<std::size_t>(at)] ==
                  std::vector{F(at, 0), F(at, 1), F(at, 2), B(at, 2), B(at, 1), B(at, 0)});
    }
}

TEST_CASE("the step-time bound adds userbuffers' margins as the simulation adds them") {
    // Megatron's tensor parallelism on one stage (every layer on the critical rank): per layer and
    // microbatch, the forward's first and last GEMMs' margins of both blocks, the backward's
    // gathered GEMMs' and the bulk overlaps' four (TE 2's defaults: 16 of 132 SMs), and with full
    // recompute the forward's again. Against the same layout with no SM count to take from.
    json doc = base_document();
    doc["cluster"]["gpu"]["sms"] = 132;
    doc["training"]["global_batch"] = 8;
    doc["strategy"] = {{"name", "megatron"}, {"tp", 4}, {"dp", 2}, {"sequence_parallel", true},
                       {"tp_comm_overlap", true}, {"flash_attention", true}};
    for (const char* recompute : {"none", "full"}) {
        doc["strategy"]["recompute"] = recompute;
        const Config c = parse_config(doc, "plan test");
        Config plain = c;
        plain.cluster.gpu.sms = 0;
        const auto& u = make_workload(c.model.spec, layer_split(c), c.cluster.gpu).layer.ub_margin;
        double per_layer = 0;
        for (double m : u) per_layer += m;
        if (std::string_view(recompute) == "full") per_layer += u[0] + u[1] + u[5] + u[6];
        CAPTURE(recompute);
        REQUIRE(per_layer > 0);
        const double layers = c.model.spec.layers, m = c.microbatches();
        CHECK(step_time_lower_bound(c) - step_time_lower_bound(plain) == doctest::Approx(m * layers * per_layer));
        CHECK(step_time_lower_bound(c) <= simulate(c, {.keep_trace = false}).report.step_time);
    }
    // ZB-H1 splits every backward: its bound leaves the bulk overlaps' margins out.
    doc["strategy"] = {{"name", "zbh1"}, {"tp", 2}, {"pp", 2}, {"dp", 2}, {"sequence_parallel", true},
                       {"tp_comm_overlap", true}, {"flash_attention", true}};
    doc["training"]["global_batch"] = 8;
    const Config z = parse_config(doc, "plan test");
    Config z_plain = z;
    z_plain.cluster.gpu.sms = 0;
    const Workload zw = make_workload(z.model.spec, layer_split(z), z.cluster.gpu);
    const auto& u = zw.layer.ub_margin;
    // The output layer's rank's chain of passes (the bound without its schedule's fill and drain).
    const double added = plan_bounds::step_time_bound(z, zw) -
                         plan_bounds::step_time_bound(z_plain, make_workload(z_plain.model.spec, layer_split(z_plain),
                                                                             z_plain.cluster.gpu));
    const double whole = u[0] + u[1] + u[2] + u[5] + u[6] + u[7];
    CHECK(added > 0);
    CHECK(added == doctest::Approx(whole * z.microbatches() * z.model.spec.layers / 2));  // 2 layers a stage
    CHECK(added < (whole + u[3] + u[4] + u[8] + u[9]) * z.microbatches() * z.model.spec.layers / 2);
    // Through the schedule's actions, F and I each with their margins (W none): more, and below the
    // simulation.
    CHECK(step_time_lower_bound(z) > step_time_lower_bound(z_plain));
    CHECK(step_time_lower_bound(z) <= simulate(z, {.keep_trace = false}).report.step_time);
}

TEST_CASE("a pipeline schedule's ranks run their actions one after another, each after the actions it needs") {
    // The 4-layer model on 2 stages: 2 layers each. Per layer F 1 s, B 2 s, I 1.5 s, W 0.5 s.
    json doc = base_document();
    doc["strategy"] = {{"name", "1f1b"}, {"pp", 2}, {"flash_attention", true}};
    const Config c = parse_config(doc, "plan test");
    Workload w = make_workload(c.model.spec, layer_split(c), c.cluster.gpu);
    for (Work* e : {&w.edge.embedding_forward, &w.edge.embedding_backward, &w.edge.logits_forward,
                    &w.edge.logits_backward, &w.edge.loss_forward, &w.edge.loss_backward})
        e->seconds = 0;
    const plan_bounds::ActionSeconds per_layer{.forward = 1, .backward = 2, .input = 1.5, .weight = 0.5};
    const auto read = [](const std::string& text) {
        std::istringstream in(text);
        return dtsim::sched::read_schedule_text(in, "s.txt");
    };
    // 1F1B, 2 microbatches. Rank 0: F0 [0, 2], F1 [2, 4]; rank 1: F0 [2, 4], B0 [4, 8], F1 [8, 10],
    // B1 [10, 14]; rank 0: B0 after rank 1's B0 [8, 12], B1 after rank 1's B1 [14, 18].
    const auto one_f_one_b = dtsim::sched::one_f_one_b(2, 2);
    CHECK(plan_bounds::schedule_ends(c, w, one_f_one_b, per_layer) == std::vector<double>{18, 14});
    // A split backward: rank 1 F [2, 4], I [4, 7], W [7, 8]; rank 0 I after rank 1's I [7, 10], W [10, 11].
    CHECK(plan_bounds::schedule_ends(c, w, read("rank 0: 0F0 0I0 0W0\nrank 1: 1F0 1I0 1W0\n"), per_layer) ==
          std::vector<double>{11, 8});
    // The model's edges on the first and last stage: embedding 0.25 s forward and backward, logits 0.5 s
    // and loss 0.125 s each way. Rank 0: F0 [0, 2.25], F1 [2.25, 4.5]; rank 1: F0 [2.25, 4.875], B0
    // [4.875, 9.5], F1 [9.5, 12.125], B1 [12.125, 16.75]; rank 0: B0 [9.5, 13.75], B1 [16.75, 21].
    w.edge.embedding_forward.seconds = w.edge.embedding_backward.seconds = 0.25;
    w.edge.logits_forward.seconds = w.edge.logits_backward.seconds = 0.5;
    w.edge.loss_forward.seconds = w.edge.loss_backward.seconds = 0.125;
    CHECK(plan_bounds::schedule_ends(c, w, one_f_one_b, per_layer) == std::vector<double>{21, 16.75});
    // Actions that wait for each other: none.
    CHECK(plan_bounds::schedule_ends(c, w, read("rank 0: 0F0 0B0\nrank 1: 1B0 1F0\n"), per_layer).empty());

    // In the plan's step-time bound: with as many microbatches as stages, the schedule's fill and
    // drain make the bound larger, and it stays below the simulation.
    json zb = base_document();
    zb["training"]["global_batch"] = 8;  // dp 4: 2 microbatches
    zb["strategy"] = {{"name", "zbh1"}, {"pp", 2}, {"flash_attention", true}};
    const Config z = parse_config(zb, "plan test");
    const Workload zw = make_workload(z.model.spec, layer_split(z), z.cluster.gpu);
    const auto schedule = plan_bounds::generated_schedule(z);
    REQUIRE(schedule);
    const double without = plan_bounds::step_time_bound(z, zw);
    const double with = plan_bounds::step_time_bound(z, zw, -1, &*schedule);
    // Its actions at their kernels alone (tp 1, no userbuffers): the bound is at least the latest
    // rank's end, and larger than without the schedule (here through the output layer's rank's end
    // and its optimizer step).
    const LayerWork& lw = zw.layer;
    const double redo = lw.attention_recompute.seconds + lw.mlp_recompute.seconds;
    const plan_bounds::ActionSeconds kernels{
        .forward = lw.attention_forward.seconds + lw.mlp_forward.seconds,
        .backward = redo + lw.attention_backward.seconds + lw.mlp_backward.seconds,
        .input = redo + lw.attention_backward_input.seconds + lw.mlp_backward_input.seconds,
        .weight = lw.attention_backward_weight.seconds + lw.mlp_backward_weight.seconds};
    const std::vector<double> ends = plan_bounds::schedule_ends(z, zw, *schedule, kernels);
    REQUIRE(ends.size() == 2);
    const double latest = *std::max_element(ends.begin(), ends.end()) * (1 - 1e-9);
    CHECK(with > without);
    CHECK(with >= latest);
    CHECK(with == step_time_lower_bound(z));
    const double simulated = simulate(z, {.keep_trace = false}).report.step_time;
    CHECK(with <= simulated);
}

TEST_CASE("the memory bound never rejects a layout that fits, and the step-time bound is below every simulation") {
    // Every layout of a 2-node-sized space on a GPU with room for all, simulated: each bound is at
    // most what the simulation finds, so a layout the memory bound rejects (bound > capacity) runs
    // out of memory in simulation too, and best-first stops only past layouts that cannot win.
    json doc = base_document();
    doc["training"]["global_batch"] = 16;
    const auto e = enumerate_layouts(request_for(
        doc, {"strategy=megatron,1f1b,interleaved,fsdp,gpipe,zbh1,bfs,dualpipev", "micro_batch=1,2",
              "recompute=none,selective,full", "tp_comm_overlap=false", "zero_stage=0,1,3"}));
    REQUIRE(e.candidates.size() > 60);
    PlanRequest req = request_for(doc, {});
    std::set<std::string> strategies;
    for (const auto& c : e.candidates) {
        const Config config = candidate_config(e, req, c);
        const RunReport r = simulate(config, {.keep_trace = false}).report;
        INFO(c.label);
        CHECK(c.memory_bound <= r.peak.bytes);
        CHECK(c.time_bound > 0);
        CHECK(c.time_bound <= r.step_time);
        strategies.insert(config.strategy.name);
    }
    CHECK(strategies.size() == 8);

    // With Transformer Engine's userbuffers (tp_comm_overlap under Megatron's strategies) on a GPU
    // with an SM count, the bound counts the time their default margins add to the GEMMs, and stays
    // below the simulation, whole backwards and split ones (zbh1, DualPipeV's last) alike; without an SM count to take
    // from, the same layouts' bounds are lower.
    json ub = doc;
    ub["cluster"]["gpu"]["sms"] = 132;
    const auto overlapped = enumerate_layouts(
        request_for(ub, {"strategy=megatron,1f1b,interleaved,zbh1,dualpipev", "micro_batch=1,2", "recompute=none,full",
                         "tp=2,4", "sequence_parallel=true", "tp_comm_overlap=true", "zero_stage=1"}));
    REQUIRE(overlapped.candidates.size() > 10);
    std::set<std::string> with_margins;
    for (const auto& c : overlapped.candidates) {
        const Config config = candidate_config(overlapped, request_for(ub, {}), c);
        REQUIRE(config.strategy.tp_comm_overlap);
        const RunReport r = simulate(config, {.keep_trace = false}).report;
        INFO(c.label);
        CHECK(c.time_bound <= r.step_time);
        Config without = config;
        without.cluster.gpu.sms = 0;
        if (step_time_lower_bound(without) < c.time_bound) with_margins.insert(config.strategy.name);
    }
    CHECK(with_margins == std::set<std::string>{"1f1b", "dualpipev", "interleaved", "megatron", "zbh1"});

    // A GPU small enough that the bound rejects some layouts: each of them runs out of memory.
    json tight = doc;
    tight["cluster"]["gpu"]["hbm_GiB"] = 1.5;
    const auto small = enumerate_layouts(request_for(
        tight, {"strategy=megatron,1f1b,fsdp", "micro_batch=1,2", "recompute=none,full", "tp_comm_overlap=false"}));
    const auto roomy = enumerate_layouts(request_for(
        doc, {"strategy=megatron,1f1b,fsdp", "micro_batch=1,2", "recompute=none,full", "tp_comm_overlap=false"}));
    std::set<std::string> kept;
    for (const auto& c : small.candidates) kept.insert(c.label);
    std::size_t dropped = 0;
    for (const auto& c : roomy.candidates) {
        if (kept.count(c.label)) continue;
        ++dropped;
        const RunReport r = simulate(candidate_config(small, request_for(tight, {}), c), {.keep_trace = false}).report;
        INFO(c.label);
        CHECK(r.oom.has_value());
    }
    CHECK(dropped > 0);
    CHECK(dropped == small.rejected.at(reject::states) + (small.rejected.count(reject::activations)
                                                               ? small.rejected.at(reject::activations)
                                                               : 0));
}

TEST_CASE("best first finds what simulating every candidate finds, on 1 and 3 threads alike") {
    PlanRequest req = small_search();
    const auto e = enumerate_layouts(req);
    REQUIRE(e.candidates.size() >= 20);
    // Every candidate simulated: the fitting ones, fastest first (ties in enumeration order).
    std::vector<std::pair<double, std::size_t>> all;
    for (const auto& c : e.candidates) {
        const RunReport r = simulate(candidate_config(e, req, c), {.keep_trace = false}).report;
        if (!r.oom) all.push_back({r.step_time, c.index});
    }
    REQUIRE(all.size() >= 3);
    std::sort(all.begin(), all.end());
    for (int top : {1, 3}) {
        req.top = top;
        req.jobs = 1;
        const PlanResult one = plan(req);
        req.jobs = 3;
        const PlanResult three = plan(req);
        CHECK(to_json(one, top, false).dump() == to_json(three, top, false).dump());
        REQUIRE(one.best.size() >= static_cast<std::size_t>(top));
        for (int i = 0; i < top; ++i) {
            const PlanRow& row = one.simulated[one.best[i]];
            CHECK(row.figures->step_time == all[i].first);
            CHECK(row.candidate == all[i].second);
        }
        CHECK(one.simulated.size() + one.pruned == e.candidates.size());
        CHECK(!one.budget_hit);
        if (top == 1) CHECK(one.pruned > 0);  // the bound saves simulations
    }
}

// Under the sanitizers, which run a search 9 to 13 times slower, one of the four splits (three shards:
// the same code as eight, a third of the searches).
#if defined(DTSIM_SANITIZE)
constexpr int kShardCounts[] = {3};
#else
constexpr int kShardCounts[] = {1, 2, 3, 8};
#endif

TEST_CASE("a search split into shards and merged is one process's search, row for row and count for count") {
    PlanRequest req = small_search();
    req.jobs = 2;
    for (int top : {1, 4}) {
        req.top = top;
        req.shard = 0;
        req.shards = 1;
        const PlanResult one = plan(req);
        REQUIRE(one.pruned > 0);  // the bound prunes, so the shards' own stops are exercised
        for (int n : kShardCounts) {
            std::vector<json> files;
            std::vector<std::string> names;
            std::size_t simulated = 0, share = 0;
            for (int i = n - 1; i >= 0; --i) {  // in any order
                PlanRequest part = req;
                part.shard = i;
                part.shards = n;
                const PlanResult r = plan(part);
                simulated += r.simulated.size();
                share += r.simulated.size() + r.pruned + r.left;
                // through text, as the files go
                files.push_back(json::parse(shard_to_json(r, part).dump()));
                names.push_back(fmt::format("shard-{}.json", i));
            }
            INFO("top ", top, ", ", n, " shards");
            CHECK(share == one.enumeration.candidates.size());  // each candidate in one share
            CHECK(simulated >= one.simulated.size());            // each shard stops no earlier
            const PlanResult merged = merge_shards(req, files, names);
            CHECK(merged.merged == n);
            CHECK(to_json(merged, static_cast<std::size_t>(top), false).dump() ==
                  to_json(one, static_cast<std::size_t>(top), false).dump());
            CHECK(merged.simulated.size() == one.simulated.size());
            CHECK(merged.pruned == one.pruned);
        }
    }

    // Shards that are not one search's are refused, naming the file and what is wrong.
    req.top = 4;
    std::vector<json> files;
    std::vector<std::string> names = {"a.json", "b.json"};
    for (int i = 0; i < 2; ++i) {
        PlanRequest part = req;
        part.shard = i;
        part.shards = 2;
        files.push_back(shard_to_json(plan(part), part));
    }
    PlanRequest other = req;
    other.top = 3;
    CHECK_THROWS_WITH_AS(merge_shards(other, files, names), doctest::Contains("a.json: $.fingerprint:"), PlanError);
    CHECK_THROWS_WITH_AS(merge_shards(req, {files[0], files[0]}, names), doctest::Contains("b.json: shard 0 of 2 again"),
                         PlanError);
    CHECK_THROWS_WITH_AS(merge_shards(req, {files[0]}, {"a.json"}), doctest::Contains("2 shards, but 1 shard files"),
                         PlanError);
    json cut = files[1];
    cut["rows"] = json::array();
    CHECK_THROWS_WITH_AS(merge_shards(req, {files[0], cut}, names), doctest::Contains("was not simulated, yet the search "
                                                                                      "needs it"),
                         PlanError);
    json bad = files[1];
    bad["rows"][0]["report"]["step_time_s"] = "fast";
    CHECK_THROWS_WITH_AS(merge_shards(req, {files[0], bad}, names),
                         doctest::Contains("b.json: $.rows[0].report.step_time_s: expected a number"), PlanError);
    PlanRequest wrong = req;
    wrong.shard = 2;
    wrong.shards = 2;
    CHECK_THROWS_AS(plan(wrong), PlanError);

    // A shard that stopped at its time budget: the merge ranks what was simulated and says so.
    json budget = files[1];
    budget["time_budget_reached"] = true;
    const PlanResult partial = merge_shards(req, {files[0], budget}, names);
    CHECK(partial.budget_hit);
    CHECK(partial.simulated.size() == files[0]["rows"].size() + files[1]["rows"].size());
    CHECK(partial.left == partial.enumeration.candidates.size() - partial.simulated.size());
}

// --headroom: a layout fits when its peak leaves the headroom free. Against every candidate
// simulated: the search's best are the fastest of those whose peak is at most the capacity less the
// headroom; the memory bound rejects against that limit (never a layout whose simulation stays within
// it); the rows that ran into the headroom are counted apart; shards merge to the same answer.
TEST_CASE("a headroom: the fastest layouts that leave it free, as simulating every candidate finds them") {
    PlanRequest req = small_search();
    const auto e = enumerate_layouts(req);
    const double capacity = 3 * kGiB;
    std::vector<std::pair<double, double>> peaks;  // (peak, step time) of each candidate that fits the GPU
    std::map<std::string, double> peak_of;
    for (const auto& c : e.candidates) {
        const RunReport r = simulate(candidate_config(e, req, c), {.keep_trace = false}).report;
        if (!r.oom) peaks.push_back({r.peak.bytes, r.step_time});
        peak_of[c.label] = r.oom ? capacity + 1 : r.peak.bytes;
    }
    REQUIRE(peaks.size() >= 6);
    // The headroom leaves the smaller half of the fitting peaks.
    std::vector<double> sorted;
    for (const auto& [peak, t] : peaks) sorted.push_back(peak);
    std::sort(sorted.begin(), sorted.end());
    const double limit = sorted[sorted.size() / 2];
    req.headroom = capacity - limit;
    std::vector<double> within;  // step times of the layouts whose peak leaves the headroom free, fastest first
    for (const auto& [peak, t] : peaks)
        if (peak <= limit) within.push_back(t);
    std::sort(within.begin(), within.end());
    REQUIRE(within.size() >= 3);
    REQUIRE(within.size() < peaks.size());

    const auto h = enumerate_layouts(req);
    // The bound rejects against the limit, and only layouts that do not stay within it.
    CHECK(h.candidates.size() < e.candidates.size());
    CHECK((h.rejected.count(reject::states_headroom) + h.rejected.count(reject::activations_headroom)) > 0);
    CHECK(h.rejected.count(reject::states) + h.rejected.count(reject::activations) == 0);
    std::set<std::string> kept;
    for (const auto& c : h.candidates) kept.insert(c.label);
    for (const auto& entry : peak_of)  // (clang 14 cannot capture a structured binding in CHECK_MESSAGE)
        if (entry.second <= limit) CHECK_MESSAGE(kept.count(entry.first) == 1, entry.first);

    for (int top : {1, 3}) {
        req.top = top;
        req.jobs = 2;
        const PlanResult r = plan(req);
        INFO("top ", top);
        REQUIRE(r.best.size() >= static_cast<std::size_t>(top));
        for (int i = 0; i < top; ++i) CHECK(r.simulated[r.best[i]].figures->step_time == within[i]);
        for (const std::size_t b : r.best) CHECK(r.simulated[b].figures->peak_bytes <= limit);
        std::size_t into = 0;
        for (const auto& row : r.simulated) {
            const bool over = row.figures && !row.figures->oom && row.figures->peak_bytes > limit;
            CHECK(row.over_headroom == over);
            into += over ? 1 : 0;
        }
        CHECK(r.over_headroom == into);
        CHECK(r.best.size() + r.out_of_memory + r.over_headroom + r.failed == r.simulated.size());
        const json j = to_json(r, static_cast<std::size_t>(top), false);
        CHECK(j["headroom_bytes"] == req.headroom);
        CHECK(j["counts"]["over_headroom_in_simulation"] == into);

        // Two shards merged: the same answer, row for row.
        std::vector<json> files;
        for (int i = 0; i < 2; ++i) {
            PlanRequest part = req;
            part.shard = i;
            part.shards = 2;
            files.push_back(json::parse(shard_to_json(plan(part), part).dump()));
        }
        const PlanResult merged = merge_shards(req, files, {"a.json", "b.json"});
        CHECK(to_json(merged, static_cast<std::size_t>(top), false).dump() == j.dump());
        // Shards of the search without the headroom are another search's.
        PlanRequest without = req;
        without.headroom = 0;
        CHECK_THROWS_WITH_AS(merge_shards(without, files, {"a.json", "b.json"}),
                             doctest::Contains("a.json: $.fingerprint:"), PlanError);
    }

    // A headroom of the whole capacity, or below zero, is refused.
    req.headroom = capacity;
    CHECK_THROWS_WITH_AS(enumerate_layouts(req), doctest::Contains("--headroom 3 GiB: expected at least 0 and below "
                                                                   "the GPU's 3 GiB"),
                         PlanError);
    req.headroom = -1;
    CHECK_THROWS_AS(enumerate_layouts(req), PlanError);
}

TEST_CASE("fp8 is searched only when asked for, each layout with each recipe") {
    json doc = base_document();
    // fp8 needs the GPU's fp8 peak (H100 SXM, dense: NVIDIA's H100 datasheet).
    doc["cluster"]["gpu"]["peak_tflops"]["fp8"] = 1978.9;
    const std::vector<std::string> space = {"strategy=megatron", "recompute=none", "sequence_parallel=false",
                                            "zero_stage=1"};
    const auto plain = enumerate_layouts(request_for(doc, space));
    auto with = space;
    with.push_back("fp8=none,te");
    const auto both = enumerate_layouts(request_for(doc, with));
    REQUIRE(!plain.candidates.empty());
    CHECK(both.enumerated == 2 * plain.enumerated);
    // Each layout without fp8 as before; with Transformer Engine's where it passes the checks
    // (fp8 GEMMs priced faster: a lower step-time bound for the same layout).
    std::map<std::string, double> bound;
    for (const auto& c : both.candidates) bound[c.label] = c.time_bound;
    std::size_t with_te = 0;
    for (const auto& c : plain.candidates) {
        INFO(c.label);
        REQUIRE(bound.count(c.label + " fp8=none") == 1);
        CHECK(bound[c.label + " fp8=none"] == c.time_bound);
        if (bound.count(c.label + " fp8=te")) {
            ++with_te;
            CHECK(bound[c.label + " fp8=te"] < c.time_bound);
        }
    }
    CHECK(with_te > 0);
    CHECK(both.candidates.size() == plain.candidates.size() + with_te);
    PlanRequest twice = request_for(doc, with);
    twice.overrides = {{"strategy.fp8", "\"te\""}};
    CHECK_THROWS_WITH_AS(enumerate_layouts(twice), doctest::Contains("fp8 is searched here"), PlanError);
}

TEST_CASE("cp_comm is searched only when asked for, each layout of cp > 1 with each exchange") {
    const json doc = base_document();
    const std::vector<std::string> space = {"strategy=fsdp,megatron", "cp=1,2", "tp=1", "recompute=none",
                                            "zero_stage=1,3", "micro_batch=1"};
    const auto plain = enumerate_layouts(request_for(doc, space));
    auto with = space;
    with.push_back("cp_comm=ring,allgather");
    const auto both = enumerate_layouts(request_for(doc, with));
    std::size_t split = 0, whole = 0;
    for (const auto& c : plain.candidates) (c.label.find(" cp=2") != std::string::npos ? split : whole) += 1;
    REQUIRE(split > 0);
    REQUIRE(whole > 0);
    // Layouts without context parallelism once, as before; those with it once per exchange.
    CHECK(both.candidates.size() == whole + 2 * split);
    std::set<std::string> labels_with;
    for (const auto& c : both.candidates) labels_with.insert(c.label);
    for (const auto& c : plain.candidates) {
        INFO(c.label);
        const auto at = c.label.find(" cp=2");
        if (at == std::string::npos) {
            CHECK(labels_with.count(c.label) == 1);
            continue;
        }
        for (const char* comm : {" cp_comm=ring", " cp_comm=allgather"}) {
            std::string label = c.label;
            label.insert(at + 5, comm);
            CHECK(labels_with.count(label) == 1);
        }
    }
    // Each layout's bounds hold by either exchange: simulated, no peak below its memory bound, no
    // step shorter than its time bound.
    const PlanRequest req = request_for(doc, with);
    for (const auto& c : both.candidates) {
        if (c.label.find(" cp_comm=") == std::string::npos) continue;
        INFO(c.label);
        const RunReport r = simulate(candidate_config(both, req, c), {.keep_trace = false}).report;
        CHECK(c.memory_bound <= r.peak.bytes);
        if (!r.oom) CHECK(c.time_bound <= r.step_time);
    }
    // Each candidate's config carries its exchange.
    for (const auto& c : both.candidates) {
        if (c.label.find("cp_comm=allgather") == std::string::npos) continue;
        const auto it = std::find_if(c.overrides.begin(), c.overrides.end(),
                                     [](const Override& o) { return o.path == "strategy.cp_comm"; });
        REQUIRE(it != c.overrides.end());
        CHECK(it->value == "\"allgather\"");
    }
    PlanRequest twice = request_for(doc, with);
    twice.overrides = {{"strategy.cp_comm", "\"ring\""}};
    CHECK_THROWS_WITH_AS(enumerate_layouts(twice), doctest::Contains("cp_comm is searched here"), PlanError);
    // Without a layout of cp > 1 it would search nothing: said.
    for (const char* cp : {"", "cp=1"}) {
        std::vector<std::string> none = {"strategy=fsdp", "cp_comm=ring,allgather"};
        if (*cp) none.emplace_back(cp);
        CHECK_THROWS_WITH_AS(enumerate_layouts(request_for(doc, none)),
                             doctest::Contains("--space cp_comm: no layout searched has cp > 1"), PlanError);
    }
    PlanSpace s;
    CHECK_THROWS_WITH_AS(set_space(s, "cp_comm=p2p"),
                         doctest::Contains("--space cp_comm: 'p2p' is not a context-parallel exchange (expected ring or "
                                           "allgather)"),
                         PlanError);
}

TEST_CASE("compile is searched only when asked for: each layout eager and compiled") {
    json doc = base_document();
    doc["model"]["mlp"] = "swiglu";
    doc["model"]["ffn"] = 5632;
    doc["model"]["dropout"] = false;
    const std::vector<std::string> space = {"strategy=fsdp,megatron", "recompute=none", "sequence_parallel=false",
                                            "zero_stage=1,3"};
    const auto plain = enumerate_layouts(request_for(doc, space));
    auto with = space;
    with.push_back("compile=false,true");
    const auto both = enumerate_layouts(request_for(doc, with));
    REQUIRE(!plain.candidates.empty());
    CHECK(both.enumerated == 2 * plain.enumerated);
    std::map<std::string, const Candidate*> by_label;
    for (const auto& c : both.candidates) by_label[c.label] = &c;
    for (const auto& c : plain.candidates) {
        INFO(c.label);
        REQUIRE(by_label.count(c.label + " eager") == 1);
        REQUIRE(by_label.count(c.label + " compile") == 1);
        // Eager is the config's own; compiled blocks price their memory-bound work otherwise and keep
        // less than PyTorch's eager modules (a SwiGLU model: no product of the gate), as much as
        // Megatron-Core's fused SwiGLU. FSDP's bound over 8 GPUs is its communication stream's, the
        // same compiled or not.
        CHECK(by_label[c.label + " eager"]->time_bound == c.time_bound);
        if (c.label.starts_with("megatron")) {
            CHECK(by_label[c.label + " compile"]->time_bound != c.time_bound);
            CHECK(by_label[c.label + " compile"]->memory_bound == doctest::Approx(c.memory_bound));
        } else {
            CHECK(by_label[c.label + " compile"]->memory_bound < c.memory_bound);
        }
    }
    PlanRequest twice = request_for(doc, with);
    twice.overrides = {{"strategy.compile", "true"}};
    CHECK_THROWS_WITH_AS(enumerate_layouts(twice), doctest::Contains("compile is searched here"), PlanError);
    CHECK_THROWS_WITH_AS(enumerate_layouts(request_for(doc, {"compile=maybe"})), doctest::Contains("--space compile"),
                         PlanError);
}

TEST_CASE("partial recompute is searched when asked, and the bounds hold for it") {
    json doc = base_document();
    doc["training"]["global_batch"] = 16;
    const auto e = enumerate_layouts(request_for(
        doc, {"strategy=megatron,1f1b,interleaved,fsdp", "micro_batch=1,2", "recompute=none,full",
              "recompute_num_layers=all,1", "recompute_every=2", "tp_comm_overlap=false", "zero_stage=1,3"}));
    PlanRequest req = request_for(doc, {});
    std::size_t first_n = 0, every_k = 0;
    for (const auto& c : e.candidates) {
        const bool n = c.label.find(" recompute_num_layers=1") != std::string::npos;
        const bool k = c.label.find(" recompute_every=2") != std::string::npos;
        CHECK(!(n && k));
        if (c.label.find("recompute=none") != std::string::npos) CHECK((!n && !k));
        first_n += n ? 1 : 0;
        every_k += k ? 1 : 0;
        const RunReport r = simulate(candidate_config(e, req, c), {.keep_trace = false}).report;
        INFO(c.label);
        CHECK(c.memory_bound <= r.peak.bytes);
        if (!r.oom) CHECK(c.time_bound <= r.step_time);
    }
    CHECK(first_n > 0);
    CHECK(every_k > 0);
    PlanSpace bad;
    CHECK_THROWS_WITH_AS(set_space(bad, "recompute_every=0"), doctest::Contains("--space recompute_every: '0'"),
                         PlanError);
}

TEST_CASE("uneven stages are searched when asked: pp need not divide the layers, and the bounds hold") {
    // 6 layers: pp 4 splits them only unevenly (first and last stage one layer, the middle two
    // two each), which even stages cannot.
    json doc = base_document();
    doc["model"] = test::small_model(6, 32000);
    doc["training"]["global_batch"] = 16;
    const std::vector<std::string> space = {"strategy=1f1b,interleaved,megatron", "tp=1,2", "micro_batch=1,2",
                                            "recompute=none", "sequence_parallel=false", "zero_stage=1,3"};
    const auto even = enumerate_layouts(request_for(doc, space));
    for (const auto& c : even.candidates) {
        CHECK(c.label.find("stage_layers") == std::string::npos);
        CHECK(c.label.find(" pp=4 ") == std::string::npos);
    }
    auto with = space;
    with.push_back("first_stage_layers=even,1");
    with.push_back("last_stage_layers=even,1");
    const PlanRequest req = request_for(doc, with);
    const auto e = enumerate_layouts(req);
    // Every even layout again, each once, and the uneven ones beside them.
    const std::vector<std::string> listed = labels(e);
    const std::set<std::string> all(listed.begin(), listed.end());
    CHECK(all.size() == e.candidates.size());
    for (const auto& c : even.candidates) CHECK(all.count(c.label) == 1);
    std::size_t uneven = 0, pp4 = 0;
    for (const auto& c : e.candidates) {
        INFO(c.label);
        const bool u = c.label.find("stage_layers=") != std::string::npos;
        uneven += u ? 1 : 0;
        pp4 += c.label.find(" pp=4 ") != std::string::npos ? 1 : 0;
        if (c.label.starts_with("megatron")) CHECK_FALSE(u);  // one stage: nothing to split
        const RunReport r = simulate(candidate_config(e, req, c), {.keep_trace = false}).report;
        CHECK(c.memory_bound <= r.peak.bytes);
        if (!r.oom) CHECK(c.time_bound <= r.step_time);
    }
    CHECK(uneven > 0);
    CHECK(pp4 > 0);
    // The search's answer is the best of every candidate simulated.
    PlanRequest top = req;
    top.top = 3;
    const PlanResult best = plan(top);
    REQUIRE(best.best.size() >= 3);
    double fastest = 1e300;
    for (const auto& c : e.candidates) {
        const RunReport r = simulate(candidate_config(e, req, c), {.keep_trace = false}).report;
        if (!r.oom) fastest = std::min(fastest, r.step_time);
    }
    CHECK(best.simulated[best.best.front()].figures->step_time == fastest);
    PlanSpace bad;
    CHECK_THROWS_WITH_AS(set_space(bad, "first_stage_layers=0"), doctest::Contains("--space first_stage_layers: '0'"),
                         PlanError);
}

TEST_CASE("microbatch_group is searched only when asked for, and the bounds hold for each group") {
    json doc = base_document();
    doc["training"]["global_batch"] = 16;
    const std::vector<std::string> space = {"strategy=megatron,interleaved", "pp=2", "chunks=2", "micro_batch=1,2",
                                            "recompute=none", "sequence_parallel=false", "zero_stage=1"};
    const auto plain = enumerate_layouts(request_for(doc, space));
    for (const auto& c : plain.candidates) CHECK(c.label.find("microbatch_group") == std::string::npos);
    auto with = space;
    with.push_back("microbatch_group=pp,1,2,4,5,64");
    const PlanRequest req = request_for(doc, with);
    const auto e = enumerate_layouts(req);
    const auto count = [&](const char* strategy) {
        auto alone = space;
        alone[0] = std::string("strategy=") + strategy;
        return enumerate_layouts(request_for(doc, alone)).enumerated;
    };
    // megatron takes no group: its layouts as before; each interleaved layout with each of 6 groups.
    REQUIRE(count("interleaved") > 0);
    CHECK(e.enumerated == count("megatron") + 6 * count("interleaved"));
    // Groups below pp (1), above the microbatches (64) or leaving a last group of fewer than pp
    // microbatches (5 of 8: 3 >= 2 passes; of 16: 1 < 2 fails) are the schedule's rejections.
    REQUIRE(e.rejected.count(reject::schedule) == 1);
    std::map<std::string, const Candidate*> by_label;
    for (const auto& c : e.candidates) by_label[c.label] = &c;
    for (const auto& c : plain.candidates) {
        INFO(c.label);
        REQUIRE(by_label.count(c.label) == 1);  // the default group ("pp") as before, its bounds too
        CHECK(by_label[c.label]->time_bound == c.time_bound);
        CHECK(by_label[c.label]->memory_bound == c.memory_bound);
        if (c.label.starts_with("interleaved")) {
            CHECK(by_label.count(c.label + " microbatch_group=1") == 0);
            CHECK(by_label.count(c.label + " microbatch_group=64") == 0);
            REQUIRE(by_label.count(c.label + " microbatch_group=2") == 1);  // g = pp: the default's schedule
            CHECK(by_label[c.label + " microbatch_group=2"]->memory_bound == c.memory_bound);
        }
    }
    // Each candidate simulated: the group is the one its label names, and the bounds hold.
    std::set<int> groups;
    for (const auto& c : e.candidates) {
        const Config config = candidate_config(e, req, c);
        const RunReport r = simulate(config, {.keep_trace = false}).report;
        INFO(c.label);
        const auto at = c.label.find(" microbatch_group=");
        CHECK(config.strategy.microbatch_group ==
              (at == std::string::npos ? 0 : std::stoi(c.label.substr(at + 18))));
        groups.insert(config.strategy.microbatch_group);
        CHECK(c.memory_bound <= r.peak.bytes);
        if (!r.oom) CHECK(c.time_bound <= r.step_time);
    }
    CHECK(groups == std::set<int>{0, 2, 4, 5});
    PlanSpace bad;
    CHECK_THROWS_WITH_AS(set_space(bad, "microbatch_group=0"), doctest::Contains("--space microbatch_group: '0'"),
                         PlanError);
    PlanRequest twice = request_for(doc, with);
    twice.overrides = {{"strategy.microbatch_group", "4"}};
    CHECK_THROWS_WITH_AS(enumerate_layouts(twice), doctest::Contains("--space microbatch_group=..."), PlanError);
}

TEST_CASE("schedule files are searched when asked, each at the sizes it fixes, and the bounds hold") {
    // 8 GPUs, 4 layers, 16 sequences: a 4-rank, 8-microbatch file runs at dp 1 (tp 2, micro-batch 2)
    // or dp 2 (tp 1, micro-batch 1). The interleaved file's 8 stages do not divide the 4 layers.
    json doc = base_document();
    doc["training"]["global_batch"] = 16;
    const std::string dir = std::string(DTSIM_CONFIGS) + "/schedules/";
    const std::string zbh1 = dir + "zbh1_p4_m8.txt", onef1b = dir + "1f1b_p4_m8.csv",
                      looped = dir + "interleaved_p4_m8_v2.csv";
    const std::vector<std::string> space = {"strategy=1f1b,zbh1", "tp=1,2", "recompute=none,full",
                                            "sequence_parallel=false", "zero_stage=1"};
    auto with = space;
    with.push_back(fmt::format("schedule_file={},{},{}", zbh1, onef1b, looped));
    const PlanRequest req = request_for(doc, with);
    const auto e = enumerate_layouts(req);
    const auto plain = enumerate_layouts(request_for(doc, space));
    // The strategies' own layouts as before; each file's at pp 4 only, with its micro-batch.
    std::map<std::string, const Candidate*> by_label;
    for (const auto& c : e.candidates) by_label[c.label] = &c;
    for (const auto& c : plain.candidates) REQUIRE(by_label.count(c.label) == 1);
    std::vector<std::string> files;
    for (const auto& c : e.candidates)
        if (c.label.starts_with("schedule ")) files.push_back(c.label);
    // 2 files x (tp 1: dp 2, tp 2: dp 1) x 2 recompute policies.
    CHECK(files.size() == 8);
    CHECK(e.candidates.size() == plain.candidates.size() + files.size());
    CHECK(e.rejected.at(reject::schedule_layers) == 4);  // the interleaved file's 4
    for (const auto& label : files) {
        INFO(label);
        CHECK(label.find(" pp=4 ") != std::string::npos);
        const bool dp1 = label.find(" dp=1 ") != std::string::npos;
        CHECK(label.find(dp1 ? " micro_batch=2 " : " micro_batch=1 ") != std::string::npos);
    }
    // Each simulated: the bounds hold, and the zbh1 and 1F1B files run as their generated schedules do
    // (the files are the generators' output).
    std::size_t same = 0;
    for (const auto& c : e.candidates) {
        const Config config = candidate_config(e, req, c);
        const RunReport r = simulate(config, {.keep_trace = false}).report;
        INFO(c.label);
        CHECK(c.memory_bound <= r.peak.bytes);
        if (!r.oom) CHECK(c.time_bound <= r.step_time);
        if (!c.label.starts_with("schedule ")) continue;
        CHECK(config.strategy.name == "schedule");
        const bool is_zbh1 = c.label.starts_with("schedule " + zbh1);
        CHECK(config.strategy.schedule_file == (is_zbh1 ? zbh1 : onef1b));
        std::string generated = c.label;
        generated.replace(0, ("schedule " + (is_zbh1 ? zbh1 : onef1b)).size(), is_zbh1 ? "zbh1" : "1f1b");
        REQUIRE(by_label.count(generated) == 1);
        const RunReport g =
            simulate(candidate_config(e, req, *by_label[generated]), {.keep_trace = false}).report;
        CHECK(r.step_time == g.step_time);
        CHECK(r.peak.bytes == g.peak.bytes);
        // The memory bound too: a file's ranks run the actions its generated schedule's run.
        // The step-time bound is at most the generated one's, both through the same actions: the
        // file's counts no tensor-parallel collective after a backward block (which Megatron's
        // asynchronous backward runs beside GEMMs: a file may split its backwards or not), where
        // ZB-H1's, whose backwards are split, does, and 1F1B's chain adds its looped fill and drain.
        CHECK(c.memory_bound == by_label[generated]->memory_bound);
        CHECK(c.time_bound <= by_label[generated]->time_bound);
        if (is_zbh1 && label_has(c.label, " tp=1 ")) CHECK(c.time_bound == by_label[generated]->time_bound);
        ++same;
    }
    CHECK(same == 8);
    // DualPipeV's file: two stages a rank (of one layer each, with 8 layers), rank 0 holding the first
    // and the last; its bounds are the generated DualPipeV's and hold.
    json eight = doc;
    eight["model"] = test::small_model(8, 32000);
    const std::string v = dir + "dualpipev_p4_m8.txt";
    const PlanRequest vreq =
        request_for(eight, {"strategy=dualpipev", "tp=1,2", "recompute=none,full", "sequence_parallel=false",
                            "zero_stage=1", "schedule_file=" + v});
    const auto ve = enumerate_layouts(vreq);
    std::map<std::string, const Candidate*> vlabels;
    for (const auto& c : ve.candidates) vlabels[c.label] = &c;
    std::size_t twins = 0;
    for (const auto& c : ve.candidates) {
        if (!c.label.starts_with("schedule ")) continue;
        INFO(c.label);
        const RunReport r = simulate(candidate_config(ve, vreq, c), {.keep_trace = false}).report;
        CHECK(c.memory_bound <= r.peak.bytes);
        if (!r.oom) CHECK(c.time_bound <= r.step_time);
        const std::string generated = "dualpipev" + c.label.substr(("schedule " + v).size());
        REQUIRE(vlabels.count(generated) == 1);
        CHECK(c.memory_bound == vlabels[generated]->memory_bound);
        // The output layer on rank 0, as DualPipeV's V puts it: the step-time bound prices that rank.
        CHECK(c.time_bound == vlabels[generated]->time_bound);
        CHECK(r.peak.bytes ==
              simulate(candidate_config(ve, vreq, *vlabels[generated]), {.keep_trace = false}).report.peak.bytes);
        ++twins;
    }
    CHECK(twins == 4);
    // recompute_num_layers counts the first layers of each pp chunk, which a file of two stages a rank
    // does not run: such layouts are rejected, named, not simulated to fail.
    const auto partial = enumerate_layouts(
        request_for(eight, {"strategy=schedule", "tp=1,2", "recompute=full", "recompute_num_layers=all,1",
                            "sequence_parallel=false", "zero_stage=1", "schedule_file=" + v}));
    CHECK(partial.rejected.at(reject::schedule_recompute) == 2);
    for (const auto& c : partial.candidates) CHECK_FALSE(label_has(c.label, "recompute_num_layers"));
    CHECK(partial.candidates.size() == 2);
    // A file whose first stage is not on rank 0 (rank 1 holds stages 0 and 3, rank 0 stages 1 and 2):
    // the memory bound counts the forwards of the rank that holds the first stage and the embedding.
    const auto moved = std::filesystem::temp_directory_path() / "dtsim_plan_moved_p2_m8.txt";
    {
        std::ofstream f(moved);
        f << "rank 0:";
        for (int mb = 0; mb < 8; ++mb) f << fmt::format(" 1F{} 2F{}", mb, mb);
        for (int mb = 0; mb < 8; ++mb) f << fmt::format(" 2B{} 1B{}", mb, mb);
        f << "\nrank 1:";
        for (int mb = 0; mb < 8; ++mb) f << fmt::format(" 0F{}", mb);
        for (int mb = 0; mb < 8; ++mb) f << fmt::format(" 3F{} 3B{}", mb, mb);
        for (int mb = 0; mb < 8; ++mb) f << fmt::format(" 0B{}", mb);
        f << "\n";
    }
    const PlanRequest mreq = request_for(eight, {"strategy=schedule", "tp=1,2", "recompute=none,full",
                                                 "zero_stage=0,1,3", "schedule_file=" + moved.string()});
    const auto me = enumerate_layouts(mreq);
    REQUIRE(me.candidates.size() >= 12);
    for (const auto& c : me.candidates) {
        INFO(c.label);
        const RunReport r = simulate(candidate_config(me, mreq, c), {.keep_trace = false}).report;
        CHECK(c.memory_bound <= r.peak.bytes);
        if (!r.oom) CHECK(c.time_bound <= r.step_time);
    }
    std::filesystem::remove(moved);
    // A file of one rank runs at pp 1, where the bounds are those of one stage; they hold too.
    const auto one = std::filesystem::temp_directory_path() / "dtsim_plan_one_rank_m8.txt";
    {
        std::ofstream f(one);
        f << "rank 0:";
        for (int mb = 0; mb < 8; ++mb) f << fmt::format(" 0F{} 0B{}", mb, mb);
        f << "\n";
    }
    const PlanRequest oreq = request_for(doc, {"strategy=schedule", "recompute=none,full", "zero_stage=0,1,3",
                                               "schedule_file=" + one.string()});
    const auto oe = enumerate_layouts(oreq);
    REQUIRE(oe.candidates.size() >= 4);
    CHECK(oe.rejected.at(reject::schedule_batch) > 0);  // dp 4 and 8: 16 sequences are not 8 microbatches each
    for (const auto& c : oe.candidates) {
        INFO(c.label);
        CHECK(label_has(c.label, " pp=1 "));
        const RunReport r = simulate(candidate_config(oe, oreq, c), {.keep_trace = false}).report;
        CHECK(c.memory_bound <= r.peak.bytes);
        if (!r.oom) CHECK(c.time_bound <= r.step_time);
    }
    std::filesystem::remove(one);
    // Best first finds what simulating every candidate finds.
    std::vector<std::pair<double, std::size_t>> all;
    for (const auto& c : e.candidates) {
        const RunReport r = simulate(candidate_config(e, req, c), {.keep_trace = false}).report;
        if (!r.oom) all.push_back({r.step_time, c.index});
    }
    std::sort(all.begin(), all.end());
    PlanRequest top = req;
    top.top = 3;
    const PlanResult p = plan(top);
    REQUIRE(p.best.size() >= 3);
    for (std::size_t i = 0; i < 3; ++i) {
        CHECK(p.simulated[p.best[i]].figures->step_time == all[i].first);
        CHECK(p.simulated[p.best[i]].candidate == all[i].second);
    }
    // --space pp and micro_batch restrict a file too: pp 2 leaves its layouts out, micro_batch 2 those
    // at dp 2 (micro-batch 1).
    auto pp2 = with;
    pp2.push_back("pp=2");
    for (const auto& c : enumerate_layouts(request_for(doc, pp2)).candidates)
        CHECK_FALSE(c.label.starts_with("schedule "));
    auto mb2 = with;
    mb2.push_back("micro_batch=2");
    std::size_t at_mb2 = 0;
    for (const auto& c : enumerate_layouts(request_for(doc, mb2)).candidates)
        if (c.label.starts_with("schedule ")) {
            CHECK(label_has(c.label, " dp=1 "));
            ++at_mb2;
        }
    CHECK(at_mb2 == 4);
    // --space strategy=schedule alone runs only the files.
    auto alone = with;
    alone[0] = "strategy=schedule";
    CHECK(enumerate_layouts(request_for(doc, alone)).candidates.size() == 8);
}

TEST_CASE("bad schedule files in a plan are named") {
    json doc = base_document();
    doc["training"]["global_batch"] = 16;
    const std::string dir = std::string(DTSIM_CONFIGS) + "/schedules/";
    CHECK_THROWS_WITH_AS(enumerate_layouts(request_for(doc, {"strategy=schedule"})),
                         doctest::Contains("--space strategy=schedule: name the schedule files with --space "
                                           "schedule_file=F1,F2"),
                         PlanError);
    CHECK_THROWS_WITH_AS(enumerate_layouts(request_for(doc, {"schedule_file=" + dir + "missing.txt"})),
                         doctest::Contains(("--space schedule_file=" + dir + "missing.txt: ").c_str()), PlanError);
    CHECK_THROWS_WITH_AS(enumerate_layouts(request_for(doc, {"schedule_file=" + dir + "deadlock_p2_m2.txt"})),
                         doctest::Contains("deadlock"), PlanError);
    // Rank 0 holds stages 0 and 1, rank 1 stage 2 only.
    const auto uneven = std::filesystem::temp_directory_path() / "dtsim_plan_uneven_p2_m1.txt";
    std::ofstream(uneven) << "rank 0: 0F0 1F0 1B0 0B0\nrank 1: 2F0 2B0\n";
    CHECK_THROWS_WITH_AS(enumerate_layouts(request_for(doc, {"schedule_file=" + uneven.string()})),
                         doctest::Contains("rank 0 holds 2 stage(s) and rank 1 holds 1; plan searches schedules "
                                           "whose ranks hold as many stages each"),
                         PlanError);
    std::filesystem::remove(uneven);
    // A file edited between a search's shards and their merge changes the search's fingerprint (the
    // labels name it alike), so the shards are refused.
    const auto copy = std::filesystem::temp_directory_path() / "dtsim_plan_1f1b_p4_m8.txt";
    std::filesystem::copy_file(dir + "1f1b_p4_m8.txt", copy, std::filesystem::copy_options::overwrite_existing);
    const PlanRequest req = request_for(doc, {"strategy=schedule", "schedule_file=" + copy.string()});
    const std::string before = plan_fingerprint(enumerate_layouts(req), req);
    CHECK(plan_fingerprint(enumerate_layouts(req), req) == before);
    std::ofstream(copy, std::ios::app) << "# edited\n";
    CHECK(plan_fingerprint(enumerate_layouts(req), req) != before);
    std::filesystem::remove(copy);
    PlanSpace s;
    CHECK_THROWS_WITH_AS(set_space(s, "schedule_file=a.txt,"), doctest::Contains("found an empty one"), PlanError);
    PlanRequest r = request_for(doc, {});
    r.overrides = {{"strategy.schedule_file", "\"a.txt\""}};
    CHECK_THROWS_WITH_AS(enumerate_layouts(r), doctest::Contains("--space schedule_file=..."), PlanError);
}

TEST_CASE("FSDP's sharding is searched by default, and the bounds hold for each") {
    // Two nodes of 8, so that hybrid sharding shards inside a node and replicates across the two.
    json doc = base_document();
    doc["training"]["global_batch"] = 16;
    const std::vector<std::string> space = {"strategy=fsdp,megatron", "tp=1,2", "micro_batch=1,2",
                                            "recompute=none,full", "tp_comm_overlap=false"};
    PlanRequest req = request_for(doc, space);
    req.gpus = "16";
    const auto e = enumerate_layouts(req);
    auto full_only = space;
    full_only.push_back("sharding=full");
    PlanRequest full_req = request_for(doc, full_only);
    full_req.gpus = "16";
    const auto full = enumerate_layouts(full_req);
    std::size_t megatron = 0;
    for (const auto& c : full.candidates) megatron += c.label.starts_with("megatron") ? 1 : 0;
    std::map<std::string, const Candidate*> by_label;
    for (const auto& c : e.candidates) by_label[c.label] = &c;
    // The sharding follows the ZeRO stage in a label (full, the default, is not named).
    const auto sharded = [](std::string label, const std::string& how) {
        return label.replace(label.find(" zero_stage=3") + 13, 0, " sharding=" + how);
    };
    std::size_t fsdp = 0;
    for (const auto& c : full.candidates) {
        INFO(c.label);
        REQUIRE(by_label.count(c.label) == 1);  // full sharding: the label and bounds as before
        CHECK(by_label[c.label]->time_bound == c.time_bound);
        if (!c.label.starts_with("fsdp")) continue;
        ++fsdp;
        CHECK(by_label.count(sharded(c.label, "grad_op")) == 1);
        CHECK(by_label.count(sharded(c.label, "hybrid")) == 1);
    }
    REQUIRE(fsdp > 0);
    CHECK(e.candidates.size() == megatron + 3 * fsdp);
    // Each simulated: the sharding its label names, and the bounds below the simulation.
    std::map<std::string, int> seen;
    for (const auto& c : e.candidates) {
        const Config config = candidate_config(e, req, c);
        if (config.strategy.name != "fsdp") continue;
        const RunReport r = simulate(config, {.keep_trace = false}).report;
        INFO(c.label);
        const std::string named = c.label.find(" sharding=grad_op ") != std::string::npos  ? "grad_op"
                                  : c.label.find(" sharding=hybrid ") != std::string::npos ? "hybrid"
                                                                                           : "full";
        CHECK(config.strategy.sharding == named);
        ++seen[named];
        CHECK(c.memory_bound <= r.peak.bytes);
        if (!r.oom) CHECK(c.time_bound <= r.step_time);
    }
    CHECK(seen.size() == 3);

    // On one node the data-parallel ranks are a single shard group: hybrid sharding runs as full
    // sharding, step for step, and is rejected as such.
    PlanRequest one_node = req;
    one_node.gpus = "8";
    const auto node = enumerate_layouts(one_node);
    CHECK(node.rejected.count(reject::hybrid_full) == 1);
    std::size_t compared = 0;
    for (const auto& c : node.candidates) {
        INFO(c.label);
        CHECK(c.label.find("sharding=hybrid") == std::string::npos);
        if (!c.label.starts_with("fsdp") || c.label.find("sharding=") != std::string::npos || compared >= 4) continue;
        const Config full_config = candidate_config(node, one_node, c);
        Config hybrid = full_config;
        hybrid.strategy.sharding = "hybrid";
        const RunReport a = simulate(full_config, {.keep_trace = false}).report;
        const RunReport b = simulate(hybrid, {.keep_trace = false}).report;
        CHECK(a.step_time == b.step_time);
        CHECK(a.peak.bytes == b.peak.bytes);
        ++compared;
    }
    CHECK(compared == 4);
    // Hybrid sharding does not take context parallelism: the config check's rejection.
    auto with_cp = space;
    with_cp.push_back("cp=2");
    with_cp.push_back("sharding=hybrid");
    with_cp[0] = "strategy=fsdp";
    PlanRequest cp_req = request_for(doc, with_cp);
    cp_req.gpus = "16";
    const auto cp = enumerate_layouts(cp_req);
    CHECK(cp.candidates.empty());
    CHECK(cp.rejected.count(std::string(reject::config_prefix) + "$.strategy.cp") == 1);
    // The category names the path; its first layout says what the check said, without the file and path.
    const std::string example = cp.config_examples.at(std::string(reject::config_prefix) + "$.strategy.cp");
    CAPTURE(example);
    CHECK(example.starts_with("fsdp tp="));
    CHECK(example.find(" cp=2 ") != std::string::npos);
    CHECK(example.find(" sharding=hybrid ") != std::string::npos);
    CHECK(example.find("hybrid sharding") != std::string::npos);
    CHECK(example.find("$.strategy.cp") == std::string::npos);
    CHECK(example.find(cp_req.file) == std::string::npos);
    CHECK(cp.config_examples.size() == 1);
    PlanSpace bad;
    CHECK_THROWS_WITH_AS(set_space(bad, "sharding=half"), doctest::Contains("--space sharding: 'half' is not an FSDP"),
                         PlanError);
}

TEST_CASE("GPU counts: one, a list, or a range of whole nodes and a node's divisors") {
    CHECK(gpu_counts("64", 8) == std::vector<int>{64});
    CHECK(gpu_counts("256,64,128", 8) == std::vector<int>{256, 64, 128});  // as given
    CHECK(gpu_counts("64-96", 8) == std::vector<int>{64, 72, 80, 88, 96});
    CHECK(gpu_counts("60-90", 8) == std::vector<int>{64, 72, 80, 88});
    CHECK(gpu_counts("2-16", 8) == std::vector<int>{2, 4, 8, 16});  // 3, 5, 6, 7 do not divide a node
    CHECK(gpu_counts("3-12", 6) == std::vector<int>{3, 6, 12});
    CHECK(gpu_counts("4", 8) == std::vector<int>{4});
    CHECK_THROWS_WITH_AS(gpu_counts("12", 8), doctest::Contains("--gpus 12: 12 GPUs: expected whole nodes of the "
                                                                "cluster's 8 GPUs"),
                         PlanError);
    CHECK_THROWS_WITH_AS(gpu_counts("64,100", 8), doctest::Contains("--gpus 64,100: 100 GPUs"), PlanError);
    CHECK_THROWS_WITH_AS(gpu_counts("9-15", 8), doctest::Contains("--gpus 9-15: no count in the range"), PlanError);
    CHECK_THROWS_WITH_AS(gpu_counts("16-8", 8), doctest::Contains("--gpus 16-8: the range is empty"), PlanError);
    CHECK_THROWS_WITH_AS(gpu_counts("8,8", 8), doctest::Contains("8 given twice"), PlanError);
    CHECK_THROWS_WITH_AS(gpu_counts("8-", 8), doctest::Contains("'' is not a GPU count"), PlanError);
    CHECK_THROWS_WITH_AS(gpu_counts("-8", 8), doctest::Contains("'-8' is not a GPU count"), PlanError);
    CHECK_THROWS_WITH_AS(gpu_counts("0", 8), doctest::Contains("'0' is not a GPU count"), PlanError);
    CHECK_THROWS_WITH_AS(gpu_counts("8,,16", 8), doctest::Contains("'' is not a GPU count"), PlanError);
    CHECK_THROWS_WITH_AS(gpu_counts("+8", 8), doctest::Contains("'+8' is not a GPU count"), PlanError);
    CHECK_THROWS_WITH_AS(gpu_counts("8-99999999", 8), doctest::Contains("'99999999' is not a GPU count"), PlanError);
    CHECK_THROWS_WITH_AS(gpu_counts("8-8192", 8), doctest::Contains("more than 256 GPU counts"), PlanError);
}

TEST_CASE("a search's fingerprint holds the GPU counts as parsed, not as spelled") {
    const PlanRequest base = request_for(base_document(), {"strategy=megatron", "recompute=none"});
    const auto fingerprint = [&](const std::string& gpus) {
        PlanRequest r = base;
        r.gpus = gpus;
        return plan_fingerprint(enumerate_layouts(r), r);
    };
    // Shards run with --gpus 064 merge with a search of --gpus 64; a range with its list.
    CHECK(fingerprint("08") == fingerprint("8"));
    CHECK(fingerprint("4-8") == fingerprint("4,8"));
    CHECK(fingerprint("004,8") == fingerprint("4,8"));
    CHECK(fingerprint("4") != fingerprint("8"));
    CHECK(fingerprint("8,4") != fingerprint("4,8"));  // a list keeps its order, and so its candidates'
}

TEST_CASE("several GPU counts: each count's layouts, each candidate on its own cluster") {
    json doc = base_document();
    const std::vector<std::string> space = {"strategy=megatron,1f1b", "recompute=none", "sequence_parallel=false",
                                            "zero_stage=1"};
    PlanRequest req = request_for(doc, space);
    std::vector<std::string> expected;
    std::vector<int> expected_gpus;
    std::size_t enumerated = 0;
    for (const char* n : {"2", "4", "8"}) {
        req.gpus = n;
        const auto one = enumerate_layouts(req);
        REQUIRE(!one.candidates.empty());
        enumerated += one.enumerated;
        for (const auto& c : one.candidates) {
            expected.push_back(c.label);
            expected_gpus.push_back(std::stoi(n));
        }
    }
    req.gpus = "2-8";  // 2, 4 and 8: a node's divisors, then whole nodes
    const auto e = enumerate_layouts(req);
    CHECK(e.enumerated == enumerated);
    CHECK(labels(e) == expected);  // the counts slowest, each as alone
    std::set<int> counts;
    for (std::size_t i = 0; i < e.candidates.size(); ++i) {
        const Candidate& c = e.candidates[i];
        INFO(c.label);
        CHECK(c.gpus == expected_gpus[i]);
        CHECK(c.index == i);
        const Config config = candidate_config(e, req, c);
        CHECK(config.cluster.gpus() == c.gpus);
        CHECK(static_cast<long long>(config.strategy.dp) * config.strategy.tp * config.strategy.pp * config.strategy.cp ==
              c.gpus);
        counts.insert(c.gpus);
    }
    CHECK(counts == std::set<int>{2, 4, 8});

    // The search ranks every count's layouts together, by step time; a shard split merges back.
    req.top = 3;
    req.jobs = 2;
    const PlanResult r = plan(req);
    REQUIRE(r.best.size() >= 3);
    for (std::size_t i = 1; i < r.best.size(); ++i)
        CHECK(r.simulated[r.best[i - 1]].figures->step_time <= r.simulated[r.best[i]].figures->step_time);
    // The best of the counts together is the best of the counts searched alone.
    double fastest = 0;
    int fastest_gpus = 0;
    for (const char* n : {"2", "4", "8"}) {
        PlanRequest alone = req;
        alone.gpus = n;
        const PlanResult a = plan(alone);
        REQUIRE(!a.best.empty());
        const double t = a.simulated[a.best[0]].figures->step_time;
        if (fastest_gpus == 0 || t < fastest) fastest = t, fastest_gpus = std::stoi(n);
    }
    CHECK(r.simulated[r.best[0]].figures->step_time == fastest);
    CHECK(r.enumeration.candidates[r.simulated[r.best[0]].candidate].gpus == fastest_gpus);
    const json out = to_json(r, 3, false);
    CHECK(out["top"][0]["gpus"] == r.enumeration.candidates[r.simulated[r.best[0]].candidate].gpus);
    std::vector<json> files;
    std::vector<std::string> names;
    for (int i = 0; i < 3; ++i) {
        PlanRequest part = req;
        part.shard = i;
        part.shards = 3;
        files.push_back(json::parse(shard_to_json(plan(part), part).dump()));
        names.push_back(fmt::format("shard-{}.json", i));
    }
    CHECK(to_json(merge_shards(req, files, names), 3, false).dump() == out.dump());
    PlanRequest other = req;
    other.gpus = "4-8";  // another search: its shards are refused
    CHECK_THROWS_WITH_AS(merge_shards(other, files, names), doctest::Contains("$.fingerprint:"), PlanError);
    other = req;
    other.rank_by = RankBy::gpu_seconds;
    CHECK_THROWS_WITH_AS(merge_shards(other, files, names), doctest::Contains("$.fingerprint:"), PlanError);
}

TEST_CASE("ranked by GPU-seconds, best first finds what simulating every candidate finds") {
    json doc = base_document();
    doc["training"]["global_batch"] = 16;
    PlanRequest req = request_for(doc, {"strategy=megatron,1f1b,fsdp", "recompute=none,full", "zero_stage=1,3",
                                        "micro_batch=1,2"});
    req.gpus = "2-8";
    const auto e = enumerate_layouts(req);
    // Every candidate simulated: step time x GPUs of the fitting ones, best first (ties in order).
    std::vector<std::pair<double, std::size_t>> all;
    for (const auto& c : e.candidates) {
        const RunReport r = simulate(candidate_config(e, req, c), {.keep_trace = false}).report;
        if (!r.oom) all.push_back({r.step_time * c.gpus, c.index});
    }
    REQUIRE(all.size() >= 3);
    std::sort(all.begin(), all.end());
    req.rank_by = RankBy::gpu_seconds;
    req.top = 3;
    req.jobs = 2;
    const PlanResult r = plan(req);
    CHECK(r.pruned > 0);
    REQUIRE(r.best.size() >= 3);
    for (std::size_t i = 0; i < 3; ++i) {
        const PlanRow& row = r.simulated[r.best[i]];
        CHECK(row.figures->step_time * r.enumeration.candidates[row.candidate].gpus == all[i].first);
        CHECK(row.candidate == all[i].second);
    }
    // Not the step time's answer: fewer GPUs cost less here (a step time ranking puts 8 first).
    req.rank_by = RankBy::step_time;
    const PlanResult fastest = plan(req);
    CHECK(fastest.enumeration.candidates[fastest.simulated[fastest.best[0]].candidate].gpus == 8);
    CHECK(r.enumeration.candidates[r.simulated[r.best[0]].candidate].gpus < 8);
    req.rank_by = RankBy::gpu_seconds;
    CHECK(to_json(r, 3, false)["rank_by"] == "gpu_seconds");
    std::vector<json> files;
    std::vector<std::string> names;
    for (int i = 0; i < 2; ++i) {
        PlanRequest part = req;
        part.shard = i;
        part.shards = 2;
        files.push_back(json::parse(shard_to_json(plan(part), part).dump()));
        names.push_back(fmt::format("shard-{}.json", i));
    }
    CHECK(to_json(merge_shards(req, files, names), 3, false).dump() == to_json(r, 3, false).dump());
    CHECK_THROWS_WITH_AS(parse_rank_by("cost"), doctest::Contains("--rank-by cost: expected step_time or gpu_seconds"),
                         PlanError);
}

TEST_CASE("the figure a search ranks by, in its unit: a step time, or GPU-seconds") {
    CHECK(rank_figure_text(RankBy::step_time, 3.428) == "3.428 s");
    CHECK(rank_figure_text(RankBy::step_time, 0.8616) == "861.600 ms");
    // GPU-seconds are not scaled as a time is: 0.8616 GPU-s, not "861.600 ms GPU-s".
    CHECK(rank_figure_text(RankBy::gpu_seconds, 54.848) == "54.848 GPU-s");
    CHECK(rank_figure_text(RankBy::gpu_seconds, 0.8616) == "0.862 GPU-s");
    CHECK(rank_figure_text(RankBy::gpu_seconds, 0.0123) == "0.0123 GPU-s");
}

TEST_CASE("a value given twice in --space is searched once, where it first appears") {
    PlanSpace s;
    set_space(s, "tp=2,2,1,02");
    CHECK(s.tp == std::vector<int>{2, 1});
    set_space(s, "strategy=fsdp,megatron,fsdp");
    CHECK(s.strategies == std::vector<std::string>{"fsdp", "megatron"});
    set_space(s, "sequence_parallel=true,1,false");
    CHECK(s.sequence_parallel == std::vector<int>{1, 0});
    set_space(s, "recompute_num_layers=all,2,all");
    CHECK(s.recompute_num_layers == std::vector<int>{0, 2});
    set_space(s, "sharding=hybrid,full,hybrid");
    CHECK(s.sharding == std::vector<std::string>{"hybrid", "full"});
    // No candidate twice.
    const auto twice = enumerate_layouts(
        request_for(base_document(), {"strategy=megatron,megatron", "tp=2,2", "recompute=none,none", "micro_batch=1,1"}));
    const auto once =
        enumerate_layouts(request_for(base_document(), {"strategy=megatron", "tp=2", "recompute=none", "micro_batch=1"}));
    CHECK(labels(twice) == labels(once));
    CHECK(twice.enumerated == once.enumerated);
}

TEST_CASE("bad plan requests are named") {
    PlanSpace s;
    CHECK_THROWS_WITH_AS(set_space(s, "tpp=1,2"),
                         doctest::Contains("--space tpp: unknown knob (the knobs are: strategy, schedule_file, tp"),
                         PlanError);
    CHECK_THROWS_WITH_AS(set_space(s, "tp=two"), doctest::Contains("--space tp: 'two' is not a whole number"), PlanError);
    CHECK_THROWS_WITH_AS(set_space(s, "tp=0"), doctest::Contains("'0' is not a whole number from 1"), PlanError);
    CHECK_THROWS_WITH_AS(set_space(s, "strategy=puzzle"), doctest::Contains("not a strategy plan searches"), PlanError);
    CHECK_THROWS_WITH_AS(set_space(s, "recompute=some"), doctest::Contains("not a recompute policy"), PlanError);
    CHECK_THROWS_WITH_AS(set_space(s, "sequence_parallel=yes"), doctest::Contains("not true or false"), PlanError);
    CHECK_THROWS_WITH_AS(set_space(s, "tp"), doctest::Contains("expected knob=v1,v2"), PlanError);
    CHECK_THROWS_WITH_AS(set_space(s, "fp8=fp4"), doctest::Contains("--space fp8: 'fp4' is not an fp8 recipe"), PlanError);
    CHECK_NOTHROW(set_space(s, "strategy.tp=1,2"));
    CHECK(s.tp == std::vector<int>{1, 2});

    PlanRequest r = request_for(base_document(), {});
    r.overrides = {{"strategy.tp", "2"}};
    CHECK_THROWS_WITH_AS(enumerate_layouts(r), doctest::Contains("give it with --space"), PlanError);
    // A layout key --space does not search is not offered as one.
    r.overrides = {{"strategy.stage_layers", "[0, 4, 4, 0]"}};
    CHECK_THROWS_WITH_AS(enumerate_layouts(r), doctest::Contains("does not search stage_layers"), PlanError);
    r.overrides = {{"strategy.dp", "4"}};
    CHECK_THROWS_WITH_AS(enumerate_layouts(r), doctest::Contains("dp and the microbatches follow from the GPU count"),
                         PlanError);
    r.overrides.clear();
    r.gpus = "12";
    CHECK_THROWS_WITH_AS(enumerate_layouts(r), doctest::Contains("--gpus 12: 12 GPUs: expected whole nodes"), PlanError);
    r.gpus = "4";  // half a node
    CHECK(enumerate_layouts(r).candidates.size() > 0);

    // Nothing fits: every layout rejected by the memory bound, none simulated.
    PlanRequest none = request_for(base_document(0.01), {"strategy=megatron"});
    const PlanResult nothing = plan(none);
    CHECK(nothing.best.empty());
    CHECK(nothing.simulated.empty());
    CHECK(nothing.enumeration.rejected.at(reject::states) > 0);
}
