// The engine: one C++20 coroutine per virtual GPU on a Boost.Asio io_context.
// Local operations run inline; collectives and point-to-point passes suspend
// the rank's coroutine until they are matched. Each rank has its own virtual
// clock; synchronisation moves clocks forward (a collective to the maximum of
// its members' clocks, a receive to the message's clock). Runs are
// deterministic: ready coroutines resume in the order they were released.
#pragma once

// <utility> must precede Asio with Boost 1.74 + g++ 12 (std::exchange in awaitable.hpp).
#include <utility>

#include "dtsim/errors.hpp"
#include "dtsim/fixed_array.hpp"
#include "dtsim/id_set.hpp"
#include "dtsim/trace.hpp"

#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/version.hpp>

#include <algorithm>
#include <any>
#include <coroutine>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace dtsim {

namespace asio = boost::asio;
using Executor = asio::io_context::executor_type;
// The coroutine type of strategies and of every operation that may suspend.
template <class T = void>
using Task = asio::awaitable<T, Executor>;

// With Boost 1.74 (Debian 12) a collective and a park suspend the strategy's
// own coroutine: no coroutine frame of their own, no allocation, and the
// resumed rank continues in its strategy directly. Asio's awaitable accepts
// only its own awaitables, so dtsim gives Task coroutines a promise type
// derived from Asio's that also accepts the engine's awaiters (marked by a
// member type `dtsim_awaiter`) and allocates frames from a pool (Asio's
// recycling allocator keeps one free frame per thread; thousands of ranks
// parked in collectives free and take frames by the thousand). Define
// DTSIM_FRAMELESS_AWAIT=0 to use plain Asio coroutines (any Boost version):
// the same semantics, a frame per collective.
#ifndef DTSIM_FRAMELESS_AWAIT
#if BOOST_VERSION == 107400
#define DTSIM_FRAMELESS_AWAIT 1
#else
#define DTSIM_FRAMELESS_AWAIT 0
#endif
#endif

namespace detail {
// Coroutine frames up to 4 KiB, by size class (64-byte steps): freed frames
// go to a free list, new ones are carved one after another from 2 MiB chunks
// (pages.hpp), and once every frame is back the pool starts carving from its
// first chunk again. Per thread, and the chunks are unmapped when the thread
// ends: a frame must be freed on the thread that allocated it, before that
// thread ends (dtsim runs a simulation on one thread). Larger frames come
// from operator new.
void* frame_allocate(std::size_t bytes);
void frame_deallocate(void* p, std::size_t bytes) noexcept;
// Frames from the calling thread's pool not yet freed (a frame kept alive
// keeps the pool from starting over).
std::size_t frames_live();
}  // namespace detail
}  // namespace dtsim

#if DTSIM_FRAMELESS_AWAIT
namespace dtsim::detail {
template <class A>
struct AwaitByPointer {
    A* a;
    bool await_ready() { return a->await_ready(); }
    template <class P>
    decltype(auto) await_suspend(std::coroutine_handle<P> h) {
        return a->await_suspend(h);
    }
    decltype(auto) await_resume() { return a->await_resume(); }
};

template <class T>
struct TaskFrame : asio::detail::awaitable_frame<T, Executor> {
    using Base = asio::detail::awaitable_frame<T, Executor>;
    using Base::await_transform;
    // Asio's awaitables expect their caller's promise to be Asio's frame type;
    // this promise is one (a derived class with no data of its own), so the
    // handle is re-typed to it.
    template <class U>
    auto await_transform(asio::awaitable<U, Executor> a) const {
        struct Awaiter {
            asio::awaitable<U, Executor> a;
            bool await_ready() const noexcept { return a.await_ready(); }
            void await_suspend(std::coroutine_handle<TaskFrame> h) {
                a.await_suspend(std::coroutine_handle<Base>::from_address(h.address()));
            }
            U await_resume() { return a.await_resume(); }
        };
        return Awaiter{std::move(a)};
    }
    // The engine's own awaiters are awaited through a pointer: g++ keeps the
    // awaiter that await_transform returns in the frame next to the operand,
    // so returning the operand itself (by reference or value) would store it twice.
    template <class A>
        requires requires { typename std::remove_cvref_t<A>::dtsim_awaiter; }
    auto await_transform(A&& a) const noexcept {
        static_assert(!std::is_lvalue_reference_v<A> ||
                          !requires { typename std::remove_cvref_t<A>::dtsim_awaited_at_once; },
                      "await this where it is made: co_await model.allreduce(x, l), not a variable holding it");
        return AwaitByPointer<std::remove_reference_t<A>>{&a};
    }
    static void* operator new(std::size_t n) { return frame_allocate(n); }
    static void operator delete(void* p, std::size_t n) noexcept { frame_deallocate(p, n); }
};
static_assert(sizeof(TaskFrame<int>) == sizeof(asio::detail::awaitable_frame<int, Executor>) &&
              alignof(TaskFrame<int>) == alignof(asio::detail::awaitable_frame<int, Executor>));
}  // namespace dtsim::detail

