// Faults and checkpoints: what each strategy writes, the long run against
// closed forms, and the best simulated interval against Young/Daly.
#include "dtsim/hw/resilience.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <set>
#include <string>

using namespace dtsim;
using namespace dtsim::hw;
using nlohmann::json;

namespace {

// 2 nodes x 8 GPUs, a 1B-ish model, storage 10 GB/s per node and 15 GB/s in all.
json doc(const std::string& strategy, int dp, int tp = 1, int pp = 1) {
    json d = json::parse(R"({
      "cluster": {"name": "c", "gpu": {"peak_tflops": {"bf16": 1000}, "hbm_GiB": 80, "hbm_TBps": 3},
                  "gpus_per_node": 8, "nodes": 2,
                  "links": {"intra_node": {"bandwidth_GBps": 300, "hop_latency_us": 5},
                            "inter_node": {"bandwidth_GBps": 40, "hop_latency_us": 5}},
                  "storage": {"write_GBps": 15, "read_GBps": 30, "per_node_GBps": 10}},
      "model": {"name": "m", "layers": 8, "hidden": 2048, "heads": 16, "seq": 1024, "vocab": 32000},
      "training": {"global_batch": 64, "micro_batch": 1},
      "strategy": {}
    })");
    d["strategy"] = {{"name", strategy}, {"dp", dp}, {"tp", tp}, {"pp", pp}};
    return d;
}

Config config(const json& d) { return parse_config(d, "r.json"); }

bool near(double a, double b, double rel = 1e-9) { return std::abs(a - b) <= rel * std::max(1.0, std::abs(b)); }

}  // namespace

TEST_CASE("splitmix64 gives the reference sequence, and exponential draws have the mean asked for") {
    SplitMix64 g(0);
    CHECK(g.next() == 0xE220A8397B1DCDAFULL);  // Vigna's splitmix64.c, seeded with 0
    CHECK(g.next() == 0x6E789E6AA1B965F4ULL);
    SplitMix64 e(7);
    double sum = 0;
    const int n = 200000;
    for (int i = 0; i < n; ++i) sum += e.exponential(3.0);
    CHECK(std::abs(sum / n - 3.0) < 0.03);  // standard error 3/sqrt(n) = 0.0067
}

TEST_CASE("Young and Daly intervals") {
    CHECK(near(young_interval(50, 3600 * 10), std::sqrt(2 * 50 * 36000.0)));
    const double d = 50, m = 36000;
    CHECK(near(daly_interval(d, m), std::sqrt(2 * d * m) * (1 + std::sqrt(d / (2 * m)) / 3 + d / (18 * m)) - d));
    CHECK(daly_interval(100, 40) == 40);  // d >= 2M: checkpoint every MTBF
}

TEST_CASE("durations print in a unit that shows them") {
    CHECK(duration_text(3 * 3600.0 + 360) == "3.10 h");
    CHECK(duration_text(750) == "12.5 min");
    CHECK(duration_text(2.25) == "2.25 s");
    CHECK(duration_text(0.1) == "0.10 s");
    CHECK(duration_text(0.0125) == "12.5 ms");
    CHECK(duration_text(1.8e-6) == "1.8 us");
    CHECK(duration_text(0) == "0.00 s");
}

TEST_CASE("DDP saves from rank 0 alone; FSDP saves every shard in parallel") {
    const Config ddp = config(doc("ddp", 16));
    const CheckpointPlan a = plan_checkpoint(ddp);
    const double P = ddp.model.spec.total_params();
    CHECK(a.writers == 1);
    CHECK(a.write_bytes[0] == doctest::Approx(14 * P));
    CHECK(a.total_bytes == doctest::Approx(14 * P));
    CHECK(a.write_time == doctest::Approx(14 * P / 10e9));  // one node's 10 GB/s link
    CHECK(a.who.find("rank 0 writes") == 0);

    // FSDP's shards: the fp32 parameter (the master) and the two moments, 12 bytes a parameter.
    const CheckpointPlan f = plan_checkpoint(config(doc("fsdp", 16)));
    CHECK(f.writers == 16);
    CHECK(f.total_bytes == doctest::Approx(12 * P));
    // Two nodes' links would give 20 GB/s; the storage's 15 GB/s in all binds.
    CHECK(f.write_time == doctest::Approx(12 * P / 15e9));
    CHECK(f.write_time < a.write_time);
    // Every rank loads what it holds: DDP a full replica each (16 x 14P at 30 GB/s, 10 per node binds).
    CHECK(a.read_time == doctest::Approx(8 * 14 * P / 10e9));
    CHECK(f.read_time == doctest::Approx(12 * P / 20e9));
}

