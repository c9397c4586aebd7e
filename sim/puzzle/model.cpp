#include "dtsim/puzzle/model.hpp"
#include "dtsim/puzzle/run.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace dtsim::puzzle {

// ------------------------------------------------------------------- values

namespace {

// Folds b's shards into a; a is unchanged when they cannot be combined.
template <class V>
void combine_shards_into(V& a, const V& b, const char* what) {
    if (a.layer != b.layer)
        throw std::invalid_argument(fmt::format("cannot combine {} of layer {} with one of layer {}", what,
                                                a.layer, b.layer));
    if (a.total != b.total)
        throw std::invalid_argument(fmt::format("cannot combine {} shards of {} with shards of {}", what,
                                                a.total, b.total));
    a.shards |= b.shards;
}

template <class V>
V combine_shards(const V& a, const V& b, const char* what) {
    V r = a;
    combine_shards_into(r, b, what);
    return r;
}

template <class V>
V keep_shard(const V& a, int s, int n, const char* what) {
    if (!a.is_complete())
        throw std::invalid_argument(fmt::format("cannot shard an incomplete {} (shards {} of {})", what,
                                                a.shards.str(), a.total));
    if (s < 0 || s >= n)
        throw std::invalid_argument(fmt::format("shard {} out of range [0, {})", s, n));
    V r = a;
    r.shards = IdSet::single(s);
    r.total = n;
    return r;
}

std::string shard_str(const IdSet& shards, int total) {
    return total == 1 ? std::string() : fmt::format(", shards {} of {}", shards.str(), total);
}

}  // namespace

Weight Weight::combine(const Weight& o) const { return combine_shards(*this, o, "weight"); }
void Weight::combine_into(const Weight& o) { combine_shards_into(*this, o, "weight"); }
Weight Weight::shard(int s, int n) const { return keep_shard(*this, s, n, "weight"); }
std::string Weight::str() const {
    return fmt::format("Weight(layer {}, step {}{})", layer, step, shard_str(shards, total));
}
OptState OptState::combine(const OptState& o) const { return combine_shards(*this, o, "optimizer state"); }
void OptState::combine_into(const OptState& o) { combine_shards_into(*this, o, "optimizer state"); }
OptState OptState::shard(int s, int n) const { return keep_shard(*this, s, n, "optimizer state"); }
std::string OptState::str() const {
    return fmt::format("OptState(layer {}, step {}{})", layer, step, shard_str(shards, total));
}
std::string Activation::str() const { return fmt::format("Activation(layer {}, batches {})", layer, batches.str()); }
std::string ActivationGrad::str() const {
    return fmt::format("ActivationGrad(layer {}, batches {})", layer, batches.str());
}
WeightGrad WeightGrad::combine(const WeightGrad& o) const { return combine_shards(*this, o, "weight grad"); }
void WeightGrad::combine_into(const WeightGrad& o) { combine_shards_into(*this, o, "weight grad"); }
WeightGrad WeightGrad::shard(int s, int n) const { return keep_shard(*this, s, n, "weight grad"); }
std::string WeightGrad::str() const {
    return fmt::format("WeightGrad(layer {}, batches {}{})", layer, batches.str(), shard_str(shards, total));
}

WeightGrad& operator+=(WeightGrad& a, const WeightGrad& b) {
    if (a.layer != b.layer)
        throw std::invalid_argument(
            fmt::format("only weight grads of the same layer add up: layer {} + layer {}", a.layer, b.layer));
    if (a.shards != b.shards || a.total != b.total)
        throw std::invalid_argument(fmt::format("weight grads add up only with the same shards: {} of {} + {} of {}",
                                                a.shards.str(), a.total, b.shards.str(), b.total));
    a.batches |= b.batches;
    return a;
}

WeightGrad operator+(const WeightGrad& a, const WeightGrad& b) {
    WeightGrad r = a;
    r += b;
    return r;
}

// ------------------------------------------------------------------- stores

std::string Key::str() const { return b == kNone ? fmt::format("{}", a) : fmt::format("({}, {})", a, b); }

