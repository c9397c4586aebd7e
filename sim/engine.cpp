#include "dtsim/engine.hpp"
#include "dtsim/pages.hpp"

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

#if BOOST_VERSION == 107400
bool Gpu::parked() const { return !parked_.empty(); }
Gpu::Handler Gpu::unpark() { return parked_.take(sim_->ctx_.get_executor()); }
#else
bool Gpu::parked() const { return parked_.has_value(); }
Gpu::Handler Gpu::unpark() {
    Handler h = std::move(*parked_);
    parked_.reset();
    return h;
}
#endif

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
    world_ = static_cast<int>(members_.size()) == sim.ranks();
    calls_.assign(members_.size(), 0);
}

int Communicator::position(int rank) const {
    if (world_) return rank >= 0 && rank < size() ? rank : -1;
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
    DTSIM_PARK(gpu);
}
#endif

// ------------------------------------------------------------- frame pool

namespace detail {
namespace {
constexpr std::size_t kFrameStep = 64;
constexpr std::size_t kFrameClasses = 64;  // frames up to 4 KiB are pooled
struct FreeFrame {
    FreeFrame* next;
};
// New frames are carved from chunks in allocation order, 64-byte aligned and
// without a malloc header between them: the frames of ranks spawned one after
// another lie side by side, and a sweep over the ranks reads them as a stream.
// A freed frame is reused by the next frame of its size (last freed, first
// reused). When no frame is left the pool starts over, carving from its first
// chunk again: the next run's frames then lie in rank order as the first run's
// did, not in the order the last run's ranks finished (ddp at 16,384 ranks,
// six runs in one process: 64 to 146 ns per operation from run to run with
// the frames reused in that order, 54 to 57 with the pool started over).
constexpr std::size_t kFrameChunk = kHugePage;  // on a huge page of its own (pages.hpp)
struct FramePool {
    FreeFrame* free[kFrameClasses] = {};
    char* next = nullptr;  // the unused rest of the chunk in use
    std::size_t left = 0;
    std::size_t live = 0;         // frames handed out and not given back
    std::vector<void*> chunks;    // all chunks, in the order they are carved
    std::size_t used_chunks = 0;  // chunks[0..used_chunks-1] have been carved from since the last start over
    void* carve(std::size_t bytes) {
        if (bytes > left) {
            if (used_chunks == chunks.size()) {
                // Room first, so that push_back cannot throw and leak the chunk.
                if (chunks.size() == chunks.capacity()) chunks.reserve(2 * chunks.size() + 1);
                chunks.push_back(allocate_pages(kFrameChunk));
            }
            next = static_cast<char*>(chunks[used_chunks++]);
            left = kFrameChunk;
        }
        void* p = next;
        next += bytes;
        left -= bytes;
        return p;
    }
    void start_over() {
        std::fill(std::begin(free), std::end(free), nullptr);
        next = nullptr;
        left = 0;
        used_chunks = 0;
    }
    FramePool() = default;
    FramePool(const FramePool&) = delete;
    FramePool& operator=(const FramePool&) = delete;
    ~FramePool() {
        for (void* c : chunks) release_pages(c, kFrameChunk);
    }
};
thread_local FramePool frame_pool;
}  // namespace

void* frame_allocate(std::size_t bytes) {
    const std::size_t c = (bytes + kFrameStep - 1) / kFrameStep;
    if (c >= kFrameClasses) return ::operator new(bytes);
    FramePool& pool = frame_pool;
    void* p;
    if (FreeFrame* f = pool.free[c]) {
        pool.free[c] = f->next;
        p = f;
    } else {
        p = pool.carve(c * kFrameStep);
    }
    ++pool.live;
    return p;
}

std::size_t frames_live() { return frame_pool.live; }

void frame_deallocate(void* p, std::size_t bytes) noexcept {
    const std::size_t c = (bytes + kFrameStep - 1) / kFrameStep;
    if (c >= kFrameClasses) {
        ::operator delete(p);
        return;
    }
    FramePool& pool = frame_pool;
    if (--pool.live == 0) {
        pool.start_over();
        return;
    }
    auto* f = static_cast<FreeFrame*>(p);
    f->next = pool.free[c];
    pool.free[c] = f;
}
}  // namespace detail

