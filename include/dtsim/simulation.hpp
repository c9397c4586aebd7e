// Simulation: a run of N virtual GPUs. Each rank runs a strategy as a Task on
// one Boost.Asio io_context; local operations run inline, while collectives
// and point-to-point passes suspend the rank's coroutine until they are
// matched. Each rank has its own virtual clock; synchronisation moves clocks
// forward (a collective to the maximum of its members' clocks, a receive to
// the message's clock). Runs are deterministic: ready coroutines resume in the
// order they were released.
#pragma once

#include "dtsim/detail/fixed_array.hpp"
#include "dtsim/errors.hpp"
#include "dtsim/gpu.hpp"
#include "dtsim/task.hpp"
#include "dtsim/trace.hpp"

#include <any>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dtsim {

class Communicator;

// A message in a mailbox.
struct Message {
    std::any payload;
    double clock = 0;     // the sender's clock after its pass
    double duration = 0;  // what the pass costs the receiver too
    int from = -1;
};

namespace detail {
#if DTSIM_FRAMELESS_AWAIT
// `co_await sim.park(gpu, wait)` on the fast path.
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
#endif
}  // namespace detail

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
    // coroutine can proceed, and Interrupted (dtsim/interrupt.hpp) when an
    // interrupt is requested while it runs. Can be called once.
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
    detail::FixedArray<Gpu> gpus_;  // side by side, in rank order
    std::vector<Mailbox> mailboxes_;
    std::unique_ptr<Communicator> world_;
    std::deque<std::unique_ptr<Communicator>> comms_;
    std::function<bool()> idle_hook_;
    std::exception_ptr error_;
    int error_rank_ = -1;
    bool ran_ = false;
    int interrupted_ = 0;  // the interrupt request that stopped the run, 0 while none has
    // resume_ready() looks for an interrupt request once every kInterruptEvery ranks it resumes.
    static constexpr unsigned kInterruptEvery = 4096;
    unsigned interrupt_countdown_ = kInterruptEvery;
    friend class Gpu;
    Event scratch_;  // what Gpu::record returns in a run that keeps no events
    // How far down the ready queue resume_ready() prefetches a rank's next event lines.
    static constexpr std::size_t kPrefetchAhead = 4;
};

template <class B>
Event& Gpu::record_summary(OpCode op, std::int32_t layer, Stream stream, double start, double duration,
                           double memory, B&& batches) {
    // Field by field (assigning the whole Event would copy its batches too); the scratch event's
    // batches stay empty.
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

}  // namespace dtsim

#include "dtsim/communicator.hpp"
