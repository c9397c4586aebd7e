// The measured run is a dtsim trace of the hardware world, written by dtsim's own writer and
// read back by its reader: seconds and bytes, streams, FLOPs and bytes moved, the run's
// metadata and whether its final weights were correct.
#include "host/schedule.hpp"

#include "dtsim/trace_io.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <sstream>
#include <vector>

using namespace dtsim;
using namespace dtsim::harness;

namespace {

// Every logged operation of every rank: 10 us apart, 5 us long, memory as the program says.
std::vector<std::vector<EventTiming>> timings_of(const std::vector<RankProgram>& programs) {
    std::vector<std::vector<EventTiming>> out;
    for (const auto& p : programs) {
        std::vector<EventTiming> rank;
        for (const auto& i : p.instrs)
            if (!event_op(i.op).empty())
                rank.push_back({1e-5 * static_cast<double>(rank.size()) + 1e-6 * p.rank, 5e-6,
                                static_cast<double>(i.live_bytes)});
        out.push_back(std::move(rank));
    }
    return out;
}

}  // namespace

TEST_CASE("a measured trace has hardware units, streams, FLOPs and bytes, meta and the check's verdict") {
    ModelDims d;
    d.layers = 2;
    d.batches = 4;
    d.ranks = 4;
    const auto programs = build_programs("ddp", d);
    const auto timings = timings_of(programs);
    const Trace t = measured_trace(programs, d, timings, {{"puzzle", "ddp"}, {"source", "measured"}}, true);
    std::ostringstream text;
    write_trace_json(t, text);
    const auto doc = nlohmann::json::parse(text.str());
    CHECK(doc["format"] == "dtsim-trace");
    CHECK(doc["version"] == 1);
    CHECK(doc["time_unit"] == "s");
    CHECK(doc["memory_unit"] == "byte");
    CHECK(doc["meta"]["source"] == "measured");
    const auto& s = doc["summary"];
    CHECK(s["timesteps"].get<double>() == doctest::Approx(8e-5 + 3e-6));  // rank 3's ninth event starts last
    CHECK(s["makespan"].get<double>() == doctest::Approx(8.5e-5 + 3e-6));
    CHECK(s["correct"] == true);
    REQUIRE(doc["ranks"].size() == 4);
    const auto& e = doc["ranks"][1]["events"];
    REQUIRE(e.size() == 9);  // 2 forwards, loss, 2 backwards, then all-reduce and update per layer
    CHECK(e[0]["op"] == "forward");
    CHECK(e[0]["layer"] == 0);
    CHECK(e[0]["batches"] == nlohmann::json::array({1}));
    CHECK(e[0]["stream"] == "compute");
    CHECK(e[0]["flops"] == 2.0 * 256 * 512 * 512);
    CHECK_FALSE(e[0].contains("bytes"));
    CHECK(e[3]["op"] == "backward");
    CHECK(e[3]["flops"] == 6.0 * 256 * 512 * 512);
    CHECK(e[5]["op"] == "allreduce");
    CHECK(e[5]["stream"] == "comm");
    CHECK(e[5]["bytes"] == 512.0 * 512 * 4);
    CHECK(e[6]["op"] == "update");
    CHECK(e[6]["layer"].is_null());
    std::vector<const Instr*> logged;
    for (const auto& i : programs[1].instrs)
        if (!event_op(i.op).empty()) logged.push_back(&i);
    CHECK(logged[6]->live_bytes > 0);
    CHECK(e[6]["memory"] == static_cast<double>(logged[6]->live_bytes));

    // dtsim's reader takes it back as it was written.
    std::istringstream in(text.str());
    const Trace back = read_trace_json(in, "measured.json");
    CHECK(back.time_unit == "s");
    CHECK(back.summary.correct == std::optional<bool>(true));
    CHECK(back.ranks.at(2).events.at(5).bytes == 512.0 * 512 * 4);
    CHECK(back.ranks.at(2).events.at(5).stream == Stream::comm);
}

TEST_CASE("a run without the check leaves `correct` out; timings must match the programs") {
    ModelDims d;
    d.layers = 8;
    d.batches = 4;
    d.ranks = 4;
    const auto programs = build_programs("pipeline", d);
    auto timings = timings_of(programs);
    const Trace t = measured_trace(programs, d, timings, nlohmann::json::object(), std::nullopt);
    CHECK_FALSE(t.summary.correct.has_value());
    CHECK(t.ranks.at(1).events.front().op == ops::pass);  // rank 1 starts by receiving the activations
    CHECK(t.ranks.at(1).events.front().bytes == 4.0 * 256 * 512 * 4);
    timings[2].pop_back();
    CHECK_THROWS_AS(measured_trace(programs, d, timings, nlohmann::json::object(), std::nullopt),
                    std::invalid_argument);
}
