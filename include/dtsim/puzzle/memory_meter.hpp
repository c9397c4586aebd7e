// A GPU's memory as an exact sum of fractions, grouped by denominator: shards
// of 7 add up to exactly one weight, and frees return exactly what was taken.
#pragma once

#include "dtsim/puzzle/cost_model.hpp"

#include <memory>
#include <vector>

namespace dtsim::puzzle {

class MemoryMeter {
public:
    void add(Size s) { bucket(s.den) += s.num; }
    void sub(Size s) { bucket(s.den) -= s.num; }
    // The sum, whole units first, then each denominator's part in the order
    // the denominators first appeared.
    [[nodiscard]] double value() const {
        double v = static_cast<double>(whole_);
        if (part_.num != 0) v += static_cast<double>(part_.num) / static_cast<double>(part_.den);
        if (more_)
            for (const auto& b : *more_)
                if (b.num != 0) v += static_cast<double>(b.num) / static_cast<double>(b.den);
        return v;
    }

private:
    std::int64_t& bucket(std::int64_t den) {
        if (den == 1) return whole_;
        if (den == part_.den) return part_.num;
        return bucket_slow(den);
    }
    std::int64_t& bucket_slow(std::int64_t den) {
        if (part_.den == 0) {
            part_.den = den;
            return part_.num;
        }
        if (!more_) more_ = std::make_unique<std::vector<Size>>();
        for (auto& b : *more_)
            if (b.den == den) return b.num;
        more_->push_back({0, den});
        return more_->back().num;
    }
    // 32 bytes: whole units, the first other denominator inline (den 0 while
    // unused), any further ones on the heap.
    std::int64_t whole_ = 0;
    Size part_{0, 0};
    std::unique_ptr<std::vector<Size>> more_;
};

}  // namespace dtsim::puzzle
