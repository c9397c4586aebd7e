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
#include "dtsim/interrupt.hpp"
#include "dtsim/render.hpp"
#include "dtsim/trace_io.hpp"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
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

// The physical ranges of the real-valued options (number_in rejects anything else): a node MTBF
// and failure times up to 1e7 hours (1,141 years), a relaunch up to a week.
constexpr double kMaxHours = 1e7;
constexpr double kMaxRestartMinutes = 7 * 24 * 60;

// The most loop iterations (a segment of steps or a failure, each; LongRunEstimate::work) the sweep may
// simulate over all its intervals and trials: from a few seconds (segments) to about half a minute
// (failures on a cluster of a hundred nodes) on one core. The default 10,000 steps x 100 trials is
// about 4e6; the 200,000-step example of docs/stragglers-and-failures.md about 8e7.
constexpr double kMaxSweepWork = 5e8;

std::string duration(double s) {
    if (s >= 3600) return fmt::format("{:.2f} h", s / 3600);
    if (s >= 60) return fmt::format("{:.1f} min", s / 60);
    return fmt::format("{:.2f} s", s);
}

// Checkpoint intervals to try: 1, then about 12 % apart, up to the whole run.
std::vector<long long> intervals(long long steps) {
    std::vector<long long> ks;
    double k = 1;
    while (k <= static_cast<double>(steps)) {
        const long long ki = std::llround(k);
        if (ks.empty() || ki != ks.back()) ks.push_back(ki);
        k *= 1.12;
    }
    if (ks.back() != steps) ks.push_back(steps);
    return ks;
}

// Progress of a long sweep, shown on standard output when it is a terminal and the sweep has taken
// more than a second (never on a pipe or a file), and erased before the table prints.
class Progress {
public:
    explicit Progress(double total) : total_(total), terminal_(isatty(fileno(stdout)) != 0) {}
    void add(double work) {
        done_ += work;
        if (!terminal_) return;
        const auto now = Clock::now();
        if (now - start_ < std::chrono::seconds(1) || now - shown_at_ < std::chrono::milliseconds(200)) return;
        shown_at_ = now;
        shown_ = true;
        fmt::print("\rsimulating the long runs: {:3.0f} %", std::min(100.0, 100 * done_ / total_));
        std::fflush(stdout);
    }
    void clear() {
        if (!shown_) return;
        fmt::print("\r\033[K");
        std::fflush(stdout);
        shown_ = false;
    }

private:
    using Clock = std::chrono::steady_clock;
    double total_, done_ = 0;
    bool terminal_, shown_ = false;
    Clock::time_point start_ = Clock::now(), shown_at_ = start_;
};

// An interval of the sweep: simulated (the mean over the trials), or not, with what the closed form expects.
struct Row {
    long long k = 0;
    hw::LongRunEstimate expected;
    std::optional<hw::LongRun> run;  // absent: not simulated (hw::kMaxExpectedFailuresPerRun)
};

// Why no interval can be simulated, and what would make the run feasible: the node MTBF from which the
// best interval expects no more failures than the limit (bisection on the closed form), and the steps
// that fit at this MTBF.
[[noreturn]] void refuse_infeasible(const std::vector<Row>& rows, double step, const hw::CheckpointPlan& plan,
                                    int nodes, hw::FaultOptions o, int trials) {
    const auto best = std::min_element(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
        return a.expected.failures < b.expected.failures;
    });
    auto fewest = [&](double node_mtbf) {
        hw::FaultOptions x = o;
        x.node_mtbf = node_mtbf;
        double f = std::numeric_limits<double>::infinity();
        for (const Row& r : rows) {
            x.checkpoint_every = r.k;
            f = std::min(f, hw::estimate_long_run(step, plan, nodes, x).failures);
        }
        return f;
    };
    std::string remedy;
    auto add = [&](const std::string& r) { remedy += (remedy.empty() ? "" : ", or ") + r; };
    const auto given = static_cast<double>(o.fail_at.size());
    if (given > hw::kMaxExpectedFailuresPerRun)
        add(fmt::format("at most {:g} failures in --fail-at-hours", hw::kMaxExpectedFailuresPerRun));
    if (o.node_mtbf > 0) {
        double lo = o.node_mtbf, hi = o.node_mtbf;
        while (hi < kMaxHours * 3600 && !(fewest(hi) <= hw::kMaxExpectedFailuresPerRun)) hi *= 2;
        if (fewest(hi) <= hw::kMaxExpectedFailuresPerRun) {
            for (int i = 0; i < 60; ++i) {
                const double mid = (lo + hi) / 2;
                (fewest(mid) <= hw::kMaxExpectedFailuresPerRun ? hi : lo) = mid;
            }
            add(fmt::format("a node MTBF of at least {:.3g} h (--mtbf-hours)", hi / 3600));
        }
        // Random failures grow with the run's length at a given interval, and so do the segments the
        // sweep simulates.
        const double per_step = (best->expected.failures - given) / static_cast<double>(o.steps);
        double segments = 0;
        for (const Row& r : rows) segments += static_cast<double>(r.expected.segments);
        const double steps =
            std::floor(std::min((hw::kMaxExpectedFailuresPerRun - given) / per_step,
                                kMaxSweepWork / (trials * segments / static_cast<double>(o.steps))));
        if (per_step > 0 && std::isfinite(per_step) && steps >= 1)
            add(fmt::format("at most about {:.0f} steps (--steps)", steps));
    }
    if (remedy.empty()) remedy = "a shorter restart (--restart-minutes) or faster storage";
    o.checkpoint_every = best->k;
    const std::string failing = o.node_mtbf > 0
                                    ? fmt::format("the job fails every {} on average", duration(o.node_mtbf / nodes))
                                    : fmt::format("{} failures are given", o.fail_at.size());
    throw UsageError(fmt::format(
        "failures: the run cannot finish: {}, a step takes {}, a checkpoint {} and a restart {}, so at best "
        "(checkpointing every {} steps) a run expects {:.3g} failures (Daly 2006's closed form), more than the {:g} "
        "this command simulates; it becomes feasible with {}",
        failing, duration(step), duration(plan.write_time), duration(o.restart_overhead + plan.read_time), best->k,
        best->expected.failures, hw::kMaxExpectedFailuresPerRun, remedy));
}

