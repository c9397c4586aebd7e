// The Device API: compute and communication streams, collectives started now
// and awaited later, blocking collectives, point to point, link contention,
// memory and its verdicts. (Link sharing itself: test_hw_network.cpp.)
#include "dtsim/hw/units.hpp"
#include "dtsim/hw/world.hpp"
#include "fixtures.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

using dtsim::DeadlockError;
using dtsim::Event;
using dtsim::IdSet;
using dtsim::Stream;
using dtsim::Task;
using dtsim::Trace;
using namespace dtsim::hw;

namespace {


}  // namespace

TEST_CASE("an asynchronous all-reduce starts when the last member is ready and leaves compute alone") {
    World world(test::small_cluster(1), 4);
    Group& all = world.everyone();
    const double S = 64 * kMiB;
    const double cost = all.cost(Collective::all_reduce, S).seconds;
    std::vector<Transfer> got(4);
    std::vector<double> before_wait(4), after_wait(4);
    world.run([&](Device& gpu) -> Task<> {
        gpu.compute(ops::backward, 0, 0.001 * (gpu.rank() + 1));  // rank 3 is ready last, at 4 ms
        const Transfer h = co_await gpu.all_reduce_start(all, S, 0);
        gpu.compute(ops::backward, 1, 0.002);
        before_wait[static_cast<std::size_t>(gpu.rank())] = gpu.now();
        co_await gpu.wait(h);
        after_wait[static_cast<std::size_t>(gpu.rank())] = gpu.now();
        got[static_cast<std::size_t>(gpu.rank())] = h;
    });
    for (int r = 0; r < 4; ++r) {
        CHECK(got[static_cast<std::size_t>(r)].start() == doctest::Approx(0.004));
        CHECK(got[static_cast<std::size_t>(r)].end() == doctest::Approx(0.004 + cost));
        CHECK(before_wait[static_cast<std::size_t>(r)] == doctest::Approx(0.001 * (r + 1) + 0.002));
        CHECK(after_wait[static_cast<std::size_t>(r)] ==
              doctest::Approx(std::max(0.001 * (r + 1) + 0.002, 0.004 + cost)));
    }
    CHECK(world.step_time() == doctest::Approx(std::max(0.006, 0.004 + cost)));
}

TEST_CASE("a collective's CTAs take SMs from the compute beside it while its kernel is expected to run") {
    Cluster c = test::small_cluster(1);
    c.gpu.sms = 100;
    const double S = 256 * kMiB;
    // Per rank: an all-gather started at 0 on the data stream, then `work` seconds of compute.
    auto clock_after = [&](const Cluster& cl, double work, int sms) {
        World world(cl, 2);
        Group& all = world.everyone();
        double after = 0;
        world.run([&](Device& gpu) -> Task<> {
            const Transfer h = co_await gpu.start(Collective::all_gather, all, S, 0, CommStream::data, sms);
            gpu.compute(ops::forward, 0, work);
            if (gpu.rank() == 0) after = gpu.now();
            co_await gpu.wait(h);
        });
        return after;
    };
    World probe(c, 2);
    const CollectiveCost cost = probe.everyone().cost(Collective::all_gather, S);
    REQUIRE(cost.ctas > 0);
    REQUIRE(cost.ctas < 100);
    const double d = cost.seconds, rate = (100.0 - cost.ctas) / 100;
    // Longer than the collective: d seconds at `rate`, the rest at full speed.
    CHECK(clock_after(c, 2 * d, kNcclCtas) == doctest::Approx(d + (2 * d - d * rate)).epsilon(1e-12));
    // Inside it: all at `rate`.
    CHECK(clock_after(c, 0.5 * d, kNcclCtas) == doctest::Approx(0.5 * d / rate).epsilon(1e-12));
    // A kernel given its SMs (Transformer Engine's userbuffers): 30 of 100 held, NCCL's switch or not.
    CHECK(clock_after(c, 0.5 * d, 30) == doctest::Approx(0.5 * d / 0.7).epsilon(1e-12));
    // Not taken: communication that takes no SMs, NCCL's kernels with the switch off, no SM count.
    CHECK(clock_after(c, 2 * d, 0) == 2 * d);
    Cluster off = c;
    off.gpu.collectives_take_sms = false;
    CHECK(clock_after(off, 2 * d, kNcclCtas) == 2 * d);
    CHECK(clock_after(off, 0.5 * d, 30) == doctest::Approx(0.5 * d / 0.7).epsilon(1e-12));
    CHECK(clock_after(test::small_cluster(1), 2 * d, kNcclCtas) == 2 * d);
    CHECK(clock_after(test::small_cluster(1), 2 * d, 30) == 2 * d);
}

