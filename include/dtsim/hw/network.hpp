// The links of the hardware world and how transfers share them: fluid
// (processor-sharing) bandwidth sharing with max-min fairness, and end times
// fixed only once no rank can start an overlapping transfer any more.
//
// Ports. Each rank has four link ports: per level (NVLink inside a node, the
// NIC across nodes) one to transmit and one to receive, each of capacity 1
// (its full bandwidth): NVLink and InfiniBand are full duplex, so a send 0->1
// and a send 1->0 do not slow each other. A point-to-point transfer occupies
// its source's transmit and its destination's receive port at the level it
// crosses; a collective on a group (ring or tree: every member sends and
// receives) occupies every member's transmit and receive ports at each level
// the group spans. The cost models (Group::cost: NCCL's model or a measured
// curve; p2p_cost) give a transfer's duration d on idle links.
//
// Weights. A flow at rate r (1: its full rate) uses w_p r of port p, w_p <= 1.
// A collective spanning both levels moves its bytes at the bus bandwidth of
// its bottleneck level (collective_cost.hpp); on the other level it needs
// only the fraction w = (its time over that level at full bandwidth) / (its
// time over the bottleneck), so a 2-node all-reduce held back by InfiniBand
// leaves NVLink room for a concurrent tensor-parallel all-reduce. The
// weights come from the ring's bandwidths on each level (level_seconds), also
// where another algorithm or a measured curve sets the duration. Every other flow has weight 1
// everywhere. No flow runs faster than its full rate.
//
// Flows. A transfer is a flow: from its start it first waits its latency
// (alpha: launch and per-hop latency, which does not consume link bandwidth,
// so it is not shared), then moves `work` = d - alpha seconds of data at full
// rate. While it moves its rate is set by weighted max-min fairness over the
// ports (progressive filling: Bertsekas & Gallager, Data Networks, 2nd ed.,
// 6.5.2; SimGrid's LMM solver does the same, with weights): the rates of all
// unfixed flows rise together; port p saturates when sum_f w_fp r_f = 1, and
// the port that saturates first (the smallest (what is left of it) / (the
// weights of its unfixed flows)) fixes the rate of its unfixed flows, their
// use is taken off their other ports, and so on; flows that reach rate 1
// stop there. So k equal transfers ready together on one port all end at
// alpha + k(d - alpha) (the latency is not shared); one ready midway through
// another's slows the incumbent too; transfers on disjoint ports do not
// interact. Rates change only when a flow starts moving
// or ends, and only for the flows connected to it through shared ports
// (transitively): those are recomputed, no others. Each moving flow has a
// predicted end (its work left over its rate) in a heap whose stale entries
// are skipped (a version per flow).
//
// Time order. Ranks run ahead on their own clocks; the network keeps a
// frontier T: every event before it (a flow entering its ports, a flow
// ending) is final. The world advances it only from the engine's idle hook,
// when no rank can run: it takes the earliest pending event, processes every
// event at that instant (flows that end there end; flows that can start
// there start), recomputes the rates of the affected flows, and wakes the
// ranks that waited for those ends. This is exact because of one invariant:
// every transfer is added with a start >= T, so no transfer still to come
// can overlap what is already final. Why it holds:
//   - a rank that can start a transfer has a clock >= T (a rank woken in a
//     receive briefly runs at its old clock, but only to park on the
//     transfer): ranks start at 0 = T; T moves only while every rank is
//     parked; a rank parked on a transfer resumes at
//     max(clock, end) with the end at T or later; one parked until the
//     frontier reaches its clock resumes there; one parked in a receive
//     resumes when the sender (a running rank) has sent, and waits for that
//     transfer, which starts at the sender's clock, before anything else;
//   - collectives, blocking or not, never suspend a member when it joins (a
//     blocking one then parks on the end): the last member to join arms the
//     transfer, at the latest of the members' clocks when they joined (the
//     last one's is a running rank's, >= T) and the ends of their streams'
//     previous transfers (FIFO per rank);
//   - a transfer queued behind one that has not ended starts when it ends,
//     which the hook settles at T.
// A start before T throws std::logic_error (a broken invariant, not bad input).
//
// A rank that needs to know whether a transfer has ended by its clock
// (Device::done, to free a bucket's buffer) parks until the frontier reaches
// its clock (wait_until), unless the transfer cannot end that early.
//
// Ties: events at one instant are processed in the order they were queued,
// the port saturating first is taken lowest index first, and a port's flows
// are visited in the order they entered it: runs are deterministic.
#pragma once

#include "dtsim/hw/detail/record_pool.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <queue>
#include <span>
#include <utility>
#include <vector>

