// A pipeline schedule as data: for every rank, the actions it runs, in order
// (torch.distributed.pipelining's `pipeline_order`, without its idle `None`
// slots, which carry no meaning for execution). Which rank runs a stage is
// where that stage's actions are; the schedule's stages are 0..num_stages()-1
// and its microbatches 0..num_microbatches()-1.
//
// A schedule is *compute-only* when it has no SEND/RECV actions (PyTorch's
// "compute_only" format: a stage boundary between two ranks is passed
// implicitly) and *lowered* when it has them (PyTorch's "compute_comms"
// format: every boundary between two ranks has an explicit send and receive).
#pragma once

#include "dtsim/errors.hpp"
#include "dtsim/sched/action.hpp"

#include <string>
#include <vector>

namespace dtsim::sched {

// Where an action came from in a file, for error messages.
struct Location {
    int line = 0;        // 1-based; 0 = unknown
    int column = 0;      // text files: 1-based column of the action
    int cell = 0;        // CSV files: 1-based cell in the row
};

struct Schedule {
    std::string name;                        // informational: "1f1b", a file's stem
    std::vector<std::vector<Action>> ranks;  // ranks[r]: rank r's actions in order

    // Filled by the readers (empty for schedules built in code): the file, and
    // per rank and action its place in the file.
    std::string source;
    std::vector<std::vector<Location>> locations;

    [[nodiscard]] int num_ranks() const { return static_cast<int>(ranks.size()); }
    // 1 + the largest stage index (0 when there are no actions).
    [[nodiscard]] int num_stages() const;
    // 1 + the largest microbatch index (0 when no action names one).
    [[nodiscard]] int num_microbatches() const;
    // True when any action is SEND_F, RECV_F, SEND_B or RECV_B.
    [[nodiscard]] bool lowered() const;
    // "FILE:LINE:COL" / "FILE:LINE: cell C" for rank r's action i, or "" when unknown.
    [[nodiscard]] std::string where(int rank, std::size_t index) const;

    // Equal when every rank's action list is equal (name and locations are ignored).
    friend bool operator==(const Schedule& a, const Schedule& b) { return a.ranks == b.ranks; }
};

// The rank that runs each stage: the rank holding that stage's F/B/I/W actions;
// -1 for a stage without compute actions or held by several ranks (validate()
// reports both).
std::vector<int> stage_owners(const Schedule& schedule);

// A schedule that breaks a static rule. what() starts with the schedule's
// source (or name) and lists every problem found, one per line.
class InvalidScheduleError : public ScheduleError, public InputError {
public:
    InvalidScheduleError(const std::string& what, std::vector<std::string> found)
        : ScheduleError(what), problems(std::move(found)) {}
    std::vector<std::string> problems;
};

// The static checks, each problem as one line naming the rank, the action and
// where it is:
//  - at least one rank; every stage 0..S-1 has compute actions, all on one rank;
//  - every (stage, microbatch) with 0 <= microbatch < M has exactly one F, and
//    either exactly one B or exactly one I and one W (never B together with I/W);
//  - on the owning rank F comes before B or I, and I before W;
//  - a stage boundary inside one rank is in order: F of stage s-1 before F of
//    stage s, and B/I of stage s+1 before B/I of stage s, for each microbatch;
//  - lowered schedules: every boundary between two ranks has exactly one SEND
//    on the producing rank, after the action that produces the tensor, and
//    exactly one RECV on the consuming rank, before the action that consumes it;
//    no SEND/RECV for a boundary inside one rank or past the first/last stage;
//  - UNSHARD/RESHARD/REDUCE_GRAD name a stage of the rank they are on;
//  - an F with overlap_next (OVERLAP_F_B) is followed by a full B on its rank,
//    not the backward of the same stage and microbatch.
// Returns the problems (empty when the schedule is valid); at most `limit`. `steps`, if given, is
// set to the actions, stages and (stage, microbatch) pairs the checks visited: the work done, which
// grows with the actions and pairs, never with their product.
std::vector<std::string> find_problems(const Schedule& schedule, std::size_t limit = 50,
                                       std::size_t* steps = nullptr);
// Throws InvalidScheduleError listing the problems, if any.
void validate(const Schedule& schedule);

}  // namespace dtsim::sched
