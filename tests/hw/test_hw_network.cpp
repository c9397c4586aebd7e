// Link sharing (network.hpp): max-min fair rates against closed forms, end
// times that do not depend on the order transfers are booked in, streams that
// queue, determinism, and deadlocks on transfers that never start.
#include "dtsim/hw/network.hpp"
#include "dtsim/hw/run.hpp"
#include "dtsim/hw/units.hpp"
#include "dtsim/hw/world.hpp"
#include "dtsim/trace_io.hpp"
#include "fixtures.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <sstream>
#include <vector>

using dtsim::DeadlockError;
using dtsim::Task;
using namespace dtsim::hw;

namespace {

// Relative agreement to 1e-12: the closed forms hold up to rounding.
bool near(double got, double want) { return std::abs(got - want) <= 1e-12 * std::abs(want); }

// A transfer on `ports` ready at `clock` (after `previous`, if any), run to the end.
TransferRecord* add(Network& net, std::vector<int> ports, double work, double clock = 0, double latency = 0,
                    TransferRecord* previous = nullptr, int rank = 0) {
    static std::deque<std::vector<int>> keep;  // arm() keeps pointers to port lists of more than 2
    keep.push_back(std::move(ports));
    TransferRecord* t = net.create();
    const Arrival a{rank, clock, previous};
    net.arm(t, keep.back(), latency, work, std::span<const Arrival>(&a, 1));
    return t;
}

void run_out(Network& net) {
    while (net.step()) {
        net.woken().clear();
        net.patched().clear();
    }
}


}  // namespace

TEST_CASE("k equal transfers on one port ready together all end at k d") {
    const double d = 0.004;
    for (int k = 1; k <= 7; ++k) {
        CAPTURE(k);
        Network net(1);
        std::vector<TransferRecord*> ts;
        for (int i = 0; i < k; ++i) ts.push_back(add(net, {0}, d));
        REQUIRE(net.step());  // all enter at 0
        for (auto* t : ts) CHECK(near(net.rate(t), 1.0 / k));
        run_out(net);
        for (auto* t : ts) {
            REQUIRE(t->ended);
            CHECK(t->start == 0);
            CHECK(near(t->end, k * d));
        }
    }
}

TEST_CASE("k transfers of works d, 2d, ..., kd on one port end as processor sharing says, for k up to 20") {
    // All ready at 0: the i-th smallest (1-based) ends once the i - 1 smaller have ended and it has
    // done its own work beside the k - i + 1 still moving: sum_{j<i} j d + (k - i + 1) i d. Past a
    // port's flows kept in place (8) its list moves to the heap. Booked largest first, the flows
    // leave the port's list from its end; smallest first, from its front, the rest moving up.
    const double d = 0.001;
    for (const bool largest_first : {true, false}) {
        for (int k = 1; k <= 20; ++k) {
            CAPTURE(largest_first);
            CAPTURE(k);
            Network net(1);
            std::vector<TransferRecord*> by_size(static_cast<std::size_t>(k));  // by_size[i - 1]: work i d
            for (int n = 0; n < k; ++n) {
                const int i = largest_first ? k - n : n + 1;
                by_size[static_cast<std::size_t>(i - 1)] = add(net, {0}, i * d);
            }
            run_out(net);
            for (int i = 1; i <= k; ++i) {
                CAPTURE(i);
                const TransferRecord* t = by_size[static_cast<std::size_t>(i - 1)];
                REQUIRE(t->ended);
                CHECK(near(t->end, (i - 1) * i / 2.0 * d + (k - i + 1) * i * d));
            }
        }
    }
}

TEST_CASE("a transfer ready midway through another's slows the incumbent too") {
    // Alone over [0, d/2) the first does d/2; then both move at 1/2: the first
    // ends after d more (1.5d), the second has done d/2 by then and ends alone
    // d/2 later (2d). The port carries exactly its bandwidth throughout.
    const double d = 0.004;
    Network net(1);
    TransferRecord* first = add(net, {0}, d, 0);
    TransferRecord* second = add(net, {0}, d, d / 2);
    run_out(net);
    CHECK(near(first->end, 1.5 * d));
    CHECK(near(second->end, 2 * d));
    CHECK(second->start == d / 2);
}

