// The machinery under the puzzle world's stores (dtsim/puzzle/store.hpp): the
// arenas that hold every rank's plain and paired keys side by side, their
// entries, the size memo, and the hash table of a store's other keys.
#pragma once

#include "dtsim/detail/pages.hpp"
#include "dtsim/puzzle/cost_model.hpp"
#include "dtsim/puzzle/key.hpp"
#include "dtsim/puzzle/values.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <new>
#include <stdexcept>
#include <type_traits>
#include <utility>

namespace dtsim::puzzle {
template <class V>
class Store;
}  // namespace dtsim::puzzle

namespace dtsim::detail {

// What a value's size depends on (the cost model is a pure function of it):
// lets a store remember the last size instead of asking the cost model per operation.
struct SizeKey {
    std::int64_t count = -1;
    std::int64_t total = -1;
    friend bool operator==(const SizeKey&, const SizeKey&) = default;
};
inline SizeKey size_key(const puzzle::Weight& v) { return {v.shards.size(), v.total}; }
inline SizeKey size_key(const puzzle::OptState& v) { return {v.shards.size(), v.total}; }
inline SizeKey size_key(const puzzle::Activation& v) { return {v.batches.size(), 0}; }
inline SizeKey size_key(const puzzle::ActivationGrad& v) { return {v.batches.size(), 0}; }
inline SizeKey size_key(const puzzle::WeightGrad& v) { return {v.shards.size(), v.total}; }

// A store's entry for a key: room for a value, and whether one is there
// (a value is constructed in `raw` exactly while `used`). Zeroed memory is a
// valid array of empty entries, and so is an array whose values have all
// been destroyed: arrays of entries are the operating system's zero pages
// (from 128 KiB; touched only when a key is first stored) or such an array
// that an arena of the same size released (pages.hpp).
template <class V>
struct StoreEntry {
    alignas(V) unsigned char raw[sizeof(V)];
    bool used;
    V& value() { return *std::launder(reinterpret_cast<V*>(raw)); }
    const V& value() const { return *std::launder(reinterpret_cast<const V*>(raw)); }
    // An empty entry takes `v`.
    void fill(V&& v) {
        new (raw) V(std::move(v));
        used = true;
    }
    // A used entry gives its value up.
    void clear() {
        value().~V();
        used = false;
    }
    // A used entry's value moves to the empty entry `to`.
    void move_to(StoreEntry& to) {
        to.fill(std::move(value()));
        clear();
    }
};

// Clears the used entries among `n` (an array of StoreEntry or of a type derived from it).
template <class E>
void clear_entries(E* entries, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i)
        if (entries[i].used) entries[i].clear();
}

// Arrays of entries whose values have all been destroyed: a block of them is
// an array of empty entries again, whatever the bytes of the values left.
template <class V>
inline constexpr PageKind kEmptyEntries{"empty store entries"};

// `n` empty entries (zeroed, or an array of empty entries released before: see
// pages.hpp), released with release_entries(p, n) once every entry is empty.
template <class V>
StoreEntry<V>* allocate_entries(std::size_t n) {
    static_assert(std::is_trivial_v<StoreEntry<V>> && alignof(StoreEntry<V>) <= 64,
                  "zeroed pages create the entries");
    if (n > std::numeric_limits<std::size_t>::max() / sizeof(StoreEntry<V>)) throw std::bad_alloc();
    return static_cast<StoreEntry<V>*>(allocate_pages(n * sizeof(StoreEntry<V>), &kEmptyEntries<V>));
}
template <class V>
void release_entries(StoreEntry<V>* p, std::size_t n) noexcept {
    release_pages(p, n * sizeof(StoreEntry<V>), &kEmptyEntries<V>);
}