template <class T, class... Args>
struct std::coroutine_traits<boost::asio::awaitable<T, dtsim::Executor>, Args...> {
    using promise_type = dtsim::detail::TaskFrame<T>;
};
#endif

namespace dtsim {

class Simulation;
class Communicator;
class Gpu;
namespace detail {
template <class V, class Combine, class Finish>
class Arrival;
class Park;
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

#if BOOST_VERSION == 107400
namespace detail {
// A parked rank's thread of execution (what Gpu::resume relaunches), kept in
// 16 bytes instead of Asio's 32: Asio's thread object is the coroutine stack
// (the frame at its bottom, which owns the stack, and the frame at its top,
// the one to resume) and the thread's executor, which for every rank is its
// simulation's, so only the stack is kept and the executor is given back when
// the thread is rebuilt.
class ParkedThread {
public:
    using Thread = asio::detail::awaitable_thread<Executor>;
    ParkedThread() = default;
    ParkedThread(const ParkedThread&) = delete;
    ParkedThread& operator=(const ParkedThread&) = delete;

    [[nodiscard]] bool empty() const { return !bottom_.valid(); }
    // Takes `thread`'s stack (as moving the thread would), leaving it with nothing to run. Only when empty.
    void park(Thread& thread) {
        if (!empty()) throw std::logic_error("ParkedThread::park: a rank is parked twice");
        // Asio's awaitable has no move assignment; this one is empty.
        std::destroy_at(&bottom_);
        std::construct_at(&bottom_, std::move(Stack::bottom(thread)));
        top_ = std::exchange(Stack::top(thread), nullptr);
    }
    // The thread again, on `ex`, to launch or to drop (which unwinds its stack); leaves this empty.
    Thread take(const Executor& ex) {
        Thread thread(std::move(bottom_), ex);
        Stack::top(thread) = std::exchange(top_, nullptr);
        return thread;
    }

private:
    // The stack's two ends are protected members of Asio's thread; a derived class may name them.
    struct Stack : Thread {
        static asio::awaitable<void, Executor>& bottom(Thread& t) { return t.*&Stack::bottom_of_stack_; }
        static asio::detail::awaitable_frame_base<Executor>*& top(Thread& t) { return t.*&Stack::top_of_stack_; }
    };
    asio::awaitable<void, Executor> bottom_;
    asio::detail::awaitable_frame_base<Executor>* top_ = nullptr;
};
}  // namespace detail
#endif

// What a rank's last event was, for deadlock reports (kept also when the events are not).
struct LastEvent {
    OpCode op;
    Stream stream = Stream::compute;
    std::int32_t layer = kNoLayer;
    double start = 0;
    IdSet batches;
};

// One virtual GPU as the engine sees it: a clock, its events and a parking slot.
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
        // Constructed in place: the new (cold) cache line is only written, never read.
        Event& e = events_.emplace_back(op, stream, layer, start, duration, memory, std::forward<B>(batches));
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

#if BOOST_VERSION == 107400
    // The parked coroutine's thread of execution; launch() resumes it where it stopped.
    using Handler = asio::detail::awaitable_thread<Executor>;
    static void resume(Handler& h) { h.launch(); }
#else
    using Handler = asio::async_result<asio::use_awaitable_t<Executor>, void()>::handler_type;
    static void resume(Handler& h) { h(); }
#endif

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
    [[nodiscard]] bool parked() const;
    // The parked thread, taken out to resume it or, dropped, to unwind its coroutines.
    Handler unpark();
#if BOOST_VERSION == 107400
    using Parked = detail::ParkedThread;
#else
    using Parked = std::optional<Handler>;
#endif
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
    Parked parked_;
};
#if BOOST_VERSION == 107400
// (With another Boost the parked handler is Asio's own, in a std::optional, and a Gpu is larger.)
static_assert(sizeof(Gpu) == 128, "a Gpu is two cache lines: every resumed rank streams them in");
#endif

// A message in a mailbox.
struct Message {
    std::any payload;
    double clock = 0;     // the sender's clock after its pass
    double duration = 0;  // what the pass costs the receiver too
    int from = -1;
};

// A group of ranks that run collectives together (the world, a data-, tensor-
// or pipeline-parallel group). The k-th collective call of every member belongs
// to the same round; the last arrival releases everyone.
class Communicator {
    struct Round;

public:
    Communicator(Simulation& sim, std::vector<int> members, std::string name);

