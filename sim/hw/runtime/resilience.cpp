#include "dtsim/hw/resilience.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <queue>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace dtsim::hw {

// ------------------------------------------------------------------- random

std::uint64_t SplitMix64::next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

double SplitMix64::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

double SplitMix64::exponential(double mean) { return -mean * std::log1p(-uniform()); }

// ------------------------------------------------------------- the optimum

double young_interval(double checkpoint_cost, double mtbf) { return std::sqrt(2 * checkpoint_cost * mtbf); }

double daly_interval(double d, double m) {
    if (d >= 2 * m) return m;
    return std::sqrt(2 * d * m) * (1 + std::sqrt(d / (2 * m)) / 3 + d / (18 * m)) - d;
}

// ------------------------------------------------------------------ the plan

namespace {

// Time to move `bytes[r]` for every rank: the busiest node's link, or the aggregate.
double transfer_time(const std::vector<double>& bytes, int gpus_per_node, double node_bw, double total_bw) {
    std::vector<double> per_node(bytes.size() / static_cast<std::size_t>(gpus_per_node) + 1, 0.0);
    double total = 0;
    for (std::size_t r = 0; r < bytes.size(); ++r) {
        per_node[r / static_cast<std::size_t>(gpus_per_node)] += bytes[r];
        total += bytes[r];
    }
    const double busiest = *std::max_element(per_node.begin(), per_node.end());
    return std::max(busiest / node_bw, total / total_bw);
}

}  // namespace

CheckpointPlan plan_checkpoint(const Config& c) {
    const Storage& st = c.cluster.storage;
    if (!st.given())
        throw ConfigError(c.file, "$.cluster.storage",
                          "missing: checkpoints need the cluster's storage bandwidth (\"storage\": {\"write_GBps\": "
                          "..., \"read_GBps\": ..., \"per_node_GBps\": ...})");
    // Context-parallel ranks hold the whole weights as data-parallel replicas do: dp x cp replicas.
    const int dp = c.strategy.dp * c.strategy.cp, tp = c.strategy.tp, pp = c.strategy.pp;
    const int gpus = c.gpus();
    const int stage = c.strategy.zero_stage;
    // Parameters one rank's tp x pp shard holds (embeddings spread evenly: a checkpoint-size estimate).
    const double shard_params = c.model.spec.total_params() / (static_cast<double>(tp) * pp);
    const AdamStateBytes adam =
        adam_state_bytes(c.model.spec.dtype, c.strategy.optimizer_dtype, c.strategy.distributed_optimizer == "apex");
    const double weight_bytes = bytes_per_element(c.model.spec.dtype);
    const ModelStateBytes held = zero_model_states(shard_params, stage, dp, 2, adam, weight_bytes);
    const double full_weights = weight_bytes * shard_params;   // the shard's weights
    const double full_optimizer = adam.total() * shard_params; // its master, momentum and variance

    CheckpointPlan p;
    p.gpus_per_node = c.cluster.gpus_per_node;
    p.write_bytes.assign(static_cast<std::size_t>(gpus), 0.0);
    p.read_bytes.assign(static_cast<std::size_t>(gpus), 0.0);
    for (int r = 0; r < gpus; ++r) {
        const int d = (r / tp) % dp;  // make_jobs: rank = ((stage x dp + d) x cp + c) x tp + t
        double w = 0;
        if (stage == 3)
            w = held.weights + held.optimizer;  // its own shard of everything
        else if (stage >= 1)
            w = held.optimizer + (d == 0 ? full_weights : 0);
        else
            w = d == 0 ? full_weights + full_optimizer : 0;
        p.write_bytes[static_cast<std::size_t>(r)] = w;
        // At restart every rank loads what it holds: its weights and its optimizer state.
        p.read_bytes[static_cast<std::size_t>(r)] = (stage == 3 ? held.weights : full_weights) + held.optimizer;
        p.total_bytes += w;
        if (w > 0) ++p.writers;
    }
    p.write_time = transfer_time(p.write_bytes, p.gpus_per_node, st.node_bandwidth, st.write_bandwidth);
    p.read_time = transfer_time(p.read_bytes, p.gpus_per_node, st.node_bandwidth, st.read_bandwidth);
    if (p.writers == 1)
        p.who = "rank 0 writes the whole model and optimizer state (replicas: one rank saves)";
    else if (stage == 0)
        p.who = fmt::format("the first data-parallel replica writes: {} ranks, one tp x pp shard each", p.writers);
    else
        p.who = fmt::format("all {} ranks write their shards in parallel (ZeRO stage {})", p.writers, stage);
    return p;
}

