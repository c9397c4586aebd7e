// The chart of `dtsim plan --svg`: which layouts form the Pareto front, determinism, the three
// formats, and figures it cannot draw.
#include "dtsim/render.hpp"
#include "render_helpers.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace dtsim::render {
namespace {

using testing::read_file;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::filesystem::path scratch(const std::string& name) {
    auto dir = std::filesystem::temp_directory_path() / "dtsim-render-tests";
    std::filesystem::create_directories(dir);
    return dir / name;
}

std::vector<ParetoPoint> sample() {
    return {{"a", 5, 10 * kGiB, false},   // front: the smallest
            {"b", 4, 20 * kGiB, false},   // front
            {"c", 6, 15 * kGiB, false},   // beaten by a in both
            {"d", 4, 30 * kGiB, false},   // as fast as b, larger
            {"e", 3, 40 * kGiB, false},   // front: the fastest
            {"f", 1, 5 * kGiB, true},     // out of memory: never on the front
            {"g", 3, 40 * kGiB, false}};  // the same as e: e, given first, stands for both
}

}  // namespace

TEST_CASE("the Pareto front is the layouts that fit and that none beats in both step time and memory") {
    CHECK(pareto_front(sample()) == std::vector<std::size_t>{0, 1, 4});
    CHECK(pareto_front({}).empty());
    CHECK(pareto_front({{"oom", 1, 1, true}}).empty());
}

TEST_CASE("the Pareto chart is the same bytes each time, in each format") {
    const auto svg = scratch("pareto-a.svg"), again = scratch("pareto-b.svg");
    write_pareto_chart(sample(), 80 * kGiB, svg.string(), "plan test");
    write_pareto_chart(sample(), 80 * kGiB, again.string(), "plan test");
    const std::string bytes = read_file(svg);
    CHECK(bytes.starts_with("<?xml"));
    CHECK(bytes == read_file(again));
    // Another set of points draws another picture.
    auto fewer = sample();
    fewer.pop_back();
    fewer.front().step_time = 2;
    write_pareto_chart(fewer, 80 * kGiB, again.string(), "plan test");
    CHECK(bytes != read_file(again));
    for (const char* ext : {"png", "pdf"}) {
        const auto p = scratch(std::string("pareto.") + ext);
        write_pareto_chart(sample(), 80 * kGiB, p.string(), "plan test");
        CHECK(std::filesystem::file_size(p) > 100);
    }
    // A headroom (plan --headroom) adds its line, where the layouts that fit end.
    write_pareto_chart(sample(), 80 * kGiB, again.string(), "plan test", 10 * kGiB);
    const std::string with_headroom = read_file(again);
    CHECK(with_headroom != bytes);
    CHECK(with_headroom.find("stroke-dasharray:1.5,3;") != std::string::npos);
    CHECK(bytes.find("stroke-dasharray:1.5,3;") == std::string::npos);
    // Nothing simulated, or nothing that fits: axes and an empty list, no error.
    CHECK_NOTHROW(write_pareto_chart({}, 80 * kGiB, svg.string(), "nothing"));
    CHECK_NOTHROW(write_pareto_chart({}, 0, svg.string(), "nothing, no capacity known", 10 * kGiB));
    CHECK_NOTHROW(write_pareto_chart({{"oom", 1, 90 * kGiB, true}}, 80 * kGiB, svg.string(), "nothing fits"));
}

TEST_CASE("a figure the Pareto chart cannot draw is named") {
    const auto path = scratch("pareto-bad.svg").string();
    CHECK_THROWS_WITH_AS(write_pareto_chart({{"x", std::nan(""), 1, false}}, kGiB, path, "t"),
                         doctest::Contains("\"x\" has step time nan"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(write_pareto_chart({{"y", 1, std::numeric_limits<double>::infinity(), false}}, kGiB, path, "t"),
                         doctest::Contains("\"y\" has step time 1 and peak memory inf"), std::invalid_argument);
    CHECK_THROWS_AS(write_pareto_chart({}, kGiB, scratch("pareto.txt").string(), "t"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(write_pareto_chart({}, kGiB, path, "t", kGiB), doctest::Contains("headroom 1073741824 with "
                                                                                           "capacity 1073741824"),
                         std::invalid_argument);
    CHECK_THROWS_AS(write_pareto_chart({}, kGiB, path, "t", -1), std::invalid_argument);
}

}  // namespace dtsim::render
