#include "dtsim/id_set.hpp"

#include <algorithm>
#include <fmt/format.h>

#include <stdexcept>

namespace dtsim {

bool IdSet::equal_slow(const IdSet& a, const IdSet& b) {
    auto x = a.intervals(), y = b.intervals();
    return std::equal(x.begin(), x.end(), y.begin(), y.end());
}

void IdSet::insert(std::int64_t id) { insert_range(id, id + 1); }

void IdSet::set_many(std::vector<Interval>* v) {
    const auto address = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(v));
    if (address >> 63) {  // no 64-bit platform dtsim builds on gives user space such addresses
        delete v;
        throw std::runtime_error("IdSet: a heap address with its top bit set");
    }
    lo_ = static_cast<std::uint32_t>(address);
    hi_ = static_cast<std::uint32_t>(address >> 32) | kManyBit;
}

void IdSet::set_many_one(std::int64_t lo, std::int64_t hi) { set_many(new std::vector<Interval>(1, Interval{lo, hi})); }

void IdSet::copy_many(const IdSet& o) {
    lo_ = hi_ = 0;  // a failed copy leaves this empty
    set_many(new std::vector<Interval>(o.many()));
}

void IdSet::free_many() {
    delete &many();
    lo_ = hi_ = 0;
}

std::int64_t IdSet::many_size() const {
    std::int64_t n = 0;
    for (const auto& i : many()) n += i.hi - i.lo;
    return n;
}

void IdSet::normalize() {
    if (!is_many() || many().size() > 1) return;
    const Interval one = many().empty() ? Interval{0, 0} : many()[0];
    if (!fits(one.lo, one.hi)) return;  // one interval the inline form cannot hold
    free_many();
    lo_ = static_cast<std::uint32_t>(one.lo);
    hi_ = static_cast<std::uint32_t>(one.hi);
}

void IdSet::insert_range(std::int64_t lo, std::int64_t hi) {
    if (hi <= lo) return;
    if (!is_many()) {
        if (hi_ <= lo_) {  // empty
            assign_one(lo, hi);
            return;
        }
        if (lo <= std::int64_t{hi_} && hi >= std::int64_t{lo_}) {  // touches the single interval
            assign_one(std::min<std::int64_t>(lo, lo_), std::max<std::int64_t>(hi, hi_));
            return;
        }
        set_many_one(lo_, hi_);
    }
    auto& iv = many();
    // Fast path: at or past the end (the common case when building in order).
    if (lo > iv.back().hi) {
        iv.push_back({lo, hi});
        return;
    }
    auto first = std::lower_bound(iv.begin(), iv.end(), lo,
                                  [](const Interval& i, std::int64_t v) { return i.hi < v; });
    // Fast path: one interval grows without reaching the next (a rank's id
    // joining its neighbour's while another interval stays apart).
    if (first != iv.end() && first->lo <= hi) {
        const std::int64_t merged_hi = std::max(hi, first->hi);
        if (first + 1 == iv.end() || (first + 1)->lo > merged_hi) {
            *first = {std::min(lo, first->lo), merged_hi};
            return;
        }
    }
    auto last = first;
    while (last != iv.end() && last->lo <= hi) {
        lo = std::min(lo, last->lo);
        hi = std::max(hi, last->hi);
        ++last;
    }
    if (first == last) {
        iv.insert(first, Interval{lo, hi});
    } else {
        *first = {lo, hi};
        iv.erase(first + 1, last);
    }
    normalize();
}

bool IdSet::contains(std::int64_t id) const {
    auto iv = intervals();
    auto it = std::upper_bound(iv.begin(), iv.end(), id,
                               [](std::int64_t v, const Interval& i) { return v < i.hi; });
    return it != iv.end() && it->lo <= id;
}

bool IdSet::is_prefix_slow(std::int64_t n) const {
    const auto iv = intervals();
    return iv.size() == 1 && iv[0].lo == 0 && iv[0].hi == n;
}

bool IdSet::is_subset_of_slow(const IdSet& other) const {
    // Each of our intervals must lie inside one of other's (they are maximal).
    auto theirs = other.intervals();
    auto it = theirs.begin();
    for (const auto& i : intervals()) {
        while (it != theirs.end() && it->hi < i.hi) ++it;
        if (it == theirs.end() || it->lo > i.lo) return false;
    }
    return true;
}

IdSet& IdSet::unite_slow(const IdSet& other) {
    if (this == &other) return *this;
    if (!other.is_many()) {  // one interval (an arriving rank's shard, say) into several
        insert_range(other.lo_, other.hi_);
        return *this;
    }
    for (const auto& i : other.intervals()) insert_range(i.lo, i.hi);
    return *this;
}

std::vector<std::int64_t> IdSet::to_vector() const {
    std::vector<std::int64_t> v;
    v.reserve(static_cast<std::size_t>(size()));
    for_each([&](std::int64_t id) { v.push_back(id); });
    return v;
}

std::string IdSet::str() const {
    std::string s = "{";
    bool first = true;
    for (const auto& i : intervals()) {
        if (!first) s += ',';
        first = false;
        if (i.hi - i.lo == 1)
            s += fmt::format("{}", i.lo);
        else if (i.hi - i.lo == 2)
            s += fmt::format("{},{}", i.lo, i.lo + 1);
        else
            s += i.lo < 0 ? fmt::format("{}..{}", i.lo, i.hi - 1) : fmt::format("{}-{}", i.lo, i.hi - 1);
    }
    return s + "}";
}

}  // namespace dtsim
