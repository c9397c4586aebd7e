// Stragglers: a slow GPU stretches every collective it joins, per-operation
// jitter is seeded and keyed by (rank, operation), and the critical path names
// the rank that set the step time.
#include "dtsim/hw/run.hpp"
#include "dtsim/hw/stragglers.hpp"
#include "dtsim/hw/world.hpp"
#include "dtsim/trace_io.hpp"
#include "fixtures.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

using namespace dtsim;
using namespace dtsim::hw;
using json = nlohmann::json;
using namespace dtsim::hw::test;

namespace {

json ddp(int nodes, bool overlap) {
    return {{"cluster", realistic_cluster(nodes)},
            {"model", small_model(8, 32000)},
            {"training", {{"global_batch", 16 * nodes}, {"micro_batch", 1}}},
            {"strategy", {{"name", "ddp"}, {"dp", 8 * nodes}, {"overlap", overlap}}}};
}

RunReport run(const json& doc) { return simulate(parse_config(doc, "test.json"), {.keep_trace = false}).report; }

std::string trace_text(const json& doc) {
    const RunResult r = simulate(parse_config(doc, "test.json"), {.keep_trace = true});
    std::ostringstream os;
    write_trace_json(r.trace, os);
    return os.str();
}

std::string config_error(const json& doc) {
    try {
        (void)parse_config(doc, "test.json");
    } catch (const ConfigError& e) {
        return e.what();
    }
    return "no error";
}


}  // namespace

TEST_CASE("splitmix64 gives the reference generator's outputs") {
    // Vigna's splitmix64.c seeded with 0: the state advances by the golden
    // gamma before each output, so output n is splitmix64(n * gamma) here.
    CHECK(splitmix64(0) == 0xE220A8397B1DCDAFULL);
    CHECK(splitmix64(0x9E3779B97F4A7C15ULL) == 0x6E789E6AA1B965F4ULL);
    CHECK(splitmix64(2 * 0x9E3779B97F4A7C15ULL) == 0x06C45D188009454FULL);
}

TEST_CASE("jitter has mean 1 and the coefficient of variation asked for, for every distribution") {
    // n draws: the sample mean's standard error is cv / sqrt(n), the sample
    // standard deviation's (relative) sqrt((kurtosis - 1) / 4n) <= 0.002 here.
    const int n = 200000;
    for (auto d : {JitterDistribution::lognormal, JitterDistribution::normal, JitterDistribution::uniform})
        for (double cv : {0.02, 0.1, 0.2}) {
            Jitter j{d, cv, Jitter::lognormal_sigma(cv), 42};
            double sum = 0, sum2 = 0, low = 1e9;
            for (int i = 0; i < n; ++i) {
                const double x = j.factor(i % 8, static_cast<std::uint64_t>(i / 8));
                sum += x;
                sum2 += x * x;
                low = std::min(low, x);
            }
            const double mean = sum / n, sd = std::sqrt(sum2 / n - mean * mean);
            CAPTURE(jitter_name(d));
            CAPTURE(cv);
            CHECK(std::abs(mean - 1) < 5 * cv / std::sqrt(n));
            CHECK(sd / cv == doctest::Approx(1).epsilon(0.01));
            CHECK(low > 0);
            if (d == JitterDistribution::uniform) CHECK(low >= 1 - std::sqrt(3.0) * cv);
        }
    // sigma and cv describe the same lognormal.
    CHECK(Jitter::lognormal_cv(Jitter::lognormal_sigma(0.3)) == doctest::Approx(0.3));
}

