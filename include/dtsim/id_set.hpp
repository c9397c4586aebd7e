// A set of integer ids (batches, shards, ranks) stored as sorted,
// disjoint, non-adjacent half-open intervals. The sets that training schedules
// build (one rank's shard, all batches, a contiguous stage) are one interval, so
// they stay O(1) in size at any rank count; no heap allocation for one interval
// of ids below 2^31 - 1.
#pragma once

#include <cstddef>
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
    // The intervals of a set, in order: a view, valid while the set is
    // unchanged. An inline set's one interval is a copy in the view, so the
    // pointers begin() and end() give (and a range-for's elements) live only
    // as long as the view; front(), back() and [] return copies.
    class Intervals {
    public:
        [[nodiscard]] const Interval* begin() const { return many_ ? many_ : &one_; }
        [[nodiscard]] const Interval* end() const { return begin() + n_; }
        [[nodiscard]] std::size_t size() const { return n_; }
        [[nodiscard]] bool empty() const { return n_ == 0; }
        [[nodiscard]] Interval front() const { return begin()[0]; }
        [[nodiscard]] Interval back() const { return begin()[n_ - 1]; }
        [[nodiscard]] Interval operator[](std::size_t i) const { return begin()[i]; }

    private:
        friend class IdSet;
        Intervals(const Interval* many, std::size_t n) : many_(many), n_(n) {}
        explicit Intervals(Interval one) : n_(one.hi > one.lo ? 1 : 0), one_(one) {}
        const Interval* many_ = nullptr;  // the heap form's intervals; null: one_
        std::size_t n_ = 0;
        Interval one_{0, 0};
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
        if (hi > lo) s.assign_one(lo, hi);
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

    IdSet(const IdSet& o) : lo_(o.lo_), hi_(o.hi_) {
        if (o.is_many()) copy_many(o);
    }
    IdSet(IdSet&& o) noexcept : lo_(o.lo_), hi_(o.hi_) { o.lo_ = o.hi_ = 0; }
    IdSet& operator=(const IdSet& o) {
        if (this != &o) {
            if (is_many() || o.is_many()) {
                IdSet tmp(o);
                swap(tmp);
            } else {
                lo_ = o.lo_;
                hi_ = o.hi_;
            }
        }
        return *this;
    }
    IdSet& operator=(IdSet&& o) noexcept {
        if (this != &o) {
            if (is_many()) free_many();
            lo_ = o.lo_;
            hi_ = o.hi_;
            o.lo_ = o.hi_ = 0;
        }
        return *this;
    }
    ~IdSet() {
        if (is_many()) free_many();
    }
    void swap(IdSet& o) noexcept {
        std::swap(lo_, o.lo_);
        std::swap(hi_, o.hi_);
    }

    [[nodiscard]] bool empty() const { return !is_many() && hi_ <= lo_; }
    [[nodiscard]] std::int64_t size() const {  // number of ids
        if (!is_many()) return hi_ > lo_ ? std::int64_t{hi_} - lo_ : 0;
        return many_size();
    }
    [[nodiscard]] bool contains(std::int64_t id) const;
    [[nodiscard]] bool is_subset_of(const IdSet& other) const {
        if (!is_many() && !other.is_many()) return hi_ <= lo_ || (other.lo_ <= lo_ && hi_ <= other.hi_);
        return is_subset_of_slow(other);
    }
    // True when the set is exactly {0, ..., n-1}.
    [[nodiscard]] bool is_prefix(std::int64_t n) const {
        if (n <= 0) return empty();
        if (!is_many()) return lo_ == 0 && hi_ == n;
        return is_prefix_slow(n);
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
        if (!is_many() && !other.is_many() && hi_ > lo_ && other.hi_ > other.lo_ && other.lo_ <= hi_ &&
            other.hi_ >= lo_) {
            lo_ = std::min(lo_, other.lo_);
            hi_ = std::max(hi_, other.hi_);
            return *this;
        }
        return unite_slow(other);
    }
    friend bool operator==(const IdSet& a, const IdSet& b) {
        if (!a.is_many() && !b.is_many())
            return (a.lo_ == b.lo_ && a.hi_ == b.hi_) || (a.hi_ <= a.lo_ && b.hi_ <= b.lo_);
        return equal_slow(a, b);
    }

    [[nodiscard]] Intervals intervals() const {
        if (is_many()) return Intervals(many().data(), many().size());
        return Intervals(Interval{lo_, hi_});
    }
    [[nodiscard]] std::vector<std::int64_t> to_vector() const;
    // "{}", "{3}", "{0-3}", "{0-3,7}": short and readable in error messages
    // (a range that starts below 0 reads "{-5..-3}").
    [[nodiscard]] std::string str() const;

    template <class F>
    void for_each(F&& f) const {
        for (const auto& i : intervals())
            for (std::int64_t v = i.lo; v < i.hi; ++v) f(v);
    }

private:
    // Inline form: the set is [lo_, hi_), empty when hi_ <= lo_, for sets of
    // one interval whose ids lie in 0..kInlineEnd-1 (every set a schedule
    // builds). Heap form (two or more intervals, or one outside that range):
    // hi_'s top bit is set and the other 63 bits of hi_:lo_ are the address of
    // a std::vector<Interval>. 8 bytes and 4-aligned: values in a store are
    // mostly their id sets, and at thousands of ranks a store's memory is what
    // a run streams. (LeakSanitizer does not recognise that address as a
    // pointer: a heap-form set still alive when the process exits is reported
    // as a leak.)
    static constexpr std::int64_t kInlineEnd = 0x7fffffff;
    static constexpr std::uint32_t kManyBit = 0x80000000u;
    [[nodiscard]] static bool fits(std::int64_t lo, std::int64_t hi) { return lo >= 0 && hi <= kInlineEnd; }
    [[nodiscard]] bool is_many() const { return (hi_ & kManyBit) != 0; }
    [[nodiscard]] std::vector<Interval>& many() const {
        const std::uint64_t address = (std::uint64_t{hi_ & ~kManyBit} << 32) | lo_;
        return *reinterpret_cast<std::vector<Interval>*>(static_cast<std::uintptr_t>(address));
    }
    void set_many(std::vector<Interval>* v);  // takes ownership
    void set_many_one(std::int64_t lo, std::int64_t hi);  // the heap form of the one interval [lo, hi)
    // Makes a set in the inline form the one interval [lo, hi), hi > lo: inline
    // where it fits, else in the heap form.
    void assign_one(std::int64_t lo, std::int64_t hi) {
        if (fits(lo, hi)) {
            lo_ = static_cast<std::uint32_t>(lo);
            hi_ = static_cast<std::uint32_t>(hi);
        } else {
            set_many_one(lo, hi);
        }
    }
    void copy_many(const IdSet& o);  // the heap form of a copy of o's intervals
    [[nodiscard]] bool is_subset_of_slow(const IdSet& other) const;
    [[nodiscard]] bool is_prefix_slow(std::int64_t n) const;
    IdSet& unite_slow(const IdSet& other);
    static bool equal_slow(const IdSet& a, const IdSet& b);
    void free_many();
    void normalize();  // back to the inline form when one representable interval (or none) is left
    [[nodiscard]] std::int64_t many_size() const;
    std::uint32_t lo_ = 0;
    std::uint32_t hi_ = 0;
};

}  // namespace dtsim
