// Golden pictures: traces saved in tests/render/golden, drawn again and compared byte for byte with
// the SVGs that were reviewed by opening them when they were made (golden/README.md says how each
// trace was written). After a deliberate change to the picture, regenerate them with
//
//   DTSIM_UPDATE_GOLDEN=1 build/tests/render/dtsim_render_tests --test-case='golden*'
//
// then open the new SVGs and look at them before committing. A mismatch leaves the picture drawn
// now in the temporary directory, named in the failure.
#include "dtsim/render.hpp"
#include "dtsim/trace_io.hpp"
#include "layout.hpp"
#include "render_helpers.hpp"
#include "svg_reader.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#ifndef DTSIM_RENDER_GOLDEN_DIR
#error "DTSIM_RENDER_GOLDEN_DIR must name tests/render/golden"
#endif

namespace dtsim::render {
namespace {

namespace fs = std::filesystem;
using detail::Layout;
using detail::LegendEntry;

fs::path golden_dir() { return DTSIM_RENDER_GOLDEN_DIR; }

// The first line where two texts differ (1-based), 0 when they are equal.
std::size_t first_different_line(const std::string& a, const std::string& b) {
    std::size_t line = 1;
    for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
        if (a[i] != b[i]) return line;
        if (a[i] == '\n') ++line;
    }
    return a.size() == b.size() ? 0 : line;
}

// Draws `trace` and compares it with golden/`svg_name`, or writes it there when DTSIM_UPDATE_GOLDEN
// is set. Returns the SVG drawn.
std::string check_golden(const Trace& trace, const Options& options, const std::string& svg_name) {
    const std::string svg = testing::render_svg(trace, options);
    CHECK(testing::render_svg(trace, options) == svg);  // the same bytes again, in the same process
    const fs::path golden = golden_dir() / svg_name;
    if (std::getenv("DTSIM_UPDATE_GOLDEN") != nullptr) {
        std::ofstream(golden, std::ios::binary) << svg;
        MESSAGE("wrote " << golden.string());
        return svg;
    }
    REQUIRE_MESSAGE(fs::exists(golden), golden.string() << " is missing: regenerate it (see this file's top)");
    const std::string want = testing::read_file(golden);
    if (svg != want) {
        const fs::path now = fs::temp_directory_path() / ("dtsim-golden-now-" + svg_name);
        std::ofstream(now, std::ios::binary) << svg;
        FAIL_CHECK(svg_name << " differs from the golden picture from line " << first_different_line(svg, want)
                            << " (" << svg.size() << " bytes drawn, " << want.size() << " in the golden); drawn now: "
                            << now.string());
    }
    return svg;
}

bool has_legend(const Layout& l, const std::string& label) {
    return std::any_of(l.legend.begin(), l.legend.end(), [&](const LegendEntry& e) { return e.label == label; });
}

// No two pieces of text on the picture overlap.
void check_text_apart(const std::string& svg) {
    const auto boxes = testing::read_text_boxes(svg);
    CHECK(boxes.size() > 20);
    for (const auto& pair : testing::overlapping_text(boxes)) {
        const auto& a = pair.first;
        const auto& b = pair.second;
        CAPTURE(a.x0);
        CAPTURE(a.y0);
        CAPTURE(b.x0);
        CAPTURE(b.y0);
        FAIL_CHECK("two pieces of text overlap");
    }
}

}  // namespace

