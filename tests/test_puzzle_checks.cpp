// Every check of the puzzle world is a typed error that names the rank, the
// operation, the layer and what was expected.
#include "dtsim/puzzle/registry.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <new>
#include <string>
#include <tuple>
#include <vector>

using namespace dtsim;
using namespace dtsim::puzzle;

namespace {

// Runs `body` on `ranks` ranks of a 2-layer, 2-batch puzzle and returns the error text.
template <class F>
std::string error_of(F body, int ranks = 1, int layers = 2, int batches = 2) {
    static F* current;
    current = &body;
    try {
        run_strategy([](Model& m) -> Task<> { co_await (*current)(m); }, layers, batches, ranks);
    } catch (const PuzzleError& e) {
        return e.what();
    }
    return "no error";
}

}  // namespace

TEST_CASE("forward checks the weight and the input") {
    CHECK(error_of([](Model& m) -> Task<> {
              auto [w, o] = m.load_weights(0, 0, 2);
              m.forward(0, m.get_activation({0}), w);
              co_return;
          }) == "rank 0: forward (layer 0): weight is incomplete (Weight(layer 0, step 0, shards {0} of 2)); "
                "allgather it first");
    CHECK(error_of([](Model& m) -> Task<> {
              auto [w, o] = m.load_weights(1);
              m.forward(0, m.get_activation({0}), w);
              co_return;
          }) == "rank 0: forward (layer 0): weight should be layer 0, got Weight(layer 1, step 0)");
    CHECK(error_of([](Model& m) -> Task<> {
              auto [w, o] = m.load_weights(1);
              m.forward(1, m.get_activation({0}), w);
              co_return;
          }) == "rank 0: forward (layer 1): input should be layer 1, got Activation(layer 0, batches {0})");
}

TEST_CASE("backward checks weight, input, batches and gradient layer") {
    auto setup = [](Model& m) {
        auto [w, o] = m.load_weights(1);
        return w;
    };
    CHECK(error_of([&](Model& m) -> Task<> {
              m.backward(1, Activation{1, IdSet{0}}, ActivationGrad{1, IdSet{1}}, setup(m));
              co_return;
          }) == "rank 0: backward (layer 1): batch mismatch: activation has batches {0}, activation grad has {1}");
    CHECK(error_of([&](Model& m) -> Task<> {
              m.backward(1, Activation{1, IdSet{0}}, ActivationGrad{0, IdSet{0}}, setup(m));
              co_return;
          }) == "rank 0: backward (layer 1): activation grad should be layer 1, got ActivationGrad(layer 0, batches {0})");
    CHECK(error_of([&](Model& m) -> Task<> {
              m.backward(1, Activation{0, IdSet{0}}, ActivationGrad{1, IdSet{0}}, setup(m));
              co_return;
          }) == "rank 0: backward (layer 1): input should be layer 1, got Activation(layer 0, batches {0})");
    CHECK(error_of([&](Model& m) -> Task<> {
              m.backward(0, Activation{0, IdSet{0}}, ActivationGrad{0, IdSet{0}}, setup(m));
              co_return;
          }) == "rank 0: backward (layer 0): weight should be layer 0, got Weight(layer 1, step 0)");
    CHECK(error_of([&](Model& m) -> Task<> {
              auto [w, o] = m.load_weights(1, 1, 2);
              m.backward(1, Activation{1, IdSet{0}}, ActivationGrad{1, IdSet{0}}, w);
              co_return;
          }).starts_with("rank 0: backward (layer 1): weight is incomplete"));
}

TEST_CASE("loss needs the final layer's activation") {
    CHECK(error_of([](Model& m) -> Task<> {
              m.loss(Activation{1, IdSet{0}});
              co_return;
          }) == "rank 0: loss (layer 2): input should be the final layer 2, got Activation(layer 1, batches {0})");
}

