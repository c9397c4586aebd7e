#include "columns.hpp"

#include <algorithm>
#include <cmath>

namespace dtsim::render::detail {

std::pair<int, int> column_span(double x0, double x1, int ncols) {
    const double lo = std::clamp(std::floor(x0), 0.0, static_cast<double>(ncols));
    const double hi = std::clamp(std::ceil(x1), 0.0, static_cast<double>(ncols));
    auto first = static_cast<int>(lo);
    auto end = static_cast<int>(hi);
    if (end == first && x1 >= x0 && first < ncols && x0 >= 0) end = first + 1;  // a point
    return {first, end};
}

BusyColumns::BusyColumns(int ncols)
    : busy_(static_cast<std::size_t>(std::max(ncols, 0)), 0.0F),
      lead_(busy_.size(), 0.0F),
      key_(busy_.size(), 0) {}

void BusyColumns::add(double x0, double x1, StyleKey key, double weight) {
    const auto [first, end] = column_span(x0, x1, static_cast<int>(busy_.size()));
    for (int c = first; c < end; ++c) {
        const double cover = std::min(x1, c + 1.0) - std::max(x0, static_cast<double>(c));
        if (cover <= 0) continue;
        const auto w = static_cast<float>(cover * weight);
        const auto i = static_cast<std::size_t>(c);
        busy_[i] += w;
        if (key_[i] == key) {
            lead_[i] += w;
        } else if ((lead_[i] -= w) < 0) {
            key_[i] = key;
            lead_[i] = -lead_[i];
        }
    }
}

std::vector<BusyColumns::Run> BusyColumns::runs(int levels) const {
    std::vector<Run> out;
    for (std::size_t i = 0; i < busy_.size(); ++i) {
        if (!(busy_[i] > 0)) continue;
        // Rounded, but any activity shows as at least one level.
        const double level =
            std::clamp(std::round(static_cast<double>(busy_[i]) * levels) / levels, 1.0 / levels, 1.0);
        const int c = static_cast<int>(i);
        if (!out.empty() && out.back().end == c && out.back().key == key_[i] && out.back().level == level)
            out.back().end = c + 1;
        else
            out.push_back({c, c + 1, key_[i], level});
    }
    return out;
}

MaxColumns::MaxColumns(int ncols)
    : max_(static_cast<std::size_t>(std::max(ncols, 0)), 0.0), touched_(max_.size(), false) {}

void MaxColumns::add(double x0, double x1, double value) {
    const auto [first, end] = column_span(x0, x1, static_cast<int>(max_.size()));
    for (int c = first; c < end; ++c) {
        const auto i = static_cast<std::size_t>(c);
        if (!touched_[i] || value > max_[i]) max_[i] = value;
        touched_[i] = true;
    }
}

std::vector<MaxColumns::Run> MaxColumns::runs(double quantum) const {
    std::vector<Run> out;
    double last_q = 0;
    for (std::size_t i = 0; i < max_.size(); ++i) {
        if (!touched_[i]) continue;
        const int c = static_cast<int>(i);
        const double q = quantum > 0 ? std::round(max_[i] / quantum) : max_[i];
        if (!out.empty() && out.back().end == c && q == last_q) {
            out.back().end = c + 1;
            out.back().value = std::max(out.back().value, max_[i]);
        } else {
            out.push_back({c, c + 1, max_[i]});
        }
        last_q = q;
    }
    return out;
}

}  // namespace dtsim::render::detail
