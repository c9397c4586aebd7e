// What a run of the units world gives (a puzzle strategy, puzzle::run_strategy;
// a pipeline schedule, sched::run_schedule). The hardware world has its own,
// hw::RunResult, whose report is in seconds and bytes.
#pragma once

#include "dtsim/trace.hpp"

#include <cstddef>
#include <optional>
#include <string>

namespace dtsim {

struct RunResult {
    Trace trace;                             // the events kept (all, or none: trace.ranks empty) and the summary
    std::size_t events = 0;                  // operations simulated, kept or not
    std::optional<std::string> check_error;  // why the run's final check failed (puzzles); summary.correct says so
};

}  // namespace dtsim
