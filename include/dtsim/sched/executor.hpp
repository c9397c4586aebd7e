// Running a schedule on the engine: one coroutine per rank executes its actions
// in order. Time is in steps, memory in activation units.
//
// Dependencies. F of stage s, microbatch i needs the output of F(s-1, i); B or I
// of (s, i) needs F(s, i) on its own rank and, unless s is the last stage, the
// input gradient of (s+1, i), produced by B(s+1, i) or I(s+1, i); W(s, i) needs
// I(s, i). A tensor crossing ranks arrives `p2p` after its producer finished (or,
// in a lowered schedule, after its SEND action ran); inside a rank it is free.
// A rank waits for a missing input (its clock jumps to the arrival); otherwise
// its actions run back to back. Sends never block (PyTorch's isend). In a lowered
// schedule RECV only posts the receive; the consuming F/B/I waits, as in
// PyTorch's runtime.
//
// Memory. One activation unit (Costs::activation) per (stage, microbatch) is
// allocated when its F finishes and freed when its B, or its W (split backward),
// finishes: I keeps it, since W needs the layer inputs. "In flight" on a rank is
// the number of units it holds; each event's memory is the rank's holding when
// the event starts (the trace's convention).
//
// Trace. Each F/B/I/W is an event on the compute stream: op forward, backward,
// backward_input, backward_weight; layer = stage; batches = {microbatch}. SEND_F/
// SEND_B and the implicit sends of a compute-only schedule (when p2p > 0) are
// `send` events on the sender's comm stream, [sent, sent + p2p]; RECV and the
// implicit receives are `recv` events on the receiver's comm stream over the same
// interval, recorded when the consuming action takes the tensor. UNSHARD,
// RESHARD and REDUCE_GRAD cost nothing and are not recorded.
//
// Overlapped F&B (an F with overlap_next and the B after it, PyTorch's
// OVERLAP_F_B): as DualPipe's _forward_backward_chunk, the pair waits for both
// inputs (the F's activation, the B's gradient), computes for T_{F&B}
// (Costs::forward_backward), then sends both outputs. The trace shows its F and
// B back to back, their durations T_F and T_B scaled to sum to T_{F&B}; memory
// is as for F then B (the F's unit is held, then the B's freed).
#pragma once

#include "dtsim/run_result.hpp"
#include "dtsim/sched/schedule.hpp"
#include "dtsim/trace.hpp"

#include <nlohmann/json.hpp>

#include <vector>

namespace dtsim::sched {

// Costs in steps per (stage, microbatch); all must be finite and >= 0, except
// forward_backward, where a negative value means T_F + T_B.
struct Costs {
    double forward = 1;          // T_F
    double backward = 2;         // T_B, a full backward (B)
    double backward_input = 1;   // T_I
    double backward_weight = 1;  // T_W
    double forward_backward = -1;  // T_{F&B}, an overlapped F and B (OVERLAP_F_B); < 0: T_F + T_B (no gain)
    double p2p = 0;              // a tensor crossing ranks; boundaries inside a rank are free
    double activation = 1;       // memory units held per (stage, microbatch)
};

// T_{F&B}: costs.forward_backward, or T_F + T_B when it is negative.
[[nodiscard]] inline double overlapped_cost(const Costs& c) {
    return c.forward_backward < 0 ? c.forward + c.backward : c.forward_backward;
}

struct RankStats {
    int rank = 0;
    double busy = 0;             // sum of the rank's F/B/I/W durations (T_{F&B} per overlapped pair)
    double idle = 0;             // makespan - busy: the rank's bubble
    double bubble_fraction = 0;  // idle / makespan
    int peak_in_flight = 0;      // most (stage, microbatch) activations held at once
    double end = 0;              // end of the rank's last compute event
};

// Bubble fraction of a rank = (makespan - busy time of the rank) / makespan, where
// the makespan is the end of the last event of any rank and time starts at 0.
// Overall = the sum of the ranks' idle times / (ranks x makespan).
struct RunStats {
    double makespan = 0;
    double bubble_fraction = 0;
    std::vector<RankStats> ranks;
};

// The bubbles and memory of a schedule's run, from its trace (run_schedule's): per rank, the
// busy time of its F/B/I/W events (an overlapped F&B pair counts once, T_{F&B}), its idle time
// and the end of its last one, and the most activations it held at once (one from each F to its
// B or W).
RunStats run_stats(const Trace& trace);

// Validates the schedule (InvalidScheduleError), then runs it. A schedule that
// cannot progress throws DeadlockError naming every blocked rank, the action it
// is at, the stage and microbatch whose tensor it waits for, which action of
// which rank would produce it and where that rank is stuck, the wait cycle, and
// the engine's own report. Throws std::invalid_argument for bad costs.
// The trace has time_unit "step", memory_unit "unit", meta name, stages, microbatches, ranks,
// and summary.correct true: the schedule ran to its end (a failed run's partial trace, in
// the ScheduleError, says false and holds the message as meta.error).
RunResult run_schedule(const Schedule& schedule, const Costs& costs = {},
                       nlohmann::json meta = nlohmann::json::object());

}  // namespace dtsim::sched
