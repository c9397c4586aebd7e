// `dtsim plan CONFIG`: which layout to run (docs/planning.md). Enumerates the layouts of the
// config's model on its cluster (or --gpus N), rejects those that cannot run or cannot fit,
// simulates the rest best first by a lower bound on their step time, and prints the fastest
// that fit with the counts of what was rejected, pruned and simulated.
//
// Exit status (main.cpp): 0 when some layout fits; 3 when every simulated layout ran out of
// memory or none passed the checks and the memory bound (no layout fits); 1 when a simulation
// failed and none fits; 2 for bad arguments or a bad config (nothing ran); 130/143 when
// interrupted.
#include "commands.hpp"

#include "dtsim/hw/config.hpp"
#include "dtsim/hw/plan.hpp"
#include "dtsim/hw/run.hpp"
#include "dtsim/hw/units.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace dtsim::cli {
namespace {

using hw::Bytes;
using hw::Seconds;

struct PlanArgs {
    std::string config;
    int gpus = 0;
    std::vector<std::string> sets, space;
    int top = 5;
    bool json = false;
    std::string csv;
    int jobs = 0;
    double time_budget = 0;
    bool no_timings = false;
};

std::string percent(double part, double whole) { return whole > 0 ? fmt::format("{:.1f}%", 100 * part / whole) : "-"; }

void write_csv(const hw::PlanResult& r, const std::string& path) {
    std::ofstream out(path);
    if (!out) throw std::runtime_error(fmt::format("--csv {}: cannot write the file", path));
    out << "rank,layout,step_time_s,mfu,tokens_per_s,peak_bytes,capacity_bytes,compute_s,comm_s,idle_s,"
           "step_time_bound_s,memory_bound_bytes\n";
    for (std::size_t i = 0; i < r.best.size(); ++i) {
        const auto& row = r.simulated[r.best[i]];
        const auto& c = r.enumeration.candidates[row.candidate];
        const auto& p = *row.report;
        out << fmt::format("{},{},{},{},{},{},{},{},{},{},{},{}\n", i + 1, c.label, p.step_time, p.mfu,
                           p.tokens_per_second, p.peak.bytes, p.capacity, p.split.compute, p.split.comm, p.split.idle,
                           c.time_bound, c.memory_bound);
    }
    if (!out.flush()) throw std::runtime_error(fmt::format("--csv {}: writing failed", path));
}

void print_plan(const hw::PlanResult& r, std::size_t top, bool timings) {
    const auto& e = r.enumeration;
    fmt::print("layouts: {} enumerated, {} rejected, {} candidates; {} simulated ({} out of memory, {} failed), "
               "{} pruned by the step-time bound{}\n",
               e.enumerated, e.rejected_total(), e.candidates.size(), r.simulated.size(), r.out_of_memory, r.failed,
               r.pruned, r.budget_hit ? fmt::format(", {} left unsimulated: time budget reached", r.left) : "");
    for (const auto& [why, n] : e.rejected) fmt::print("  rejected {:>6}  {}\n", n, why);
    if (r.best.empty()) {
        fmt::print("no layout fits\n");
        if (!e.example_error.empty() && e.candidates.empty()) fmt::print("  for example: {}\n", e.example_error);
    } else {
        fmt::print("{:>3} {:>11} {:>6} {:>11} {:>21} {:>8} {:>8} {:>8}  {}\n", "#", "step", "MFU", "tokens/s",
                   "peak mem / capacity", "compute", "comm", "idle", "layout");
        for (std::size_t i = 0; i < r.best.size() && i < top; ++i) {
            const auto& row = r.simulated[r.best[i]];
            const auto& p = *row.report;
            fmt::print("{:>3} {:>11} {:>5.1f}% {:>11.0f} {:>21} {:>8} {:>8} {:>8}  {}\n", i + 1,
                       fmt::format("{}", Seconds{p.step_time}), 100 * p.mfu, p.tokens_per_second,
                       fmt::format("{} / {}", Bytes{p.peak.bytes}, Bytes{p.capacity}),
                       percent(p.split.compute, p.step_time), percent(p.split.comm, p.step_time),
                       percent(p.split.idle, p.step_time), e.candidates[row.candidate].label);
        }
        if (r.pruned > 0 && !r.budget_hit)
            fmt::print("exact: no layout left unsimulated can beat the {} above (its step-time bound is no better)\n",
                       std::min(top, r.best.size()));
    }
    if (timings)
        fmt::print("searched in {:.2f} s: {:.1f} configs/s simulated\n", r.wall_seconds,
                   r.wall_seconds > 0 ? static_cast<double>(r.simulated.size()) / r.wall_seconds : 0.0);
}

void plan(const PlanArgs& a) {
    hw::PlanRequest request;
    request.config_path = a.config;
    request.gpus = a.gpus;
    request.top = a.top;
    request.time_budget = a.time_budget;
    for (const auto& s : hw::parse_settings(a.sets)) {
        if (s.values.size() > 1)
            throw UsageError(fmt::format("--set {}: plan does not sweep; give one value (or search it with --space)",
                                         s.path));
        request.overrides.push_back({s.path, s.values.front()});
    }
    try {
        for (const auto& s : a.space) hw::set_space(request.space, s);
    } catch (const hw::PlanError& e) {
        throw UsageError(e.what());
    }
    if (validate_only()) return;
    request.jobs = a.jobs > 0 ? a.jobs : hw::default_sweep_jobs();
    const hw::PlanResult r = hw::plan(request);
    const std::size_t top = static_cast<std::size_t>(a.top);
    if (a.json)
        fmt::print("{}\n", hw::to_json(r, top, !a.no_timings).dump(2));
    else
        print_plan(r, top, !a.no_timings);
    if (!a.csv.empty()) write_csv(r, a.csv);
    exit_status() = !r.best.empty() ? 0 : r.failed > 0 ? 1 : 3;
}

}  // namespace