TEST_CASE("kernels queued on a stream hold SMs one after another; two streams' kernels add up") {
    Cluster c = test::small_cluster(1);
    c.gpu.sms = 100;
    const double S = 256 * kMiB;
    World probe(c, 2);
    const CollectiveCost cost = probe.everyone().cost(Collective::all_gather, S);
    const double d = cost.seconds, k = cost.ctas;
    {
        // Two all-gathers on the data stream: the second's kernel runs once the first's is expected to end.
        World world(c, 2);
        Group& all = world.everyone();
        double after = 0;
        world.run([&](Device& gpu) -> Task<> {
            const Transfer a = co_await gpu.start(Collective::all_gather, all, S, 0);
            const Transfer b = co_await gpu.start(Collective::all_gather, all, S, 1);
            gpu.compute(ops::forward, 0, 3 * d);
            if (gpu.rank() == 0) after = gpu.now();
            co_await gpu.wait(a);
            co_await gpu.wait(b);
        });
        const double rate = (100 - k) / 100;
        CHECK(after == doctest::Approx(2 * d + (3 * d - 2 * d * rate)).epsilon(1e-12));
    }
    {
        // One on each stream at once: their CTAs together.
        World world(c, 2);
        Group& all = world.everyone();
        double after = 0;
        world.run([&](Device& gpu) -> Task<> {
            const Transfer a = co_await gpu.start(Collective::all_gather, all, S, 0);
            const Transfer b = co_await gpu.start(Collective::all_gather, all, S, 1, CommStream::tensor);
            gpu.compute(ops::forward, 0, 3 * d);
            if (gpu.rank() == 0) after = gpu.now();
            co_await gpu.wait(a);
            co_await gpu.wait(b);
        });
        const double rate = (100 - 2 * k) / 100;
        CHECK(after == doctest::Approx(d + (3 * d - d * rate)).epsilon(1e-12));
    }
}

TEST_CASE("the time split adds up: compute, exposed communication, idle") {
    World world(test::small_cluster(1), 2);
    Group& all = world.everyone();
    const double cost = all.cost(Collective::all_reduce, 1e9).seconds;
    world.run([&](Device& gpu) -> Task<> {
        gpu.compute(ops::forward, 0, gpu.rank() == 0 ? 0.010 : 0.004);
        co_await gpu.all_reduce(all, 1e9, 0);  // blocking: rank 1 idles 6 ms, both then move data
    });
    const TimeSplit& fast = world.device(1).time_split();
    CHECK(fast.compute == doctest::Approx(0.004));
    CHECK(fast.idle == doctest::Approx(0.006));
    CHECK(fast.comm == doctest::Approx(cost));
    for (int r = 0; r < 2; ++r) {
        const TimeSplit& s = world.device(r).time_split();
        CHECK(s.compute + s.comm + s.idle == doctest::Approx(world.step_time()));
    }
}

TEST_CASE("collectives on a subset group involve only its members") {
    World world(test::small_cluster(1), 4);
    Group& pair = world.group({1, 3}, "pair");
    std::vector<double> clocks(4);
    world.run([&](Device& gpu) -> Task<> {
        gpu.compute(ops::forward, 0, 0.001 * gpu.rank());
        if (pair.position(gpu.rank()) >= 0) co_await gpu.all_reduce(pair, 1e6, 0);
        clocks[static_cast<std::size_t>(gpu.rank())] = gpu.now();
    });
    const double cost = pair.cost(Collective::all_reduce, 1e6).seconds;
    CHECK(clocks[0] == 0);
    CHECK(clocks[2] == doctest::Approx(0.002));
    CHECK(clocks[1] == doctest::Approx(0.003 + cost));
    CHECK(clocks[3] == doctest::Approx(0.003 + cost));
}

