#include "dtsim/hw/world.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace dtsim::hw {

namespace ops {
OpCode of(Collective c) {
    switch (c) {
        case Collective::all_reduce: return all_reduce;
        case Collective::all_gather: return all_gather;
        case Collective::reduce_scatter: return reduce_scatter;
        case Collective::broadcast: return broadcast;
        case Collective::reduce: return reduce;
    }
    return all_reduce;
}
}  // namespace ops

CollectiveCost Group::cost(Collective c, double bytes) const {
    const PricedKey key{c, world_->algorithm(), bytes};
    for (std::uint32_t i = 0; i < recent_used_; ++i)
        if (recent_[i].first == key) return recent_[i].second;
    const auto [it, added] = priced_.try_emplace(key);
    if (added) it->second = collective_cost(world_->cluster(), c, bytes, shape_, world_->algorithm());
    recent_[recent_next_] = {key, it->second};
    recent_next_ = (recent_next_ + 1) % kRecent;
    recent_used_ = std::min<std::uint32_t>(recent_used_ + 1, kRecent);
    return it->second;
}

World::World(Cluster cluster, int ranks, std::vector<int> placement)
    : cluster_(std::move(cluster)), placement_(std::move(placement)), algorithm_(cluster_.algorithm), sim_(ranks),
      network_(ranks * 4) {
    if (ranks > cluster_.gpus())
        throw std::invalid_argument(fmt::format("cluster {} has {} GPUs ({} nodes x {}); {} ranks do not fit",
                                                cluster_.name, cluster_.gpus(), cluster_.nodes,
                                                cluster_.gpus_per_node, ranks));
    if (!placement_.empty()) {
        if (static_cast<int>(placement_.size()) != ranks)
            throw std::invalid_argument(fmt::format("a placement of {} GPUs for {} ranks", placement_.size(), ranks));
        for (std::size_t r = 0; r < placement_.size(); ++r)
            if (placement_[r] < 0 || placement_[r] >= cluster_.gpus() || (r > 0 && placement_[r] <= placement_[r - 1]))
                throw std::invalid_argument(fmt::format("placement: rank {} on GPU {}: expected ascending GPUs in "
                                                        "[0, {})",
                                                        r, placement_[r], cluster_.gpus()));
    }
    wait_text_.resize(static_cast<std::size_t>(ranks));
    devices_.reserve(static_cast<std::size_t>(ranks));
    for (int r = 0; r < ranks; ++r) devices_.push_back(std::make_unique<Device>(*this, sim_.gpu(r)));
    inbox_.resize(static_cast<std::size_t>(ranks));
    std::vector<int> all(static_cast<std::size_t>(ranks));
    for (int r = 0; r < ranks; ++r) all[static_cast<std::size_t>(r)] = r;
    everyone_ = &group(std::move(all), "world");
}

World::~World() = default;

Group& World::group(std::vector<int> members, std::string name, std::vector<int> whole) {
    Communicator& comm = sim_.communicator(std::move(members), std::move(name));
    if (whole.empty())
        for (int r : comm.members()) whole.push_back(placement(r));
    const GroupShape shape = GroupShape::of(cluster_, whole);
    // Every member sends and receives (ring, tree): its tx and rx on each
    // level spanned. Weights: a level's share of the bottleneck's time
    // (network.hpp). The ratio does not depend on the collective or its size
    // (both levels move bus_factor x S in NCCL's ring), so one all-reduce of
    // 1 byte gives it.
    const LevelSeconds t = level_seconds(cluster_, Collective::all_reduce, 1, shape);
    const double bottleneck = std::max(t.intra_node, t.inter_node);
    std::vector<int> ports;
    std::vector<double> weights;
    if (shape.ranks > 1)
        for (Level l : {Level::intra_node, Level::inter_node})
            if (shape.uses(l)) {
                const double w =
                    std::min(1.0, (l == Level::intra_node ? t.intra_node : t.inter_node) / bottleneck);
                for (int r : comm.members()) {
                    ports.push_back(tx(r, l));
                    ports.push_back(rx(r, l));
                    weights.push_back(w);
                    weights.push_back(w);
                }
            }
    if (std::all_of(weights.begin(), weights.end(), [](double w) { return w == 1; })) weights.clear();
    groups_.push_back(Group(*this, comm, shape, std::move(ports), std::move(weights)));
    return groups_.back();
}