namespace dtsim::hw {

struct TransferRecord;
namespace detail {
using TransferPool = RecordPool<TransferRecord>;
}

// What the world knows of one transfer. Records are recycled once the
// transfer has ended and no TransferRef holds it (the network holds one until
// the end), so a long run keeps only the records still in use.
struct TransferRecord {
    double start = 0;  // when its data and stream were ready (valid once `began`)
    double end = 0;    // valid once `ended`
    int gate = -1;     // the member ready last (critical path), -1: none
    double gate_time = 0;
    std::int32_t live = -1;  // the network's slot until it ends
    std::uint16_t op = 0;    // what it is (an OpCode's id), for waits' descriptions
    bool began = false;
    bool ended = false;
    // Handles on it (TransferRef) and the network's slot until the end.
    std::uint32_t refs = 0;
    bool dropped = false;  // queued for recycling (detail::RecordPool::dropped)
    detail::TransferPool* pool = nullptr;
};

// A counted handle on a record (null: none). Copies count; the record is not
// reused while one exists.
class TransferRef {
public:
    TransferRef() = default;
    TransferRef(TransferRecord* r) : r_(r) { acquire(); }  // NOLINT: implicit, as a pointer
    TransferRef(const TransferRef& o) : r_(o.r_) { acquire(); }
    TransferRef(TransferRef&& o) noexcept : r_(o.r_) { o.r_ = nullptr; }
    TransferRef& operator=(TransferRef o) noexcept {
        std::swap(r_, o.r_);
        return *this;
    }
    ~TransferRef() {
        if (r_) r_->pool->release(r_);
    }
    [[nodiscard]] const TransferRecord* get() const { return r_; }
    const TransferRecord* operator->() const { return r_; }
    const TransferRecord& operator*() const { return *r_; }
    explicit operator bool() const { return r_ != nullptr; }
    operator const TransferRecord*() const { return r_; }  // NOLINT: reads as the pointer it holds

private:
    void acquire() {
        if (r_ && r_->refs++ == 0) ++r_->pool->held;
    }
    TransferRecord* r_ = nullptr;  // (mutable only for its count)
};

// One member's readiness for a transfer: its compute clock when it called
// and the previous transfer on its stream (null: none), which may not have
// ended yet.
struct Arrival {
    int rank = 0;
    double clock = 0;
    TransferRef previous;
};

class Network {
public:
    explicit Network(int ports);
    ~Network();
    Network(const Network&) = delete;
    Network& operator=(const Network&) = delete;

    // The frontier T: every event before it is final.
    [[nodiscard]] double now() const { return now_; }

    // A transfer whose members have not all called yet. The network holds it
    // until it ends; hold a TransferRef to read it after that (a record no
    // one holds is reused by a later create()).
    TransferRecord* create();
    // Its members have all called: it occupies `ports` (kept alive by the
    // caller; for 2 ports or fewer copied), waits `latency`, then moves
    // `work` seconds at full rate. It starts at the latest of the arrivals'
    // clocks and their previous transfers' ends (ties: the lowest rank),
    // which may be known only later. Without ports it contends with nothing
    // and ends at start + latency + work.
    void arm(TransferRecord* t, std::span<const int> ports, double latency, double work,
             std::span<const Arrival> arrivals) {
        arm(t, ports, {}, latency, work, arrivals);
    }
    // The same with a weight in (0, 1] per port (empty: all 1; kept alive
    // like `ports`); the largest should be 1 (see Weights above).
    void arm(TransferRecord* t, std::span<const int> ports, std::span<const double> weights, double latency,
             double work, std::span<const Arrival> arrivals);

    // Ranks to wake when `t` ends, and trace events to patch then (rank, index).
    void wait_for(const TransferRecord* t, int rank);
    void patch_on_end(const TransferRecord* t, int rank, std::uint32_t event);
    // Wakes `rank` once the frontier reaches `clock` (every event before it final).
    void wait_until(int rank, double clock);

    // Processes the next instant with an event (or a rank waiting for the
    // frontier). Returns false when there is none.
    bool step();

    // What arm() and step() left to do: ranks to wake, and trace events to
    // patch with their transfer's times. The caller empties both.
    struct Patch {
        int rank;
        std::uint32_t event;
        double start, end;  // the transfer's
    };
    std::vector<int>& woken() { return woken_; }
    std::vector<Patch>& patched() { return patched_; }
    // The ranks waiting for `t` to end.
    [[nodiscard]] std::span<const int> waiters(const TransferRecord* t) const;

    // A lower bound on when `t` ends (its end once it has ended).
    [[nodiscard]] double earliest_end(const TransferRecord* t) const;

    // Records allocated so far (in use or free for reuse): tests.
    [[nodiscard]] std::size_t records() const { return pool_->records.size(); }