TEST_CASE("collectives on one rank's stream run one after another; on disjoint links they overlap") {
    // Ranks 0-3 on node 0, 4-7 on node 1. Groups a and b hold ranks 0 and 1;
    // group c lives on node 1.
    World world(test::small_cluster(2), 8);
    Group& a = world.group({0, 1}, "a");
    Group& b = world.group({0, 1}, "b");
    Group& c = world.group({4, 5}, "c");
    const double S = 1 * kGiB;
    std::vector<Transfer> ta(8), tb(8), tc(8);
    world.run([&](Device& gpu) -> Task<> {
        const int r = gpu.rank();
        if (r == 0 || r == 1) {
            ta[static_cast<std::size_t>(r)] = co_await gpu.all_reduce_start(a, S, 0);
            tb[static_cast<std::size_t>(r)] = co_await gpu.all_reduce_start(b, S, 1);
        }
        if (r == 4 || r == 5) tc[static_cast<std::size_t>(r)] = co_await gpu.all_reduce_start(c, S, 0);
    });
    const double d = a.cost(Collective::all_reduce, S).seconds;
    CHECK(ta[0].start() == 0);
    CHECK(tb[0].start() == doctest::Approx(d));  // FIFO on the collective stream
    CHECK(tb[0].end() == doctest::Approx(2 * d));
    CHECK(tc[4].start() == 0);  // its own links
    CHECK(tc[4].end() == doctest::Approx(d));
}

TEST_CASE("a blocking collective and an asynchronous one on the same links share them equally") {
    // An asynchronous all-reduce on the collective stream and a blocking one on
    // the compute stream, same members, same links, both ready at 0: each
    // waits its latency alpha (not shared), then both move at half rate, so
    // both end at alpha + 2 (d - alpha) (network.hpp).
    World world(test::small_cluster(1), 2);
    Group& a = world.group({0, 1}, "a");
    Group& b = world.group({0, 1}, "b");
    const double S = 1 * kGiB;
    Transfer background, blocking;
    std::vector<double> after(2);
    world.run([&](Device& gpu) -> Task<> {
        const Transfer t = co_await gpu.all_reduce_start(a, S, 0);
        const Transfer u = co_await gpu.all_reduce(b, S, 1);
        after[static_cast<std::size_t>(gpu.rank())] = gpu.now();
        if (gpu.rank() == 0) background = t, blocking = u;
    });
    const CollectiveCost cost = a.cost(Collective::all_reduce, S);
    const double d = cost.seconds, alpha = cost.latency;
    REQUIRE(alpha > 0);
    CHECK(background.start() == 0);
    CHECK(blocking.start() == 0);
    CHECK(background.end() == doctest::Approx(alpha + 2 * (d - alpha)).epsilon(1e-12));
    CHECK(blocking.end() == doctest::Approx(alpha + 2 * (d - alpha)).epsilon(1e-12));
    CHECK(after[0] == blocking.end());
    CHECK(after[1] == blocking.end());
}

TEST_CASE("send is eager; recv waits for the message and moves the clock to its arrival") {
    World world(test::small_cluster(2), 8);
    double arrival = 0, sender_after = 0;
    const double S = 100e6;
    world.run([&](Device& gpu) -> Task<> {
        if (gpu.rank() == 0) {
            gpu.compute(ops::forward, 0, 0.010);
            gpu.send(4, S, 0, 0, IdSet::single(0));  // across nodes
            sender_after = gpu.now();
        } else if (gpu.rank() == 4) {
            co_await gpu.recv(0, 0, 0, IdSet::single(0));
            arrival = gpu.now();
        }
        co_return;
    });
    CHECK(sender_after == doctest::Approx(0.010));
    CHECK(arrival == doctest::Approx(0.010 + 10e-6 + 5e-6 + S / 25e9));
    const TimeSplit& s = world.device(4).time_split();
    CHECK(s.idle == doctest::Approx(0.010));  // waiting for the sender
    CHECK(s.comm == doctest::Approx(arrival - 0.010));
}

