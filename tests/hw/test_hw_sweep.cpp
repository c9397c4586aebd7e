// Sweeps of `dtsim run --set` on several threads (run_in_order, run_combination): the outcomes
// handed on in order whatever order they finish in, what an interrupt or an error leaves, and
// simulations on several threads at once giving what each gives alone (run.hpp: what a
// simulation shares with the rest of the process). No timing is checked.
#include "dtsim/hw/config.hpp"
#include "dtsim/hw/run.hpp"
#include "dtsim/interrupt.hpp"
#include "dtsim/trace_io.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <functional>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace dtsim::hw;

namespace {

const std::string kRuns = std::string(DTSIM_CONFIGS) + "/runs/";

// A report as JSON, less the host time it took (the one figure that varies from run to run).
std::string text_of(const RunReport& r) {
    auto j = to_json(r);
    j.erase("wall_s");
    return j.dump();
}

std::string text_of(const SweepOutcome& o) { return o.report ? text_of(*o.report) : "error: " + o.error; }

std::string trace_text(const dtsim::Trace& t) {
    std::ostringstream out;
    dtsim::write_trace_json(t, out);
    return out.str();
}

// The outcomes of a sweep as `done` gets them, with the index of each.
struct Handed {
    std::vector<std::size_t> order;
    std::vector<std::string> texts;
    std::vector<std::thread::id> threads;
};

Handed sweep(std::size_t count, int jobs, const std::function<SweepOutcome(std::size_t)>& evaluate) {
    Handed h;
    run_in_order(count, jobs, evaluate, [&](std::size_t i, SweepOutcome& o) {
        h.order.push_back(i);
        h.texts.push_back(text_of(o));
        h.threads.push_back(std::this_thread::get_id());
    });
    return h;
}

std::vector<std::size_t> first(std::size_t n) {
    std::vector<std::size_t> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = i;
    return v;
}

SweepOutcome named(std::size_t i) { return SweepOutcome{std::nullopt, fmt::format("item {}", i)}; }

}  // namespace

TEST_CASE("run_in_order hands every outcome on in index order, on the calling thread") {
    for (const int jobs : {1, 2, 3, 8, 64}) {
        CAPTURE(jobs);
        const Handed h = sweep(20, jobs, named);
        CHECK(h.order == first(20));
        for (std::size_t i = 0; i < h.texts.size(); ++i) CHECK(h.texts[i] == fmt::format("error: item {}", i));
        for (const auto& id : h.threads) CHECK(id == std::this_thread::get_id());
    }
    CHECK(sweep(0, 4, named).order.empty());
    CHECK(sweep(1, 4, named).order == first(1));
}

TEST_CASE("an item that finishes before the ones before it waits for them") {
    // Item 0 finishes only once item 1 has: item 1 is done first, and handed on second.
    std::atomic<bool> one_done{false};
    std::vector<std::size_t> finished;  // in the order the items finished (under the flag's order)
    std::mutex mutex;
    const Handed h = sweep(6, 2, [&](std::size_t i) {
        if (i == 0)
            while (!one_done.load()) std::this_thread::yield();
        {
            const std::lock_guard lock(mutex);
            finished.push_back(i);
        }
        if (i == 1) one_done.store(true);
        return named(i);
    });
    CHECK(h.order == first(6));
    REQUIRE(finished.size() == 6);
    CHECK(finished[0] == 1);
}

