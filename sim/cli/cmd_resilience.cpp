// `dtsim failures CONFIG`: faults and checkpoints over a long run. The step
// time comes from simulating one step of the config (as `dtsim run`); the
// checkpoint cost from the bytes the strategy saves and the cluster's
// "storage" bandwidths. Failures come at given times (--fail-at-hours) or are
// drawn from a per-node MTBF (--mtbf-hours), with a seeded generator: the same
// arguments print the same figures on every machine.
//
// Prints the checkpoint plan, a table of goodput against the checkpoint
// interval k (the mean over --trials seeds), the best k and the Young (1974)
// and Daly (2006) optima; --trace/--svg write the timeline of one run at
// --checkpoint-every (seed --seed).
//
// Exit status (main.cpp): 0; 1 for a failed run; 2 for bad arguments or a bad config.
#include "commands.hpp"

#include "dtsim/hw/config.hpp"
#include "dtsim/hw/resilience.hpp"
#include "dtsim/hw/run.hpp"
#include "dtsim/render.hpp"
#include "dtsim/trace_io.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

namespace dtsim::cli {
namespace {

struct FailuresArgs {
    std::string config;
    std::vector<std::string> sets;
    long long steps = 10000;
    int checkpoint_every = 0;  // 0: the best of the sweep
    double mtbf_hours = 0;
    std::vector<double> fail_at_hours;
    double restart_minutes = 10;
    std::uint64_t seed = 1;
    int trials = 100;
    TraceOutputs out;
};

std::string duration(double s) {
    if (s >= 3600) return fmt::format("{:.2f} h", s / 3600);
    if (s >= 60) return fmt::format("{:.1f} min", s / 60);
    return fmt::format("{:.2f} s", s);
}

// Checkpoint intervals to try: 1, then about 12 % apart, up to the whole run.
std::vector<int> intervals(long long steps) {
    std::vector<int> ks;
    double k = 1;
    while (k <= static_cast<double>(steps)) {
        const int ki = static_cast<int>(std::lround(k));
        if (ks.empty() || ki != ks.back()) ks.push_back(ki);
        k *= 1.12;
    }
    if (ks.back() != steps) ks.push_back(static_cast<int>(std::min<long long>(steps, 1 << 30)));
    return ks;
}

void failures(const FailuresArgs& a) {
    if (a.steps < 1) throw UsageError(fmt::format("failures: --steps must be at least 1, got {}", a.steps));
    if (a.mtbf_hours < 0) throw UsageError(fmt::format("failures: --mtbf-hours must be >= 0, got {}", a.mtbf_hours));
    if (a.mtbf_hours == 0 && a.fail_at_hours.empty())
        throw UsageError("failures: give --mtbf-hours H (per node) and/or --fail-at-hours T1,T2,...");
    for (double h : a.fail_at_hours)
        if (!(h >= 0)) throw UsageError(fmt::format("failures: --fail-at-hours takes times >= 0, got {}", h));
    if (a.restart_minutes < 0)
        throw UsageError(fmt::format("failures: --restart-minutes must be >= 0, got {}", a.restart_minutes));
    if (a.trials < 1) throw UsageError(fmt::format("failures: --trials must be at least 1, got {}", a.trials));
    if (a.checkpoint_every < 0)
        throw UsageError(fmt::format("failures: --checkpoint-every must be >= 1, got {}", a.checkpoint_every));

    std::vector<hw::Override> overrides;
    for (const auto& s : hw::parse_settings(a.sets)) {
        if (s.values.size() > 1) throw UsageError(fmt::format("--set {}: failures does not sweep; give one value", s.path));
        overrides.push_back({s.path, s.values.front()});
    }
    const hw::Config c = hw::load_config(a.config, overrides);
    const hw::CheckpointPlan plan = hw::plan_checkpoint(c);
    a.out.check_ranks(static_cast<int>(plan.write_bytes.size()));  // the timeline has a row per rank that saves
    const hw::RunReport r = hw::simulate(c, {.keep_trace = false}).report;
    const double step = r.step_time;
    const int nodes = c.cluster.nodes;

    hw::FaultOptions o;
    o.steps = a.steps;
    o.node_mtbf = a.mtbf_hours * 3600;
    for (double h : a.fail_at_hours) o.fail_at.push_back(h * 3600);
    o.restart_overhead = a.restart_minutes * 60;
    o.seed = a.seed;
    const double restart = o.restart_overhead + plan.read_time;

    fmt::print("{}: {} GPUs on {} node{}, {}, step {} (simulated one step)\n", c.name, c.gpus(), nodes,
               nodes == 1 ? "" : "s", c.strategy.name, duration(step));
    fmt::print("checkpoint: {}: {:.1f} GB in {} (storage: {:.0f} GB/s per node, {:.0f} GB/s write in all)\n", plan.who,
               plan.total_bytes / 1e9, duration(plan.write_time), c.cluster.storage.node_bandwidth / 1e9,
               c.cluster.storage.write_bandwidth / 1e9);
    fmt::print("restart: {} relaunch (assumed) + {} to load = {}\n", duration(o.restart_overhead),
               duration(plan.read_time), duration(restart));
    const double job_mtbf = o.node_mtbf / nodes;
    if (o.node_mtbf > 0)
        fmt::print("failures: node MTBF {:.0f} h, so the job fails every {} on average; {} trials of {} steps "
                   "(seeds {}..{})\n",
                   a.mtbf_hours, duration(job_mtbf), a.trials, a.steps, a.seed, a.seed + a.trials - 1);
    if (!o.fail_at.empty()) {
        std::string list;
        for (double h : a.fail_at_hours) list += fmt::format("{}{:g} h", list.empty() ? "" : ", ", h);
        fmt::print("failures at: {} (node 0)\n", list);
    }
    const double ideal = 3600 / step;
    fmt::print("without failures or checkpoints: {:.1f} steps/h\n\n", ideal);

    // The sweep over k: mean goodput over the trials (the same seeds for every k).
    const int trials = o.node_mtbf > 0 ? a.trials : 1;
    fmt::print("{:>8} {:>11} {:>9} {:>9} {:>10} {:>10} {:>10} {:>9}\n", "every k", "interval", "goodput", "steps/h",
               "lost", "ckpt", "restart", "failures");
    hw::LongRun best;
    double best_goodput = -1;
    auto row = [&](const hw::LongRun& lr, const char* mark) {
        fmt::print("{:>8} {:>11} {:>8.2f}% {:>9.1f} {:>10} {:>10} {:>10} {:>9.2f}{}\n", lr.checkpoint_every,
                   duration(lr.checkpoint_every * step), 100 * lr.goodput(), 3600 * a.steps / lr.wall,
                   duration(lr.lost), duration(lr.checkpointing), duration(lr.restarting),
                   static_cast<double>(lr.failures) / trials, mark);
    };
    std::vector<hw::LongRun> runs;
    for (int k : intervals(a.steps)) {
        o.checkpoint_every = k;
        runs.push_back(hw::mean_long_run(step, plan, nodes, o, trials));
        if (runs.back().goodput() > best_goodput) best_goodput = runs.back().goodput(), best = runs.back();
    }
    // Print every row near the best and a few either side, so the table stays short.
    std::size_t at = 0;
    for (std::size_t i = 0; i < runs.size(); ++i)
        if (runs[i].checkpoint_every == best.checkpoint_every) at = i;
    for (std::size_t i = 0; i < runs.size(); ++i) {
        const bool near = i + 6 >= at && i <= at + 6;
        const bool edge = i == 0 || i + 1 == runs.size() || i % 8 == 0;
        if (near || edge) row(runs[i], runs[i].checkpoint_every == best.checkpoint_every ? "  <- best" : "");
    }

    fmt::print("\nbest: checkpoint every {} steps ({} of work), goodput {:.2f}%, {:.1f} steps/h\n",
               best.checkpoint_every, duration(best.checkpoint_every * step), 100 * best.goodput(),
               3600 * a.steps / best.wall);
    if (o.node_mtbf > 0) {
        const double young = hw::young_interval(plan.write_time, job_mtbf);
        const double daly = hw::daly_interval(plan.write_time, job_mtbf);
        fmt::print("Young (1974): sqrt(2 x {} x {}) = {} = {:.0f} steps\n", duration(plan.write_time),
                   duration(job_mtbf), duration(young), young / step);
        fmt::print("Daly (2006):  {} = {:.0f} steps\n", duration(daly), daly / step);
        fmt::print("simulated best / Young: {:.2f}\n", best.checkpoint_every * step / young);
    }

    if (a.out.any()) {
        o.checkpoint_every = a.checkpoint_every > 0 ? a.checkpoint_every : best.checkpoint_every;
        o.seed = a.seed;
        Trace t;
        const hw::LongRun one = hw::simulate_long_run(step, plan, nodes, o, &t);
        t.meta = {{"config", c.name},
                  {"failures", {{"checkpoint_every", o.checkpoint_every}, {"seed", o.seed},
                                {"failures", one.failures}, {"checkpoints", one.checkpoints},
                                {"goodput", one.goodput()}}}};
        fmt::print("timeline: checkpoint every {} steps, seed {}: {} failures, {} checkpoints, goodput {:.2f}%\n",
                   o.checkpoint_every, o.seed, one.failures, one.checkpoints, 100 * one.goodput());
        a.out.write(t);
    }
}

}  // namespace

void register_failures_command(CLI::App& app) {
    auto fa = std::make_shared<FailuresArgs>();
    auto* cmd = app.add_subcommand(
        "failures", "A long run with node failures and checkpoints: goodput against the checkpoint interval");
    cmd->add_option("config", fa->config, "Config JSON whose cluster has a \"storage\" section")->required();
    cmd->add_option("--set", fa->sets, "Override a field: path=value (repeatable)");
    cmd->add_option("--steps", fa->steps, "Useful steps the run must complete")
        ->transform(whole_number(1, std::numeric_limits<long long>::max()))
        ->capture_default_str();
    cmd->add_option("--mtbf-hours", fa->mtbf_hours, "Mean time between failures of one node, hours");
    cmd->add_option("--fail-at-hours", fa->fail_at_hours, "Failures of node 0 at these wall-clock hours")
        ->delimiter(',');
    cmd->add_option("--checkpoint-every", fa->checkpoint_every,
                    "Steps between checkpoints for the timeline (default: the best found)");
    cmd->add_option("--restart-minutes", fa->restart_minutes, "Relaunch time before the checkpoint load (assumed)")
        ->capture_default_str();
    cmd->add_option("--seed", fa->seed, "Seed of the failure draws")
        ->transform(whole_number(0, std::numeric_limits<long long>::max()))
        ->capture_default_str();
    cmd->add_option("--trials", fa->trials, "Runs (seeds) averaged per interval")
        ->transform(whole_number(1, std::numeric_limits<int>::max()))
        ->capture_default_str();
    fa->out.add_options(cmd);  // the timeline of one run
    cmd->callback([fa] { failures(*fa); });
}

}  // namespace dtsim::cli