void register_plan_command(CLI::App& app) {
    auto pa = std::make_shared<PlanArgs>();
    auto* cmd = app.add_subcommand("plan", "Find the fastest layout that fits: enumerate, bound, simulate best first");
    cmd->add_option("config", pa->config, "Config JSON: model, cluster, training (its strategy's layout is searched)")
        ->required();
    cmd->add_option("--gpus", pa->gpus, "GPU count (default: the cluster's nodes x GPUs per node)")
        ->transform(whole_number(1, 1 << 24));
    cmd->add_option("--set", pa->sets, "Override a field that is not searched: path=value (repeatable)")
        ->allow_extra_args(false);
    cmd->add_option("--space", pa->space,
                    "The values of a knob to search: knob=v1,v2 (strategy, tp, pp, chunks, cp, zero_stage, "
                    "micro_batch, recompute, sequence_parallel, tp_comm_overlap; repeatable)")
        ->allow_extra_args(false);
    cmd->add_option("--top", pa->top, "Layouts to print: the search is exact for the best N (default 5)")
        ->transform(whole_number(1, 1000000));
    cmd->add_option("--time-budget", pa->time_budget,
                    "Stop simulating after this many seconds and say what was left (default: none)")
        ->transform(number_in(0, 1e9));
    cmd->add_flag("--json", pa->json, "Print the result as JSON");
    cmd->add_option("--csv", pa->csv, "Write every fitting layout simulated, fastest first, as CSV")
        ->transform(output_file());
    cmd->add_flag("--no-timings", pa->no_timings, "Leave out the host times (for output compared byte for byte)");
    cmd->add_option("-j,--jobs", pa->jobs,
                    "Simulations at once, on as many threads (default: one per hardware thread); the output is "
                    "the same")
        ->transform(whole_number(1, hw::kMaxSweepJobs));
    cmd->callback([pa] { plan(*pa); });
}

}  // namespace dtsim::cli
