// The files a run writes from its trace, for the commands that share them (see TraceOutputs).
#include "commands.hpp"

#include "dtsim/render.hpp"
#include "dtsim/trace_io.hpp"

#include <fmt/format.h>

namespace dtsim::cli {

void TraceOutputs::add_options(CLI::App* cmd) {
    cmd->add_option("--trace", trace, "Write the trace JSON to this file")->check(output_file());
    cmd->add_option("--svg", svg, "Draw the timeline as SVG")->check(image_file(render::Format::svg));
    cmd->add_option("--png", png, "Draw the timeline as PNG")->check(image_file(render::Format::png));
    cmd->add_option("--pdf", pdf, "Draw the timeline as PDF")->check(image_file(render::Format::pdf));
    cmd->add_option("--chrome-trace", chrome, "Write a Chrome/Perfetto trace (ui.perfetto.dev)")
        ->check(output_file());
    cmd->add_option("--show-ranks", ranks, "Ranks to draw, e.g. 0-7,15 (default: all, aggregated if many)");
}

bool TraceOutputs::any() const {
    return !(trace.empty() && svg.empty() && png.empty() && pdf.empty() && chrome.empty());
}

void TraceOutputs::check_ranks(int nranks) const {
    if (!ranks.empty() && svg.empty() && png.empty() && pdf.empty())
        throw UsageError("--show-ranks selects the ranks of a picture: give --svg, --png or --pdf with it");
    check_rank_selection(ranks, nranks);
}

void TraceOutputs::write(const Trace& t) const {
    if (!trace.empty()) write_trace_file(t, trace);
    render::Options opts;
    opts.ranks = ranks;
    for (const auto* path : {&svg, &png, &pdf})
        if (!path->empty()) render::write_image(t, *path, opts);
    if (!chrome.empty()) render::write_chrome_trace_file(t, chrome);
}

void TraceOutputs::write_partial(const Trace& t) const {
    try {
        write(t);
        fmt::print("  the files asked for hold the run up to the failure ({} events)\n", t.event_count());
    } catch (const std::exception& e) {
        fmt::print("  the run up to the failure could not be written: {}\n", e.what());
    }
}

}  // namespace dtsim::cli
