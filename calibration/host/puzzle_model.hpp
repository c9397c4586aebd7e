// The ground-truth harness's puzzle model: what each rank of a puzzle strategy must do on a
// real GPU.
//
// dtsim-puzzle-real runs the strategies `dtsim puzzle` runs (puzzles/<name>.hpp: templates
// over the model) with this model on the dtsim engine, one model per rank. Its local
// operations check the puzzle's rules as dtsim::puzzle::Model does, plus what a real run
// needs (weights split into 1 or RANKS shards, a gathered shard being the rank's own), and
// append what the GPU must do to the rank's RankProgram (schedule.hpp): which buffer each
// operation reads and creates, and where a buffer is freed. Values share buffers by
// reference count, as Python objects do: a buffer is released when the last value holding it
// goes. The puzzle's memory is kept as dtsim::puzzle::Model keeps it (the same meter and
// sizes), so the programs' events can be compared with the puzzle world's. Its collectives
// are rounds of the engine's world communicator and its passes go through the engine's
// mailboxes, both carrying the values' descriptions (Wire): a receive gets what the sender
// sent, a collective what every member gave, and the ranks' programs pair up by construction.
// A model of its own rather than a hook in dtsim::puzzle::Model: the puzzle's values carry no
// buffer, and a strategy's `grad_weights[l] + grad_weights[{l, r}]` is an operator on values
// that no model sees; here a value carries its buffer, and its buffer its model.
//
// This is where the strategies' one source stops short of launching CUDA kernels and NCCL
// calls from the model: the model records, and gpu/puzzle_executor.cpp launches a rank's
// recorded program afterwards, because
//  - with one process per GPU (torchrun, mpirun) a process drives one rank, but a rank's
//    operations depend on the other ranks' (what a receive gets, what a collective
//    returns): each process runs every rank on its own engine, which is cheap and
//    deterministic, and then launches only its own rank's program;
//  - the engine resumes the ranks one at a time on one thread, and one thread that drives
//    several GPUs must group their NCCL calls (ncclGroupStart/End), as each call may block
//    until the other ranks' calls arrive (NCCL User Guide, "Group Calls": "Management Of
//    Multiple GPUs From One Thread"); the executor drives each GPU from a thread of its own;
//  - the programs are checked before any GPU work: NCCL's sends may wait for their
//    receives, the engine's one-message mailboxes do not, so check_programs proves that
//    the ranks cannot deadlock that way (a hang on GPUs would say nothing), and that the
//    final weights will be complete;
//  - a program runs many times (warm-up, timed iterations) and the basic strategy's once
//    more as the reference: recorded once, it is replayed without the engine.
#pragma once

#include "host/schedule.hpp"

#include "dtsim/puzzle/key.hpp"
#include "dtsim/puzzle/memory_meter.hpp"
#include "dtsim/simulation.hpp"

#include <concepts>
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

namespace dtsim::harness {

class Model;

namespace detail {
// One live buffer; the last reference going away appends its release.
struct BufferRef {
    Model* owner = nullptr;
    int id = -1;
    BufferRef(Model* o, int i) : owner(o), id(i) {}
    ~BufferRef();
    BufferRef(const BufferRef&) = delete;
    BufferRef& operator=(const BufferRef&) = delete;
};
}  // namespace detail

// A Weight, OptState, Activation, ActivationGrad or WeightGrad of the puzzle, with its buffer.
struct Value {
    BufferKind kind = BufferKind::weight;
    int layer = 0;
    IdSet batches;
    IdSet shards;  // weights, optimizer states, weight grads: which of `total`
    int total = 1;
    int step = 0;
    std::shared_ptr<detail::BufferRef> buffer;

    [[nodiscard]] bool complete() const { return shards.size() == total; }
    [[nodiscard]] int buffer_id() const { return buffer ? buffer->id : -1; }
    [[nodiscard]] std::string str() const;
};

// The puzzle's WeightGrad `a + b` (the strategies add store entries: grad_accum, gpipe):
// recorded by a's model as a += b in a's buffer.
Value operator+(const Value& a, const Value& b);

// A store key: `l` or `{l, r}` as in the Python dicts (weights[l], activations[{l, mb}]),
// the puzzle world's own.
using Key = puzzle::Key;

// The stores' order: by layer, then by the second part, a key without one first. Releasing
// what a store still holds (Store::clear) follows it, and so do the programs.
struct KeyLess {
    bool operator()(const Key& x, const Key& y) const { return x.a != y.a ? x.a < y.a : x.b < y.b; }
};

class Store {
public:
    // store[k] = value (write) or a `const Value&` (read; a missing key is an error, like Python's KeyError).
    class Slot {
    public:
        Slot(Store& s, Key k) : store_(&s), key_(k) {}
        Slot(const Slot&) = default;
        // `grad_weights[l] = grad_weights[{l, r}]` stores the value (Python aliasing), not the slot.
        Slot& operator=(const Slot& other) { return *this = Value(static_cast<const Value&>(other)); }
        Slot& operator=(Value v);
        operator const Value&() const;  // NOLINT(google-explicit-constructor)
        [[nodiscard]] Key key() const { return key_; }
        [[nodiscard]] Store& store() const { return *store_; }