TEST_CASE("replicated model-parallel strategies save from the first data-parallel replica") {
    const Config c = config(doc("megatron", 4, 4));  // rank = d x tp + t
    const CheckpointPlan p = plan_checkpoint(c);
    CHECK(p.writers == 4);
    for (int r = 0; r < 16; ++r) CHECK((p.write_bytes[static_cast<std::size_t>(r)] > 0) == (r < 4));
    CHECK(p.total_bytes == doctest::Approx(14 * c.model.spec.total_params()));
}

TEST_CASE("a cluster without storage cannot checkpoint, and the error names the place") {
    json d = doc("ddp", 16);
    d["cluster"].erase("storage");
    CHECK_THROWS_WITH_AS(plan_checkpoint(config(d)),
                         doctest::Contains("r.json: $.cluster.storage: missing: checkpoints need the cluster's storage"),
                         ConfigError);
    d = doc("ddp", 16);
    d["cluster"]["storage"]["per_node_GB"] = 1;
    CHECK_THROWS_WITH_AS(config(d), "r.json: $.cluster.storage.per_node_GB: unknown key \"per_node_GB\"; did you mean "
                                    "\"per_node_GBps\"?",
                         ConfigError);
    d = doc("ddp", 16);
    d["cluster"]["storage"]["write_GBps"] = 0;
    CHECK_THROWS_WITH_AS(config(d), "r.json: $.cluster.storage.write_GBps: expected a positive number, found 0",
                         ConfigError);
}

TEST_CASE("without failures the run is steps plus one checkpoint per interval (none after the last step)") {
    CheckpointPlan p;
    p.write_bytes = p.read_bytes = {1, 1};
    p.gpus_per_node = 1;
    p.write_time = 5;
    p.read_time = 7;
    FaultOptions o;
    o.steps = 1000;
    o.checkpoint_every = 300;  // checkpoints after 300, 600 and 900
    const LongRun r = simulate_long_run(2.0, p, 2, o);
    CHECK(r.failures == 0);
    CHECK(r.checkpoints == 3);
    CHECK(r.wall == doctest::Approx(2000 + 3 * 5));
    CHECK(r.useful == doctest::Approx(2000));
    CHECK(r.goodput() == doctest::Approx(2000.0 / 2015));
}

TEST_CASE("a failure loses the work since the last checkpoint and costs a restart") {
    CheckpointPlan p;
    p.write_bytes = p.read_bytes = {1, 1};
    p.gpus_per_node = 1;
    p.write_time = 5;
    p.read_time = 7;
    FaultOptions o;
    o.steps = 1000;
    o.checkpoint_every = 300;
    o.restart_overhead = 60;
    o.fail_at = {700};  // checkpoint done at 605 (step 300); steps 300..347 and part of 348 lost
    Trace t;
    const LongRun r = simulate_long_run(2.0, p, 2, o, &t);
    CHECK(r.failures == 1);
    CHECK(r.lost == doctest::Approx(700 - 605));
    CHECK(r.restarting == doctest::Approx(67));
    CHECK(r.wall == doctest::Approx(2000 + 3 * 5 + 95 + 67));
    // The timeline shows it: every op, the failed node's ranks distinct from the others'.
    std::set<std::string> ops0, ops1;
    for (const auto& e : t.ranks[0].events) ops0.insert(std::string(e.op.name()));
    for (const auto& e : t.ranks[1].events) ops1.insert(std::string(e.op.name()));
    CHECK(ops0 == std::set<std::string>{"train", "checkpoint", "lost", "failure", "restart"});
    CHECK(ops1 == std::set<std::string>{"train", "checkpoint", "lost", "idle", "restart"});
    CHECK(t.summary.makespan == doctest::Approx(r.wall));
}