TEST_CASE("update checks layers, batches, shards and steps") {
    auto grad = [](int layer, IdSet b, IdSet shards = IdSet::single(0), int total = 1) {
        return WeightGrad{layer, std::move(b), std::move(shards), total};
    };
    CHECK(error_of([&](Model& m) -> Task<> {
              auto [w, o] = m.load_weights(0);
              m.update(0, grad(0, IdSet{1}), w, o);
              co_return;
          }) == "rank 0: update (layer 0): weight grad must cover exactly batches 0..1, it has {1}");
    CHECK(error_of(
              [&](Model& m) -> Task<> {
                  auto [w, o] = m.load_weights(0);
                  m.update(0, grad(0, IdSet{0}), w, o);
                  co_return;
              },
              1, 2, 0) == "rank 0: update (layer 0): weight grad must cover no batch (there are none), it has {0}");
    CHECK(error_of(
              [&](Model& m) -> Task<> {
                  auto [w, o] = m.load_weights(0);
                  m.update(0, grad(0, IdSet{}), w, o);
                  m.require(false, "an update of no batch passes when there are none");
                  co_return;
              },
              1, 2, 0) == "rank 0: assert: an update of no batch passes when there are none");
    CHECK(error_of([&](Model& m) -> Task<> {
              auto [w, o] = m.load_weights(0);
              m.update(1, grad(1, IdSet{0, 1}), w, o);
              co_return;
          }) == "rank 0: update (layer 1): weight should be layer 1, got Weight(layer 0, step 0)");
    CHECK(error_of([&](Model& m) -> Task<> {
              auto [w, o] = m.load_weights(0);
              m.update(0, grad(1, IdSet{0, 1}), w, o);
              co_return;
          }) == "rank 0: update (layer 0): grad weight should be layer 0, got WeightGrad(layer 1, batches {0,1})");
    CHECK(error_of([&](Model& m) -> Task<> {
              auto [w, o] = m.load_weights(0);
              auto [w1, o1] = m.load_weights(1);
              m.update(0, grad(0, IdSet{0, 1}), w, o1);
              co_return;
          }) == "rank 0: update (layer 0): optimizer state should be layer 0, got OptState(layer 1, step 0)");
    CHECK(error_of([&](Model& m) -> Task<> {
              auto [w, o] = m.load_weights(0, 1, 4);
              m.update(0, grad(0, IdSet{0, 1}, IdSet::single(0), 4), w, o);
              co_return;
          }) == "rank 0: update (layer 0): weight Weight(layer 0, step 0, shards {1} of 4) is not within the "
                "weight grad's shards {0} of 4");
    CHECK(error_of([&](Model& m) -> Task<> {
              auto [w, o] = m.load_weights(0, 1, 4);
              auto w2 = Weight{0, 0, IdSet::single(0), 4};
              m.update(0, grad(0, IdSet{0, 1}, IdSet::single(0), 4), w2, o);
              co_return;
          }) == "rank 0: update (layer 0): optimizer state OptState(layer 0, step 0, shards {1} of 4) is not "
                "within the weight grad's shards {0} of 4");
    CHECK(error_of([&](Model& m) -> Task<> {
              auto [w, o] = m.load_weights(0);
              auto [w2, o2] = m.update(0, grad(0, IdSet{0, 1}), w, o);
              m.update(0, grad(0, IdSet{0, 1}), w2, o);
              co_return;
          }) == "rank 0: update (layer 0): weight is at step 1 but optimizer state at step 0");
}

TEST_CASE("load_weights rejects shards outside the total") {
    CHECK(error_of([](Model& m) -> Task<> {
              (void)m.load_weights(0, 4, 4);
              co_return;
          }) == "rank 0: load_weights (layer 0): shard 4 of 4: expected 0 <= shard < total");
    CHECK(error_of([](Model& m) -> Task<> {
              (void)m.load_weights(2);
              co_return;
          }) == "rank 0: load_weights (layer 2): layer must be in [0, 2)");
}

TEST_CASE("reading a missing store entry is a KeyError naming the store and key") {
    CHECK(error_of([](Model& m) -> Task<> {
              auto [weights, opt_states, activations, grad_activations, grad_weights] = m.storage();
              tie(weights[0], opt_states[0]) = m.load_weights(0);
              m.forward(0, activations[{0, 1}], weights[0]);
              co_return;
          }) == "rank 0: activations: no entry (0, 1) (KeyError)");
    CHECK(error_of([](Model& m) -> Task<> {
              del(m.grad_weights[3]);
              co_return;
          }) == "rank 0: grad_weights: no entry 3 (KeyError)");
}

