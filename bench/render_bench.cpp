// dtsim-render-bench: how long drawing takes for a 1,024-rank trace next to an
// 8-rank one (synthetic traces, ~100 events per rank), in SVG and PNG; and how long
// reading the trace's JSON takes (what `dtsim render` does before it draws) against
// drawing it as SVG.
//   dtsim-render-bench [OUTDIR]   also writes the pictures to OUTDIR
#include "dtsim/render.hpp"
#include "dtsim/trace_io.hpp"
#include "synthetic_trace.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using dtsim::render::Format;

struct Timing {
    double seconds = 0;  // median of the runs
    std::size_t bytes = 0;
};

Timing time_render(const dtsim::Trace& trace, Format format, int runs) {
    std::vector<double> times;
    std::size_t bytes = 0;
    for (int i = 0; i < runs; ++i) {
        std::ostringstream out;
        const auto t0 = std::chrono::steady_clock::now();
        dtsim::render::write_image(trace, out, format);
        const auto t1 = std::chrono::steady_clock::now();
        times.push_back(std::chrono::duration<double>(t1 - t0).count());
        bytes = out.str().size();
    }
    std::sort(times.begin(), times.end());
    return {times[times.size() / 2], bytes};
}

// Reading the trace's JSON text, as `dtsim render` reads a trace file: median of `runs`.
Timing time_read(const dtsim::Trace& trace, int runs) {
    std::ostringstream text;
    dtsim::write_trace_json(trace, text);
    const std::string json = text.str();
    std::vector<double> times;
    for (int i = 0; i < runs; ++i) {
        std::istringstream in(json);
        const auto t0 = std::chrono::steady_clock::now();
        const dtsim::Trace back = dtsim::read_trace_json(in, "bench");
        const auto t1 = std::chrono::steady_clock::now();
        if (back.event_count() != trace.event_count()) throw std::runtime_error("the trace read back differs");
        times.push_back(std::chrono::duration<double>(t1 - t0).count());
    }
    std::sort(times.begin(), times.end());
    return {times[times.size() / 2], json.size()};
}

}  // namespace

int main(int argc, char** argv) try {
    const std::string outdir = argc > 1 ? argv[1] : "";
    if (outdir == "-h" || outdir == "--help") {
        fmt::print("usage: dtsim-render-bench [OUTDIR]\n"
                   "Times drawing a 1,024-rank synthetic trace next to an 8-rank one, in SVG and PNG, and reading its\n"
                   "trace JSON (median of {} runs);\n"
                   "with OUTDIR, also writes the pictures there.\n",
                   3);
        return 0;
    }
    constexpr int kRuns = 3;
    struct Case {
        const char* name;
        dtsim::render::detail::SyntheticSpec spec;
    };
    Case cases[] = {{"8 ranks", {}}, {"1024 ranks", {}}};
    cases[0].spec.ranks = 8;
    cases[1].spec.ranks = 1024;
    fmt::print("{:<12} {:>8} {:>9} {:>10} {:>9} {:>10} {:>9} {:>10} {:>10}\n", "trace", "events", "ev/rank", "svg ms",
               "svg KiB", "png ms", "png KiB", "read ms", "json KiB");
    Timing svg[2], png[2], read[2];
    for (int k = 0; k < 2; ++k) {
        const auto trace = dtsim::render::detail::synthetic_trace(cases[k].spec);
        svg[k] = time_render(trace, Format::svg, kRuns);
        png[k] = time_render(trace, Format::png, kRuns);
        read[k] = time_read(trace, kRuns);
        fmt::print("{:<12} {:>8} {:>9} {:>10.1f} {:>9.0f} {:>10.1f} {:>9.0f} {:>10.1f} {:>10.0f}\n", cases[k].name,
                   trace.event_count(), trace.event_count() / trace.ranks.size(), svg[k].seconds * 1e3,
                   svg[k].bytes / 1024.0, png[k].seconds * 1e3, png[k].bytes / 1024.0, read[k].seconds * 1e3,
                   read[k].bytes / 1024.0);
        if (!outdir.empty()) {
            const std::string base = fmt::format("{}/bench-{}", outdir, cases[k].spec.ranks);
            dtsim::render::write_image(trace, base + ".svg");
            dtsim::render::write_image(trace, base + ".png");
        }
    }
    fmt::print("1024 ranks / 8 ranks: svg {:.2f}x, png {:.2f}x (median of {} runs each)\n",
               svg[1].seconds / svg[0].seconds, png[1].seconds / png[0].seconds, kRuns);
    fmt::print("1024 ranks: reading the trace's JSON / drawing it as SVG: {:.2f}x; {:.0f} MB/s read\n",
               read[1].seconds / svg[1].seconds, read[1].bytes / read[1].seconds / 1e6);
    return 0;
} catch (const std::exception& e) {
    fmt::print(stderr, "dtsim-render-bench: error: {}\n", e.what());
    return 1;
}
