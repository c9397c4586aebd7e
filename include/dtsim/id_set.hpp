// A set of non-negative integer ids (batches, shards, ranks) stored as sorted,
// disjoint, non-adjacent half-open intervals. The sets that training schedules
// build (one rank's shard, all batches, a contiguous stage) are one interval, so
// they stay O(1) in size at any rank count; no heap allocation for one interval.
#pragma once

#include <cstdint>
#include <memory>
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
    static IdSet range(std::int64_t lo, std::int64_t hi);
    static IdSet single(std::int64_t id) { return range(id, id + 1); }
    template <class It>
    static IdSet of(It first, It last) {
        IdSet s;
        for (; first != last; ++first) s.insert(*first);
        return s;
    }

    void insert(std::int64_t id);
    void insert_range(std::int64_t lo, std::int64_t hi);

    IdSet(const IdSet& o) : one_(o.one_), many_(o.many_ ? std::make_unique<std::vector<Interval>>(*o.many_) : nullptr) {}
    IdSet(IdSet&&) noexcept = default;
    IdSet& operator=(const IdSet& o) {
        if (this != &o) {
            one_ = o.one_;
            many_ = o.many_ ? std::make_unique<std::vector<Interval>>(*o.many_) : nullptr;
        }
        return *this;
    }
    IdSet& operator=(IdSet&&) noexcept = default;
    ~IdSet() = default;

    [[nodiscard]] bool empty() const { return !many_ && one_.hi <= one_.lo; }
    [[nodiscard]] std::int64_t size() const;  // number of ids
    [[nodiscard]] bool contains(std::int64_t id) const;
    [[nodiscard]] bool is_subset_of(const IdSet& other) const;
    // True when the set is exactly {0, ..., n-1}.
    [[nodiscard]] bool is_prefix(std::int64_t n) const;
    [[nodiscard]] std::int64_t min() const { return intervals().front().lo; }
    [[nodiscard]] std::int64_t max() const { return intervals().back().hi - 1; }

    [[nodiscard]] IdSet operator|(const IdSet& other) const;
    IdSet& operator|=(const IdSet& other);
    friend bool operator==(const IdSet& a, const IdSet& b);

    [[nodiscard]] std::span<const Interval> intervals() const {
        if (many_) return std::span<const Interval>(*many_);
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
    // Without many_: one_ is the set (empty when one_.hi <= one_.lo). With
    // many_: it holds all intervals (two or more). 24 bytes in all.
    Interval one_{0, 0};
    std::unique_ptr<std::vector<Interval>> many_;
};

}  // namespace dtsim
