// The five stores of a puzzle GPU (weights, optimizer states, activations,
// activation grads, weight grads): maps from a key (an int or a pair of ints,
// as the Python dicts are indexed) to values, whose contents are the GPU's
// memory. `store[k] = v` stores, `del(store[k], ...)` frees at once.
#pragma once

#include "dtsim/puzzle/cost_model.hpp"
#include "dtsim/puzzle/memory_meter.hpp"
#include "dtsim/puzzle/values.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace dtsim::puzzle {

// A store key: `l` or `{l, r}`.
struct Key {
    static constexpr std::int64_t kNone = std::numeric_limits<std::int64_t>::min();
    Key(std::int64_t first) : a(first) {}  // NOLINT: implicit, as Python's d[l]
    Key(std::int64_t first, std::int64_t second) : a(first), b(second) {}
    std::int64_t a;
    std::int64_t b = kNone;
    friend bool operator==(const Key&, const Key&) = default;
    [[nodiscard]] std::string str() const;  // "3" or "(3, 0)"
};

class Model;

// Where a store reports missing keys and finds its memory meter and sizes.
struct StoreContext {
    Model* model = nullptr;
    MemoryMeter* meter = nullptr;
    const CostModel* costs = nullptr;
    int rank = 0;
};

[[noreturn]] void throw_missing_key(int rank, const char* store, const Key& key);

Size size_of(const CostModel& c, const Weight& v);
Size size_of(const CostModel& c, const OptState& v);
Size size_of(const CostModel& c, const Activation& v);
Size size_of(const CostModel& c, const ActivationGrad& v);
Size size_of(const CostModel& c, const WeightGrad& v);

// What a value's size depends on (the cost model is a pure function of it):
// lets a store remember the last size instead of asking the cost model per operation.
struct SizeKey {
    std::int64_t count = -1;
    std::int64_t total = -1;
    friend bool operator==(const SizeKey&, const SizeKey&) = default;
};
inline SizeKey size_key(const Weight& v) { return {v.shards.size(), v.total}; }
inline SizeKey size_key(const OptState& v) { return {v.shards.size(), v.total}; }
inline SizeKey size_key(const Activation& v) { return {v.batches.size(), 0}; }
inline SizeKey size_key(const ActivationGrad& v) { return {v.batches.size(), 0}; }
inline SizeKey size_key(const WeightGrad& v) { return {v.shards.size(), v.total}; }

template <class V>
class Slot;

template <class V>
class Store {
public:
    Store(StoreContext ctx, const char* name) : ctx_(ctx), name_(name) {}
    Store(const Store&) = delete;
    Store& operator=(const Store&) = delete;

    Slot<V> operator[](Key k) { return Slot<V>(*this, k); }

    [[nodiscard]] const V& get(const Key& k) const {
        const V* v = find(k);
        if (!v) throw_missing_key(ctx_.rank, name_, k);
        return *v;
    }
    [[nodiscard]] bool contains(const Key& k) const { return find(k) != nullptr; }
    [[nodiscard]] std::size_t size() const { return count_; }
    [[nodiscard]] const char* name() const { return name_; }
    // Room for plain keys 0..n-1 without reallocating (the model reserves one per layer).
    void reserve(std::size_t n) { direct_.reserve(n); }
    // Prefetches the entries next to the plain key used last: strategies walk
    // layers, so a resumed rank's next access is usually there.
    void prefetch_near_last() const {
        const Direct* d = direct_.data();
        if (!d) return;
        const std::size_t n = direct_.capacity();
        const std::size_t i = last_ < n ? last_ : 0;
        __builtin_prefetch(d + i);
        if (i + 1 < n) __builtin_prefetch(d + i + 1);
        if (i > 0) __builtin_prefetch(d + i - 1);
    }

    void set(const Key& k, V v) {
        ctx_.meter->add(size(v));
        if (V* old = find(k)) {
            ctx_.meter->sub(size(*old));
            *old = std::move(v);
            return;
        }
        ++count_;
        if (is_direct(k)) {
            const auto i = static_cast<std::size_t>(k.a);
            if (i < direct_.size()) {
                direct_[i] = Direct{std::move(v), true};
                return;
            }
            // Appending (the usual case, layer after layer) constructs in place.
            if (i >= direct_.capacity()) direct_.reserve(std::max<std::size_t>(i + 1, direct_.size() * 2));
            direct_.resize(i);
            direct_.emplace_back(std::move(v), true);
            return;
        }
        if ((hashed_count_ + 1) * 4 > slots_.size() * 3) grow();
        ++hashed_count_;
        std::size_t i = home(k);
        while (slots_[i].used) i = (i + 1) & mask();
        slots_[i] = Entry{k, std::move(v), true};
    }