TEST_CASE("the end does not depend on the order transfers are booked in") {
    // The same two transfers as above, booked the other way round.
    const double d = 0.004;
    Network net(1);
    TransferRecord* second = add(net, {0}, d, d / 2);
    TransferRecord* first = add(net, {0}, d, 0);
    run_out(net);
    CHECK(near(first->end, 1.5 * d));
    CHECK(near(second->end, 2 * d));
}

TEST_CASE("max-min fairness: a flow limited elsewhere leaves its share to the others") {
    // Ports p = 0, q = 1. A crosses both; B and C use q; D, E and F use p.
    // p's equal share (1/4) is below q's (1/3), so p fixes A, D, E, F at 1/4;
    // q has 3/4 left for B and C: 3/8 each. All have work d: B and C end at
    // 8d/3; q then carries A alone, still held to 1/4 by p, so A, D, E, F end
    // at 4d.
    const double d = 0.003;
    Network net(2);
    TransferRecord* a = add(net, {0, 1}, d);
    TransferRecord* b = add(net, {1}, d);
    TransferRecord* c = add(net, {1}, d);
    std::vector<TransferRecord*> on_p{add(net, {0}, d), add(net, {0}, d), add(net, {0}, d)};
    REQUIRE(net.step());
    CHECK(near(net.rate(a), 0.25));
    CHECK(near(net.rate(b), 0.375));
    CHECK(near(net.rate(c), 0.375));
    for (auto* t : on_p) CHECK(near(net.rate(t), 0.25));
    run_out(net);
    CHECK(near(b->end, 8 * d / 3));
    CHECK(near(c->end, 8 * d / 3));
    CHECK(near(a->end, 4 * d));
    for (auto* t : on_p) CHECK(near(t->end, 4 * d));
}

TEST_CASE("max-min fairness: the bottleneck port sets the rate, the other port's leftover goes to its other flow") {
    // A on {p, q}, B and C on q, D on p: q's share 1/3 is the smallest, so A,
    // B, C move at 1/3 and D gets p's remaining 2/3. D (work d) ends at 1.5d;
    // nothing changes on q then, so A, B, C end at 3d.
    const double d = 0.002;
    Network net(2);
    TransferRecord* a = add(net, {0, 1}, d);
    TransferRecord* b = add(net, {1}, d);
    TransferRecord* c = add(net, {1}, d);
    TransferRecord* dd = add(net, {0}, d);
    REQUIRE(net.step());
    CHECK(near(net.rate(a), 1.0 / 3));
    CHECK(near(net.rate(dd), 2.0 / 3));
    run_out(net);
    CHECK(near(dd->end, 1.5 * d));
    for (auto* t : {a, b, c}) CHECK(near(t->end, 3 * d));
}

TEST_CASE("transfers on disjoint ports do not interact") {
    const double d = 0.001;
    Network net(4);
    TransferRecord* a = add(net, {0, 1}, d);
    TransferRecord* b = add(net, {2, 3}, 2 * d);
    TransferRecord* c = add(net, {2}, 0, 0.5 * d);  // no work: ends when it starts
    run_out(net);
    CHECK(a->end == d);
    CHECK(b->end == 2 * d);
    CHECK(c->end == 0.5 * d);
}

TEST_CASE("the latency is a delay that takes no bandwidth; only the work is shared") {
    // Two transfers of latency alpha and work w on one port ready together:
    // both end at alpha + 2w (not 2(alpha + w)). One without latency ready
    // with them moves alone for alpha first.
    const double alpha = 1e-4, w = 2e-3;
    {
        Network net(1);
        TransferRecord* x = add(net, {0}, w, 0, alpha);
        TransferRecord* y = add(net, {0}, w, 0, alpha);
        run_out(net);
        CHECK(near(x->end, alpha + 2 * w));
        CHECK(near(y->end, alpha + 2 * w));
    }
    {
        // z alone over [0, alpha) does alpha; then z and x share: z ends at
        // alpha + 2(w - alpha), x has done w - alpha and ends alpha later alone.
        Network net(1);
        TransferRecord* x = add(net, {0}, w, 0, alpha);
        TransferRecord* z = add(net, {0}, w, 0, 0);
        run_out(net);
        CHECK(near(z->end, alpha + 2 * (w - alpha)));
        CHECK(near(x->end, alpha + 2 * (w - alpha) + alpha));
    }
}