    [[nodiscard]] int size() const { return static_cast<int>(members_.size()); }
    [[nodiscard]] const std::vector<int>& members() const { return members_; }
    [[nodiscard]] const std::string& name() const { return name_; }
    // Position of `rank` in the group, or -1.
    [[nodiscard]] int position(int rank) const;

    template <class V>
    struct Result {
        V value;
        double clock;  // maximum of the members' clocks at arrival
    };

    // What arrive() returns: co_await it (once) for the result.
#if DTSIM_FRAMELESS_AWAIT
    template <class V, class Combine, class Finish>
    using Arriving = detail::Arrival<V, Combine, Finish>;
#else
    template <class V, class Combine, class Finish>
    using Arriving = Task<std::invoke_result_t<Finish&, Result<V>&&>>;
#endif

    // Joins this group's next collective with `value` when awaited.
    // `combine(acc, value, from_rank)` folds the members' values in arrival
    // order and may throw to reject a value. Suspends until every member has
    // arrived (the last one does not suspend); then `finish(Result<V>&&)` runs
    // on this rank and its return value is the result. The hot path of every
    // collective: no allocation, no coroutine frame of its own.
    template <class V, class Combine, class Finish>
    auto collective(Gpu& gpu, OpCode op, std::int32_t layer, V value, Combine combine, Finish finish)
        -> Arriving<V, Combine, Finish>;

    // The same as a Task (a coroutine frame per call), for code that returns it as one.
    template <class V, class Combine, class Finish>
    auto arrive(Gpu& gpu, OpCode op, std::int32_t layer, V value, Combine combine, Finish finish)
        -> Task<std::invoke_result_t<Finish&, Result<V>&&>> {
        co_return co_await collective(gpu, op, layer, std::move(value), std::move(combine), std::move(finish));
    }

    // The protocol under collective(), for awaiters that keep what lasts across
    // the suspension themselves (a model is in one collective at a time, say):
    // `join_round` folds `value` into this member's next round and returns true
    // when it completed the round; otherwise the caller parks the rank, which
    // is woken when the round completes. Then `take_result` gives the member
    // its result, once.
    class Seat {
    public:
        Seat() = default;
        Seat(const Seat&) = delete;  // a seat's result is taken once
        Seat& operator=(const Seat&) = delete;

    private:
        friend class Communicator;
        Round* round_ = nullptr;
    };
    // (`value` is copied, or moved when it is an rvalue, only by the member that opens the round.)
    template <class V, class In, class Combine>
        requires std::is_same_v<std::remove_cvref_t<In>, V>
    bool join_round(Gpu& gpu, OpCode op, std::int32_t layer, In&& value, Combine& combine, Seat& seat) {
        return enter<V>(gpu, op, layer, std::forward<In>(value), combine, seat.round_);
    }
    template <class V>
    Result<V> take_result(Seat& seat) {
        if (!seat.round_) throw std::logic_error("Communicator::take_result: the seat is in no round");
        return leave<V>(std::exchange(seat.round_, nullptr));
    }