TEST_CASE("jitter is a function of (seed, rank, operation) only") {
    const Jitter a{JitterDistribution::lognormal, 0.1, Jitter::lognormal_sigma(0.1), 7};
    Jitter b = a;
    b.seed = 8;
    int same_seed_equal = 0, other_seed_equal = 0, other_rank_equal = 0;
    for (std::uint64_t k = 0; k < 1000; ++k) {
        same_seed_equal += a.factor(3, k) == a.factor(3, k);
        other_seed_equal += a.factor(3, k) == b.factor(3, k);
        other_rank_equal += a.factor(3, k) == a.factor(4, k);
    }
    CHECK(same_seed_equal == 1000);
    CHECK(other_seed_equal == 0);
    CHECK(other_rank_equal == 0);

    // On the compute stream: rank r's k-th operation takes base x factor(r, k),
    // whatever the ranks do in between (here the ranks' collectives interleave
    // them differently: rank r computes r + 1 operations before each all-reduce).
    World world(test::small_cluster(1), 4);
    Stragglers s;
    s.jitter = a;
    s.slowdown[1] = 1.5;
    world.set_stragglers(s);
    Group& all = world.everyone();
    world.run([&](Device& gpu) -> Task<> {
        for (int round = 0; round < 3; ++round) {
            for (int i = 0; i <= gpu.rank(); ++i) gpu.compute(hw::ops::forward, i, 0.001);
            co_await gpu.all_reduce(all, 1e6, round);
        }
    });
    const Trace t = world.take_trace();
    for (int r = 0; r < 4; ++r) {
        std::uint64_t k = 0;
        for (const Event& e : t.ranks[static_cast<std::size_t>(r)].events) {
            if (e.op != hw::ops::forward) continue;
            CHECK(e.duration == doctest::Approx(0.001 * (r == 1 ? 1.5 : 1) * a.factor(r, k)).epsilon(1e-12));
            ++k;
        }
        CHECK(k == static_cast<std::uint64_t>(3 * (r + 1)));
        CHECK(world.device(r).compute_ops() == k);
    }
}

TEST_CASE("the same seed gives byte-identical traces; another seed other durations") {
    json doc = ddp(1, true);
    doc["stragglers"] = {{"jitter", {{"distribution", "lognormal"}, {"cv", 0.1}, {"seed", 42}}}};
    const std::string first = trace_text(doc);
    CHECK(first == trace_text(doc));
    const RunReport a = run(doc);
    doc["stragglers"]["jitter"]["seed"] = 43;
    const RunReport b = run(doc);
    CHECK(a.step_time != b.step_time);
    // Jitter of mean 1 over ~thousand operations per rank leaves the compute
    // total within a few cv / sqrt(ops) of the run without it.
    doc.erase("stragglers");
    const RunReport none = run(doc);
    for (const RunReport* r : {&a, &b}) {
        CHECK(r->split.compute / none.split.compute == doctest::Approx(1).epsilon(0.01));
        CHECK(r->step_time > none.step_time);  // every collective waits for the slowest draw
    }
}

TEST_CASE("DDP without overlap: one GPU slower by f takes the step to f x compute + communication") {
    // Without overlap every rank computes its forwards and backwards, then the
    // buckets reduce back to back once the last rank is ready, then each rank
    // steps its optimizer. With rank s slower by f, the buckets start when s
    // finishes its backward, f x its compute before the optimizer; the
    // reduction takes what it took without stragglers; s's optimizer ends the
    // step: step = f x C + comm, C = s's compute and comm = the step without
    // stragglers - C. Every other rank waits (f - 1) x C in all: at the buckets
    // and for s's optimizer at the end.
    const json base = ddp(2, false);
    const RunReport before = run(base);
    for (int slow : {3, 12})
        for (double f : {1.25, 2.0}) {
            CAPTURE(slow);
            CAPTURE(f);
            const double C = before.rank_splits[static_cast<std::size_t>(slow)].compute;
            const double comm = before.step_time - C;
            CHECK(before.rank_splits[static_cast<std::size_t>(slow)].idle == doctest::Approx(0).epsilon(1e-12));
            json doc = base;
            doc["stragglers"]["slowdown"][std::to_string(slow)] = f;
            const RunReport r = run(doc);
            CHECK(r.step_time == doctest::Approx(f * C + comm).epsilon(1e-12));
            CHECK(*r.baseline_step_time == before.step_time);
            for (int i = 0; i < 16; ++i) {
                CAPTURE(i);
                const TimeSplit& s = r.rank_splits[static_cast<std::size_t>(i)];
                const TimeSplit& s0 = before.rank_splits[static_cast<std::size_t>(i)];
                CHECK(s.compute == doctest::Approx(i == slow ? f * s0.compute : s0.compute).epsilon(1e-12));
                CHECK(s.comm == doctest::Approx(s0.comm).epsilon(1e-9));
                CHECK(s.idle == doctest::Approx(s0.idle + (i == slow ? 0 : (f - 1) * C)).epsilon(1e-9));
            }
            // The critical path: f x C on the slow rank, the reduction in transfers.
            CHECK(r.critical_rank == slow);
            CHECK(r.critical_share * r.step_time == doctest::Approx(f * C).epsilon(1e-9));
            CHECK(r.critical_transfers_share * r.step_time == doctest::Approx(comm).epsilon(1e-9));
        }
}

