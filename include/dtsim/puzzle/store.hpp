// The five stores of a puzzle GPU (weights, optimizer states, activations,
// activation grads, weight grads): maps from a key (an int or a pair of ints,
// as the Python dicts are indexed) to values, whose contents are the GPU's
// memory. `store[k] = v` stores, `del(store[k], ...)` frees at once.
#pragma once

#include "dtsim/puzzle/cost_model.hpp"
#include "dtsim/puzzle/memory_meter.hpp"
#include "dtsim/puzzle/values.hpp"
#include "dtsim/detail/store_arena.hpp"
#include "dtsim/puzzle/key.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace dtsim::puzzle {

// Where a store reports missing keys and finds its memory meter and sizes
// (its model's, shared by the model's five stores).
struct StoreContext {
    MemoryMeter* meter = nullptr;
    const CostModel* costs = nullptr;
    int rank = 0;
};

[[noreturn]] void throw_missing_key(int rank, const char* store, const Key& key);
// A cost model gave a size whose denominator is not positive.
[[noreturn]] void throw_bad_size(const char* store, Size size);

Size size_of(const CostModel& c, const Weight& v);
Size size_of(const CostModel& c, const OptState& v);
Size size_of(const CostModel& c, const Activation& v);
Size size_of(const CostModel& c, const ActivationGrad& v);
Size size_of(const CostModel& c, const WeightGrad& v);

template <class V>
class Slot;

// Each value type has one store; its name is the reference's dict name (errors name it).
template <class V>
constexpr const char* store_name();
template <>
constexpr const char* store_name<Weight>() { return "weights"; }
template <>
constexpr const char* store_name<OptState>() { return "opt_states"; }
template <>
constexpr const char* store_name<Activation>() { return "activations"; }
template <>
constexpr const char* store_name<ActivationGrad>() { return "grad_activations"; }
template <>
constexpr const char* store_name<WeightGrad>() { return "grad_weights"; }

// Half a cache line: at thousands of ranks every rank resumed after a
// collective is cold in cache, and the lines its stores occupy are what a
// resume costs. What all ranks share (where the arena's rows are, how many
// keys it has, the size memo) is the arena's.
template <class V>
class alignas(32) Store {
public:
    explicit Store(const StoreContext* ctx) : ctx_(ctx), arena_(&dtsim::detail::StoreArena<V>::none()) {}
    Store(const Store&) = delete;
    Store& operator=(const Store&) = delete;
    ~Store() {
        release_arena();
        Hashed::destroy(hashed_);
    }

    Slot<V> operator[](Key k) { return Slot<V>(*this, k); }
    // (A plain key passed as an int is no Key temporary, which the coroutine
    // frame would hold when the access spans a co_await.)
    Slot<V> operator[](int l) { return Slot<V>(*this, Key(l)); }

    [[nodiscard]] const V& get(const Key& k) const {
        const V* v = find(k);
        if (!v) throw_missing_key(ctx_->rank, name(), k);
        return *v;
    }
    [[nodiscard]] bool contains(const Key& k) const { return find(k) != nullptr; }
    // The number of keys stored (the arena counts those in its rooms, the hash table the others).
    [[nodiscard]] std::size_t size() const {
        return (hashed_ ? hashed_->count : 0) + (arena_->counts_ ? arena_->counts_[column()] : 0);
    }
    [[nodiscard]] bool empty() const { return size() == 0; }
    [[nodiscard]] static constexpr const char* name() { return store_name<V>(); }
    // Room for plain keys 0..n-1 without reallocating (the model reserves one per layer).
    void reserve(std::size_t n) {
        if (n > static_cast<std::size_t>(kDirectLimit))
            throw std::length_error("Store::reserve: room for more plain keys than a store holds");
        if (n > cap()) regrow(n);
    }
    // Keeps the plain keys 0..arena's keys - 1 and the paired keys in
    // `arena`'s entries for `rank` (the arena must outlive the store, and
    // destroys the values left there); a later plain key moves them to an
    // arena of the store's own. The stores in an arena share one cost model.
    void attach(const dtsim::detail::StoreArena<V>&& arena, int rank) = delete;
    void attach(const dtsim::detail::StoreArena<V>& arena, int rank) {
        if (!empty() || rank < 0 || static_cast<std::uint32_t>(rank) >= arena.ranks())
            throw std::logic_error("Store::attach: the store must be empty and the rank within the arena");
        if (arena.costs_ && arena.costs_ != ctx_->costs)
            throw std::logic_error("Store::attach: the arena's stores have another cost model");
        arena.costs_ = ctx_->costs;
        release_arena();
        arena_ = &arena;
        direct_ = &arena.entry(static_cast<std::uint32_t>(rank), 0);
    }