TEST_CASE("collectives check the values they combine, naming the arriving rank") {
    CHECK(error_of(
              [](Model& m) -> Task<> {
                  co_await m.allreduce(WeightGrad{m.rank, IdSet{m.rank}}, 0);
              },
              2) == "rank 1: allreduce (layer 0): only weight grads of the same layer add up: layer 0 + layer 1");
    CHECK(error_of(
              [](Model& m) -> Task<> {
                  co_await m.allgather(Weight{0, 0, IdSet::single(m.rank), 2 + m.rank}, 0);
              },
              2) == "rank 1: allgather (layer 0): cannot combine weight shards of 2 with shards of 3");
    CHECK(error_of(
              [](Model& m) -> Task<> {
                  co_await m.scatterreduce(WeightGrad{0, IdSet{m.rank}, IdSet::single(m.rank), 2}, 0);
              },
              2) == "rank 1: scatterreduce (layer 0): weight grads add up only with the same shards: {0} of 2 + {1} of 2");
    CHECK(error_of(
              [](Model& m) -> Task<> {
                  co_await m.scatterreduce(WeightGrad{0, IdSet{m.rank}, IdSet::single(0), 2}, 0);
              },
              2)
               == "rank 1: scatterreduce (layer 0): the sum WeightGrad(layer 0, batches {0,1}, shards {0} of 2) "
                    "cannot be sharded: cannot shard an incomplete weight grad (shards {0} of 2)");
}

TEST_CASE("receiving a value of another type than expected is an error") {
    CHECK(error_of(
              [](Model& m) -> Task<> {
                  if (m.rank == 0) {
                      co_await m.pass_to(1, ActivationGrad{1, IdSet{0}});
                  } else {
                      m.activations[1] = co_await m.receive();
                  }
              },
              2)
              .starts_with("rank 1: receive: received a message from rank 0 that is not of the expected type"));
}

TEST_CASE("an assertion in a strategy names its rank") {
    CHECK(error_of([](Model& m) -> Task<> {
              m.require(len(m.activations) == 1, "one activation expected");
              co_return;
          }) == "rank 0: assert: one activation expected");
}

TEST_CASE("the final check names the layer that is wrong") {
    auto check_of = [](Strategy s, int ranks) {
        return run_strategy(s, 2, 2, ranks).check_error.value_or("correct");
    };
    CHECK(check_of([](Model&) -> Task<> { co_return; }, 1) == "layer 0: no rank set a final weight (missing weight)");
    CHECK(check_of(
              [](Model& m) -> Task<> {
                  auto [w, o] = m.load_weights(0);
                  m.set_final_weight(0, w);
                  co_return;
              },
              1) == "layer 0: rank 0 set a final weight at step 0, expected step 1");
    CHECK(check_of(
              [](Model& m) -> Task<> {
                  for (int l = 0; l < 2; ++l) {
                      auto w = m.load_weights(l, 0, 2).first;  // both ranks hold shard 0
                      w.step = 1;
                      m.set_final_weight(l, w);
                  }
                  co_return;
              },
              2) == "layer 0: the final weights cover shards {0} of 2, not all of them");
}

TEST_CASE("memory counts what the stores hold, shards as exact fractions") {
    auto r = run_strategy(
        [](Model& m) -> Task<> {
            for (int s = 0; s < 3; ++s) tie(m.weights[s], m.opt_states[s]) = m.load_weights(0, s, 7);
            m.activations[0] = m.get_activation({0, 1});
            m.forward(0, m.activations[0], Weight{0});  // event memory: 6/7 weight + 2 batches
            m.require(std::abs(m.memory() - (6.0 / 7 * 262144 + 2 * 131072)) < 1e-6, "memory before del");
            del(m.weights[0], m.weights[1], m.weights[2], m.opt_states[0], m.opt_states[1], m.opt_states[2]);
            m.require(m.memory() == 2 * 131072, "shards free exactly");
            co_return;
        },
        1, 1, 2);
    CHECK(r.trace.ranks[0].events[0].memory == doctest::Approx(6.0 / 7 * 262144 + 262144));
}