TEST_CASE("a failure during a checkpoint write loses the write too") {
    CheckpointPlan p;
    p.write_bytes = {1, 0};
    p.read_bytes = {1, 1};
    p.gpus_per_node = 1;
    p.write_time = 50;
    FaultOptions o;
    o.steps = 100;
    o.checkpoint_every = 50;
    o.restart_overhead = 10;
    o.fail_at = {120};  // steps end at 100, the write would end at 150
    const LongRun r = simulate_long_run(2.0, p, 2, o);
    CHECK(r.lost == doctest::Approx(100));
    CHECK(r.checkpointing == doctest::Approx(20 + 50));  // the cut write, then the one that completes
    CHECK(r.wall == doctest::Approx(120 + 10 + 100 + 50 + 100));
}

TEST_CASE("the same seed gives the same run") {
    CheckpointPlan p;
    p.write_bytes = p.read_bytes = {1, 1, 1, 1};
    p.gpus_per_node = 1;
    p.write_time = 30;
    FaultOptions o;
    o.steps = 100000;
    o.checkpoint_every = 200;
    o.node_mtbf = 4 * 24 * 3600.0;
    o.seed = 42;
    const LongRun a = simulate_long_run(1.0, p, 4, o), b = simulate_long_run(1.0, p, 4, o);
    CHECK(a.failures > 0);
    CHECK(a.wall == b.wall);
    CHECK(a.failures == b.failures);
}

TEST_CASE("the best simulated interval is near Young's optimum") {
    // C = 30 s, job MTBF = 24 h / 4 nodes = 6 h: Young = sqrt(2 x 30 x 21600) = 1138 s.
    CheckpointPlan p;
    p.write_bytes = p.read_bytes = {1, 1, 1, 1};
    p.gpus_per_node = 1;
    p.write_time = 30;
    FaultOptions o;
    o.steps = 500000;  // 139 h of steps: about 23 failures per run
    o.node_mtbf = 24 * 3600.0;
    o.restart_overhead = 300;
    double best = 0, best_goodput = 0;
    for (int k = 200; k <= 6000; k = k * 23 / 20) {
        o.checkpoint_every = k;
        const double g = mean_long_run(1.0, p, 4, o, 20).goodput();
        if (g > best_goodput) best_goodput = g, best = k;
    }
    const double young = young_interval(30, 6 * 3600.0);
    CAPTURE(best);
    CAPTURE(young);
    CHECK(best > 0.6 * young);
    CHECK(best < 1.6 * young);
    // First-order waste at the optimum: C/tau + tau/(2M) + R/M (Young; Daly 2006 eq. 9).
    const double waste = 30 / young + young / (2 * 21600) + 300 / 21600.0;
    CHECK(std::abs((1 - best_goodput) - waste) < 0.02);
}

namespace {

CheckpointPlan two_ranks(double write_time, double read_time) {
    CheckpointPlan p;
    p.write_bytes = p.read_bytes = {1, 1};
    p.gpus_per_node = 1;
    p.write_time = write_time;
    p.read_time = read_time;
    return p;
}

}  // namespace

