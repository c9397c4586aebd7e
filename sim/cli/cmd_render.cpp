// `dtsim render TRACE.json -o OUT.svg|png|pdf [--ranks SEL] [--width PX] [--title T]
//  [--max-rows N] [--chrome-trace OUT.json]`: draws a trace and/or exports it for Perfetto.
#include "commands.hpp"

#include "dtsim/render.hpp"
#include "dtsim/trace_io.hpp"

#include <fmt/format.h>

#include <memory>
#include <stdexcept>
#include <string>

namespace dtsim::cli {
namespace {

struct RenderArgs {
    std::string trace;
    std::string output;
    std::string chrome_trace;
    render::Options options;
};

void run_render(const RenderArgs& args) {
    if (args.output.empty() && args.chrome_trace.empty())
        throw UsageError("render: nothing to write: give -o OUT.svg|png|pdf and/or --chrome-trace OUT.json");
    const Trace trace = read_trace_file(args.trace);
    if (!args.output.empty()) {
        try {
            render::write_image(trace, args.output, args.options);
        } catch (const std::invalid_argument& e) {  // the rank selection, the width
            throw UsageError(fmt::format("render: {}", e.what()));
        }
    }
    if (!args.chrome_trace.empty()) render::write_chrome_trace_file(trace, args.chrome_trace);
}

}  // namespace

void register_render_command(CLI::App& app) {
    auto args = std::make_shared<RenderArgs>();
    auto* cmd = app.add_subcommand(
        "render",
        "Draw a trace as a timeline picture (one row per GPU, memory underneath) and/or export it as a "
        "Chrome / Perfetto trace");
    cmd->add_option("trace", args->trace, "trace JSON written by --trace")->required();
    cmd->add_option("-o,--output", args->output,
                    "picture to write; the extension picks the format: .svg, .png, .pdf")
        ->check(image_file());
    cmd->add_option("--ranks", args->options.ranks,
                    "ranks to draw, e.g. \"0-7,1023\" (default: all; more than --max-rows are grouped)");
    cmd->add_option("--width", args->options.width,
                    "picture width in pixels (default: from the number of events)")
        ->transform(whole_number(0, std::numeric_limits<int>::max()));
    cmd->add_option("--title", args->options.title,
                    "title line (default: from the trace's puzzle or config name)");
    cmd->add_option("--max-rows", args->options.max_rows,
                    "with more selected ranks than this, draw an overview with ranks grouped into rows")
        ->transform(whole_number(1, std::numeric_limits<int>::max()))
        ->capture_default_str();
    cmd->add_option("--chrome-trace", args->chrome_trace,
                    "also write the trace in Chrome Trace Event Format (open in ui.perfetto.dev)")
        ->check(output_file());
    cmd->callback([args] { run_render(*args); });
}

}  // namespace dtsim::cli