TEST_CASE("memory stays exact across several shard totals; stores grow past the reserved layers") {
    // Shards of 3, 5 and 7 at once (the meter keeps one denominator inline and
    // the others apart); keys far past the layers and pair keys (the hashed part).
    auto r = run_strategy(
        [](Model& m) -> Task<> {
            const double w = 262144;  // one layer's weight, in units
            tie(m.weights[0], m.opt_states[0]) = m.load_weights(0, 0, 3);
            tie(m.weights[1], m.opt_states[1]) = m.load_weights(0, 1, 5);
            tie(m.weights[2], m.opt_states[2]) = m.load_weights(0, 2, 7);
            m.require(std::abs(m.memory() - 2 * w * (1.0 / 3 + 1.0 / 5 + 1.0 / 7)) < 1e-6, "three totals");
            m.weights[500] = m.weights[2];  // past the reserved layers: the array grows
            m.weights[{0, 9}] = m.weights[1];
            m.weights[{1, 9}] = m.weights[0];
            m.require(len(m.weights) == 6, "six weights stored");
            m.require(m.weights[500]->total == 7 && m.weights[{1, 9}]->total == 3, "values kept");
            del(m.weights[0], m.weights[1], m.weights[2], m.weights[500], m.weights[{0, 9}], m.weights[{1, 9}]);
            del(m.opt_states[0], m.opt_states[1], m.opt_states[2]);
            m.require(m.memory() == 0 && len(m.weights) == 0, "everything freed exactly");
            m.require(!m.weights.contains({0, 9}) && !m.weights.contains(500), "entries gone");
            // Many pair keys: the table grows several times; erasing in another
            // order than inserting keeps every other key reachable. Batch sets
            // of two intervals own heap memory, which moves with the slots.
            for (int l = 0; l < 40; ++l) m.activations[{l, -l}] = m.get_activation({l, l + 2});
            for (int l = 0; l < 40; l += 3) del(m.activations[{l, -l}]);
            for (int l = 0; l < 40; ++l)
                m.require(m.activations.contains({l, -l}) == (l % 3 != 0), "pair key " + std::to_string(l));
            for (int l = 1; l < 40; l += 3)
                m.require(m.activations[{l, -l}]->batches == IdSet{l, l + 2}, "value behind pair key " + std::to_string(l));
            co_return;
        },
        1, 1, 1);
    CHECK(r.trace.ranks[0].events.empty());
}

TEST_CASE("a run's stores keep layer keys in its arena, rank by rank; a key past the arena moves them out") {
    // Three ranks, so entries of neighbouring ranks sit side by side; batch
    // sets of several intervals own heap memory, which the arena or the
    // store must free exactly once (the sanitizer build checks it).
    auto r = run_strategy(
        [](Model& m) -> Task<> {
            const int me = m.rank;
            auto batches = [me](int k) { return IdSet{me, me + 2, 10 + k}; };
            for (int k = 0; k <= m.LAYERS; ++k) m.activations[k] = m.get_activation(batches(k));
            for (int k = 0; k <= m.LAYERS; ++k)
                m.require(m.activations[k]->batches == batches(k), "arena entry " + std::to_string(k));
            if (me == 1) {
                m.activations[7] = m.get_activation(batches(7));  // past the arena: an arena of its own
                for (int k = 0; k <= m.LAYERS; ++k)
                    m.require(m.activations[k]->batches == batches(k), "moved entry " + std::to_string(k));
                m.require(len(m.activations) == static_cast<std::size_t>(m.LAYERS) + 2, "count after the move");
            }
            if (me == 2) del(m.activations[0]);
            co_await m.allreduce(m.fake_grad(0, {me}), 0);  // the ranks' entries interleave in time too
            for (int k = me == 2 ? 1 : 0; k <= m.LAYERS; ++k)
                m.require(m.activations[k]->batches == batches(k), "after the collective " + std::to_string(k));
        },
        2, 3, 3);
    CHECK(r.check_error.has_value());  // no final weights: the schedule is incomplete, the stores are what is tested
}

// More plain keys than a store holds: a clear error, not a short allocation.
template <class V>
void reserve_past_limit(Store<V>& s) {
    s.reserve((std::size_t{1} << 32) + 3);
}

