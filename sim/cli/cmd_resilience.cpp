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
#include "progress.hpp"

#include "dtsim/hw/config.hpp"
#include "dtsim/hw/resilience.hpp"
#include "dtsim/hw/run.hpp"
#include "dtsim/interrupt.hpp"
#include "dtsim/render.hpp"
#include "dtsim/trace_io.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace dtsim::cli {
namespace {

struct FailuresArgs {
    std::string config;
    std::vector<std::string> sets;
    long long steps = 10000;
    long long checkpoint_every = 0;  // 0: the best of the sweep
    double mtbf_hours = 0;
    std::vector<double> fail_at_hours;
    double restart_minutes = 10;
    std::uint64_t seed = 1;
    int trials = 100;
    TraceOutputs out;
};

using hw::kMaxRestartMinutes;
constexpr double kMaxHours = hw::kMaxFailureHours;

std::string duration(double s) { return hw::duration_text(s); }

void failures(const FailuresArgs& a) {
    hw::SweepRequest request;
    request.steps = a.steps;
    request.checkpoint_every = a.checkpoint_every;
    request.mtbf_hours = a.mtbf_hours;
    request.fail_at_hours = a.fail_at_hours;
    request.restart_minutes = a.restart_minutes;
    request.seed = a.seed;
    request.trials = a.trials;
    request.timeline = a.out.any();
    // The sweep's checks are the library's (dtsim/hw/resilience.hpp); their refusals are usage errors.
    auto usage = [](const hw::SweepError& e) { return UsageError(e.what()); };
    try {
        hw::check_sweep_request(request);
    } catch (const hw::SweepError& e) {
        throw usage(e);
    }

    std::vector<hw::Override> overrides;
    for (const auto& s : hw::parse_settings(a.sets)) {
        if (s.values.size() > 1) throw UsageError(fmt::format("--set {}: failures does not sweep; give one value", s.path));
        overrides.push_back({s.path, s.values.front()});
    }
    if (validate_only()) return;
    const hw::Config c = hw::load_config(a.config, overrides);
    const hw::CheckpointPlan plan = hw::plan_checkpoint(c);
    a.out.check_ranks(static_cast<int>(plan.write_bytes.size()));  // the timeline has a row per rank that saves
    const int nodes = c.cluster.nodes;
    // Before the step is simulated (plan_sweep checks it too).
    if (nodes > hw::kMaxNodes)
        throw UsageError(fmt::format("failures: the cluster has {} nodes; the long run draws failures for at most {}",
                                     nodes, hw::kMaxNodes));

    const hw::RunReport r = hw::simulate(c, {.keep_trace = false}).report;
    const double step = r.step_time;
    if (!(step > 0)) throw std::runtime_error(fmt::format("{}: the simulated step takes no time", c.name));

    // What each interval is expected to cost, before anything is simulated (plan_sweep).
    hw::Sweep sweep;
    try {
        sweep = hw::plan_sweep(request, step, plan, nodes);
    } catch (const hw::SweepError& e) {
        throw usage(e);
    }
    hw::FaultOptions o = sweep.options;
    const int trials = sweep.trials;
    const double restart = o.restart_overhead + plan.read_time;
    std::vector<hw::SweepRow>& rows = sweep.rows;
    const auto simulated = [](const hw::SweepRow& row) { return row.simulated(); };

    fmt::print("{}: {} GPUs on {} node{}, {}, step {} (simulated one step)\n", c.name, c.gpus(), nodes,
               nodes == 1 ? "" : "s", c.strategy.name, duration(step));
    // A step that does not fit still prices the long run, as `dtsim run` still reports it; exit status 3 says so.
    if (r.oom) {
        fmt::print("memory: the step does not fit: rank {} passes {:.2f} GiB per GPU at {} in {}\n", r.oom->rank,
                   r.capacity / (1024.0 * 1024 * 1024), duration(r.oom->time), r.oom->op);
        exit_status() = 3;
    }
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
    std::fflush(stdout);

    // The sweep over k: mean goodput over the trials (the same seeds for every k).
    auto print_header = [] {
        fmt::print("{:>8} {:>11} {:>9} {:>9} {:>10} {:>10} {:>10} {:>9}\n", "every k", "interval", "goodput",
                   "steps/h", "lost", "ckpt", "restart", "failures");
    };
    auto print_row = [&](const hw::SweepRow& row, const char* mark) {
        if (!row.run) {
            fmt::print("{:>8} {:>11}   not simulated: {:.3g} failures expected per run, goodput {:.2g}%\n", row.k,
                       duration(static_cast<double>(row.k) * step), row.expected.failures,
                       100 * row.expected.goodput());
            return;
        }
        const hw::LongRun& lr = *row.run;
        fmt::print("{:>8} {:>11} {:>8.2f}% {:>9.1f} {:>10} {:>10} {:>10} {:>9.2f}{}\n", lr.checkpoint_every,
                   duration(static_cast<double>(lr.checkpoint_every) * step), 100 * lr.goodput(),
                   3600 * static_cast<double>(a.steps) / lr.wall, duration(lr.lost), duration(lr.checkpointing),
                   duration(lr.restarting), static_cast<double>(lr.failures) / trials, mark);
    };
    Progress progress;
    double work_done = 0;
    const hw::SweepRow* best = nullptr;
    try {
        best = &hw::run_sweep(sweep, [&](double work) {
            work_done += work;
            if (progress.due())
                progress.show(fmt::format("simulating the long runs: {:3.0f} %", std::min(100.0, 100 * work_done / sweep.work)));
            check_interrupt();  // a trial at a time
        });
    } catch (const Interrupted&) {
        // The intervals whose trials all ran, each row as it would be in the table (the interrupted
        // interval's run is not yet set).
        progress.clear();
        const auto done = std::count_if(rows.begin(), rows.end(), [](const hw::SweepRow& row) { return row.run.has_value(); });
        if (done > 0) {
            print_header();
            for (const hw::SweepRow& row : rows)
                if (row.run) print_row(row, "");
        }
        fmt::print("(interrupted: {} of {} intervals simulated)\n", done,
                   std::count_if(rows.begin(), rows.end(), simulated));
        throw;
    }
    progress.clear();

    print_header();
    // Print every row near the best and a few either side, so the table stays short.
    const auto at = static_cast<std::size_t>(best - rows.data());
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const bool near = i + 6 >= at && i <= at + 6;
        const bool edge = i == 0 || i + 1 == rows.size() || i % 8 == 0;
        if (near || edge) print_row(rows[i], i == at ? "  <- best" : "");
    }
    const auto skipped = std::count_if(rows.begin(), rows.end(), [&](const hw::SweepRow& row) { return !simulated(row); });
    if (skipped > 0)
        fmt::print("({} of {} intervals not simulated: each expects more than {:g} failures per run; their goodput is "
                   "the closed form's, Daly 2006)\n",
                   skipped, rows.size(), hw::kMaxExpectedFailuresPerRun);

