// The pipeline view: one row per pipeline rank, a box per pass of a microbatch coloured by
// its kind, the idle time shaded and its share printed; and the grid it relies on (rank
// coordinates, selections by coordinate, overview rows that follow the groups).
#include "dtsim/render.hpp"
#include "render_helpers.hpp"
#include "layout.hpp"
#include "palette.hpp"
#include "pipeline.hpp"
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
using detail::PassKind;
using testing::SvgPath;

std::vector<std::string> legend_labels(const Layout& l) {
    std::vector<std::string> out;
    for (const auto& e : l.legend) out.push_back(e.label);
    return out;
}

bool has_label(const Layout& l, const std::string& label) {
    const auto labels = legend_labels(l);
    return std::find(labels.begin(), labels.end(), label) != labels.end();
}

}  // namespace

TEST_CASE("a schedule's trace is drawn as a pipeline: a row per stage, a box per pass, the bubble measured") {
    const Trace t = testing::gpipe_trace();
    const Layout l = detail::make_layout(t, {});
    REQUIRE(l.pipeline);
    REQUIRE(l.rows.size() == 2);
    CHECK(l.rows[0].label == "pp 0");
    CHECK(l.rows[1].label == "pp 1");
    // Busy 6 of 9 steps on each rank.
    CHECK(l.rows[0].idle_fraction == doctest::Approx(1.0 / 3));
    CHECK(l.rows[1].idle_fraction == doctest::Approx(1.0 / 3));
    CHECK(l.bubble_fraction == doctest::Approx(1.0 / 3));
    const auto& p0 = l.rows[0].passes;
    REQUIRE(p0.passes.size() == 4);
    CHECK(p0.passes[0].kind == PassKind::forward);
    CHECK(p0.passes[1].batches == IdSet::single(1));
    CHECK(p0.passes[2].kind == PassKind::backward);
    REQUIRE(p0.idle.size() == 1);
    CHECK(p0.idle[0].start == 2);
    CHECK(p0.idle[0].end == 5);
    const auto& p1 = l.rows[1].passes;
    REQUIRE(p1.idle.size() == 2);
    CHECK(p1.idle[0].end == 1);
    CHECK(p1.idle[1].start == 7);
    CHECK(p1.idle[1].end == 9);
    CHECK(detail::idle_label(l.rows[0]) == "idle 33.3 %");

    // Each pass a box of its kind's colour at its time; the idle time a shaded box.
    const auto paths = testing::read_paths(render_svg(t));
    for (std::size_t r = 0; r < 2; ++r) {
        CAPTURE(r);
        const auto& lane = l.rows[r].compute;
        const auto f = rects_of(paths, lane, detail::colours::pass_forward);
        const auto b = rects_of(paths, lane, detail::colours::pass_backward);
        REQUIRE(f.size() == 2);
        REQUIRE(b.size() == 2);
        CHECK(near(f[0].x0, l.x_of(r)));
        CHECK(near(f[0].width(), l.px_per_time));
        CHECK(near(b[0].width(), 2 * l.px_per_time));
        CHECK(rects_of(paths, lane, detail::colours::bubble).size() == l.rows[r].passes.idle.size());
    }
}

TEST_CASE("the pipeline view's legend names passes and the bubble, not layers or batch ids") {
    const Layout l = detail::make_layout(testing::gpipe_trace(), {});
    CHECK(has_label(l, "F: forward"));
    CHECK(has_label(l, "B: backward"));
    CHECK(has_label(l, "idle (the bubble)"));
    for (const auto& label : legend_labels(l)) {
        CAPTURE(label);
        CHECK(label.find("layer") == std::string::npos);
        CHECK(label.find("batch ids") == std::string::npos);
    }
    bool says_bubble = false;
    for (const auto& line : l.header) says_bubble = says_bubble || line.text.find("bubble 33.3 %") != std::string::npos;
    CHECK(says_bubble);
    for (const auto& line : l.header) CHECK(line.text.find("timesteps") == std::string::npos);
}

