// The symbolic puzzle model the seed solutions are ported against: the same API as the
// reference library (storage(), load_weights, forward, backward, loss, update, allreduce,
// allgather, scatterreduce, pass_to, receive, set_final_weight), the same values and the
// same checks, but instead of simulating time it records what each call must do on a
// real GPU into a RankProgram (schedule.hpp). Values share buffers by reference count,
// as Python objects do: a buffer is released when the last store entry holding it goes.
#pragma once

#include "host/schedule.hpp"

#include <compare>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace dtsim::calib::puzzle {

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

// A Weight, OptState, Activation, ActivationGrad or WeightGrad of the reference library.
struct Value {
    BufferKind kind = BufferKind::weight;
    int layer = 0;
    std::vector<int> batches;  // sorted
    std::vector<int> shards;   // sorted (weights, optimizer states, weight grads)
    int total = 1;
    int step = 0;
    std::shared_ptr<detail::BufferRef> buffer;

    [[nodiscard]] bool complete() const { return static_cast<int>(shards.size()) == total; }
    [[nodiscard]] int buffer_id() const { return buffer ? buffer->id : -1; }
};

// A store key: `l` or `(l, r)` as in the Python dicts (weights[l], activations[l, mb]).
struct Key {
    int a = 0;
    int b = -1;
    Key(int first) : a(first) {}  // NOLINT(google-explicit-constructor): weights[l]
    Key(int first, int second) : a(first), b(second) {}
    friend auto operator<=>(const Key&, const Key&) = default;
    friend bool operator==(const Key&, const Key&) = default;
};

class Store {
public:
    // store[k] = value (write) or a `const Value&` (read; a missing key is an error, like Python's KeyError).
    class Slot {
    public:
        Slot(Store& s, Key k) : store_(&s), key_(k) {}
        Slot(const Slot&) = default;
        // `grad_weights[l] = grad_weights[l, r]` stores the value (Python aliasing), not the slot.
        Slot& operator=(const Slot& other) { return *this = Value(static_cast<const Value&>(other)); }
        Slot& operator=(Value v);
        operator const Value&() const;  // NOLINT(google-explicit-constructor)
        [[nodiscard]] Key key() const { return key_; }
        [[nodiscard]] Store& store() const { return *store_; }

    private:
        Store* store_;
        Key key_;
    };

    Store(Model& owner, std::string name) : owner_(&owner), name_(std::move(name)) {}
    Slot operator[](Key k) { return Slot(*this, k); }
    [[nodiscard]] const Value& get(Key k) const;
    void erase(Key k);
    void clear() {
        // Values release their buffers as they go, and a release reads every store: empty
        // this one first, then let the values go.
        std::map<Key, Value> old;
        old.swap(map_);
    }
    [[nodiscard]] bool empty() const { return map_.empty(); }
    [[nodiscard]] std::size_t size() const { return map_.size(); }
    [[nodiscard]] const std::map<Key, Value>& entries() const { return map_; }
    [[nodiscard]] const std::string& name() const { return name_; }
    [[nodiscard]] std::string key_text(Key k) const;

private:
    Model* owner_;
    std::string name_;
    std::map<Key, Value> map_;
};

// `tie(weights[l], opt_states[l]) = model.load_weights(l);` for Python's tuple assignment.
struct Tie {
    Store::Slot first, second;
    Tie& operator=(std::pair<Value, Value> values) {
        first = std::move(values.first);
        second = std::move(values.second);
        return *this;
    }
};
inline Tie tie(Store::Slot a, Store::Slot b) { return Tie{a, b}; }

// range(n) as a list of batch ids.
std::vector<int> range(int n);
// Python's `x in list`.
bool contains(const std::vector<int>& list, int x);

class Model {
public:
    const int LAYERS;
    const int BATCHES;
    const int RANKS;
    const int rank;

    Model(const ModelDims& dims, int rank);
    ~Model();
    Model(const Model&) = delete;
    Model& operator=(const Model&) = delete;

    struct Storage {
        Store& weights;
        Store& opt_states;
        Store& activations;
        Store& grad_activations;
        Store& grad_weights;
    };
    Storage storage() { return {weights, opt_states, activations, grad_activations, grad_weights}; }

    std::pair<Value, Value> load_weights(int l, int shard = 0, int total = 1);
    Value get_activation(const std::vector<int>& batches);
    Value forward(int l, const Value& act, const Value& weight);
    std::pair<Value, Value> backward(int l, const Value& act, const Value& grad, const Value& weight);
    Value loss(const Value& act);
    std::pair<Value, Value> update(int l, const Value& weight_grad, const Value& weight, const Value& opt_state);
    // The puzzle's WeightGrad `a + b`: same layer and shards, batches united (in place in a's buffer).
    Value add(const Value& a, const Value& b);
    Value fake_grad(int l, const std::vector<int>& batches);

    Value allreduce(const Value& v, int l);
    Value allgather(const Value& v, int l);
    Value scatterreduce(const Value& v, int l);
    void pass_to(int dst, const Value& v);
    // The reference's receive() takes whatever arrives first; a real receive must name
    // its source and know the size, so the port states both (check_programs verifies
    // them against the sender's pass_to).
    Value receive_activation(int src, int layer, const std::vector<int>& batches);
    Value receive_grad(int src, int layer, const std::vector<int>& batches);

    void set_final_weight(int l, const Value& weight);

    // `del store[k], ...` (a missing key is an error).
    template <typename... Slots>
    void del(Slots... slots) {
        (slots.store().erase(slots.key()), ...);
    }
    // Python's `assert` in a seed solution.
    void check(bool condition, const char* what) const;

    // Releases everything still stored and hands the program over.
    RankProgram finish();

    // Called by detail::BufferRef.
    void release_buffer(int id);
    // Called by Store on a bad key.
    [[noreturn]] void fail(const std::string& op, int layer, const std::string& what) const;

private:
    Value new_value(BufferKind kind, int layer, std::vector<int> batches, std::vector<int> shards, int total, int step);
    std::int64_t elems_of(BufferKind kind, std::size_t batches, std::size_t shards, int total) const;
    double memory_units() const;
    Instr& emit(Op op, int layer);
    int stores_holding(int buffer_id) const;

    ModelDims dims_;
    RankProgram program_;
    std::int64_t live_bytes_ = 0;
    bool finished_ = false;

public:
    Store weights, opt_states, activations, grad_activations, grad_weights;
};

// The eight seed solutions (schedules.cpp).
void basic(Model& model);
void grad_accum(Model& model);
void ddp(Model& model);
void wsdp(Model& model);
void fsdp(Model& model);
void pipeline(Model& model);
void gpipe(Model& model);
void pipeline_fsdp(Model& model);

}  // namespace dtsim::calib::puzzle