    void erase(const Key& k) {
        if (is_direct(k)) {
            const auto i = static_cast<std::size_t>(k.a);
            if (i >= direct_.size() || !direct_[i].used) throw_missing_key(ctx_.rank, name_, k);
            ctx_.meter->sub(size(direct_[i].value));
            --count_;
            direct_[i] = Direct{};
            return;
        }
        Entry* e = find_hashed(k);
        if (!e) throw_missing_key(ctx_.rank, name_, k);
        ctx_.meter->sub(size(e->value));
        --count_;
        --hashed_count_;
        // Backward-shift deletion keeps probe chains intact without tombstones.
        std::size_t hole = static_cast<std::size_t>(e - slots_.data());
        std::size_t j = (hole + 1) & mask();
        while (slots_[j].used) {
            std::size_t h = home(slots_[j].key);
            if (((j - h) & mask()) >= ((j - hole) & mask())) {
                slots_[hole] = std::move(slots_[j]);
                hole = j;
            }
            j = (j + 1) & mask();
        }
        slots_[hole] = Entry{};
    }

    template <class F>
    void for_each(F&& f) const {
        for (std::size_t i = 0; i < direct_.size(); ++i)
            if (direct_[i].used) f(Key(static_cast<std::int64_t>(i)), direct_[i].value);
        for (const auto& e : slots_)
            if (e.used) f(e.key, e.value);
    }

private:
    // The size of a value, remembered for the last two size keys (a store
    // often alternates between two kinds, e.g. weight shards and whole weights).
    Size size(const V& v) {
        const SizeKey k = size_key(v);
        if (k == memo_[0].key) return memo_[0].size;
        if (k == memo_[1].key) return memo_[1].size;
        memo_[1] = memo_[0];
        memo_[0] = {k, size_of(*ctx_.costs, v)};
        return memo_[0].size;
    }

    // Plain keys `l` (by far the most common, and consecutive: layers) index an
    // array directly, so loops over layers walk memory forward and the key is
    // the index; pairs `{l, r}` and unusual keys go to an open-addressing hash table.
    struct Direct {
        V value{};
        bool used = false;
    };
    struct Entry {
        Key key{0};
        V value{};
        bool used = false;
    };
    static constexpr std::int64_t kDirectLimit = 1 << 20;
    [[nodiscard]] static bool is_direct(const Key& k) { return k.b == Key::kNone && k.a >= 0 && k.a < kDirectLimit; }
    [[nodiscard]] std::size_t mask() const { return slots_.size() - 1; }
    [[nodiscard]] std::size_t home(const Key& k) const {
        auto h = static_cast<std::uint64_t>(k.a) * 0x9E3779B97F4A7C15ull ^
                 (static_cast<std::uint64_t>(k.b) + 0x632BE59BD9B4E019ull) * 0xC2B2AE3D27D4EB4Full;
        return static_cast<std::size_t>(h ^ (h >> 29)) & mask();
    }
    const Entry* find_hashed(const Key& k) const {
        if (slots_.empty()) return nullptr;
        for (std::size_t i = home(k);; i = (i + 1) & mask()) {
            const Entry& e = slots_[i];
            if (!e.used) return nullptr;
            if (e.key == k) return &e;
        }
    }
    Entry* find_hashed(const Key& k) { return const_cast<Entry*>(std::as_const(*this).find_hashed(k)); }
    const V* find(const Key& k) const {
        if (is_direct(k)) {
            const auto i = static_cast<std::size_t>(k.a);
            last_ = i;
            return i < direct_.size() && direct_[i].used ? &direct_[i].value : nullptr;
        }
        const Entry* e = find_hashed(k);
        return e ? &e->value : nullptr;
    }
    V* find(const Key& k) { return const_cast<V*>(std::as_const(*this).find(k)); }
    void grow() {
        std::vector<Entry> old = std::move(slots_);
        slots_.assign(old.empty() ? 16 : old.size() * 2, Entry{});
        for (auto& e : old)
            if (e.used) {
                std::size_t i = home(e.key);
                while (slots_[i].used) i = (i + 1) & mask();
                slots_[i] = std::move(e);
            }
    }

    StoreContext ctx_;
    const char* name_;
    std::vector<Direct> direct_;
    std::vector<Entry> slots_;
    std::size_t count_ = 0;
    std::size_t hashed_count_ = 0;
    mutable std::size_t last_ = 0;  // the plain key used last
    struct Memo {
        SizeKey key;
        Size size;
    };
    Memo memo_[2];
};

// `store[k]`: reads as the stored value, assignment stores.
template <class V>
class Slot {
public:
    Slot(Store<V>& s, Key k) : store_(&s), key_(k) {}
    Slot(const Slot&) = default;
    operator const V&() const { return store_->get(key_); }  // NOLINT: implicit by design
    [[nodiscard]] const V& get() const { return store_->get(key_); }
    const V* operator->() const { return &get(); }
    Slot& operator=(V v) {
        store_->set(key_, std::move(v));
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
