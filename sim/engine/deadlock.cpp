// What a deadlocked run says: who waits for what, and each rank's last event.
#include "dtsim/simulation.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace dtsim {

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
