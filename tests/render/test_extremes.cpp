// The renderer on traces whose numbers are extreme: huge but finite times (1e300, a span of 1e15 s),
// spans too narrow for pixels, and numbers that are not finite. Its work stays bounded by the
// picture (a few thousand columns, a handful of ticks), never by the magnitudes; what it cannot
// draw or export is an std::invalid_argument naming it, and the Chrome export never writes null,
// inf or nan.
#include "dtsim/render.hpp"
#include "layout.hpp"
#include "render_helpers.hpp"
#include "sample_traces.hpp"
#include "svg_reader.hpp"
#include "units.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <sstream>
#include <string>

namespace dtsim::render {
namespace {

using testing::make_event;

constexpr double kInf = std::numeric_limits<double>::infinity();

// One hardware-world rank per list of (start, duration), memory rising by one GiB an event.
Trace trace_of(std::initializer_list<std::pair<double, double>> events) {
    std::vector<Event> rank;
    double memory = 0;
    for (auto [start, duration] : events)
        rank.push_back(make_event(ops::forward, 0, start, duration, memory += 1 << 30));
    return testing::seconds_trace({std::move(rank)});
}

// Renders SVG and PNG and exports the Chrome trace; returns the SVG's size.
std::size_t render_all(const Trace& t) {
    std::ostringstream svg, png, chrome;
    write_image(t, svg, Format::svg);
    write_image(t, png, Format::png);
    write_chrome_trace(t, chrome);
    const std::string c = chrome.str();
    CHECK(c.find("null") == std::string::npos);
    CHECK(c.find("inf") == std::string::npos);
    CHECK(c.find("nan") == std::string::npos);
    return svg.str().size();
}

// The layout of a trace: a handful of ticks, each label short, the picture of bounded size.
void check_bounded(const Trace& t) {
    const detail::Layout l = detail::make_layout(t, {});
    CHECK(l.ticks.values.size() <= 30);
    CHECK(l.ticks.step > 0);
    CHECK(std::isfinite(l.ticks.step));
    for (double v : l.ticks.values) CHECK(detail::tick_label(v, l.ticks).size() <= 24);
    CHECK(std::isfinite(l.px_per_time));
    CHECK(l.width <= 4000);
    CHECK(l.height <= 4000);
    for (const auto& line : l.header) CHECK(line.text.size() <= 400);
}

}  // namespace

TEST_CASE("a trace at 1e300 seconds draws a bounded picture") {
    const Trace t = trace_of({{0, 1}, {1e300, 1e300}, {1.5e300, 1e299}});
    check_bounded(t);
    CHECK(render_all(t) < 200000);
}

TEST_CASE("a trace spread over 1e15 seconds draws a bounded picture") {
    Trace t;
    t.time_unit = "s";
    t.memory_unit = "byte";
    t.ranks.resize(4);
    for (int r = 0; r < 4; ++r) {
        t.ranks[static_cast<std::size_t>(r)].rank = r;
        for (int i = 0; i < 2000; ++i)
            t.ranks[static_cast<std::size_t>(r)].events.push_back(
                make_event(ops::forward, i % 7, i * 5e11, 1e-3 * (i + 1), 1e9 * (i % 13)));
    }
    summarize(t);
    check_bounded(t);
    CHECK(render_all(t) < 5000000);  // a few rectangles per pixel column and row at most
}

TEST_CASE("a span too narrow for pixels draws a bounded picture") {
    check_bounded(trace_of({{0, 1e-310}, {1e-310, 1e-320}}));
    CHECK(render_all(trace_of({{0, 1e-310}, {1e-310, 1e-320}})) < 200000);
    check_bounded(trace_of({{0, 0}, {0, 0}}));
}

TEST_CASE("time ticks over extreme ranges are few, positive and finite") {
    const double big = std::numeric_limits<double>::max();
    for (const auto& span : {std::pair{0.0, 1e308}, {-big, big}, {0.0, 1e-320}, {0.0, 5e-324}, {1e300, 1e300 + 1e285},
                             {-1e-300, 0.0}, {0.0, 0.0}, {0.0, 1e15}})
        for (int target : {1, 2, 15})
            for (bool seconds : {false, true}) {
                const double t0 = span.first, t1 = span.second;
                CAPTURE(t0);
                CAPTURE(t1);
                CAPTURE(target);
                const detail::Ticks ticks = detail::time_ticks(t0, t1, target, seconds);
                CHECK(ticks.step > 0);
                CHECK(std::isfinite(ticks.step));
                CHECK(ticks.values.size() <= 4 * static_cast<std::size_t>(target) + 4);
                for (double v : ticks.values) CHECK(detail::tick_label(v, ticks).size() <= 24);
            }
}

TEST_CASE("a trace whose end is not finite is refused, not drawn") {
    // start 1e308 + duration 1e308 overflows: its end is infinite.
    const Trace t = trace_of({{0, 1}, {1e308, 1e308}});
    CHECK_THROWS_WITH_AS(
        detail::make_layout(t, {}),
        doctest::Contains("cannot draw the trace: rank 0, event 1 (forward): its end is not finite (inf)"),
        std::invalid_argument);
    std::ostringstream svg;
    CHECK_THROWS_AS(write_image(t, svg, Format::svg), std::invalid_argument);
    Trace nan_memory = trace_of({{0, 1}});
    nan_memory.ranks[0].events[0].memory = std::nan("");
    CHECK_THROWS_WITH_AS(write_image(nan_memory, svg, Format::svg), doctest::Contains("its memory is not finite"),
                         std::invalid_argument);
    Trace capacity = trace_of({{0, 1}});
    capacity.memory_capacity = kInf;
    CHECK_THROWS_WITH_AS(write_image(capacity, svg, Format::svg),
                         doctest::Contains("its memory capacity is not finite"), std::invalid_argument);
    // Ends so far apart that their span overflows.
    Trace apart = trace_of({{-1e308, 1}, {1e308, 1}});
    CHECK_THROWS_WITH_AS(write_image(apart, svg, Format::svg), doctest::Contains("a span a double cannot hold"),
                         std::invalid_argument);
}

TEST_CASE("the Chrome export refuses a number it cannot write, before it writes anything") {
    // 1e303 s is 1e309 microseconds: past the largest double.
    const Trace late = trace_of({{0, 1}, {1e303, 1}});
    std::ostringstream out;
    CHECK_THROWS_WITH_AS(write_chrome_trace(late, out),
                         "the Chrome trace cannot hold the start in microseconds of rank 0, event 1 (forward): inf is "
                         "not a JSON number",
                         std::invalid_argument);
    CHECK(out.str().empty());
    const auto path = std::filesystem::temp_directory_path() / "dtsim-render-extreme.chrome.json";
    std::filesystem::remove(path);
    CHECK_THROWS_AS(write_chrome_trace_file(late, path.string()), std::invalid_argument);
    CHECK(!std::filesystem::exists(path));
    Trace flops = trace_of({{0, 1}});
    flops.ranks[0].events[0].flops = kInf;
    CHECK_THROWS_WITH_AS(write_chrome_trace(flops, out), doctest::Contains("FLOPs of rank 0, event 0"),
                         std::invalid_argument);
    Trace meta = trace_of({{0, 1}});
    meta.meta = {{"failures", {{"goodput", std::nan("")}}}};
    CHECK_THROWS_WITH_AS(write_chrome_trace(meta, out), doctest::Contains("the trace's meta.failures.goodput"),
                         std::invalid_argument);
    // The largest times that fit are written as numbers.
    std::ostringstream fits;
    write_chrome_trace(trace_of({{0, 1}, {1e300, 1e300}}), fits);
    CHECK(fits.str().find("null") == std::string::npos);
}

TEST_CASE("the comparison chart bounds its axes for huge figures and refuses ones that are not finite") {
    const auto path = std::filesystem::temp_directory_path() / "dtsim-render-extreme-compare.svg";
    const CompareRow huge{"huge", 1e307, 5e307, 1e307, 1e300, 8e10};
    CHECK_NOTHROW(write_compare_chart({huge, {"small", 1, 0, 0, 1, 8e10}}, path.string(), "extremes"));
    CHECK(std::filesystem::file_size(path) < 200000);
    const CompareRow bad{"bad", kInf, 0, 0, 1, 8e10};
    CHECK_THROWS_WITH_AS(write_compare_chart({bad}, path.string(), "extremes"),
                         "cannot draw the comparison: the step time of \"bad\" is not finite (inf)",
                         std::invalid_argument);
}

}  // namespace dtsim::render

