#include "dtsim/sched/lowering.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <unordered_set>

namespace dtsim::sched {
namespace {

std::uint64_t key_of(const Action& a) {
    return (static_cast<std::uint64_t>(a.type) << 50) | (static_cast<std::uint64_t>(a.stage) << 25) |
           static_cast<std::uint64_t>(a.microbatch + 1);
}

}  // namespace

Schedule lower(const Schedule& in) {
    validate(in);
    const std::string name = in.name.empty() ? std::string("schedule") : "schedule " + in.name;
    if (in.lowered())
        throw InvalidScheduleError(
            fmt::format("{}: cannot lower: it already has SEND/RECV actions", name),
            {"already lowered"});
    const std::vector<int> owner = stage_owners(in);
    const int S = in.num_stages();
    const auto own = [&](int stage) { return owner[static_cast<std::size_t>(stage)]; };
    const auto is_bwd = [](ActionType t) {
        return t == ActionType::full_backward || t == ActionType::backward_input;
    };
    const auto has_comms = [&](const Action& a) {
        if (a.type == ActionType::forward) return a.stage != S - 1 && own(a.stage + 1) != own(a.stage);
        if (is_bwd(a.type)) return a.stage != 0 && own(a.stage - 1) != own(a.stage);
        return false;
    };
    const int R = in.num_ranks();
    std::vector<std::unordered_set<std::uint64_t>> prev(static_cast<std::size_t>(R));
    const auto seen = [&](int r, Action a) { return prev[static_cast<std::size_t>(r)].count(key_of(a)) > 0; };
    const auto ready = [&](int r, const Action& a) {
        if (a.type == ActionType::forward && a.stage != 0)
            return seen(r, {a.stage, ActionType::recv_f, a.microbatch}) ||
                   seen(r, {a.stage - 1, ActionType::forward, a.microbatch});
        if (is_bwd(a.type) && a.stage != S - 1)
            return seen(r, {a.stage, ActionType::recv_b, a.microbatch}) ||
                   seen(r, {a.stage + 1, ActionType::backward_input, a.microbatch}) ||
                   seen(r, {a.stage + 1, ActionType::full_backward, a.microbatch});
        return true;
    };

    Schedule out;
    out.name = in.name;
    out.ranks.resize(static_cast<std::size_t>(R));
    std::vector<std::size_t> next(static_cast<std::size_t>(R), 0);
    const auto append = [&](int r, const Action& a) {
        out.ranks[static_cast<std::size_t>(r)].push_back(a);
        prev[static_cast<std::size_t>(r)].insert(key_of(a));
    };
    for (;;) {
        bool left = false, progress = false;
        for (int r = 0; r < R; ++r) {
            const auto& list = in.ranks[static_cast<std::size_t>(r)];
            std::size_t& i = next[static_cast<std::size_t>(r)];
            if (i >= list.size()) continue;
            left = true;
            // An OVERLAP_F_B pair is one slot: placed when both sub-actions are ready,
            // then the sends of each (PyTorch's _add_send_recv over sub_actions).
            const std::size_t n = list[i].overlap_next && i + 1 < list.size() ? 2 : 1;
            bool all_ready = true;
            for (std::size_t k = 0; k < n; ++k) all_ready = all_ready && ready(r, list[i + k]);
            if (!all_ready) continue;
            for (std::size_t k = 0; k < n; ++k) append(r, list[i + k]);
            for (std::size_t k = 0; k < n; ++k) {
                const Action& a = list[i + k];
                if (!has_comms(a)) continue;
                const bool fwd = a.type == ActionType::forward;
                append(r, Action{a.stage, fwd ? ActionType::send_f : ActionType::send_b, a.microbatch});
                const Action recv{fwd ? a.stage + 1 : a.stage - 1, fwd ? ActionType::recv_f : ActionType::recv_b,
                                  a.microbatch};
                append(own(recv.stage), recv);
            }
            i += n;
            progress = true;
        }
        if (!left) break;
        if (!progress) {
            std::vector<std::string> stuck;
            for (int r = 0; r < R; ++r) {
                const auto& list = in.ranks[static_cast<std::size_t>(r)];
                const std::size_t i = next[static_cast<std::size_t>(r)];
                if (i < list.size())
                    stuck.push_back(fmt::format("rank {} cannot place its action {} ({}): its input is not received yet",
                                                r, i + 1, to_string(list[i])));
            }
            std::string msg = fmt::format(
                "{}: cannot lower: a round places no action (PyTorch: \"Malformed compute schedule, can't schedule "
                "sends/recvs\"); the schedule cannot progress:",
                name);
            for (const auto& s : stuck) msg += "\n  " + s;
            throw InvalidScheduleError(msg, std::move(stuck));
        }
    }
    return out;
}

Schedule strip_comms(const Schedule& s) {
    Schedule out;
    out.name = s.name;
    out.source = s.source;
    out.ranks.resize(s.ranks.size());
    const bool locs = s.locations.size() == s.ranks.size();
    if (locs) out.locations.resize(s.ranks.size());
    for (std::size_t r = 0; r < s.ranks.size(); ++r)
        for (std::size_t i = 0; i < s.ranks[r].size(); ++i) {
            if (is_comm(s.ranks[r][i].type)) continue;
            out.ranks[r].push_back(s.ranks[r][i]);
            if (locs && i < s.locations[r].size()) out.locations[r].push_back(s.locations[r][i]);
        }
    return out;
}

}  // namespace dtsim::sched
