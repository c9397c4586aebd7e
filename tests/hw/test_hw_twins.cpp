// Ranks simulated for their data- and tensor-parallel twins (RunOptions::twins_once, make_jobs'
// Twins): the report equals the whole world's, figure for figure, for every strategy and schedule
// at several sizes, with hybrid sharding and with slow GPUs (their replicas simulated whole, one
// replica for the others), and so does the trace, event for event; and it applies only where the
// twins run the same program at the same times.
#include "dtsim/hw/config.hpp"
#include "dtsim/hw/run.hpp"
#include "dtsim/trace_io.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

using namespace dtsim::hw;

namespace {

const std::string kRuns = std::string(DTSIM_CONFIGS) + "/runs/";

// The sanitizer build, some ten times slower, checks every second case of the long lists below
// (the first included); the release build checks every one.
#if defined(DTSIM_SANITIZE)
constexpr std::size_t kStride = 2;
#else
constexpr std::size_t kStride = 1;
#endif

// The report as JSON without the wall-clock time the run took.
nlohmann::json report_of(const Config& c, bool twins_once) {
    RunOptions o;
    o.keep_trace = false;
    o.twins_once = twins_once;
    const RunReport r = simulate(c, o).report;
    const std::optional<Twins> twins = simulated_twins(c, o);
    CHECK(twins.has_value() == twins_once);
    const auto replica_ranks = twins ? static_cast<int>(twins->replicas.size()) * twins->tp : 0;
    CHECK(r.simulated_ranks == (twins_once ? r.gpus / (c.strategy.dp * c.strategy.tp) * replica_ranks : r.gpus));
    nlohmann::json j = to_json(r);
    j.erase("wall_s");
    j.erase("simulated_ranks");
    return j;
}

void check_same_report(const std::string& file, const std::vector<Override>& overrides) {
    const Config c = load_config(kRuns + file, overrides);
    std::string label = file;
    for (const auto& o : overrides) label += " " + o.path + "=" + o.value;
    INFO(label);
    RunOptions reduced;
    reduced.keep_trace = false;
    REQUIRE(twins_once_applies(c, reduced));
    const nlohmann::json one = report_of(c, true), all = report_of(c, false);
    CHECK(one.dump() == all.dump());
}

}  // namespace

TEST_CASE("twins once: the same report as every rank simulated, strategy by strategy") {
    // Data parallelism alone, with ZeRO, FSDP (with TP: 2D) and tensor parallelism.
    check_same_report("llama3-8b-16xh100-ddp.json", {});
    check_same_report("llama3-8b-16xh100-zero1.json", {});
    check_same_report("llama3-8b-16xh100-zero2.json", {});
    check_same_report("llama3-8b-16xh100-fsdp.json", {});
    check_same_report("llama3-8b-16xh100-fsdp-grad-op.json", {});
    check_same_report("llama3-8b-16xh100-fsdp-tp2.json", {});
    check_same_report("llama3-8b-16xh100-fsdp.json", {{"strategy.overlap", "false"}});
    check_same_report("llama3-8b-16xh100-zero1.json", {{"strategy.overlap_param_gather", "true"}});
    check_same_report("llama3-8b-8xh100-megatron.json", {{"strategy.tp", "2"}, {"strategy.dp", "4"}});
}

TEST_CASE("twins once: pipelines and schedules, with ZeRO-3 in the stages and uneven stages") {
    const std::vector<std::string> files = {"llama3-70b-64xh100-1f1b.json",        "llama3-70b-64xh100-gpipe.json",
                                            "llama3-70b-64xh100-interleaved.json", "llama3-70b-64xh100-zbh1.json",
                                            "llama3-70b-64xh100-bfs.json",         "llama3-70b-64xh100-dualpipev.json",
                                            "llama3-70b-64xh100-1f1b-fsdp.json",   "llama3-70b-64xh100-tp4.json"};
    for (std::size_t i = 0; i < files.size(); i += kStride) {
        const std::string& file = files[i];
        const Config c = load_config(kRuns + file);
        if (c.strategy.dp < 2) continue;
        check_same_report(file, {});
    }
    check_same_report("llama3-70b-64xh100-1f1b.json",
                      {{"strategy.first_stage_layers", "8"}, {"strategy.last_stage_layers", "8"}});
    // A schedule file (ZB-H1 as actions), tensor-parallel twins only (dp 1).
    check_same_report("llama3-70b-32xh100-schedule-file.json", {});
}