    // Rate of a moving transfer (0 otherwise): tests.
    [[nodiscard]] double rate(const TransferRecord* t) const;

private:
    enum class State : std::uint8_t { free, open, waiting, latent, moving };
    struct Live {
        TransferRecord* record = nullptr;
        State state = State::free;
        std::uint32_t version = 0;  // bumped whenever its queued events go stale
        const int* ports_ext = nullptr;
        std::array<int, 2> ports_in{};
        const double* weights_ext = nullptr;
        std::array<double, 2> weights_in{};
        bool weighted = false;  // false: every weight is 1
        std::uint32_t nports = 0;
        double latency = 0, work = 0;
        double left = 0, rate = 0, updated = 0;  // work left at `updated`, at `rate`
        int unended = 0;                         // previous transfers not ended yet
        // The fold of the arrivals known so far, and those waiting for their previous transfer.
        double ready = -std::numeric_limits<double>::infinity();
        int ready_rank = std::numeric_limits<int>::max();
        int gate = -1;
        double gate_time = 0;
        // The arrivals of other transfers waiting for this one's end, one
        // entry each (so its end folds each in once: no scan per dependent).
        struct Dependent {
            std::uint32_t slot;
            int rank;
            double clock;
        };
        std::vector<Dependent> dependents;
        std::vector<int> waiters;
        std::vector<std::pair<int, std::uint32_t>> patches;
        [[nodiscard]] std::span<const int> ports() const {
            return {ports_ext ? ports_ext : ports_in.data(), nports};
        }
        [[nodiscard]] double weight(std::size_t i) const {
            return !weighted ? 1.0 : weights_ext ? weights_ext[i] : weights_in[i];
        }
    };
    enum class Kind : std::uint8_t { enter, end };
    struct Event {
        double t;
        std::uint64_t seq;
        std::uint32_t slot;
        std::uint32_t version;
        Kind kind;
        bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
    };
    struct Sync {
        double t;
        std::uint64_t seq;
        int rank;
        bool operator>(const Sync& o) const { return t != o.t ? t > o.t : seq > o.seq; }
    };
    // A port's moving flows, in the order they entered: the first kInline in place, more on the
    // heap. Most ports carry a few flows at a time, so adding and removing one touches only the
    // port's own cache line (a std::vector's buffer was a second miss at each flow's start).
    class FlowList {
    public:
        static constexpr std::uint32_t kInline = 8;
        FlowList() = default;
        // A port stays where the network made it (its ports are made once, never moved).
        FlowList(const FlowList&) = delete;
        FlowList& operator=(const FlowList&) = delete;
        ~FlowList() {
            if (cap_ > kInline) delete[] heap_;
        }
        [[nodiscard]] std::uint32_t size() const { return n_; }
        [[nodiscard]] const std::uint32_t* begin() const { return cap_ > kInline ? heap_ : in_; }
        [[nodiscard]] const std::uint32_t* end() const { return begin() + n_; }
        void push_back(std::uint32_t f) {
            if (n_ == cap_) grow();
            (cap_ > kInline ? heap_ : in_)[n_++] = f;
        }
        // Removes `f` (present), keeping the others' order.
        void erase(std::uint32_t f) {
            std::uint32_t* d = cap_ > kInline ? heap_ : in_;
            std::uint32_t* at = std::find(d, d + n_, f);
            std::copy(at + 1, d + n_, at);
            --n_;
        }

    private:
        void grow() {
            const std::uint32_t cap = 2 * cap_;
            auto* bigger = new std::uint32_t[cap];
            std::copy(begin(), end(), bigger);
            if (cap_ > kInline) delete[] heap_;
            heap_ = bigger;
            cap_ = cap;
        }
        std::uint32_t n_ = 0;
        std::uint32_t cap_ = kInline;
        union {
            std::uint32_t in_[kInline];
            std::uint32_t* heap_;
        };
    };
    // One cache line each.
    struct alignas(64) Port {
        FlowList flows;
        std::uint32_t mark = 0;
        std::uint32_t unfixed = 0;
        // progressive filling scratch
        double cap = 0;
        double weight = 0;  // of its unfixed flows
    };
    static_assert(sizeof(Port) == 64);

    void fold(Live& l, int rank, double clock, const TransferRecord* previous, double ready);
    void resolve(std::uint32_t slot);
    void push(double t, std::uint32_t slot, Kind k);
    void finish(std::uint32_t slot);
    void recompute();
    bool valid(const Event& e) const;

    detail::TransferPool* pool_;
    std::vector<Live> live_;
    std::vector<std::uint32_t> free_;
    std::vector<Port> ports_;
    std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
    std::priority_queue<Sync, std::vector<Sync>, std::greater<>> syncs_;
    std::uint64_t seq_ = 0;
    double now_ = 0;
    std::vector<int> woken_;
    std::vector<Patch> patched_;
    // This instant's changes and recomputation scratch.
    std::vector<int> touched_;
    std::vector<std::uint32_t> comp_flows_;
    std::vector<int> comp_ports_;
    std::vector<std::uint32_t> flow_mark_;
    std::vector<double> new_rate_;
    std::uint32_t epoch_ = 0;
};

}  // namespace dtsim::hw