// Two ranks' activation stores attached to one arena of `keys` keys, each
// rank with a memory meter of its own (the arena is a member before the
// stores: it outlives them).
struct TwoRanksInAnArena {
    explicit TwoRanksInAnArena(std::uint32_t keys) : arena(2, keys) {
        a.attach(arena, 0);
        b.attach(arena, 1);
    }
    [[nodiscard]] double memory() const { return meter0.value() + meter1.value(); }
    MemoryMeter meter0, meter1;
    const StoreContext ctx0{&meter0, &puzzle_costs(), 0};
    const StoreContext ctx1{&meter1, &puzzle_costs(), 1};
    dtsim::detail::StoreArena<Activation> arena;
    Store<Activation> a{&ctx0};
    Store<Activation> b{&ctx1};
};

TEST_CASE("pair keys {a, 0} have entries in the arena, rank by rank; the others are hashed") {
    // Batch sets of two intervals own heap memory: the sanitizer build checks
    // that every move between pair-key entries, tables and arenas frees each exactly once.
    TwoRanksInAnArena two(3);
    Store<Activation>& a = two.a;
    Store<Activation>& b = two.b;
    const auto act = [](int id) { return Activation{0, IdSet{id, id + 5}}; };
    a[{0, 0}] = act(1);   // paired
    b[{0, 0}] = act(2);   // the same key on the next rank: its own entry
    a[{2, 0}] = act(3);   // paired, the arena's last key
    a[{3, 0}] = act(4);   // past the arena's keys: hashed
    a[{1, 1}] = act(5);   // {a, b} with b > 0: hashed
    a[{1, -1}] = act(6);  // hashed
    a[1] = act(7);        // plain
    CHECK(a.get({0, 0}).batches == IdSet{1, 6});
    CHECK(b.get({0, 0}).batches == IdSet{2, 7});
    CHECK(a.get({2, 0}).batches == IdSet{3, 8});
    CHECK(a.get({1, 1}).batches == IdSet{5, 10});
    CHECK(len(a) == 6);
    CHECK(len(b) == 1);
    CHECK_FALSE(a.contains({1, 0}));
    CHECK_FALSE(b.contains({2, 0}));
    std::vector<std::pair<int, int>> keys;
    a.for_each([&](const Key& k, const Activation&) { keys.emplace_back(k.a, k.b); });
    REQUIRE(keys.size() == 6);
    // Plain keys, then paired keys, then the hashed ones (in the table's order).
    CHECK(keys[0] == std::pair{1, Key::kNone});
    CHECK(keys[1] == std::pair{0, 0});
    CHECK(keys[2] == std::pair{2, 0});
    del(a[{0, 0}]);
    CHECK_FALSE(a.contains({0, 0}));
    CHECK(len(a) == 5);
    CHECK(b.get({0, 0}).batches == IdSet{2, 7});
    a[{0, 0}] = act(8);  // an erased paired key stored again
    a[{0, 0}] = act(9);  // and replaced
    CHECK(a.get({0, 0}).batches == IdSet{9, 14});
    CHECK(len(a) == 6);
    // A plain key past the arena: a's plain and paired keys move to an arena of
    // its own, with the same pair keys (the hashed ones stay hashed).
    a[5] = act(10);
    CHECK(a.get({0, 0}).batches == IdSet{9, 14});
    CHECK(a.get({2, 0}).batches == IdSet{3, 8});
    CHECK(a.get({3, 0}).batches == IdSet{4, 9});
    CHECK(a.get({1, 1}).batches == IdSet{5, 10});
    CHECK(a.get(1).batches == IdSet{7, 12});
    CHECK(a.get(5).batches == IdSet{10, 15});
    CHECK(len(a) == 7);
    CHECK(len(b) == 1);
    CHECK(b.get({0, 0}).batches == IdSet{2, 7});  // b's entries stay in the run's arena
    a[{1, 0}] = act(11);  // a paired key in a's own arena
    CHECK(a.get({1, 0}).batches == IdSet{11, 16});
    CHECK(len(a) == 8);
    CHECK_THROWS_AS(del(b[{2, 0}]), PuzzleError);  // missing where pair keys have entries
    CHECK_THROWS_AS(reserve_past_limit(a), std::length_error);
    del(a[{0, 0}], a[{2, 0}], a[{3, 0}], a[{1, 1}], a[{1, -1}], a[1], a[5], a[{1, 0}]);
    CHECK(len(a) == 0);
    // b's paired value stays: the arena destroys it.
    CHECK(two.memory() == doctest::Approx(static_cast<double>(puzzle_costs().activation(2).num)));
}

