// How long operations take and how much memory values occupy. The puzzle world
// uses the reference library's constants; other worlds plug in their own.
#pragma once

#include "dtsim/id_set.hpp"
#include "dtsim/trace.hpp"

#include <cstdint>
#include <string>

namespace dtsim::puzzle {

// A memory size as an exact fraction num/den (den > 0), so that shards of a
// non-power-of-two total add up without drift.
struct Size {
    std::int64_t num = 0;
    std::int64_t den = 1;
};

class CostModel {
public:
    virtual ~CostModel() = default;
    [[nodiscard]] virtual std::string time_unit() const = 0;
    [[nodiscard]] virtual std::string memory_unit() const = 0;

    // Durations.
    [[nodiscard]] virtual double forward(int layer, const IdSet& batches) const = 0;
    [[nodiscard]] virtual double backward(int layer, const IdSet& batches) const = 0;
    [[nodiscard]] virtual double loss(const IdSet& batches) const = 0;
    [[nodiscard]] virtual double update(int layer, std::int64_t shards, int total) const = 0;
    // A collective over `ranks` ranks moving a value of `size`.
    [[nodiscard]] virtual double collective(OpCode op, int layer, Size size, int ranks) const = 0;
    [[nodiscard]] virtual double pass(Size size) const = 0;

    // Sizes.
    [[nodiscard]] virtual Size weight(std::int64_t shards, int total) const = 0;
    [[nodiscard]] virtual Size opt_state(std::int64_t shards, int total) const = 0;
    [[nodiscard]] virtual Size weight_grad(std::int64_t shards, int total) const = 0;
    [[nodiscard]] virtual Size activation(std::int64_t batches) const = 0;
    [[nodiscard]] virtual Size activation_grad(std::int64_t batches) const = 0;
};

// The reference library's costs: forward/backward one step per batch, loss 0,
// update 0.5, collectives 0.3, pass 0.2; a layer weight 512*512 units, an
// activation 512*256 units per batch.
class PuzzleCosts final : public CostModel {
public:
    static constexpr std::int64_t kHidden = 512;
    static constexpr std::int64_t kLength = 256;

    [[nodiscard]] std::string time_unit() const override { return "step"; }
    [[nodiscard]] std::string memory_unit() const override { return "unit"; }
    [[nodiscard]] double forward(int, const IdSet& b) const override { return static_cast<double>(b.size()); }
    [[nodiscard]] double backward(int, const IdSet& b) const override { return static_cast<double>(b.size()); }
    [[nodiscard]] double loss(const IdSet&) const override { return 0; }
    [[nodiscard]] double update(int, std::int64_t, int) const override { return 0.5; }
    [[nodiscard]] double collective(OpCode, int, Size, int) const override { return 0.3; }
    [[nodiscard]] double pass(Size) const override { return 0.2; }
    [[nodiscard]] Size weight(std::int64_t k, int total) const override { return {k * kHidden * kHidden, total}; }
    [[nodiscard]] Size opt_state(std::int64_t k, int total) const override { return weight(k, total); }
    [[nodiscard]] Size weight_grad(std::int64_t k, int total) const override { return weight(k, total); }
    [[nodiscard]] Size activation(std::int64_t n) const override { return {n * kHidden * kLength, 1}; }
    [[nodiscard]] Size activation_grad(std::int64_t n) const override { return activation(n); }
};

const CostModel& puzzle_costs();

}  // namespace dtsim::puzzle
