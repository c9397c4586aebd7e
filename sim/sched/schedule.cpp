#include "dtsim/sched/schedule.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <unordered_map>

namespace dtsim::sched {

int Schedule::num_stages() const {
    int n = 0;
    for (const auto& rank : ranks)
        for (const auto& a : rank) n = std::max(n, a.stage + 1);
    return n;
}

int Schedule::num_microbatches() const {
    int n = 0;
    for (const auto& rank : ranks)
        for (const auto& a : rank)
            if (is_compute(a.type)) n = std::max(n, a.microbatch + 1);
    return n;
}

bool Schedule::lowered() const {
    for (const auto& rank : ranks)
        for (const auto& a : rank)
            if (is_comm(a.type)) return true;
    return false;
}

std::string Schedule::where(int rank, std::size_t index) const {
    if (rank < 0 || static_cast<std::size_t>(rank) >= locations.size()) return {};
    const auto& locs = locations[static_cast<std::size_t>(rank)];
    if (index >= locs.size() || locs[index].line == 0) return {};
    const Location& l = locs[index];
    const std::string& src = source.empty() ? std::string("<input>") : source;
    if (l.cell > 0) return fmt::format("{}:{}: cell {}", src, l.line, l.cell);
    return fmt::format("{}:{}:{}", src, l.line, l.column);
}

std::vector<int> stage_owners(const Schedule& schedule) {
    std::vector<int> owner(static_cast<std::size_t>(schedule.num_stages()), -1);
    std::vector<bool> shared(owner.size(), false);
    for (int r = 0; r < schedule.num_ranks(); ++r)
        for (const auto& a : schedule.ranks[static_cast<std::size_t>(r)]) {
            if (!is_compute(a.type)) continue;
            auto& o = owner[static_cast<std::size_t>(a.stage)];
            if (o == -1 && !shared[static_cast<std::size_t>(a.stage)])
                o = r;
            else if (o != r) {
                o = -1;
                shared[static_cast<std::size_t>(a.stage)] = true;
            }
        }
    return owner;
}

namespace {

std::uint64_t key_of(ActionType t, int stage, int mb) {
    return (static_cast<std::uint64_t>(t) << 50) | (static_cast<std::uint64_t>(stage) << 25) |
           static_cast<std::uint64_t>(mb + 1);
}

struct Seen {
    int rank = -1;
    std::size_t index = 0;  // first occurrence
    int count = 0;
    int rank2 = -1;  // second occurrence
    std::size_t index2 = 0;
};

class Checker {
public:
    Checker(const Schedule& s, std::size_t limit) : s_(s), limit_(limit) {}

    // The actions, stages and (stage, microbatch) pairs the checks have visited, each visit counted once.
    [[nodiscard]] std::size_t steps() const { return steps_; }

    std::vector<std::string> run() {
        if (s_.ranks.empty()) {
            add("the schedule has no ranks");
            return std::move(problems_);
        }
        S_ = s_.num_stages();
        M_ = s_.num_microbatches();
        if (S_ == 0) {
            add("the schedule has no actions");
            return std::move(problems_);
        }
        if (too_sparse()) return std::move(problems_);
        index_actions();
        check_owners();
        check_placement();
        check_duplicates();
        check_pairs();
        check_overlaps();
        if (s_.lowered()) check_comms();
        if (more_ > 0) problems_.push_back(fmt::format("... and {} more", more_));
        return std::move(problems_);
    }

private:
    // The first `limit_` problems are kept, the others counted (a schedule may have a problem per
    // stage, and its stages may be 16 times its actions).
    void add(std::string p) {
        if (problems_.size() < limit_)
            problems_.push_back(std::move(p));
        else
            ++more_;
    }