TEST_CASE("a long run refuses inputs it cannot run, rather than indexing past its nodes or looping") {
    const CheckpointPlan p = two_ranks(5, 7);
    const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
    FaultOptions o;
    o.steps = 2000;
    o.checkpoint_every = 100;
    o.fail_at = {3600};
    // A NaN restart made every restart "fail" with no failure to come: node -1, then a loop without end.
    o.restart_overhead = nan;
    CHECK_THROWS_WITH_AS(simulate_long_run(2.0, p, 2, o),
                         "simulate_long_run: the restart overhead must be finite and >= 0, got nan",
                         std::invalid_argument);
    o.restart_overhead = 600;
    for (double bad : {nan, inf, -1.0}) {
        CAPTURE(bad);
        FaultOptions x = o;
        x.node_mtbf = bad;
        CHECK_THROWS_AS(simulate_long_run(2.0, p, 2, x), std::invalid_argument);
        x = o;
        x.fail_at = {bad};
        CHECK_THROWS_AS(simulate_long_run(2.0, p, 2, x), std::invalid_argument);
        CHECK_THROWS_AS(simulate_long_run(bad, p, 2, o), std::invalid_argument);
        CHECK_THROWS_AS(simulate_long_run(2.0, two_ranks(bad, 7), 2, o), std::invalid_argument);
        CHECK_THROWS_AS(simulate_long_run(2.0, two_ranks(5, bad), 2, o), std::invalid_argument);
    }
    CHECK_THROWS_AS(simulate_long_run(0.0, p, 2, o), std::invalid_argument);
    CHECK_THROWS_AS(simulate_long_run(2.0, p, 0, o), std::invalid_argument);
    FaultOptions x = o;
    x.checkpoint_every = 0;
    CHECK_THROWS_AS(simulate_long_run(2.0, p, 2, x), std::invalid_argument);
    x = o;
    x.steps = 0;
    CHECK_THROWS_AS(simulate_long_run(2.0, p, 2, x), std::invalid_argument);
    CheckpointPlan uneven = p;
    uneven.read_bytes.pop_back();
    CHECK_THROWS_AS(simulate_long_run(2.0, uneven, 2, o), std::invalid_argument);
    // Fixed failures only: a failure during a restart starts it over, and the run ends.
    o.fail_at = {3600, 3601, 3602};
    const LongRun r = simulate_long_run(2.0, p, 2, o);
    CHECK(r.failures == 3);
    CHECK(r.useful == doctest::Approx(4000));
}

TEST_CASE("the expected failures of a long run are Daly's closed form, and the simulation agrees") {
    // Job MTBF M = 4 h / 4 nodes = 1 h; segments of 600 one-second steps and a 30 s write; restart 300 s.
    const double M = 3600, R = 300, w = 630;
    CheckpointPlan p;
    p.write_bytes = p.read_bytes = {1, 1, 1, 1};
    p.gpus_per_node = 1;
    p.write_time = 30;
    FaultOptions o;
    o.steps = 60000;  // 100 segments, the last without a write
    o.checkpoint_every = 600;
    o.node_mtbf = 4 * M;
    o.restart_overhead = R;
    const LongRunEstimate e = estimate_long_run(1.0, p, 4, o);
    CHECK(e.segments == 100);
    const double per_segment = std::exp(R / M) * std::expm1(w / M);
    const double expected = std::exp(R / M) * (99 * std::expm1(w / M) + std::expm1(600 / M));
    CHECK(e.failures == doctest::Approx(expected));
    CHECK(per_segment == doctest::Approx(0.2079).epsilon(0.001));
    CHECK(e.wall == doctest::Approx(expected * M));
    CHECK(e.useful == 60000);
    // 400 runs: the mean failures within 3 % (the count's standard error is about 1 %).
    const LongRun mean = mean_long_run(1.0, p, 4, o, 400);
    CHECK(static_cast<double>(mean.failures) / 400 == doctest::Approx(expected).epsilon(0.03));
    CHECK(mean.wall == doctest::Approx(e.wall).epsilon(0.03));
    // Without random failures a run is its segments; each given failure adds one.
    o.node_mtbf = 0;
    o.fail_at = {1000};
    const LongRunEstimate fixed = estimate_long_run(1.0, p, 4, o);
    CHECK(fixed.failures == 1);
    CHECK(fixed.wall == doctest::Approx(60000 + 99 * 30 + R + w));
}

