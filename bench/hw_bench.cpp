// dtsim-hw-bench: how fast the hardware world simulates whole configurations
// (printed figures, never a timed test). With no arguments it runs the
// 1,024-GPU GPT-3 175B step (TP 8, PP 16, DP 8, 1F1B, 64 microbatches) and a
// puzzle strategy on H100s, from the shipped configs (found as dtsim finds them:
// dtsim/hw/data_dir.hpp); otherwise the configs given. With --set, each config's
// sweep instead (as `dtsim run CONFIG --set ...` runs it), one run after another
// and then --jobs at once, against each other in the same process.
#include "dtsim/hw/data_dir.hpp"
#include "dtsim/hw/run.hpp"

#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

// The sweep of `path` with `jobs` runs at once: its wall time, and its outcomes as text (the
// reports less their host time) to check that the two ways give the same.
double time_sweep(const std::string& path, const std::vector<std::vector<dtsim::hw::Override>>& combos, int jobs,
                  std::vector<std::string>& outcomes) {
    outcomes.clear();
    const auto t0 = std::chrono::steady_clock::now();
    dtsim::hw::run_in_order(
        combos.size(), jobs, [&](std::size_t i) { return dtsim::hw::run_combination(path, combos[i]); },
        [&](std::size_t, dtsim::hw::SweepOutcome& o) {
            if (!o.report) {
                outcomes.push_back("error: " + o.error);
                return;
            }
            auto j = dtsim::hw::to_json(*o.report);
            j.erase("wall_s");
            outcomes.push_back(j.dump());
        });
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Each config's sweep one run after another and `jobs` at once, best of `repeat` each.
void bench_sweeps(const std::vector<std::string>& configs, const std::vector<std::string>& sets, int jobs,
                  int repeat) {
    const auto combos = dtsim::hw::combinations(dtsim::hw::parse_settings(sets));
    fmt::print("{:<52} {:>6} {:>10} {:>10} {:>6} {:>9} {}\n", "sweep", "runs", "-j 1 s", "-j N s", "N",
               "speed-up", "same output");
    for (const auto& path : configs) {
        double one = 1e300, many = 1e300;
        std::vector<std::string> a, b;
        for (int i = 0; i < repeat; ++i) {
            one = std::min(one, time_sweep(path, combos, 1, a));
            many = std::min(many, time_sweep(path, combos, jobs, b));
        }
        fmt::print("{:<52} {:>6} {:>10.3f} {:>10.3f} {:>6} {:>8.2f}x {}\n", path.substr(path.rfind('/') + 1),
                   combos.size(), one, many, jobs, one / many, a == b ? "yes" : "NO");
    }
    fmt::print("hardware threads {}; a sweep's runs share the machine with whatever else runs on it\n",
               std::thread::hardware_concurrency());
}

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
    std::vector<std::string> configs, sets;
    int repeat = 3;
    int jobs = dtsim::hw::default_sweep_jobs();
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "-h" || a == "--help") {
            fmt::print("usage: dtsim-hw-bench [--repeat N] [CONFIG.json ...]\n"
                       "       dtsim-hw-bench [--repeat N] [--jobs J] CONFIG.json ... --set PATH=V1,V2 [--set ...]\n"
                       "Simulates each config N times (default 3), whole and with one rank for its data- and\n"
                       "tensor-parallel twins where that applies, and prints the best wall times, events per second,\n"
                       "whether the reports agree, MFU and step time; without configs, GPT-3 175B on 1,024 A100s and\n"
                       "a puzzle strategy.\n"
                       "With --set, each config's sweep (as dtsim run runs it) one run after another and J at once\n"
                       "(default: one per hardware thread), best of N each, and whether both gave the same rows.\n");
            return 0;
        }
        if (a == "--repeat" && i + 1 < argc)
            repeat = std::max(1, std::atoi(argv[++i]));
        else if ((a == "--jobs" || a == "-j") && i + 1 < argc)
            jobs = std::clamp(std::atoi(argv[++i]), 1, dtsim::hw::kMaxSweepJobs);
        else if (a == "--set" && i + 1 < argc)
            sets.push_back(argv[++i]);
        else
            configs.push_back(a);
    }
    try {
        if (configs.empty()) configs = default_configs();
        if (!sets.empty()) {
            bench_sweeps(configs, sets, jobs, repeat);
            return 0;
        }
        // Each config simulated whole (every rank) and with one rank for its data- and
        // tensor-parallel twins (RunOptions::twins_once, where it applies), best of `repeat` each,
        // and whether the two reports agree figure for figure.
        fmt::print("{:<44} {:>6} {:>10} {:>9} {:>11} {:>10} {:>8} {:>7} {:>8} {:>10}\n", "config", "gpus", "events",
                   "whole s", "events/s", "twins s", "speed-up", "same", "MFU", "step");
        for (const auto& path : configs) {
            const auto config = dtsim::hw::load_config(path);
            const auto best_of = [&](bool twins_once, dtsim::hw::RunReport& report) {
                double best = 1e300;
                for (int i = 0; i < repeat; ++i) {
                    auto r = dtsim::hw::simulate(config, {.keep_trace = false, .twins_once = twins_once});
                    best = std::min(best, r.report.wall_seconds);
                    report = r.report;
                }
                return best;
            };
            dtsim::hw::RunReport whole, one;
            const double t_whole = best_of(false, whole);
            const bool applies = dtsim::hw::twins_once_applies(config, {.keep_trace = false});
            const double t_one = applies ? best_of(true, one) : t_whole;
            auto a = dtsim::hw::to_json(whole), b = dtsim::hw::to_json(applies ? one : whole);
            for (auto* j : {&a, &b}) {
                j->erase("wall_s");
                j->erase("simulated_ranks");
            }
            fmt::print("{:<44} {:>6} {:>10} {:>9.3f} {:>11.3e} {:>10} {:>8} {:>7} {:>7.1f}% {:>10}\n",
                       config.name.substr(0, 44), whole.gpus, whole.events, t_whole,
                       static_cast<double>(whole.events) / t_whole, applies ? fmt::format("{:.4f}", t_one) : "-",
                       applies ? fmt::format("{:.1f}x", t_whole / t_one) : "-",
                       applies ? (a == b ? "yes" : "NO") : "-", 100 * whole.mfu,
                       fmt::format("{}", dtsim::hw::Seconds{whole.step_time}));
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