    struct TakeResult {
        template <class V>
        Result<V> operator()(Result<V>&& r) const {
            return std::move(r);
        }
    };
    // The same, returning the combined value and the maximum clock.
    template <class V, class Combine>
    auto collective(Gpu& gpu, OpCode op, std::int32_t layer, V value, Combine combine) {
        return collective(gpu, op, layer, std::move(value), std::move(combine), TakeResult{});
    }
    template <class V, class Combine>
    Task<Result<V>> arrive(Gpu& gpu, OpCode op, std::int32_t layer, V value, Combine combine) {
        co_return co_await collective(gpu, op, layer, std::move(value), std::move(combine), TakeResult{});
    }

private:
    friend class Simulation;
    template <class V, class Combine, class Finish>
    friend class detail::Arrival;
    struct Round {
        OpCode op;
        std::int32_t layer = kNoLayer;
        int first_rank = -1;
        int arrived = 0;
        int unread = 0;  // released members that have not taken the result yet
        double max_clock = -std::numeric_limits<double>::infinity();
        std::any acc;
        std::vector<Gpu*> waiting;
    };
    Round& join(Gpu& gpu, OpCode op, std::int32_t layer, std::uint64_t& call);
    // Arrival: folds `value` into the round; true when this member completed it.
    template <class V, class In, class Combine>
    bool enter(Gpu& gpu, OpCode op, std::int32_t layer, In&& value, Combine& combine, Round*& out);
    // After the round completed: this member's result (the combined value and the latest clock).
    template <class V>
    Result<V> leave(Round* round);
    void release(Round& round);
    void finish_read(Round& round);
    // A member joined a round with a value of another type than the first member's.
    [[noreturn]] void throw_value_mismatch(std::uint64_t call, const Round& round, const Gpu& gpu) const;

    Simulation* sim_;
    std::vector<int> members_;  // sorted ranks
    std::string name_;
    bool world_ = false;
    std::vector<std::uint64_t> calls_;  // per member: collectives started
    std::uint64_t base_ = 0;            // call index of rounds_.front()
    std::deque<Round> rounds_;
};

class Simulation {
public:
    explicit Simulation(int ranks);
    ~Simulation();
    Simulation(const Simulation&) = delete;
    Simulation& operator=(const Simulation&) = delete;

    [[nodiscard]] int ranks() const { return static_cast<int>(gpus_.size()); }
    Gpu& gpu(int rank) { return gpus_.at(static_cast<std::size_t>(rank)); }
    Communicator& world() { return *world_; }
    // A communicator over `members` (distinct ranks); kept alive by the simulation.
    Communicator& communicator(std::vector<int> members, std::string name);

    // Runs `body(gpu)` as one coroutine per rank until all finish. Rethrows the
    // first exception a rank raised (ScheduleErrors as they are, others wrapped
    // with the rank); throws DeadlockError naming every blocked rank when no
    // coroutine can proceed. Can be called once.
    void run(const std::function<Task<>(Gpu&)>& body);

    // Point to point, FIFO mailboxes with room for one message: `send` blocks
    // while the destination's mailbox is full, `receive` while its own is empty.
    Task<> send(Gpu& from, int dst, Message&& message);  // message must outlive the co_await
    Task<Message> receive(Gpu& gpu);

    // Whether ranks keep their events (default). Off, each rank keeps only
    // what names its last event (Gpu::last_event); on or off, it folds a
    // running summary (Gpu::summary). A run that needs no trace saves a cache
    // line of memory per operation. Before run(); what was recorded is dropped.
    void keep_events(bool on) {
        for (Gpu& g : gpus_) g.set_keep_events(on);
    }

