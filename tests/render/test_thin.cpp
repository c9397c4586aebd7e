// Reading a trace only to draw it (RankThinner): the ranks the picture does not draw keep only the
// events and sample that set its scales, so the picture is the same bytes as the whole trace's, and
// where the picture would draw a thinned rank the reader is told to read the trace again.
#include "dtsim/render.hpp"
#include "dtsim/trace_io.hpp"
#include "render_helpers.hpp"
#include "sample_traces.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <functional>
#include <limits>
#include <sstream>
#include <streambuf>
#include <string>

namespace dtsim::render {
namespace {

using testing::render_svg;

// hardware_pipeline_trace (tp 2 x pp 2) with memory that varies, and memory by kind.
Trace rich_pipeline_trace() {
    Trace t = testing::hardware_pipeline_trace();
    t.memory_kinds = {"weights", "activations"};
    t.memory_capacity = 100;
    for (auto& r : t.ranks) {
        double m = 10 + r.rank;
        for (auto& e : r.events) {
            e.memory = m;
            m += (e.op == ops::forward ? 7 : -3) + 0.5 * r.rank;
        }
        r.memory_by_kind = {0, 10, 0, 4, 10, 20.0 + r.rank, 9, 10, 5};  // three samples: time, weights, activations
    }
    // The picture's span comes from ranks it does not draw: rank 1 starts first (the others start a
    // second later) and rank 3 ends last, on its comm stream.
    for (auto& r : t.ranks)
        if (r.rank != 1)
            for (auto& e : r.events) e.start += 1;
    t.ranks[3].events.push_back(testing::make_event(OpCode::of("all_reduce"), 3, 21, 4, 12, {}, Stream::comm));
    summarize(t);
    return t;
}

std::string json_of(const Trace& t) {
    std::ostringstream out;
    write_trace_json(t, out);
    return out.str();
}

// A stream that cannot go back: the checking reader reads it.
struct OneWay : std::streambuf {
    explicit OneWay(std::string s) : text(std::move(s)) { setg(text.data(), text.data(), text.data() + text.size()); }
    std::string text;
};

template <class Hook>
Trace read_thinned(const std::string& text, Hook& hook, bool seekable) {
    if (seekable) {
        std::istringstream in(text);
        return read_trace_json(in, "t.json", std::ref(hook));
    }
    OneWay buf(text);
    std::istream in(&buf);
    return read_trace_json(in, "t.json", std::ref(hook));
}

// A data- and tensor-parallel run on a grid of dp x tp ranks (no pipeline), for the overview: per
// rank 3 microbatches of 4 layers forward and backward with their gathers on the comm stream, a
// loss instant, an optimizer step; durations and memory that differ by rank (rank 5 peaks), memory
// by kind, a capacity.
Trace overview_trace(int dp, int tp) {
    Trace t;
    t.time_unit = "s";
    t.memory_unit = "byte";
    t.meta = {{"config", "overview-test"}, {"layers", 4}, {"grid", {{"tp", tp}, {"cp", 1}, {"dp", dp}, {"pp", 1}}}};
    t.memory_kinds = {"weights", "activations"};
    t.memory_capacity = 40.0 * (1 << 30);
    const double gib = 1 << 30;
    const auto ag = OpCode::of("all_gather"), opt = OpCode::of("optimizer");
    for (int r = 0; r < dp * tp; ++r) {
        RankTrace rt;
        rt.rank = r;
        const double slow = 1 + 0.03 * (r % 7);
        double t0 = 0.001 * (r % 3), mem = 4 * gib;
        for (int mb = 0; mb < 3; ++mb) {
            for (int l = 0; l < 4; ++l) {
                rt.events.push_back(testing::make_event(ag, l, t0, 0.4e-3, mem, {}, Stream::comm));
                mem += (r == 5 ? 1.5 : 1.0) * gib;
                rt.events.push_back(testing::make_event(ops::forward, l, t0 + 0.5e-3, 1e-3 * slow, mem, IdSet::single(mb)));
                t0 += 1.6e-3 * slow;
            }
            rt.events.push_back(testing::make_event(ops::loss, kNoLayer, t0, 0, mem));
            for (int l = 3; l >= 0; --l) {
                rt.events.push_back(testing::make_event(ops::backward, l, t0, 2e-3 * slow, mem, IdSet::single(mb)));
                mem -= (r == 5 ? 1.5 : 1.0) * gib;
                t0 += 2.1e-3 * slow;
            }
        }
        rt.events.push_back(testing::make_event(opt, kNoLayer, t0, 1e-3, mem));
        rt.memory_by_kind = {0, 4 * gib, 0, 0.01, 4 * gib, 4 * gib + 0.1 * r * gib};
        t.ranks.push_back(std::move(rt));
    }
    summarize(t);
    return t;
}

// The picture an OverviewFeed draws, as text.
std::string fed_svg(const OverviewFeed& feed) {
    const auto path = std::filesystem::temp_directory_path() / "dtsim-render-tests-overview-feed.svg";
    feed.write_image(path.string());
    std::string svg = testing::read_file(path);
    std::filesystem::remove(path);
    return svg;
}

}  // namespace

TEST_CASE("a trace read to be drawn keeps whole only the ranks drawn, and draws the same bytes") {
    const Trace whole = rich_pipeline_trace();
    const std::string text = json_of(whole);
    for (const bool seekable : {true, false}) {
        CAPTURE(seekable);
        // The pipeline view draws the first GPU of each stage, ranks 0 and 2.
        RankThinner thin{Options{}};
        const Trace t = read_thinned(text, thin, seekable);
        CHECK(thin.thinned() == 2);
        CHECK(thin.complete(t));
        REQUIRE(t.ranks.size() == 4);
        CHECK(t.ranks[0].events.size() == whole.ranks[0].events.size());
        CHECK(t.ranks[1].events.size() < whole.ranks[1].events.size());
        CHECK(t.ranks[1].memory_by_kind.size() == 3);  // its largest sample alone
        CHECK(t.ranks[3].memory_by_kind == std::vector<double>{4, 10, 23});
        // The same summary, and the same picture.
        CHECK(t.summary.makespan == whole.summary.makespan);
        CHECK(t.summary.timesteps == whole.summary.timesteps);
        CHECK(t.summary.max_memory == whole.summary.max_memory);
        CHECK(t.summary.max_memory_rank == whole.summary.max_memory_rank);
        CHECK(t.summary.max_memory_time == whole.summary.max_memory_time);
        CHECK(render_svg(t) == render_svg(whole));
        // A selection keeps its ranks, in the pipeline and the ranks view.
        for (const View view : {View::automatic, View::ranks}) {
            Options o;
            o.ranks = "pp=1,tp=1";
            o.view = view;
            RankThinner sel{o};
            const Trace s = read_thinned(text, sel, seekable);
            CHECK(sel.thinned() == 3);
            CHECK(sel.complete(s));
            CHECK(render_svg(s, o) == render_svg(whole, o));
        }
        // The ranks view without a selection draws every rank: nothing is thinned.
        Options ranks;
        ranks.view = View::ranks;
        RankThinner all{ranks};
        const Trace a = read_thinned(text, all, seekable);
        CHECK(all.thinned() == 0);
        CHECK(a.ranks[1].events.size() == whole.ranks[1].events.size());
    }
}

TEST_CASE("a pipeline known only from ranks not drawn is still drawn as a pipeline") {
    // The drawn ranks (0 and 2) record no microbatch; ranks 1 and 3 do: the trace is a pipeline
    // because of them, and the thinned trace keeps one of their passes to say so.
    Trace whole = rich_pipeline_trace();
    for (auto& e : whole.ranks[0].events) e.batches = {};
    for (auto& e : whole.ranks[2].events) e.batches = {};
    summarize(whole);
    REQUIRE(detail::make_layout(whole, {}).pipeline);
    RankThinner thin{Options{}};
    const Trace t = read_thinned(json_of(whole), thin, true);
    CHECK(thin.thinned() == 2);
    CHECK(thin.complete(t));
    CHECK(detail::make_layout(t, {}).pipeline);
    CHECK(render_svg(t) == render_svg(whole));
}

TEST_CASE("a reader that starts again thins again from the first rank") {
    const std::string text = json_of(rich_pipeline_trace());
    RankThinner thin{Options{}};
    read_thinned(text, thin, true);
    const Trace t = read_thinned(text, thin, false);  // the same thinner, the checking reader
    CHECK(thin.thinned() == 2);
    CHECK(thin.complete(t));
}

TEST_CASE("where the picture would draw a thinned rank, the thinner says the trace must be read whole") {
    // The meta's grid names 4 ranks but the trace has 6: the picture finds no grid and draws every rank.
    Trace whole = rich_pipeline_trace();
    for (int r = 4; r < 6; ++r) {
        RankTrace extra = whole.ranks[static_cast<std::size_t>(r - 2)];
        extra.rank = r;
        whole.ranks.push_back(extra);
    }
    summarize(whole);
    const std::string text = json_of(whole);
    RankThinner thin{Options{}};
    const Trace t = read_thinned(text, thin, true);
    CHECK(thin.thinned() > 0);
    CHECK_FALSE(thin.complete(t));
    // More stages than rows: the overview draws every rank, tallied on a second read; thinned, the
    // trace alone does not draw it.
    Options few;
    few.max_rows = 1;
    RankThinner over{few};
    const Trace o = read_thinned(json_of(rich_pipeline_trace()), over, true);
    CHECK(over.thinned() == 4);
    CHECK(over.overview());
    CHECK_FALSE(over.complete(o));
    // A selection of a rank that is not there thins nothing: the whole trace's picture names it.
    Options missing;
    missing.ranks = "0,9";
    RankThinner gone{missing};
    const Trace g = read_thinned(json_of(rich_pipeline_trace()), gone, true);
    CHECK(gone.thinned() == 0);
    CHECK(gone.complete(g));
    CHECK_THROWS_AS(render_svg(g, missing), std::invalid_argument);
}

TEST_CASE("a rank with a number the picture refuses is kept whole, so the error names its event") {
    Trace so_far;
    so_far.meta = {{"grid", {{"tp", 2}, {"cp", 1}, {"dp", 1}, {"pp", 2}}}};
    RankThinner thin{Options{}};
    for (int r = 0; r < 2; ++r) {
        RankTrace& rank = so_far.ranks.emplace_back();
        rank.rank = r;
        rank.events = {testing::make_event(ops::forward, 0, 0, 1, 0, IdSet::single(0)),
                       testing::make_event(ops::forward, 0, 1, 1, 0, IdSet::single(0)),
                       testing::make_event(ops::forward, 0, 2, 1, 0, IdSet::single(0)),
                       testing::make_event(ops::forward, 0, 3, 1, 0, IdSet::single(0)),
                       testing::make_event(ops::forward, 0, 4, 1, 0, IdSet::single(0)),
                       testing::make_event(ops::forward, 0, 1e308, 1e308, 0, IdSet::single(0))};
        thin(so_far, rank);
    }
    CHECK(thin.thinned() == 0);  // rank 1 is not drawn, but its last event ends at infinity
    CHECK(so_far.ranks[1].events.size() == 6);
    so_far.ranks[1].events.back().duration = 1;
    thin(so_far, so_far.ranks[1]);
    CHECK(thin.thinned() == 1);
    // The earliest start, the latest end, the highest memory, the last event, the first pass.
    CHECK(so_far.ranks[1].events.size() == 2);
}

TEST_CASE("the overview is drawn from a second read that tallies each rank and drops it: the whole trace's bytes") {
    const Trace big = overview_trace(8, 2);
    struct Case {
        const Trace* trace;
        Options options;
    };
    std::vector<Case> cases;
    Options tp_groups;  // 16 GPUs over 8 rows: a tensor-parallel group a row
    tp_groups.max_rows = 8;
    cases.push_back({&big, tp_groups});
    Options one_row = tp_groups;  // every GPU in one row
    one_row.max_rows = 4;
    cases.push_back({&big, one_row});
    Options chosen = tp_groups;  // an overview of a selection, with ranks left out
    chosen.ranks = "dp=1-6";
    chosen.max_rows = 5;
    cases.push_back({&big, chosen});
    Options ranks = tp_groups;
    ranks.view = View::ranks;
    cases.push_back({&big, ranks});
    const Trace pipe = rich_pipeline_trace();  // a pipeline with more stages than rows
    Options pipe_rows;
    pipe_rows.max_rows = 1;
    cases.push_back({&pipe, pipe_rows});
    for (const auto& k : cases) {
        const Trace& whole = *k.trace;
        const std::string text = json_of(whole);
        const std::string expected = render_svg(whole, k.options);
        REQUIRE(detail::make_layout(whole, k.options).overview);
        for (const bool seekable : {true, false}) {
            CAPTURE(k.options.max_rows);
            CAPTURE(k.options.ranks);
            CAPTURE(seekable);
            RankThinner thin{k.options};
            const Trace t = read_thinned(text, thin, seekable);
            CHECK(thin.overview());
            CHECK(thin.thinned() == whole.ranks.size());
            CHECK_FALSE(thin.complete(t));
            if (k.trace == &big) CHECK(t.event_count() < whole.event_count() / 2);
            OverviewFeed feed(t, k.options);
            CHECK(feed.overview());
            CHECK_FALSE(feed.complete());  // nothing fed yet
            const Trace second = read_thinned(text, feed, seekable);
            CHECK(feed.complete());
            CHECK(second.event_count() == 0);  // every rank dropped once tallied
            CHECK(fed_svg(feed) == expected);
        }
    }
}

TEST_CASE("the pipeline view asked of a run without stages is no overview: one row, the others thinned") {
    const Trace whole = overview_trace(8, 2);
    const std::string text = json_of(whole);
    Options o;
    o.max_rows = 8;
    o.view = View::pipeline;
    REQUIRE(detail::make_layout(whole, o).pipeline);
    RankThinner pipe{o};
    const Trace p = read_thinned(text, pipe, true);
    CHECK_FALSE(pipe.overview());
    CHECK(pipe.thinned() == whole.ranks.size() - 1);
    CHECK(pipe.complete(p));
    CHECK(render_svg(p, o) == render_svg(whole, o));
}

TEST_CASE("an overview feed that is given another trace, or a picture that is no overview, says so") {
    const Trace whole = overview_trace(8, 2);
    Options o;
    o.max_rows = 8;
    RankThinner thin{o};
    const Trace t = read_thinned(json_of(whole), thin, true);
    REQUIRE(thin.overview());
    // A reader that starts again feeds every rank again: the same picture.
    {
        OverviewFeed feed(t, o);
        read_thinned(json_of(whole), feed, true);
        read_thinned(json_of(whole), feed, false);
        CHECK(feed.complete());
        CHECK(fed_svg(feed) == render_svg(whole, o));
    }
    // A rank fewer, or one more: not the trace of the first read.
    Trace fewer = whole;
    fewer.ranks.pop_back();
    Trace more = whole;
    more.ranks.push_back(more.ranks.back());
    more.ranks.back().rank = static_cast<int>(more.ranks.size()) - 1;
    for (const Trace* other : {&fewer, &more}) {
        OverviewFeed feed(t, o);
        read_thinned(json_of(*other), feed, true);
        CHECK_FALSE(feed.complete());
    }
    // Options under which the thinned trace's picture is not an overview: never complete, the ranks
    // dropped all the same.
    Options many;
    many.max_rows = 48;
    OverviewFeed none(t, many);
    CHECK_FALSE(none.overview());
    const Trace dropped = read_thinned(json_of(whole), none, true);
    CHECK_FALSE(none.complete());
    CHECK(dropped.event_count() == 0);
    // Bad options throw as write_image does.
    Options bad = o;
    bad.width = 5;
    CHECK_THROWS_AS(OverviewFeed(t, bad), std::invalid_argument);
}

}  // namespace dtsim::render
