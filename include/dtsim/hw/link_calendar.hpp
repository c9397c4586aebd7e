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
