// Running a puzzle strategy: one Model per rank, all ranks' coroutines to
// completion, the trace with its summary and the reference's final check.
#pragma once

#include "dtsim/puzzle/model.hpp"
#include "dtsim/run_result.hpp"
#include "dtsim/trace.hpp"

#include <optional>
#include <string>

namespace dtsim::puzzle {

using Strategy = Task<> (*)(Model&);

// The units world's result: trace.summary.correct is set, check_error says why the final check failed.
using dtsim::RunResult;

// What a run keeps: every event (the trace, for files and pictures), or only
// the summary figures (faster, a cache line less per operation; trace.ranks empty).
enum class Keep { events, summary };

// Throws ScheduleError (PuzzleError, DeadlockError, CollectiveMismatchError)
// when the schedule breaks a rule or cannot finish.
RunResult run_strategy(Strategy strategy, int layers, int batches, int ranks,
                       const CostModel& costs = puzzle_costs(),
                       nlohmann::json meta = nlohmann::json::object(), Keep keep = Keep::events);

}  // namespace dtsim::puzzle