    // Every rank's events, in order; call after run(). Empties the logs (a
    // rank's last_event() is then empty; its event_count() and summary() stay).
    std::vector<RankTrace> take_logs();

    // Called whenever no coroutine can proceed (nothing ready, nothing posted)
    // while some are parked: a world that keeps its own pending events (a
    // network whose transfers end only once no rank can start an overlapping
    // one) advances them there and wakes the ranks they release. Returns
    // whether it woke any rank; when it returns false the run ends, and parked
    // ranks are a deadlock. Set before run().
    void set_idle_hook(std::function<bool()> hook) { idle_hook_ = std::move(hook); }

    // Suspends `gpu` until wake(gpu). The wait is described for diagnosis.
#if DTSIM_FRAMELESS_AWAIT
    detail::Park park(Gpu& gpu, const Wait& wait);
#else
    Task<> park(Gpu& gpu, const Wait& wait);
#endif
    // Makes a parked rank ready; ready ranks resume in FIFO order.
    // (Its wait is cleared when it resumes: waking thousands of ranks touches
    // none of them, only the queue.)
    void wake(Gpu& gpu) { ready_.push_back(&gpu); }

private:
    struct Mailbox {
        std::optional<Message> slot;
        std::deque<std::pair<Gpu*, Message>> blocked_senders;
        Gpu* waiting_receiver = nullptr;
    };
    [[noreturn]] void diagnose_deadlock() const;
    void drain_parked();
    void resume_ready();

