// Gpu: one virtual GPU as the engine sees it: a clock, the events it records
// and a slot where its coroutine is parked while it waits. Strategies reach it
// through a model (puzzle::Model, hw::Device); a world records operations on it.
//
// The engine's classes need one another's definitions: including any of
// gpu.hpp, communicator.hpp and simulation.hpp gives all three.
#pragma once

#include "dtsim/detail/parked_thread.hpp"
#include "dtsim/id_set.hpp"
#include "dtsim/task.hpp"
#include "dtsim/trace.hpp"

#include <coroutine>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace dtsim {

class Simulation;
class Communicator;
class Gpu;
namespace detail {
template <class V, class Combine, class Finish>
class Arrival;
template <class P>
void park_handle(Gpu& gpu, std::coroutine_handle<P> h);
}  // namespace detail

// What a blocked rank is waiting for; read by the deadlock diagnosis. Part
// of every Gpu, so 24 bytes: the fields after `layer` depend on the kind (a
// collective has a call and a communicator, a pass a peer, any other wait a
// text), and the named constructors set those of their kind.
struct Wait {
    enum class Kind : std::uint8_t { none, collective, send, receive, other };
    Kind kind = Kind::none;
    OpCode op;
    std::int32_t layer = kNoLayer;
    union {
        std::uint64_t call = 0;  // collective: index of the call on its communicator
        int peer;                // send: destination; receive: the sender, -1 for any
    };
    union {
        const Communicator* comm = nullptr;  // collective: where
        const char* what;                    // other: what it waits for (static text), e.g. "the end of a transfer"
    };

    static Wait collective(OpCode op, std::int32_t layer, std::uint64_t call, const Communicator& comm) {
        Wait w = of(Kind::collective, op, layer);
        w.call = call;
        w.comm = &comm;
        return w;
    }
    static Wait send(OpCode op, std::int32_t layer, int dst) {
        Wait w = of(Kind::send, op, layer);
        w.peer = dst;
        return w;
    }
    static Wait receive(OpCode op, std::int32_t layer, int src) {
        Wait w = of(Kind::receive, op, layer);
        w.peer = src;
        return w;
    }
    static Wait other(OpCode op, std::int32_t layer, const char* what) {
        Wait w = of(Kind::other, op, layer);
        w.what = what;
        return w;
    }

private:
    static Wait of(Kind kind, OpCode op, std::int32_t layer) {
        Wait w;
        w.kind = kind;
        w.op = op;
        w.layer = layer;
        return w;
    }
};
static_assert(sizeof(Wait) == 24);

// What a rank's last event was, for deadlock reports (kept also when the events are not).
struct LastEvent {
    OpCode op;
    Stream stream = Stream::compute;
    std::int32_t layer = kNoLayer;
    double start = 0;
    IdSet batches;
};

class alignas(64) Gpu {
public:
    Gpu(Simulation& sim, int rank) : sim_(&sim), rank_(rank), events_() {}
    ~Gpu();
    Gpu(const Gpu&) = delete;
    Gpu& operator=(const Gpu&) = delete;

    [[nodiscard]] int rank() const { return rank_; }
    [[nodiscard]] Simulation& sim() const { return *sim_; }
    [[nodiscard]] double clock() const { return clock_; }
    void set_clock(double t) { clock_ = t; }

    // Appends an event starting now and advances the clock by `duration`
    // (`clock += duration`, in binary64, as the reference does). The reference
    // is valid until the next event is recorded. In a run that keeps no events
    // it is the simulation's scratch event, which callers may complete (bytes,
    // flops) as they would a kept one, to no effect: its batches are empty, and
    // the next event any rank records overwrites it, so nothing may hold it
    // across a co_await.
    // (The batches are taken by reference, const or rvalue, down to where they are stored.)
    template <class B = IdSet>
        requires std::is_same_v<std::remove_cvref_t<B>, IdSet>
    Event& record(OpCode op, std::int32_t layer, double duration, double memory, B&& batches = IdSet{}) {
        Event& e = record_at(op, layer, Stream::compute, clock_, duration, memory, std::forward<B>(batches));
        clock_ += duration;
        return e;
    }