// ------------------------------------------------------------- the long run

namespace {

// The timeline of one run, rank by rank.
class Timeline {
public:
    Timeline(Trace* t, const CheckpointPlan& plan) : t_(t), plan_(&plan) {
        if (!t_) return;
        t_->time_unit = "s";
        t_->memory_unit = "byte";
        t_->ranks.resize(plan.write_bytes.size());
        for (std::size_t r = 0; r < t_->ranks.size(); ++r) t_->ranks[r].rank = static_cast<int>(r);
    }
    void all(const char* op, double start, double end) {
        if (!t_ || end <= start) return;
        for (auto& r : t_->ranks) add(r, op, start, end, 0);
    }
    void checkpoint(double start, double end) {
        if (!t_ || end <= start) return;
        for (std::size_t r = 0; r < t_->ranks.size(); ++r) {
            const double b = plan_->write_bytes[r];
            add(t_->ranks[r], b > 0 ? "checkpoint" : "idle", start, end, b);
        }
    }
    void failure(int node, double start, double end) {
        if (!t_ || end <= start) return;
        for (std::size_t r = 0; r < t_->ranks.size(); ++r) {
            const bool failed = static_cast<int>(r) / plan_->gpus_per_node == node;
            add(t_->ranks[r], failed ? "failure" : "idle", start, end, 0);
        }
    }
    void restart(double start, double end) {
        if (!t_ || end <= start) return;
        for (std::size_t r = 0; r < t_->ranks.size(); ++r)
            add(t_->ranks[r], "restart", start, end, plan_->read_bytes[r]);
    }

private:
    static void add(RankTrace& r, const char* op, double start, double end, double bytes) {
        Event e;
        e.op = OpCode::of(op);
        e.start = start;
        e.duration = end - start;
        e.bytes = bytes;
        r.events.push_back(e);
    }
    Trace* t_;
    const CheckpointPlan* plan_;
};

}  // namespace

LongRunEstimate estimate_long_run(double step_time, const CheckpointPlan& plan, int nodes, const FaultOptions& o) {
    LongRunEstimate e;
    if (o.steps < 1) return e;
    const long long k = std::max<long long>(1, o.checkpoint_every);
    e.segments = o.steps / k + (o.steps % k != 0 ? 1 : 0);
    e.useful = static_cast<double>(o.steps) * step_time;
    const double inf = std::numeric_limits<double>::infinity();
    const double restart = o.restart_overhead + plan.read_time;
    // A segment and its checkpoint write; the last one, without the write.
    const double full = static_cast<double>(std::min(k, o.steps)) * step_time + plan.write_time;
    const double last = static_cast<double>(o.steps - (e.segments - 1) * k) * step_time;
    const double others = static_cast<double>(e.segments - 1);
    if (o.node_mtbf > 0) {
        e.draws = nodes;  // simulate_long_run draws each node's first failure, whatever the run's length
        const double rate = nodes / o.node_mtbf;  // failures of the job per second
        const double again = std::exp(rate * restart);  // e^{R/M}: restarts that a failure starts over
        if (!std::isfinite(rate) || !std::isfinite(again)) {
            e.failures = e.wall = inf;
        } else {
            e.failures = again * ((others > 0 ? others * std::expm1(rate * full) : 0) + std::expm1(rate * last));
            e.wall = e.failures > 0 ? e.failures / rate : others * full + last;  // E[T] = E[N] M
        }
    } else {
        e.wall = others * full + last;
    }
    // A given failure starts a restart and the redo of at most a segment; random failures interrupt
    // them as they interrupt any work: R + full seconds that take M (e^{(R + full)/M} - 1) on average
    // and meet e^{(R + full)/M} - 1 failures (a restart far longer than the MTBF starts over many times).
    const auto given = static_cast<double>(o.fail_at.size());
    if (given > 0) {
        const double rate = o.node_mtbf > 0 ? nodes / o.node_mtbf : 0;
        const double extra = std::expm1(rate * (restart + full));  // failures during one; 0 without random ones
        if (rate == 0) {
            e.failures += given;
            e.wall += given * (restart + full);
        } else if (!std::isfinite(rate) || !std::isfinite(extra)) {
            e.failures = e.wall = inf;
        } else {
            e.failures += given * (1 + extra);
            e.wall += given * extra / rate;
        }
    }
    return e;
}

