// The engine: coroutines per rank, collectives, mailboxes, deadlock and
// mismatch diagnosis, exceptions, determinism.
#include "dtsim/simulation.hpp"
#include "dtsim/detail/frame_pool.hpp"
#include "dtsim/detail/pages.hpp"
#include "dtsim/puzzle/registry.hpp"
#include "dtsim/trace_io.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>

using namespace dtsim;
using namespace dtsim::puzzle;

namespace {

std::string error_of(Strategy s, int ranks, int layers = 2, int batches = 4, Keep keep = Keep::events) {
    try {
        run_strategy(s, layers, batches, ranks, puzzle_costs(), nlohmann::json::object(), keep);
    } catch (const ScheduleError& e) {
        return e.what();
    }
    return "no error";
}

std::string trace_bytes(const Trace& t) {
    std::ostringstream os;
    write_trace_json(t, os);
    return os.str();
}

}  // namespace

TEST_CASE("a collective moves every member's clock to the latest arrival") {
    Simulation sim(3);
    std::vector<double> after(3);
    sim.run([&](Gpu& g) -> Task<> {
        g.set_clock(g.rank() * 1.5);
        auto r = co_await sim.world().arrive(g, ops::allreduce, 0, g.rank(),
                                             [](int& acc, int v, int) { acc += v; });
        CHECK(r.value == 0 + 1 + 2);
        after[static_cast<std::size_t>(g.rank())] = r.clock;
    });
    CHECK(after == std::vector<double>{3.0, 3.0, 3.0});
}

TEST_CASE("collectives on a subset communicator involve only its members") {
    Simulation sim(4);
    Communicator& evens = sim.communicator({0, 2}, "evens");
    std::vector<int> got(4, -1);
    sim.run([&](Gpu& g) -> Task<> {
        if (g.rank() % 2 == 0) {
            auto r = co_await evens.arrive(g, ops::allreduce, kNoLayer, g.rank() + 1,
                                           [](int& acc, int v, int) { acc += v; });
            got[static_cast<std::size_t>(g.rank())] = r.value;
        }
    });
    CHECK(got == std::vector<int>{4, -1, 4, -1});
}

TEST_CASE("a rank that is not a member cannot join a communicator's collective") {
    Simulation sim(2);
    Communicator& one = sim.communicator({0}, "solo");
    CHECK_THROWS_WITH_AS(sim.run([&](Gpu& g) -> Task<> {
        co_await one.arrive(g, ops::allgather, 3, 0, [](int&, int, int) {});
    }),
                         "rank 1: allgather (layer 3) on communicator solo, which rank 1 is not a member of",
                         ScheduleError);
}

TEST_CASE("ranks whose k-th collectives differ are reported with both calls") {
    CHECK(error_of(
              [](Model& m) -> Task<> {
                  if (m.rank == 0)
                      co_await m.allreduce(WeightGrad{0, IdSet{0}}, 0);
                  else
                      co_await m.allgather(Weight{0}, 0);
              },
              2) == "collective #0 on communicator world does not match: rank 0 called allreduce(layer 0) but rank 1 "
                    "called allgather(layer 0)");
    CHECK(error_of(
              [](Model& m) -> Task<> {
                  co_await m.allreduce(WeightGrad{0, IdSet{0}}, 0);
                  co_await m.allreduce(WeightGrad{m.rank, IdSet{0}}, m.rank);
              },
              3) == "collective #1 on communicator world does not match: rank 2 called allreduce(layer 2) but rank 0 "
                    "called allreduce(layer 0)");  // rank 2 completed round #0, so it runs on first
}

TEST_CASE("two ranks that both receive first deadlock, and the diagnosis says who waits for what") {
    const std::string e = error_of(
        [](Model& m) -> Task<> {
            m.activations[0] = m.get_activation({m.rank});
            auto x = co_await m.receive();
            (void)x;
        },
        2);
    CHECK(e.starts_with("deadlock: 2 of 2 ranks are blocked and none can proceed"));
    CHECK(e.find("rank 0 waits in receive, but no rank passes to it; no event yet") != std::string::npos);
    CHECK(e.find("rank 1 waits in receive, but no rank passes to it; no event yet") != std::string::npos);
}