// The entries for the plain keys 0..keys-1 of one value type's store on every
// rank of a run, key-major: key k of rank r is entry k * ranks + r. A
// collective releases the ranks in rank order and each then touches the same
// few keys, so a sweep over the ranks walks each key's row forward instead of
// jumping from one rank's array to the next. The stores construct and destroy
// values in it as keys are set and erased; at the end the arena destroys the
// values left, in memory order (stores doing it would visit a line per entry).
//
// Pair keys {a, 0} with a below the arena's keys (fsdp's gathered weight
// {l, 0}) have entries too, in one more such array, made when a store first
// uses it: a hash table of each rank's own would cost every resumed rank the
// table's lines.
//
// The arena also remembers the size of the last value its stores sized (the
// cost model is a pure function of the value's SizeKey, and a virtual call
// away): one memo that every rank reads, hot in cache, instead of one in each
// rank's store. All stores in an arena use the same cost model (attach checks).
template <class V>
class StoreArena {
public:
    StoreArena(int ranks, std::uint32_t keys) : StoreArena(ranks, keys, keys) {}
    StoreArena(const StoreArena&) = delete;
    StoreArena& operator=(const StoreArena&) = delete;
    ~StoreArena() {
        clear_entries(data_, entries(keys_));
        release_entries(data_, entries(keys_));
        std::free(counts_);
        if (pairs_) {
            clear_entries(pairs_, entries(pair_keys_));
            release_entries(pairs_, entries(pair_keys_));
        }
    }

    // Rank r's entry for key k.
    [[nodiscard]] StoreEntry<V>& entry(std::uint32_t rank, std::uint32_t key) const {
        return data_[std::size_t{key} * ranks_ + rank];
    }
    [[nodiscard]] std::uint32_t ranks() const { return ranks_; }

private:
    friend class puzzle::Store<V>;
    // Pair keys {a, 0} have entries for a < pair_keys (a store's own arena
    // keeps the pair keys of the arena it outgrew, so no key changes place).
    StoreArena(int ranks, std::uint32_t keys, std::uint32_t pair_keys)
        : ranks_(static_cast<std::uint32_t>(ranks)),
          keys_(keys),
          pair_keys_(pair_keys),
          data_(allocate_entries<V>(entries(keys_))),
          counts_(static_cast<std::uint32_t*>(allocate_zeroed(ranks_, sizeof(std::uint32_t)))) {
        if (!counts_) {
            release_entries(data_, entries(keys_));
            throw std::bad_alloc();
        }
    }
    // No keys: where a store without plain keys points (never written, never freed).
    StoreArena() : ranks_(1), keys_(0), pair_keys_(0), data_(nullptr), counts_(nullptr) {}
    // The entries of `keys` rows (at least one entry: every arena has an address of its own).
    [[nodiscard]] std::size_t entries(std::uint32_t keys) const {
        return std::max<std::size_t>(std::size_t{ranks_} * keys, 1);
    }
    // The entries of pair keys {a, 0}, laid out as the plain keys' (made on first use).
    StoreEntry<V>* pairs() const {
        if (!pairs_) pairs_ = allocate_entries<V>(entries(pair_keys_));
        return pairs_;
    }
    static const StoreArena& none() {
        static const StoreArena* const empty = new StoreArena();
        return *empty;
    }
    struct SizeMemo {
        std::int32_t count = -1;  // the size of a value of size key (count, total) is num / den
        std::int32_t total = -1;
        std::int64_t num = 0;
        std::int64_t den = 1;
    };
    std::uint32_t ranks_;
    std::uint32_t keys_;
    std::uint32_t pair_keys_;
    StoreEntry<V>* data_;
    std::uint32_t* counts_;  // by rank: the keys stored in its rooms (len() asks)
    // Pair keys {a, 0} (null until a store uses one). Only b = 0: {l, 0} is
    // what a sweep meets (fsdp's gathered weight); a rank that walks its own
    // microbatches {l, mb} alone is better served by its compact hash table
    // than by arrays it would stride through.
    mutable StoreEntry<V>* pairs_ = nullptr;
    mutable SizeMemo memo_;
    mutable const puzzle::CostModel* costs_ = nullptr;  // the stores' cost model, once one attached
    bool store_own_ = false;  // made by a store for itself (which deletes it)
};