TEST_CASE("a hardware pipeline: one GPU per stage, collectives inside a pass, recompute joins its backward") {
    const Trace t = testing::hardware_pipeline_trace();
    const Layout l = detail::make_layout(t, {});
    REQUIRE(l.pipeline);
    REQUIRE(l.rows.size() == 2);
    CHECK(l.rows[0].label == "pp 0  GPU 0");
    CHECK(l.rows[1].label == "pp 1  GPU 2");
    const auto& p = l.rows[0].passes.passes;
    REQUIRE(p.size() == 4);  // F (with its all-gather), I (with its recomputes), W, optimizer
    CHECK(p[0].kind == PassKind::forward);
    CHECK(p[0].start == 0);
    CHECK(p[0].end == 3);
    CHECK(p[1].kind == PassKind::input_grad);
    CHECK(p[1].start == 14);
    CHECK(p[1].end == 18);
    REQUIRE(p[1].recompute.size() == 2);
    CHECK(p[1].recompute[1].start == 16);
    CHECK(p[2].kind == PassKind::weight_grad);
    CHECK(p[2].end == 20);
    CHECK(p[3].kind == PassKind::other);
    CHECK(p[3].batches.empty());
    // Busy 10 of 21 s on both stages.
    CHECK(l.rows[0].idle_fraction == doctest::Approx(11.0 / 21));
    CHECK(l.rows[1].idle_fraction == doctest::Approx(11.0 / 21));
    CHECK(has_label(l, "I: backward for the inputs"));
    CHECK(has_label(l, "W: backward for the weights"));
    CHECK(has_label(l, "recompute (strip: inside a backward)"));
    // The recompute strips lie along the bottom of the I box.
    const auto paths = testing::read_paths(render_svg(t));
    const auto strips = rects_of(paths, l.rows[0].compute, detail::colours::pass_recompute);
    REQUIRE(strips.size() == 2);
    CHECK(near(strips[0].y1, l.rows[0].compute.bottom()));
    CHECK(strips[0].height() < l.rows[0].compute.h / 2);
}

TEST_CASE("a rank's second model chunk is drawn lighter and the legend says so") {
    Trace t = testing::gpipe_trace();
    // Rank 0 holds stages 0 and 2 (interleaved): its second forward is on its second chunk.
    t.ranks[0].events[1].layer = 2;
    const Layout l = detail::make_layout(t, {});
    REQUIRE(l.rows[0].passes.chunks == 2);
    CHECK(l.rows[0].passes.passes[1].chunk == 1);
    CHECK(has_label(l, "lighter: model chunk 2 of 2"));
    const auto paths = testing::read_paths(render_svg(t));
    CHECK(rects_of(paths, l.rows[0].compute, detail::pass_colour(PassKind::forward, 1)).size() == 1);
}

TEST_CASE("an overlapped F&B pair named in the meta is one box: its F and its B side by side, outlined") {
    Trace t = testing::gpipe_trace();
    // Rank 1's F1 (event 1) at 2-3 and B1 (event 2) at 3-5 run as a pair.
    t.meta["overlapped"] = {{1, 1}};
    const Layout l = detail::make_layout(t, {});
    const auto& p = l.rows[1].passes.passes;
    REQUIRE(p.size() == 3);  // F0, the pair, B0
    CHECK(p[1].kind == PassKind::overlap);
    CHECK(p[1].start == 2);
    CHECK(p[1].split == 3);
    CHECK(p[1].end == 5);
    CHECK(p[1].batches == IdSet::single(1));
    CHECK(p[1].backward_batches == IdSet::single(1));
    CHECK(l.rows[0].passes.passes.size() == 4);  // rank 0 has none
    CHECK(has_label(l, "F&B: a forward and a backward overlapped (outlined)"));
    const auto paths = testing::read_paths(render_svg(t));
    int outlines = 0;
    for (const auto& path : paths)
        if (path.stroked && testing::same_colour(path.stroke, detail::colours::pass_overlap.r,
                                                 detail::colours::pass_overlap.g, detail::colours::pass_overlap.b) &&
            path.y0 >= l.rows[1].compute.y && path.y1 <= l.rows[1].compute.bottom())
            ++outlines;
    CHECK(outlines == 1);
}

