// A rank's memory over time as a step function: each event's memory from its
// start until the next event starts (the last until the rank's last end).
#pragma once

#include "dtsim/trace.hpp"

#include <vector>

namespace dtsim::render::detail {

struct MemoryStep {
    double t0 = 0;
    double t1 = 0;
    double value = 0;
};

// Steps in time order, zero-length steps left out and neighbours with equal
// values merged. Events are ordered by start, ties kept in trace order.
std::vector<MemoryStep> memory_steps(const RankTrace& rank);

}  // namespace dtsim::render::detail