TEST_CASE("a slowdown of the SMs only (slow_memory_bound false) leaves memory-bound time alone") {
    // As above, with the slow rank's compute C split into GEMM time G and
    // memory-bound time M (each operation's HBM bytes at the memory rate):
    // step = f G + M + comm.
    const json base = ddp(1, false);
    const Config c = parse_config(base, "test.json");
    const RunResult before = simulate(c, {.keep_trace = true});
    const int slow = 2;
    const double f = 1.5;
    double M = 0;
    for (const Event& e : before.trace.ranks[slow].events)
        if (e.stream == Stream::compute) M += c.cluster.gpu.memory_seconds(e.bytes);
    const double C = before.report.rank_splits[slow].compute;
    const double comm = before.report.step_time - C;
    CHECK(M > 0.01 * C);  // the optimizer step, norms, the loss: enough to tell the two apart
    json doc = base;
    doc["stragglers"] = {{"slowdown", {{std::to_string(slow), f}}}, {"slow_memory_bound", false}};
    const RunReport r = run(doc);
    CHECK(r.step_time == doctest::Approx(f * (C - M) + M + comm).epsilon(1e-12));
    CHECK(r.rank_splits[slow].compute == doctest::Approx(f * (C - M) + M).epsilon(1e-12));
    CHECK(r.stragglers == "rank 2 x1.50, memory-bound work at full speed");
}

TEST_CASE("DDP with overlap: the slow GPU gates every bucket and the others idle") {
    const json base = ddp(2, true);
    const RunReport before = run(base);
    const double f = 1.5;
    json doc = base;
    doc["stragglers"]["slowdown"]["5"] = f;
    const RunReport r = run(doc);
    // The slow rank's own compute alone takes f x C; with overlap the
    // communication can only hide more of itself behind the longer backward.
    const double C = before.rank_splits[5].compute;
    CHECK(r.step_time >= f * C);
    CHECK(r.step_time <= f * C + (before.step_time - C) + 1e-12);
    CHECK(r.critical_rank == 5);
    // Every other rank waits for it: its idle grows, and with what it waits
    // for transfers that started (exposed communication) it waits at least
    // (f - 1) x C, since the step lasts f x C at least and it computes C.
    for (int i = 0; i < 16; ++i) {
        if (i == 5) continue;
        CAPTURE(i);
        const TimeSplit& s = r.rank_splits[static_cast<std::size_t>(i)];
        const TimeSplit& s0 = before.rank_splits[static_cast<std::size_t>(i)];
        CHECK(s.compute == doctest::Approx(s0.compute).epsilon(1e-12));
        CHECK(s.idle > s0.idle);
        CHECK(s.idle + s.comm >= (f - 1) * C * (1 - 1e-12));
    }
}