    // Appends an event at an explicit start time on `stream`, leaving the clock
    // alone (for work on a second stream that overlaps the compute stream).
    template <class B = IdSet>
        requires std::is_same_v<std::remove_cvref_t<B>, IdSet>
    Event& record_at(OpCode op, std::int32_t layer, Stream stream, double start, double duration, double memory,
                     B&& batches = IdSet{}) {
        if (!keep_events_) return record_summary(op, layer, stream, start, duration, memory, std::forward<B>(batches));
        if (events_.size() == events_.capacity()) grow_events();
        // Constructed in place: the new (cold) cache line is only written, never read. (Compilers
        // without C++20's parenthesized initialization of aggregates, clang before 16, move a
        // temporary in.)
#if defined(__cpp_aggregate_paren_init)
        Event& e = events_.emplace_back(op, stream, layer, start, duration, memory, std::forward<B>(batches));
#else
        Event& e = events_.emplace_back(Event{op, stream, layer, start, duration, memory, std::forward<B>(batches)});
#endif
        summary_.add(start, start + duration, memory);
        return e;
    }

    // Room for `n` events without reallocating (a hint; the log grows anyway).
    void reserve_events(std::size_t n) {
        if (keep_events_) events_.reserve(n);
    }

    // The last event recorded on this rank, if any.
    [[nodiscard]] std::optional<LastEvent> last_event() const {
        if (!keep_events_) {
            if (summary_.events == 0) return std::nullopt;
            return LastEvent{last_.op, last_.stream, last_.layer, summary_.last_start, last_.batches};
        }
        if (events_.empty()) return std::nullopt;
        const Event& e = events_.back();
        return LastEvent{e.op, e.stream, e.layer, e.start, e.batches};
    }
    // The i-th event this rank recorded, to complete it after the fact (a
    // transfer whose end is known later); only while events are kept.
    Event& event_at(std::size_t i) {
        if (!keep_events_ || i >= events_.size())
            throw std::logic_error(fmt_event_at_error(i));
        return events_[i];
    }
    // Events recorded so far (kept or not; counted as recorded, so a log taken
    // away by Simulation::take_logs still counts).
    [[nodiscard]] std::size_t event_count() const { return summary_.events; }
    // Events in this rank's log now, the index event_at takes being below it
    // (0 in a run that keeps no events, and after take_logs).
    [[nodiscard]] std::size_t log_size() const { return keep_events_ ? events_.size() : 0; }

    // This rank's share of the summary, folded as events are recorded, whether
    // they are kept or not: an event completed after the fact (event_at) is in
    // it as it was recorded, so a world that completes events summarizes its
    // trace instead (summarize()).
    [[nodiscard]] const RankSummary& summary() const { return summary_; }
    // What the rank waits for while parked (Kind::none once it runs again).
    [[nodiscard]] const Wait& waiting_for() const { return wait_; }
    [[nodiscard]] bool finished() const { return finished_; }

private:
    friend class Simulation;
    friend class Communicator;
    template <class P>
    friend void detail::park_handle(Gpu& gpu, std::coroutine_handle<P> h);
    template <class B>
    Event& record_summary(OpCode op, std::int32_t layer, Stream stream, double start, double duration, double memory,
                          B&& batches);
    void grow_events();
    [[nodiscard]] std::string fmt_event_at_error(std::size_t i) const;
    // Switches between keeping the events and folding them: what was recorded is dropped.
    void set_keep_events(bool on);
    [[nodiscard]] bool parked() const { return detail::is_parked(parked_); }
    // The parked coroutine, taken out to resume it or, dropped, to unwind its coroutines.
    detail::ParkedHandler unpark();

    // Two cache lines, both of which a resumed rank touches. A run that keeps
    // no events keeps what identifies its last one (its start is the summary's
    // last_start) in place of the log, and hands callers the simulation's
    // scratch event to complete.
    struct LastOp {
        OpCode op;
        Stream stream = Stream::compute;
        std::int32_t layer = kNoLayer;
        IdSet batches;
    };
    Simulation* sim_;
    double clock_ = 0;
    int rank_;
    bool keep_events_ = true;  // which member of the union below lives
    bool finished_ = false;
    RankSummary summary_;  // folded as events are recorded, kept or not
    union {
        std::vector<Event> events_;  // keep_events_: this rank's events in order
        LastOp last_;                // otherwise
    };
    Wait wait_;
    detail::ParkingSlot parked_;
};
#if DTSIM_FRAMELESS_AWAIT
// (Without the fast path the parked handler is Asio's own, in a std::optional, and a Gpu is larger.)
static_assert(sizeof(Gpu) == 128, "a Gpu is two cache lines: every resumed rank streams them in");
#endif

namespace detail {
#if DTSIM_FRAMELESS_AWAIT
// Parks the awaiting Task of `h` on `gpu` (the engine's awaiters' await_suspend).
template <class P>
void park_handle(Gpu& gpu, std::coroutine_handle<P> h) {
    park_thread(gpu.parked_, h);
}
#endif
}  // namespace detail

}  // namespace dtsim

// Gpu::record_summary writes the simulation's scratch event.
#include "dtsim/simulation.hpp"
