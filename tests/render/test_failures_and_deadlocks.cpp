// The pictures of runs that go wrong: a long run's failures, checkpoints and restarts on an
// axis in hours, and a deadlock's blocked ranks marked with what they wait for.
#include "dtsim/render.hpp"
#include "render_helpers.hpp"
#include "layout.hpp"
#include "palette.hpp"
#include "sample_traces.hpp"
#include "svg_reader.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <sstream>

namespace dtsim::render {
namespace {

using testing::render_svg;
using testing::near;
using testing::rects_of;

using detail::Layout;
using testing::SvgPath;

// `dtsim failures`: 20 hours of training steps, a 4.5 s checkpoint write every hour, no memory.
Trace long_run() {
    Trace t;
    t.time_unit = "s";
    t.memory_unit = "byte";
    t.meta = {{"config", "long run"}};
    RankTrace r;
    double now = 0;
    for (int h = 0; h < 20; ++h) {
        r.events.push_back(testing::make_event(OpCode::of("train"), kNoLayer, now, 3600, 0));
        now += 3600;
        r.events.push_back(testing::make_event(OpCode::of("checkpoint"), kNoLayer, now, 4.5, 0));
        now += 4.5;
    }
    t.ranks.push_back(std::move(r));
    summarize(t);
    return t;
}

// Two GPUs, 10 hours, a checkpoint write every hour; GPU 0 fails at 5.5 h: the half hour since the
// last write is lost, 20 minutes until it is replaced (GPU 1 idle), 10 minutes of restart.
Trace failed_run() {
    Trace t;
    t.time_unit = "s";
    t.memory_unit = "byte";
    t.meta = {{"config", "failed run"}};
    const double h = 3600;
    for (int r = 0; r < 2; ++r) {
        RankTrace rt;
        rt.rank = r;
        auto add = [&](const char* op, double start, double end) {
            rt.events.push_back(testing::make_event(OpCode::of(op), kNoLayer, start, end - start, 0));
        };
        double now = 0;
        for (int k = 0; k < 5; ++k) {
            add("train", now, now + h);
            add("checkpoint", now + h, now + h + 4.5);
            now += h + 4.5;
        }
        add("lost", now, 5.5 * h);
        add(r == 0 ? "failure" : "idle", 5.5 * h, 5.5 * h + 1200);
        add("restart", 5.5 * h + 1200, 5.5 * h + 1800);
        now = 5.5 * h + 1800;
        for (int k = 0; k < 4; ++k) {
            add("train", now, now + h);
            add("checkpoint", now + h, now + h + 4.5);
            now += h + 4.5;
        }
        t.ranks.push_back(std::move(rt));
    }
    summarize(t);
    return t;
}

}  // namespace

// A failure and its restart 1e-320 s apart: the window would be so narrow that its pixels would be
// infinitely wide (every x NaN, cast to a pixel column). It is not drawn again.
TEST_CASE("a failure whose window is narrower than any scale is not drawn again under the plot") {
    const Trace t = testing::seconds_trace({{testing::make_event(OpCode::of("failure"), kNoLayer, 0, 0, 0),
                                             testing::make_event(OpCode::of("restart"), kNoLayer, 1e-320, 0, 0),
                                             testing::make_event(OpCode::of("train"), kNoLayer, 1e-320, 10, 0)}});
    const Layout l = detail::make_layout(t, {});
    CHECK(l.zoom.empty());
    const std::string svg = render_svg(t);
    CHECK(svg.find("nan") == std::string::npos);
    CHECK(svg.find("inf") == std::string::npos);
}

TEST_CASE("the first failure is drawn again under the plot, from the write before it to the write after") {
    const Trace t = failed_run();
    const Layout l = detail::make_layout(t, {});
    REQUIRE(l.zoom.size() == 1);
    const Layout& z = l.zoom[0];
    const double h = 3600;
    CHECK(z.t0 < 5 * h + 4 * 4.5);         // before the last write before the failure...
    CHECK(z.t0 > 5 * h - 0.5 * h);         // ...but not much
    CHECK(z.t1 > 7 * h + 4.5);            // after the first write after the restart (7 h to 7 h 4.5 s)...
    CHECK(z.t1 < 7.5 * h);                // ...but not much
    REQUIRE(z.rows.size() == 2);
    CHECK(z.rows[0].label == "GPU 0");
    CHECK(z.rows[1].label == "GPU 1");
    CHECK(z.rows[0].compute.y > l.plot_bottom);
    CHECK(l.height >= z.plot_bottom);
    // The failure's 20 minutes at the zoom's scale, and its window framed on the plot above.
    const auto paths = testing::read_paths(render_svg(t));
    const auto failures = rects_of(paths, z.rows[0].compute, detail::colours::failure);
    REQUIRE(failures.size() == 1);
    CHECK(near(failures[0].width(), 1200 * z.px_per_time, 0.05));
    CHECK(std::any_of(paths.begin(), paths.end(), [&](const SvgPath& p) {
        return p.stroked && p.dashed && near(p.x0, std::round(l.x_of(z.t0)) + 0.5 - 2, 1.5);
    }));
    CHECK(detail::make_layout(long_run(), {}).zoom.empty());
}

TEST_CASE("a long run reads in hours, says nothing of memory it does not have, and shows each checkpoint") {
    const Trace t = long_run();
    const Layout l = detail::make_layout(t, {});
    CHECK(l.ticks.unit == "h");
    CHECK(l.axis_title == "time (h)");
    for (const auto& line : l.header) {
        CAPTURE(line.text);
        CHECK(line.text.find("memory") == std::string::npos);
    }
    // 4.5 s is a few hundredths of a pixel here: each write is drawn as a 1 px tick over the upper
    // 40 % of the lane, so that the training between writes shows.
    REQUIRE(4.5 * l.px_per_time < 0.1);
    const auto paths = testing::read_paths(render_svg(t));
    const auto writes = rects_of(paths, l.rows[0].compute, detail::colours::checkpoint);
    REQUIRE(writes.size() == 20);
    CHECK(near(writes[0].width(), 1));
    CHECK(near(writes[0].y1 - writes[0].y0, 0.4 * l.rows[0].compute.h));
    CHECK(near(writes[0].x0, l.x_of(3600)));
}

TEST_CASE("a deadlock's blocked ranks are read from its report, a schedule's lines before the engine's") {
    Trace t = testing::gpipe_trace();
    t.meta["error"] =
        "deadlock: s.txt cannot progress: 2 of 2 ranks are blocked\n"
        "  rank 0 is blocked at 0B0 (its action 2 of 4, at s.txt:7:13): it waits for the gradient of stage 0 "
        "microbatch 0 (the input gradient of stage 1), which rank 1 produces in 1B0, not reached\n"
        "  wait cycle: rank 0 -> rank 1 -> rank 0\n"
        "  the engine's report:\n"
        "    deadlock: 2 of 2 ranks are blocked and none can proceed\n"
        "      rank 0 waits in receive, but no rank passes to it; last event forward layer 0 batches {0} at 0\n"
        "      rank 1 waits in receive, but no rank passes to it; last event forward layer 1 batches {0} at 1";
    const auto blocked = detail::blocked_ranks(t);
    REQUIRE(blocked.size() == 2);
    CHECK(blocked[0].first == 0);
    CHECK(blocked[0].second ==
          "blocked at 0B0: waits for the gradient of stage 0 microbatch 0 (the input gradient of stage 1)");
    CHECK(blocked[1].first == 1);
    CHECK(blocked[1].second == "blocked: waits in receive, but no rank passes to it");
    t.meta["error"] = "rank 0 is blocked at 0B0: it waits for x";  // not a deadlock's report
    CHECK(detail::blocked_ranks(t).empty());
}

TEST_CASE("each blocked rank's row is marked where its last event ends, with what it waits for") {
    Trace t = testing::gpipe_trace();
    t.ranks[0].events.resize(2);  // rank 0 stops after its forwards, at 2
    t.ranks[1].events.resize(1);  // rank 1 after its first, at 2
    summarize(t);
    t.summary.correct = false;
    t.meta["error"] =
        "deadlock: 2 of 2 ranks are blocked and none can proceed\n"
        "  rank 0 waits in receive, but no rank passes to it; last event forward layer 0 batches {1} at 1\n"
        "  rank 1 waits in receive, but no rank passes to it; last event forward layer 1 batches {0} at 1";
    const Layout l = detail::make_layout(t, {});
    REQUIRE(l.rows.size() == 2);
    CHECK(l.rows[0].blocked == "blocked: waits in receive, but no rank passes to it");
    CHECK(l.rows[0].blocked_at == 2);
    CHECK(l.t1 > t.summary.makespan);  // room for the text
    CHECK(std::any_of(l.legend.begin(), l.legend.end(),
                      [](const auto& e) { return e.kind == detail::LegendEntry::Kind::blocked; }));
    const auto paths = testing::read_paths(render_svg(t));
    for (const auto& row : l.rows) {
        const auto marks = rects_of(paths, row.compute, detail::colours::peak);
        REQUIRE(marks.size() == 1);
        CHECK(near(marks[0].x0 + 1, l.x_of(row.blocked_at)));
        CHECK(near(marks[0].height(), row.compute.h));
    }
}

}  // namespace dtsim::render