TEST_CASE("a transfer queued behind another on a stream starts when that one ends") {
    const double d = 0.002;
    Network net(2);
    TransferRecord* a = add(net, {0}, d, 0, 0, nullptr, 3);
    TransferRecord* b = add(net, {1}, d, 0.0005, 0, a, 3);  // ready at 0.5 ms, but the stream is busy
    CHECK_FALSE(b->began);
    run_out(net);
    CHECK(b->start == d);
    CHECK(b->end == 2 * d);
    // The critical path through b runs back through a to rank 3 at 0.
    CHECK(b->gate == 3);
    CHECK(b->gate_time == 0);
}

TEST_CASE("a transfer may not start before the network's frontier") {
    Network net(1);
    add(net, {0}, 1.0);
    run_out(net);
    CHECK(net.now() == 1.0);
    CHECK_THROWS_AS(add(net, {0}, 1.0, 0.5), std::logic_error);
    // Bad durations are refused, not queued (a NaN end would never come).
    CHECK_THROWS_AS(add(net, {0}, std::nan(""), 2.0), std::invalid_argument);
    CHECK_THROWS_AS(add(net, {0}, 1.0, 2.0, HUGE_VAL), std::invalid_argument);
}

TEST_CASE("in the world, a transfer started earlier in simulated time but booked later slows the one booked first") {
    // Ranks 0 and 1 send to rank 2 (one node: NVLink ports). Rank 0 runs first
    // and books its send at 2 ms; rank 1 books its send at 1 ms after it. Each
    // takes alpha + w alone. Rank 1's moves alone over [1 ms + alpha,
    // 2 ms + alpha), then both at half rate: rank 1's ends at
    // 2 ms + alpha + 2(w - 1 ms) = 2w + alpha; rank 0's has done w - 1 ms by
    // then and ends 1 ms later alone.
    World world(test::small_cluster(1), 3);
    const double S = 1e9;
    const CollectiveCost c = p2p_cost(world.cluster(), S, true);
    const double alpha = c.latency, w = c.seconds - c.latency;
    REQUIRE(w > 0.001);
    std::vector<double> arrivals;
    world.run([&](Device& gpu) -> Task<> {
        if (gpu.rank() == 0) {
            gpu.compute(ops::forward, 0, 0.002);
            gpu.send(2, S, 0);
        } else if (gpu.rank() == 1) {
            gpu.compute(ops::forward, 0, 0.001);
            gpu.send(2, S, 0);
        } else {
            co_await gpu.recv(1, 0);
            arrivals.push_back(gpu.now());
            co_await gpu.recv(0, 0);
            arrivals.push_back(gpu.now());
        }
    });
    REQUIRE(arrivals.size() == 2);
    CHECK(near(arrivals[0], 2 * w + alpha));
    CHECK(near(arrivals[1], 2 * w + alpha + 0.001));
}

TEST_CASE("in the world, collectives on disjoint groups overlap; on shared ports they share") {
    // One node: groups a = {0, 1} and b = {2, 3} use disjoint NVLink ports;
    // c = {1, 2} shares rank 1's port with a and rank 2's with b.
    const double S = 1 * kGiB;
    for (bool with_c : {false, true}) {
        CAPTURE(with_c);
        World world(test::small_cluster(1), 4);
        Group& a = world.group({0, 1}, "a");
        Group& b = world.group({2, 3}, "b");
        Group& c = world.group({1, 2}, "c");
        std::vector<Transfer> got(3);
        world.run([&](Device& gpu) -> Task<> {
            const int r = gpu.rank();
            const Transfer t = co_await gpu.all_reduce_start(r <= 1 ? a : b, S, 0);  // comm stream
            got[r <= 1 ? 0 : 1] = t;
            if (with_c && (r == 1 || r == 2)) got[2] = co_await gpu.all_reduce(c, S, 1);  // compute stream
        });
        const CollectiveCost cost = a.cost(Collective::all_reduce, S);
        const double alpha = cost.latency, w = cost.seconds - cost.latency;
        if (!with_c) {
            CHECK(got[0].end() == cost.seconds);
            CHECK(got[1].end() == cost.seconds);
        } else {
            // Ports 1 and 2 carry two flows each: max-min gives all three 1/2
            // (port 0 and port 3 have room to spare, but a and b are held by 1 and 2).
            for (const Transfer& t : got) CHECK(near(t.end(), alpha + 2 * w));
        }
    }
}