TEST_CASE("golden: a hardware run's memory, one row per GPU (1F1B on 4 pipeline stages)") {
    // Llama 3 70B cut to 8 layers, 1F1B over 4 H100s (2 layers a stage), 6 microbatches:
    // the first and last stages also hold the embedding and the output layer, the first peaks highest
    // (66.6 GiB, 4 microbatches' activations at the end of the warm-up), the last next (its logits).
    // Read without its memory by kind, as a trace written before it had one: grey bars of the total.
    Trace t = read_trace_file((golden_dir() / "1f1b-pp4-trace.json").string());
    REQUIRE(!t.memory_kinds.empty());
    t.memory_kinds.clear();
    for (auto& r : t.ranks) r.memory_by_kind.clear();
    Options o;
    o.view = View::ranks;
    const std::string svg = check_golden(t, o, "1f1b-pp4-memory.svg");
    check_text_apart(svg);

    const Layout l = detail::make_layout(t, o);
    CHECK(!l.pipeline);
    CHECK(l.axis_title == "time (s)");
    CHECK(l.ticks.values.size() >= 5);
    REQUIRE(l.rows.size() == 4);
    for (const auto& row : l.rows) {
        CHECK(row.memory.present());
        CHECK(row.comm.present());
        CHECK(row.memory.y >= row.comm.bottom());
    }
    // Each row's peak at its right, the trace's peak on GPU 0; memory drawn against the capacity.
    CHECK(l.rows[0].has_peak);
    CHECK(l.rows[0].max_memory == t.summary.max_memory);
    CHECK(l.rows[0].max_memory > l.rows[1].max_memory);
    CHECK(l.rows[1].max_memory > l.rows[2].max_memory);
    CHECK(l.rows[3].max_memory > l.rows[1].max_memory);
    REQUIRE(t.memory_capacity);
    CHECK(l.memory_scale == *t.memory_capacity);
    for (const char* label : {"memory in use", "maximum memory", "capacity", "comm stream (thin lane)"}) {
        CAPTURE(label);
        CHECK(has_legend(l, label));
    }
    REQUIRE(l.header.size() >= 2);
    CHECK(l.header[0].text.find("llama3-70b 8 layers 1f1b on 4xH100") == 0);
    CHECK(l.header[1].text.find("max memory 66.6 GiB on GPU 0") != std::string::npos);
    CHECK(l.header[1].text.find("capacity 80 GiB") != std::string::npos);

    // The memory bars: grey, inside each row's memory lane, the tallest where the row peaks.
    const auto paths = testing::read_paths(svg);
    for (const auto& row : l.rows) {
        const auto bars = testing::rects_of(paths, row.memory, detail::colours::memory);
        REQUIRE(!bars.empty());
        double tallest = 0;
        for (const auto& b : bars) tallest = std::max(tallest, b.height());
        CHECK(testing::near(tallest, row.memory.h * row.max_memory / l.memory_scale, 1.0));
    }
}

TEST_CASE("golden: a hardware run's memory stacked by kind, on an axis in GiB, with the peak's parts") {
    // The same run with its memory by kind: weights, gradients, optimizer state, activations and
    // buffers stacked under each GPU's row; the first stage's peak holds 5.14 GiB of weights, 10.29 of
    // gradients, 30.87 of optimizer state and 20.25 of activations (20.2 as written) (dtsim run's "at the peak").
    const Trace t = read_trace_file((golden_dir() / "1f1b-pp4-trace.json").string());
    Options o;
    o.view = View::ranks;
    const std::string svg = check_golden(t, o, "1f1b-pp4-memory-by-kind.svg");
    check_text_apart(svg);

    const Layout l = detail::make_layout(t, o);
    REQUIRE(l.rows.size() == 4);
    REQUIRE(t.memory_capacity);
    CHECK(l.memory_scale == *t.memory_capacity);
    // The axis: 0, 40 and 80 GiB.
    CHECK(l.memory_tick_unit == "GiB");
    REQUIRE(l.memory_ticks.size() == 3);
    CHECK(l.memory_ticks[1] == 40.0 * (1 << 30));
    CHECK(l.memory_ticks[2] == 80.0 * (1 << 30));
    CHECK(detail::memory_tick_label(l, l.memory_ticks[2]) == "80");
    CHECK(detail::memory_axis_title(l) == "memory, GiB");
    for (const char* label : {"memory: weights", "memory: gradients", "memory: optimizer", "memory: activations",
                              "maximum memory", "capacity"}) {
        CAPTURE(label);
        CHECK(has_legend(l, label));
    }
    CHECK(!has_legend(l, "memory in use"));  // no grey bars
    CHECK(!has_legend(l, "memory: buffers"));  // nothing ever held in buffers
    REQUIRE(l.header.size() >= 2);
    CHECK(l.header[1].text.find("held at the peak: weights 5.14 GiB, gradients 10.3 GiB, optimizer 30.9 GiB, "
                                "activations 20.2 GiB") != std::string::npos);

    const auto paths = testing::read_paths(svg);
    for (std::size_t i = 0; i < l.rows.size(); ++i) {
        const auto& row = l.rows[i];
        CAPTURE(i);
        CHECK(row.by_kind);
        CHECK(row.memory.h > 40);  // taller than a grey lane, for its axis
        CHECK(testing::rects_of(paths, row.memory, detail::colours::memory).empty());
        // Every stacked rectangle lies in the lane; the stack's top, where it is highest, is the row's
        // largest memory.
        double top = row.memory.bottom();
        std::size_t kinds_drawn = 0;
        for (std::size_t k = 0; k < t.memory_kinds.size(); ++k) {
            const auto rects =
                testing::rects_of(paths, row.memory, detail::memory_kind_colour(t.memory_kinds[k], k));
            kinds_drawn += !rects.empty();
            for (const auto& r : rects) top = std::min(top, r.y0);
        }
        CHECK(kinds_drawn == 4);
        CHECK(testing::near(row.memory.bottom() - top, row.memory.h * row.max_memory / l.memory_scale, 0.5));
    }
    CHECK(l.rows[0].max_memory == t.summary.max_memory);
}

