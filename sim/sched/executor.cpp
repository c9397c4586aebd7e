#include "dtsim/sched/executor.hpp"

#include "dtsim/simulation.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <unordered_map>

namespace dtsim::sched {
namespace {

// What crosses a stage boundary: stage s's input activation (from s-1) or its
// output gradient (from s+1).
enum class Tensor : std::uint8_t { activation, gradient };

std::uint64_t tensor_key(Tensor t, int stage, int mb) {
    return (static_cast<std::uint64_t>(t) << 50) | (static_cast<std::uint64_t>(stage) << 25) |
           static_cast<std::uint64_t>(mb);
}

std::uint64_t action_key(const Action& a) {
    return (static_cast<std::uint64_t>(a.type) << 50) | (static_cast<std::uint64_t>(a.stage) << 25) |
           static_cast<std::uint64_t>(a.microbatch + 1);
}

struct Delivery {
    double sent = 0;     // when the transfer started
    double arrival = 0;  // sent + p2p
};

struct RankState {
    std::unordered_map<std::uint64_t, Delivery> inbox;  // arrived, not yet consumed
    bool waiting = false;
    Tensor want = Tensor::activation;  // what it waits for, when waiting
    int want_stage = 0;
    int want_mb = 0;
    std::size_t pc = 0;  // index of the action being run
    int in_flight = 0;  // activations held (the memory: in_flight x Costs::activation)
};

void check_costs(const Costs& c) {
    const std::pair<const char*, double> all[] = {{"forward", c.forward},
                                                  {"backward", c.backward},
                                                  {"backward_input", c.backward_input},
                                                  {"backward_weight", c.backward_weight},
                                                  {"p2p", c.p2p},
                                                  {"activation", c.activation}};
    for (const auto& [name, v] : all)
        if (!std::isfinite(v) || v < 0)
            throw std::invalid_argument(fmt::format("schedule costs: {} must be a finite number >= 0, got {}", name, v));
    if (!std::isfinite(c.forward_backward))
        throw std::invalid_argument(fmt::format(
            "schedule costs: forward_backward must be a finite number (negative: T_F + T_B), got {}", c.forward_backward));
}

class Executor {
public:
    Executor(const Schedule& s, const Costs& c)
        : s_(s), c_(c), owner_(stage_owners(s)), S_(s.num_stages()), lowered_(s.lowered()),
          comm_events_(lowered_ || c.p2p > 0), state_(static_cast<std::size_t>(s.num_ranks())) {
        for (int r = 0; r < s.num_ranks(); ++r) {
            const auto& list = s.ranks[static_cast<std::size_t>(r)];
            for (std::size_t i = 0; i < list.size(); ++i) where_[action_key(list[i])] = {r, i};
        }
    }

    RunResult run(nlohmann::json meta) {
        Simulation sim(s_.num_ranks());
        sim_ = &sim;
        // The trace of what ran: all of it, or up to a failure.
        auto assemble = [&](Trace& t) {
            t.time_unit = "step";
            t.memory_unit = "unit";
            t.meta = nlohmann::json::object();
            t.meta["name"] = s_.name.empty() ? std::string("pipeline schedule") : "pipeline schedule " + s_.name;
            t.meta["ranks"] = s_.num_ranks();
            t.meta["stages"] = S_;
            t.meta["microbatches"] = s_.num_microbatches();
            if (meta.is_object())
                for (auto& [k, v] : meta.items()) t.meta[k] = v;
            t.ranks = sim.take_logs();
            mark_overlaps(t);
            summarize(t);
        };
        try {
            sim.run([this](Gpu& g) { return body(g); });
        } catch (const DeadlockError& e) {
            DeadlockError explained(explain(e.what()));
            attach_partial_trace(explained, assemble);
            throw explained;
        } catch (ScheduleError& e) {
            attach_partial_trace(e, assemble);
            throw;
        }
        RunResult out;
        assemble(out.trace);
        // Ran to its end without a rule broken (a failed run's partial trace says false).
        out.trace.summary.correct = true;
        out.events = out.trace.event_count();
        return out;
    }

private:
    // The trace's meta "overlapped": [rank, event] of the F of each overlapped F&B pair (its B is the
    // rank's next compute event), for the pictures. Each compute action is one event on the compute
    // stream, in the order of the rank's actions: the two are read side by side.
    void mark_overlaps(Trace& t) const {
        nlohmann::json pairs = nlohmann::json::array();
        for (std::size_t r = 0; r < t.ranks.size() && r < s_.ranks.size(); ++r) {
            const auto& events = t.ranks[r].events;
            std::size_t e = 0;
            for (const Action& a : s_.ranks[r]) {
                if (a.type != ActionType::forward && a.type != ActionType::full_backward &&
                    a.type != ActionType::backward_input && a.type != ActionType::backward_weight)
                    continue;
                while (e < events.size() && events[e].stream != Stream::compute) ++e;
                if (e >= events.size()) break;
                if (a.overlap_next) pairs.push_back({t.ranks[r].rank, e});
                ++e;
            }
        }
        if (!pairs.empty()) t.meta["overlapped"] = std::move(pairs);
    }

