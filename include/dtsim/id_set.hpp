// A set of non-negative integer ids (batches, shards, ranks) stored as sorted,
// disjoint, non-adjacent half-open intervals. The sets that training schedules
// build (one rank's shard, all batches, a contiguous stage) are one interval, so
// they stay O(1) in size at any rank count; no heap allocation for one interval.
#pragma once

#include <cstdint>
#include <algorithm>
#include <climits>
#include <utility>
#include <type_traits>
#include <span>
#include <string>
#include <vector>

namespace dtsim {

class IdSet {
public:
    struct Interval {
        std::int64_t lo;  // first id
        std::int64_t hi;  // one past the last id
        friend bool operator==(const Interval&, const Interval&) = default;
    };

    IdSet() = default;
    // IdSet{0, 3, 4}. A variadic constructor, not an initializer_list: g++ 12
    // rejects initializer_list temporaries inside co_await argument lists.
    template <class... I>
        requires(sizeof...(I) > 0 && (std::is_integral_v<I> && ...))
    IdSet(I... ids) {  // NOLINT: implicit, so that f({rank}) reads like Python's f([rank])
        (insert(static_cast<std::int64_t>(ids)), ...);
    }

    // {lo, lo+1, ..., hi-1}; empty when hi <= lo.
    static IdSet range(std::int64_t lo, std::int64_t hi) {
        IdSet s;
        if (hi > lo) s.one_ = {lo, hi};
        return s;
    }
    static IdSet single(std::int64_t id) { return range(id, id + 1); }
    template <class It>
    static IdSet of(It first, It last) {
        IdSet s;
        for (; first != last; ++first) s.insert(*first);
        return s;
    }

    void insert(std::int64_t id);
    void insert_range(std::int64_t lo, std::int64_t hi);

    IdSet(const IdSet& o) : one_(o.one_) {
        if (o.is_many()) one_.hi = o.copy_many();
    }
    IdSet(IdSet&& o) noexcept : one_(o.one_) { o.one_ = {0, 0}; }
    IdSet& operator=(const IdSet& o) {
        if (this != &o) {
            if (is_many() || o.is_many()) {
                IdSet tmp(o);
                swap(tmp);
            } else {
                one_ = o.one_;
            }
        }
        return *this;
    }
    IdSet& operator=(IdSet&& o) noexcept {
        if (this != &o) {
            if (is_many()) free_many();
            one_ = o.one_;
            o.one_ = {0, 0};
        }
        return *this;
    }
    ~IdSet() {
        if (is_many()) free_many();
    }
    void swap(IdSet& o) noexcept { std::swap(one_, o.one_); }

    [[nodiscard]] bool empty() const { return !is_many() && one_.hi <= one_.lo; }
    [[nodiscard]] std::int64_t size() const {  // number of ids
        if (!is_many()) return one_.hi > one_.lo ? one_.hi - one_.lo : 0;
        return many_size();
    }
    [[nodiscard]] bool contains(std::int64_t id) const;
    [[nodiscard]] bool is_subset_of(const IdSet& other) const {
        if (!is_many() && !other.is_many())
            return one_.hi <= one_.lo || (other.one_.lo <= one_.lo && one_.hi <= other.one_.hi);
        return is_subset_of_slow(other);
    }
    // True when the set is exactly {0, ..., n-1}.
    [[nodiscard]] bool is_prefix(std::int64_t n) const {
        if (n <= 0) return empty();
        return one_.lo == 0 && one_.hi == n;  // never true in the heap form
    }
    [[nodiscard]] std::int64_t min() const { return intervals().front().lo; }
    [[nodiscard]] std::int64_t max() const { return intervals().back().hi - 1; }

    [[nodiscard]] IdSet operator|(const IdSet& other) const {
        IdSet r = *this;
        r |= other;
        return r;
    }
    IdSet& operator|=(const IdSet& other) {
        // Fast path: two touching or overlapping single intervals stay one.
        if (!is_many() && !other.is_many() && one_.hi > one_.lo && other.one_.hi > other.one_.lo &&
            other.one_.lo <= one_.hi && other.one_.hi >= one_.lo) {
            one_ = {std::min(one_.lo, other.one_.lo), std::max(one_.hi, other.one_.hi)};
            return *this;
        }
        return unite_slow(other);
    }
    friend bool operator==(const IdSet& a, const IdSet& b) {
        if (!a.is_many() && !b.is_many())
            return a.one_ == b.one_ || (a.one_.hi <= a.one_.lo && b.one_.hi <= b.one_.lo);
        return equal_slow(a, b);
    }

    [[nodiscard]] std::span<const Interval> intervals() const {
        if (is_many()) return std::span<const Interval>(many());
        return std::span<const Interval>(&one_, one_.hi > one_.lo ? 1 : 0);
    }
    [[nodiscard]] std::vector<std::int64_t> to_vector() const;
    // "{}", "{3}", "{0-3}", "{0-3,7}": short and readable in error messages.
    [[nodiscard]] std::string str() const;

    template <class F>
    void for_each(F&& f) const {
        for (const auto& i : intervals())
            for (std::int64_t v = i.lo; v < i.hi; ++v) f(v);
    }

private:
    void normalize();  // back to the inline form when one interval is left
    // Inline form: one_ is the set (empty when one_.hi <= one_.lo). Heap form
    // (two or more intervals): one_.lo is kManyTag and one_.hi holds the address
    // of a std::vector<Interval>. 16 bytes in all, so that an Event fits a cache line.
    static constexpr std::int64_t kManyTag = INT64_MIN;
    [[nodiscard]] bool is_many() const { return one_.lo == kManyTag; }
    [[nodiscard]] std::vector<Interval>& many() const {
        return *reinterpret_cast<std::vector<Interval>*>(static_cast<std::intptr_t>(one_.hi));
    }
    void set_many(std::vector<Interval>* v) {
        one_.lo = kManyTag;
        one_.hi = static_cast<std::int64_t>(reinterpret_cast<std::intptr_t>(v));
    }
    [[nodiscard]] bool is_subset_of_slow(const IdSet& other) const;
    IdSet& unite_slow(const IdSet& other);
    static bool equal_slow(const IdSet& a, const IdSet& b);
    [[nodiscard]] std::int64_t copy_many() const;  // address of a copy of many()
    void free_many();
    [[nodiscard]] std::int64_t many_size() const;
    Interval one_{0, 0};
};

}  // namespace dtsim