    private:
        Store* store_;
        Key key_;
    };

    Store(Model& owner, const char* name) : owner_(&owner), name_(name) {}
    Store(const Store&) = delete;
    Store& operator=(const Store&) = delete;
    Slot operator[](Key k) { return Slot(*this, k); }
    [[nodiscard]] const Value& get(Key k) const;
    void erase(Key k);
    // Empties the store without recording anything but the buffers' releases.
    void clear();
    [[nodiscard]] std::size_t size() const { return map_.size(); }
    [[nodiscard]] const std::map<Key, Value, KeyLess>& entries() const { return map_; }
    [[nodiscard]] const char* name() const { return name_; }
    [[nodiscard]] std::string key_text(Key k) const;

private:
    Model* owner_;
    const char* name_;
    std::map<Key, Value, KeyLess> map_;
};
using Slot = Store::Slot;

// Python's `a[k1], b[k2] = f()`, `del a[k1], b[k2]` and `len(a)`, as for dtsim::puzzle's stores.
struct SlotPair {
    Slot first, second;
    SlotPair& operator=(std::pair<Value, Value> values) {
        first = std::move(values.first);
        second = std::move(values.second);
        return *this;
    }
};
inline SlotPair tie(Slot a, Slot b) { return SlotPair{a, b}; }
template <class... S>
    requires(std::same_as<S, Slot> && ...)
void del(const S&... slots) {
    (slots.store().erase(slots.key()), ...);
}
inline std::size_t len(const Store& s) { return s.size(); }

class Model {
public:
    Model(Gpu& gpu, const ModelDims& dims);
    ~Model();
    Model(const Model&) = delete;
    Model& operator=(const Model&) = delete;

    const int rank;
    const int RANKS;    // NOLINT: the reference's names
    const int LAYERS;   // NOLINT
    const int BATCHES;  // NOLINT

private:
    Gpu* gpu_;
    ModelDims dims_;
    RankProgram program_;
    puzzle::MemoryMeter meter_;  // the puzzle's memory, as dtsim::puzzle::Model keeps it
    std::int64_t live_bytes_ = 0;
    bool finished_ = false;

public:
    Store weights, opt_states, activations, grad_activations, grad_weights;

    struct Storage {
        Store& weights;
        Store& opt_states;
        Store& activations;
        Store& grad_activations;
        Store& grad_weights;
    };
    Storage storage() { return {weights, opt_states, activations, grad_activations, grad_weights}; }
    // The puzzle's memory now: what the five stores hold, in the puzzle world's units.
    [[nodiscard]] double memory() const { return meter_.value(); }

    std::pair<Value, Value> load_weights(int layer, int shard = 0, int total = 1);
    Value get_activation(IdSet batches);
    Value forward(int layer, const Value& inp, const Value& weight);
    std::pair<Value, Value> backward(int layer, const Value& inp, const Value& grad, const Value& weight);
    Value loss(const Value& inp);
    std::pair<Value, Value> update(int layer, const Value& weight_grad, const Value& weight, const Value& opt_state);
    Value fake_grad(int layer, IdSet batches);

    // Collectives over all ranks, matched by call order (co_await the result).
    Task<Value> allreduce(const Value& v, int layer);
    Task<Value> allgather(const Value& v, int layer);
    Task<Value> scatterreduce(const Value& v, int layer);
    // Point to point: the receiver gets a value like the one passed, in a buffer of its own.
    Task<> pass_to(int dst, const Value& v);
    Task<Value> receive();

    void set_final_weight(int layer, const Value& weight);
    // Python's `assert cond, message` inside a strategy.
    void require(bool cond, const std::string& message) const;

    // Releases everything still stored and hands the program over.
    RankProgram finish();

    // a + b (operator+): a += b in a's buffer.
    Value add(const Value& a, const Value& b);
    // Called by detail::BufferRef.
    void release_buffer(int id);
    // Called by Store.
    void stored(const Value& v);
    void unstored(const Value& v);
    // A broken rule: dtsim::PuzzleError naming this rank, the operation and the layer (-1: none).
    [[noreturn]] void fail(std::string_view op, int layer, const std::string& what) const;

private:
    // The collectives' common part: joins the world's round with v's description and
    // returns the combination of every member's.
    Task<Wire> join(Op op, int layer, Wire w);
    Value new_value(BufferKind kind, int layer, IdSet batches, IdSet shards, int total, int step);
    std::int64_t elems_of(BufferKind kind, std::int64_t batches, std::int64_t shards, int total) const;
    Instr& emit(Op op, int layer);
    Wire wire_of(const Value& v) const;
    int stores_holding(int buffer_id) const;
};

}  // namespace dtsim::harness