    void set(const Key& k, V&& v) {
        const Size added = size(v);
        V* old = nullptr;
        Direct* room = nullptr;  // a plain or paired key's empty entry
        if (is_direct(k)) {
            const auto i = static_cast<std::uint32_t>(k.a);
            if (i >= cap()) regrow(std::max<std::size_t>(std::size_t{i} + 1, std::size_t{cap()} * 2));
            Direct& d = at(i);
            if (d.used)
                old = &d.value();
            else
                room = &d;
        } else if (is_paired(k)) {
            Direct& d = paired(k, arena_->pairs());
            if (d.used)
                old = &d.value();
            else
                room = &d;
        } else if (Entry* e = hashed_ ? hashed_->find(k) : nullptr) {
            old = &e->value();
        }
        if (old) {
            const Size removed = size(*old);
            ctx_->meter->add(added);  // may allocate a new denominator's bucket; the old one exists
            ctx_->meter->sub(removed);
            *old = std::move(v);
            return;
        }
        // The meter first (a new denominator allocates), then the entry; a
        // failed allocation leaves the memory and the entries as they were.
        ctx_->meter->add(added);
        if (room) {
            room->fill(std::move(v));
            ++arena_->counts_[column()];
        } else {
            try {
                hashed_ = Hashed::insert(hashed_, k, std::move(v));
            } catch (...) {
                ctx_->meter->sub(added);
                throw;
            }
        }
    }

    void erase(const Key& k) {
        if (is_direct(k)) {
            const auto i = static_cast<std::uint32_t>(k.a);
            if (i >= cap() || !at(i).used) throw_missing_key(ctx_->rank, name(), k);
            Direct& d = at(i);
            ctx_->meter->sub(size(d.value()));
            d.clear();
            --arena_->counts_[column()];
            return;
        }
        if (is_paired(k)) {
            Direct* pairs = arena_->pairs_;
            if (!pairs || !paired(k, pairs).used) throw_missing_key(ctx_->rank, name(), k);
            Direct& d = paired(k, pairs);
            ctx_->meter->sub(size(d.value()));
            d.clear();
            --arena_->counts_[column()];
            return;
        }
        Entry* e = hashed_ ? hashed_->find(k) : nullptr;
        if (!e) throw_missing_key(ctx_->rank, name(), k);
        ctx_->meter->sub(size(e->value()));
        hashed_->erase(e);
    }

    // Plain keys in order, then the paired keys {a, 0}, then the others.
    template <class F>
    void for_each(F&& f) const {
        for_each_direct(f);
        if (hashed_)
            for (std::uint32_t i = 0; i < hashed_->capacity; ++i) {
                const Entry& e = hashed_->slots()[i];
                if (e.used) f(e.key(), e.value());
            }
    }

private:
    // The size of a value: the arena's memo when it holds the size for the
    // value's size key, else the cost model's (then remembered).
    Size size(const V& v) {
        const dtsim::detail::SizeKey k = dtsim::detail::size_key(v);
        auto& memo = arena_->memo_;
        if (k.count == memo.count && k.total == memo.total) return {memo.num, memo.den};
        const Size s = size_of(*ctx_->costs, v);
        if (s.den <= 0) throw_bad_size(name(), s);
        // Remembered when the key fits in 32 bits (it does for the puzzle's sizes).
        constexpr std::int64_t hi = std::numeric_limits<std::int32_t>::max();
        if (arena_ != &dtsim::detail::StoreArena<V>::none() && k.count >= 0 && k.count <= hi && k.total >= 0 && k.total <= hi)
            memo = {static_cast<std::int32_t>(k.count), static_cast<std::int32_t>(k.total), s.num, s.den};
        return s;
    }

