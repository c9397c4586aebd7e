// Pipeline schedules of dtsim::sched run in the hardware world, against their
// formulas with equal stage times (a cluster whose transfers and memory-bound
// work are free, a model without vocabulary, so every stage's forward takes
// T_F and its backward 2 T_F): interleaved 1F1B's bubble (p-1)/(v m + p - 1)
// and activation memory (v+1)p - 1 chunk-microbatches on rank 0, i.e.
// 1 + (p-1)/(p v) times 1F1B's (Narayanan et al. 2021, section 2.2); ZB-H1's
// bubble (p-1)(T_F + T_I - T_W) (Qi et al. 2023, section 3); a schedule file
// of 1F1B running exactly as the built-in 1F1B; bad schedules as config errors.
#include "dtsim/hw/run.hpp"
#include "dtsim/hw/workload.hpp"
#include "dtsim/sched/format.hpp"
#include "dtsim/sched/generators.hpp"
#include "pipeline_fixtures.hpp"

#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <tuple>

using namespace dtsim;
using namespace dtsim::hw;
using json = nlohmann::json;
using namespace dtsim::hw::test;

namespace {


}  // namespace

TEST_CASE("interleaved 1F1B with equal stage times: bubble (p-1)/(v m + p - 1)") {
    for (const auto& size : {std::tuple{4, 8, 2}, {2, 4, 2}, {4, 4, 3}, {2, 6, 4}, {8, 16, 2}}) {
        const int p = std::get<0>(size), m = std::get<1>(size), v = std::get<2>(size);
        CAPTURE(p);
        CAPTURE(m);
        CAPTURE(v);
        json doc = pipeline("interleaved", p, m, p * v * 2);
        doc["strategy"]["chunks"] = v;
        const RunReport r = run(doc).report;
        CHECK(r.split.idle / r.step_time == doctest::Approx(double(p - 1) / (v * m + p - 1)).epsilon(1e-6));
        // The same work without chunks: 1F1B's (p-1)/(m+p-1), larger.
        doc["strategy"]["name"] = "1f1b";
        doc["strategy"].erase("chunks");
        const RunReport plain = run(doc).report;
        CHECK(plain.split.idle / plain.step_time == doctest::Approx(double(p - 1) / (m + p - 1)).epsilon(1e-6));
        CHECK(r.step_time < plain.step_time);
    }
}

TEST_CASE("interleaved 1F1B holds (v+1)p-1 chunk-microbatches on rank 0: 1+(p-1)/(p v) times 1F1B's activations") {
    for (const auto& size : {std::tuple{4, 8, 2}, {2, 8, 3}, {4, 16, 4}}) {
        const int p = std::get<0>(size), m = std::get<1>(size), v = std::get<2>(size);
        CAPTURE(p);
        CAPTURE(m);
        CAPTURE(v);
        const int layers = p * v;  // one layer per chunk
        json doc = pipeline("interleaved", p, m, layers);
        doc["strategy"]["chunks"] = v;
        const Config c = parse_config(doc, "test.json");
        const TransformerSpec& spec = c.model.spec;
        const double per_layer = layer_activation_bytes(spec, LayerSplit{1, 1, false, Recompute::none});
        const double states = 18 * (layers / p) * spec.params_per_layer();
        const RunReport r = run(doc).report;
        const double held = (r.rank_peaks[0] - states) / per_layer;  // chunk-microbatches (one layer each)
        CHECK(held == doctest::Approx((v + 1) * p - 1));
        doc["strategy"]["name"] = "1f1b";
        doc["strategy"].erase("chunks");
        const RunReport plain = run(doc).report;
        const double plain_held = (plain.rank_peaks[0] - states) / (per_layer * v);  // microbatches of v layers
        CHECK(plain_held == doctest::Approx(p));
        CHECK((held / v) / plain_held == doctest::Approx(1.0 + double(p - 1) / (p * v)));
    }
}