TEST_CASE("an interrupt stops a sweep: the items before it are handed on, in order, and no more") {
    for (const int jobs : {1, 2, 4}) {
        CAPTURE(jobs);
        Handed h;
        bool interrupted = false;
        try {
            run_in_order(12, jobs,
                         [&](std::size_t i) {
                             if (i == 5) throw dtsim::Interrupted(SIGINT);
                             return named(i);
                         },
                         [&](std::size_t i, SweepOutcome&) { h.order.push_back(i); });
        } catch (const dtsim::Interrupted& e) {
            interrupted = true;
            CHECK(e.signal() == SIGINT);
        }
        CHECK(interrupted);
        CHECK(h.order == first(5));
    }
    // A request found before an item starts (a signal between two runs) stops it the same way.
    for (const int jobs : {1, 3}) {
        CAPTURE(jobs);
        std::vector<std::size_t> order;
        bool interrupted = false;
        try {
            run_in_order(12, jobs,
                         [&](std::size_t i) {
                             if (i == 3) dtsim::request_interrupt(SIGTERM);  // after this item, none starts
                             return named(i);
                         },
                         [&](std::size_t i, SweepOutcome&) { order.push_back(i); });
        } catch (const dtsim::Interrupted& e) {
            interrupted = true;
            CHECK(e.signal() == SIGTERM);
        }
        dtsim::clear_interrupt();
        CHECK(interrupted);
        // One after another, items 0 to 3. On threads, an item may have found the request before an
        // item started earlier did (and so stopped the sweep sooner), or found none before it (and
        // so finished): what is handed on is the items before the first one stopped.
        if (jobs == 1) CHECK(order == first(4));
        CHECK(order == first(order.size()));
        CHECK(order.size() < 12);
    }
}

TEST_CASE("an exception an item lets through stops the sweep after the items before it") {
    for (const int jobs : {1, 4}) {
        CAPTURE(jobs);
        std::vector<std::size_t> order;
        CHECK_THROWS_WITH_AS(run_in_order(
                                 10, jobs,
                                 [&](std::size_t i) {
                                     if (i == 7) throw std::logic_error("item 7");
                                     return named(i);
                                 },
                                 [&](std::size_t i, SweepOutcome&) { order.push_back(i); }),
                             "item 7", std::logic_error);
        CHECK(order == first(7));
        // One that `done` throws stops it too, every thread stopped before it goes on.
        order.clear();
        CHECK_THROWS_WITH_AS(run_in_order(10, jobs, named,
                                          [&](std::size_t i, SweepOutcome&) {
                                              if (i == 2) throw std::runtime_error("cannot print");
                                              order.push_back(i);
                                          }),
                             "cannot print", std::runtime_error);
        CHECK(order == first(2));
    }
}

TEST_CASE("run_each evaluates every item once, and throws what the first item in index order to throw threw") {
    for (const int jobs : {1, 3}) {
        CAPTURE(jobs);
        std::vector<int> seen(20, 0);
        run_each(20, jobs, [&](std::size_t i) { seen[i] += static_cast<int>(i) + 1; });
        for (std::size_t i = 0; i < seen.size(); ++i) CHECK(seen[i] == static_cast<int>(i) + 1);
        // Items 4 and 9 both throw: item 4's, however the threads ran them.
        for (int repeat = 0; repeat < 20; ++repeat)
            CHECK_THROWS_WITH_AS(run_each(12, jobs,
                                          [&](std::size_t i) {
                                              if (i == 9) throw std::runtime_error("item 9");
                                              if (i == 4) {
                                                  std::this_thread::sleep_for(std::chrono::microseconds(200));
                                                  throw std::logic_error("item 4");
                                              }
                                          }),
                                 "item 4", std::logic_error);
    }
}

TEST_CASE("a sweep on several threads gives, row for row, what it gives one run after another") {
    // 12 combinations: ZeRO-0 does not fit (ddp's 18 bytes a parameter), ZeRO-3 is not ddp's.
    const std::string config = kRuns + "llama3-8b-16xh100-zero1.json";
    const auto combos =
        combinations(parse_settings({"strategy.zero_stage=0,1,2,3", "training.micro_batch=1,2,4"}));
    REQUIRE(combos.size() == 12);
    const auto evaluate = [&](std::size_t i) { return run_combination(config, combos[i]); };
    const Handed alone = sweep(combos.size(), 1, evaluate);
    int oom = 0, errors = 0;
    for (const auto& t : alone.texts) {
        oom += t.find("\"oom\":{") != std::string::npos;
        errors += t.rfind("error: --set strategy.zero_stage=3: $.strategy.zero_stage:", 0) == 0;
    }
    CHECK(oom == 4);  // ZeRO-0 at every micro batch, ZeRO-1 at 4
    CHECK(errors == 3);
    for (const int jobs : {2, 5, 12}) {
        CAPTURE(jobs);
        const Handed h = sweep(combos.size(), jobs, evaluate);
        CHECK(h.order == alone.order);
        CHECK(h.texts == alone.texts);
    }
}

