// The files a command writes from its trace or its chart, under the same option names in every command.
#include "commands.hpp"

#include "dtsim/render.hpp"
#include "dtsim/trace_io.hpp"

#include <fmt/format.h>

#include <limits>
#include <string>
#include <string_view>
#include <utility>

namespace dtsim::cli {

void TraceOutputs::add_options(CLI::App* cmd, bool with_trace) {
    if (with_trace) cmd->add_option("--trace", trace, "Write the trace JSON to this file")->check(output_file());
    cmd->add_option("--svg", svg, "Draw the timeline as SVG")->check(image_file(render::Format::svg));
    cmd->add_option("--png", png, "Draw the timeline as PNG")->check(image_file(render::Format::png));
    cmd->add_option("--pdf", pdf, "Draw the timeline as PDF")->check(image_file(render::Format::pdf));
    cmd->add_option("--chrome-trace", chrome, "Write a Chrome/Perfetto trace (ui.perfetto.dev)")
        ->check(output_file());
    cmd->add_option("--show-ranks", picture.ranks,
                    "Ranks to draw: ids and ranges (0-7,15) or coordinates (pp=0-3,dp=0) (default: all; more than "
                    "--max-rows are grouped; the pipeline view draws one GPU per stage)");
    cmd->add_option("--view", picture.view,
                    "The picture's rows: pipeline (one row per pipeline stage, a box per microbatch pass, the bubble "
                    "shaded), ranks (one row per GPU, a box per operation) or auto (pipeline for pipelined runs)")
        ->transform(CLI::Validator([](std::string& value) -> std::string {
            // The enum's number for CLI11 to read; a clear message for anything else.
            static constexpr std::pair<std::string_view, render::View> kViews[] = {
                {"auto", render::View::automatic}, {"pipeline", render::View::pipeline}, {"ranks", render::View::ranks}};
            for (const auto& [name, view] : kViews)
                if (value == name) {
                    value = std::to_string(static_cast<int>(view));
                    return {};
                }
            return "expected auto, pipeline or ranks, found '" + value + "'";
        }, "auto|pipeline|ranks"))
        ->default_str("auto");
}

void TraceOutputs::add_picture_options(CLI::App* cmd) {
    cmd->add_option("--width", picture.width, "Picture width in pixels (default: from the number of events)")
        ->transform(whole_number(0, std::numeric_limits<int>::max()));
    cmd->add_option("--title", picture.title, "Title line (default: from the trace's puzzle or config name)");
    cmd->add_option("--max-rows", picture.max_rows,
                    "With more selected ranks than this, draw an overview with ranks grouped into rows")
        ->transform(whole_number(1, std::numeric_limits<int>::max()))
        ->capture_default_str();
}

bool TraceOutputs::any() const { return !trace.empty() || pictures() || !chrome.empty(); }

bool TraceOutputs::pictures() const { return !(svg.empty() && png.empty() && pdf.empty()); }

void TraceOutputs::check_ranks(int nranks, const render::RankGrid& grid) const {
    if (!picture.ranks.empty() && !pictures())
        throw UsageError("--show-ranks selects the ranks of a picture: give --svg, --png or --pdf with it");
    check_rank_selection(picture.ranks, nranks, grid);
}

void TraceOutputs::write(const Trace& t) const {
    if (!trace.empty()) write_trace_file(t, trace);
    for (const auto* path : {&svg, &png, &pdf})
        if (!path->empty()) render::write_image(t, *path, picture);
    if (!chrome.empty()) render::write_chrome_trace_file(t, chrome);
}

void TraceOutputs::write_partial(const Trace& t, std::FILE* to) const {
    try {
        write(t);
        fmt::print(to, "  the files asked for hold the run up to the failure ({} events)\n", t.event_count());
    } catch (const std::exception& e) {
        fmt::print(to, "  the run up to the failure could not be written: {}\n", e.what());
    }
}

void ChartOutputs::add_options(CLI::App* cmd, const std::string& what) {
    cmd->add_option("--svg", svg, "Draw " + what + " as SVG")->check(image_file(render::Format::svg));
    cmd->add_option("--png", png, "Draw " + what + " as PNG")->check(image_file(render::Format::png));
    cmd->add_option("--pdf", pdf, "Draw " + what + " as PDF")->check(image_file(render::Format::pdf));
}

std::vector<std::string> ChartOutputs::paths() const {
    std::vector<std::string> out;
    for (const auto* p : {&svg, &png, &pdf})
        if (!p->empty()) out.push_back(*p);
    return out;
}

}  // namespace dtsim::cli
