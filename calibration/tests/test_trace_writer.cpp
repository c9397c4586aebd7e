#include "host/trace_writer.hpp"

#include <doctest/doctest.h>

using namespace dtsim::calib;

TEST_CASE("a measured trace has the version-1 header, hardware units and computed summary") {
    std::vector<RankEvents> ranks(2);
    ranks[0].rank = 0;
    ranks[0].events = {{"forward", 0, 0.0, 1e-4, 4096, {0}, "compute", 0, 2.0e8},
                       {"allreduce", 0, 2e-4, 5e-5, 8192, {}, "comm", 1048576, 0},
                       {"update", std::nullopt, 3e-4, 1e-5, 8192, {}, "compute", 0, 0}};
    ranks[1].rank = 1;
    ranks[1].events = {{"forward", 0, 1e-5, 1e-4, 8192, {1}, "compute", 0, 0},
                       {"pass", std::nullopt, 4e-4, 2e-5, 100, {}, "comm", 512, 0}};
    const auto doc = trace_json({{"puzzle", "ddp"}, {"source", "measured"}}, ranks, true);
    CHECK(doc["format"] == "dtsim-trace");
    CHECK(doc["version"] == 1);
    CHECK(doc["time_unit"] == "s");
    CHECK(doc["memory_unit"] == "byte");
    CHECK(doc["meta"]["source"] == "measured");
    const auto& s = doc["summary"];
    CHECK(s["timesteps"].get<double>() == doctest::Approx(4e-4));  // the last start, over ranks
    CHECK(s["makespan"].get<double>() == doctest::Approx(4.2e-4));
    CHECK(s["max_memory"] == 8192.0);
    CHECK(s["max_memory_rank"] == 0);  // first in rank order, then event order
    CHECK(s["max_memory_time"].get<double>() == doctest::Approx(2e-4));
    CHECK(s["correct"] == true);
    REQUIRE(doc["ranks"].size() == 2);
    const auto& e = doc["ranks"][0]["events"];
    CHECK(e[0]["op"] == "forward");
    CHECK(e[0]["layer"] == 0);
    CHECK(e[0]["batches"] == nlohmann::json::array({0}));
    CHECK(e[0]["stream"] == "compute");
    CHECK(e[0]["flops"] == 2.0e8);
    CHECK_FALSE(e[0].contains("bytes"));
    CHECK(e[1]["bytes"] == 1048576.0);
    CHECK(e[2]["layer"].is_null());
    CHECK(e[2]["batches"] == nlohmann::json::array());
}

TEST_CASE("an absent correctness result is left out of the summary") {
    const auto doc = trace_json(nlohmann::json::object(), {}, std::nullopt);
    CHECK_FALSE(doc["summary"].contains("correct"));
    CHECK(doc["summary"]["makespan"] == 0.0);
}