TEST_CASE("messages of one (source, tag) arrive in order; tags keep flows apart") {
    World world(test::small_cluster(1), 2);
    std::vector<double> got;
    world.run([&](Device& gpu) -> Task<> {
        if (gpu.rank() == 0) {
            gpu.send(1, 1e6, 7);
            gpu.compute(ops::forward, 0, 0.001);
            gpu.send(1, 1e6, 3);
        } else {
            co_await gpu.recv(0, 3);
            got.push_back(gpu.now());
            co_await gpu.recv(0, 7);
            got.push_back(gpu.now());
        }
    });
    REQUIRE(got.size() == 2);
    CHECK(got[0] > 0.001);
    CHECK(got[1] == got[0]);  // tag 7 arrived long before
}

TEST_CASE("a recv nobody sends to is a deadlock naming the rank") {
    World world(test::small_cluster(1), 2);
    CHECK_THROWS_AS(world.run([&](Device& gpu) -> Task<> {
        if (gpu.rank() == 1) co_await gpu.recv(0, 0);
    }),
                    DeadlockError);
}

TEST_CASE("memory: the peak names its rank, time and op; the first allocation past capacity is the OOM verdict") {
    World world(test::small_cluster(1), 2);
    world.run([&](Device& gpu) -> Task<> {
        gpu.allocate(4 * kGiB, MemoryKind::optimizer, ops::model_states);
        gpu.compute(ops::forward, 0, 0.5);
        if (gpu.rank() == 1) {
            gpu.allocate(7 * kGiB, MemoryKind::activations, ops::forward, 3);  // 11 GiB > 10 GiB
            gpu.release(7 * kGiB, MemoryKind::activations);
        }
        gpu.allocate(1 * kGiB, MemoryKind::gradients, ops::backward, 2);
        co_return;
    });
    const MemoryStats& ok = world.device(0).memory_stats();
    CHECK(ok.peak.bytes == doctest::Approx(5 * kGiB));
    CHECK(ok.peak.op == ops::backward);
    CHECK(ok.peak.layer == 2);
    CHECK_FALSE(ok.oom.has_value());
    const MemoryStats& bad = world.device(1).memory_stats();
    REQUIRE(bad.oom.has_value());
    CHECK(bad.oom->time == doctest::Approx(0.5));
    CHECK(bad.oom->op == ops::forward);
    CHECK(bad.oom->layer == 3);
    CHECK(bad.oom->bytes == doctest::Approx(11 * kGiB));
}

TEST_CASE("memory: the peak is broken down by what each allocation holds, and releases leave the rest") {
    World world(test::small_cluster(1), 1);
    world.run([&](Device& gpu) -> Task<> {
        MemoryParts states{};
        states[static_cast<std::size_t>(MemoryKind::weights)] = 2 * kGiB;
        states[static_cast<std::size_t>(MemoryKind::optimizer)] = 3 * kGiB;
        gpu.allocate(states, ops::model_states);
        gpu.allocate(4 * kGiB, MemoryKind::activations, ops::forward, 0);
        gpu.allocate(1 * kGiB, MemoryKind::buffers, ops::all_reduce, 0);
        gpu.release(1 * kGiB, MemoryKind::buffers);
        gpu.release(3 * kGiB, MemoryKind::activations);
        gpu.allocate(0.5 * kGiB, MemoryKind::gradients, ops::backward, 0);
        co_return;
    });
    const MemoryStats& m = world.device(0).memory_stats();
    // The peak, 10 GiB, was reached by the bucket: 2 + 3 + 4 + 1.
    CHECK(m.peak.bytes == doctest::Approx(10 * kGiB));
    CHECK(m.peak.op == ops::all_reduce);
    const MemoryParts& at = m.peak.by_kind;
    CHECK(at[static_cast<std::size_t>(MemoryKind::weights)] == doctest::Approx(2 * kGiB));
    CHECK(at[static_cast<std::size_t>(MemoryKind::optimizer)] == doctest::Approx(3 * kGiB));
    CHECK(at[static_cast<std::size_t>(MemoryKind::activations)] == doctest::Approx(4 * kGiB));
    CHECK(at[static_cast<std::size_t>(MemoryKind::buffers)] == doctest::Approx(1 * kGiB));
    CHECK(at[static_cast<std::size_t>(MemoryKind::gradients)] == 0);
    // Now: 2 + 3 + 1 + 0.5, the parts summing to the total.
    CHECK(m.current == doctest::Approx(6.5 * kGiB));
    double sum = 0;
    for (double b : m.current_by_kind) sum += b;
    CHECK(sum == doctest::Approx(m.current));
    CHECK(m.current_by_kind[static_cast<std::size_t>(MemoryKind::activations)] == doctest::Approx(1 * kGiB));
    CHECK(kind_name(MemoryKind::optimizer) == "optimizer");
}