TEST_CASE("a collective that one rank never calls is diagnosed with the missing rank and last events") {
    // The same diagnosis whether the run keeps every event or only the summary (and the last event).
    for (const Keep keep : {Keep::events, Keep::summary}) {
        CAPTURE(static_cast<int>(keep));
        const std::string e = error_of(
            [](Model& m) -> Task<> {
                auto [w, o] = m.load_weights(0);
                m.forward(0, m.get_activation({m.rank}), w);
                if (m.rank != 2) co_await m.allreduce(WeightGrad{0, IdSet{m.rank}}, 0);
            },
            3, 2, 4, keep);
        CHECK(e.starts_with("deadlock: 2 of 3 ranks are blocked and none can proceed"));
        CHECK(e.find("rank 0 waits in allreduce layer 0 (collective #0 on world), waiting for rank(s) {2} that never "
                     "called it; last event forward layer 0 batches {0} at 0") != std::string::npos);
        CHECK(e.find("rank 1 waits in allreduce layer 0") != std::string::npos);
        CHECK(e.find("(1 rank(s) finished)") != std::string::npos);
    }
}

TEST_CASE("a sender blocked on a full mailbox is part of the diagnosis") {
    const std::string e = error_of(
        [](Model& m) -> Task<> {
            if (m.rank == 0) {
                co_await m.pass_to(1, "one");
                co_await m.pass_to(1, "two");  // mailbox holds one message: blocks forever
            }
        },
        2);
    CHECK(e.find("rank 0 waits in pass to rank 1, whose mailbox stays full (rank 1 never receives); last event "
                 "pass at 0.2") != std::string::npos);
}

TEST_CASE("a deadlock among thousands of ranks is summarised by groups, with their last events") {
    const std::string e = error_of(
        [](Model& m) -> Task<> {
            if (m.rank == 0) co_return;
            if (m.rank < 1000) {  // one forward on the rank's own batch: last events differ in batches only
                auto [w, o] = m.load_weights(0);
                (void)m.forward(0, m.get_activation(IdSet::single(m.rank)), w);
            }
            co_await m.allgather(Weight{0}, 0);
        },
        2000);
    INFO(e);
    CHECK(e.starts_with("deadlock: 1999 of 2000 ranks are blocked"));
    CHECK(e.find("\n  ranks {1-999} wait in allgather layer 0 (collective #0 on world), waiting for rank(s) {0} "
                 "that never called it; last events forward layer 0 batches {1-999} in all at 0\n") != std::string::npos);
    CHECK(e.find("\n  ranks {1000-1999} wait in allgather layer 0 (collective #0 on world), waiting for rank(s) {0} "
                 "that never called it; no event yet\n") != std::string::npos);
    CHECK(e.size() < 4000);
}

TEST_CASE("mailboxes are FIFO and a full mailbox blocks the sender without costing time") {
    auto r = run_strategy(
        [](Model& m) -> Task<> {
            if (m.rank == 0) {
                for (int i = 0; i < 3; ++i) co_await m.pass_to(1, Activation{i, IdSet{i}});
            } else {
                for (int i = 0; i < 3; ++i) {
                    Activation a = co_await m.receive();
                    m.require(a.layer == i, "messages arrive in order");
                    m.forward(0, Activation{0, IdSet{0, 1}}, Weight{0});  // 2 steps of work
                }
            }
        },
        1, 4, 2);
    const auto& r0 = r.trace.ranks[0].events;
    const auto& r1 = r.trace.ranks[1].events;
    REQUIRE(r0.size() == 3);
    // The sender's clock does not advance while it waits for room.
    CHECK(r0[2].start == doctest::Approx(0.4));
    // Receiver: clock = max(own, message clock) before each receive event.
    CHECK(r1[0].start == doctest::Approx(0.2));
    CHECK(r1[2].start == doctest::Approx(2.4));
    CHECK(r1[4].start == doctest::Approx(4.6));
}