    // Every (stage, microbatch) pair needs a forward and a backward, and the
    // checks below walk all S x M pairs. A schedule naming a stage or microbatch
    // index far beyond what its actions can cover (a typo such as 0F4000000) is
    // reported once, at the actions naming the largest indices, instead of pair
    // by pair (which took time and memory in S x M).
    bool too_sparse() {
        std::size_t actions = 0;
        int stage_rank = 0, mb_rank = -1;
        std::size_t stage_index = 0, mb_index = 0;
        for (int r = 0; r < s_.num_ranks(); ++r) {
            const auto& list = s_.ranks[static_cast<std::size_t>(r)];
            actions += list.size();
            for (std::size_t i = 0; i < list.size(); ++i) {
                ++steps_;
                if (list[i].stage == S_ - 1) stage_rank = r, stage_index = i;
                if (is_compute(list[i].type) && list[i].microbatch == M_ - 1) mb_rank = r, mb_index = i;
            }
        }
        const long long pairs = static_cast<long long>(S_) * std::max(M_, 1);
        if (pairs <= 16 * (static_cast<long long>(actions) + 1024)) return false;
        add(fmt::format("{} stages x {} microbatches = {} (stage, microbatch) pairs, each needing a forward and a "
                        "backward, but the schedule has {} actions: stage {} is named by {}{}",
                        S_, M_, pairs, actions, S_ - 1, at(stage_rank, stage_index),
                        mb_rank < 0 ? std::string()
                                    : fmt::format(", microbatch {} by {}", M_ - 1, at(mb_rank, mb_index))));
        return true;
    }

    // "rank 1's action 4 (1B0, at f.txt:2:17)"; actions are numbered from 1.
    std::string at(int rank, std::size_t index) const {
        const Action& a = s_.ranks[static_cast<std::size_t>(rank)][index];
        const std::string w = s_.where(rank, index);
        return fmt::format("rank {}'s action {} ({}{})", rank, index + 1, to_string(a), w.empty() ? "" : ", at " + w);
    }

    const Seen* find(ActionType t, int stage, int mb) const {
        auto it = seen_.find(key_of(t, stage, mb));
        return it == seen_.end() ? nullptr : &it->second;
    }
    int owner(int stage) const { return owner_[static_cast<std::size_t>(stage)]; }

    void index_actions() {
        for (int r = 0; r < s_.num_ranks(); ++r) {
            const auto& list = s_.ranks[static_cast<std::size_t>(r)];
            for (std::size_t i = 0; i < list.size(); ++i) {
                ++steps_;
                const Action& a = list[i];
                Seen& e = seen_[key_of(a.type, a.stage, a.microbatch)];
                if (e.count == 0) {
                    e.rank = r;
                    e.index = i;
                } else if (e.count == 1) {
                    e.rank2 = r;
                    e.index2 = i;
                }
                ++e.count;
            }
        }
    }

    void check_owners() {
        owner_ = stage_owners(s_);
        // The ranks of the compute actions of each stage without an owner, in one pass over the
        // actions (a pass per stage took time in stages x actions).
        std::map<int, std::set<int>> ranks_of;
        for (int r = 0; r < s_.num_ranks(); ++r)
            for (const auto& a : s_.ranks[static_cast<std::size_t>(r)]) {
                ++steps_;
                if (is_compute(a.type) && owner(a.stage) < 0) ranks_of[a.stage].insert(r);
            }
        for (int st = 0; st < S_; ++st) {
            ++steps_;
            if (owner(st) >= 0) continue;
            const auto it = ranks_of.find(st);
            const std::set<int> none;
            const std::set<int>& on = it == ranks_of.end() ? none : it->second;
            if (on.empty()) {
                add(fmt::format("stage {} has no compute actions (F, B, I, W); the stages must be 0..{}", st, S_ - 1));
            } else {
                std::string list;
                for (int r : on) list += fmt::format("{}{}", list.empty() ? "" : ", ", r);
                add(fmt::format("stage {} has compute actions on ranks {}; a stage runs on one rank", st, list));
            }
        }
    }

    // Every non-compute action names a stage of its own rank, and a boundary that exists.
    void check_placement() {
        for (int r = 0; r < s_.num_ranks(); ++r) {
            const auto& list = s_.ranks[static_cast<std::size_t>(r)];
            for (std::size_t i = 0; i < list.size(); ++i) {
                ++steps_;
                const Action& a = list[i];
                if (is_compute(a.type)) continue;
                const int o = owner(a.stage);
                if (o < 0) continue;  // reported by check_owners
                if (o != r) {
                    add(fmt::format("{}: stage {} runs on rank {}, not on rank {}", at(r, i), a.stage, o, r));
                    continue;
                }
                if (!is_comm(a.type)) continue;
                if (a.microbatch >= M_) {
                    add(fmt::format("{}: no stage has a microbatch {} (the microbatches are 0..{})", at(r, i),
                                    a.microbatch, M_ - 1));
                    continue;
                }
                const bool to_next = a.type == ActionType::send_f || a.type == ActionType::recv_b;
                const int peer = to_next ? a.stage + 1 : a.stage - 1;
                if (peer < 0 || peer >= S_) {
                    add(fmt::format("{}: stage {} is the {} stage; there is no stage {} to {}", at(r, i), a.stage,
                                    peer < 0 ? "first" : "last", peer,
                                    a.type == ActionType::send_f || a.type == ActionType::send_b ? "send to"
                                                                                                  : "receive from"));
                } else if (owner(peer) == r) {
                    add(fmt::format("{}: stages {} and {} both run on rank {}; a boundary inside a rank needs no "
                                    "SEND/RECV",
                                    at(r, i), a.stage, peer, r));
                }
            }
        }
    }