TEST_CASE("ZB-H1: every rank idles (p-1)(T_F + T_I - T_W), T_W the weight-gradient GEMMs") {
    for (const auto& size : {std::pair{4, 8}, {2, 4}, {4, 5}}) {
        const int p = size.first, m = size.second;
        CAPTURE(p);
        CAPTURE(m);
        const int layers = 2 * p;
        const json doc = pipeline("zbh1", p, m, layers);
        const Config c = parse_config(doc, "test.json");
        const Workload w = make_workload(c.model.spec, LayerSplit{}, c.cluster.gpu);
        const double per_stage = layers / p;
        const double tf = per_stage * (w.layer.attention_forward.seconds + w.layer.mlp_forward.seconds);
        const double ti = per_stage * (w.layer.attention_backward_input.seconds + w.layer.mlp_backward_input.seconds);
        const double tw = per_stage * (w.layer.attention_backward_weight.seconds + w.layer.mlp_backward_weight.seconds);
        // The split is exact and the formula's condition holds.
        CHECK(ti + tw == doctest::Approx(2 * tf));
        REQUIRE(tw <= std::min(tf, ti));
        const RunReport r = run(doc).report;
        CHECK(r.split.idle == doctest::Approx((p - 1) * (tf + ti - tw)).epsilon(1e-6));
        CHECK(r.step_time == doctest::Approx(m * (tf + ti + tw) + (p - 1) * (tf + ti - tw)).epsilon(1e-6));
        // 1F1B idles (p-1)(T_F + T_B) with T_B = T_I + T_W: more.
        json one = doc;
        one["strategy"]["name"] = "1f1b";
        CHECK(run(one).report.split.idle == doctest::Approx((p - 1) * (tf + ti + tw)).epsilon(1e-6));
    }
}

TEST_CASE("a 1F1B schedule file runs exactly as the built-in 1F1B, with TP, recompute and tied embeddings") {
    // configs/schedules/1f1b_p4_m8.txt is `dtsim schedule --generate 1f1b --stages 4 --microbatches 8`.
    const std::string file = std::string(DTSIM_CONFIGS) + "/schedules/1f1b_p4_m8.txt";
    REQUIRE(sched::read_schedule_file(file) == sched::one_f_one_b(4, 8));
    for (const char* recompute : {"none", "selective", "full"}) {
        CAPTURE(recompute);
        // Two nodes: TP 2 x PP 4 x DP 2, gradients bucketed over the data-parallel pairs, ZeRO-1.
        json doc{{"cluster", realistic_cluster(2)},
                 {"model", small_model(8, 32000)},
                 {"training", {{"global_batch", 16}, {"micro_batch", 1}}},
                 {"strategy",
                  {{"name", "1f1b"}, {"tp", 2}, {"pp", 4}, {"dp", 2}, {"zero_stage", 1}, {"recompute", recompute}}}};
        const RunReport builtin = run(doc).report;
        doc["strategy"]["name"] = "schedule";
        doc["strategy"]["schedule_file"] = file;
        const RunReport from_file = run(doc).report;
        CHECK(from_file.step_time == builtin.step_time);
        CHECK(from_file.rank_peaks == builtin.rank_peaks);
        CHECK(from_file.hardware_flops == builtin.hardware_flops);
        // The lowered form (SEND/RECV actions) runs the same.
        doc["strategy"]["schedule_file"] = std::string(DTSIM_CONFIGS) + "/schedules/1f1b_p4_m8_comms.csv";
        CHECK(run(doc).report.step_time == builtin.step_time);
    }
}

TEST_CASE("interleaved 1F1B with TP, sequence parallelism, full recompute, DP and ZeRO-1 accounts for its time") {
    json doc{{"cluster", realistic_cluster(2)},
             {"model", small_model(8, 32000)},
             {"training", {{"global_batch", 16}, {"micro_batch", 1}}},
             {"strategy",
              {{"name", "interleaved"},
               {"chunks", 2},
               {"dp", 2},
               {"tp", 2},
               {"pp", 4},
               {"zero_stage", 1},
               {"sequence_parallel", true},
               {"recompute", "full"}}}};
    const RunResult res = run(doc, true);
    const RunReport& r = res.report;
    CHECK(r.split.compute + r.split.comm + r.split.idle == doctest::Approx(r.step_time));
    // Full recompute: hardware FLOPs are model FLOPs plus one more forward of every layer (4/3 of the layers' share).
    CHECK(r.hardware_flops > r.model_flops);
    // Every (chunk boundary, microbatch) crossing ranks sends an activation and a gradient:
    // 8 stages, 7 boundaries, all between different ranks, 8 microbatches, 4 (dp x tp) pipelines.
    int sends = 0, recvs = 0, recomputes = 0;
    for (const auto& rank : res.trace.ranks)
        for (const auto& e : rank.events) {
            sends += e.op.name() == "send";
            recvs += e.op.name() == "recv";
            recomputes += e.op.name() == "recompute";
        }
    CHECK(sends == 2 * 7 * 8 * 4);
    CHECK(recvs == sends);
    CHECK(recomputes == 2 * (8 / 4) * 8 * 16);  // two halves x layers per GPU x microbatches x GPUs
    // Deterministic: the same trace twice.
    CHECK(run(doc, true).trace.ranks[5].events.size() == res.trace.ranks[5].events.size());
    CHECK(run(doc).report.step_time == r.step_time);
}