    std::deque<Gpu*> ready_;
    asio::io_context ctx_;
    FixedArray<Gpu> gpus_;  // side by side, in rank order
    std::vector<Mailbox> mailboxes_;
    std::unique_ptr<Communicator> world_;
    std::deque<std::unique_ptr<Communicator>> comms_;
    std::function<bool()> idle_hook_;
    std::exception_ptr error_;
    int error_rank_ = -1;
    bool ran_ = false;
    friend class Gpu;
    Event scratch_;  // what Gpu::record returns in a run that keeps no events
    // How far down the ready queue resume_ready() prefetches a rank's next event lines: at 16,384
    // ranks, 2, 4 and 8 places measured the same.
    static constexpr std::size_t kPrefetchAhead = 4;
};

template <class B>
Event& Gpu::record_summary(OpCode op, std::int32_t layer, Stream stream, double start, double duration,
                           double memory, B&& batches) {
    // Field by field, as the whole Event was written before (assigning it whole measured 1 to 2 % more
    // instructions per operation); the scratch event's batches stay empty.
    last_.op = op;
    last_.stream = stream;
    last_.layer = layer;
    last_.batches = std::forward<B>(batches);
    summary_.add(start, start + duration, memory);
    // The scratch event is the simulation's, one line that every rank writes: hot in cache.
    Event& e = sim_->scratch_;
    e.op = op;
    e.stream = stream;
    e.layer = layer;
    e.start = start;
    e.duration = duration;
    e.memory = memory;
    e.bytes = 0;
    e.flops = 0;
    return e;
}

// ---------------------------------------------------------------------------

namespace detail {
// Suspends the calling coroutine and leaves the handler that resumes it in `slot`.
#if BOOST_VERSION == 107400
// Boost 1.74's awaitable promise accepts a function of its frame that detaches
// the coroutine's thread of execution (async_initiate works this way). Taking
// the thread here parks the coroutine without the extra coroutine frame that
// async_initiate's initiate() allocates; Gpu::resume relaunches it.
inline auto park_in(ParkedThread& slot) {
    return [&slot](auto* frame) {
        slot.park(*frame->detach_thread());
        return static_cast<Gpu::Handler*>(nullptr);
    };
}
#define DTSIM_PARK(gpu) co_await ::dtsim::detail::park_in((gpu).parked_)
#else
struct ParkIn {
    std::optional<Gpu::Handler>* slot;
    void operator()(Gpu::Handler h) const { slot->emplace(std::move(h)); }
};
#define DTSIM_PARK(gpu)                                                                                   \
    co_await asio::async_initiate<const asio::use_awaitable_t<Executor>&, void()>(                        \
        ::dtsim::detail::ParkIn{&(gpu).parked_}, asio::use_awaitable_t<Executor>{})
#endif
}  // namespace detail

#if DTSIM_FRAMELESS_AWAIT
namespace detail {
// Parks the awaiting coroutine in gpu.parked_: its thread of execution is
// detached from the frame and relaunched by Gpu::resume.
template <class P>
void park_handle(Gpu& gpu, std::coroutine_handle<P> h) {
#if BOOST_VERSION == 107400
    gpu.parked_.park(*h.promise().detach_thread());
#else
    gpu.parked_.emplace(std::move(*h.promise().detach_thread()));
#endif
}

// `co_await sim.park(gpu, wait)`.
class Park {
public:
    using dtsim_awaiter = void;
    explicit Park(Gpu& gpu) : gpu_(&gpu) {}
    bool await_ready() const noexcept { return false; }
    template <class P>
    void await_suspend(std::coroutine_handle<P> h) {
        park_handle(*gpu_, h);
    }
    void await_resume() const noexcept {}

private:
    Gpu* gpu_;
};

// `co_await comm.arrive(gpu, ...)`: joins the round when awaited; the last
// member to arrive does not suspend at all.
template <class V, class Combine, class Finish>
class Arrival {
public:
    using dtsim_awaiter = void;
    using Result = std::invoke_result_t<Finish&, Communicator::Result<V>&&>;
    Arrival(Communicator& comm, Gpu& gpu, OpCode op, std::int32_t layer, V value, Combine combine, Finish finish)
        : comm_(&comm), gpu_(&gpu), op_(op), layer_(layer), value_(std::move(value)), combine_(std::move(combine)),
          finish_(std::move(finish)) {}
    bool await_ready() { return comm_->enter<V>(*gpu_, op_, layer_, std::move(value_), combine_, round_); }
    template <class P>
    void await_suspend(std::coroutine_handle<P> h) {
        park_handle(*gpu_, h);
    }
    Result await_resume() { return finish_(comm_->leave<V>(round_)); }

private:
    Communicator* comm_;
    Gpu* gpu_;
    OpCode op_;
    std::int32_t layer_;
    V value_;
    [[no_unique_address]] Combine combine_;
    [[no_unique_address]] Finish finish_;
    Communicator::Round* round_ = nullptr;
};
}  // namespace detail
#endif

template <class V, class In, class Combine>
bool Communicator::enter(Gpu& gpu, OpCode op, std::int32_t layer, In&& value, Combine& combine, Round*& out) {
    std::uint64_t call = 0;
    Round& round = join(gpu, op, layer, call);
    out = &round;
    if (round.arrived == 0) {
        round.acc.emplace<V>(std::forward<In>(value));
    } else {
        V* acc = std::any_cast<V>(&round.acc);
        if (!acc) throw_value_mismatch(call, round, gpu);
        combine(*acc, value, gpu.rank());
    }
    round.max_clock = std::max(round.max_clock, gpu.clock());
    if (++round.arrived < size()) {
        round.waiting.push_back(&gpu);
        gpu.wait_ = Wait::collective(op, layer, call, *this);
        return false;
    }
    release(round);
    return true;
}

template <class V>
auto Communicator::leave(Round* round) -> Result<V> {
    Result<V> r{*std::any_cast<V>(&round->acc), round->max_clock};
    finish_read(*round);
    return r;
}

template <class V, class Combine, class Finish>
auto Communicator::collective(Gpu& gpu, OpCode op, std::int32_t layer, V value, Combine combine, Finish finish)
    -> Arriving<V, Combine, Finish> {
#if DTSIM_FRAMELESS_AWAIT
    return detail::Arrival<V, Combine, Finish>(*this, gpu, op, layer, std::move(value), std::move(combine),
                                               std::move(finish));
#else
    Round* round = nullptr;
    if (!enter<V>(gpu, op, layer, std::move(value), combine, round)) DTSIM_PARK(gpu);
    co_return finish(leave<V>(round));
#endif
}

}  // namespace dtsim