double timeline_events(const LongRunEstimate& e, std::size_t ranks) {
    // Per rank: train and checkpoint (or idle) per segment; lost, a cut write, failure (or idle) and
    // restart per failure.
    return static_cast<double>(ranks) * (2 * static_cast<double>(e.segments) + 4 * e.failures);
}

namespace {

// The values a long run is made of, whatever its interval: `who` names the caller in the message.
void check_values(const char* who, double step_time, const CheckpointPlan& plan, int nodes, const FaultOptions& o) {
    auto bad = [&](const std::string& what) { throw std::invalid_argument(fmt::format("{}: {}", who, what)); };
    auto time = [&](double v, const char* what) {
        if (!(std::isfinite(v) && v >= 0)) bad(fmt::format("{} must be finite and >= 0, got {}", what, v));
    };
    if (!(std::isfinite(step_time) && step_time > 0))
        bad(fmt::format("the step time must be finite and positive, got {}", step_time));
    time(plan.write_time, "the checkpoint write time");
    time(plan.read_time, "the checkpoint load time");
    time(o.node_mtbf, "the node MTBF");
    time(o.restart_overhead, "the restart overhead");
    for (double f : o.fail_at) time(f, "a failure time");
    if (nodes < 1 || nodes > kMaxNodes) bad(fmt::format("nodes must be 1 to {}, got {}", kMaxNodes, nodes));
    if (plan.gpus_per_node < 1) bad(fmt::format("gpus_per_node must be at least 1, got {}", plan.gpus_per_node));
    if (plan.write_bytes.size() != plan.read_bytes.size())
        bad(fmt::format("the plan writes for {} ranks but reads for {}", plan.write_bytes.size(),
                        plan.read_bytes.size()));
    if (o.steps < 1) bad(fmt::format("steps must be at least 1, got {}", o.steps));
}

void check_inputs(double step_time, const CheckpointPlan& plan, int nodes, const FaultOptions& o, const Trace* trace) {
    auto bad = [](const std::string& what) { throw std::invalid_argument("simulate_long_run: " + what); };
    check_values("simulate_long_run", step_time, plan, nodes, o);
    if (o.checkpoint_every < 1) bad(fmt::format("checkpoint_every must be at least 1, got {}", o.checkpoint_every));
    const LongRunEstimate e = estimate_long_run(step_time, plan, nodes, o);
    if (static_cast<double>(e.segments) > kMaxSegmentsPerRun)
        bad(fmt::format("{} steps checkpointed every {} make {} segments, above the limit of {:g} per run", o.steps,
                        o.checkpoint_every, e.segments, kMaxSegmentsPerRun));
    const double segment = static_cast<double>(std::min(o.checkpoint_every, o.steps)) * step_time + plan.write_time;
    if (!(e.failures <= kMaxExpectedFailuresPerRun))
        bad(fmt::format("the run expects {:.3g} failures (a segment of {:g} s of work and checkpoint against a job "
                        "MTBF of {:g} s, a restart of {:g} s), above the limit of {:g} per run",
                        e.failures, segment, o.node_mtbf / nodes, o.restart_overhead + plan.read_time,
                        kMaxExpectedFailuresPerRun));
    if (!std::isfinite(e.useful) || (o.node_mtbf == 0 && !std::isfinite(e.wall)))
        bad(fmt::format("{} steps of {:g} s with a checkpoint every {} overflow the clock", o.steps, step_time,
                        o.checkpoint_every));
    if (trace && timeline_events(e, plan.write_bytes.size()) > kMaxTimelineEvents)
        bad(fmt::format("its timeline would hold about {:.3g} events, above the limit of {:g}",
                        timeline_events(e, plan.write_bytes.size()), kMaxTimelineEvents));
}

}  // namespace

