// Parity with the reference puzzle library: the eight seed solutions at their
// canonical sizes reproduce the golden event logs event for event.
#include "dtsim/puzzle/registry.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <string>
#include <tuple>

using namespace dtsim;
using nlohmann::json;

namespace {

json load_golden(const std::string& name) {
    std::ifstream f(std::string(DTSIM_TEST_DATA) + "/golden/" + name + ".json");
    REQUIRE_MESSAGE(f.good(), "missing golden file for ", name);
    return json::parse(f);
}

bool close(double a, double b, double tol) { return std::fabs(a - b) <= tol; }

void check_parity(const puzzle::PuzzleInfo& p) {
    const json g = load_golden(p.name);
    auto run = puzzle::run_strategy(p.strategy, g["layers"], g["batches"], g["ranks"]);
    const Trace& t = run.trace;
    CHECK(t.summary.correct == true);
    // The golden times are rounded to 6 decimals; memory is exact.
    CHECK(close(t.summary.timesteps, g["timesteps"], 1e-9));
    CHECK(t.summary.max_memory == g["max_memory"].get<double>());
    CHECK(t.summary.max_memory_rank == g["max_memory_rank"].get<int>());
    CHECK(close(t.summary.max_memory_time, g["max_memory_time"], 1e-9));
    REQUIRE(t.ranks.size() == g["events"].size());
    for (std::size_t r = 0; r < t.ranks.size(); ++r) {
        const auto& mine = t.ranks[r].events;
        const auto& ref = g["events"][r];
        REQUIRE_MESSAGE(mine.size() == ref.size(), p.name, " rank ", r);
        for (std::size_t i = 0; i < mine.size(); ++i) {
            const Event& e = mine[i];
            const json& x = ref[i];
            INFO(p.name, " rank ", r, " event ", i, " (", x.dump(), ")");
            CHECK(e.op.name() == x["typ"].get<std::string>());
            if (x["layer"].is_null())
                CHECK(e.layer == kNoLayer);
            else
                CHECK(e.layer == x["layer"].get<int>());
            CHECK(close(e.start, x["time"], 5e-7));
            CHECK(close(e.duration, x["length"], 1e-12));
            CHECK(e.memory == x["memory"].get<double>());
            CHECK(e.batches.to_vector() == x["batches"].get<std::vector<std::int64_t>>());
        }
    }
}

}  // namespace

TEST_CASE("every canonical puzzle reproduces its golden event log") {
    for (const auto& p : puzzle::puzzles()) {
        SUBCASE(p.name.c_str()) { check_parity(p); }
    }
}

TEST_CASE("the seed's reported figures come out bit for bit") {
    // As printed in the seed text (binary64 clocks, `clock += length`).
    struct Fig {
        const char* name;
        double timesteps;
        double memory;
        int rank;
        double time;
    };
    for (const Fig f : {Fig{"basic", 16.5, 2621440, 0, 8}, Fig{"ddp", 5.1, 1835008, 0, 4},
                        Fig{"wsdp", 19.90000000000001, 2752512, 0, 14.600000000000003},
                        Fig{"fsdp", 19.900000000000006, 2359296, 0, 9.1},
                        Fig{"pipeline", 66.9, 3145728, 0, 58.40000000000001},
                        Fig{"gpipe", 33.29999999999999, 4194304, 1, 30.39999999999999},
                        Fig{"pipeline_fsdp", 15.5, 966656, 0, 13.7}}) {
        INFO(f.name);
        const auto* p = puzzle::find_puzzle(f.name);
        REQUIRE(p);
        auto s = puzzle::run_strategy(p->strategy, p->layers, p->batches, p->ranks).trace.summary;
        CHECK(s.timesteps == f.timesteps);
        CHECK(s.max_memory == f.memory);
        CHECK(s.max_memory_rank == f.rank);
        CHECK(s.max_memory_time == f.time);
    }
}

TEST_CASE("a run that keeps only the summary reports the same figures and operation count as one that keeps every event, "
          "and both the figures a pass over the events gives") {
    for (const auto& p : puzzle::puzzles()) {
        for (const auto& size : {std::tuple{p.layers, p.batches, p.ranks}, std::tuple{3, 8, 4}, std::tuple{4, 16, 8}}) {
            const int layers = std::get<0>(size), batches = std::get<1>(size), ranks = std::get<2>(size);
            CAPTURE(p.name);
            CAPTURE(ranks);
            puzzle::RunResult full, lean;
            try {
                full = puzzle::run_strategy(p.strategy, layers, batches, ranks);
            } catch (const ScheduleError&) {
                continue;  // a size this strategy does not accept
            }
            lean = puzzle::run_strategy(p.strategy, layers, batches, ranks, puzzle::puzzle_costs(),
                                        nlohmann::json::object(), puzzle::Keep::summary);
            CHECK(lean.trace.ranks.empty());
            CHECK(lean.events == full.trace.event_count());
            CHECK(lean.events == full.events);
            const auto& a = full.trace.summary;
            const auto& b = lean.trace.summary;
            CHECK(a.timesteps == b.timesteps);
            CHECK(a.makespan == b.makespan);
            CHECK(a.max_memory == b.max_memory);
            CHECK(a.max_memory_rank == b.max_memory_rank);
            CHECK(a.max_memory_time == b.max_memory_time);
            CHECK(a.correct == b.correct);
            // Both fold the summary as events are recorded; a pass over the kept events agrees.
            Trace again;
            again.ranks = full.trace.ranks;
            summarize(again);
            const auto& c = again.summary;
            CHECK(c.timesteps == a.timesteps);
            CHECK(c.makespan == a.makespan);
            CHECK(c.max_memory == a.max_memory);
            CHECK(c.max_memory_rank == a.max_memory_rank);
            CHECK(c.max_memory_time == a.max_memory_time);
        }
    }
}
