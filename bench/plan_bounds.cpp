// dtsim-plan-bounds: checks `dtsim plan`'s bounds against full simulations of every candidate of a
// real config's space (printed figures; the unit tests check a small model's space). The search
// is exact only if no candidate's step-time bound exceeds its simulated step time and no
// candidate's memory bound exceeds its simulated peak (docs/planning.md); this simulates every
// candidate (or every k-th, --every k) and prints the smallest ratios simulated / bound, with
// the layouts that give them, and the median ratios. Exit status 1 when a bound exceeds a simulation.
//
//   dtsim-plan-bounds CONFIG [--gpus N] [--space KNOB=V1,V2 ...] [--set PATH=VALUE ...]
//                     [--every K] [-j N]
#include "dtsim/hw/plan.hpp"
#include "dtsim/hw/run.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <exception>
#include <limits>
#include <string>
#include <vector>

namespace {

// The smallest ratio simulated / bound, its layout, and every ratio for the median (how tight the
// bounds are on the whole space, not only at their closest).
struct Worst {
    double ratio = std::numeric_limits<double>::infinity();
    std::string label;
    std::vector<double> ratios;
    void see(double simulated, double bound, const std::string& l) {
        if (bound <= 0) return;
        const double r = simulated / bound;
        ratios.push_back(r);
        if (r < ratio) {
            ratio = r;
            label = l;
        }
    }
    double median() {
        if (ratios.empty()) return std::numeric_limits<double>::quiet_NaN();
        const auto mid = ratios.begin() + static_cast<std::ptrdiff_t>(ratios.size() / 2);
        std::nth_element(ratios.begin(), mid, ratios.end());
        return *mid;
    }
};

}  // namespace

int main(int argc, char** argv) {
    using namespace dtsim::hw;
    PlanRequest request;
    std::size_t every = 1;
    request.jobs = default_sweep_jobs();
    try {
        for (int i = 1; i < argc; ++i) {
            const std::string a = argv[i];
            const auto value = [&]() -> std::string {
                if (i + 1 >= argc) throw std::invalid_argument(a + ": expected a value");
                return argv[++i];
            };
            if (a == "--gpus") request.gpus = value();
            else if (a == "--space") set_space(request.space, value());
            else if (a == "--set") {
                const std::string s = value();
                const auto eq = s.find('=');
                if (eq == std::string::npos) throw std::invalid_argument("--set " + s + ": expected PATH=VALUE");
                request.overrides.push_back({s.substr(0, eq), s.substr(eq + 1)});
            } else if (a == "--every") every = static_cast<std::size_t>(std::max(1, std::stoi(value())));
            else if (a == "-j" || a == "--jobs") request.jobs = std::clamp(std::stoi(value()), 1, kMaxSweepJobs);
            else if (!a.empty() && a[0] != '-' && request.config_path.empty()) request.config_path = a;
            else throw std::invalid_argument(a + ": unknown argument");
        }
        if (request.config_path.empty()) throw std::invalid_argument("expected a config");
        const auto t0 = std::chrono::steady_clock::now();
        const Enumeration e = enumerate_layouts(request);
        std::vector<std::size_t> picked;
        for (std::size_t i = 0; i < e.candidates.size(); i += every) picked.push_back(i);
        Worst time, memory;
        std::size_t fits = 0, oom = 0, failed = 0, violations = 0;
        run_in_order(
            picked.size(), request.jobs,
            [&](std::size_t k) -> SweepOutcome {
                try {
                    const Config c = candidate_config(e, request, e.candidates[picked[k]]);
                    return {simulate(c, {.keep_trace = false, .straggler_baseline = false}).report, {}};
                } catch (const std::exception& err) {
                    return {std::nullopt, err.what()};
                }
            },
            [&](std::size_t k, SweepOutcome& o) {
                const Candidate& c = e.candidates[picked[k]];
                if (!o.report) {
                    ++failed;
                    fmt::print("failed: {}: {}\n", c.label, o.error);
                    return;
                }
                const RunReport& r = *o.report;
                // Every simulation bounds the memory (an OOM run's peak is past capacity); the step
                // time is bounded where it fits (the search ranks only those).
                memory.see(r.peak.bytes, c.memory_bound, c.label);
                if (r.peak.bytes < c.memory_bound) {
                    ++violations;
                    fmt::print("memory bound above the simulated peak: {}: {:.6g} > {:.6g}\n", c.label,
                               c.memory_bound, r.peak.bytes);
                }
                if (r.oom) {
                    ++oom;
                    return;
                }
                ++fits;
                time.see(r.step_time, c.time_bound, c.label);
                if (r.step_time < c.time_bound) {
                    ++violations;
                    fmt::print("step-time bound above the simulated step: {}: {:.6g} > {:.6g}\n", c.label,
                               c.time_bound, r.step_time);
                }
            });
        const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        fmt::print("{}: {} candidates, {} simulated (every {}): {} fit, {} out of memory, {} failed; {:.1f} s\n",
                   request.config_path, e.candidates.size(), picked.size(), every, fits, oom, failed, wall);
        fmt::print("  simulated step / step-time bound, smallest: {:.4f}  ({}); median {:.4f}\n", time.ratio,
                   time.label, time.median());
        fmt::print("  simulated peak / memory bound, smallest:    {:.4f}  ({}); median {:.4f}\n", memory.ratio,
                   memory.label, memory.median());
        fmt::print("  bounds above a simulation: {}\n", violations);
        return violations > 0 ? 1 : 0;
    } catch (const std::exception& err) {
        fmt::print(stderr, "dtsim-plan-bounds: {}\n", err.what());
        return 2;
    }
}