TEST_CASE("a rank waiting for a transfer that a member never started is a diagnosed deadlock") {
    World world(test::small_cluster(1), 3);
    Group& g = world.group({0, 1, 2}, "trio");
    try {
        world.run([&](Device& gpu) -> Task<> {
            if (gpu.rank() == 2) co_return;  // never joins
            const Transfer t = co_await gpu.all_reduce_start(g, 1e6, 3);
            co_await gpu.wait(t);
        });
        FAIL("no deadlock reported");
    } catch (const DeadlockError& e) {
        const std::string msg = e.what();
        CAPTURE(msg);
        CHECK(msg.find("deadlock: 2 of 3 ranks are blocked") == 0);
        CHECK(msg.find("rank 0 waits in the end of all_reduce layer 3 (collective #0 on trio), which rank(s) {2} "
                       "never called") != std::string::npos);
        CHECK(msg.find("rank 1 waits in the end of all_reduce layer 3") != std::string::npos);
    }
}

TEST_CASE("a blocking collective a member never calls is a diagnosed deadlock") {
    World world(test::small_cluster(1), 2);
    Group& g = world.everyone();
    try {
        world.run([&](Device& gpu) -> Task<> {
            if (gpu.rank() == 0) co_await gpu.all_reduce(g, 1e6, 1);
            else co_await gpu.recv(0, 0);
        });
        FAIL("no deadlock reported");
    } catch (const DeadlockError& e) {
        const std::string msg = e.what();
        CAPTURE(msg);
        CHECK(msg.find("rank 0 waits in the end of all_reduce layer 1 (collective #0 on world), which rank(s) {1} "
                       "never called") != std::string::npos);
        CHECK(msg.find("rank 1 waits in receive") != std::string::npos);
    }
}

TEST_CASE("a run that ends with a collective not every member called is an error") {
    World world(test::small_cluster(1), 2);
    Group& g = world.everyone();
    CHECK_THROWS_WITH_AS(world.run([&](Device& gpu) -> Task<> {
        if (gpu.rank() == 0) (void)co_await gpu.all_gather_start(g, 1e6, 2);
    }),
                         doctest::Contains("all_gather layer 2 (collective #0 on world), which rank(s) {1} never called"),
                         DeadlockError);
}

TEST_CASE("traces are byte-identical across runs") {
    using namespace dtsim::hw::test;
    for (const char* name : {"ddp", "fsdp"}) {
        CAPTURE(name);
        const json doc{{"cluster", realistic_cluster(2)},
                       {"model", small_model(4, 32000)},
                       {"training", {{"global_batch", 32}, {"micro_batch", 1}}},
                       {"strategy", {{"name", name}, {"dp", 16}, {"bucket_MiB", 25}}}};
        std::string out[2];
        for (auto& o : out) {
            const RunResult r = simulate(parse_config(doc, "test.json"));
            std::ostringstream s;
            dtsim::write_trace_json(r.trace, s);
            o = s.str();
        }
        CHECK(out[0].size() > 1000);
        CHECK(out[0] == out[1]);
    }
}

TEST_CASE("done() says whether a transfer has ended by the compute clock, waiting for the network only when it must") {
    World world(test::small_cluster(1), 2);
    Group& all = world.everyone();
    const double S = 64 * kMiB;
    const double d = all.cost(Collective::all_reduce, S).seconds;
    std::vector<int> early(2), late(2);
    world.run([&](Device& gpu) -> Task<> {
        const Transfer t = co_await gpu.all_reduce_start(all, S, 0);
        gpu.compute(ops::backward, 0, d / 2);
        // It cannot end before d: no need to wait for the network.
        early[static_cast<std::size_t>(gpu.rank())] = co_await gpu.done(t);
        gpu.compute(ops::backward, 1, d);
        // It may have ended by 1.5 d, which only the network can tell.
        late[static_cast<std::size_t>(gpu.rank())] = co_await gpu.done(t);
        CHECK(t.ended());
    });
    for (int r = 0; r < 2; ++r) {
        CHECK(early[static_cast<std::size_t>(r)] == 0);
        CHECK(late[static_cast<std::size_t>(r)] == 1);
    }
}

