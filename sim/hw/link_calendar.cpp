#include "dtsim/hw/link_calendar.hpp"

#include <algorithm>
#include <limits>

namespace dtsim::hw {

namespace {
using Interval = std::pair<double, double>;
// First interval (from `from`) that ends after t; ends are sorted because intervals are disjoint.
std::vector<Interval>::const_iterator first_ending_after(std::vector<Interval>::const_iterator from,
                                                         std::vector<Interval>::const_iterator to, double t) {
    return std::upper_bound(from, to, t, [](double x, const Interval& iv) { return x < iv.second; });
}
}  // namespace

void LinkCalendar::reserve(double start, double end) {
    if (!(end > start)) return;
    // The common case: at or after the last busy stretch.
    if (busy_.size() == head_ || busy_.back().second < start) {
        busy_.emplace_back(start, end);
        return;
    }
    if (busy_.back().first <= start) {
        busy_.back().second = std::max(busy_.back().second, end);
        return;
    }
    const auto first = busy_.begin() + static_cast<std::ptrdiff_t>(head_);
    // The intervals that overlap or touch [start, end) merge with it.
    auto lo = std::lower_bound(first, busy_.end(), start, [](const Interval& iv, double x) { return iv.second < x; });
    auto hi = lo;
    while (hi != busy_.end() && hi->first <= end) {
        start = std::min(start, hi->first);
        end = std::max(end, hi->second);
        ++hi;
    }
    if (lo == hi) {
        busy_.insert(lo, {start, end});
    } else {
        *lo = {start, end};
        busy_.erase(lo + 1, hi);
    }
}

bool LinkCalendar::busy_at(double t) const {
    const auto it = first_ending_after(busy_.begin() + static_cast<std::ptrdiff_t>(head_), busy_.end(), t);
    return it != busy_.end() && it->first <= t;
}

void LinkCalendar::forget_before(double t) {
    while (head_ < busy_.size() && busy_[head_].second < t) ++head_;
    if (head_ > 64 && head_ * 2 > busy_.size()) {
        busy_.erase(busy_.begin(), busy_.begin() + static_cast<std::ptrdiff_t>(head_));
        head_ = 0;
    }
}

double LinkCalendar::finish(std::span<LinkCalendar* const> calendars, double ready, double duration) {
    if (!(duration > 0)) return ready;
    // The common case: every port is free from `ready` on.
    bool all_free = true;
    for (const LinkCalendar* c : calendars)
        if (c->busy_.size() != c->head_ && c->busy_.back().second > ready) {
            all_free = false;
            break;
        }
    if (all_free) return ready + duration;

    constexpr double kInf = std::numeric_limits<double>::infinity();
    double t = ready, left = duration;  // `left`: seconds of work at full rate still to do
    while (left > 0) {
        bool busy = false;
        double busy_end = t, next_start = kInf;
        for (const LinkCalendar* c : calendars) {
            const auto it = first_ending_after(c->busy_.begin() + static_cast<std::ptrdiff_t>(c->head_), c->busy_.end(), t);
            if (it == c->busy_.end()) continue;
            if (it->first <= t) {
                busy = true;
                busy_end = std::max(busy_end, it->second);
            } else {
                next_start = std::min(next_start, it->first);
            }
        }
        if (busy) {  // half rate until the busy stretch ends
            const double span = busy_end - t;
            if (span / 2 >= left) return t + 2 * left;
            left -= span / 2;
            t = busy_end;
        } else {  // full rate until the next busy stretch
            if (next_start - t >= left) return t + left;
            left -= next_start - t;
            t = next_start;
        }
    }
    return t;
}

}  // namespace dtsim::hw
