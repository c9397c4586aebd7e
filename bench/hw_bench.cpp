// dtsim-hw-bench: how fast the hardware world simulates whole configurations
// (printed figures, never a timed test). With no arguments it runs the
// 1,024-GPU GPT-3 175B step (TP 8, PP 16, DP 8, 1F1B, 64 microbatches) and a
// puzzle strategy on H100s, from the shipped configs (found as dtsim finds them:
// dtsim/hw/data_dir.hpp); otherwise the configs given. With --set, each config's
// sweep instead (as `dtsim run CONFIG --set ...` runs it), one run after another
// and then --jobs at once, against each other in the same process. With --scale, one config's
// model and layout at several data-parallel sizes, simulated whole (every rank): the cost per
// event at each size and its ratio to the smallest size's.
#include "dtsim/hw/data_dir.hpp"
#include "dtsim/hw/run.hpp"

#include <fmt/format.h>
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <sstream>
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

// The CPU time this thread has used, in seconds: on a shared machine, wall time counts the other
// processes' turns too.
double thread_cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// "8,32,128" -> {8, 32, 128}; throws std::invalid_argument on anything but positive integers.
std::vector<int> parse_sizes(const std::string& text) {
    std::vector<int> out;
    std::stringstream in(text);
    std::string item;
    while (std::getline(in, item, ',')) {
        std::size_t used = 0;
        int v = 0;
        try {
            v = std::stoi(item, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (used == 0 || used != item.size() || v < 1)
            throw std::invalid_argument("--scale " + text + ": expected data-parallel sizes such as 8,32,128,512");
        out.push_back(v);
    }
    if (out.empty()) throw std::invalid_argument("--scale: expected data-parallel sizes such as 8,32,128,512");
    return out;
}

// `path`'s model and layout (tensor, pipeline and context parallelism, microbatches per pipeline,
// `microbatches` if positive) at each data-parallel size of `dps`: the cluster's nodes and the
// global batch follow, the rest of the config stays. Each simulated whole (every rank, the cost
// that twins_once saves), best of `repeat`: events, seconds, nanoseconds per event and that
// cost's ratio to the first size's; the cost is the thread's CPU time (wall time on a shared machine
// counts the others' turns), the run's own wall time printed beside it. `sets` are more overrides, one value each, applied first.
void bench_scale(const std::string& path, const std::vector<int>& dps, int microbatches,
                 const std::vector<std::string>& sets, int repeat) {
    std::vector<dtsim::hw::Override> base;
    for (const auto& s : sets) base.push_back(dtsim::hw::parse_override(s));
    const auto first = dtsim::hw::load_config(path, base);
    const int per_replica = first.strategy.tp * first.strategy.pp * first.strategy.cp;
    const int per_node = first.cluster.gpus_per_node;
    const int m = microbatches > 0 ? microbatches : first.microbatches();
    fmt::print("{} ({}), tp {} x pp {} x cp {}, {} microbatches per pipeline; whole world, best of {}\n",
               first.name, path.substr(path.rfind('/') + 1), first.strategy.tp, first.strategy.pp,
               first.strategy.cp, m, repeat);
    fmt::print("{:>6} {:>7} {:>12} {:>9} {:>9} {:>11} {:>9} {:>9} {:>9}\n", "dp", "gpus", "events", "wall s",
               "cpu s", "events/s", "ns/event", "vs first", "peak MiB");
    double first_ns = 0;
    for (const int dp : dps) {
        if ((per_replica * dp) % per_node != 0)
            throw std::invalid_argument(fmt::format("--scale: dp {} x {} GPUs per replica is not a whole number "
                                                    "of {}-GPU nodes",
                                                    dp, per_replica, per_node));
        auto overrides = base;
        overrides.push_back({"strategy.dp", std::to_string(dp)});
        overrides.push_back({"strategy.microbatches", std::to_string(m)});
        overrides.push_back({"cluster.nodes", std::to_string(per_replica * dp / per_node)});
        overrides.push_back({"training.global_batch", std::to_string(m * first.training.micro_batch * dp)});
        const auto config = dtsim::hw::load_config(path, overrides);
        double best = 1e300, wall = 0;
        std::size_t events = 0;
        for (int i = 0; i < repeat; ++i) {
            const double c0 = thread_cpu_seconds();
            const auto r = dtsim::hw::simulate(config, {.keep_trace = false, .twins_once = false});
            const double cpu = thread_cpu_seconds() - c0;
            if (cpu < best) {
                best = cpu;
                wall = r.report.wall_seconds;
            }
            events = r.report.events;
        }
        const double ns = 1e9 * best / static_cast<double>(events);
        if (first_ns == 0) first_ns = ns;
        rusage u{};
        getrusage(RUSAGE_SELF, &u);
        fmt::print("{:>6} {:>7} {:>12} {:>9.3f} {:>9.3f} {:>11.3e} {:>9.1f} {:>8.2f}x {:>9.1f}\n", dp, config.gpus(),
                   events, wall, best, static_cast<double>(events) / best, ns, ns / first_ns,
                   static_cast<double>(u.ru_maxrss) / 1024.0);
        std::fflush(stdout);
    }
    fmt::print("cpu s: the simulating thread's CPU time (the run's wall s counts other processes' turns too); "
               "ns/event and vs first (the cost per event against the first size's, the target at most 1.3x) come "
               "from it; peak MiB is the process's so far\n");
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
    bool repeat_given = false;
    int jobs = dtsim::hw::default_sweep_jobs();
    std::string scale;
    int microbatches = 0;
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
                       "(default: one per hardware thread), best of N each, and whether both gave the same rows.\n"
                       "       dtsim-hw-bench [--repeat N] --scale DP1,DP2,... [--microbatches M] [CONFIG.json]\n"
                       "                      [--set PATH=V ...]\n"
                       "With --scale, the config's model and layout (default: GPT-3 175B, TP 8 x PP 16, with 16\n"
                       "microbatches per pipeline) at each data-parallel size (the cluster's nodes and the global\n"
                       "batch follow; --set adds overrides of one value), simulated whole, best of N (default 1):\n"
                       "CPU nanoseconds per event and their ratio to the first size's. 8,32,128,512 is 1,024 to 65,536\n"
                       "GPUs for the default config (the largest takes a minute or more).\n");
            return 0;
        }
        if (a == "--repeat" && i + 1 < argc) {
            repeat = std::max(1, std::atoi(argv[++i]));
            repeat_given = true;
        }
        else if ((a == "--jobs" || a == "-j") && i + 1 < argc)
            jobs = std::clamp(std::atoi(argv[++i]), 1, dtsim::hw::kMaxSweepJobs);
        else if (a == "--scale" && i + 1 < argc)
            scale = argv[++i];
        else if (a == "--microbatches" && i + 1 < argc)
            microbatches = std::max(1, std::atoi(argv[++i]));
        else if (a == "--set" && i + 1 < argc)
            sets.push_back(argv[++i]);
        else
            configs.push_back(a);
    }
    try {
        if (!scale.empty()) {
            if (configs.size() > 1) throw std::invalid_argument("--scale takes one config");
            const bool default_config = configs.empty();
            if (default_config) configs = {default_configs().front()};
            bench_scale(configs.front(), parse_sizes(scale), microbatches > 0 ? microbatches : default_config ? 16 : 0,
                        sets, repeat_given ? repeat : 1);
            return 0;
        }
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