TEST_CASE("every operation is a trace event with its stream, bytes, FLOPs and memory") {
    World world(test::small_cluster(1), 2);
    Group& all = world.everyone();
    world.run([&](Device& gpu) -> Task<> {
        gpu.allocate(1000, MemoryKind::weights, ops::model_states);
        gpu.gemm(ops::forward, 0, 1024, 1024, 1024, DType::bf16, 1, IdSet::single(0));
        auto h = co_await gpu.all_reduce_start(all, 4096, 0);
        co_await gpu.wait(h);
    });
    Trace t = world.take_trace();
    CHECK(t.time_unit == "s");
    CHECK(t.memory_unit == "byte");
    REQUIRE(t.ranks[0].events.size() == 2);
    const Event& f = t.ranks[0].events[0];
    CHECK(f.op == ops::forward);
    CHECK(f.stream == Stream::compute);
    CHECK(f.flops == doctest::Approx(2.0 * 1024 * 1024 * 1024));
    CHECK(f.memory == 1000);
    const Event& c = t.ranks[0].events[1];
    CHECK(c.op.name() == "all_reduce");
    CHECK(c.stream == Stream::comm);
    CHECK(c.bytes == 4096);
    CHECK(c.start == doctest::Approx(f.end()));
    CHECK(t.memory_capacity == doctest::Approx(10 * kGiB));
}

TEST_CASE("a recording world keeps each rank's memory by kind: each moment's highest and what it holds after") {
    for (const bool recording : {true, false}) {
        World world(test::small_cluster(1), 1);
        world.set_recording(recording);
        world.run([&](Device& gpu) -> Task<> {
            gpu.allocate(2 * kGiB, MemoryKind::weights, ops::model_states);
            gpu.allocate(1 * kGiB, MemoryKind::activations, ops::forward, 0);  // the same moment, higher: one sample
            gpu.compute(ops::forward, 0, 0.5);
            gpu.allocate(1 * kGiB, MemoryKind::buffers, ops::all_reduce, 0);  // 4 GiB, the peak, for no time
            gpu.release(1 * kGiB, MemoryKind::buffers);  // back to 3 GiB at 0.5 s: a second sample
            gpu.allocate(0.5 * kGiB, MemoryKind::gradients, ops::backward, 0);  // 3.5: replaces the second
            gpu.compute(ops::backward, 0, 0.25);
            gpu.release(1 * kGiB, MemoryKind::activations);
            gpu.allocate(2 * kGiB, MemoryKind::activations, ops::forward, 1);  // 4.5 at 0.75 s: one sample
            gpu.release(2 * kGiB, MemoryKind::activations);
            co_return;
        });
        const std::vector<double>& log = world.device(0).memory_log();
        if (!recording) {
            CHECK(log.empty());
            continue;
        }
        // time, weights, gradients, optimizer, activations, buffers
        const std::vector<double> want = {0,    2 * kGiB, 0,          0, 1 * kGiB, 0,         //
                                          0.5,  2 * kGiB, 0,          0, 1 * kGiB, 1 * kGiB,  //
                                          0.5,  2 * kGiB, 0.5 * kGiB, 0, 1 * kGiB, 0,         //
                                          0.75, 2 * kGiB, 0.5 * kGiB, 0, 2 * kGiB, 0,         //
                                          0.75, 2 * kGiB, 0.5 * kGiB, 0, 0,        0};
        CHECK(log == want);
        CHECK(world.device(0).memory_stats().peak.bytes == 4.5 * kGiB);  // the largest sample's sum
        const Trace t = world.take_trace();
        CHECK(t.memory_kinds == std::vector<std::string>{"weights", "gradients", "optimizer", "activations", "buffers"});
        REQUIRE(t.ranks.size() == 1);
        CHECK(t.ranks[0].memory_by_kind == want);
        CHECK(t.memory_samples(t.ranks[0]) == 5);
    }
}