TEST_CASE("DualPipeV puts the embedding and the output layer on rank 0; looped BFS holds all microbatches") {
    json doc = pipeline("dualpipev", 2, 4, 8);
    doc["model"]["vocab"] = 32000;
    const RunResult res = run(doc, true);
    // Rank 0 runs both the embedding and the logits; rank 1 neither.
    auto count = [&](int rank, const char* op) {
        int n = 0;
        for (const auto& e : res.trace.ranks[static_cast<std::size_t>(rank)].events) n += e.op.name() == op;
        return n;
    };
    CHECK(count(0, "embedding") == 2 * 4);
    CHECK(count(0, "logits") == 2 * 4);
    CHECK(count(1, "embedding") == 0);
    CHECK(count(1, "logits") == 0);

    json bfs = pipeline("bfs", 2, 4, 8);
    bfs["strategy"]["chunks"] = 2;
    const Config c = parse_config(bfs, "test.json");
    const double per_layer = layer_activation_bytes(c.model.spec, LayerSplit{1, 1, false, Recompute::none});
    const double states = 18 * 4 * c.model.spec.params_per_layer();
    CHECK((run(bfs).report.rank_peaks[0] - states) / per_layer == doctest::Approx(4 * 4));  // m x 4 layers
}

TEST_CASE("bad pipeline schedules are config errors with the place and what was expected") {
    json doc = pipeline("interleaved", 4, 8, 12);
    doc["strategy"]["chunks"] = 2;
    CHECK(config_error(doc) ==
          "test.json: $.strategy.chunks: 12 layers cannot be split evenly into pp x chunks = 4 x 2 = 8 pipeline stages "
          "(12 % 8 = 4)");
    doc = pipeline("1f1b", 4, 8, 8);
    doc["strategy"]["chunks"] = 2;
    CHECK(config_error(doc) == "test.json: $.strategy.chunks: strategy \"1f1b\" does not take \"chunks\"");
    doc = pipeline("interleaved", 4, 2, 8);
    doc["strategy"]["chunks"] = 2;
    CHECK(config_error(doc).rfind("test.json: $.strategy: strategy \"interleaved\": interleaved: the microbatch group "
                                  "size g must be in [p, m]",
                                  0) == 0);
    doc = pipeline("schedule", 4, 6, 8);
    doc["strategy"]["schedule_file"] = std::string(DTSIM_CONFIGS) + "/schedules/1f1b_p4_m8.txt";
    CHECK(config_error(doc) ==
          "test.json: $.strategy.schedule_file: the schedule has 8 microbatches, but the config runs 6 (global_batch / "
          "(micro_batch x dp) = 6 / (1 x 1))");
    doc["strategy"]["schedule_file"] = "no/such/file.txt";
    CHECK(config_error(doc) ==
          "test.json: $.strategy.schedule_file: schedule file \"no/such/file.txt\" not found (looked for "
          "no/such/file.txt)");
    doc["strategy"].erase("schedule_file");
    CHECK(config_error(doc) ==
          "test.json: $.strategy: missing key \"schedule_file\" (the schedule to run, PyTorch action notation or CSV)");
}

TEST_CASE("a schedule that cannot progress is a deadlock naming who waits for what") {
    // configs/schedules/deadlock_p2_m2.txt: rank 0 waits for a gradient rank 1 produces only after it.
    json doc = pipeline("schedule", 2, 2, 4);
    doc["strategy"]["schedule_file"] = std::string(DTSIM_CONFIGS) + "/schedules/deadlock_p2_m2.txt";
    std::string msg = "no deadlock";
    try {
        run(doc);
    } catch (const DeadlockError& e) {
        msg = e.what();
    }
    CAPTURE(msg);
    CHECK(msg.find("deadlock") != std::string::npos);
    CHECK(msg.find("rank 0") != std::string::npos);
    CHECK(msg.find("rank 1") != std::string::npos);
    CHECK(msg.find("it waits for the gradient of stage 0 microbatch 0") != std::string::npos);
}

TEST_CASE("a run without a trace reports the same figures as one with it") {
    json doc{{"cluster", realistic_cluster(2)},
             {"model", small_model(8, 32000)},
             {"training", {{"global_batch", 16}, {"micro_batch", 1}}},
             {"strategy", {{"name", "zbh1"}, {"tp", 2}, {"pp", 4}, {"dp", 2}, {"recompute", "full"}}}};
    const RunResult with = run(doc, true), without = run(doc, false);
    CHECK(with.report.step_time == without.report.step_time);
    CHECK(with.report.rank_peaks == without.report.rank_peaks);
    CHECK(with.report.split.comm == without.report.split.comm);
    CHECK(with.report.hardware_flops == without.report.hardware_flops);
    CHECK(with.report.events == without.report.events);
    CHECK(with.trace.event_count() == with.report.events);
    CHECK(without.trace.event_count() == 0);
}