    void check_duplicates() {
        for (int r = 0; r < s_.num_ranks(); ++r) {
            const auto& list = s_.ranks[static_cast<std::size_t>(r)];
            for (std::size_t i = 0; i < list.size(); ++i) {
                ++steps_;
                const Action& a = list[i];
                const Seen* e = find(a.type, a.stage, a.microbatch);
                if (e->count > 1 && e->rank == r && e->index == i)
                    add(fmt::format("{} appears {} times: {} and {}", to_string(a), e->count, at(e->rank, e->index),
                                    at(e->rank2, e->index2)));
            }
        }
    }

    // Exactly one F and one backward (B, or I and W) per (stage, microbatch), in order.
    void check_pairs() {
        for (int st = 0; st < S_; ++st) {
            ++steps_;
            const int o = owner(st);
            if (o < 0) continue;
            for (int mb = 0; mb < M_; ++mb) {
                ++steps_;
                const Seen* f = find(ActionType::forward, st, mb);
                const Seen* b = find(ActionType::full_backward, st, mb);
                const Seen* in = find(ActionType::backward_input, st, mb);
                const Seen* w = find(ActionType::backward_weight, st, mb);
                if (!f) add(fmt::format("stage {} microbatch {} has no forward: rank {} lacks {}F{}", st, mb, o, st, mb));
                if (!b && !in && !w)
                    add(fmt::format("stage {} microbatch {} has no backward: rank {} lacks {}B{} (or {}I{} and {}W{})",
                                    st, mb, o, st, mb, st, mb, st, mb));
                if (b && (in || w))
                    add(fmt::format("stage {} microbatch {} has both a full backward ({}) and a split one ({})", st, mb,
                                    at(b->rank, b->index), in ? at(in->rank, in->index) : at(w->rank, w->index)));
                if (in && !w && !b)
                    add(fmt::format("{} has no matching {}W{}: a split backward needs both I and W", at(in->rank, in->index),
                                    st, mb));
                if (w && !in && !b)
                    add(fmt::format("{} has no matching {}I{}: a split backward needs both I and W", at(w->rank, w->index),
                                    st, mb));
                const Seen* bwd = b ? b : in;
                if (f && bwd && f->index > bwd->index)
                    add(fmt::format("{} comes before its forward, {}", at(bwd->rank, bwd->index), at(f->rank, f->index)));
                if (in && w && in->index > w->index)
                    add(fmt::format("{} comes before its input-gradient pass, {}", at(w->rank, w->index),
                                    at(in->rank, in->index)));
                // Boundaries inside one rank: the producer must come first.
                if (st > 0 && f && owner(st - 1) == o) {
                    const Seen* prev = find(ActionType::forward, st - 1, mb);
                    if (prev && prev->index > f->index)
                        add(fmt::format("{} needs the output of {}, which comes later on the same rank", at(f->rank, f->index),
                                        at(prev->rank, prev->index)));
                }
                if (st + 1 < S_ && bwd && owner(st + 1) == o) {
                    const Seen* next = backward_of(st + 1, mb);
                    if (next && next->index > bwd->index)
                        add(fmt::format("{} needs the gradient from {}, which comes later on the same rank",
                                        at(bwd->rank, bwd->index), at(next->rank, next->index)));
                }
            }
        }
    }

