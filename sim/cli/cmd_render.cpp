// `dtsim render TRACE.json [--svg F.svg] [--png F.png] [--pdf F.pdf] [--chrome-trace F.json]
//  [--show-ranks SEL] [--view auto|pipeline|ranks] [--width PX] [--title T] [--max-rows N]`: draws a saved trace and/or
// exports it for Perfetto, with the output options every command shares.
#include "commands.hpp"

#include "dtsim/render.hpp"
#include "dtsim/trace_io.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <functional>

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

namespace dtsim::cli {
namespace {

struct RenderArgs {
    std::string trace;
    TraceOutputs out;
};

// The overview of a trace read thinned (RankThinner::overview): its rows gathered on a second read of
// the file (render::OverviewFeed), every picture drawn; false where that cannot be done (the layout
// fails, is no overview, or the second read differs), and the caller reads the trace whole.
bool draw_overview(const RenderArgs& args, const Trace& thinned) {
    std::optional<render::OverviewFeed> feed;
    try {
        feed.emplace(thinned, args.out.picture);
    } catch (const std::invalid_argument&) {
        return false;  // the whole trace's picture says what is wrong
    }
    if (!feed->overview()) return false;  // (a grid that does not fit the ranks, say)
    (void)read_trace_file(args.trace, std::ref(*feed));
    if (!feed->complete()) return false;
    try {
        args.out.check_ranks(static_cast<int>(thinned.ranks.size()), render::grid_of(thinned));
    } catch (const std::invalid_argument& e) {
        throw UsageError(fmt::format("render: {}", e.what()));
    }
    for (const auto* path : {&args.out.svg, &args.out.png, &args.out.pdf})
        if (!path->empty()) feed->write_image(*path);
    return true;
}

void run_render(const RenderArgs& args) {
    if (!args.out.any())
        throw UsageError("render: nothing to write: give --svg, --png, --pdf and/or --chrome-trace");
    if (!args.out.picture.ranks.empty() && !args.out.pictures())
        throw UsageError("--show-ranks selects the ranks of a picture: give --svg, --png or --pdf with it");
    if (validate_only()) return;
    // Only pictures: the ranks they do not draw are thinned as they are read (render::RankThinner),
    // and the trace is read again whole where the picture turns out to draw one of them; the
    // overview, which draws every rank in group rows, tallies them on a second read instead.
    // A pipe cannot be read again, which a thinned read may need: it is read once, whole.
    Trace trace;
    std::error_code ec;
    if (args.out.chrome.empty() && std::filesystem::is_regular_file(args.trace, ec)) {
        render::RankThinner thin(args.out.picture);
        trace = read_trace_file(args.trace, std::ref(thin));
        if (thin.overview() && draw_overview(args, trace)) return;
        if (!thin.complete(trace)) trace = read_trace_file(args.trace);
    } else {
        trace = read_trace_file(args.trace);
    }
    try {
        args.out.check_ranks(static_cast<int>(trace.ranks.size()), render::grid_of(trace));
        args.out.write(trace);
    } catch (const std::invalid_argument& e) {  // the rank selection against the trace's ranks
        throw UsageError(fmt::format("render: {}", e.what()));
    }
}

}  // namespace

void register_render_command(CLI::App& app) {
    auto args = std::make_shared<RenderArgs>();
    auto* cmd = app.add_subcommand(
        "render",
        "Draw a saved trace as a timeline picture (one row per GPU, memory underneath) and/or export it as a "
        "Chrome / Perfetto trace");
    cmd->add_option("trace", args->trace, "Trace JSON written by --trace")->required();
    args->out.add_options(cmd, /*with_trace=*/false);
    args->out.add_picture_options(cmd);
    cmd->callback([args] { run_render(*args); });
}

}  // namespace dtsim::cli