void throw_missing_key(int rank, const char* store, const Key& key) {
    throw PuzzleError(rank, store, kNoLayer, fmt::format("no entry {} (KeyError)", key.str()));
}

void throw_bad_size(const char* store, Size size) {
    throw std::invalid_argument(fmt::format("the cost model gave a size of {}/{} for a value in {}: the denominator "
                                            "must be positive",
                                            size.num, size.den, store));
}

Size size_of(const CostModel& c, const Weight& v) { return c.weight(v.shards.size(), v.total); }
Size size_of(const CostModel& c, const OptState& v) { return c.opt_state(v.shards.size(), v.total); }
Size size_of(const CostModel& c, const Activation& v) { return c.activation(v.batches.size()); }
Size size_of(const CostModel& c, const ActivationGrad& v) { return c.activation_grad(v.batches.size()); }
Size size_of(const CostModel& c, const WeightGrad& v) { return c.weight_grad(v.shards.size(), v.total); }

const CostModel& puzzle_costs() {
    static const PuzzleCosts costs;
    return costs;
}

// -------------------------------------------------------------------- model

void Received::throw_wrong_type(const char* expected) const {
    throw PuzzleError(rank_, "receive", kNoLayer,
                      fmt::format("received a message from rank {} that is not of the expected type {}", from_,
                                  expected));
}

Model::Model(Gpu& g, int layers, int batches, const CostModel& costs, const StoreArenas* arenas)
    : gpu(g),
      rank(g.rank()),
      RANKS(g.sim().ranks()),
      LAYERS(layers),
      BATCHES(batches),
      ctx_{&meter_, &costs, g.rank()},
      weights(&ctx_),
      opt_states(&ctx_),
      activations(&ctx_),
      grad_activations(&ctx_),
      grad_weights(&ctx_) {
    // Keys are mostly layers 0..LAYERS: in the run's arenas, or reserved up
    // front in each store's own arena instead of grown by repeated doubling.
    const std::size_t n = StoreArenas::keys(layers);
    if (arenas) {
        weights.attach(arenas->weights, rank);
        opt_states.attach(arenas->opt_states, rank);
        activations.attach(arenas->activations, rank);
        grad_activations.attach(arenas->grad_activations, rank);
        grad_weights.attach(arenas->grad_weights, rank);
    } else {
        weights.reserve(n);
        opt_states.reserve(n);
        activations.reserve(n);
        grad_activations.reserve(n);
        grad_weights.reserve(n);
    }
    // A forward, a backward and an update per layer and up to three collectives:
    // the data-parallel strategies' events fit without reallocating.
    g.reserve_events(6 * n);
}

void Model::fail(const char* op, int layer, const std::string& what) const {
    throw PuzzleError(rank, op, layer, what);
}

void Model::fail(OpCode op, int layer, const std::string& what) const {
    throw PuzzleError(rank, std::string(op.name()), layer, what);
}

void Model::require(bool cond, const std::string& message) const {
    if (!cond) fail("assert", kNoLayer, message);
}

std::pair<Weight, OptState> Model::load_weights(int layer, int shard, int total) {
    if (layer < 0 || layer >= LAYERS)
        fail("load_weights", layer, fmt::format("layer must be in [0, {})", LAYERS));
    if (total < 1 || shard < 0 || shard >= total)
        fail("load_weights", layer, fmt::format("shard {} of {}: expected 0 <= shard < total", shard, total));
    return {Weight{layer, 0, IdSet::single(shard), total}, OptState{layer, 0, IdSet::single(shard), total}};
}

Activation Model::get_activation(IdSet batches) { return Activation{0, std::move(batches)}; }

WeightGrad Model::fake_grad(int layer, IdSet batches) { return WeightGrad{layer, std::move(batches)}; }

Activation Model::forward(int layer, const Activation& inp, const Weight& weight) {
    gpu.record(ops::forward, layer, ctx_.costs->forward(layer, inp.batches), memory(), inp.batches);
    if (!weight.is_complete())
        fail("forward", layer, fmt::format("weight is incomplete ({}); allgather it first", weight.str()));
    if (weight.layer != layer)
        fail("forward", layer, fmt::format("weight should be layer {}, got {}", layer, weight.str()));
    if (inp.layer != layer)
        fail("forward", layer, fmt::format("input should be layer {}, got {}", layer, inp.str()));
    return Activation{layer + 1, inp.batches};
}

