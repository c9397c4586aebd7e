// Lowering a compute-only schedule to one with explicit communication actions,
// as torch.distributed.pipelining's `_add_send_recv` does for the
// "compute_only" → "compute_comms" step.
#pragma once

#include "dtsim/sched/schedule.hpp"

namespace dtsim::sched {

// PyTorch's algorithm: ranks take turns in rank order; a rank appends its next
// compute action once it is ready (an F whose input is a RECV_F already placed on
// this rank or the previous stage's F on this rank; a B/I likewise for its
// gradient; W and first/last-stage actions always). After an F whose next stage is
// on another rank it appends SEND_F and the consumer rank gets RECV_F (stage s+1);
// after a B or I whose previous stage is on another rank, SEND_B and RECV_B (stage
// s-1). An OVERLAP_F_B pair is placed when both its F and B are ready, followed
// by the sends of each, as PyTorch does for an action with sub_actions. Throws InvalidScheduleError when the input is invalid, already lowered, or
// a full round makes no progress ("can't schedule sends/recvs" in PyTorch), naming
// each rank's next action.
Schedule lower(const Schedule& compute_only);

// The schedule without its SEND/RECV actions.
Schedule strip_comms(const Schedule& schedule);

}  // namespace dtsim::sched