// A slot of a store's hash table: a StoreEntry and its key (zeroed memory is an empty slot).
template <class V>
struct HashedEntry : StoreEntry<V> {
    std::int32_t a, b;  // the key
    [[nodiscard]] puzzle::Key key() const { return {a, b}; }
    [[nodiscard]] bool has(const puzzle::Key& k) const { return a == k.a && b == k.b; }
    void set_key(const puzzle::Key& k) {
        a = k.a;
        b = k.b;
    }
};
// A store's keys other than its plain and paired ones, in an open-addressing hash
// table: one allocation, a small header and then the slots, so that a lookup goes
// from the store's line to the table's with one pointer.
template <class V>
struct StoreHashTable {
    using Entry = HashedEntry<V>;
    std::uint32_t count;
    std::uint32_t capacity;  // a power of two
    static constexpr std::size_t kHeader = (8 + alignof(Entry) - 1) / alignof(Entry) * alignof(Entry);
    static constexpr std::uint32_t kFirstCapacity = 4;  // strategies keep few pair keys at once

    Entry* slots() { return reinterpret_cast<Entry*>(reinterpret_cast<char*>(this) + kHeader); }
    const Entry* slots() const { return reinterpret_cast<const Entry*>(reinterpret_cast<const char*>(this) + kHeader); }
    static StoreHashTable* make(std::uint32_t capacity) {
        // Zeroed: every slot empty (the header and the slots are trivial types).
        void* raw = allocate_zeroed(1, kHeader + std::size_t{capacity} * sizeof(Entry));
        if (!raw) throw std::bad_alloc();
        auto* h = static_cast<StoreHashTable*>(raw);
        h->capacity = capacity;
        return h;
    }
    static void destroy(StoreHashTable* h) {
        if (!h) return;
        clear_entries(h->slots(), h->capacity);
        std::free(h);
    }
    [[nodiscard]] std::size_t mask() const { return capacity - 1; }
    [[nodiscard]] std::size_t home(const puzzle::Key& k) const {
        auto h = static_cast<std::uint64_t>(k.a) * 0x9E3779B97F4A7C15ull ^
                 (static_cast<std::uint64_t>(k.b) + 0x632BE59BD9B4E019ull) * 0xC2B2AE3D27D4EB4Full;
        return static_cast<std::size_t>(h ^ (h >> 29)) & mask();
    }
    Entry* find(const puzzle::Key& k) {
        for (std::size_t i = home(k);; i = (i + 1) & mask()) {
            Entry& e = slots()[i];
            if (!e.used) return nullptr;
            if (e.has(k)) return &e;
        }
    }
    // Inserts a key that is not present; returns the table (a new one when it grew).
    static StoreHashTable* insert(StoreHashTable* h, const puzzle::Key& k, V&& v) {
        if (!h) h = make(kFirstCapacity);
        if ((h->count + 1) * 4 > h->capacity * 3) {
            StoreHashTable* bigger = make(h->capacity * 2);
            for (std::uint32_t i = 0; i < h->capacity; ++i) {
                Entry& e = h->slots()[i];
                if (e.used) bigger->place(e.key(), std::move(e.value()));
            }
            destroy(h);
            h = bigger;
        }
        h->place(k, std::move(v));
        return h;
    }
    void place(const puzzle::Key& k, V&& v) {
        ++count;
        std::size_t i = home(k);
        while (slots()[i].used) i = (i + 1) & mask();
        Entry& e = slots()[i];
        e.set_key(k);
        e.fill(std::move(v));
    }
    void erase(Entry* e) {
        --count;
        e->clear();
        // Backward-shift deletion keeps probe chains intact without tombstones.
        Entry* s = slots();
        std::size_t hole = static_cast<std::size_t>(e - s);
        std::size_t j = (hole + 1) & mask();
        while (s[j].used) {
            std::size_t h = home(s[j].key());
            if (((j - h) & mask()) >= ((j - hole) & mask())) {
                s[hole].set_key(s[j].key());
                s[j].move_to(s[hole]);
                hole = j;
            }
            j = (j + 1) & mask();
        }
    }
};
static_assert(std::is_trivial_v<HashedEntry<puzzle::Weight>> && std::is_trivial_v<StoreHashTable<puzzle::Weight>>,
              "calloc creates the table");

}  // namespace dtsim::detail
