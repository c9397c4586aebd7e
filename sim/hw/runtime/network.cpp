#include "dtsim/hw/network.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace dtsim::hw {

Network::Network(int ports) : pool_(new detail::TransferPool), ports_(static_cast<std::size_t>(std::max(ports, 0))) {}

Network::~Network() {
    // The network's references on transfers that never ended (a deadlock).
    for (Live& l : live_)
        if (l.state != State::free && l.record) pool_->release(l.record);
    // Handles may outlive the network (coroutine frames destroyed later):
    // the records go with the last of them.
    if (pool_->held == 0)
        delete pool_;
    else
        pool_->orphaned = true;
}

TransferRecord* Network::create() {
    if (pool_->free.empty()) {
        // Records whose last handle went: reusable unless one was taken since
        // (its release queues it again).
        for (TransferRecord* d : pool_->dropped) {
            d->dropped = false;
            if (d->refs == 0) pool_->free.push_back(d);
        }
        pool_->dropped.clear();
    }
    TransferRecord* rp;
    if (pool_->free.empty()) {
        rp = &pool_->records.emplace_back();
        rp->pool = pool_;
    } else {
        rp = pool_->free.back();
        pool_->free.pop_back();
        *rp = TransferRecord{};
        rp->pool = pool_;
    }
    TransferRecord& r = *rp;
    // The network's own reference, until the end.
    r.refs = 1;
    ++pool_->held;
    std::uint32_t slot;
    if (free_.empty()) {
        slot = static_cast<std::uint32_t>(live_.size());
        live_.emplace_back();
        flow_mark_.push_back(0);
        new_rate_.push_back(0);
    } else {
        slot = free_.back();
        free_.pop_back();
    }
    Live& l = live_[slot];
    // Keep the vectors' capacity: slots are reused for the whole run.
    l.record = &r;
    l.state = State::open;
    ++l.version;
    l.ports_ext = nullptr;
    l.weights_ext = nullptr;
    l.weighted = false;
    l.nports = 0;
    l.latency = l.work = l.left = l.rate = l.updated = 0;
    l.unended = 0;
    l.ready = -std::numeric_limits<double>::infinity();
    l.ready_rank = std::numeric_limits<int>::max();
    l.gate = -1;
    l.gate_time = 0;
    l.dependents.clear();
    l.waiters.clear();
    l.patches.clear();
    r.live = static_cast<std::int32_t>(slot);
    return &r;
}

void Network::fold(Live& l, int rank, double clock, const TransferRecord* previous, double ready) {
    // The member ready last sets the start (the lowest rank on ties); the
    // critical path goes on from it, or through its stream's previous transfer
    // when that (not its compute stream) held it back.
    if (!(ready > l.ready || (ready == l.ready && rank < l.ready_rank))) return;
    l.ready = ready;
    l.ready_rank = rank;
    if (ready <= clock || !previous || previous->gate < 0) {
        l.gate = rank;
        l.gate_time = ready;
    } else {
        l.gate = previous->gate;
        l.gate_time = previous->gate_time;
    }
}

void Network::arm(TransferRecord* t, std::span<const int> ports, std::span<const double> weights, double latency,
                  double work, std::span<const Arrival> arrivals) {
    if (!t || t->live < 0 || live_[static_cast<std::size_t>(t->live)].state != State::open)
        throw std::logic_error("Network::arm: the transfer is not open");
    if (!weights.empty() && weights.size() != ports.size())
        throw std::logic_error("Network::arm: one weight per port");
    for (double w : weights)
        if (!(w > 0 && w <= 1)) throw std::logic_error(fmt::format("Network::arm: a port weight of {}", w));
    if (!std::isfinite(latency) || !std::isfinite(work))
        throw std::invalid_argument(fmt::format("a transfer cannot take latency {} s and work {} s", latency, work));
    const auto slot = static_cast<std::uint32_t>(t->live);
    Live& l = live_[slot];
    if (ports.size() <= l.ports_in.size()) {
        std::copy(ports.begin(), ports.end(), l.ports_in.begin());
        std::copy(weights.begin(), weights.end(), l.weights_in.begin());
        l.ports_ext = nullptr;
        l.weights_ext = nullptr;
    } else {
        l.ports_ext = ports.data();
        l.weights_ext = weights.empty() ? nullptr : weights.data();
    }
    l.weighted = !weights.empty() && std::any_of(weights.begin(), weights.end(), [](double w) { return w != 1; });
    l.nports = static_cast<std::uint32_t>(ports.size());
    l.latency = std::max(latency, 0.0);
    l.work = std::max(work, 0.0);
    l.state = State::waiting;
    for (const Arrival& a : arrivals) {
        if (!a.previous || a.previous->ended) {
            fold(l, a.rank, a.clock, a.previous, a.previous ? std::max(a.clock, a.previous->end) : a.clock);
            continue;
        }
        // Starts once that transfer ends (FIFO stream): the arrival waits
        // with it, and its end folds it in.
        live_[static_cast<std::size_t>(a.previous->live)].dependents.push_back(
            Live::Dependent{slot, a.rank, a.clock});
        ++l.unended;
    }
    if (l.unended == 0) resolve(slot);
}