TEST_CASE("a failed run keeping its events hands over its trace up to the failure; one keeping the summary does not") {
    // Rank 1 breaks a rule at its second forward; the others deadlock in the all-reduce it never joins.
    const Strategy broken = [](Model& m) -> Task<> {
        auto [w, o] = m.load_weights(0);
        m.activations[1] = m.forward(0, m.get_activation({m.rank}), w);
        if (m.rank == 1) m.forward(1, m.activations[1], w);  // layer 1 with layer 0's weight
        co_await m.allreduce(WeightGrad{0, IdSet{m.rank}}, 0);
    };
    for (const Keep keep : {Keep::events, Keep::summary}) {
        CAPTURE(static_cast<int>(keep));
        try {
            run_strategy(broken, 2, 3, 3, puzzle_costs(), {{"puzzle", "broken"}}, keep);
            FAIL("the run should fail");
        } catch (const ScheduleError& e) {
            CHECK(std::string(e.what()).starts_with("rank 1: forward (layer 1): weight should be layer 1"));
            if (keep == Keep::summary) {
                CHECK(e.partial_trace == nullptr);
                continue;
            }
            REQUIRE(e.partial_trace != nullptr);
            const Trace& t = *e.partial_trace;
            CHECK(t.meta.at("puzzle") == "broken");
            CHECK(t.meta.at("ranks") == 3);
            CHECK(t.meta.at("error") == e.what());
            CHECK(t.summary.correct == std::optional<bool>(false));
            REQUIRE(t.ranks.size() == 3);
            // Every rank's first forward; rank 1's second is recorded before its check fails.
            CHECK(t.ranks[0].events.size() == 1);
            CHECK(t.ranks[1].events.size() == 2);
            CHECK(t.ranks[2].events.size() == 1);
            CHECK(t.ranks[1].events[1].layer == 1);
            CHECK(t.summary.makespan == doctest::Approx(2.0));
        }
    }
}

TEST_CASE("an exception thrown by a strategy surfaces with its rank") {
    CHECK(error_of(
              [](Model& m) -> Task<> {
                  if (m.rank == 1) throw std::runtime_error("boom");
                  co_await m.allgather(Weight{0}, 0);
              },
              3) == "rank 1: boom");
}

TEST_CASE("passing to a rank that does not exist is an error") {
    CHECK(error_of(
              [](Model& m) -> Task<> { co_await m.pass_to(m.rank + 1, "x"); }, 2) ==
          "rank 1: pass to rank 2: destination must be in [0, 2)");
}

TEST_CASE("two runs give byte-identical traces") {
    for (const auto& p : puzzles()) {
        INFO(p.name);
        auto a = run_strategy(p.strategy, p.layers, p.batches, p.ranks);
        auto b = run_strategy(p.strategy, p.layers, p.batches, p.ranks);
        CHECK(trace_bytes(a.trace) == trace_bytes(b.trace));
    }
}

TEST_CASE("fsdp on 1024 ranks runs and is correct") {
    auto r = run_strategy(&fsdp, 4, 1024, 1024);
    CHECK(r.trace.summary.correct == true);
    CHECK(r.trace.event_count() == 1024u * (4 * 2 + 1 + 4 * 2 + 4 + 4));
    // Weight shards of 1/1024 stay exact: memory at the first event is
    // 4 layers x (weight + optimizer) / 1024 shards + one batch of activations.
    CHECK(r.trace.ranks[5].events[0].memory == 8.0 * 262144 / 1024 + 131072);
}

TEST_CASE("the idle hook releases parked ranks in the order its world decides, and a hook with nothing left ends in a diagnosis") {
    // A tiny world of timers: ranks park until a time; the hook wakes the earliest.
    Simulation sim(3);
    std::vector<std::pair<double, int>> timers;  // (time, rank)
    std::vector<int> order;
    sim.set_idle_hook([&] {
        if (timers.empty()) return false;
        auto it = std::min_element(timers.begin(), timers.end());
        Gpu& g = sim.gpu(it->second);
        g.set_clock(it->first);
        timers.erase(it);
        sim.wake(g);
        return true;
    });
    sim.run([&](Gpu& g) -> Task<> {
        timers.emplace_back(10.0 - g.rank(), g.rank());
        co_await sim.park(g, Wait::other(ops::pass, kNoLayer, "a timer"));
        order.push_back(g.rank());
    });
    CHECK(order == std::vector<int>{2, 1, 0});
    CHECK(sim.gpu(0).clock() == 10.0);

    Simulation stuck(2);
    stuck.set_idle_hook([] { return false; });
    std::string msg;
    try {
        stuck.run([&](Gpu& g) -> Task<> {
            if (g.rank() == 1) co_await stuck.park(g, Wait::other(ops::pass, 3, "a timer"));
        });
    } catch (const DeadlockError& e) {
        msg = e.what();
    }
    CHECK(msg.find("rank 1 waits in a timer (layer 3)") != std::string::npos);
}

