// The errors a simulated run can end with. Every message names the rank, the
// operation and the layer involved and says what was expected. And the mark of
// errors in what a user gave (InputError).
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

namespace dtsim {

struct Trace;

// Marks an error in what a user gave, found before anything ran: a malformed or
// invalid config, schedule, trace or ground-truth file (the message names the
// file, the JSON path or line, and what was expected against what was found).
// The command line exits with status 2 for these, as for bad arguments.
class InputError {
public:
    InputError() = default;
    InputError(const InputError&) = default;
    InputError& operator=(const InputError&) = default;
    virtual ~InputError() = default;
};

// A schedule did something the world does not allow, deadlocked, or threw.
class ScheduleError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
    // The run's trace up to the failure, where the run kept its events (puzzle::run_strategy
    // and sched::run_schedule set it, see attach_partial_trace): what the timeline of a broken
    // strategy is drawn from. Its summary says correct: false and its meta holds the message
    // as "error".
    std::shared_ptr<const Trace> partial_trace;
};

// A check of the puzzle world failed (wrong layer, incomplete weight, missing batches...).
class PuzzleError : public ScheduleError {
public:
    PuzzleError(int rank, std::string op, int layer, const std::string& what);
    int rank;
    std::string op;
    int layer;  // kNoLayer when the operation has none
};

// The k-th collective of two ranks differ (operation or layer).
class CollectiveMismatchError : public ScheduleError {
public:
    using ScheduleError::ScheduleError;
};

// No coroutine can proceed while some ranks have not finished.
class DeadlockError : public ScheduleError {
public:
    using ScheduleError::ScheduleError;
};

}  // namespace dtsim