    [[nodiscard]] int owner(int stage) const { return owner_[static_cast<std::size_t>(stage)]; }
    RankState& state(int r) { return state_[static_cast<std::size_t>(r)]; }

    Task<> body(Gpu& gpu) {
        const int r = gpu.rank();
        RankState& st = state(r);
        const auto& list = s_.ranks[static_cast<std::size_t>(r)];
        for (st.pc = 0; st.pc < list.size(); ++st.pc) {
            const Action a = list[st.pc];
            if (a.overlap_next && st.pc + 1 < list.size()) {
                co_await overlapped(gpu, a, list[st.pc + 1]);
                continue;
            }
            switch (a.type) {
                case ActionType::forward: {
                    if (a.stage > 0 && owner(a.stage - 1) != r) {
                        const Delivery d = co_await take(gpu, Tensor::activation, a.stage, a.microbatch);
                        received(gpu, a.stage, a.microbatch, d);
                    }
                    compute(gpu, ops::forward, a, c_.forward);
                    ++st.in_flight;
                    if (!lowered_ && a.stage + 1 < S_ && owner(a.stage + 1) != r)
                        post(gpu, Tensor::activation, a.stage + 1, a.microbatch);
                    break;
                }
                case ActionType::full_backward:
                case ActionType::backward_input: {
                    if (a.stage + 1 < S_ && owner(a.stage + 1) != r) {
                        const Delivery d = co_await take(gpu, Tensor::gradient, a.stage, a.microbatch);
                        received(gpu, a.stage, a.microbatch, d);
                    }
                    const bool full = a.type == ActionType::full_backward;
                    compute(gpu, full ? ops::backward : backward_input_, a, full ? c_.backward : c_.backward_input);
                    if (full) --st.in_flight;
                    if (!lowered_ && a.stage > 0 && owner(a.stage - 1) != r)
                        post(gpu, Tensor::gradient, a.stage - 1, a.microbatch);
                    break;
                }
                case ActionType::backward_weight:
                    compute(gpu, backward_weight_, a, c_.backward_weight);
                    --st.in_flight;
                    break;
                case ActionType::send_f:
                    post(gpu, Tensor::activation, a.stage + 1, a.microbatch);
                    break;
                case ActionType::send_b:
                    post(gpu, Tensor::gradient, a.stage - 1, a.microbatch);
                    break;
                default:  // RECV_F/RECV_B post a receive, the consumer waits; FSDP actions cost nothing
                    break;
            }
        }
    }

    // An OVERLAP_F_B pair f (at pc) and b (at pc+1): both inputs, T_{F&B}, both outputs.
    Task<> overlapped(Gpu& gpu, const Action& f, const Action& b) {
        const int r = gpu.rank();
        RankState& st = state(r);
        std::optional<Delivery> df, db;
        if (f.stage > 0 && owner(f.stage - 1) != r) df = co_await take(gpu, Tensor::activation, f.stage, f.microbatch);
        ++st.pc;  // now at b: a wait for its gradient is reported there
        if (b.stage + 1 < S_ && owner(b.stage + 1) != r)
            db = co_await take(gpu, Tensor::gradient, b.stage, b.microbatch);
        if (df) received(gpu, f.stage, f.microbatch, *df);
        if (db) received(gpu, b.stage, b.microbatch, *db);
        const double total = overlapped_cost(c_);
        const double sum = c_.forward + c_.backward;
        const double tf = sum > 0 ? total * c_.forward / sum : total / 2;
        compute(gpu, ops::forward, f, tf);
        ++st.in_flight;
        compute(gpu, ops::backward, b, total - tf);
        --st.in_flight;
        if (!lowered_ && f.stage + 1 < S_ && owner(f.stage + 1) != r) post(gpu, Tensor::activation, f.stage + 1, f.microbatch);
        if (!lowered_ && b.stage > 0 && owner(b.stage - 1) != r) post(gpu, Tensor::gradient, b.stage - 1, b.microbatch);
    }