void Simulation::resume_ready() {
    // Runs inside io_context::poll(), so that Asio's own allocations (handlers, the frames of its
    // coroutines) use its per-thread recycling.
    while (!ready_.empty()) {
        // A rank that keeps its events appends them to a log of its own, at an address no hardware
        // prefetcher can guess (one log per rank, thousands of ranks between two appends to the
        // same log), and a store to a line not in cache stalls the rank once the store buffer
        // fills. The lines that the rank a few places ahead will write are requested now, so
        // that they arrive while the ranks before it run. The rank's other state (its Gpu, its
        // frame, its stores) lies in arrays in rank order, which the hardware streams by itself:
        // prefetching those lines too measured no gain.
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
        Gpu::Handler h = g->unpark();
        g->wait_ = Wait{};
        Gpu::resume(h);  // runs the rank until it suspends again or finishes
    }
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
    do {
        ctx_.restart();
        if (!ready_.empty()) asio::post(ctx_, [this] { resume_ready(); });
    } while (ctx_.poll() > 0 || !ready_.empty() || idle());
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

namespace {

std::string describe_event(const std::optional<LastEvent>& last) {
    if (!last) return "no event yet";
    const auto& e = *last;
    std::string s = fmt::format("last event {}", e.op.name());
    if (e.layer != kNoLayer) s += fmt::format(" layer {}", e.layer);
    if (!e.batches.empty()) s += fmt::format(" batches {}", e.batches.str());
    s += fmt::format(" at {}", e.start);
    return s;
}

}  // namespace

void Simulation::diagnose_deadlock() const {
    // Group blocked ranks by what they wait for and the operation and layer of their last events,
    // so that a 16,384-rank deadlock stays readable and still tells every rank's last event (its
    // batches and start are summed up over the group).
    struct Group {
        IdSet ranks, batches;
        double first = std::numeric_limits<double>::infinity(), latest = -first;
    };
    // By (what they wait for, their last events' operation and layer, "" for none yet).
    std::map<std::pair<std::string, std::string>, Group> groups;
    std::vector<std::string> per_rank;
    int blocked = 0;
    for (const auto& g : gpus_) {
        if (g.finished_) continue;
        ++blocked;
        const Wait& w = g.wait_;
        std::string what;
        switch (w.kind) {
            case Wait::Kind::collective: {
                // Which members have not arrived at this round?
                IdSet missing;
                const Communicator& c = *w.comm;
                for (std::size_t p = 0; p < c.members_.size(); ++p)
                    if (c.calls_[p] <= w.call) missing.insert(c.members_[p]);
                what = fmt::format("{}", w.op.name());
                if (w.layer != kNoLayer) what += fmt::format(" layer {}", w.layer);
                what += fmt::format(" (collective #{} on {}), waiting for rank(s) {} that never called it",
                                    w.call, c.name(), missing.str());
                break;
            }
            case Wait::Kind::send:
                what = fmt::format("pass to rank {}, whose mailbox stays full (rank {} never receives)",
                                   w.peer, w.peer);
                break;
            case Wait::Kind::receive:
                what = "receive, but no rank passes to it";
                break;
            case Wait::Kind::other:
                what = w.what ? w.what : "an event of its world";
                if (w.layer != kNoLayer) what += fmt::format(" (layer {})", w.layer);
                break;
            case Wait::Kind::none:
                what = "nothing (suspended outside the engine)";
                break;
        }
        const auto& last = g.last_event();
        std::string last_op;
        if (last) {
            last_op = std::string(last->op.name());
            if (last->layer != kNoLayer) last_op += fmt::format(" layer {}", last->layer);
        }
        Group& group = groups[{what, last_op}];
        group.ranks.insert(g.rank());
        if (last) {
            group.batches |= last->batches;
            group.first = std::min(group.first, last->start);
            group.latest = std::max(group.latest, last->start);
        }
        if (per_rank.size() < 64)
            per_rank.push_back(fmt::format("  rank {} waits in {}; {}", g.rank(), what, describe_event(g.last_event())));
    }
    std::string msg = fmt::format("deadlock: {} of {} ranks are blocked and none can proceed\n", blocked,
                                  ranks());
    if (blocked <= 64) {
        for (const auto& l : per_rank) msg += l + "\n";
    } else {
        for (const auto& [key, gr] : groups) {
            const auto& [what, last_op] = key;
            msg += fmt::format("  ranks {} wait in {}; ", gr.ranks.str(), what);
            if (last_op.empty()) {
                msg += "no event yet\n";
                continue;
            }
            msg += fmt::format("last events {}", last_op);
            if (!gr.batches.empty()) msg += fmt::format(" batches {} in all", gr.batches.str());
            msg += gr.first == gr.latest ? fmt::format(" at {}\n", gr.first)
                                         : fmt::format(" at {} to {}\n", gr.first, gr.latest);
        }
        msg += "  first blocked ranks in detail:\n";
        for (std::size_t i = 0; i < 8 && i < per_rank.size(); ++i) msg += "  " + per_rank[i] + "\n";
    }
    int finished = ranks() - blocked;
    if (finished > 0) msg += fmt::format("  ({} rank(s) finished)\n", finished);
    msg.pop_back();
    throw DeadlockError(msg);
}

}  // namespace dtsim