TEST_CASE("twins once: context parallelism, recompute, float8 and compiled blocks, other sizes") {
    check_same_report("llama3-8b-16xh100-fsdp.json", {{"strategy.cp", "2"}, {"strategy.dp", "8"}});
    check_same_report("llama3-8b-8xh100-megatron.json",
                      {{"strategy.tp", "2"}, {"strategy.cp", "2"}, {"strategy.dp", "2"}, {"strategy.sequence_parallel", "true"}});
    check_same_report("llama3-8b-16xh100-fsdp.json", {{"strategy.recompute", "\"selective_op\""}, {"strategy.compile", "true"}});
    check_same_report("llama3-8b-16xh100-zero1.json", {{"cluster.nodes", "4"}, {"strategy.dp", "32"}});
    check_same_report("llama3-70b-64xh100-1f1b.json", {{"cluster.nodes", "16"}, {"strategy.dp", "4"}});
    // 32 microbatches per pipeline (twice its 16 stages), not the 768 of the run's batch at dp 2.
    check_same_report("gpt3-175b-1024xa100-sc21.json",
                      {{"cluster.nodes", "32"}, {"strategy.dp", "2"}, {"training.global_batch", "64"}});
    // Hybrid sharding on one node: full sharding, step for step.
    check_same_report("llama3-8b-16xh100-fsdp-hybrid.json", {{"cluster.nodes", "1"}, {"strategy.dp", "8"}});
}

TEST_CASE("twins once: hybrid sharding, each shard and replica group priced whole") {
    check_same_report("llama3-8b-16xh100-fsdp-hybrid.json", {});
    check_same_report("llama3-8b-16xh100-fsdp-hybrid.json", {{"cluster.nodes", "4"}, {"strategy.dp", "32"}});
    check_same_report("llama3-8b-16xh100-fsdp-hybrid.json", {{"strategy.tp", "2"}, {"strategy.dp", "8"}});
}

TEST_CASE("twins once: slow GPUs, their replicas simulated whole and one replica for the others") {
    const auto one_slow = [](int gpu, const char* factor) {
        return Override{"stragglers", fmt::format(R"({{"slowdown": {{"{}": {}}}}})", gpu, factor)};
    };
    const std::vector<std::pair<std::string, std::vector<Override>>> cases = {
        {"llama3-8b-16xh100-zero1.json", {one_slow(3, "1.2")}},
        {"llama3-8b-16xh100-zero1.json", {one_slow(0, "1.5")}},  // the first replica is slow
        {"llama3-8b-16xh100-fsdp.json", {one_slow(15, "1.3")}},
        {"llama3-8b-16xh100-fsdp-tp2.json", {one_slow(5, "1.25")}},  // a tensor-parallel peer
        {"llama3-8b-16xh100-ddp.json",
         {{"stragglers", R"({"slowdown": {"2": 1.1, "9": 1.4}, "slow_memory_bound": false})"}}},
        {"llama3-8b-8xh100-megatron.json",
         {{"strategy.tp", "2"}, {"strategy.cp", "2"}, {"cluster.nodes", "2"}, {"strategy.dp", "4"}, one_slow(6, "1.2")}},
        {"llama3-70b-64xh100-1f1b.json", {{"cluster.nodes", "16"}, {"strategy.dp", "4"}, one_slow(40, "1.2")}},
        {"llama3-70b-64xh100-interleaved.json",
         {{"cluster.nodes", "16"}, {"strategy.dp", "4"}, {"stragglers", R"({"slowdown": {"1": 1.2, "63": 1.05}})"}}},
        {"llama3-70b-64xh100-1f1b-fsdp.json", {{"cluster.nodes", "16"}, {"strategy.dp", "4"}, one_slow(17, "1.15")}}};
    for (std::size_t i = 0; i < cases.size(); i += kStride) check_same_report(cases[i].first, cases[i].second);
}