void check_timeline(const hw::FaultOptions& o, double step, const hw::CheckpointPlan& plan, int nodes) {
    const double events = hw::timeline_events(hw::estimate_long_run(step, plan, nodes, o), plan.write_bytes.size());
    if (events > hw::kMaxTimelineEvents)
        throw UsageError(fmt::format("failures: the timeline at --checkpoint-every {} would hold about {:.3g} events "
                                     "({} ranks), above the limit of {:g}; give a larger --checkpoint-every or "
                                     "fewer --steps",
                                     o.checkpoint_every, events, plan.write_bytes.size(), hw::kMaxTimelineEvents));
}

void failures(const FailuresArgs& a) {
    if (a.mtbf_hours == 0 && a.fail_at_hours.empty())
        throw UsageError("failures: give --mtbf-hours H (per node) and/or --fail-at-hours T1,T2,...");

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
    if (nodes > hw::kMaxNodes)
        throw UsageError(fmt::format("failures: the cluster has {} nodes; the long run draws failures for at most {}",
                                     nodes, hw::kMaxNodes));

    hw::FaultOptions o;
    o.steps = a.steps;
    o.node_mtbf = a.mtbf_hours * 3600;
    for (double h : a.fail_at_hours) o.fail_at.push_back(h * 3600);
    o.restart_overhead = a.restart_minutes * 60;
    o.seed = a.seed;
    const int trials = o.node_mtbf > 0 ? a.trials : 1;

    const hw::RunReport r = hw::simulate(c, {.keep_trace = false}).report;
    const double step = r.step_time;
    if (!(step > 0)) throw std::runtime_error(fmt::format("{}: the simulated step takes no time", c.name));
    const double restart = o.restart_overhead + plan.read_time;

    // What each interval is expected to cost, before anything is simulated: intervals that expect
    // more failures per run than the limit are not simulated; none left, or more work in all than
    // the limit, and the run is refused.
    std::vector<Row> rows;
    double work = 0;
    for (long long k : intervals(a.steps)) {
        o.checkpoint_every = k;
        Row row{k, hw::estimate_long_run(step, plan, nodes, o), std::nullopt};
        if (row.expected.failures <= hw::kMaxExpectedFailuresPerRun) work += trials * row.expected.work();
        rows.push_back(row);
    }
    const auto simulated = [](const Row& row) { return row.expected.failures <= hw::kMaxExpectedFailuresPerRun; };
    if (std::none_of(rows.begin(), rows.end(), simulated)) refuse_infeasible(rows, step, plan, nodes, o, trials);
    if (work > kMaxSweepWork)
        throw UsageError(fmt::format(
            "failures: {} steps x {} trials over {} checkpoint intervals would simulate about {:.3g} segments and "
            "failures, above the limit of {:g}; give fewer --steps or --trials (at most about {:.0f} trials)",
            a.steps, trials, rows.size(), work, kMaxSweepWork,
            std::max(1.0, std::floor(trials * kMaxSweepWork / work))));
    if (a.out.any() && a.checkpoint_every > 0) {
        o.checkpoint_every = a.checkpoint_every;
        const hw::LongRunEstimate e = hw::estimate_long_run(step, plan, nodes, o);
        if (!(e.failures <= hw::kMaxExpectedFailuresPerRun))
            throw UsageError(fmt::format("failures: the timeline at --checkpoint-every {} expects {:.3g} failures, "
                                         "more than the {:g} simulated; give a smaller --checkpoint-every",
                                         a.checkpoint_every, e.failures, hw::kMaxExpectedFailuresPerRun));
        check_timeline(o, step, plan, nodes);
    }

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
    auto print_row = [&](const Row& row, const char* mark) {
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
    Progress progress(work);
    const Row* best = nullptr;
    std::size_t done = 0;
    try {
        for (Row& row : rows) {
            if (!simulated(row)) continue;
            o.checkpoint_every = row.k;
            row.run = hw::mean_long_run(step, plan, nodes, o, trials, [&] {
                progress.add(row.expected.work());
                check_interrupt();  // a trial at a time
            });
            ++done;
            if (!best || row.run->goodput() > best->run->goodput()) best = &row;
        }
    } catch (const Interrupted&) {
        // The intervals whose trials all ran, each row as it would be in the table.
        progress.clear();
        if (done > 0) {
            print_header();
            for (const Row& row : rows)
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
    const auto skipped = std::count_if(rows.begin(), rows.end(), [&](const Row& row) { return !simulated(row); });
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
        o.checkpoint_every = a.checkpoint_every > 0 ? a.checkpoint_every : b.checkpoint_every;
        o.seed = a.seed;
        check_timeline(o, step, plan, nodes);
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
