// `dtsim render TRACE.json [--svg F.svg] [--png F.png] [--pdf F.pdf] [--chrome-trace F.json]
//  [--show-ranks SEL] [--view auto|pipeline|ranks] [--width PX] [--title T] [--max-rows N]`: draws a saved trace and/or
// exports it for Perfetto, with the output options every command shares.
#include "commands.hpp"

#include "dtsim/render.hpp"
#include "dtsim/trace_io.hpp"

#include <fmt/format.h>

#include <functional>

#include <memory>
#include <stdexcept>
#include <string>

namespace dtsim::cli {
namespace {

struct RenderArgs {
    std::string trace;
    TraceOutputs out;
};

void run_render(const RenderArgs& args) {
    if (!args.out.any())
        throw UsageError("render: nothing to write: give --svg, --png, --pdf and/or --chrome-trace");
    if (!args.out.picture.ranks.empty() && !args.out.pictures())
        throw UsageError("--show-ranks selects the ranks of a picture: give --svg, --png or --pdf with it");
    if (validate_only()) return;
    // Only pictures: the ranks they do not draw are thinned as they are read (render::RankThinner),
    // and the trace is read again whole where the picture turns out to draw one of them.
    Trace trace;
    if (args.out.chrome.empty()) {
        render::RankThinner thin(args.out.picture);
        trace = read_trace_file(args.trace, std::ref(thin));
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
