// When a link port is busy, and how a new transfer shares it.
//
// The approximation of bandwidth sharing: a transfer starts as soon as it is
// ready and moves at full rate while all of its ports are free and at half
// rate while any of them is busy with transfers booked before it; transfers
// booked before are not slowed down in turn (their end times are already
// known to the ranks that wait for them). So two concurrent transfers on one
// port never both get its full bandwidth, a small transfer is not starved
// behind a long queue of large ones (as NCCL's concurrent streams are not),
// and while they overlap the port carries up to 1.5x its bandwidth (the
// newcomer's half share is not taken from the incumbent). Transfers on the
// same stream of a rank (its collective stream, its send stream) are FIFO and
// never overlap each other; that ordering is the Device's, not the calendar's.
//
// Against an exact equal share of each port (processor sharing: k transfers
// on a port move at 1/k each, and a newcomer slows the incumbents):
//   - a transfer that takes d alone takes between d and 2d here;
//   - two equal transfers of d ready together: exact, both end at 2d; here
//     the first booked ends at d and the second at 1.5d (half of it during
//     [0, d), the rest at full rate): the port carried 1.5x its bandwidth;
//   - k >= 3 equal transfers ready together: exact, all end at k d; here at
//     d, 1.5d, 1.75d, ... (the i-th at 2d - d / 2^(i-1)), all before 2d: the
//     port carries up to (k + 1) / 2 times its bandwidth, so heavy fan-in on
//     one port is underestimated;
//   - a transfer ready midway through another's: exact, both move at half
//     rate while they overlap; here only the newcomer does;
//   - "booked before" is the order in which the simulation books transfers,
//     not simulated time: ranks have their own clocks and run ahead until
//     they synchronise, so a transfer starting earlier in simulated time can
//     be booked after, and be slowed by, one that starts later.
// The exact model is not a change of this calendar alone: end times are
// handed to the waiting ranks when a transfer is booked (their clocks move,
// later transfers on the stream are booked from them), and bookings arrive
// out of time order, so a newcomer cannot slow an incumbent without undoing
// what followed from its end. It needs transfers whose end is fixed only once
// no rank can book an overlapping transfer any more (every rank's clock, or
// for a blocked rank a lower bound on its next transfer's start, past it),
// with waiting coroutines parked until then: a conservative global clock over
// the engine's per-rank clocks.
#pragma once

#include <cstddef>
#include <span>
#include <utility>
#include <vector>

namespace dtsim::hw {

class LinkCalendar {
public:
    // Marks [start, end) busy (merged with what is already busy).
    void reserve(double start, double end);
    // Forgets intervals that end before `t` (no transfer can start before it any more).
    void forget_before(double t);
    [[nodiscard]] std::size_t intervals() const { return busy_.size() - head_; }
    [[nodiscard]] bool busy_at(double t) const;

    // When a transfer ready at `ready` that takes `duration` on free ports ends
    // on these ports: full rate while all are free, half rate while any is busy.
    static double finish(std::span<LinkCalendar* const> calendars, double ready, double duration);

private:
    std::vector<std::pair<double, double>> busy_;  // sorted, disjoint [start, end)
    std::size_t head_ = 0;                         // intervals before head_ are forgotten
};

}  // namespace dtsim::hw