TEST_CASE("twins once: the same trace as every rank simulated, event for event, and the same report") {
    const std::vector<std::pair<std::string, std::vector<Override>>> entries = {
        {"llama3-8b-16xh100-zero1.json", {}},
        {"llama3-8b-16xh100-fsdp-tp2.json", {}},
        {"llama3-8b-8xh100-megatron.json", {{"strategy.tp", "2"}, {"strategy.cp", "2"}, {"strategy.dp", "2"}}},
        {"llama3-70b-64xh100-interleaved.json", {{"model.layers", "16"}, {"strategy.chunks", "2"}}},
        {"llama3-70b-64xh100-zbh1.json", {{"model.layers", "16"}}},
        {"llama3-8b-16xh100-fsdp-hybrid.json", {{"model.layers", "8"}}},
        {"llama3-8b-16xh100-fsdp-tp2.json", {{"model.layers", "8"}, {"stragglers", R"({"slowdown": {"5": 1.25}})"}}},
        {"llama3-70b-64xh100-1f1b.json",
         {{"model.layers", "16"}, {"cluster.nodes", "16"}, {"strategy.dp", "4"}, {"stragglers", R"({"slowdown": {"40": 1.2}})"}}}};
    for (std::size_t i = 0; i < entries.size(); i += kStride) {
        const auto& entry = entries[i];
        const std::string& file = entry.first;
        const auto& overrides = entry.second;
        const Config c = load_config(kRuns + file, overrides);
        INFO(file);
        RunOptions twins, whole;
        whole.twins_once = false;
        REQUIRE(twins_once_applies(c, twins));
        const RunResult a = simulate(c, twins), b = simulate(c, whole);
        CHECK(a.report.simulated_ranks < b.report.simulated_ranks);
        std::ostringstream ta, tb;
        write_trace_json(a.trace, ta);
        write_trace_json(b.trace, tb);
        CHECK(ta.str().size() > 1000);
        CHECK(ta.str().find("\"memory_by_kind\"") != std::string::npos);  // every GPU's its twin's too
        CHECK(ta.str() == tb.str());
        nlohmann::json ja = to_json(a.report), jb = to_json(b.report);
        for (auto* j : {&ja, &jb}) {
            j->erase("wall_s");
            j->erase("simulated_ranks");
        }
        CHECK(ja.dump() == jb.dump());
    }
}