TEST_CASE("a long run whose work is out of reach is refused before it starts") {
    const CheckpointPlan p = two_ranks(30, 10);
    FaultOptions o;
    o.node_mtbf = 2 * 3600.0;  // the job fails every hour
    o.restart_overhead = 600;
    // Checkpointing once in a run of 100 h: e^100 failures expected.
    o.steps = 360000;
    o.checkpoint_every = 360000;
    CHECK_THROWS_WITH_AS(simulate_long_run(1.0, p, 2, o), doctest::Contains("failures (a segment of"),
                         std::invalid_argument);
    // A restart far longer than the MTBF never completes.
    o.checkpoint_every = 100;
    o.restart_overhead = 100 * 3600.0;
    CHECK_THROWS_WITH_AS(simulate_long_run(1.0, p, 2, o), doctest::Contains("above the limit of 100000 per run"),
                         std::invalid_argument);
    // Too many segments, and a timeline too large to keep.
    o = FaultOptions{};
    o.steps = 1000000000000LL;
    o.checkpoint_every = 1;
    CHECK_THROWS_WITH_AS(simulate_long_run(1.0, p, 2, o), doctest::Contains("segments, above the limit of 1e+09"),
                         std::invalid_argument);
    o.steps = 20000000;
    o.checkpoint_every = 1;
    Trace t;
    CHECK_THROWS_WITH_AS(simulate_long_run(1.0, p, 2, o, &t), doctest::Contains("its timeline would hold about"),
                         std::invalid_argument);
    CHECK(t.ranks.empty());
    // Within the limits it runs, and mean_long_run reports each trial.
    o.steps = 10000;
    o.checkpoint_every = 100;
    o.node_mtbf = 200 * 3600.0;
    int trials = 0;
    (void)mean_long_run(1.0, p, 2, o, 7, [&] { ++trials; });
    CHECK(trials == 7);
}

TEST_CASE("a sweep's parameters out of their ranges are refused, NaN among them") {
    const CheckpointPlan p = two_ranks(30, 10);
    const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
    SweepRequest ok;
    ok.steps = 2000;
    ok.mtbf_hours = 200;
    ok.trials = 2;
    CHECK_NOTHROW(check_sweep_request(ok));
    auto refused = [&](SweepRequest r, const std::string& message) {
        CAPTURE(message);
        CHECK_THROWS_WITH_AS(check_sweep_request(r), doctest::Contains(message.c_str()), SweepError);
        CHECK_THROWS_AS(plan_sweep(r, 1.0, p, 2), SweepError);
    };
    for (double bad : {nan, inf, -1.0, 1e7 + 1}) {
        CAPTURE(bad);
        SweepRequest r = ok;
        r.mtbf_hours = bad;
        refused(r, "failures: --mtbf-hours must be 0 to 1e+07 hours");
        r = ok;
        r.fail_at_hours = {1, bad};
        refused(r, "failures: --fail-at-hours must be 0 to 1e+07 hours each");
        r = ok;
        r.restart_minutes = bad;
        refused(r, "failures: --restart-minutes must be 0 to 10080 minutes");
    }
    SweepRequest r = ok;
    r.steps = 0;
    refused(r, "failures: --steps must be at least 1, found 0");
    r = ok;
    r.trials = 0;
    refused(r, "failures: --trials must be at least 1, found 0");
    r = ok;
    r.checkpoint_every = -1;
    refused(r, "failures: --checkpoint-every must be at least 1, found -1");
    r = ok;
    r.mtbf_hours = 0;
    refused(r, "failures: give --mtbf-hours H (per node) and/or --fail-at-hours T1,T2,...");
    // What the command never makes: a step time or a plan the long run cannot use.
    CHECK_THROWS_AS(plan_sweep(ok, nan, p, 2), std::invalid_argument);
    CHECK_THROWS_AS(plan_sweep(ok, 1.0, two_ranks(inf, 10), 2), std::invalid_argument);
    CHECK_THROWS_WITH_AS(plan_sweep(ok, 1.0, p, kMaxNodes + 1), doctest::Contains("the cluster has 1048577 nodes"),
                         SweepError);
    // Figures that overflow are refused, not simulated.
    r = ok;
    r.mtbf_hours = 0;
    r.fail_at_hours = {1};
    CHECK_THROWS_WITH_AS(plan_sweep(r, 1e307, p, 2), doctest::Contains("overflow the clock"), SweepError);
    CHECK_THROWS_WITH_AS(plan_sweep(r, 1.0, two_ranks(1e306, 10), 2), doctest::Contains("overflow the clock"),
                         SweepError);
}