void Network::resolve(std::uint32_t slot) {
    Live& l = live_[slot];
    TransferRecord& r = *l.record;
    r.start = l.ready;
    r.gate = l.gate;
    r.gate_time = l.gate_time;
    r.began = true;
    if (r.start < now_)
        throw std::logic_error(fmt::format("network: a transfer starts at {} before the frontier {} (a rank ran "
                                           "behind the network's clock)",
                                           r.start, now_));
    if (l.work <= 0 || l.nports == 0) {  // nothing to share, or no one to share with: its end is known now
        r.end = r.start + l.latency + l.work;
        finish(slot);
        return;
    }
    l.state = State::latent;
    push(r.start + l.latency, slot, Kind::enter);
}

void Network::push(double t, std::uint32_t slot, Kind k) {
    events_.push(Event{t, seq_++, slot, live_[slot].version, k});
}

void Network::finish(std::uint32_t slot) {
    Live& l = live_[slot];
    TransferRecord& r = *l.record;
    r.ended = true;
    r.live = -1;
    l.state = State::free;
    ++l.version;
    woken_.insert(woken_.end(), l.waiters.begin(), l.waiters.end());
    for (const auto& [rank, event] : l.patches) patched_.push_back(Patch{rank, event, r.start, r.end});
    // Fold in the arrivals that waited for this transfer (resolve() may
    // finish others and append to their lists, never to this one: it has ended).
    for (std::size_t i = 0; i < l.dependents.size(); ++i) {
        const Live::Dependent dep = l.dependents[i];
        Live& d = live_[dep.slot];
        fold(d, dep.rank, dep.clock, &r, std::max(dep.clock, r.end));
        if (--d.unended == 0) resolve(dep.slot);
    }
    free_.push_back(slot);
    l.record = nullptr;
    pool_->release(&r);  // the network's reference
}

void Network::wait_for(const TransferRecord* t, int rank) {
    if (!t || t->ended) throw std::logic_error("Network::wait_for: the transfer has ended");
    live_[static_cast<std::size_t>(t->live)].waiters.push_back(rank);
}

void Network::patch_on_end(const TransferRecord* t, int rank, std::uint32_t event) {
    if (!t || t->ended) throw std::logic_error("Network::patch_on_end: the transfer has ended");
    live_[static_cast<std::size_t>(t->live)].patches.emplace_back(rank, event);
}

std::span<const int> Network::waiters(const TransferRecord* t) const {
    if (!t || t->ended) return {};
    return live_[static_cast<std::size_t>(t->live)].waiters;
}

void Network::wait_until(int rank, double clock) { syncs_.push(Sync{clock, seq_++, rank}); }

double Network::earliest_end(const TransferRecord* t) const {
    if (t->ended) return t->end;
    const Live& l = live_[static_cast<std::size_t>(t->live)];
    switch (l.state) {
        case State::moving: return now_ + std::max(0.0, l.left - l.rate * (now_ - l.updated));  // rate <= 1
        case State::latent: return t->start + l.latency + l.work;
        default: return now_ + l.latency + l.work;  // it starts at now() or later
    }
}

double Network::rate(const TransferRecord* t) const {
    if (!t || t->ended) return 0;
    const Live& l = live_[static_cast<std::size_t>(t->live)];
    return l.state == State::moving ? l.rate : 0;
}

bool Network::valid(const Event& e) const {
    const Live& l = live_[e.slot];
    return l.version == e.version && l.state == (e.kind == Kind::enter ? State::latent : State::moving);
}

bool Network::step() {
    while (!events_.empty() && !valid(events_.top())) events_.pop();
    if (events_.empty() && syncs_.empty()) return false;
    double t = std::numeric_limits<double>::infinity();
    if (!events_.empty()) t = events_.top().t;
    if (!syncs_.empty()) t = std::min(t, syncs_.top().t);
    if (t < now_) throw std::logic_error(fmt::format("network: an event at {} before the frontier {}", t, now_));
    now_ = t;
    // Every event at this instant, in the order queued (ends and starts may queue more at it).
    while (!events_.empty()) {
        const Event e = events_.top();
        if (!valid(e)) {
            events_.pop();
            continue;
        }
        if (e.t != t) break;
        events_.pop();
        Live& l = live_[e.slot];
        const std::span<const int> ports = l.ports();
        if (e.kind == Kind::enter) {
            l.state = State::moving;
            l.left = l.work;
            l.rate = 0;
            l.updated = now_;
            for (int p : ports) ports_[static_cast<std::size_t>(p)].flows.push_back(e.slot);
        } else {
            for (int p : ports) ports_[static_cast<std::size_t>(p)].flows.erase(e.slot);
            l.record->end = now_;
            finish(e.slot);
        }
        touched_.insert(touched_.end(), ports.begin(), ports.end());
    }
    recompute();
    while (!syncs_.empty() && syncs_.top().t <= now_) {
        woken_.push_back(syncs_.top().rank);
        syncs_.pop();
    }
    return true;
}

