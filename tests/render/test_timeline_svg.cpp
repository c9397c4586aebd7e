// The timeline picture, read back from the SVG: one box per event where the trace
// says, coloured by kind; memory bars; the peak; lanes; rank selection; overview.
#include "dtsim/render.hpp"
#include "render_helpers.hpp"
#include "layout.hpp"
#include "palette.hpp"
#include "sample_traces.hpp"
#include "svg_reader.hpp"
#include "synthetic_trace.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <sstream>

namespace dtsim::render {
namespace {

using testing::render_svg;
using testing::near;

using detail::Lane;
using detail::Layout;
using testing::SvgPath;

detail::SyntheticSpec spec(int ranks, int steps) {
    detail::SyntheticSpec s;
    s.ranks = ranks;
    s.steps = steps;
    return s;
}

bool has_colour(const SvgPath& p, detail::Rgba c) {
    return p.filled && testing::same_colour(p.fill, c.r, c.g, c.b) && near(p.fill_opacity, c.a, 0.001);
}

// Filled rectangles inside a lane, its background left out.
std::vector<SvgPath> in_lane(const std::vector<SvgPath>& paths, const Lane& lane, const Layout& l) {
    std::vector<SvgPath> out;
    for (const auto& p : paths)
        if (p.filled && p.is_rect && p.y0 >= lane.y - 0.01 && p.y1 <= lane.bottom() + 0.01 &&
            !(near(p.x0, l.plot_x0) && near(p.x1, l.plot_x1) && near(p.height(), lane.h)))
            out.push_back(p);
    return out;
}

}  // namespace

TEST_CASE("each event of a puzzle trace is one box at x proportional to start, width to duration") {
    const Trace t = testing::ddp_trace();
    const Layout l = detail::make_layout(t, {});
    const auto paths = testing::read_paths(render_svg(t));
    REQUIRE(l.rows.size() == 4);
    for (std::size_t r = 0; r < 4; ++r) {
        CAPTURE(r);
        const auto& row = l.rows[r];
        CHECK(row.label == "GPU " + std::to_string(r));
        auto boxes = in_lane(paths, row.compute, l);
        std::erase_if(boxes, [](const SvgPath& p) { return has_colour(p, detail::colours::marker); });
        std::size_t drawn = 0;
        for (const auto& e : t.ranks[r].events) {
            if (e.duration == 0) continue;
            ++drawn;
            const double x = l.x_of(e.start), w = e.duration * l.px_per_time;
            const auto n = std::count_if(boxes.begin(), boxes.end(), [&](const SvgPath& p) {
                return near(p.x0, x) && near(p.width(), w) && near(p.y0, row.compute.y) &&
                       near(p.height(), row.compute.h) &&
                       has_colour(p, detail::style_colour(detail::style_key(e), l.layers));
            });
            CAPTURE(e.op.name());
            CAPTURE(e.start);
            CHECK(n == 1);
        }
        CHECK(boxes.size() == drawn);  // nothing else in the lane

        // The same without the layout: x and width are one linear map of start and duration.
        std::sort(boxes.begin(), boxes.end(), [](const SvgPath& a, const SvgPath& b) { return a.x0 < b.x0; });
        const auto& ev = t.ranks[r].events;
        const double k = (boxes.back().x0 - boxes.front().x0) / (ev.back().start - ev.front().start);
        std::size_t i = 0;
        for (const auto& e : ev) {
            if (e.duration == 0) continue;
            CHECK(near(boxes[i].x0, boxes.front().x0 + k * (e.start - ev.front().start)));
            CHECK(near(boxes[i].width(), k * e.duration));
            ++i;
        }
    }
}

TEST_CASE("boxes are coloured by kind: forward by layer green to red, backward lighter, update yellow") {
    const Trace t = testing::ddp_trace();
    const Layout l = detail::make_layout(t, {});
    const auto boxes = in_lane(testing::read_paths(render_svg(t)), l.rows[0].compute, l);
    auto at = [&](double start) {
        for (const auto& p : boxes)
            if (near(p.x0, l.x_of(start)) && p.width() > 3) return p;
        FAIL("no box at ", start);
        return SvgPath{};
    };
    const SvgPath f0 = at(0), f1 = at(1), b1 = at(2), b0 = at(3), ar0 = at(4), upd = at(4.3), ar1 = at(4.8);
    CHECK(f0.fill.g > f0.fill.r);  // layer 0: green
    CHECK(f1.fill.r > f1.fill.g);  // last layer: red
    CHECK(b0.fill.r > f0.fill.r);  // backward: the same hue, lighter
    CHECK(b0.fill.g > f0.fill.g);
    CHECK(b0.fill.b > f0.fill.b);
    CHECK(b1.fill.r > f1.fill.r);
    CHECK(upd.fill.r > 0.9);  // update: yellow
    CHECK(upd.fill.g > 0.7);
    CHECK(upd.fill.b < 0.3);
    CHECK(ar0.fill_opacity == doctest::Approx(0.5));  // collectives: layer colour, half transparent
    CHECK(testing::same_colour(ar0.fill, f0.fill.r, f0.fill.g, f0.fill.b));
    CHECK(testing::same_colour(ar1.fill, f1.fill.r, f1.fill.g, f1.fill.b));
    CHECK(ar0.stroked);  // ... inside a solid border of that colour
    CHECK(testing::same_colour(ar0.stroke, f0.fill.r, f0.fill.g, f0.fill.b));
    CHECK(f0.stroked);  // wide boxes have a border
}

TEST_CASE("zero-duration events are thin markers at their time, sticking out above the lane") {
    const Trace t = testing::ddp_trace();
    const Layout l = detail::make_layout(t, {});
    const auto paths = testing::read_paths(render_svg(t));
    for (const auto& row : l.rows) {
        std::vector<SvgPath> markers;
        for (const auto& p : paths)
            if (has_colour(p, detail::colours::marker) && near(p.y1, row.compute.bottom()))
                markers.push_back(p);
        REQUIRE(markers.size() == 1);  // the loss at step 2
        CHECK(near((markers[0].x0 + markers[0].x1) / 2, l.x_of(2)));
        CHECK(markers[0].width() <= 2.01);
        CHECK(near(markers[0].y0, row.compute.y - 3));
    }
}

TEST_CASE("memory bars follow each rank's memory; the peak is red at the summary's rank and time") {
    const Trace t = testing::ddp_trace();
    const Layout l = detail::make_layout(t, {});
    const auto paths = testing::read_paths(render_svg(t));
    REQUIRE(t.summary.max_memory_rank == 0);
    REQUIRE(t.summary.max_memory_time == 4);
    CHECK(l.memory_scale == 1835008);
    // Each event's memory from its start to the next start; the zero-length loss step
    // vanishes and the equal steps from 4 on merge.
    const struct {
        double t0, t1, value;
    } expected[] = {{0, 1, 1179648}, {1, 2, 1310720}, {2, 3, 1572864}, {3, 4, 1703936}, {4, 5.6, 1835008}};
    for (std::size_t r = 0; r < 4; ++r) {
        CAPTURE(r);
        const Lane& lane = l.rows[r].memory;
        REQUIRE(lane.present());
        const auto bars = in_lane(paths, lane, l);
        std::vector<SvgPath> grey, red;
        for (const auto& p : bars) {
            if (has_colour(p, detail::colours::memory)) grey.push_back(p);
            if (has_colour(p, detail::colours::peak)) red.push_back(p);
        }
        REQUIRE(grey.size() == std::size(expected));
        for (std::size_t i = 0; i < grey.size(); ++i) {
            CHECK(near(grey[i].x0, l.x_of(expected[i].t0)));
            CHECK(near(grey[i].x1, l.x_of(expected[i].t1)));
            CHECK(near(grey[i].y1, lane.bottom()));
            CHECK(near(grey[i].height(), lane.h * expected[i].value / 1835008));
        }
        if (r == 0) {
            REQUIRE(red.size() == 1);
            CHECK(near(red[0].x0, l.x_of(4)));
            CHECK(near(red[0].x1, l.x_of(5.6)));
            CHECK(near(red[0].height(), lane.h));
        } else {
            CHECK(red.empty());
        }
    }
}

TEST_CASE("a hardware trace: comm stream in a thinner lane, capacity line, ms and GiB") {
    const Trace t = testing::hardware_trace();
    const Layout l = detail::make_layout(t, {});
    const auto paths = testing::read_paths(render_svg(t));
    CHECK(l.has_comm);
    CHECK(l.ticks.unit == "ms");
    CHECK(l.axis_title == "time (ms)");
    REQUIRE(l.header.size() >= 2);
    CHECK(l.header[0].text.find("two-gpu-test") != std::string::npos);
    CHECK(l.header[1].text.find("max memory 10 GiB on GPU 1 at 4 ms") != std::string::npos);
    CHECK(l.header[1].text.find("capacity 16 GiB") != std::string::npos);
    CHECK(l.memory_scale == *t.memory_capacity);
    for (std::size_t r = 0; r < 2; ++r) {
        const auto& row = l.rows[r];
        REQUIRE(row.comm.present());
        CHECK(row.comm.h < row.compute.h);
        CHECK(row.comm.y >= row.compute.bottom());
        const auto compute = in_lane(paths, row.compute, l);
        const auto comm = in_lane(paths, row.comm, l);
        CHECK(compute.size() == 5);
        CHECK(comm.size() == 2);
        for (const auto& e : t.ranks[r].events) {
            const auto& boxes = e.stream == Stream::comm ? comm : compute;
            CHECK(std::count_if(boxes.begin(), boxes.end(), [&](const SvgPath& p) {
                      return near(p.x0, l.x_of(e.start)) && near(p.width(), e.duration * l.px_per_time);
                  }) == 1);
        }
        // The capacity line: dashed, at full lane height since the capacity is the scale.
        const auto capacity = std::count_if(paths.begin(), paths.end(), [&](const SvgPath& p) {
            return p.stroked && p.dashed && !p.filled && near(p.y0, row.memory.y) &&
                   testing::same_colour(p.stroke, detail::colours::capacity.r, detail::colours::capacity.g,
                                        detail::colours::capacity.b);
        });
        CHECK(capacity == 1);
        // Bars are scaled to the capacity: rank 1's highest (10 GiB) is 10/16 of the lane.
        double highest = 0;
        for (const auto& p : in_lane(paths, row.memory, l))
            if (has_colour(p, detail::colours::memory) || has_colour(p, detail::colours::peak))
                highest = std::max(highest, p.height());
        CHECK(near(highest, row.memory.h * (r == 0 ? 8.0 : 10.0) / 16));
    }
}

TEST_CASE("two renders of the same trace in one process give byte-identical SVG") {
    const Trace t = testing::ddp_trace();
    const std::string a = render_svg(t);
    const std::string b = render_svg(t);
    CHECK(a == b);
    CHECK(a.find("id=\"surface1\"") != std::string::npos);
    const Trace h = testing::hardware_trace();
    CHECK(render_svg(h) == render_svg(h));
}

TEST_CASE("a rank selection draws only those ranks") {
    const Trace t = testing::ddp_trace();
    Options o;
    o.ranks = "1,3";
    const Layout l = detail::make_layout(t, o);
    REQUIRE(l.rows.size() == 2);
    CHECK(l.rows[0].label == "GPU 1");
    CHECK(l.rows[1].label == "GPU 3");
    CHECK(!l.rows[0].has_peak);  // the peak is on rank 0
    bool noted = false;
    for (const auto& line : l.header)
        noted |= line.text.find("Showing 2 of 4 GPUs: 1,3.") != std::string::npos;
    CHECK(noted);
    const auto paths = testing::read_paths(render_svg(t, o));
    CHECK(in_lane(paths, l.rows[1].compute, l).size() == 8);  // the loss marker sticks out of the lane
    o.ranks = "2-5";
    CHECK_THROWS_WITH_AS(detail::make_layout(t, o),
                         doctest::Contains("\"2-5\" is out of range; valid ranks are 0-3"),
                         std::invalid_argument);
}

TEST_CASE("more ranks than max_rows are grouped into an overview") {
    const Trace t = testing::ddp_trace();
    Options o;
    o.max_rows = 2;
    const Layout l = detail::make_layout(t, o);
    CHECK(l.overview);
    REQUIRE(l.rows.size() == 2);
    CHECK(l.rows[0].label == "GPU 0-1");
    CHECK(l.rows[1].label == "GPU 2-3");
    CHECK(l.rows[0].has_peak);
    const auto paths = testing::read_paths(render_svg(t, o));
    // Whole-pixel columns at full height while every rank of the group is busy.
    const auto cols = in_lane(paths, l.rows[1].compute, l);
    REQUIRE(!cols.empty());
    for (const auto& p : cols) {
        CHECK(p.x0 == std::floor(p.x0));
        CHECK(p.x1 == std::floor(p.x1));
    }
    const auto first_layer =
        std::find_if(cols.begin(), cols.end(), [&](const SvgPath& p) { return p.x0 == l.plot_x0; });
    REQUIRE(first_layer != cols.end());
    CHECK(near(first_layer->height(), l.rows[1].compute.h));
    const auto red = std::count_if(paths.begin(), paths.end(), [&](const SvgPath& p) {
        return has_colour(p, detail::colours::peak) && p.y0 >= l.rows[0].memory.y - 1e-3 &&
               p.y1 <= l.rows[0].memory.bottom() + 1e-3;
    });
    CHECK(red == 1);
}

TEST_CASE("1,024 ranks make an overview of at most max_rows rows with no hairlines") {
    const Trace t = detail::synthetic_trace(spec(1024, 1));
    const Layout l = detail::make_layout(t, {});
    CHECK(l.overview);
    CHECK(l.rows.size() <= 48);
    CHECK(l.rows.front().label == "GPU 0-21");
    CHECK(l.rows.back().label == "GPU 1012-1023");
    const auto paths = testing::read_paths(render_svg(t));
    std::size_t in_rows = 0;
    for (const auto& row : l.rows)
        for (const auto& p : in_lane(paths, row.compute, l)) {
            ++in_rows;
            CHECK(p.width() >= 1);
        }
    CHECK(in_rows > l.rows.size());
    CHECK(paths.size() < 60000);

    Options o;
    o.ranks = "0-7,1023";
    const Layout sel = detail::make_layout(t, o);
    CHECK(!sel.overview);
    REQUIRE(sel.rows.size() == 9);
    CHECK(sel.rows.back().label == "GPU 1023");
}

TEST_CASE("thousands of events per rank are summarised per pixel column, not drawn as hairlines") {
    const Trace t = detail::synthetic_trace(spec(4, 40));
    REQUIRE(t.ranks[0].events.size() > 3000);
    const Layout l = detail::make_layout(t, {});
    CHECK(!l.overview);
    const auto paths = testing::read_paths(render_svg(t));
    for (const auto& row : l.rows) {
        const auto boxes = in_lane(paths, row.compute, l);
        CHECK(!boxes.empty());
        CHECK(boxes.size() < static_cast<std::size_t>(l.columns()) * 2);
        for (const auto& p : boxes) CHECK(p.width() >= 0.5);
    }
}

}  // namespace dtsim::render