TEST_CASE("a sweep runs every interval it plans to, and its best is the highest goodput") {
    const CheckpointPlan p = two_ranks(30, 10);
    SweepRequest r;
    r.steps = 2000;
    r.mtbf_hours = 20;
    r.trials = 3;
    r.timeline = true;
    r.checkpoint_every = 50;
    Sweep s = plan_sweep(r, 1.0, p, 2);
    double done = 0;
    const SweepRow& best = run_sweep(s, [&](double work) { done += work; });
    CHECK(done == doctest::Approx(s.work));
    for (const SweepRow& row : s.rows) {
        CHECK(row.run.has_value());
        CHECK(row.run->goodput() <= best.run->goodput());
    }
    // The same figures as mean_long_run gives at the best interval.
    FaultOptions o = s.options;
    o.checkpoint_every = best.k;
    CHECK(mean_long_run(1.0, p, 2, o, 3).wall == best.run->wall);
    const FaultOptions t = timeline_options(s, 50);
    CHECK(t.checkpoint_every == 50);
    CHECK(t.seed == 1);
    Trace trace;
    CHECK_NOTHROW((void)simulate_long_run(1.0, p, 2, t, &trace));
    SweepLimits tight;
    tight.timeline_events = 10;
    CHECK_THROWS_WITH_AS(plan_sweep(r, 1.0, p, 2, tight), doctest::Contains("above the limit of 10"), SweepError);
}

// A run draws the first failure of every node before its first step, which the sweep's work (segments
// and failures) did not count: 10 steps at a node MTBF of 1e7 h on 1,048,576 nodes, 100 trials of 10
// intervals, counted about 6,000 units of work and drew 1e9 failures, minutes of work (found by the
// failures fuzz target).
TEST_CASE("a sweep's work counts the draw of each node's first failure") {
    const CheckpointPlan p = two_ranks(30, 10);
    FaultOptions o;
    o.steps = 10;
    o.checkpoint_every = 10;
    o.node_mtbf = 1e7 * 3600;
    const LongRunEstimate e = estimate_long_run(1.0, p, kMaxNodes, o);
    CHECK(e.draws == kMaxNodes);
    CHECK(e.work() == doctest::Approx(static_cast<double>(e.segments) + e.failures + kMaxNodes));
    o.node_mtbf = 0;
    CHECK(estimate_long_run(1.0, p, kMaxNodes, o).draws == 0);
    SweepRequest r;
    r.steps = 10;
    r.mtbf_hours = 1e7;
    r.trials = 100;
    CHECK_THROWS_WITH_AS(plan_sweep(r, 1.0, p, kMaxNodes), doctest::Contains("above the limit of 5e+08"), SweepError);
    r.trials = 1;
    CHECK(plan_sweep(r, 1.0, p, 1000).work < 1e5);
}

// A given failure's restart was counted as one failure and R seconds, as without random failures: with
// a restart of 100 min against a job MTBF of 10.5 min it starts over about e^9.5 = 13,000 times, and the
// run stopped with "14315 failures, 100 times the 133 expected" (found by the failures fuzz target).
TEST_CASE("random failures interrupt the restart after a given failure, and the estimate counts them") {
    CheckpointPlan p = two_ranks(0, 10);
    FaultOptions o;
    o.steps = 3;
    o.checkpoint_every = 1;
    o.node_mtbf = 20 * 3600.0;  // 114 nodes: the job fails every 631 s
    o.restart_overhead = 6000;
    o.fail_at = {0, 0};
    const LongRunEstimate e = estimate_long_run(2.0, p, 114, o);
    const double M = o.node_mtbf / 114, R = 6010;
    CHECK(e.failures > std::exp(R / M));
    LongRun r;
    CHECK_NOTHROW(r = simulate_long_run(2.0, p, 114, o));
    CHECK(static_cast<double>(r.failures) < e.failures * 3);
    // A restart twice the job's MTBF (100 nodes, so that the node replaced during a relaunch, which
    // cannot fail again before it is back, is a small part of the job): e^2 - 1 more failures per given
    // failure, as the simulation has them.
    o.node_mtbf = 100 * 1000.0;
    o.restart_overhead = 1990;
    o.steps = 1;
    o.fail_at = {0};
    const LongRunEstimate two = estimate_long_run(1.0, p, 100, o);
    const double expected = std::exp((2000 + 1.0) / 1000) + std::exp(2000 / 1000.0) * std::expm1(1 / 1000.0);
    CHECK(two.failures == doctest::Approx(expected));
    const LongRun mean = mean_long_run(1.0, p, 100, o, 4000);
    CHECK(static_cast<double>(mean.failures) / 4000 == doctest::Approx(two.failures).epsilon(0.06));
}
