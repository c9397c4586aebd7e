// dtsim-hw-bench: how fast the hardware world simulates whole configurations
// (printed figures, never a timed test). With no arguments it runs the
// 1,024-GPU GPT-3 175B step (TP 8, PP 16, DP 8, 1F1B, 64 microbatches) and a
// puzzle strategy on H100s, from the shipped configs (found as dtsim finds them:
// dtsim/hw/data_dir.hpp); otherwise the configs given.
#include "dtsim/hw/data_dir.hpp"
#include "dtsim/hw/run.hpp"

#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

// GPT-3 175B on 1,024 A100s and a puzzle strategy on H100s, from the shipped configs.
std::vector<std::string> default_configs() {
    const dtsim::hw::DataDir data = dtsim::hw::find_data_dir();
    if (data.path.empty()) {
        std::string looked;
        for (const auto& d : data.looked_in) looked += (looked.empty() ? "" : ", ") + d;
        throw std::runtime_error(fmt::format("the shipped configs were not found{}; set DTSIM_DATA_DIR to the "
                                             "folder that holds configs/, or name the configs to run",
                                             looked.empty() ? "" : " (looked in " + looked + ")"));
    }
    const std::string runs = data.path + "/configs/runs/";
    return {runs + "gpt3-175b-1024xa100-1f1b-mb64.json", runs + "puzzle-fsdp-dgx-h100.json"};
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> configs;
    int repeat = 3;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "-h" || a == "--help") {
            fmt::print("usage: dtsim-hw-bench [--repeat N] [CONFIG.json ...]\n"
                       "Simulates each config N times (default 3) and prints the best wall time, events per second,\n"
                       "MFU and step time; without configs, GPT-3 175B on 1,024 A100s and a puzzle strategy on H100s.\n");
            return 0;
        }
        if (a == "--repeat" && i + 1 < argc)
            repeat = std::max(1, std::atoi(argv[++i]));
        else
            configs.push_back(a);
    }
    try {
        if (configs.empty()) configs = default_configs();
        fmt::print("{:<52} {:>6} {:>10} {:>10} {:>12} {:>8} {:>10}\n", "config", "gpus", "events", "wall s",
                   "events/s", "MFU", "step");
        for (const auto& path : configs) {
            const auto config = dtsim::hw::load_config(path);
            double best = 1e300;
            dtsim::hw::RunReport report;
            for (int i = 0; i < repeat; ++i) {
                auto r = dtsim::hw::simulate(config, {.keep_trace = false});
                best = std::min(best, r.report.wall_seconds);
                report = r.report;
            }
            fmt::print("{:<52} {:>6} {:>10} {:>10.3f} {:>12.3e} {:>7.1f}% {:>10}\n", config.name, report.gpus,
                       report.events, best, static_cast<double>(report.events) / best, 100 * report.mfu,
                       fmt::format("{}", dtsim::hw::Seconds{report.step_time}));
        }
    } catch (const std::exception& e) {
        std::fflush(stdout);
        fmt::print(stderr, "dtsim-hw-bench: {}\n", e.what());
        return 1;
    }
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    fmt::print("peak RSS {:.1f} MiB (best of {} runs each)\n", static_cast<double>(u.ru_maxrss) / 1024.0, repeat);
    return 0;
}
