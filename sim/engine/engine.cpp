#include "dtsim/simulation.hpp"
#include "dtsim/detail/frame_pool.hpp"
#include "dtsim/detail/pages.hpp"
#include "dtsim/interrupt.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <cstdint>
#include <limits>
#include <map>
#include <new>
#include <utility>
#include <vector>

namespace dtsim {

// ------------------------------------------------------------------------- Gpu

Gpu::~Gpu() {
    // (A simulation drains its parked ranks first; a thread dropped here unwinds
    // through the io_context, as Asio's own handler does.)
    if (parked()) unpark();
    if (keep_events_)
        std::destroy_at(&events_);
    else
        std::destroy_at(&last_);
}

void Gpu::set_keep_events(bool on) {
    if (on == keep_events_) return;
    if (on) {
        std::destroy_at(&last_);
        std::construct_at(&events_);
    } else {
        std::destroy_at(&events_);
        std::construct_at(&last_);
    }
    summary_ = {};
    keep_events_ = on;
}

detail::ParkedHandler Gpu::unpark() { return detail::unpark(parked_, sim_->ctx_.get_executor()); }

void Gpu::grow_events() {
    // Each rank appends to its own vector: no merge pass at the end, and the
    // trace is built once. Doubling keeps the copies to one per event at most.
    events_.reserve(events_.empty() ? 64 : events_.capacity() * 2);
}

std::string Gpu::fmt_event_at_error(std::size_t i) const {
    return keep_events_ ? fmt::format("rank {}: event #{} does not exist ({} recorded)", rank_, i, events_.size())
                        : fmt::format("rank {}: event #{} was not kept (the run keeps no events)", rank_, i);
}

// ----------------------------------------------------------------- Communicator

Communicator::Communicator(Simulation& sim, std::vector<int> members, std::string name)
    : sim_(&sim), members_(std::move(members)), name_(std::move(name)) {
    std::sort(members_.begin(), members_.end());
    if (members_.empty()) throw std::invalid_argument("communicator " + name_ + ": no members");
    if (std::adjacent_find(members_.begin(), members_.end()) != members_.end())
        throw std::invalid_argument("communicator " + name_ + ": a rank is listed twice");
    if (members_.front() < 0 || members_.back() >= sim.ranks())
        throw std::invalid_argument(fmt::format("communicator {}: ranks must be in [0, {})", name_,
                                                sim.ranks()));
    first_ = members_.front();
    stride_ = members_.size() == 1 ? 1 : members_[1] - members_[0];
    for (std::size_t i = 2; i < members_.size() && stride_ != 0; ++i)
        if (members_[i] - members_[i - 1] != stride_) stride_ = 0;
    calls_.assign(members_.size(), 0);
}

int Communicator::position(int rank) const {
    if (stride_ > 0) {
        const int d = rank - first_;
        if (d < 0 || d % stride_ != 0) return -1;
        const int i = d / stride_;
        return i < size() ? i : -1;
    }
    auto it = std::lower_bound(members_.begin(), members_.end(), rank);
    return it != members_.end() && *it == rank ? static_cast<int>(it - members_.begin()) : -1;
}

namespace {
// A collective call as mismatch errors name it: "allreduce(layer 2)", or the operation alone without a layer.
std::string describe_call(OpCode op, std::int32_t layer) {
    return layer == kNoLayer ? fmt::format("{}", op.name()) : fmt::format("{}(layer {})", op.name(), layer);
}
}  // namespace

Communicator::Round& Communicator::join(Gpu& gpu, OpCode op, std::int32_t layer,
                                        std::uint64_t& call) {
    const int pos = position(gpu.rank());
    if (pos < 0)
        throw ScheduleError(fmt::format("rank {}: {} (layer {}) on communicator {}, which rank {} "
                                        "is not a member of",
                                        gpu.rank(), op.name(), layer, name_, gpu.rank()));
    call = calls_[static_cast<std::size_t>(pos)]++;
    while (base_ + rounds_.size() <= call) {
        auto& r = rounds_.emplace_back();
        r.unread = size();
    }
    // Usually the newest round (the others wait for members that have not read theirs).
    Round& round = call - base_ + 1 == rounds_.size() ? rounds_.back() : rounds_[static_cast<std::size_t>(call - base_)];
    if (round.arrived == 0) {
        round.op = op;
        round.layer = layer;
        round.first_rank = gpu.rank();
        round.waiting.reserve(static_cast<std::size_t>(size()) - 1);
    } else if (round.op != op || round.layer != layer) {
        throw CollectiveMismatchError(fmt::format(
            "collective #{} on communicator {} does not match: rank {} called {} but rank {} called {}",
            call, name_, round.first_rank, describe_call(round.op, round.layer), gpu.rank(),
            describe_call(op, layer)));
    }
    return round;
}

void Communicator::throw_value_mismatch(std::uint64_t call, const Round& round, const Gpu& gpu) const {
    throw CollectiveMismatchError(fmt::format(
        "collective #{} on communicator {} does not match: rank {} and rank {} both called {}, but with values "
        "of different types",
        call, name_, round.first_rank, gpu.rank(), describe_call(round.op, round.layer)));
}

void Communicator::release(Round& round) {
    for (Gpu* g : round.waiting) sim_->wake(*g);
    round.waiting.clear();
    round.waiting.shrink_to_fit();
}

void Communicator::finish_read(Round& round) {
    --round.unread;
    while (!rounds_.empty() && rounds_.front().unread == 0) {
        rounds_.pop_front();
        ++base_;
    }
}

// ------------------------------------------------------------------- Simulation

namespace {
std::size_t checked_ranks(int ranks) {
    if (ranks < 1) throw std::invalid_argument(fmt::format("a simulation needs at least 1 rank, got {}", ranks));
    return static_cast<std::size_t>(ranks);
}
}  // namespace

Simulation::Simulation(int ranks) : gpus_(checked_ranks(ranks)) {
    for (int r = 0; r < ranks; ++r) gpus_.emplace_back(*this, r);
    mailboxes_.resize(static_cast<std::size_t>(ranks));
    std::vector<int> all(static_cast<std::size_t>(ranks));
    for (int r = 0; r < ranks; ++r) all[static_cast<std::size_t>(r)] = r;
    world_ = std::make_unique<Communicator>(*this, std::move(all), "world");
}

Simulation::~Simulation() { drain_parked(); }

std::vector<RankTrace> Simulation::take_logs() {
    std::vector<RankTrace> out(gpus_.size());
    for (std::size_t r = 0; r < gpus_.size(); ++r) {
        out[r].rank = static_cast<int>(r);
        if (!gpus_[r].keep_events_) continue;
        out[r].events = std::move(gpus_[r].events_);
        gpus_[r].events_ = {};
    }
    return out;
}

Communicator& Simulation::communicator(std::vector<int> members, std::string name) {
    comms_.push_back(std::make_unique<Communicator>(*this, std::move(members), std::move(name)));
    return *comms_.back();
}

#if DTSIM_FRAMELESS_AWAIT
detail::Park Simulation::park(Gpu& gpu, const Wait& wait) {
    gpu.wait_ = wait;
    return detail::Park(gpu);
}
#else
Task<> Simulation::park(Gpu& gpu, const Wait& wait) {
    gpu.wait_ = wait;
    co_await detail::park_in(gpu.parked_);
}
#endif

void Simulation::resume_ready() {
    // Runs inside io_context::poll(), so that Asio's own allocations (handlers, the frames of its
    // coroutines) use its per-thread recycling.
    // An interrupt request stops the run (see run()); looked for now and then, at the cost of a
    // counter (in a register) per resumed rank.
    unsigned countdown = interrupt_countdown_;
    while (!ready_.empty()) {
        if (--countdown == 0) [[unlikely]] {
            countdown = kInterruptEvery;
            if ((interrupted_ = interrupt_requested()) != 0) break;
        }
        // A rank that keeps its events appends them to a log of its own, at an address no hardware
        // prefetcher can guess (one log per rank, thousands of ranks between two appends to the
        // same log), and a store to a line not in cache stalls the rank once the store buffer
        // fills. The lines that the rank a few places ahead will write are requested now, so
        // that they arrive while the ranks before it run. The rank's other state (its Gpu, its
        // frame, its stores) lies in arrays in rank order, which the hardware streams by itself.
        if (ready_.size() > kPrefetchAhead) {
            const Gpu& ahead = *ready_[kPrefetchAhead];
            // Only where the log has room for the next event: a full log reallocates, and a rank that
            // keeps no events (or a world that records nothing) has no log at all.
            if (ahead.keep_events_ && ahead.events_.size() < ahead.events_.capacity()) {
                // The second line may lie past the log's allocation: computed as an integer, not as a
                // pointer beyond one past the end (a prefetch never faults).
                const auto end = reinterpret_cast<std::uintptr_t>(ahead.events_.data() + ahead.events_.size());
                __builtin_prefetch(reinterpret_cast<const void*>(end), 1);
                __builtin_prefetch(reinterpret_cast<const void*>(end + sizeof(Event)), 1);
            }
        }
        Gpu* g = ready_.front();
        ready_.pop_front();
        detail::ParkedHandler h = g->unpark();
        g->wait_ = Wait{};
        detail::resume_parked(h);  // runs the rank until it suspends again or finishes
    }
    interrupt_countdown_ = countdown;
}

Task<> Simulation::send(Gpu& from, int dst, Message&& message) {
    if (dst < 0 || dst >= ranks())
        throw ScheduleError(fmt::format("rank {}: pass to rank {}: destination must be in [0, {})",
                                        from.rank(), dst, ranks()));
    message.from = from.rank();
    Mailbox& box = mailboxes_[static_cast<std::size_t>(dst)];
    if (!box.slot) {
        box.slot = std::move(message);
        if (Gpu* r = std::exchange(box.waiting_receiver, nullptr)) wake(*r);
        co_return;
    }
    box.blocked_senders.emplace_back(&from, std::move(message));
    co_await park(from, Wait::send(ops::pass, kNoLayer, dst));
}

Task<Message> Simulation::receive(Gpu& gpu) {
    Mailbox& box = mailboxes_[static_cast<std::size_t>(gpu.rank())];
    if (!box.slot) {
        box.waiting_receiver = &gpu;
        co_await park(gpu, Wait::receive(ops::pass, kNoLayer, -1));
    }
    Message m = std::move(*box.slot);
    box.slot.reset();
    if (!box.blocked_senders.empty()) {
        auto [sender, next] = std::move(box.blocked_senders.front());
        box.blocked_senders.pop_front();
        box.slot = std::move(next);
        wake(*sender);
    }
    co_return m;
}

void Simulation::run(const std::function<Task<>(Gpu&)>& body) {
    if (ran_) throw std::logic_error("Simulation::run called twice");
    ran_ = true;
    // Every rank's coroutine first, then their spawns: the ranks' frames are
    // allocated one after another (see the frame pool), Asio's spawn frames apart.
    std::vector<Task<>> tasks;
    tasks.reserve(gpus_.size());
    for (Gpu& g : gpus_) tasks.push_back(body(g));
    for (std::size_t i = 0; i < gpus_.size(); ++i) {
        Gpu* gp = &gpus_[i];
        asio::co_spawn(ctx_, std::move(tasks[i]), [this, gp](std::exception_ptr e) {
            gp->finished_ = true;
            if (e && !error_) {
                error_ = e;
                error_rank_ = gp->rank();
            }
        });
    }
    // Spawned coroutines start through the io_context; parked ones resume
    // from the ready queue, drained inside poll().
    // When nothing can run, the idle hook (if any) may release parked ranks.
    auto idle = [this] {
        if (!idle_hook_ || error_) return false;
        try {
            return idle_hook_();
        } catch (...) {
            error_ = std::current_exception();
            error_rank_ = -1;
            return false;
        }
    };
    // An interrupt request, looked for between two rounds of polling and inside resume_ready(),
    // ends the run as an error would, with Interrupted.
    do {
        ctx_.restart();
        if (!ready_.empty()) asio::post(ctx_, [this] { resume_ready(); });
    } while ((ctx_.poll() > 0 || !ready_.empty() || idle()) && (interrupted_ = interrupt_requested()) == 0);
    if (interrupted_ != 0) {
        drain_parked();
        throw Interrupted(interrupted_);
    }
    if (error_) {
        drain_parked();
        try {
            std::rethrow_exception(error_);
        } catch (const ScheduleError&) {
            throw;
        } catch (const std::bad_alloc&) {
            throw;  // out of memory: the machine's limit, not the schedule's fault
        } catch (const std::exception& e) {
            if (error_rank_ < 0) throw ScheduleError(e.what());
            throw ScheduleError(fmt::format("rank {}: {}", error_rank_, e.what()));
        }
    }
    bool all_done = std::all_of(gpus_.begin(), gpus_.end(), [](const Gpu& g) { return g.finished_; });
    if (!all_done) {
        try {
            diagnose_deadlock();
        } catch (...) {
            drain_parked();
            throw;
        }
    }
}

void Simulation::drain_parked() {
    // Parked handlers must die while the io_context lives; their destruction
    // posts the unwinding of the coroutine stacks, which poll() then runs.
    ctx_.restart();
    ready_.clear();
    for (Gpu& g : gpus_)
        if (g.parked()) g.unpark();
    while (ctx_.poll() > 0) {
    }
}

}  // namespace dtsim
