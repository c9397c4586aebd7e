// One rank simulated for its data- and tensor-parallel twins (RunOptions::twins_once, make_jobs'
// twins_once): the report equals the whole world's, figure for figure, for every strategy and
// schedule at several sizes, and so does the trace, event for event; and it applies only where the
// twins run the same program at the same times.
#include "dtsim/hw/config.hpp"
#include "dtsim/hw/run.hpp"
#include "dtsim/trace_io.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <sstream>
#include <string>
#include <utility>
#include <vector>

using namespace dtsim::hw;

namespace {

const std::string kRuns = std::string(DTSIM_CONFIGS) + "/runs/";

// The report as JSON without the wall-clock time the run took.
nlohmann::json report_of(const Config& c, bool twins_once) {
    RunOptions o;
    o.keep_trace = false;
    o.twins_once = twins_once;
    const RunReport r = simulate(c, o).report;
    CHECK(r.simulated_ranks == (twins_once ? r.gpus / (c.strategy.dp * c.strategy.tp) : r.gpus));
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
    for (const char* file : {"llama3-70b-64xh100-1f1b.json", "llama3-70b-64xh100-gpipe.json",
                             "llama3-70b-64xh100-interleaved.json", "llama3-70b-64xh100-zbh1.json",
                             "llama3-70b-64xh100-bfs.json", "llama3-70b-64xh100-dualpipev.json",
                             "llama3-70b-64xh100-1f1b-fsdp.json", "llama3-70b-64xh100-tp4.json"}) {
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
    check_same_report("gpt3-175b-1024xa100-sc21.json", {{"cluster.nodes", "32"}, {"strategy.dp", "2"}});
    // Hybrid sharding on one node: full sharding, step for step.
    check_same_report("llama3-8b-16xh100-fsdp-hybrid.json", {{"cluster.nodes", "1"}, {"strategy.dp", "8"}});
}

TEST_CASE("twins once: the same trace as every rank simulated, event for event, and the same report") {
    for (const auto& [file, overrides] : std::vector<std::pair<std::string, std::vector<Override>>>{
             {"llama3-8b-16xh100-zero1.json", {}},
             {"llama3-8b-16xh100-fsdp-tp2.json", {}},
             {"llama3-8b-8xh100-megatron.json", {{"strategy.tp", "2"}, {"strategy.cp", "2"}, {"strategy.dp", "2"}}},
             {"llama3-70b-64xh100-interleaved.json", {{"model.layers", "16"}, {"strategy.chunks", "2"}}},
             {"llama3-70b-64xh100-zbh1.json", {{"model.layers", "16"}}}}) {
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
    // A trace is copied from the twins; stragglers make twins differ; hybrid sharding's groups cut
    // across replicas; a rank has no twins at dp 1 and tp 1.
    CHECK(twins_once_applies(load_config(kRuns + "llama3-8b-16xh100-fsdp.json"), RunOptions{}));
    CHECK_FALSE(twins_once_applies(load_config(kRuns + "llama3-8b-16xh100-zero1-straggler.json"), none));
    CHECK_FALSE(twins_once_applies(load_config(kRuns + "llama3-8b-16xh100-fsdp-hybrid.json"), none));
    // ... but on one node hybrid sharding runs as full sharding (hybrid_shard_ranks), twins and all.
    CHECK(twins_once_applies(
        load_config(kRuns + "llama3-8b-16xh100-fsdp-hybrid.json", {{"cluster.nodes", "1"}, {"strategy.dp", "8"}}),
        none));
    CHECK_FALSE(twins_once_applies(
        load_config(kRuns + "llama3-8b-8xh100-megatron.json",
                    {{"strategy.name", "\"1f1b\""}, {"strategy.tp", "1"}, {"strategy.pp", "8"}, {"strategy.dp", "1"},
                     {"strategy.sequence_parallel", "false"}}),
        none));
    // Tensor parallelism alone has twins.
    CHECK(twins_once_applies(
        load_config(kRuns + "llama3-8b-8xh100-megatron.json", {{"strategy.tp", "8"}, {"strategy.dp", "1"}}), none));
    RunOptions off = none;
    off.twins_once = false;
    CHECK_FALSE(twins_once_applies(load_config(kRuns + "llama3-8b-16xh100-fsdp.json"), off));
}