    // Plain keys `l` (by far the most common, and consecutive: layers) index
    // the arena directly, and so do paired keys {l, 0}; other pairs `{l, r}`
    // and unusual keys go to an open-addressing hash table, allocated on first use.
    using Direct = dtsim::detail::StoreEntry<V>;
    using Entry = dtsim::detail::HashedEntry<V>;
    using Hashed = dtsim::detail::StoreHashTable<V>;
    // regrow and the table's growth move values and cannot undo a throwing move;
    // the slots after the table's header are aligned by calloc's alignment.
    static_assert(std::is_nothrow_move_constructible_v<V> && std::is_nothrow_move_assignable_v<V>);
    static_assert(alignof(Entry) <= alignof(std::max_align_t));
    static constexpr std::int64_t kDirectLimit = 1 << 20;
    [[nodiscard]] static bool is_direct(const Key& k) { return k.b == Key::kNone && k.a >= 0 && k.a < kDirectLimit; }
    const V* find(const Key& k) const {
        if (is_direct(k)) {
            const auto i = static_cast<std::uint32_t>(k.a);
            return i < cap() && at(i).used ? &at(i).value() : nullptr;
        }
        if (is_paired(k)) {
            Direct* pairs = arena_->pairs_;
            return pairs && paired(k, pairs).used ? &paired(k, pairs).value() : nullptr;
        }
        const Entry* e = hashed_ ? hashed_->find(k) : nullptr;
        return e ? &e->value() : nullptr;
    }
    V* find(const Key& k) { return const_cast<V*>(std::as_const(*this).find(k)); }
    // Plain keys 0..cap()-1 have an entry: this store's column of its arena,
    // key i `ranks` entries after key i-1.
    [[nodiscard]] std::uint32_t cap() const { return arena_->keys_; }
    // This store's rank in its arena (0 in an arena of its own).
    [[nodiscard]] std::size_t column() const { return static_cast<std::size_t>(direct_ - arena_->data_); }
    Direct& at(std::uint32_t i) { return direct_[std::size_t{i} * arena_->ranks_]; }
    const Direct& at(std::uint32_t i) const { return direct_[std::size_t{i} * arena_->ranks_]; }
    // Pair keys {a, 0} with an entry in the arena (the others are hashed).
    [[nodiscard]] bool is_paired(const Key& k) const {
        return k.b == 0 && k.a >= 0 && static_cast<std::uint32_t>(k.a) < arena_->pair_keys_;
    }
    // Pair key {a, 0}'s entry in `pairs` (the arena's pair-key entries).
    Direct& paired(const Key& k, Direct* pairs) const {
        return pairs[column() + static_cast<std::size_t>(k.a) * arena_->ranks_];
    }
    // Calls f(key, value) for the plain keys, then the paired keys.
    template <class F>
    void for_each_direct(F&& f) const {
        for (std::uint32_t i = 0; i < cap(); ++i)
            if (at(i).used) f(Key(static_cast<int>(i)), at(i).value());
        if (Direct* pairs = arena_->pairs_)
            for (std::uint32_t a = 0; a < arena_->pair_keys_; ++a) {
                const Key k(static_cast<int>(a), 0);
                if (paired(k, pairs).used) f(k, paired(k, pairs).value());
            }
    }
    // Moves the plain and paired keys to an arena of the store's own, with
    // room for n plain keys and the same pair keys (made, pair keys' entries
    // included, before anything moves: a failed allocation leaves the store as it was).
    void regrow(std::size_t n) {
        std::unique_ptr<dtsim::detail::StoreArena<V>> own(
            new dtsim::detail::StoreArena<V>(1, static_cast<std::uint32_t>(n), arena_->pair_keys_));
        own->store_own_ = true;
        if (arena_->pairs_) own->pairs();
        for (std::uint32_t i = 0; i < cap(); ++i)
            if (at(i).used) at(i).move_to(own->entry(0, i));
        if (Direct* pairs = arena_->pairs_)
            for (std::uint32_t a = 0; a < arena_->pair_keys_; ++a) {
                Direct& d = paired(Key(static_cast<int>(a), 0), pairs);
                if (d.used) d.move_to(own->pairs_[a]);
            }
        if (arena_->counts_) own->counts_[0] = std::exchange(arena_->counts_[column()], 0);
        release_arena();
        arena_ = own.release();
        direct_ = &arena_->entry(0, 0);
    }
    // Forgets the arena; deletes it, with the values left in it, if it is the
    // store's own (a shared arena destroys its values itself).
    void release_arena() {
        if (arena_->store_own_) delete arena_;
        arena_ = &dtsim::detail::StoreArena<V>::none();
        direct_ = nullptr;
    }

    const StoreContext* ctx_;
    Direct* direct_ = nullptr;              // the entry for key 0 in arena_
    Hashed* hashed_ = nullptr;              // the other keys
    const dtsim::detail::StoreArena<V>* arena_;            // where the plain keys are (none() when there are none)
};
static_assert(sizeof(Store<WeightGrad>) == 32, "a store header is half a cache line");

// `store[k]`: reads as the stored value, assignment stores.
template <class V>
class Slot {
public:
    Slot(Store<V>& s, Key k) : store_(&s), key_(k) {}
    Slot(const Slot&) = default;
    operator const V&() const { return store_->get(key_); }  // NOLINT: implicit by design
    [[nodiscard]] const V& get() const { return store_->get(key_); }
    const V* operator->() const { return &get(); }
    Slot& operator=(V&& v) {
        store_->set(key_, std::move(v));
        return *this;
    }
    Slot& operator=(const V& v) {
        store_->set(key_, V(v));
        return *this;
    }
    Slot& operator=(const Slot& other) {  // copies the value, as `d[a] = d[b]`
        store_->set(key_, V(other.get()));
        return *this;
    }
    void erase() const { store_->erase(key_); }
    [[nodiscard]] Store<V>& store() const { return *store_; }
    [[nodiscard]] const Key& key() const { return key_; }

private:
    Store<V>* store_;
    Key key_;
};

template <class V>
std::size_t len(const Store<V>& s) {
    return s.size();
}

// Python's `del a[k1], b[k2]`.
template <class... V>
void del(const Slot<V>&... slots) {
    (slots.erase(), ...);
}

// Python's `a[k1], b[k2] = f()` for functions returning a pair.
template <class A, class B>
struct SlotPair {
    Slot<A> first;
    Slot<B> second;
    SlotPair& operator=(std::pair<A, B> values) {
        first = std::move(values.first);
        second = std::move(values.second);
        return *this;
    }
};

template <class A, class B>
SlotPair<A, B> tie(Slot<A> a, Slot<B> b) {
    return {a, b};
}

}  // namespace dtsim::puzzle
