#include "dtsim/errors.hpp"

#include "dtsim/trace.hpp"

#include <fmt/format.h>

#include <utility>

namespace dtsim {

PuzzleError::PuzzleError(int rank_, std::string op_, int layer_, const std::string& what)
    : ScheduleError(layer_ == kNoLayer ? fmt::format("rank {}: {}: {}", rank_, op_, what)
                                       : fmt::format("rank {}: {} (layer {}): {}", rank_, op_, layer_, what)),
      rank(rank_),
      op(std::move(op_)),
      layer(layer_) {}

}  // namespace dtsim