namespace dtsim::render {

TEST_CASE("memory by kind far beyond the events, or impossible, is clipped or refused, not drawn out of bounds") {
    // Events over 2 s; samples at 0 and at 1e7 s and 1e300 s, which a trace may hold (only their order
    // and signs are checked): the first holds over the whole plot, the later ones lie beyond it.
    Trace t = trace_of({{0, 1}, {1, 1}});
    t.memory_kinds = {"weights", "activations"};
    const double G = 1 << 30;
    t.ranks[0].memory_by_kind = {0, 1 * G, 1 * G, 1e7, 3 * G, 0, 1e300, 1 * G, 0};
    check_bounded(t);
    CHECK(render_all(t) < 200000);
    const detail::Layout l = detail::make_layout(t, {});
    REQUIRE(l.rows.size() == 1);
    CHECK(l.rows[0].by_kind);
    // The first sample's weights fill the lane's whole width.
    const auto paths = testing::read_paths(testing::render_svg(t));
    double covered = 0;
    for (const auto& r : testing::rects_of(paths, l.rows[0].memory, detail::memory_kind_colour("weights", 0)))
        covered += r.width();
    CHECK(testing::near(covered, l.plot_x1 - l.plot_x0, 1.0));
    // The largest sample (3 GiB at 1e7 s) is past the events' peak (2 GiB): the figures line says so.
    REQUIRE(l.header.size() >= 2);
    CHECK(l.header[1].text.find("most held by kind: 3 GiB on GPU 0 at") != std::string::npos);
    // A negative time or amount, or a sample that is not whole, is refused.
    Trace bad = t;
    bad.ranks[0].memory_by_kind[0] = -1;
    CHECK_THROWS_WITH_AS(detail::make_layout(bad, {}), doctest::Contains("rank 0, memory sample 0"), std::invalid_argument);
    bad = t;
    bad.ranks[0].memory_by_kind[1] = -1;
    CHECK_THROWS_AS(detail::make_layout(bad, {}), std::invalid_argument);
    bad = t;
    bad.ranks[0].memory_by_kind.push_back(0);
    CHECK_THROWS_WITH_AS(detail::make_layout(bad, {}), doctest::Contains("not whole samples"), std::invalid_argument);
}

TEST_CASE("a picture too tall to draw is refused, naming its height and rows") {
    // N ranks of one event each, every one a row of the ranks view (max_rows N, so no overview).
    const auto many_ranks = [](int n) {
        return testing::seconds_trace(std::vector<std::vector<Event>>(static_cast<std::size_t>(n),
                                                                      {make_event(ops::forward, 0, 0, 1, 1 << 20)}));
    };
    Options o;
    o.view = View::ranks;
    o.max_rows = 1000;
    const detail::Layout fits = detail::make_layout(many_ranks(1000), o);
    CHECK(fits.rows.size() == 1000);
    CHECK(fits.height > 1000);
    // Rows enough for 40,000 pixels: laid out, and refused as PNG before anything is written.
    const int tall = static_cast<int>(40000 / (fits.height / 1000.0));
    o.max_rows = tall;
    const Trace t = many_ranks(tall);
    const int height = detail::make_layout(t, o).height;
    CHECK(height > 32767);
    std::ostringstream png;
    CHECK_THROWS_WITH_AS(
        write_image(t, png, Format::png, o),
        fmt::format("a PNG is at most 32767 pixels tall and this picture is {}: "
                    "write SVG or PDF, or select fewer ranks",
                    height)
            .c_str(),
        std::invalid_argument);
    CHECK(png.str().empty());
    // Rows enough for 1.5 million pixels.
    const int n = static_cast<int>(1.5e6 / (fits.height / 1000.0));
    o.max_rows = n;
    const std::string says = fmt::format("pixels tall for its {} rows, more than the 1000000 that can be drawn", n);
    CHECK_THROWS_WITH_AS(detail::make_layout(many_ranks(n), o), doctest::Contains(says.c_str()), std::invalid_argument);
}

}  // namespace dtsim::render