    // OVERLAP_F_B: an F with overlap_next is followed on its rank by a full B
    // (ScheduleDualPipeV's (F;B) sub-actions) that does not need that F.
    void check_overlaps() {
        for (int r = 0; r < s_.num_ranks(); ++r) {
            const auto& list = s_.ranks[static_cast<std::size_t>(r)];
            for (std::size_t i = 0; i < list.size(); ++i) {
                ++steps_;
                const Action& a = list[i];
                if (!a.overlap_next) continue;
                if (a.type != ActionType::forward) {
                    add(fmt::format("{} is marked as overlapped with the next action; only a forward opens an "
                                    "OVERLAP_F_B pair (<F>;<B>)",
                                    at(r, i)));
                    continue;
                }
                if (i + 1 >= list.size() || list[i + 1].type != ActionType::full_backward || list[i + 1].overlap_next) {
                    add(fmt::format("{} opens an OVERLAP_F_B pair but {}; the pair is (<F>;<B>), a forward and a "
                                    "full backward",
                                    at(r, i),
                                    i + 1 >= list.size() ? std::string("it is the rank's last action")
                                                         : "the next action is " + to_string(list[i + 1])));
                    continue;
                }
                const Action& b = list[i + 1];
                if (b.stage == a.stage && b.microbatch == a.microbatch)
                    add(fmt::format("{}: an OVERLAP_F_B pair cannot hold the backward of its own forward", at(r, i + 1)));
            }
        }
    }

    // The action producing stage st's input gradient for mb: B or I.
    const Seen* backward_of(int st, int mb) const {
        if (const Seen* b = find(ActionType::full_backward, st, mb)) return b;
        return find(ActionType::backward_input, st, mb);
    }

    void need_one(ActionType t, int st, int mb, int rank, const Seen* anchor, bool before, const char* role) {
        const Seen* e = find(t, st, mb);
        const Action want{st, t, mb};
        if (!e) {
            add(fmt::format("the schedule is lowered (it has SEND/RECV actions) but rank {} lacks {}, {} {}", rank,
                            to_string(want), before ? "before" : "after",
                            anchor ? at(anchor->rank, anchor->index) : std::string(role)));
            return;
        }
        if (e->count > 1) return;  // reported as a duplicate
        if (anchor && before && e->index > anchor->index)
            add(fmt::format("{} must come before {}, which {}", at(e->rank, e->index), at(anchor->rank, anchor->index),
                            role));
        if (anchor && !before && e->index < anchor->index)
            add(fmt::format("{} must come after {}, which {}", at(e->rank, e->index), at(anchor->rank, anchor->index),
                            role));
    }

    void check_comms() {
        for (int st = 0; st < S_; ++st) {
            ++steps_;
            const int o = owner(st);
            if (o < 0) continue;
            for (int mb = 0; mb < M_; ++mb) {
                ++steps_;
                if (st > 0 && owner(st - 1) >= 0 && owner(st - 1) != o) {
                    need_one(ActionType::recv_f, st, mb, o, find(ActionType::forward, st, mb), true,
                             "consumes the activation");
                    need_one(ActionType::send_f, st - 1, mb, owner(st - 1), find(ActionType::forward, st - 1, mb), false,
                             "produces the activation");
                }
                if (st + 1 < S_ && owner(st + 1) >= 0 && owner(st + 1) != o) {
                    need_one(ActionType::recv_b, st, mb, o, backward_of(st, mb), true, "consumes the gradient");
                    need_one(ActionType::send_b, st + 1, mb, owner(st + 1), backward_of(st + 1, mb), false,
                             "produces the gradient");
                }
            }
        }
    }

    const Schedule& s_;
    std::size_t limit_;
    int S_ = 0, M_ = 0;
    std::vector<int> owner_;
    std::unordered_map<std::uint64_t, Seen> seen_;
    std::vector<std::string> problems_;
    std::size_t more_ = 0;  // problems past the limit, counted
    std::size_t steps_ = 0;
};

}  // namespace

std::vector<std::string> find_problems(const Schedule& schedule, std::size_t limit, std::size_t* steps) {
    Checker checker(schedule, limit);
    auto problems = checker.run();
    if (steps) *steps = checker.steps();
    return problems;
}

void validate(const Schedule& schedule) {
    auto problems = find_problems(schedule);
    if (problems.empty()) return;
    const std::string name = !schedule.source.empty() ? schedule.source
                             : !schedule.name.empty() ? "schedule " + schedule.name
                                                      : std::string("schedule");
    std::string msg = fmt::format("{}: invalid schedule, {} problem{}:", name, problems.size(),
                                  problems.size() == 1 ? "" : "s");
    for (const auto& p : problems) msg += "\n  " + p;
    throw InvalidScheduleError(msg, std::move(problems));
}

}  // namespace dtsim::sched
