// The renderer's private pieces: units and ticks, column summaries, SVG id renumbering.
#include "columns.hpp"
#include "memory_profile.hpp"
#include "sample_traces.hpp"
#include "svg_ids.hpp"
#include "units.hpp"

#include <doctest/doctest.h>

namespace dtsim::render::detail {

TEST_CASE("memory reads as units in the puzzle world and KiB/MiB/GiB in bytes") {
    CHECK(format_memory(1835008, false) == "1,835,008 units");
    CHECK(format_memory(512, false) == "512 units");
    CHECK(format_memory(2.5, false) == "2.5 units");
    CHECK(format_memory(2831155.2, false) == "2,831,155.2 units");
    CHECK(format_memory(1234.567, false) == "1,234.57 units");
    CHECK(format_memory(-0.25, false) == "-0.25 units");
    CHECK(format_memory(1000, true) == "1000 B");
    CHECK(format_memory(1536, true) == "1.5 KiB");
    CHECK(format_memory(1835008, true) == "1.75 MiB");
    CHECK(format_memory(80.0 * (1 << 30), true) == "80 GiB");
    CHECK(format_memory(61.2 * (1 << 30), true) == "61.2 GiB");
}

TEST_CASE("times read as steps in the puzzle world and s/ms/us/ns in seconds") {
    CHECK(format_time(5.1, false) == "5.1");
    CHECK(format_time(19.900000000000006, false) == "19.9");
    CHECK(format_time(4, false) == "4");
    CHECK(format_time(4e-3, true) == "4 ms");
    CHECK(format_time(12.5e-6, true) == "12.5 \u00b5s");
    CHECK(format_time(2.25, true) == "2.25 s");
    CHECK(format_time(3e-9, true) == "3 ns");
    CHECK(format_time(10799, true) == "10799 s");
    CHECK(format_time(46425, true) == "12.9 h");
}

TEST_CASE("time ticks are 1, 2 or 5 times a power of ten, in a unit that suits them") {
    const Ticks steps = time_ticks(0, 5.6, 12, false);
    CHECK(steps.step == doctest::Approx(0.5));
    CHECK(steps.unit == "steps");
    CHECK(steps.values.size() == 12);
    CHECK(tick_label(steps.values[3], steps) == "1.5");
    const Ticks ms = time_ticks(0, 16e-3, 8, true);
    CHECK(ms.step == doctest::Approx(2e-3));
    CHECK(ms.unit == "ms");
    CHECK(tick_label(ms.values.back(), ms) == "16");
    const Ticks s = time_ticks(0, 4.58, 10, true);
    CHECK(s.unit == "s");
    CHECK(s.step == doctest::Approx(0.5));
    CHECK(tick_label(s.values.back(), s) == "4.5");
    const Ticks us = time_ticks(0, 3e-4, 6, true);
    CHECK(us.unit == "\u00b5s");
    CHECK(tick_label(us.values[1], us) == "50");
    // A long run (dtsim failures) in hours: 79,819 s (22.2 h) over about 10 ticks is a tick every 5 hours.
    const Ticks h = time_ticks(0, 79819, 10, true);
    CHECK(h.unit == "h");
    CHECK(h.step == doctest::Approx(5 * 3600));
    CHECK(tick_label(h.values.back(), h) == "20");
    CHECK(time_ticks(0, 79819, 20, true).step == doctest::Approx(2 * 3600));
}

TEST_CASE("busy columns keep the busy fraction and the dominant style per pixel") {
    BusyColumns cols(4);
    cols.add(0.0, 0.25, 7, 1);
    cols.add(0.25, 0.5, 7, 1);
    cols.add(0.5, 0.75, 9, 1);
    cols.add(1.0, 3.0, 9, 0.5);
    const auto runs = cols.runs(4);
    REQUIRE(runs.size() == 2);
    CHECK(runs[0].first == 0);
    CHECK(runs[0].end == 1);
    CHECK(runs[0].key == 7);
    CHECK(runs[0].level == doctest::Approx(0.75));
    CHECK(runs[1].first == 1);
    CHECK(runs[1].end == 3);
    CHECK(runs[1].key == 9);
    CHECK(runs[1].level == doctest::Approx(0.5));
}

TEST_CASE("max columns keep the largest value touching each pixel") {
    MaxColumns cols(5);
    cols.add(0.2, 0.4, 3);
    cols.add(0.4, 0.6, 5);
    cols.add(1.5, 3.0, 2);
    const auto runs = cols.runs(1);
    REQUIRE(runs.size() == 2);
    CHECK(runs[0].value == 5);
    CHECK(runs[0].end == 1);
    CHECK(runs[1].first == 1);
    CHECK(runs[1].end == 3);
    CHECK(runs[1].value == 2);
}

TEST_CASE("memory steps run from each event's start to the next, merged where equal") {
    const auto steps = memory_steps(testing::ddp_trace().ranks[0]);
    REQUIRE(steps.size() == 5);
    CHECK(steps[2].t0 == 2);
    CHECK(steps[2].value == 1572864);  // the zero-length loss step is gone
    CHECK(steps[4].t0 == 4);
    CHECK(steps[4].t1 == doctest::Approx(5.6));
}

TEST_CASE("SVG surface ids are renumbered from 1 in order of appearance") {
    CHECK(normalise_surface_ids(
              "<g id=\"surface17\"><use xlink:href=\"#surface9\"/><use xlink:href=\"#surface17\"/>") ==
          "<g id=\"surface1\"><use xlink:href=\"#surface2\"/><use xlink:href=\"#surface1\"/>");
    CHECK(normalise_surface_ids("no surface here; surface12 unquoted") ==
          "no surface here; surface12 unquoted");
}

}  // namespace dtsim::render::detail