LongRun simulate_long_run(double step_time, const CheckpointPlan& plan, int nodes, const FaultOptions& o,
                          Trace* trace) {
    check_inputs(step_time, plan, nodes, o, trace);
    // Far more failures than expected cannot happen by chance (the count is close to geometric): stop there.
    const double max_failures = 100 * estimate_long_run(step_time, plan, nodes, o).failures + 1000;
    LongRun out;
    out.checkpoint_every = o.checkpoint_every;
    const double inf = std::numeric_limits<double>::infinity();
    SplitMix64 rng(o.seed);
    auto draw = [&](double from) { return o.node_mtbf > 0 ? from + rng.exponential(o.node_mtbf) : inf; };
    // Each node's next failure, earliest first (the lowest node among equal times): one draw per
    // node in node order, then one for each failed node when it is replaced.
    std::priority_queue<std::pair<double, int>, std::vector<std::pair<double, int>>, std::greater<>> drawn;
    if (o.node_mtbf > 0)
        for (int n = 0; n < nodes; ++n) drawn.emplace(draw(0), n);
    std::vector<double> given = o.fail_at;
    std::sort(given.begin(), given.end(), std::greater<>());  // pop from the back
    // The next failure: (time, node); node -1 when none is to come.
    auto next = [&]() {
        double t = inf;
        int node = -1;
        if (!drawn.empty()) std::tie(t, node) = drawn.top();
        if (!given.empty() && given.back() < t) t = given.back(), node = 0;
        return std::pair{t, node};
    };
    auto consume = [&](double t, int node, double replaced_at) {
        if (!given.empty() && given.back() == t) {
            given.pop_back();
        } else {
            drawn.pop();  // the failure next() gave: the earliest drawn
            drawn.emplace(draw(replaced_at), node);
        }
        if (static_cast<double>(out.failures) > max_failures)
            throw std::runtime_error(fmt::format("simulate_long_run: {} failures, 100 times the {:.3g} expected: "
                                                 "stopped",
                                                 out.failures, (max_failures - 1000) / 100));
    };

    Timeline tl(trace, plan);
    double t = 0;
    long long done = 0, saved = 0;
    double segment = 0;  // start of the work not yet saved
    const long long k = o.checkpoint_every;
    while (done < o.steps) {
        const auto [f, node] = next();  // node -1: none to come (f is infinite)
        // Run steps until the next checkpoint is due, the run ends or the node fails.
        const long long target = std::min(o.steps, saved + k);
        const double steps_end = t + static_cast<double>(target - done) * step_time;
        bool failed = f < steps_end;
        double ckpt_end = steps_end;
        if (!failed) {
            t = steps_end;
            done = target;
            if (done < o.steps) {  // no checkpoint after the last step
                ckpt_end = t + plan.write_time;
                if (f < ckpt_end) {
                    failed = true;
                } else {
                    tl.all("train", segment, t);
                    tl.checkpoint(t, ckpt_end);
                    out.useful += static_cast<double>(done - saved) * step_time;
                    out.checkpointing += plan.write_time;
                    ++out.checkpoints;
                    saved = done;
                    t = ckpt_end;
                    segment = t;
                }
            } else {
                tl.all("train", segment, t);
                out.useful += static_cast<double>(done - saved) * step_time;
            }
        }
        if (!failed) continue;
        // A failure at f: the steps since the last checkpoint are lost (and a write in progress).
        ++out.failures;
        const double work_end = std::min(f, done == target ? t : f);
        if (done == target && f >= t) {  // during the checkpoint write
            tl.all("lost", segment, t);
            tl.checkpoint(t, f);
            out.lost += t - segment;
            out.checkpointing += f - t;
        } else {
            tl.all("lost", segment, work_end);
            out.lost += work_end - segment;
        }
        done = saved;
        // Restart; a failure during it starts it over (the failed node replaced each time).
        double start = f;
        int failed_node = node;
        consume(f, node, f + o.restart_overhead);
        for (;;) {
            const double end = start + o.restart_overhead + plan.read_time;
            const auto [f2, n2] = next();
            if (n2 < 0 || f2 >= end) {
                tl.failure(failed_node, start, start + o.restart_overhead);
                tl.restart(start + o.restart_overhead, end);
                out.restarting += end - start;
                t = end;
                break;
            }
            ++out.failures;
            tl.failure(failed_node, start, std::min(f2, start + o.restart_overhead));
            tl.restart(start + o.restart_overhead, f2);
            out.restarting += f2 - start;
            consume(f2, n2, f2 + o.restart_overhead);
            start = f2;
            failed_node = n2;
        }
        segment = t;
    }
    out.wall = t;
    if (trace) summarize(*trace);
    return out;
}