TEST_CASE("a hardware trace's stage_layers cut a rank's consecutive layers into its chunks") {
    Trace t = testing::hardware_pipeline_trace();
    // Four stages of one layer: rank 0 holds stages 0 and 1 (layers 0 and 1) as DualPipeV's last
    // rank holds two adjacent stages.
    t.meta["grid"]["stage_layers"] = {1, 1, 1, 1};
    CHECK(detail::stage_starts(t) == std::vector<std::int32_t>{0, 1, 2, 3});
    const Layout l = detail::make_layout(t, {});
    REQUIRE(l.rows[0].passes.chunks == 2);
    const auto& p = l.rows[0].passes.passes;
    REQUIRE(p.size() >= 2);
    CHECK(p[0].kind == PassKind::forward);
    CHECK(p[0].chunk == 0);
    CHECK(p[0].end == 2);  // layer 0's forward and the all-gather before layer 1
    CHECK(p[1].chunk == 1);
}

TEST_CASE("a stage without layers is a chunk of the rank that computes its embedding or its output layer") {
    // Interleaved over 2 ranks, 4 stages: [embedding only, layers 0-1, layers 2-3, output layer only].
    Trace t;
    t.time_unit = "s";
    t.memory_unit = "byte";
    t.meta = {{"grid", {{"tp", 1}, {"cp", 1}, {"dp", 1}, {"pp", 2}, {"stage_layers", {0, 2, 2, 0}}}}};
    const auto mb = IdSet::single(0);
    const auto embedding = OpCode::of("embedding"), logits = OpCode::of("logits");
    RankTrace r0, r1;
    r0.rank = 0;
    r1.rank = 1;
    r0.events = {testing::make_event(embedding, kNoLayer, 0, 1, 0, mb), testing::make_event(ops::forward, 2, 3, 1, 0, mb),
                 testing::make_event(ops::forward, 3, 4, 1, 0, mb)};
    r1.events = {testing::make_event(ops::forward, 0, 1, 1, 0, mb), testing::make_event(ops::forward, 1, 2, 1, 0, mb),
                 testing::make_event(logits, kNoLayer, 5, 1, 0, mb)};
    t.ranks = {r0, r1};
    summarize(t);
    const Layout l = detail::make_layout(t, {});
    REQUIRE(l.pipeline);
    for (std::size_t r = 0; r < 2; ++r) {
        CAPTURE(r);
        const auto& p = l.rows[r].passes;
        CHECK(p.chunks == 2);
        REQUIRE(p.passes.size() == 2);
        // Rank 0: the embedding (stage 0) in its first chunk, layers 2-3 (stage 2) in its second; rank 1:
        // layers 0-1 (stage 1) in its first, the output layer (stage 3) in its second.
        CHECK(p.passes[0].chunk == 0);
        CHECK(p.passes[1].chunk == 1);
    }
    CHECK(l.rows[0].passes.passes[0].end == 1);  // the embedding alone
    CHECK(l.rows[1].passes.passes[1].start == 5);  // the output layer alone
}

TEST_CASE("a selection of more pipeline rows than max_rows falls back to the overview unless the view is asked for") {
    Options o;
    o.ranks = "pp=0-1";  // all four GPUs
    o.max_rows = 3;
    Layout l = detail::make_layout(testing::hardware_pipeline_trace(), o);
    CHECK_FALSE(l.pipeline);
    CHECK(l.overview);
    o.view = View::pipeline;
    l = detail::make_layout(testing::hardware_pipeline_trace(), o);
    CHECK(l.pipeline);
    CHECK(l.rows.size() == 4);
    o.max_rows = 48;
    o.view = View::automatic;
    o.ranks = "tp=1";
    l = detail::make_layout(testing::hardware_pipeline_trace(), o);
    REQUIRE(l.pipeline);
    REQUIRE(l.rows.size() == 2);
    CHECK(l.rows[1].label == "pp 1  GPU 3");
}