std::pair<WeightGrad, ActivationGrad> Model::backward(int layer, const Activation& inp, const ActivationGrad& grad,
                                                      const Weight& weight) {
    gpu.record(ops::backward, layer, ctx_.costs->backward(layer, inp.batches), memory(), inp.batches);
    if (!weight.is_complete())
        fail("backward", layer, fmt::format("weight is incomplete ({}); allgather it first", weight.str()));
    if (weight.layer != layer)
        fail("backward", layer, fmt::format("weight should be layer {}, got {}", layer, weight.str()));
    if (inp.layer != layer)
        fail("backward", layer, fmt::format("input should be layer {}, got {}", layer, inp.str()));
    if (inp.batches != grad.batches)
        fail("backward", layer, fmt::format("batch mismatch: activation has batches {}, activation grad has {}",
                                            inp.batches.str(), grad.batches.str()));
    if (grad.layer != layer)
        fail("backward", layer, fmt::format("activation grad should be layer {}, got {}", layer, grad.str()));
    return {WeightGrad{layer, inp.batches}, ActivationGrad{layer - 1, inp.batches}};
}

ActivationGrad Model::loss(const Activation& inp) {
    gpu.record(ops::loss, LAYERS, ctx_.costs->loss(inp.batches), memory());
    if (inp.layer != LAYERS)
        fail("loss", LAYERS, fmt::format("input should be the final layer {}, got {}", LAYERS, inp.str()));
    return ActivationGrad{LAYERS - 1, inp.batches};
}

std::pair<Weight, OptState> Model::update(int layer, const WeightGrad& wg, const Weight& weight,
                                          const OptState& opt) {
    if (weight.layer != layer) fail("update", layer, fmt::format("weight should be layer {}, got {}", layer, weight.str()));
    if (wg.layer != layer) fail("update", layer, fmt::format("grad weight should be layer {}, got {}", layer, wg.str()));
    if (!wg.batches.is_prefix(BATCHES))
        fail("update", layer,
             BATCHES == 0 ? fmt::format("weight grad must cover no batch (there are none), it has {}", wg.batches.str())
                          : fmt::format("weight grad must cover exactly batches 0..{}, it has {}", BATCHES - 1,
                                        wg.batches.str()));
    if (opt.layer != layer) fail("update", layer, fmt::format("optimizer state should be layer {}, got {}", layer, opt.str()));
    if (wg.total > 1) {
        if (weight.total != wg.total || !weight.shards.is_subset_of(wg.shards))
            fail("update", layer, fmt::format("weight {} is not within the weight grad's shards {} of {}", weight.str(),
                                              wg.shards.str(), wg.total));
        if (opt.total != wg.total || !opt.shards.is_subset_of(wg.shards))
            fail("update", layer, fmt::format("optimizer state {} is not within the weight grad's shards {} of {}",
                                              opt.str(), wg.shards.str(), wg.total));
    }
    if (weight.step != opt.step)
        fail("update", layer, fmt::format("weight is at step {} but optimizer state at step {}", weight.step, opt.step));
    OptState new_opt{layer, opt.step + 1, opt.shards, opt.total};
    Weight new_weight{layer, weight.step + 1, weight.shards, weight.total};
    gpu.record(ops::update, kNoLayer, ctx_.costs->update(layer, weight.shards.size(), weight.total), memory());
    return {std::move(new_weight), std::move(new_opt)};
}

double Model::collective_time(OpCode op, int layer, Size s) const { return ctx_.costs->collective(op, layer, s, RANKS); }

