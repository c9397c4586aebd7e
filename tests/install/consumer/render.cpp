// Draws a two-rank trace as SVG through the installed dtsim::render.
#include <dtsim/render.hpp>
#include <dtsim/trace.hpp>

#include <cstdio>
#include <sstream>
#include <string>

int main() {
    dtsim::Trace trace;
    trace.meta["puzzle"] = "consumer";
    for (int r = 0; r < 2; ++r) {
        dtsim::RankTrace rank{r, {}};
        dtsim::Event fwd{dtsim::ops::forward};
        fwd.layer = 0;
        fwd.duration = 1;
        fwd.batches = dtsim::IdSet{r};
        dtsim::Event ar{dtsim::ops::allreduce, dtsim::Stream::comm};
        ar.start = 1;
        ar.duration = 0.5;
        ar.memory = 1;
        rank.events = {fwd, ar};
        trace.ranks.push_back(rank);
    }
    dtsim::summarize(trace);

    std::ostringstream out;
    dtsim::render::write_image(trace, out, dtsim::render::Format::svg);
    const std::string svg = out.str();
    const bool ok = svg.rfind("<?xml", 0) == 0 && svg.find("<svg") != std::string::npos;
    std::printf("SVG of %zu bytes, timesteps %g: %s\n", svg.size(), trace.summary.timesteps, ok ? "ok" : "FAILED");
    if (!ok) std::printf("%.200s\n", svg.c_str());
    return ok ? 0 : 1;
}