// A sweep's rows and compare's reports are read without their configs: each report says what ran,
// defaults resolved.
TEST_CASE("a report gives the layout it ran, each row of a sweep its own") {
    const std::string config = kRuns + "llama3-8b-16xh100-zero1.json";
    const auto combos = combinations(parse_settings({"strategy.zero_stage=1,2", "strategy.recompute=none,full"}));
    REQUIRE(combos.size() == 4);
    for (std::size_t i = 0; i < combos.size(); ++i) {
        const SweepOutcome o = run_combination(config, combos[i]);
        REQUIRE(o.report);
        const auto l = to_json(*o.report)["layout"];
        CAPTURE(l.dump());
        CHECK(l["zero_stage"] == (i < 2 ? 1 : 2));
        CHECK(l["recompute"] == (i % 2 == 0 ? "none" : "full"));
        CHECK(l["dp"] == 16);
        CHECK(l["tp"] == 1);
        CHECK(l["pp"] == 1);
        CHECK(l["cp"] == 1);
        CHECK(l["chunks"] == 1);
        CHECK(l["model"] == "llama3-8b");
        CHECK(l["cluster"] == "dgx-h100");
        CHECK(l["gpu"] == "H100-SXM");
        CHECK(l["seq"] == 8192);
        CHECK(l["dtype"] == "bf16");
        CHECK_FALSE(l.contains("sharding"));
    }
    const SweepOutcome tp = run_combination(kRuns + "llama3-8b-8xh100-megatron.json",
                                            combinations(parse_settings({"strategy.tp=2", "strategy.dp=4"}))[0]);
    REQUIRE(tp.report);
    CHECK(to_json(*tp.report)["layout"]["tp"] == 2);
    CHECK(to_json(*tp.report)["layout"]["dp"] == 4);
    const RunReport interleaved =
        simulate(load_config(kRuns + "llama3-70b-64xh100-interleaved.json"), {.keep_trace = false}).report;
    const auto l = to_json(interleaved)["layout"];
    CHECK(l["chunks"] == 5);
    CHECK(l["pp"] == 4);
    CHECK(l["sequence_parallel"] == true);
    CHECK(l["recompute"] == "selective");
    CHECK(l["fp8"] == "none");
    CHECK(l["compile"] == false);
    const RunReport grad_op =
        simulate(load_config(kRuns + "llama3-8b-16xh100-fsdp-grad-op.json"), {.keep_trace = false}).report;
    const auto fsdp = to_json(grad_op)["layout"];
    CHECK(fsdp["sharding"] == "grad_op");
    CHECK(fsdp["zero_stage"] == 3);
}

TEST_CASE("simulations on several threads at once give what each gives alone") {
    // The hardware strategies and schedules (the world, the network, the schedule executor's
    // operation names), the puzzle strategy (its stores, arenas and frames), stragglers (their
    // seeded draws), each with its trace.
    const std::vector<std::string> configs = {
        "llama3-8b-16xh100-fsdp.json",      "llama3-8b-16xh100-zero1-straggler.json",
        "llama3-70b-64xh100-zbh1.json",      "llama3-70b-32xh100-schedule-file.json",
        "puzzle-fsdp-dgx-h100.json",         "llama3-8b-8xh100-megatron.json",
    };
    std::vector<Config> loaded;
    for (const auto& c : configs) loaded.push_back(load_config(kRuns + c));
    std::vector<std::string> reports, traces;
    for (const auto& c : loaded) {
        const RunResult r = simulate(c);
        reports.push_back(text_of(r.report));
        traces.push_back(trace_text(r.trace));
    }
    // Every config twice, all at once.
    const std::size_t n = 2 * loaded.size();
    std::vector<std::string> got_reports(n), got_traces(n);
    {
        std::vector<std::jthread> threads;
        for (std::size_t i = 0; i < n; ++i)
            threads.emplace_back([&, i] {
                const RunResult r = simulate(loaded[i % loaded.size()]);
                got_reports[i] = text_of(r.report);
                got_traces[i] = trace_text(r.trace);
            });
    }
    for (std::size_t i = 0; i < n; ++i) {
        CAPTURE(configs[i % loaded.size()]);
        CHECK(got_reports[i] == reports[i % loaded.size()]);
        CHECK(got_traces[i] == traces[i % loaded.size()]);
    }
}
