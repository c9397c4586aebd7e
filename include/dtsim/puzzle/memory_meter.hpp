// A GPU's memory as an exact sum of fractions, grouped by denominator: shards
// of 7 add up to exactly one weight, and frees return exactly what was taken.
#pragma once

#include "dtsim/puzzle/cost_model.hpp"

#include <boost/container/small_vector.hpp>

namespace dtsim::puzzle {

class MemoryMeter {
public:
    void add(Size s) { bucket(s.den) += s.num; }
    void sub(Size s) { bucket(s.den) -= s.num; }
    [[nodiscard]] double value() const {
        double v = static_cast<double>(whole_);
        for (const auto& b : parts_)
            if (b.num != 0) v += static_cast<double>(b.num) / static_cast<double>(b.den);
        return v;
    }

private:
    std::int64_t& bucket(std::int64_t den) {
        if (den == 1) return whole_;
        for (auto& b : parts_)
            if (b.den == den) return b.num;
        parts_.push_back({0, den});
        return parts_.back().num;
    }
    std::int64_t whole_ = 0;
    boost::container::small_vector<Size, 2> parts_;
};

}  // namespace dtsim::puzzle