TEST_CASE("a rank keeps its events or folds them as it was last told before the run, and folds its summary either way") {
    const auto body = [](Gpu& g) -> Task<> {
        g.record(ops::forward, 0, 1.0, 5.0 + g.rank());
        g.record(ops::backward, 1, 2.0, 3.0, IdSet{g.rank(), 5});  // two intervals: the set's heap form
        co_return;
    };
    Simulation folded(2);
    folded.keep_events(false);
    folded.keep_events(true);
    folded.keep_events(false);
    folded.run(body);
    for (int r = 0; r < 2; ++r) {
        CAPTURE(r);
        Gpu& g = folded.gpu(r);
        CHECK(g.event_count() == 2);
        CHECK(g.summary().events == 2);
        CHECK(g.summary().last_start == 1.0);
        CHECK(g.summary().makespan == 3.0);
        CHECK(g.summary().max_memory == 5.0 + r);
        const auto last = g.last_event();
        REQUIRE(last);
        CHECK(last->op == ops::backward);
        CHECK(last->layer == 1);
        CHECK(last->batches == IdSet{r, 5});
        CHECK_THROWS_AS(g.event_at(0), std::logic_error);
    }
    CHECK(folded.take_logs()[1].events.empty());

    Simulation kept(2);
    kept.keep_events(false);
    kept.keep_events(true);
    kept.run(body);
    CHECK(kept.gpu(1).event_count() == 2);
    CHECK(kept.gpu(1).last_event()->batches == IdSet{1, 5});
    for (int r = 0; r < 2; ++r) {  // the same summary as the folded run's, and as summarize() gives
        CAPTURE(r);
        CHECK(kept.gpu(r).summary() == folded.gpu(r).summary());
    }
    Trace t;
    t.ranks = kept.take_logs();
    REQUIRE(t.ranks[1].events.size() == 2);
    CHECK(t.ranks[1].events[0].memory == 6.0);
    summarize(t);
    CHECK(t.summary.max_memory == 6.0);
    CHECK(t.summary.max_memory_rank == 1);
    CHECK(t.summary.makespan == 3.0);
    CHECK(t.summary.timesteps == 1.0);
    CHECK(kept.gpu(1).summary().max_memory == 6.0);
    CHECK(kept.gpu(1).event_count() == 2);  // counted as recorded, after the log is taken too
    CHECK(kept.gpu(1).log_size() == 0);
    CHECK(folded.gpu(1).log_size() == 0);

    // Switching drops what was recorded, summary included.
    Simulation switched(1);
    Gpu& g = switched.gpu(0);
    g.record(ops::forward, 0, 1.0, 2.0);
    CHECK(g.log_size() == 1);
    switched.keep_events(false);
    CHECK(g.event_count() == 0);
    CHECK(g.summary().events == 0);
    CHECK(g.summary().makespan == 0.0);
    g.record(ops::forward, 0, 1.0, 2.0);
    switched.keep_events(true);
    CHECK(g.event_count() == 0);
    CHECK_FALSE(g.last_event());
}

TEST_CASE("coroutine frames: a freed frame is reused, and once none is left the next frames are carved in order again") {
    using dtsim::detail::frame_allocate;
    using dtsim::detail::frame_deallocate;
    // The runs of the tests before this one freed all their frames.
    REQUIRE(dtsim::detail::frames_live() == 0);
    void* a = frame_allocate(200);
    void* b = frame_allocate(200);
    void* c = frame_allocate(100);
    CHECK(static_cast<char*>(b) == static_cast<char*>(a) + 256);  // side by side, rounded to 64 bytes
    CHECK(static_cast<char*>(c) == static_cast<char*>(b) + 256);
    CHECK(reinterpret_cast<std::uintptr_t>(a) % 64 == 0);
    frame_deallocate(b, 200);
    CHECK(frame_allocate(200) == b);  // reused while other frames live
    // All freed, b last: a run that follows gets a, then b, as the first did, not b first.
    frame_deallocate(a, 200);
    frame_deallocate(c, 100);
    frame_deallocate(b, 200);
    CHECK(dtsim::detail::frames_live() == 0);
    void* a2 = frame_allocate(200);
    void* b2 = frame_allocate(200);
    CHECK(a2 == a);
    CHECK(b2 == b);
    frame_deallocate(a2, 200);
    frame_deallocate(b2, 200);
}