void Network::recompute() {
    if (touched_.empty()) return;
    // The flows connected to a changed port through shared ports: only their
    // max-min rates can change.
    ++epoch_;
    comp_ports_.clear();
    comp_flows_.clear();
    // A port joins the search once, its filling scratch set as it joins; a flow adds its weights
    // to its ports as it is found (so each port sums them in the order the flows were found).
    const auto join = [this](int q) {
        Port& port = ports_[static_cast<std::size_t>(q)];
        if (port.mark == epoch_) return;
        port.mark = epoch_;
        port.cap = 1;
        port.weight = 0;
        port.unfixed = port.flows.size();
        comp_ports_.push_back(q);
    };
    for (int p : touched_) join(p);
    touched_.clear();
    for (std::size_t i = 0; i < comp_ports_.size(); ++i) {
        // (comp_ports_ grows as the search goes; index, not iterator)
        const int p = comp_ports_[i];
        for (std::uint32_t f : ports_[static_cast<std::size_t>(p)].flows) {
            if (flow_mark_[f] == epoch_) continue;
            flow_mark_[f] = epoch_;
            comp_flows_.push_back(f);
            new_rate_[f] = -1;
            const Live& l = live_[f];
            const std::span<const int> ps = l.ports();
            for (std::size_t k = 0; k < ps.size(); ++k) {
                join(ps[k]);
                ports_[static_cast<std::size_t>(ps[k])].weight += l.weight(k);
            }
        }
    }
    if (comp_flows_.empty()) return;

    // Weighted progressive filling: the unfixed rates rise together; port p
    // saturates at the level (what is left of it) / (weights of its unfixed
    // flows); the port that saturates first fixes its unfixed flows at that
    // level (ties: the lowest port). A level of 1 is every flow's full rate:
    // what is still unfixed there stops at 1.
    using Share = std::pair<double, int>;
    std::priority_queue<Share, std::vector<Share>, std::greater<>> heap;
    // Only the ports that saturate below a full rate go in: filling stops at the first share of 1
    // or more, and fixing flows at a share s < 1 never brings a port at 1 or more below 1
    // ((cap - w s) / (weight - w) > 1 when cap >= weight), so the others could never come out.
    // In a data-parallel world most ports carry one flow each (a share of 1 or more), and
    // pushing them all cost a heap insertion per port and instant.
    for (int p : comp_ports_) {
        const Port& port = ports_[static_cast<std::size_t>(p)];
        if (port.unfixed > 0 && port.cap / port.weight < 1) heap.emplace(port.cap / port.weight, p);
    }
    while (!heap.empty()) {
        const auto [share, p] = heap.top();
        if (share >= 1) break;
        heap.pop();
        Port& port = ports_[static_cast<std::size_t>(p)];
        if (port.unfixed == 0 || share != port.cap / port.weight) continue;  // stale
        if (!(share > 0)) throw std::logic_error("network: a flow got no bandwidth");
        for (std::uint32_t f : port.flows) {
            if (new_rate_[f] >= 0) continue;
            new_rate_[f] = share;
            const Live& l = live_[f];
            const std::span<const int> ps = l.ports();
            for (std::size_t i = 0; i < ps.size(); ++i) {
                const int q = ps[i];
                Port& other = ports_[static_cast<std::size_t>(q)];
                const double w = l.weight(i);
                other.cap -= w * share;
                --other.unfixed;
                other.weight = other.unfixed == 0 ? 0 : other.weight - w;
                if (q != p && other.unfixed > 0) heap.emplace(other.cap / other.weight, q);
            }
        }
    }
    for (std::uint32_t f : comp_flows_)
        if (new_rate_[f] < 0) new_rate_[f] = 1;
    for (std::uint32_t f : comp_flows_) {
        Live& l = live_[f];
        const double r = new_rate_[f];
        if (r == l.rate) continue;  // its predicted end stands
        l.left = std::max(0.0, l.left - l.rate * (now_ - l.updated));
        l.updated = now_;
        l.rate = r;
        ++l.version;
        push(now_ + l.left / r, f, Kind::end);
    }
}

}  // namespace dtsim::hw