void World::arm(TransferRecord* t, std::span<const int> ports, std::span<const double> weights,
                const CollectiveCost& cost, std::span<const Arrival> arrivals) {
    // The latency (alpha) is a delay that uses no bandwidth; the rest is work
    // shared on the ports (network.hpp).
    const double latency = std::clamp(cost.latency, 0.0, cost.seconds);
    network_.arm(t, ports, weights, latency, cost.seconds - latency, arrivals);
    drain();
}

bool World::drain() {
    auto& patched = network_.patched();
    if (!patched.empty()) {
        if (recording_)
            for (const Network::Patch& p : patched) {
                Event& e = devices_[static_cast<std::size_t>(p.rank)]->engine().event_at(p.event);
                e.start = p.start;
                e.duration = p.end - p.start;
            }
        patched.clear();
    }
    auto& woken = network_.woken();
    const bool any = !woken.empty();
    for (int r : woken) sim_.wake(sim_.gpu(r));
    woken.clear();
    return any;
}

bool World::advance() {
    // One instant at a time: ranks woken at it may start transfers there.
    while (network_.step())
        if (drain()) return true;
    describe_stuck();
    return false;
}

Wait World::wait_end(Device& gpu, const TransferRecord* t, OpCode op) {
    network_.wait_for(t, gpu.rank());
    auto& text = wait_text_[static_cast<std::size_t>(gpu.rank())];
    if (!text) {
        text = std::make_unique<char[]>(kWaitText);
        fmt::format_to_n(text.get(), kWaitText - 1, "the end of a transfer{}", '\0');
    }
    // (The layer is in the text describe_stuck() writes, not in the Wait.)
    return Wait::other(op, kNoLayer, text.get());
}

namespace {
std::string describe_round(const Group& g, std::uint64_t call, OpCode op, int layer,
                           const std::vector<std::uint64_t>& calls) {
    IdSet missing;
    for (std::size_t p = 0; p < g.members().size(); ++p)
        if (calls[p] <= call) missing.insert(g.members()[p]);
    std::string s = fmt::format("{}", op.name());
    if (layer != kNoLayer) s += fmt::format(" layer {}", layer);
    return s + fmt::format(" (collective #{} on {}), which rank(s) {} never called", call, g.name(),
                           missing.str());
}
}  // namespace

void World::describe_stuck() {
    // The hook has nothing left to do: ranks still parked on a transfer wait
    // for one that some member never called.
    for (Group& g : groups_)
        for (std::size_t i = 0; i < g.rounds_.size(); ++i) {
            const Group::Round& round = g.rounds_[i];
            if (!round.transfer || static_cast<int>(round.arrivals.size()) == g.simulated()) continue;
            const std::string what =
                "the end of " + describe_round(g, g.base_ + i, round.op, round.layer, g.calls_);
            for (int r : network_.waiters(round.transfer)) {
                char* text = wait_text_[static_cast<std::size_t>(r)].get();
                if (!text) continue;
                const auto n = fmt::format_to_n(text, kWaitText - 1, "{}", what).size;
                text[std::min(n, kWaitText - 1)] = '\0';
            }
        }
}

void World::check_open_rounds() const {
    std::string msg;
    for (const Group& g : groups_)
        for (std::size_t i = 0; i < g.rounds_.size(); ++i) {
            const Group::Round& round = g.rounds_[i];
            if (!round.transfer || static_cast<int>(round.arrivals.size()) == g.simulated()) continue;
            msg += "\n  " + describe_round(g, g.base_ + i, round.op, round.layer, g.calls_);
        }
    if (!msg.empty()) throw DeadlockError("deadlock: the run ended with collectives that not every member called:" + msg);
}

void World::set_stragglers(Stragglers s) {
    // Slowdowns are by the cluster's GPU (a rank's placement).
    const int gpus = placement_.empty() ? ranks() : cluster_.gpus();
    for (const auto& [rank, factor] : s.slowdown) {
        if (rank < 0 || rank >= gpus)
            throw std::invalid_argument(fmt::format("stragglers: rank {} is not in [0, {})", rank, gpus));
        if (!(factor > 0))
            throw std::invalid_argument(fmt::format("stragglers: rank {}: slowdown {} is not positive", rank, factor));
    }
    stragglers_ = std::move(s);
    for (auto& d : devices_) d->slowdown_ = stragglers_.slowdown_of(placement(d->rank()));
}