// What a store holds, as (key, layer, batches) in for_each's order, and what its rank's meter counts.
struct StoreContents {
    std::vector<std::tuple<int, int, int, std::string>> values;
    double memory = 0;
    std::size_t size = 0;
    bool operator==(const StoreContents&) const = default;
};
StoreContents contents_of(const Store<Activation>& s, const MemoryMeter& meter) {
    StoreContents c;
    s.for_each([&](const Key& k, const Activation& v) { c.values.emplace_back(k.a, k.b, v.layer, v.batches.str()); });
    c.memory = meter.value();
    c.size = len(s);
    return c;
}

// Runs `op` with its first allocation failing, then its second, and so on
// until it allocates no more than it did: after each failure, rank 0's store
// and meter hold what they held before (and rank 1's too). Returns how many
// failures were injected (0 would mean the operation allocated nothing).
template <class Op>
int fail_each_allocation(TwoRanksInAnArena& two, Op op) {
    for (int n = 0;; ++n) {
        const StoreContents a = contents_of(two.a, two.meter0);
        const StoreContents b = contents_of(two.b, two.meter1);
        detail::fail_allocation(n);
        bool failed = false;
        try {
            op();
        } catch (const std::bad_alloc&) {
            failed = true;
        }
        detail::fail_allocation(-1);
        if (!failed) return n;
        INFO("allocation #" << n << " failed");
        CHECK(contents_of(two.a, two.meter0) == a);
        CHECK(contents_of(two.b, two.meter1) == b);
    }
}

TEST_CASE("a failed allocation leaves the stores as they were, and the next try succeeds") {
    // Batch sets of two intervals are on the heap: the sanitizer build checks
    // that no failure frees or leaks one.
    TwoRanksInAnArena two(3);
    Store<Activation>& a = two.a;
    const auto act = [](int id) { return Activation{0, IdSet{id, id + 5}}; };
    a[0] = act(1);
    a[2] = act(2);
    two.b[1] = act(3);
    // The first pair key {a, 0}: the arena's pair-key entries are made.
    CHECK(fail_each_allocation(two, [&] { a[{1, 0}] = act(4); }) == 1);
    // The first other pair key: a hash table of four slots.
    CHECK(fail_each_allocation(two, [&] { a[{0, 7}] = act(5); }) == 1);
    a[{1, 7}] = act(6);
    a[{2, 7}] = act(7);
    // The fourth hashed key grows the table to eight slots.
    CHECK(fail_each_allocation(two, [&] { a[{3, 7}] = act(8); }) == 1);
    // A plain key past the arena: the store's own arena, its entries, its
    // count and its pair-key entries, made before anything moves.
    CHECK(fail_each_allocation(two, [&] { a[5] = act(9); }) == 3);
    CHECK(fail_each_allocation(two, [&] { a.reserve(40); }) == 3);
    // Everything is where it should be after the failures.
    CHECK(a.get(0).batches == IdSet{1, 6});
    CHECK(a.get(2).batches == IdSet{2, 7});
    CHECK(a.get(5).batches == IdSet{9, 14});
    CHECK(a.get({1, 0}).batches == IdSet{4, 9});
    CHECK(a.get({0, 7}).batches == IdSet{5, 10});
    CHECK(a.get({3, 7}).batches == IdSet{8, 13});
    CHECK(len(a) == 8);
    CHECK(two.b.get(1).batches == IdSet{3, 8});
    CHECK(len(two.b) == 1);
    // Setting a key that has room, or replacing a value, allocates nothing of these.
    CHECK(fail_each_allocation(two, [&] { a[1] = act(10); }) == 0);
    CHECK(fail_each_allocation(two, [&] { a[{0, 7}] = act(11); }) == 0);
}