TEST_CASE("a slow 1F1B stage is the critical path and sets the pace") {
    // 1F1B with p stages of t per microbatch (forward t/3, backward 2t/3, as
    // the workload prices them) and m microbatches: step = (m + p - 1) t.
    // Stage s slower by f (1.5 < f <= 3): its forward of microbatch 0 starts at
    // s t/3; it runs its p - s warm-up forwards (f t/3 each; Megatron's
    // p - s - 1 warm-up microbatches and the first steady-state forward), and
    // then waits for the gradient of microbatch 0, which comes back
    // (p - s - 1) t after its first forward ends: an idle of
    // (p - s - 1)(t - f t/3). From there it never waits: each later gradient
    // needs (p - s - 1) t of the fast stages, less than its own work between
    // that microbatch's forward and backward, (p - s - 1) f t in the steady
    // state and (p - s - 1) f 2t/3 in the cool-down (hence f > 1.5). So after
    // m f t of work in all, its last gradient crosses the s stages before it
    // (s x 2t/3):
    //   step = s t/3 + m f t + (p - s - 1)(t - f t/3) + s 2t/3
    //        = (p - 1) t + m f t - (p - s - 1) f t/3.
    // The critical path stays on stage s from its first forward to its last
    // backward but for the wait for microbatch 0's gradient: m f t - (p - s - 1) f t/3.
    const int p = 4, m = 8;
    json doc{{"cluster",
              {{"name", "ideal"},
               {"gpu", {{"name", "gpu"}, {"peak_tflops", {{"bf16", 1000}}}, {"hbm_GiB", 80}, {"hbm_TBps", 1e9}}},
               {"gpus_per_node", p},
               {"nodes", 1},
               {"links",
                {{"intra_node", {{"bandwidth_GBps", 1e12}, {"hop_latency_us", 0}}},
                 {"inter_node", {{"bandwidth_GBps", 1e12}, {"hop_latency_us", 0}}}}}}},
             {"model", small_model(2 * p)},
             {"training", {{"global_batch", m}, {"micro_batch", 1}}},
             {"strategy", {{"name", "1f1b"}, {"pp", p}}}};
    const RunReport before = run(doc);
    const double t = before.step_time / (m + p - 1);
    for (int slow = 0; slow < p; ++slow) {
        CAPTURE(slow);
        const double f = 2;
        json d = doc;
        d["stragglers"]["slowdown"][std::to_string(slow)] = f;
        const RunReport r = run(d);
        CHECK(r.step_time == doctest::Approx((p - 1) * t + m * f * t - (p - slow - 1) * f * t / 3).epsilon(1e-6));
        CHECK(r.critical_rank == slow);
        CHECK(r.critical_share * r.step_time == doctest::Approx(m * f * t - (p - slow - 1) * f * t / 3).epsilon(1e-6));
    }
}

TEST_CASE("the critical path follows the last member to arrive") {
    World world(test::small_cluster(1), 4);
    Group& all = world.everyone();
    const double cost = all.cost(Collective::all_reduce, 1e8).seconds;
    // Rank 2 computes 5 ms, then all reduce; then rank 1 computes 7 ms, and all reduce again.
    world.run([&](Device& gpu) -> Task<> {
        gpu.compute(hw::ops::forward, 0, gpu.rank() == 2 ? 0.005 : 0.001);
        co_await gpu.all_reduce(all, 1e8, 0);
        gpu.compute(hw::ops::forward, 1, gpu.rank() == 1 ? 0.007 : 0.002);
        co_await gpu.all_reduce(all, 1e8, 1);
    });
    const CriticalPath path = world.critical_path();
    CHECK(world.step_time() == doctest::Approx(0.005 + cost + 0.007 + cost));
    // The step ends on rank 0 (the lowest of the ranks that end together),
    // which waited for rank 1 (the second all-reduce), which waited for rank 2.
    CHECK(path.jumps == 2);
    CHECK(path.on_rank[0] == 0);
    CHECK(path.on_rank[1] == doctest::Approx(0.007));
    CHECK(path.on_rank[2] == doctest::Approx(0.005));
    CHECK(path.on_rank[3] == 0);
    CHECK(path.transfers == doctest::Approx(2 * cost));
    CHECK(path.rank == 1);
}