// A collective suspends the strategy's coroutine in the world's round (no
// frame of its own). Joining folds this rank's value into the round: an
// all-gather unites the shards, the reductions sum the gradients, and a value
// that cannot be folded is this rank's error. Once the round is complete, an
// all-gather and an all-reduce keep the combined value, a scatter-reduce this
// rank's shard of it; the collective is recorded at the latest member's clock.
template <class V>
bool Model::join_collective(OpCode op, int layer, const V& value) {
    collective_duration_ = collective_time(op, layer, size_of(*ctx_.costs, value));
    auto fold = [this, op, layer](V& acc, const V& x, int) {
        try {
            if constexpr (std::is_same_v<V, WeightGrad>) {
                if (op != ops::allgather) {
                    acc += x;
                    return;
                }
            }
            acc.combine_into(x);  // in place: the accumulator is never copied
        } catch (const std::invalid_argument& e) {
            fail(op, layer, e.what());
        }
    };
    return gpu.sim().world().join_round<V>(gpu, op, layer, value, fold, seat_);
}

template <class V>
V Model::finish_collective(OpCode op, int layer) {
    Communicator::Result<V> r = gpu.sim().world().take_result<V>(seat_);
    gpu.set_clock(r.clock);
    if constexpr (std::is_same_v<V, WeightGrad>) {
        if (op == ops::scatterreduce) {
            try {
                r.value = r.value.shard(rank, RANKS);
            } catch (const std::invalid_argument& e) {
                fail(ops::scatterreduce, layer,
                     fmt::format("the sum {} cannot be sharded: {}", r.value.str(), e.what()));
            }
        }
    }
    gpu.record(op, layer, collective_duration_, memory());
    return std::move(r.value);
}
template bool Model::join_collective<Weight>(OpCode, int, const Weight&);
template bool Model::join_collective<OptState>(OpCode, int, const OptState&);
template bool Model::join_collective<WeightGrad>(OpCode, int, const WeightGrad&);
template Weight Model::finish_collective<Weight>(OpCode, int);
template OptState Model::finish_collective<OptState>(OpCode, int);
template WeightGrad Model::finish_collective<WeightGrad>(OpCode, int);

#if DTSIM_FRAMELESS_AWAIT
template <class V>
Collective<V> Model::collective(OpCode op, int layer, const V& value) {
    return Collective<V>(*this, op, layer, value);
}
#else
template <class V>
Collective<V> Model::collective(OpCode op, int layer, V value) {
    if (!join_collective(op, layer, value)) co_await gpu.sim().park(gpu, Wait(gpu.waiting_for()));
    co_return finish_collective<V>(op, layer);
}
#endif

Collective<WeightGrad> Model::allreduce(const WeightGrad& v, int layer) {
    return collective<WeightGrad>(ops::allreduce, layer, v);
}
Collective<Weight> Model::allgather(const Weight& v, int layer) { return collective<Weight>(ops::allgather, layer, v); }
Collective<OptState> Model::allgather(const OptState& v, int layer) {
    return collective<OptState>(ops::allgather, layer, v);
}
Collective<WeightGrad> Model::allgather(const WeightGrad& v, int layer) {
    return collective<WeightGrad>(ops::allgather, layer, v);
}
// The all-reduced sum, then this rank's shard of RANKS.
Collective<WeightGrad> Model::scatterreduce(const WeightGrad& v, int layer) {
    return collective<WeightGrad>(ops::scatterreduce, layer, v);
}

Task<> Model::pass_any(int dst, std::any v, Size size) {
    const double d = ctx_.costs->pass(size);
    gpu.record(ops::pass, kNoLayer, d, memory());
    Message m{std::move(v), gpu.clock(), d, rank};
    co_await gpu.sim().send(gpu, dst, std::move(m));
}

Task<Received> Model::receive() {
    Message m = co_await gpu.sim().receive(gpu);
    gpu.set_clock(std::max(m.clock, gpu.clock()));
    gpu.record(ops::pass, kNoLayer, m.duration, memory());
    co_return Received(std::move(m.payload), rank, m.from);
}

void Model::set_final_weight(int layer, const Weight& weight) {
    if (layer < 0 || layer >= LAYERS)
        fail("set_final_weight", layer, fmt::format("layer must be in [0, {})", LAYERS));
    if (final_weights_.empty()) final_weights_.resize(static_cast<std::size_t>(LAYERS));
    final_weights_[static_cast<std::size_t>(layer)] = weight;
}

}  // namespace dtsim::puzzle