    // Waits until stage `stage`'s tensor for microbatch `mb` has been sent to this rank.
    Task<Delivery> take(Gpu& gpu, Tensor t, int stage, int mb) {
        RankState& st = state(gpu.rank());
        const std::uint64_t key = tensor_key(t, stage, mb);
        auto it = st.inbox.find(key);
        if (it == st.inbox.end()) {
            st.waiting = true;
            st.want = t;
            st.want_stage = stage;
            st.want_mb = mb;
            const Wait wait = Wait::receive(recv_, stage, owner(t == Tensor::activation ? stage - 1 : stage + 1));
            co_await sim_->park(gpu, wait);
            it = st.inbox.find(key);
            if (it == st.inbox.end()) throw std::logic_error("schedule executor: woken without the awaited tensor");
        }
        const Delivery d = it->second;
        st.inbox.erase(it);
        co_return d;
    }

    void received(Gpu& gpu, int stage, int mb, const Delivery& d) {
        gpu.set_clock(std::max(gpu.clock(), d.arrival));
        if (comm_events_)
            gpu.record_at(recv_, stage, Stream::comm, d.sent, d.arrival - d.sent, memory(gpu.rank()),
                          IdSet::single(mb));
    }

    // Sends the tensor that stage `to_stage` consumes for `mb` (never blocks).
    void post(Gpu& gpu, Tensor t, int to_stage, int mb) {
        const int from_stage = t == Tensor::activation ? to_stage - 1 : to_stage + 1;
        const Delivery d{gpu.clock(), gpu.clock() + c_.p2p};
        if (comm_events_)
            gpu.record_at(send_, from_stage, Stream::comm, d.sent, c_.p2p, memory(gpu.rank()), IdSet::single(mb));
        const int dst = owner(to_stage);
        RankState& in = state(dst);
        in.inbox[tensor_key(t, to_stage, mb)] = d;
        if (in.waiting && in.want == t && in.want_stage == to_stage && in.want_mb == mb) {
            in.waiting = false;
            sim_->wake(sim_->gpu(dst));
        }
    }

    void compute(Gpu& gpu, OpCode op, const Action& a, double duration) {
        gpu.record(op, a.stage, duration, memory(gpu.rank()), IdSet::single(a.microbatch));
    }

    double memory(int r) { return state(r).in_flight * c_.activation; }

    // "0B0 (its action 2 of 4, at f.txt:1:13)"
    std::string describe(int r, std::size_t i) const {
        const auto& list = s_.ranks[static_cast<std::size_t>(r)];
        const std::string w = s_.where(r, i);
        return fmt::format("{} (its action {} of {}{})", to_string(list[i]), i + 1, list.size(),
                           w.empty() ? "" : ", at " + w);
    }

    // The action that sends the tensor a blocked rank waits for.
    Action producer(const RankState& st) const {
        const int mb = st.want_mb;
        if (st.want == Tensor::activation) {
            if (lowered_) return {st.want_stage - 1, ActionType::send_f, mb};
            return {st.want_stage - 1, ActionType::forward, mb};
        }
        if (lowered_) return {st.want_stage + 1, ActionType::send_b, mb};
        const Action full{st.want_stage + 1, ActionType::full_backward, mb};
        if (where_.count(action_key(full))) return full;
        return {st.want_stage + 1, ActionType::backward_input, mb};
    }