TEST_CASE("golden: a long run with a failure, its checkpoints and restart (dtsim failures)") {
    // Llama 3 8B FSDP on 2 nodes of 2 H100s, a checkpoint every 300 steps, node 0 failing at 0.9 h.
    const Trace t = read_trace_file((golden_dir() / "failures-2x2-trace.json").string());
    const std::string svg = check_golden(t, {}, "failures-2x2.svg");
    check_text_apart(svg);

    const Layout l = detail::make_layout(t, {});
    CHECK(l.axis_title == "time (h)");
    CHECK(l.memory_scale == 0);  // the long run records no memory: no memory lanes, nothing said of it
    REQUIRE(l.rows.size() == 4);
    for (const auto& row : l.rows) CHECK(!row.memory.present());
    for (const char* label : {"training steps", "lost work (redone)", "checkpoint write", "restart (relaunch, load)",
                              "failed node", "idle"}) {
        CAPTURE(label);
        CHECK(has_legend(l, label));
    }
    CHECK(!has_legend(l, "memory in use"));
    // The failure drawn again below on its own axis: the failed GPU and one that waited.
    REQUIRE(l.zoom.size() == 1);
    const Layout& z = l.zoom[0];
    REQUIRE(z.rows.size() == 2);
    CHECK(z.rows[0].label == "GPU 0");
    CHECK(z.rows[1].label == "GPU 2");
    CHECK(z.axis_title == "time (s)");
    CHECK(z.rows[0].compute.y > l.plot_bottom);
    const auto paths = testing::read_paths(svg);
    CHECK(testing::rects_of(paths, z.rows[0].compute, detail::colours::failure).size() == 1);
    CHECK(testing::rects_of(paths, z.rows[1].compute, detail::colours::failure).empty());
}

TEST_CASE("the golden pictures of the pipeline view have no overlapping text") {
    for (const char* name : {"schedule-zbh1-p4-m8.svg", "schedule-interleaved-p4-m8-v2.svg"}) {
        CAPTURE(name);
        check_text_apart(testing::read_file(golden_dir() / name));
    }
}

TEST_CASE("the text boxes read from an SVG find text drawn over text") {
    // Two glyphs ("A"-like boxes 10 wide, 12 high above the baseline): apart, then overlapping.
    const auto svg = [](double second_x) {
        return std::string("<svg><defs><g><symbol overflow=\"visible\" id=\"glyph0-1\">"
                           "<path style=\"stroke:none;\" d=\"M 0 0 L 10 0 L 10 -12 L 0 -12 Z\"/></symbol>"
                           "<symbol overflow=\"visible\" id=\"glyph0-2\"><path style=\"stroke:none;\" d=\"\"/>"
                           "</symbol></g></defs><g id=\"surface1\">"
                           "<g style=\"fill:rgb(0%,0%,0%);\"><use xlink:href=\"#glyph0-1\" x=\"5\" y=\"20\"/>"
                           "<use xlink:href=\"#glyph0-2\" x=\"15\" y=\"20\"/></g>"
                           "<g style=\"fill:rgb(0%,0%,0%);\"><use xlink:href=\"#glyph0-1\" x=\"") +
               std::to_string(second_x) + "\" y=\"24\"/></g></g></svg>";
    };
    const auto apart = testing::read_text_boxes(svg(40));
    REQUIRE(apart.size() == 2);
    CHECK(apart[0].x0 == 5);
    CHECK(apart[0].x1 == 15);  // the space after it has no ink
    CHECK(apart[0].y0 == 8);
    CHECK(apart[1].y1 == 24);
    CHECK(testing::overlapping_text(apart).empty());
    CHECK(testing::overlapping_text(testing::read_text_boxes(svg(12))).size() == 1);
}

}  // namespace dtsim::render