    const hw::LongRun& b = *best->run;
    fmt::print("\nbest: checkpoint every {} steps ({} of work), goodput {:.2f}%, {:.1f} steps/h\n",
               b.checkpoint_every, duration(static_cast<double>(b.checkpoint_every) * step), 100 * b.goodput(),
               3600 * static_cast<double>(a.steps) / b.wall);
    if (o.node_mtbf > 0) {
        const double young = hw::young_interval(plan.write_time, job_mtbf);
        const double daly = hw::daly_interval(plan.write_time, job_mtbf);
        fmt::print("Young (1974): sqrt(2 x {} x {}) = {} = {:.0f} steps\n", duration(plan.write_time),
                   duration(job_mtbf), duration(young), young / step);
        fmt::print("Daly (2006):  {} = {:.0f} steps\n", duration(daly), daly / step);
        fmt::print("simulated best / Young: {:.2f}\n", static_cast<double>(b.checkpoint_every) * step / young);
    }

    if (a.out.any()) {
        try {
            o = hw::timeline_options(sweep, a.checkpoint_every > 0 ? a.checkpoint_every : b.checkpoint_every);
        } catch (const hw::SweepError& e) {
            throw usage(e);
        }
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
    cmd->add_option("--mtbf-hours", fa->mtbf_hours, "Mean time between failures of one node, hours")
        ->check(number_in(0, kMaxHours));
    cmd->add_option("--fail-at-hours", fa->fail_at_hours, "Failures of node 0 at these wall-clock hours")
        ->delimiter(',')
        ->check(number_in(0, kMaxHours));
    cmd->add_option("--checkpoint-every", fa->checkpoint_every,
                    "Steps between checkpoints for the timeline (default: the best found)")
        ->transform(whole_number(1, std::numeric_limits<long long>::max()));
    cmd->add_option("--restart-minutes", fa->restart_minutes, "Relaunch time before the checkpoint load (assumed)")
        ->check(number_in(0, kMaxRestartMinutes))
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
