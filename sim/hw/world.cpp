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
    return collective_cost(world_->cluster(), c, bytes, shape_, world_->algorithm());
}

World::World(Cluster cluster, int ranks)
    : cluster_(std::move(cluster)), algorithm_(cluster_.algorithm), sim_(ranks) {
    if (ranks > cluster_.gpus())
        throw std::invalid_argument(fmt::format("cluster {} has {} GPUs ({} nodes x {}); {} ranks do not fit",
                                                cluster_.name, cluster_.gpus(), cluster_.nodes,
                                                cluster_.gpus_per_node, ranks));
    ports_.resize(static_cast<std::size_t>(ranks) * 2);
    devices_.reserve(static_cast<std::size_t>(ranks));
    for (int r = 0; r < ranks; ++r) devices_.push_back(std::make_unique<Device>(*this, sim_.gpu(r)));
    inbox_.resize(static_cast<std::size_t>(ranks));
    std::vector<int> all(static_cast<std::size_t>(ranks));
    for (int r = 0; r < ranks; ++r) all[static_cast<std::size_t>(r)] = r;
    everyone_ = &group(std::move(all), "world");
}

World::~World() = default;

Group& World::group(std::vector<int> members, std::string name) {
    Communicator& comm = sim_.communicator(std::move(members), std::move(name));
    const GroupShape shape = GroupShape::of(cluster_, comm.members());
    std::vector<LinkCalendar*> ports;
    if (shape.ranks > 1)
        for (Level l : {Level::intra_node, Level::inter_node})
            if (shape.uses(l))
                for (int r : comm.members()) ports.push_back(port(r, l));
    groups_.push_back(Group(*this, comm, shape, std::move(ports)));
    return groups_.back();
}

int World::acquire_slot(int readers) {
    int i;
    if (free_slots_.empty()) {
        i = static_cast<int>(slots_.size());
        slots_.emplace_back();
    } else {
        i = free_slots_.back();
        free_slots_.pop_back();
    }
    slots_[static_cast<std::size_t>(i)] = RoundSlot{false, readers, Transfer{}};
    return i;
}

void World::maybe_forget() {
    // Every future transfer is ready no earlier than the slowest compute
    // clock, so intervals ending before it can go.
    if (++schedules_ % 8192 != 0) return;
    double floor = std::numeric_limits<double>::infinity();
    for (const auto& d : devices_) floor = std::min(floor, d->now());
    for (auto& p : ports_) p.forget_before(floor);
}

Transfer World::schedule(Group& g, Collective c, double bytes, double ready, int gate, double gate_time,
                         bool async) {
    const double d = g.cost(c, bytes).seconds;
    Transfer t;
    t.start = ready;
    t.end = LinkCalendar::finish(g.ports_, ready, d);
    t.gate = gate;
    t.gate_time = gate_time;
    for (LinkCalendar* p : g.ports_) p->reserve(t.start, t.end);
    if (async)
        for (int r : g.members()) {
            Device& m = *devices_[static_cast<std::size_t>(r)];
            m.comm_free_ = t.end;
            m.last_comm_ = t;
        }
    maybe_forget();
    return t;
}

Transfer World::schedule_p2p(int src, int dst, double bytes, double ready) {
    const bool same_node = cluster_.node_of(src) == cluster_.node_of(dst);
    const double d = src == dst ? 0 : p2p_cost(cluster_, bytes, same_node).seconds;
    const Level l = same_node ? Level::intra_node : Level::inter_node;
    LinkCalendar* ports[2] = {port(src, l), port(dst, l)};
    Transfer t;
    t.start = ready;
    t.end = LinkCalendar::finish(ports, ready, d);
    for (LinkCalendar* p : ports) p->reserve(t.start, t.end);
    maybe_forget();
    return t;
}

void World::set_stragglers(Stragglers s) {
    for (const auto& [rank, factor] : s.slowdown) {
        if (rank < 0 || rank >= ranks())
            throw std::invalid_argument(fmt::format("stragglers: rank {} is not in [0, {})", rank, ranks()));
        if (!(factor > 0))
            throw std::invalid_argument(fmt::format("stragglers: rank {}: slowdown {} is not positive", rank, factor));
    }
    stragglers_ = std::move(s);
    for (auto& d : devices_) d->slowdown_ = stragglers_.slowdown_of(d->rank());
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
            const Transfer* last = d->comm_free_ == step_time_ ? &d->last_comm_
                                   : d->p2p_free_ == step_time_ ? &d->last_p2p_
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

void World::run(const std::function<Task<>(Device&)>& body) {
    sim_.run([&](Gpu& g) { return body(*devices_[static_cast<std::size_t>(g.rank())]); });
    step_time_ = 0;
    for (const auto& d : devices_)
        step_time_ = std::max({step_time_, d->now(), d->comm_free_, d->p2p_free_});
    for (auto& d : devices_) d->split_.idle += step_time_ - d->now();  // the tail
}

Trace World::take_trace(nlohmann::json meta) {
    Trace t;
    t.time_unit = std::string("s");  // (operator=(const char*) trips g++ 12 -Wrestrict)
    t.memory_unit = std::string("byte");
    t.meta = std::move(meta);
    t.memory_capacity = cluster_.gpu.memory_bytes;
    t.ranks = sim_.take_logs();
    summarize(t);
    return t;
}

}  // namespace dtsim::hw