TEST_CASE("events of transfers whose end was unknown when recorded get their times; recording off has none") {
    double step[2];
    std::size_t events[2];
    for (bool on : {true, false}) {
        World world(test::small_cluster(2), 8);
        world.set_recording(on);
        Group& all = world.everyone();
        std::vector<Transfer> reduce(8), sent(8);
        world.run([&](Device& gpu) -> Task<> {
            const auto r = static_cast<std::size_t>(gpu.rank());
            reduce[r] = co_await gpu.all_reduce_start(all, 1e8, 0);
            sent[r] = gpu.send((gpu.rank() + 4) % 8, 1e8, 0);  // shares the NICs with the all-reduce
            co_await gpu.recv((gpu.rank() + 4) % 8, 0);
            co_await gpu.wait(reduce[r]);
        });
        step[on] = world.step_time();
        const dtsim::Trace t = world.take_trace();
        events[on] = 0;
        for (const auto& r : t.ranks) events[on] += r.events.size();
        if (on)
            for (std::size_t r = 0; r < 8; ++r) {
                const auto& ev = t.ranks[r].events;
                REQUIRE(ev.size() == 3);
                CHECK(ev[0].start == reduce[r].start());
                CHECK(ev[0].end() == doctest::Approx(reduce[r].end()).epsilon(1e-15));
                CHECK(ev[1].start == sent[r].start());
                CHECK(ev[1].end() == doctest::Approx(sent[r].end()).epsilon(1e-15));
                CHECK(ev[1].end() > ev[1].start + p2p_cost(world.cluster(), 1e8, false).seconds);  // slowed
            }
    }
    CHECK(step[0] == step[1]);
    CHECK(events[1] == 8 * 3);
    CHECK(events[0] == 0);
}

TEST_CASE("arrivals queued behind different transfers each fold in once, when theirs ends") {
    // Every rank starts its node's all-reduce, then the world's, both on its
    // communication stream: the world's all-reduce waits for every node's.
    // Ranks are ready at scattered times, so the node all-reduces end in no
    // particular order; the world's starts at the last end, and its critical
    // path runs back through that node's all-reduce to its last-ready member.
    const int nodes = 16, per = 4, n = nodes * per;
    World world(test::small_cluster(nodes), n);
    std::vector<Group*> node;
    for (int k = 0; k < nodes; ++k) {
        std::vector<int> m;
        for (int i = 0; i < per; ++i) m.push_back(k * per + i);
        node.push_back(&world.group(std::move(m), "node" + std::to_string(k)));
    }
    auto delay = [&](int r) { return ((r * 37) % n) * 1e-4; };  // a permutation of 0..n-1 (37 is prime to 64)
    std::vector<Transfer> local(n), global(n);
    const double S = 64 * kMiB;
    world.run([&](Device& gpu) -> Task<> {
        const int r = gpu.rank();
        gpu.compute(ops::forward, 0, delay(r));
        local[r] = co_await gpu.all_reduce_start(*node[r / per], S);
        global[r] = co_await gpu.all_reduce_start(world.everyone(), S);
        co_await gpu.wait(global[r]);
    });
    const CollectiveCost c = node[0]->cost(Collective::all_reduce, S);
    double last_end = -1;
    int last_gate = -1;
    for (int k = 0; k < nodes; ++k) {
        int gate = k * per;
        for (int i = 0; i < per; ++i)
            if (delay(k * per + i) > delay(gate)) gate = k * per + i;
        const Transfer& t = local[k * per];
        CHECK(t.start() == delay(gate));
        CHECK(t.gate() == gate);
        CHECK(t.end() == delay(gate) + c.seconds);  // disjoint ports: nothing to share
        if (t.end() > last_end) last_end = t.end(), last_gate = gate;
    }
    const Transfer& g = global[0];
    CHECK(g.start() == last_end);
    CHECK(g.gate() == last_gate);  // through the stream that held it back
    CHECK(g.gate_time() == delay(last_gate));
    CHECK(near(g.end(), last_end + world.everyone().cost(Collective::all_reduce, S).seconds));
    for (const Transfer& t : global) CHECK(t.record() == g.record());
}

TEST_CASE("a transfer on no ports contends with nothing and ends at start + latency + work") {
    Network net(1);
    TransferRecord* busy = add(net, {0}, 1.0);
    TransferRecord* t = add(net, {}, 0.25, 0.5, 0.125);
    run_out(net);
    CHECK(t->began);
    CHECK(t->ended);
    CHECK(t->start == 0.5);
    CHECK(t->end == 0.5 + 0.125 + 0.25);
    CHECK(busy->end == 1.0);
}