TEST_CASE("view ranks draws every GPU; a trace without a grid is never a pipeline by default") {
    Options o;
    o.view = View::ranks;
    const Layout ranks = detail::make_layout(testing::hardware_pipeline_trace(), o);
    CHECK_FALSE(ranks.pipeline);
    CHECK(ranks.rows.size() == 4);
    CHECK(ranks.rows[3].label == "pp1 tp1  GPU 3");
    CHECK_FALSE(detail::make_layout(testing::ddp_trace(), {}).pipeline);
    CHECK_FALSE(detail::make_layout(testing::hardware_trace(), {}).pipeline);
}

TEST_CASE("the ranks view's legend names the operations drawn as forward and as backward work") {
    Options o;
    o.view = View::ranks;
    const Layout l = detail::make_layout(testing::hardware_pipeline_trace(), o);
    CHECK(has_label(l, "forward work, colour = layer (forward, recompute)"));
    CHECK(has_label(l, "backward work, lighter (backward_input, backward_weight)"));
    CHECK(has_label(detail::make_layout(testing::ddp_trace(), {}), "forward (colour = layer)"));
}

TEST_CASE("the title names the config once and the note goes on a subtitle line, cut after two lines") {
    Trace t = testing::hardware_pipeline_trace();
    Layout l = detail::make_layout(t, {});
    REQUIRE(l.header.size() >= 2);
    CHECK(l.header[0].text == "pp-test \u2014 zbh1 (tp 2, pp 2), 4 GPUs");
    t.meta["source"] = "a paper";  // a config's own field: not in the title
    CHECK(detail::make_layout(t, {}).header[0].text == l.header[0].text);
    CHECK(l.header[1].text == "a short note");
    std::string long_note;
    for (int i = 0; i < 200; ++i) long_note += "word ";
    t.meta["note"] = long_note;
    l = detail::make_layout(t, {});
    CHECK(l.header[1].text.find("word") == 0);
    CHECK(l.header[2].text.ends_with("(...)"));
    CHECK(l.header[3].text.find("word") == std::string::npos);
}

TEST_CASE("ranks have grid coordinates, Megatron-LM's order: tp fastest, then cp, dp, pp") {
    RankGrid g;
    g.tp = 8;
    g.dp = 2;
    g.pp = 4;
    const auto c = g.coords(8 * 2 * 3 + 8 + 5);
    CHECK(c.pp == 3);
    CHECK(c.dp == 1);
    CHECK(c.tp == 5);
    CHECK(g.rank(c) == 8 * 2 * 3 + 8 + 5);
    CHECK(grid_of(testing::hardware_pipeline_trace()).known);
    CHECK(grid_of(testing::gpipe_trace()).pp == 2);
    CHECK_FALSE(grid_of(testing::ddp_trace()).known);
    Trace wrong = testing::hardware_pipeline_trace();
    wrong.meta["grid"]["tp"] = 3;  // 3 x 2 is not 4 ranks
    CHECK_FALSE(grid_of(wrong).known);
}