TEST_CASE("large arrays are zeroed and aligned to a huge page, middling ones to a page, small ones to a cache line") {
    const std::size_t kib = 1024;
    for (const std::size_t bytes : {std::size_t{1}, std::size_t{100}, dtsim::detail::kMappedFrom - 1, dtsim::detail::kMappedFrom,
                                    300 * kib, dtsim::detail::kHugePage - 1, dtsim::detail::kHugePage, 3 * dtsim::detail::kHugePage + 5}) {
        CAPTURE(bytes);
        auto* p = static_cast<unsigned char*>(dtsim::detail::allocate_pages(bytes));
        const auto address = reinterpret_cast<std::uintptr_t>(p);
        std::size_t align = 64;  // from the heap (every block, in a build with AddressSanitizer)
        if (dtsim::detail::pages_mapped() && bytes >= dtsim::detail::kMappedFrom) align = bytes >= dtsim::detail::kHugePage ? dtsim::detail::kHugePage : 4096;
        CHECK(address % align == 0);
        CHECK(std::all_of(p, p + bytes, [](unsigned char x) { return x == 0; }));
        p[0] = 1;
        p[bytes - 1] = 2;
        dtsim::detail::release_pages(p, bytes);
    }
    dtsim::detail::release_pages(nullptr, 10);  // nothing to release
}

TEST_CASE("a mapped block released with a kind comes back, as it was left, to the next allocation of that kind and size only") {
    static constexpr dtsim::detail::PageKind mine{"test"}, other{"other test"};
    dtsim::detail::trim_pages();
    if (!dtsim::detail::pages_mapped()) {
        // Nothing is kept: a block of a kind is zeroed like any other.
        auto* p = static_cast<unsigned char*>(dtsim::detail::allocate_pages(dtsim::detail::kHugePage, &mine));
        p[5] = 42;
        dtsim::detail::release_pages(p, dtsim::detail::kHugePage, &mine);
        auto* again = static_cast<unsigned char*>(dtsim::detail::allocate_pages(dtsim::detail::kHugePage, &mine));
        CHECK(again[5] == 0);
        dtsim::detail::release_pages(again, dtsim::detail::kHugePage, &mine);
        return;
    }
    for (const std::size_t bytes : {2 * dtsim::detail::kHugePage, std::size_t{300} << 10}) {  // on huge pages, on small ones
        CAPTURE(bytes);
        const std::size_t step = bytes >= dtsim::detail::kHugePage ? dtsim::detail::kHugePage : 4096;
        auto* p = static_cast<unsigned char*>(dtsim::detail::allocate_pages(bytes, &mine));
        p[5] = 42;
        dtsim::detail::release_pages(p, bytes, &mine);
        // Another kind, another size or no kind: fresh zeroed memory.
        auto* q = static_cast<unsigned char*>(dtsim::detail::allocate_pages(bytes, &other));
        auto* z = static_cast<unsigned char*>(dtsim::detail::allocate_pages(bytes));
        auto* s = static_cast<unsigned char*>(dtsim::detail::allocate_pages(bytes + step, &mine));
        for (unsigned char* fresh : {q, z, s}) {
            CHECK(fresh != p);
            CHECK(fresh[5] == 0);
        }
        auto* again = static_cast<unsigned char*>(dtsim::detail::allocate_pages(bytes - 100, &mine));  // the same size, rounded
        CHECK(again == p);
        CHECK(again[5] == 42);
        dtsim::detail::release_pages(q, bytes, &other);
        dtsim::detail::release_pages(z, bytes);
        dtsim::detail::release_pages(s, bytes + step, &mine);
        dtsim::detail::release_pages(again, bytes - 100, &mine);
        dtsim::detail::trim_pages();
    }
}
