// A puzzle GPU: the Python reference's `Model`, as a C++ object a strategy
// coroutine drives. Method names, store names and the uppercase sizes follow
// the reference so that a port reads line for line like the seed solution.
#pragma once

#include "dtsim/simulation.hpp"
#include "dtsim/puzzle/cost_model.hpp"
#include "dtsim/puzzle/memory_meter.hpp"
#include "dtsim/puzzle/store.hpp"
#include "dtsim/puzzle/values.hpp"

#include <any>
#include <map>
#include <optional>
#include <typeinfo>
#include <vector>
#include <string>
#include <type_traits>
#include <utility>

namespace dtsim::puzzle {

// Python's range(n) as a batch set.
inline IdSet range(std::int64_t n) { return IdSet::range(0, n); }

template <class T>
struct is_slot : std::false_type {};
template <class V>
struct is_slot<Slot<V>> : std::true_type {};

// What `co_await model.receive()` returns: converts to the value that was passed.
class Received {
public:
    Received(std::any v, int rank, int from) : v_(std::move(v)), rank_(rank), from_(from) {}
    template <class T>
    [[nodiscard]] T as() const {
        if (const T* p = std::any_cast<T>(&v_)) return *p;
        throw_wrong_type(typeid(T).name());
    }
    template <class T>
        requires(!is_slot<T>::value && !std::is_reference_v<T>)
    operator T() const {  // NOLINT: implicit, as Python's untyped receive
        return as<T>();
    }
    [[nodiscard]] int from() const { return from_; }

private:
    [[noreturn]] void throw_wrong_type(const char* expected) const;
    std::any v_;
    int rank_;
    int from_;
};

class Model;

#if DTSIM_FRAMELESS_AWAIT
// What `co_await model.allreduce(...)` (and the other collectives) waits on:
// the world communicator's next round. When awaited, the value joins the
// round; once every rank has arrived, each takes its part of the combined
// value and records the collective. What lasts across the suspension (the
// seat in the round, the duration) is kept in the model, which is in one
// collective at a time. The awaiter lives in the strategy's coroutine frame
// and is all of it that a collective touches there, so it holds only the
// model and where the value is: it must be awaited in the expression that
// made it (`co_await model.allreduce(x, l)`), while `x` still exists; the
// value is read when the rank joins the round, and copied only by the rank
// that opens it. Awaiting one held in a named variable does not compile
// (a std::move of that variable still would: do not).
template <class V>
class Collective {
public:
    using dtsim_awaiter = void;
    using dtsim_awaited_at_once = void;  // awaiting it as a named variable (an lvalue) does not compile
    Collective(Model& model, OpCode op, int layer, const V& value)
        : model_(&model), value_(&value), layer_(layer), op_(op) {}
    Collective(const Collective&) = delete;
    Collective& operator=(const Collective&) = delete;
    bool await_ready();
    template <class P>
    void await_suspend(std::coroutine_handle<P> h);
    V await_resume();

private:
    Model* model_;
    const V* value_;
    std::int32_t layer_;
    OpCode op_;
};
#else
template <class V>
using Collective = Task<V>;
#endif

// The arenas of a run's five stores, with room for keys 0..layers (see
// StoreArena): what run_strategy gives its models.
struct StoreArenas {
    StoreArenas(int ranks, int layers)
        : weights(ranks, keys(layers)),
          opt_states(ranks, keys(layers)),
          activations(ranks, keys(layers)),
          grad_activations(ranks, keys(layers)),
          grad_weights(ranks, keys(layers)) {}
    // Keys 0..layers, without overflowing an int (ranks and layers are at least 1).
    static std::uint32_t keys(int layers) { return static_cast<std::uint32_t>(layers) + 1; }
    dtsim::detail::StoreArena<Weight> weights;
    dtsim::detail::StoreArena<OptState> opt_states;
    dtsim::detail::StoreArena<Activation> activations;
    dtsim::detail::StoreArena<ActivationGrad> grad_activations;
    dtsim::detail::StoreArena<WeightGrad> grad_weights;
};

class alignas(64) Model {
public:
    // With `arenas` (which must outlive the model), the stores keep their
    // layer keys there; without, each store has an arena of its own.
    Model(Gpu& gpu, int layers, int batches, const CostModel& costs = puzzle_costs(),
          const StoreArenas* arenas = nullptr);
    Model(const Model&) = delete;
    Model& operator=(const Model&) = delete;

    Gpu& gpu;
    const int rank;
    const int RANKS;    // NOLINT: the reference's names
    const int LAYERS;   // NOLINT
    const int BATCHES;  // NOLINT

private:
    // What a resumed rank touches sits in the first four cache lines: these
    // fields, then the five stores (half a line each); the final weights,
    // set once at the end, come last.
    StoreContext ctx_;  // the meter, the cost model and the rank
    MemoryMeter meter_;
    Communicator::Seat seat_;  // the collective this rank is in
    double collective_duration_ = 0;  // and what it costs

public:
    Store<Weight> weights;
    Store<OptState> opt_states;
    Store<Activation> activations;
    Store<ActivationGrad> grad_activations;
    Store<WeightGrad> grad_weights;

private:
    std::vector<std::optional<Weight>> final_weights_;  // by layer

public:
    // The five stores, for `auto [weights, opt_states, ...] = model.storage();`
    // (an aggregate of references: its bindings name its members, where a
    // tuple's would be five references more in the strategy's coroutine frame).
    struct Storage {
        Store<Weight>& weights;
        Store<OptState>& opt_states;
        Store<Activation>& activations;
        Store<ActivationGrad>& grad_activations;
        Store<WeightGrad>& grad_weights;
    };
    Storage storage() { return {weights, opt_states, activations, grad_activations, grad_weights}; }
    // The GPU's memory now: everything held in the five stores.
    [[nodiscard]] double memory() const { return meter_.value(); }
    [[nodiscard]] double time() const { return gpu.clock(); }