TEST_CASE("ports are full duplex: opposite sends do not interact; sends into one destination share its receive port") {
    const double S = 1e9;
    struct Case {
        const char* what;
        std::vector<std::pair<int, int>> sends;  // (src, dst), all at time 0
        int shared;                              // sends sharing one port
    };
    for (const Case& k : {Case{"0->1 and 1->0", {{0, 1}, {1, 0}}, 1}, Case{"0->1 and 2->0", {{0, 1}, {2, 0}}, 1},
                          Case{"1->0 and 2->0", {{1, 0}, {2, 0}}, 2}}) {
        CAPTURE(std::string(k.what));
        World world(test::small_cluster(1), 3);
        std::vector<Transfer> sent;
        world.run([&](Device& gpu) -> Task<> {
            for (std::size_t i = 0; i < k.sends.size(); ++i)
                if (k.sends[i].first == gpu.rank()) sent.push_back(gpu.send(k.sends[i].second, S, static_cast<int>(i)));
            for (std::size_t i = 0; i < k.sends.size(); ++i)
                if (k.sends[i].second == gpu.rank()) co_await gpu.recv(k.sends[i].first, static_cast<int>(i));
        });
        const CollectiveCost c = p2p_cost(world.cluster(), S, true);
        REQUIRE(sent.size() == 2);
        for (const Transfer& t : sent) CHECK(near(t.end(), c.latency + k.shared * (c.seconds - c.latency)));
    }
}

TEST_CASE("what one rank transmits shares its transmit port") {
    // A rank's sends are FIFO on its send stream, so the second flow out of
    // rank 0 is a collective on {0, 2} (it transmits and receives on every
    // member). The send has no latency and takes w = S / 100 GB/s; the
    // all-reduce waits its latency a (NCCL's), then moves S / 200 GB/s = w / 2.
    // The send moves alone until a, then both at 1/2 on rank 0's transmit
    // port: the all-reduce ends at a + w, when the send has w / 2 - a left,
    // so the send ends at 1.5 w.
    Cluster cl = test::small_cluster(1);
    cl.base_latency = 0;
    cl.intra_node.hop_latency = cl.inter_node.hop_latency = 0;
    World world(cl, 3);
    Group& pair = world.group({0, 2}, "pair");
    const double S = 1e9, w = S / cl.intra_node.p2p_bandwidth;
    const CollectiveCost c = pair.cost(Collective::all_reduce, S);
    const double a = c.latency;
    REQUIRE(near(c.seconds - a, w / 2));
    REQUIRE(a > 0);
    REQUIRE(a < w / 2);
    Transfer sent, reduced;
    world.run([&](Device& gpu) -> Task<> {
        if (gpu.rank() == 0) sent = gpu.send(1, S, 0);
        if (gpu.rank() == 1) co_await gpu.recv(0, 0);
        if (gpu.rank() != 1) {
            const Transfer t = co_await gpu.all_reduce(pair, S);
            if (gpu.rank() == 0) reduced = t;
        }
    });
    CHECK(near(reduced.end(), a + w));
    CHECK(std::abs(sent.end() - 1.5 * w) <= 1e-12 * w);
}

TEST_CASE("weighted max-min: a flow using a fraction of a port leaves the rest to the others") {
    // Flow x uses port 0 at weight 1/2 (and port 1 at 1); y uses port 0 at 1.
    // Rates rise together until port 0 saturates: r/2 + r = 1, r = 2/3.
    const double d = 0.003;
    Network net(2);
    static const std::vector<int> xp{0, 1};
    static const std::vector<double> xw{0.5, 1};
    TransferRecord* x = net.create();
    const Arrival a{0, 0, nullptr};
    net.arm(x, xp, xw, 0, 2 * d, std::span<const Arrival>(&a, 1));
    TransferRecord* y = add(net, {0}, d);
    net.step();
    CHECK(near(net.rate(x), 2.0 / 3));
    CHECK(near(net.rate(y), 2.0 / 3));
    run_out(net);
    CHECK(near(y->end, 1.5 * d));
    // x did d by then, and the other d alone at full rate.
    CHECK(near(x->end, 2.5 * d));
    // Alone on ports of weight < 1 a flow still runs at most at its full rate.
    Network alone(1);
    static const std::vector<int> zp{0};
    static const std::vector<double> zw{0.25};
    TransferRecord* z = alone.create();
    alone.arm(z, zp, zw, 0, d, std::span<const Arrival>(&a, 1));
    alone.step();
    CHECK(alone.rate(z) == 1);
    run_out(alone);
    CHECK(z->end == d);
}