TEST_CASE("rank selections by coordinate keep the ranks that match every coordinate named") {
    RankGrid g;
    g.tp = 2;
    g.dp = 2;
    g.pp = 2;
    g.known = true;
    CHECK(parse_rank_selection("pp=1,dp=0", g, 8) == std::vector<int>{4, 5});
    CHECK(parse_rank_selection("tp=0", g, 8) == std::vector<int>{0, 2, 4, 6});
    CHECK(parse_rank_selection("pp=0-1,dp=1,tp=1", g, 8) == std::vector<int>{3, 7});
    CHECK(parse_rank_selection("tp=1,tp=0,pp=0", g, 8) == std::vector<int>{0, 1, 2, 3});
    CHECK(parse_rank_selection("7,pp=0,dp=0", g, 8) == std::vector<int>{0, 1, 7});
    CHECK_THROWS_WITH_AS(parse_rank_selection("pp=2", g, 8),
                         "invalid rank selection \"pp=2\": \"pp=2\" is out of range; pp runs over 0-1",
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(parse_rank_selection("ep=0", g, 8), doctest::Contains("names no coordinate"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(parse_rank_selection("pp=x", g, 8), doctest::Contains("is not NAME=A or NAME=A-B"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(parse_rank_selection("pp=0", 8), doctest::Contains("select ranks by id"),
                         std::invalid_argument);
}

TEST_CASE("an overview on a known grid puts one tensor-parallel group, or one stage, on a row") {
    Trace t;
    t.time_unit = "s";
    t.memory_unit = "byte";
    t.meta = {{"config", "grid-test"}, {"grid", {{"tp", 8}, {"dp", 2}, {"pp", 4}}}};
    for (int r = 0; r < 64; ++r) {
        RankTrace rt;
        rt.rank = r;
        rt.events = {testing::make_event(OpCode::of("all_reduce"), 0, 0, 1, 0)};
        t.ranks.push_back(std::move(rt));
    }
    summarize(t);
    Options o;
    o.max_rows = 8;
    Layout l = detail::make_layout(t, o);
    REQUIRE(l.overview);
    REQUIRE(l.rows.size() == 8);
    CHECK(l.rows[0].label == "pp0 dp0  GPU 0-7");
    CHECK(l.rows[3].label == "pp1 dp1  GPU 24-31");
    o.max_rows = 4;
    l = detail::make_layout(t, o);
    REQUIRE(l.rows.size() == 4);
    CHECK(l.rows[2].label == "pp2  GPU 32-47");
    o.ranks = "pp=3";
    o.max_rows = 4;
    l = detail::make_layout(t, o);
    REQUIRE(l.rows.size() == 2);
    CHECK(l.rows[1].label == "pp3 dp1  GPU 56-63");
}

TEST_CASE("passes under half a pixel are summarised per pixel column, not drawn one by one") {
    // 20,000 microbatches through one stage: 40,000 passes on a plot of about 1,800 pixels.
    Trace t;
    t.meta = {{"name", "pipeline schedule long"}, {"ranks", 2}, {"stages", 2}, {"microbatches", 20000}};
    for (int r = 0; r < 2; ++r) {
        RankTrace rt;
        rt.rank = r;
        for (int m = 0; m < 20000; ++m) {
            rt.events.push_back(testing::make_event(ops::forward, r, r + 3.0 * m, 1, 0, IdSet::single(m)));
            rt.events.push_back(testing::make_event(ops::backward, r, r + 3.0 * m + 1, 2, 0, IdSet::single(m)));
        }
        t.ranks.push_back(std::move(rt));
    }
    summarize(t);
    const Layout l = detail::make_layout(t, {});
    REQUIRE(l.pipeline);
    REQUIRE(l.rows[0].passes.passes.size() == 40000);
    const auto paths = testing::read_paths(render_svg(t));
    CHECK(paths.size() < 4 * static_cast<std::size_t>(l.columns()) + 200);
    // The busy columns carry the kinds' colours: backward covers two thirds, so it leads.
    CHECK_FALSE(rects_of(paths, l.rows[0].compute, detail::colours::pass_backward).empty());
}

TEST_CASE("two renders of a pipeline view give byte-identical SVG") {
    const Trace t = testing::hardware_pipeline_trace();
    CHECK(render_svg(t) == render_svg(t));
}

}  // namespace dtsim::render