TEST_CASE("stragglers in a config: errors name the file, the path, what was expected") {
    auto with = [](json stragglers) {
        json d = ddp(1, true);
        d["stragglers"] = std::move(stragglers);
        return d;
    };
    CHECK(config_error(with({{"slowdonw", {{"3", 1.5}}}})) ==
          "test.json: $.stragglers.slowdonw: unknown key \"slowdonw\"; did you mean \"slowdown\"?");
    CHECK(config_error(with({{"slowdown", {{"8", 1.5}}}})) ==
          "test.json: $.stragglers.slowdown.8: rank 8 is not in this run's 8 GPUs (ranks 0 to 7)");
    CHECK(config_error(with({{"slowdown", {{"x", 1.5}}}})) ==
          "test.json: $.stragglers.slowdown.x: expected a rank or a range of ranks as the key (\"3\", \"8-15\"), found "
          "\"x\"");
    CHECK(config_error(with({{"slowdown", {{"0-3", 1.5}, {"3", 2}}}})) ==
          "test.json: $.stragglers.slowdown.3: rank 3 is already slowed by \"0-3\"");
    CHECK(config_error(with({{"slowdown", {{"3", 0}}}})) ==
          "test.json: $.stragglers.slowdown.3: expected a positive number, found 0");
    CHECK(config_error(with({{"slowdown", {3, 1.5}}})) ==
          "test.json: $.stragglers.slowdown: expected an object of ranks to factors, as {\"3\": 1.5, \"8-15\": 1.1}, "
          "found an array");
    CHECK(config_error(with({{"jitter", {{"distribution", "gaussian"}, {"cv", 0.1}}}})) ==
          "test.json: $.stragglers.jitter.distribution: expected one of \"lognormal\", \"normal\", \"uniform\", found "
          "\"gaussian\"");
    CHECK(config_error(with({{"jitter", {{"distribution", "normal"}, {"cv", 0.5}}}})) ==
          "test.json: $.stragglers.jitter.cv: expected a cv <= 0.25 for normal jitter (a duration must stay "
          "positive), found 0.5; use \"lognormal\"");
    CHECK(config_error(with({{"jitter", {{"distribution", "uniform"}, {"sigma", 0.1}}}})) ==
          "test.json: $.stragglers.jitter.sigma: \"sigma\" is the lognormal's; give \"uniform\" jitter a \"cv\"");
    CHECK(config_error(with({{"jitter", {{"distribution", "lognormal"}}}})) ==
          "test.json: $.stragglers.jitter: missing key \"cv\" (or \"sigma\")");
    CHECK(config_error(with({{"jitter", {{"distribution", "lognormal"}, {"cv", 0.1}, {"seed", -1}}}})) ==
          "test.json: $.stragglers.jitter.seed: expected an integer >= 0, found -1");
    try {
        (void)load_config(DTSIM_CONFIGS "/runs/puzzle-fsdp-dgx-h100.json", {{"stragglers.slowdown.1", "2"}});
        FAIL("a puzzle strategy took stragglers");
    } catch (const ConfigError& e) {
        CHECK(e.file == "--set stragglers.slowdown.1=2");
        CHECK(e.path == "$.stragglers.slowdown.1");
        CHECK(std::string(e.what()).find("puzzle strategies run on the puzzle's own cost model; stragglers apply to "
                                         "the transformer strategies") != std::string::npos);
    }
    // A range and --set.
    const Config c = parse_config(with({{"slowdown", {{"2-4", 1.25}}}}), "test.json", {{"stragglers.slowdown.7", "2"}});
    CHECK(c.stragglers.slowdown == std::map<int, double>{{2, 1.25}, {3, 1.25}, {4, 1.25}, {7, 2.0}});
    CHECK(describe(c.stragglers) == "ranks 2-4 x1.25, rank 7 x2.00");
    // A factor of 1 is no straggler: a sweep over the factor starting at 1 has the plain run first.
    CHECK(!parse_config(with({{"slowdown", {{"3", 1}}}}), "test.json").stragglers.any());
    const Config l = parse_config(with({{"jitter", {{"distribution", "lognormal"}, {"sigma", 0.1}, {"seed", 9}}}}),
                                  "test.json");
    CHECK(l.stragglers.jitter.sigma == 0.1);
    CHECK(l.stragglers.jitter.seed == 9);
    CHECK(describe(l.stragglers) == "jitter lognormal cv 0.100 seed 9");
}