    std::string explain(const std::string& engine_report) {
        const int R = s_.num_ranks();
        std::vector<int> waits_on(static_cast<std::size_t>(R), -1);
        std::string lines;
        int blocked = 0, shown = 0;
        for (int r = 0; r < R; ++r) {
            if (sim_->gpu(r).finished()) continue;
            ++blocked;
            const RankState& st = state(r);
            std::string what;
            if (!st.waiting) {
                what = "it is suspended outside the schedule executor";
            } else {
                const bool act = st.want == Tensor::activation;
                const Action prod = producer(st);
                what = fmt::format("it waits for the {} of stage {} microbatch {} ({} stage {})",
                                   act ? "activation" : "gradient", st.want_stage, st.want_mb,
                                   act ? "the output of" : "the input gradient of", prod.stage);
                auto it = where_.find(action_key(prod));
                if (it == where_.end()) {
                    what += fmt::format(", but no rank has {}", to_string(prod));
                } else {
                    const auto [pr, pi] = it->second;
                    waits_on[static_cast<std::size_t>(r)] = pr;
                    const RankState& ps = state(pr);
                    std::string status;
                    if (sim_->gpu(pr).finished())
                        status = fmt::format("rank {} finished", pr);
                    else if (pr == r)
                        status = "later on this rank";
                    else if (ps.pc == pi)
                        status = fmt::format("the action rank {} is blocked at", pr);
                    else
                        status = fmt::format("not reached: rank {} is blocked at {}", pr,
                                             to_string(s_.ranks[static_cast<std::size_t>(pr)][ps.pc]));
                    what += fmt::format(", which rank {} {} in {}, {}", pr, prod.type == ActionType::send_f ||
                                                                                    prod.type == ActionType::send_b
                                                                                ? "sends"
                                                                                : "produces",
                                        describe(pr, pi), status);
                }
            }
            if (shown++ < 64) lines += fmt::format("\n  rank {} is blocked at {}: {}", r, describe(r, st.pc), what);
        }
        if (shown > 64) lines += fmt::format("\n  ... and {} more blocked ranks", shown - 64);
        // A cycle of waits, from the first blocked rank that is on one.
        for (int start = 0; start < R; ++start) {
            std::vector<int> path;
            std::vector<bool> on(static_cast<std::size_t>(R), false);
            int r = start;
            while (r >= 0 && !on[static_cast<std::size_t>(r)]) {
                on[static_cast<std::size_t>(r)] = true;
                path.push_back(r);
                r = waits_on[static_cast<std::size_t>(r)];
            }
            if (r < 0) continue;
            auto first = std::find(path.begin(), path.end(), r);
            std::string cyc;
            for (auto p = first; p != path.end(); ++p) cyc += fmt::format("rank {} -> ", *p);
            lines += fmt::format("\n  wait cycle: {}rank {}", cyc, r);
            break;
        }
        std::string engine;
        std::size_t pos = 0;
        while (pos <= engine_report.size()) {
            const std::size_t nl = engine_report.find('\n', pos);
            const std::string l = engine_report.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
            engine += "\n    " + l;
            if (nl == std::string::npos) break;
            pos = nl + 1;
        }
        return fmt::format("deadlock: {} cannot progress: {} of {} ranks are blocked{}\n  the engine's report:{}",
                           s_.source.empty() ? (s_.name.empty() ? std::string("the schedule") : "schedule " + s_.name)
                                             : s_.source,
                           blocked, R, lines, engine);
    }

    const Schedule& s_;
    const Costs c_;
    const std::vector<int> owner_;
    const int S_;
    const bool lowered_;
    const bool comm_events_;
    std::vector<RankState> state_;
    std::unordered_map<std::uint64_t, std::pair<int, std::size_t>> where_;  // action -> (rank, index)
    Simulation* sim_ = nullptr;
    const OpCode backward_input_ = OpCode::of("backward_input");
    const OpCode backward_weight_ = OpCode::of("backward_weight");
    const OpCode send_ = OpCode::of("send");
    const OpCode recv_ = OpCode::of("recv");
};

}  // namespace

RunStats run_stats(const Trace& trace) {
    // The executor records each compute action as one event on the compute stream (an
    // overlapped F&B pair as its F then its B), with the rank's activations counted up after an
    // F and down after a full B or a W: replaying the events replays that count.
    const OpCode backward_input = OpCode::of("backward_input"), backward_weight = OpCode::of("backward_weight");
    RunStats st;
    st.makespan = trace.summary.makespan;
    double idle = 0;
    for (const RankTrace& rt : trace.ranks) {
        RankStats x;
        x.rank = rt.rank;
        int in_flight = 0;
        for (const Event& e : rt.events) {
            if (e.stream != Stream::compute) continue;
            const bool f = e.op == ops::forward, b = e.op == ops::backward;
            if (!f && !b && e.op != backward_input && e.op != backward_weight) continue;
            x.busy += e.duration;
            x.end = e.end();
            if (f) x.peak_in_flight = std::max(x.peak_in_flight, ++in_flight);
            if (b || e.op == backward_weight) --in_flight;
        }
        x.idle = st.makespan - x.busy;
        x.bubble_fraction = st.makespan > 0 ? x.idle / st.makespan : 0;
        idle += x.idle;
        st.ranks.push_back(x);
    }
    st.bubble_fraction = st.makespan > 0 ? idle / (st.makespan * static_cast<double>(trace.ranks.size())) : 0;
    return st;
}

RunResult run_schedule(const Schedule& schedule, const Costs& costs, nlohmann::json meta) {
    check_costs(costs);
    validate(schedule);
    Executor ex(schedule, costs);
    return ex.run(std::move(meta));
}

}  // namespace dtsim::sched