    // Local operations (no suspension).
    std::pair<Weight, OptState> load_weights(int layer, int shard = 0, int total = 1);
    Activation get_activation(IdSet batches);
    Activation forward(int layer, const Activation& inp, const Weight& weight);
    std::pair<WeightGrad, ActivationGrad> backward(int layer, const Activation& inp,
                                                   const ActivationGrad& grad, const Weight& weight);
    ActivationGrad loss(const Activation& inp);
    std::pair<Weight, OptState> update(int layer, const WeightGrad& weight_grad, const Weight& weight,
                                       const OptState& opt_state);
    WeightGrad fake_grad(int layer, IdSet batches);

    // Collectives over all ranks, matched by call order (co_await the result).
    Collective<WeightGrad> allreduce(const WeightGrad& v, int layer);
    Collective<Weight> allgather(const Weight& v, int layer);
    Collective<OptState> allgather(const OptState& v, int layer);
    Collective<WeightGrad> allgather(const WeightGrad& v, int layer);
    Collective<WeightGrad> scatterreduce(const WeightGrad& v, int layer);

    // Point to point.
    template <class T>
    Task<> pass_to(int dst, const T& v) {
        if constexpr (is_slot<T>::value) {
            using V = std::remove_cvref_t<decltype(v.get())>;
            return pass_any(dst, std::any(V(v.get())), size_of(*ctx_.costs, v.get()));
        } else if constexpr (requires { size_of(std::declval<const CostModel&>(), v); }) {
            return pass_any(dst, std::any(v), size_of(*ctx_.costs, v));
        } else {
            return pass_any(dst, std::any(v), Size{0, 1});
        }
    }
    Task<> pass_to(int dst, const char* text) { return pass_any(dst, std::any(std::string(text)), Size{0, 1}); }
    Task<Received> receive();

    void set_final_weight(int layer, const Weight& weight);
    // The final weight this rank set for `layer`, if any.
    [[nodiscard]] const Weight* final_weight(int layer) const {
        if (layer < 0 || static_cast<std::size_t>(layer) >= final_weights_.size()) return nullptr;
        const auto& w = final_weights_[static_cast<std::size_t>(layer)];
        return w ? &*w : nullptr;
    }

    // Python's `assert cond, message` inside a strategy: a PuzzleError naming this rank.
    void require(bool cond, const std::string& message) const;

    [[nodiscard]] const CostModel& costs() const { return *ctx_.costs; }

private:
#if DTSIM_FRAMELESS_AWAIT
    template <class V>
    friend class Collective;
#endif
    // A collective's two halves: joining its round with `value` (true when
    // this rank completed it), then taking this rank's result and recording it.
    template <class V>
    bool join_collective(OpCode op, int layer, const V& value);
    template <class V>
    V finish_collective(OpCode op, int layer);
#if DTSIM_FRAMELESS_AWAIT
    template <class V>
    Collective<V> collective(OpCode op, int layer, const V& value);
#else
    template <class V>
    Collective<V> collective(OpCode op, int layer, V value);
#endif
    Task<> pass_any(int dst, std::any v, Size size);
    [[noreturn]] void fail(const char* op, int layer, const std::string& what) const;
    [[noreturn]] void fail(OpCode op, int layer, const std::string& what) const;
    double collective_time(OpCode op, int layer, Size s) const;
};

#if DTSIM_FRAMELESS_AWAIT
template <class V>
bool Collective<V>::await_ready() {
    return model_->join_collective(op_, layer_, *value_);
}
template <class V>
template <class P>
void Collective<V>::await_suspend(std::coroutine_handle<P> h) {
    detail::park_handle(model_->gpu, h);
}
template <class V>
V Collective<V>::await_resume() {
    return model_->template finish_collective<V>(op_, layer_);
}
#endif

static_assert(sizeof(Model) == 320, "a model is five cache lines, of which a resumed rank streams in the first four");

// The reference's Model.check: for every layer the final weights set by the
// ranks all have step 1 and together are complete. Returns the first failure.
template <class Models>
std::optional<std::string> check(const Models& models);

std::optional<std::string> check_final_weights(int layers, const std::vector<const Model*>& models);

template <class Models>
std::optional<std::string> check(const Models& models) {
    std::vector<const Model*> ms;
    for (const auto& m : models) ms.push_back(&m);
    return check_final_weights(ms.empty() ? 0 : ms.front()->LAYERS, ms);
}

}  // namespace dtsim::puzzle