TEST_CASE("a 2-node all-reduce held back by the network takes only its share of NVLink from a tensor-parallel one") {
    // Group big = 8 ranks on 2 nodes (4 each), NCCL's ring: bus bandwidth
    // min(4 x 25, 200 x 4/3) = 100 GB/s (a GPU's NVLink carries 3 of a node's
    // 4 ring channels), so it uses NVLink at weight 100 / 266.7 = 3/8. Group tp
    // = ranks 0..3 (NVLink, weight 1). Each waits its latency first (not
    // shared); tp, the shorter, then moves alone until big's latency is over.
    // Both moving: NVLink ports of ranks 0..3 hold r + 3/8 r = 1, r = 8/11
    // each (without weights, 1/2 each). tp ends after its remaining work at r;
    // big has done r times that time by then and moves the rest at full rate.
    const Cluster cl = test::small_cluster(2);
    World world(cl, 8);
    Group& big = world.group({0, 1, 2, 3, 4, 5, 6, 7}, "big");
    Group& tp = world.group({0, 1, 2, 3}, "tp");
    const double S_big = 1 * kGiB, S_tp = 64 * kMiB;
    const CollectiveCost cb = big.cost(Collective::all_reduce, S_big), ct = tp.cost(Collective::all_reduce, S_tp);
    const double a_big = cb.latency, w_big = cb.seconds - cb.latency;
    const double a_tp = ct.latency, w_tp = ct.seconds - ct.latency;
    REQUIRE(near(w_big, 2 * 7.0 / 8 * S_big / 100e9));
    REQUIRE(near(w_tp, 2 * 3.0 / 4 * S_tp / 200e9));
    REQUIRE(a_tp < a_big);
    REQUIRE(w_tp > a_big - a_tp);
    const LevelSeconds t = level_seconds(cl, Collective::all_reduce, S_big, big.shape());
    CHECK(near(t.inter_node, w_big));
    CHECK(near(t.intra_node, w_big * 3 / 8));
    const double r = 1 / (1 + 3.0 / 8);
    const double shared = (w_tp - (a_big - a_tp)) / r;  // both moving
    REQUIRE(r * shared < w_big);
    Transfer b, s;
    world.run([&](Device& gpu) -> Task<> {
        const Transfer x = co_await gpu.all_reduce_start(big, S_big);
        if (gpu.rank() == 0) b = x;
        if (gpu.rank() < 4) {
            const Transfer y = co_await gpu.all_reduce(tp, S_tp);
            if (gpu.rank() == 0) s = y;
        }
    });
    CHECK(std::abs(s.end() - (a_big + shared)) <= 1e-9 * s.end());
    CHECK(std::abs(b.end() - (a_big + shared + w_big - r * shared)) <= 1e-9 * b.end());
}

TEST_CASE("recording is set before run()") {
    World world(test::small_cluster(1), 2);
    world.set_recording(false);
    world.run([&](Device& gpu) -> Task<> {
        CHECK_THROWS_AS(world.set_recording(true), std::logic_error);
        gpu.compute(ops::forward, 0, 0.001);
        co_return;
    });
    CHECK_THROWS_AS(world.set_recording(true), std::logic_error);
    CHECK_FALSE(world.recording());
}

TEST_CASE("records are reused once no handle holds them; a held one keeps its times, even past the world") {
    // Rank 0 sends 1,000 messages to rank 1, each once the last has arrived;
    // only the first send's handle is kept.
    Transfer first;
    std::size_t records = 0;
    double first_end = 0;
    {
        World world(test::small_cluster(1), 2);
        world.run([&](Device& gpu) -> Task<> {
            for (int i = 0; i < 1000; ++i) {
                if (gpu.rank() == 0) {
                    const Transfer t = gpu.send(1, 1e6, i);
                    if (i == 0) first = t;
                    co_await gpu.wait(t);
                } else {
                    co_await gpu.recv(0, i);
                }
            }
        });
        records = world.network().records();
        first_end = p2p_cost(world.cluster(), 1e6, true).seconds;
    }
    CHECK(records < 10);
    // The world is gone; the handle still reads its record.
    CHECK(first.ended());
    CHECK(first.start() == 0);
    CHECK(near(first.end(), first_end));
}