// The puzzle costs, for a test's cost model to change one of them.
struct PuzzleCostsBut : CostModel {
    const CostModel& p = puzzle_costs();
    std::string time_unit() const override { return p.time_unit(); }
    std::string memory_unit() const override { return p.memory_unit(); }
    double forward(int l, const IdSet& b) const override { return p.forward(l, b); }
    double backward(int l, const IdSet& b) const override { return p.backward(l, b); }
    double loss(const IdSet& b) const override { return p.loss(b); }
    double update(int l, std::int64_t s, int t) const override { return p.update(l, s, t); }
    double collective(OpCode op, int l, Size s, int r) const override { return p.collective(op, l, s, r); }
    double pass(Size s) const override { return p.pass(s); }
    Size weight(std::int64_t k, int t) const override { return p.weight(k, t); }
    Size opt_state(std::int64_t k, int t) const override { return p.opt_state(k, t); }
    Size weight_grad(std::int64_t k, int t) const override { return p.weight_grad(k, t); }
    Size activation(std::int64_t n) const override { return p.activation(n); }
    Size activation_grad(std::int64_t n) const override { return p.activation_grad(n); }
};

TEST_CASE("an arena destroys the values its stores leave in it; a store that outgrew it frees its own") {
    // Batch sets of several intervals own heap memory: the sanitizer build
    // checks that each is freed exactly once, wherever it ended up.
    TwoRanksInAnArena two(3);
    Store<Activation>& a = two.a;
    Store<Activation>& b = two.b;
    a[0] = Activation{0, IdSet{1, 5}};
    b[0] = Activation{0, IdSet{2, 7}};
    b[2] = Activation{2, IdSet{3, 9}};
    a[1] = Activation{1, IdSet{4, 8}};
    del(a[1]);  // destroyed at once, the entry empty again
    CHECK(a.get(0).batches == IdSet{1, 5});
    CHECK(b.get(0).batches == IdSet{2, 7});
    CHECK(b.get(2).batches == IdSet{3, 9});
    CHECK_FALSE(a.contains(1));
    CHECK_FALSE(a.contains(2));
    CHECK(len(a) == 1);
    CHECK(len(b) == 2);
    b[5] = Activation{5, IdSet{0, 6}};  // past the arena: b's values move to an arena of its own
    CHECK(b.get(0).batches == IdSet{2, 7});
    CHECK(b.get(2).batches == IdSet{3, 9});
    CHECK(b.get(5).batches == IdSet{0, 6});
    CHECK(len(b) == 3);
    a[2] = Activation{2, IdSet{1, 3}};  // b's old entries in the arena are empty now, a's are not
    CHECK(a.get(0).batches == IdSet{1, 5});
    CHECK(a.get(2).batches == IdSet{1, 3});
    a[1] = Activation{1, IdSet{6, 9}};  // an erased key stored again
    CHECK(a.get(1).batches == IdSet{6, 9});
    std::vector<std::int64_t> keys;
    b.for_each([&](const Key& k, const Activation& v) {
        keys.push_back(k.a);
        CHECK(v.layer == k.a);
    });
    CHECK(keys == std::vector<std::int64_t>{0, 2, 5});
    CHECK(two.memory() == doctest::Approx(puzzle_costs().activation(2).num * 6.0));  // six values of two batches
}

TEST_CASE("an arena's block, taken back by the next arena of its size, holds empty entries only") {
    // 2 MiB and more of entries: released to the page cache (pages.hpp) and
    // given to the next arena of the same type and size, with the bytes of the
    // values destroyed in it still there.
    const int ranks = static_cast<int>(dtsim::detail::kHugePage / sizeof(dtsim::detail::StoreEntry<Activation>)) / 4 + 1;
    dtsim::detail::trim_pages();  // no block of that size kept from before
    MemoryMeter meter;
    std::vector<StoreContext> ctx;
    for (int r = 0; r < ranks; ++r) ctx.push_back({&meter, &puzzle_costs(), r});
    const dtsim::detail::StoreEntry<Activation>* first_block = nullptr;
    for (int run = 0; run < 2; ++run) {
        CAPTURE(run);
        dtsim::detail::StoreArena<Activation> arena(ranks, 4);
        if (run == 0)
            first_block = &arena.entry(0, 0);
        else if (dtsim::detail::pages_mapped())  // (a build with AddressSanitizer keeps no block)
            CHECK(&arena.entry(0, 0) == first_block);  // taken back, not mapped anew
        std::vector<std::unique_ptr<Store<Activation>>> stores;
        for (int r = 0; r < ranks; ++r) {
            stores.push_back(std::make_unique<Store<Activation>>(&ctx[static_cast<std::size_t>(r)]));
            stores.back()->attach(arena, r);
        }
        int found = 0;  // keys present in the new arena's stores
        for (int r = 0; r < ranks; ++r) {
            Store<Activation>& s = *stores[static_cast<std::size_t>(r)];
            found += static_cast<int>(len(s));
            for (int k = 0; k < 4; ++k) found += s.contains(k) ? 1 : 0;
            if (run == 0)  // values in every entry, some with heap memory, left for the arena to destroy
                for (int k = 0; k < 4; ++k) s[k] = Activation{k, r % 2 ? IdSet{r, r + 5} : IdSet{r}};
        }
        CHECK(found == 0);
        if (run == 1) {
            Store<Activation>& s = *stores[1];
            s[3] = Activation{3, IdSet{4}};
            CHECK(s.get(3).batches == IdSet{4});
            CHECK(len(s) == 1);
        }
        stores.clear();  // the stores go first; the arena destroys their values
    }
    dtsim::detail::trim_pages();
}

