#include "dtsim/hw/resilience.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

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
    const int dp = c.strategy.dp, tp = c.strategy.tp, pp = c.strategy.pp;
    const int gpus = c.gpus();
    const int stage = c.strategy.zero_stage;
    // Parameters one rank's tp x pp shard holds (embeddings spread evenly: a checkpoint-size estimate).
    const double shard_params = c.model.spec.total_params() / (static_cast<double>(tp) * pp);
    const ModelStateBytes held = zero_model_states(shard_params, stage, dp);
    const double full_weights = 2 * shard_params;      // bf16 weights of the shard
    const double full_optimizer = 12 * shard_params;   // fp32 master, momentum, variance

    CheckpointPlan p;
    p.gpus_per_node = c.cluster.gpus_per_node;
    p.write_bytes.assign(static_cast<std::size_t>(gpus), 0.0);
    p.read_bytes.assign(static_cast<std::size_t>(gpus), 0.0);
    for (int r = 0; r < gpus; ++r) {
        const int d = (r / tp) % dp;  // make_jobs: rank = (stage x dp + d) x tp + t
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

LongRun simulate_long_run(double step_time, const CheckpointPlan& plan, int nodes, const FaultOptions& o,
                          Trace* trace) {
    LongRun out;
    out.checkpoint_every = o.checkpoint_every;
    const double inf = std::numeric_limits<double>::infinity();
    SplitMix64 rng(o.seed);
    auto draw = [&](double from) { return o.node_mtbf > 0 ? from + rng.exponential(o.node_mtbf) : inf; };
    std::vector<double> next_failure(static_cast<std::size_t>(nodes));
    for (auto& f : next_failure) f = draw(0);
    std::vector<double> given = o.fail_at;
    std::sort(given.begin(), given.end(), std::greater<>());  // pop from the back
    // The next failure: (time, node).
    auto next = [&]() {
        double t = inf;
        int node = -1;
        for (int n = 0; n < nodes; ++n)
            if (next_failure[static_cast<std::size_t>(n)] < t) t = next_failure[static_cast<std::size_t>(n)], node = n;
        if (!given.empty() && given.back() < t) t = given.back(), node = 0;
        return std::pair{t, node};
    };
    auto consume = [&](double t, int node, double replaced_at) {
        if (!given.empty() && given.back() == t)
            given.pop_back();
        else
            next_failure[static_cast<std::size_t>(node)] = draw(replaced_at);
    };

    Timeline tl(trace, plan);
    double t = 0;
    long long done = 0, saved = 0;
    double segment = 0;  // start of the work not yet saved
    const long long k = std::max(1, o.checkpoint_every);
    while (done < o.steps) {
        const auto [f, node] = next();
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
            if (f2 >= end) {
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

LongRun mean_long_run(double step_time, const CheckpointPlan& plan, int nodes, FaultOptions o, int trials) {
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
    }
    return sum;  // failures and checkpoints: totals over the trials
}

}  // namespace dtsim::hw