CriticalPath World::critical_path() const {
    CriticalPath path;
    path.on_rank.assign(static_cast<std::size_t>(ranks()), 0.0);
    if (ranks() == 0) return path;
    // Where the step ends: a compute stream, or else a communication stream
    // (the path then starts in the last transfer on it).
    int r = -1;
    double t = step_time_;
    for (const auto& d : devices_)
        if (d->now() == step_time_) {
            r = d->rank();
            break;
        }
    if (r < 0)
        for (const auto& d : devices_) {
            auto ends_step = [&](const TransferRecord* x) { return x && x->ended && x->end == step_time_; };
            const TransferRecord* last = ends_step(d->last_comm_)      ? d->last_comm_.get()
                                         : ends_step(d->last_tp_comm_) ? d->last_tp_comm_.get()
                                         : ends_step(d->last_p2p_)     ? d->last_p2p_.get()
                                                                       : nullptr;
            if (last && last->gate >= 0) {
                path.transfers += step_time_ - last->gate_time;
                r = last->gate;
                t = last->gate_time;
                break;
            }
        }
    if (r < 0) r = 0;
    // Each jump is taken at most once (`left`): the walk ends even where
    // transfers of no duration chain at one instant.
    std::vector<std::size_t> left(devices_.size());
    for (std::size_t i = 0; i < devices_.size(); ++i) left[i] = devices_[i]->jumps_.size();
    for (;;) {
        const auto& jumps = devices_[static_cast<std::size_t>(r)]->jumps_;
        std::size_t& n = left[static_cast<std::size_t>(r)];
        const auto it = std::upper_bound(jumps.begin(), jumps.begin() + static_cast<std::ptrdiff_t>(n), t,
                                         [](double x, const Device::PathJump& j) { return x < j.resume; });
        if (it == jumps.begin()) {
            path.on_rank[static_cast<std::size_t>(r)] += t;
            break;
        }
        const Device::PathJump& j = *(it - 1);
        n = static_cast<std::size_t>(it - 1 - jumps.begin());
        path.on_rank[static_cast<std::size_t>(r)] += t - j.resume;
        path.transfers += j.resume - j.gate_time;
        ++path.jumps;
        r = j.gate;
        t = j.gate_time;
    }
    for (int i = 1; i < ranks(); ++i)
        if (path.on_rank[static_cast<std::size_t>(i)] > path.on_rank[static_cast<std::size_t>(path.rank)]) path.rank = i;
    return path;
}

void World::set_recording(bool on) {
    if (started_) throw std::logic_error("World::set_recording: call it before run()");
    recording_ = on;
}

void World::run(const std::function<Task<>(Device&)>& body) {
    started_ = true;
    sim_.set_idle_hook([this] { return advance(); });
    sim_.run([&](Gpu& g) { return body(*devices_[static_cast<std::size_t>(g.rank())]); });
    check_open_rounds();
    step_time_ = 0;
    for (const auto& d : devices_) {
        step_time_ = std::max(step_time_, d->now());
        for (const TransferRecord* t : {d->last_comm_.get(), d->last_tp_comm_.get(), d->last_p2p_.get()})
            if (t) step_time_ = std::max(step_time_, t->end);  // every transfer has ended
    }
    for (auto& d : devices_) d->split_.idle += step_time_ - d->now();  // the tail
}

Trace World::take_trace(nlohmann::json meta) {
    Trace t;
    t.time_unit = std::string("s");  // (operator=(const char*) trips g++ 12 -Wrestrict)
    t.memory_unit = std::string("byte");
    t.meta = std::move(meta);
    t.memory_capacity = cluster_.gpu.memory_bytes;
    t.ranks = sim_.take_logs();
    for (std::size_t k = 0; k < kMemoryKinds; ++k) t.memory_kinds.emplace_back(kind_name(static_cast<MemoryKind>(k)));
    for (std::size_t i = 0; i < t.ranks.size() && i < devices_.size(); ++i)
        t.ranks[i].memory_by_kind = std::move(devices_[i]->memory_log_);
    summarize(t);
    return t;
}

}  // namespace dtsim::hw