TEST_CASE("the stores of an arena share its size memo, so they must share a cost model") {
    struct Doubled final : PuzzleCostsBut {  // an activation is twice as large
        Size activation(std::int64_t n) const override { return {2 * p.activation(n).num, p.activation(n).den}; }
    } doubled;
    MemoryMeter meter0, meter1;
    const StoreContext ctx0{&meter0, &puzzle_costs(), 0};
    const StoreContext ctx1{&meter1, &doubled, 1};
    dtsim::detail::StoreArena<Activation> arena(2, 3);
    Store<Activation> a(&ctx0);
    Store<Activation> b(&ctx1);
    a.attach(arena, 0);
    CHECK_THROWS_WITH_AS(b.attach(arena, 1), "Store::attach: the arena's stores have another cost model",
                         std::logic_error);
    // Apart, each store sizes its values with its own cost model (b's keys get an arena of its own).
    a[0] = Activation{0, IdSet{1}};
    b[0] = Activation{0, IdSet{1}};
    CHECK(meter1.value() == doctest::Approx(2 * meter0.value()));
    CHECK(meter0.value() == doctest::Approx(static_cast<double>(puzzle_costs().activation(1).num)));
}

TEST_CASE("stores of one arena that size values of different sizes in turn each count their own") {
    // The arena remembers the size of the last value sized by any of its
    // stores: a store that meets another size must not take the memo's.
    TwoRanksInAnArena two(4);
    Store<Activation>& a = two.a;
    Store<Activation>& b = two.b;
    const MemoryMeter& meter0 = two.meter0;
    const MemoryMeter& meter1 = two.meter1;
    const auto size = [](std::int64_t n) { return static_cast<double>(puzzle_costs().activation(n).num); };
    a[0] = Activation{0, IdSet{1}};           // one batch
    b[0] = Activation{0, IdSet::range(0, 3)};  // three
    a[1] = Activation{1, IdSet{2}};           // one again, after the memo held three
    b[1] = Activation{1, IdSet::range(0, 3)};
    a[0] = Activation{0, IdSet::range(4, 6)};  // replaced by a value of two batches
    CHECK(meter0.value() == doctest::Approx(size(2) + size(1)));
    CHECK(meter1.value() == doctest::Approx(2 * size(3)));
    del(b[0]);  // freed at its own size, not at the memo's (two batches, from a's last store)
    CHECK(meter1.value() == doctest::Approx(size(3)));
    del(a[1], a[0]);
    CHECK(meter0.value() == doctest::Approx(0.0));
    CHECK(meter1.value() == doctest::Approx(size(3)));
}

TEST_CASE("a cost model whose sizes have no positive denominator is a clear error") {
    struct ZeroDenominator final : PuzzleCostsBut {  // a weight's size is given over 0
        Size weight(std::int64_t k, int) const override { return {k, 0}; }
    } costs;
    std::string what;
    try {
        run_strategy(
            [](Model& m) -> Task<> {
                tie(m.weights[0], m.opt_states[0]) = m.load_weights(0);
                co_return;
            },
            1, 1, 1, costs);
    } catch (const std::exception& e) {
        what = e.what();
    }
    CHECK(what.find("size of 1/0 for a value in weights") != std::string::npos);
    CHECK(what.find("denominator must be positive") != std::string::npos);
}