TEST_CASE("twins once applies only where the twins are the same") {
    RunOptions none;
    none.keep_trace = false;
    CHECK(twins_once_applies(load_config(kRuns + "llama3-8b-16xh100-fsdp.json"), none));
    // Jitter makes every rank differ.
    CHECK_FALSE(twins_once_applies(load_config(kRuns + "llama3-8b-16xh100-zero1-straggler.json"), none));
    CHECK_FALSE(twins_once_applies(
        load_config(kRuns + "llama3-8b-16xh100-zero1.json",
                    {{"stragglers", R"({"jitter": {"distribution": "normal", "cv": 0.01, "seed": 1}})"}}),
        none));
    // Hybrid sharding: one rank; with a slow GPU its shard groups would mix the two kinds of replica.
    CHECK(twins_once_applies(load_config(kRuns + "llama3-8b-16xh100-fsdp-hybrid.json"), none));
    CHECK_FALSE(twins_once_applies(
        load_config(kRuns + "llama3-8b-16xh100-fsdp-hybrid.json", {{"stragglers", R"({"slowdown": {"3": 1.2}})"}}),
        none));
    // Slow GPUs: the replicas that hold them, each whole, and a stand-in for the others ...
    const std::optional<Twins> slow = simulated_twins(
        load_config(kRuns + "llama3-8b-16xh100-fsdp-tp2.json", {{"stragglers", R"({"slowdown": {"5": 1.2, "0": 1.1}})"}}),
        none);
    REQUIRE(slow.has_value());
    CHECK(slow->replicas == std::vector<int>{0, 1, 2});  // GPUs 0 and 5: replicas 0 and 2; replica 1 stands in
    CHECK(slow->stand_in == 1);
    CHECK(slow->tp == 2);
    // ... unless the stand-in would be the only one it stands for.
    CHECK_FALSE(twins_once_applies(
        load_config(kRuns + "llama3-8b-16xh100-fsdp-tp2.json",
                    {{"stragglers", R"({"slowdown": {"0": 1.1, "2": 1.1, "4": 1.1, "6": 1.1, "8": 1.1, "10": 1.1,
                                        "12": 1.1}})"}}),
        none));
    // A rank has no twins at dp 1 and tp 1.
    CHECK_FALSE(twins_once_applies(
        load_config(kRuns + "llama3-8b-8xh100-megatron.json",
                    {{"strategy.name", "\"1f1b\""}, {"strategy.tp", "1"}, {"strategy.pp", "8"}, {"strategy.dp", "1"},
                     {"strategy.sequence_parallel", "false"}}),
        none));
    // Twins must sit alike on the nodes: 3 context-parallel ranks on nodes of 8 GPUs, or pipeline
    // stages of 6 GPUs, put some replicas' groups or sends across two nodes and others' in one.
    const Config cp3 = load_config(kRuns + "llama3-8b-16xh100-fsdp.json",
                                   {{"cluster.nodes", "3"}, {"strategy.dp", "8"}, {"strategy.cp", "3"},
                                    {"model.seq", "6144"}, {"training.global_batch", "16"}});
    CHECK_FALSE(twins_once_applies(cp3, none));
    CHECK(every_rank_reason(cp3, none) ==
          "the cp x tp = 3 GPUs of a replica's stage straddle the nodes of 8 GPUs unevenly, so twins would cross "
          "other links");
    const Config pp6 = load_config(kRuns + "llama3-70b-64xh100-1f1b.json",
                                   {{"cluster.nodes", "3"}, {"strategy.dp", "6"}, {"strategy.tp", "1"}, {"strategy.pp", "4"},
                                    {"strategy.sequence_parallel", "false"}, {"model.layers", "8"},
                                    {"training.global_batch", "24"}});
    CHECK_FALSE(twins_once_applies(pp6, none));
    CHECK(every_rank_reason(pp6, none).starts_with("the dp x cp x tp = 6 GPUs of a pipeline stage straddle"));
    // ... as they do where a stage fills whole nodes or a node holds whole stages.
    CHECK(twins_once_applies(load_config(kRuns + "llama3-70b-64xh100-1f1b.json", {{"cluster.nodes", "16"}, {"strategy.dp", "4"}}),
                             none));
    CHECK(twins_once_applies(load_config(kRuns + "llama3-70b-64xh100-1f1b.json",
                                         {{"cluster.nodes", "2"}, {"strategy.dp", "2"}, {"strategy.tp", "2"}}),
                             none));
    CHECK(every_rank_reason(load_config(kRuns + "llama3-8b-16xh100-fsdp.json"), none).empty());
    CHECK(every_rank_reason(load_config(kRuns + "llama3-8b-16xh100-zero1-straggler.json"), none) ==
          "jitter makes twins differ");
    // Tensor parallelism alone has twins.
    CHECK(twins_once_applies(
        load_config(kRuns + "llama3-8b-8xh100-megatron.json", {{"strategy.tp", "8"}, {"strategy.dp", "1"}}), none));
    RunOptions off = none;
    off.twins_once = false;
    CHECK_FALSE(twins_once_applies(load_config(kRuns + "llama3-8b-16xh100-fsdp.json"), off));
}