LongRun mean_long_run(double step_time, const CheckpointPlan& plan, int nodes, FaultOptions o, int trials,
                      const std::function<void()>& after_each) {
    LongRun sum;
    sum.checkpoint_every = o.checkpoint_every;
    const std::uint64_t seed = o.seed;
    for (int i = 0; i < trials; ++i) {
        o.seed = seed + static_cast<std::uint64_t>(i);
        const LongRun r = simulate_long_run(step_time, plan, nodes, o);
        sum.wall += r.wall / trials;
        sum.useful += r.useful / trials;
        sum.lost += r.lost / trials;
        sum.checkpointing += r.checkpointing / trials;
        sum.restarting += r.restarting / trials;
        sum.failures += r.failures;
        sum.checkpoints += r.checkpoints;
        if (after_each) after_each();
    }
    return sum;  // failures and checkpoints: totals over the trials
}

// ------------------------------------------------------------------ the sweep

namespace {

std::string duration(double s) { return duration_text(s); }

// An expected count of failures as the messages print it. The closed form overflows where a step and a
// checkpoint far outlast the time between failures.
std::string failures_text(double f) {
    return std::isfinite(f) ? fmt::format("{:.3g}", f)
                            : fmt::format("more than {:.3g}", std::numeric_limits<double>::max());
}

// Checkpoint intervals to try: 1, then about 12 % apart, up to the whole run.
std::vector<long long> sweep_intervals(long long steps) {
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

// Why no interval can be simulated, and what would make the run feasible: the node MTBF from which the
// best interval expects no more failures than the limit (bisection on the closed form), and the steps
// that fit at this MTBF.
[[noreturn]] void refuse_infeasible(const Sweep& s) {
    const std::vector<SweepRow>& rows = s.rows;
    FaultOptions o = s.options;
    const auto best = std::min_element(rows.begin(), rows.end(), [](const SweepRow& a, const SweepRow& b) {
        return a.expected.failures < b.expected.failures;
    });
    auto fewest = [&](double node_mtbf) {
        FaultOptions x = o;
        x.node_mtbf = node_mtbf;
        double f = std::numeric_limits<double>::infinity();
        for (const SweepRow& r : rows) {
            x.checkpoint_every = r.k;
            f = std::min(f, estimate_long_run(s.step_time, s.plan, s.nodes, x).failures);
        }
        return f;
    };
    std::string remedy;
    auto add = [&](const std::string& r) { remedy += (remedy.empty() ? "" : ", or ") + r; };
    const auto given = static_cast<double>(o.fail_at.size());
    if (given > kMaxExpectedFailuresPerRun)
        add(fmt::format("at most {:g} failures in --fail-at-hours", kMaxExpectedFailuresPerRun));
    if (o.node_mtbf > 0) {
        double lo = o.node_mtbf, hi = o.node_mtbf;
        while (hi < kMaxFailureHours * 3600 && !(fewest(hi) <= kMaxExpectedFailuresPerRun)) hi *= 2;
        if (fewest(hi) <= kMaxExpectedFailuresPerRun) {
            for (int i = 0; i < 60; ++i) {
                const double mid = (lo + hi) / 2;
                (fewest(mid) <= kMaxExpectedFailuresPerRun ? hi : lo) = mid;
            }
            add(fmt::format("a node MTBF of at least {:.3g} h (--mtbf-hours)", hi / 3600));
        }
        // Random failures grow with the run's length at a given interval, and so do the segments the
        // sweep simulates.
        const double per_step = (best->expected.failures - given) / static_cast<double>(o.steps);
        double segments = 0;
        for (const SweepRow& r : rows) segments += static_cast<double>(r.expected.segments);
        const double steps =
            std::floor(std::min((kMaxExpectedFailuresPerRun - given) / per_step,
                                s.limits.work / (s.trials * segments / static_cast<double>(o.steps))));
        if (per_step > 0 && std::isfinite(per_step) && steps >= 1)
            add(fmt::format("at most about {:.0f} steps (--steps)", steps));
    }
    if (remedy.empty()) remedy = "a shorter restart (--restart-minutes) or faster storage";
    const std::string failing = o.node_mtbf > 0
                                    ? fmt::format("the job fails every {} on average", duration(o.node_mtbf / s.nodes))
                                    : fmt::format("{} failures are given", o.fail_at.size());
    throw SweepError(fmt::format(
        "failures: the run cannot finish: {}, a step takes {}, a checkpoint {} and a restart {}, so at best "
        "(checkpointing every {} steps) a run expects {} failures (Daly 2006's closed form), more than the {:g} "
        "this command simulates; it becomes feasible with {}",
        failing, duration(s.step_time), duration(s.plan.write_time),
        duration(o.restart_overhead + s.plan.read_time), best->k, failures_text(best->expected.failures),
        kMaxExpectedFailuresPerRun, remedy));
}

// The timeline of one run at o.checkpoint_every: simulated (at most kMaxExpectedFailuresPerRun failures
// expected) and small enough to keep.
void check_timeline(const Sweep& s, const FaultOptions& o) {
    const LongRunEstimate e = estimate_long_run(s.step_time, s.plan, s.nodes, o);
    if (!(e.failures <= kMaxExpectedFailuresPerRun))
        throw SweepError(fmt::format("failures: the timeline at --checkpoint-every {} expects {} failures, "
                                     "more than the {:g} simulated; give a smaller --checkpoint-every",
                                     o.checkpoint_every, failures_text(e.failures), kMaxExpectedFailuresPerRun));
    const double events = timeline_events(e, s.plan.write_bytes.size());
    const double limit = std::min(s.limits.timeline_events, kMaxTimelineEvents);  // simulate_long_run's own
    if (!(events <= limit))
        throw SweepError(fmt::format("failures: the timeline at --checkpoint-every {} would hold about {:.3g} events "
                                     "({} ranks), above the limit of {:g}; give a larger --checkpoint-every or "
                                     "fewer --steps",
                                     o.checkpoint_every, events, s.plan.write_bytes.size(), limit));
}

}  // namespace

void check_sweep_request(const SweepRequest& r) {
    // NaN is in no range.
    auto in = [](double v, double hi) { return v >= 0 && v <= hi; };
    if (r.steps < 1) throw SweepError(fmt::format("failures: --steps must be at least 1, found {}", r.steps));
    if (r.checkpoint_every < 0)
        throw SweepError(fmt::format("failures: --checkpoint-every must be at least 1, found {}", r.checkpoint_every));
    if (!in(r.mtbf_hours, kMaxFailureHours))
        throw SweepError(fmt::format("failures: --mtbf-hours must be 0 to {:g} hours, found {}", kMaxFailureHours,
                                     r.mtbf_hours));
    for (double h : r.fail_at_hours)
        if (!in(h, kMaxFailureHours))
            throw SweepError(fmt::format("failures: --fail-at-hours must be 0 to {:g} hours each, found {}",
                                         kMaxFailureHours, h));
    if (!in(r.restart_minutes, kMaxRestartMinutes))
        throw SweepError(fmt::format("failures: --restart-minutes must be 0 to {:g} minutes, found {}",
                                     kMaxRestartMinutes, r.restart_minutes));
    if (r.trials < 1) throw SweepError(fmt::format("failures: --trials must be at least 1, found {}", r.trials));
    if (r.mtbf_hours == 0 && r.fail_at_hours.empty())
        throw SweepError("failures: give --mtbf-hours H (per node) and/or --fail-at-hours T1,T2,...");
}

Sweep plan_sweep(const SweepRequest& a, double step_time, const CheckpointPlan& plan, int nodes,
                 const SweepLimits& limits) {
    check_sweep_request(a);
    if (nodes > kMaxNodes)
        throw SweepError(fmt::format("failures: the cluster has {} nodes; the long run draws failures for at most {}",
                                     nodes, kMaxNodes));
    Sweep s;
    s.step_time = step_time;
    s.plan = plan;
    s.nodes = nodes;
    s.limits = limits;
    FaultOptions& o = s.options;
    o.steps = a.steps;
    o.node_mtbf = a.mtbf_hours * 3600;
    for (double h : a.fail_at_hours) o.fail_at.push_back(h * 3600);
    o.restart_overhead = a.restart_minutes * 60;
    o.seed = a.seed;
    s.trials = o.node_mtbf > 0 ? a.trials : 1;
    check_values("plan_sweep", step_time, plan, nodes, o);
    // A run of these steps whose figures overflow (steps x step time) cannot be simulated at any interval.
    if (!std::isfinite(static_cast<double>(o.steps) * step_time))
        throw SweepError(fmt::format("failures: {} steps of {:g} s overflow the clock; give fewer --steps", o.steps,
                                     step_time));

    // What each interval is expected to cost, before anything is simulated: intervals that expect
    // more failures per run than the limit are not simulated; none left, or more work in all than
    // the limit, and the run is refused.
    for (long long k : sweep_intervals(a.steps)) {
        o.checkpoint_every = k;
        SweepRow row{k, estimate_long_run(step_time, plan, nodes, o), std::nullopt};
        if (row.simulated()) {
            // Without random failures the run is its segments, whose wall time must not overflow either.
            if (!std::isfinite(row.expected.wall))
                throw SweepError(fmt::format("failures: {} steps of {:g} s with a checkpoint every {} overflow the "
                                             "clock; give fewer --steps",
                                             o.steps, step_time, k));
            s.work += s.trials * row.expected.work();
        }
        s.rows.push_back(row);
    }
    if (std::none_of(s.rows.begin(), s.rows.end(), [](const SweepRow& r) { return r.simulated(); }))
        refuse_infeasible(s);
    if (!(s.work <= limits.work))
        throw SweepError(fmt::format(
            "failures: {} steps x {} trials over {} checkpoint intervals would simulate about {:.3g} segments and "
            "failures, above the limit of {:g}; give fewer --steps or --trials (at most about {:.0f} trials)",
            a.steps, s.trials, s.rows.size(), s.work, limits.work,
            std::max(1.0, std::floor(s.trials * limits.work / s.work))));
    for (const SweepRow& r : s.rows)
        if (r.simulated() && static_cast<double>(r.expected.segments) > kMaxSegmentsPerRun)
            throw SweepError(fmt::format("failures: {} steps checkpointed every {} make {} segments, above the limit "
                                         "of {:g} per run; give fewer --steps",
                                         a.steps, r.k, r.expected.segments, kMaxSegmentsPerRun));
    if (a.timeline && a.checkpoint_every > 0) {
        o.checkpoint_every = a.checkpoint_every;
        check_timeline(s, o);
    }
    return s;
}

const SweepRow& run_sweep(Sweep& s, const std::function<void(double)>& progress) {
    FaultOptions o = s.options;
    const SweepRow* best = nullptr;
    for (SweepRow& row : s.rows) {
        if (!row.simulated()) continue;
        o.checkpoint_every = row.k;
        row.run = mean_long_run(s.step_time, s.plan, s.nodes, o, s.trials, [&] {
            if (progress) progress(row.expected.work());
        });
        if (!best || row.run->goodput() > best->run->goodput()) best = &row;
    }
    if (!best) throw std::logic_error("run_sweep: the sweep simulates no interval (plan_sweep refuses one)");
    return *best;
}

std::string duration_text(double s) {
    if (s >= 3600) return fmt::format("{:.2f} h", s / 3600);
    if (s >= 60) return fmt::format("{:.1f} min", s / 60);
    if (s >= 0.1 || s == 0) return fmt::format("{:.2f} s", s);
    if (s >= 1e-4) return fmt::format("{:.3g} ms", s * 1e3);
    return fmt::format("{:.3g} us", s * 1e6);
}

FaultOptions timeline_options(const Sweep& s, long long k) {
    FaultOptions o = s.options;
    o.checkpoint_every = k;
    check_timeline(s, o);
    return o;
}

}  // namespace dtsim::hw
