#include "host/schedule.hpp"

#include "host/cli.hpp"
#include "host/puzzle_model.hpp"

#include "puzzles/all.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <stdexcept>

namespace dtsim::harness {

std::int64_t ModelDims::full_weight_elems() const {
    const std::int64_t n = hidden * hidden;
    const std::int64_t r = ranks < 1 ? 1 : ranks;
    return (n + r - 1) / r * r;
}

std::string_view op_name(Op op) {
    switch (op) {
        case Op::load_weights: return "load_weights";
        case Op::get_activation: return "get_activation";
        case Op::fake_grad: return "fake_grad";
        case Op::forward: return "forward";
        case Op::backward: return "backward";
        case Op::loss: return "loss";
        case Op::update: return "update";
        case Op::accumulate: return "accumulate";
        case Op::allreduce: return "allreduce";
        case Op::allgather: return "allgather";
        case Op::scatterreduce: return "scatterreduce";
        case Op::send: return "send";
        case Op::recv: return "recv";
        case Op::release: return "release";
        case Op::set_final: return "set_final";
    }
    return "?";
}

std::string_view event_op(Op op) {
    switch (op) {
        case Op::forward:
        case Op::backward:
        case Op::loss:
        case Op::update:
        case Op::allreduce:
        case Op::allgather:
        case Op::scatterreduce: return op_name(op);
        case Op::send:
        case Op::recv: return "pass";
        default: return {};
    }
}

bool is_collective(Op op) { return op == Op::allreduce || op == Op::allgather || op == Op::scatterreduce; }
bool is_communication(Op op) { return is_collective(op) || op == Op::send || op == Op::recv; }

std::string_view buffer_kind_name(BufferKind k) {
    switch (k) {
        case BufferKind::weight: return "weight";
        case BufferKind::opt_state: return "optimizer state";
        case BufferKind::activation: return "activation";
        case BufferKind::activation_grad: return "activation grad";
        case BufferKind::weight_grad: return "weight grad";
    }
    return "?";
}

std::optional<int> event_layer(const Instr& i) {
    if (i.op == Op::update || i.op == Op::send || i.op == Op::recv || i.layer < 0) return std::nullopt;
    return i.layer;
}

std::vector<int> event_batches(const Instr& i) {
    if (i.op == Op::forward || i.op == Op::backward) return i.batches;
    return {};
}

namespace {

// The strategies of puzzles/all.hpp, for the recording model.
const puzzle::PuzzleStrategy<Model>& strategy_of(std::string_view name) {
    for (const auto& p : puzzle::all_puzzles<Model>)
        if (p.name == name) return p;
    std::string names;
    for (const auto& p : puzzle::all_puzzles<Model>) names += fmt::format("{}{}", names.empty() ? "" : ", ", p.name);
    throw ArgError(fmt::format("unknown puzzle '{}'; the puzzles are: {}", name, names));
}

}  // namespace

void validate_dims(std::string_view puzzle, const ModelDims& d) {
    const auto& strategy = strategy_of(puzzle);
    const auto need = [&](bool ok, std::string_view what) {
        if (!ok)
            throw ArgError(fmt::format("{} with layers={} batches={} ranks={}: {}", puzzle, d.layers, d.batches,
                                       d.ranks, what));
    };
    // The tool's own arguments: a run on GPUs needs at least one of each, and the buffers'
    // sizes (--hidden, --tokens) that the puzzle world does not have.
    need(d.layers >= 1, "--layers must be at least 1");
    need(d.batches >= 1, "--batches must be at least 1");
    need(d.ranks >= 1, "--ranks must be at least 1");
    need(d.hidden >= 1 && d.tokens >= 1, "--hidden and --tokens must be at least 1");
    // The strategy's own: the sizes its port of the seed solution is written for
    // (puzzles/all.hpp), checked here before any GPU work.
    const std::string_view why = strategy.sizes(d.layers, d.batches, d.ranks);
    need(why.empty(), why);
}

std::vector<RankProgram> build_programs(std::string_view puzzle, const ModelDims& dims) {
    validate_dims(puzzle, dims);
    const auto strategy = strategy_of(puzzle).strategy;
    // The models outlive the simulation, whose coroutines hold values of theirs.
    std::deque<Model> models;
    Simulation sim(dims.ranks);
    for (int r = 0; r < dims.ranks; ++r) models.emplace_back(sim.gpu(r), dims);
    sim.run([&](Gpu& g) { return strategy(models[static_cast<std::size_t>(g.rank())]); });
    std::vector<RankProgram> out;
    out.reserve(models.size());
    for (Model& m : models) out.push_back(m.finish());
    check_programs(out, dims);
    return out;
}

namespace {

std::string describe(const RankProgram& p, std::size_t index) {
    if (index >= p.instrs.size()) return "finished";
    const Instr& i = p.instrs[index];
    if (i.op == Op::send) return fmt::format("send to rank {}", i.peer);
    if (i.op == Op::recv) return fmt::format("receive from rank {}", i.peer);
    return fmt::format("{} layer {}", op_name(i.op), i.layer);
}

std::int64_t collective_elems(const RankProgram& p, const Instr& i) {
    const int id = i.op == Op::allgather ? i.outs.at(0) : i.ins.at(0);
    return p.buffers.at(static_cast<std::size_t>(id)).elems;
}

}  // namespace

void check_programs(const std::vector<RankProgram>& programs, const ModelDims& dims) {
    const std::size_t n = programs.size();
    if (n != static_cast<std::size_t>(dims.ranks))
        throw ScheduleError(fmt::format("{} rank programs for {} ranks", n, dims.ranks));

    // 1. Collectives pair up by call order.
    std::vector<std::vector<const Instr*>> colls(n);
    for (std::size_t r = 0; r < n; ++r)
        for (const auto& i : programs[r].instrs)
            if (is_collective(i.op)) colls[r].push_back(&i);
    for (std::size_t r = 1; r < n; ++r) {
        if (colls[r].size() != colls[0].size())
            throw ScheduleError(fmt::format("rank 0 makes {} collective calls, rank {} makes {}", colls[0].size(), r,
                                            colls[r].size()));
        for (std::size_t k = 0; k < colls[0].size(); ++k) {
            const Instr& a = *colls[0][k];
            const Instr& b = *colls[r][k];
            if (a.op != b.op || a.layer != b.layer || collective_elems(programs[0], a) != collective_elems(programs[r], b))
                throw ScheduleError(fmt::format("collective #{}: rank 0 calls {} layer {} ({} elements), rank {} calls {} "
                                                "layer {} ({} elements)",
                                                k, op_name(a.op), a.layer, collective_elems(programs[0], a), r,
                                                op_name(b.op), b.layer, collective_elems(programs[r], b)));
        }
    }

    // 2. Sends from a to b pair up with b's receives from a.
    std::map<std::pair<int, int>, std::vector<Wire>> sent, received;
    for (std::size_t r = 0; r < n; ++r) {
        for (const auto& i : programs[r].instrs) {
            if (i.op == Op::send) sent[{static_cast<int>(r), i.peer}].push_back(*i.message);
            if (i.op == Op::recv) received[{i.peer, static_cast<int>(r)}].push_back(*i.message);
        }
    }
    for (const auto& [pair, msgs] : sent) {
        const auto& got = received[pair];
        if (got.size() != msgs.size())
            throw ScheduleError(fmt::format("rank {} sends {} messages to rank {}, which receives {} from it", pair.first,
                                            msgs.size(), pair.second, got.size()));
        for (std::size_t k = 0; k < msgs.size(); ++k)
            if (!(msgs[k] == got[k]))
                throw ScheduleError(fmt::format(
                    "message #{} from rank {} to rank {}: sent {} of layer {} batches {}, received as {} of layer {} "
                    "batches {}",
                    k, pair.first, pair.second, buffer_kind_name(msgs[k].kind), msgs[k].layer, msgs[k].batches.str(),
                    buffer_kind_name(got[k].kind), got[k].layer, got[k].batches.str()));
    }
    for (const auto& [pair, msgs] : received)
        if (!msgs.empty() && sent[pair].empty())
            throw ScheduleError(fmt::format("rank {} waits for {} messages from rank {}, which sends none", pair.second,
                                            msgs.size(), pair.first));

    // 3. No deadlock even when every send waits for its receive.
    std::vector<std::size_t> pos(n, 0);
    const auto at = [&](std::size_t r) -> const Instr* {
        return pos[r] < programs[r].instrs.size() ? &programs[r].instrs[pos[r]] : nullptr;
    };
    for (bool progress = true; progress;) {
        progress = false;
        for (std::size_t r = 0; r < n; ++r)
            while (at(r) != nullptr && !is_communication(at(r)->op)) {
                ++pos[r];
                progress = true;
            }
        for (std::size_t r = 0; r < n; ++r) {
            const Instr* s = at(r);
            if (s == nullptr || s->op != Op::send) continue;
            const auto dst = static_cast<std::size_t>(s->peer);
            const Instr* t = at(dst);
            if (t != nullptr && t->op == Op::recv && t->peer == static_cast<int>(r)) {
                ++pos[r];
                ++pos[dst];
                progress = true;
            }
        }
        bool all_at_collective = true;
        for (std::size_t r = 0; r < n; ++r)
            if (at(r) == nullptr || !is_collective(at(r)->op)) all_at_collective = false;
        if (all_at_collective) {
            for (std::size_t r = 0; r < n; ++r) ++pos[r];
            progress = true;
        }
    }
    bool finished = true;
    for (std::size_t r = 0; r < n; ++r) finished = finished && at(r) == nullptr;
    if (!finished) {
        std::string all;
        for (std::size_t r = 0; r < n; ++r)
            all += fmt::format("{}rank {}: {}", r ? "; " : "", r, describe(programs[r], pos[r]));
        throw ScheduleError(fmt::format("the schedule deadlocks when sends wait for their receives ({})", all));
    }

    // 4. The puzzle's check: every layer's final weights have step 1 and cover every shard.
    std::map<int, std::set<int>> covered;  // layer -> shards (complete = marked by -1)
    std::map<int, int> shard_total;
    for (std::size_t r = 0; r < n; ++r) {
        for (const auto& i : programs[r].instrs) {
            if (i.op != Op::set_final) continue;
            if (i.step != 1)
                throw ScheduleError(fmt::format("rank {}: the final weight of layer {} has step {}, not 1", r, i.layer,
                                                i.step));
            if (i.shards == 1) {
                covered[i.layer].insert(-1);
            } else {
                covered[i.layer].insert(i.shard);
                shard_total[i.layer] = i.shards;
            }
        }
    }
    for (int l = 0; l < dims.layers; ++l) {
        const auto it = covered.find(l);
        if (it == covered.end()) throw ScheduleError(fmt::format("no rank sets a final weight for layer {}", l));
        if (it->second.count(-1) != 0) continue;
        const int total = shard_total[l];
        for (int s = 0; s < total; ++s)
            if (it->second.count(s) == 0)
                throw ScheduleError(fmt::format("the final weights of layer {} miss shard {} of {}", l, s, total));
    }
}

Trace measured_trace(const std::vector<RankProgram>& programs, const ModelDims& d,
                     const std::vector<std::vector<EventTiming>>& timings, nlohmann::json meta,
                     std::optional<bool> correct) {
    if (timings.size() != programs.size())
        throw std::invalid_argument(
            fmt::format("measured_trace: timings of {} ranks for {} programs", timings.size(), programs.size()));
    Trace t;
    t.time_unit = "s";
    t.memory_unit = "byte";
    t.meta = std::move(meta);
    const double hh = static_cast<double>(d.hidden) * static_cast<double>(d.hidden);
    for (std::size_t r = 0; r < programs.size(); ++r) {
        const RankProgram& p = programs[r];
        const auto bytes_of = [&](int id) {
            return static_cast<double>(p.buffers.at(static_cast<std::size_t>(id)).elems) * sizeof(float);
        };
        RankTrace rt;
        rt.rank = static_cast<int>(r);
        std::size_t k = 0;
        for (const Instr& in : p.instrs) {
            if (event_op(in.op).empty()) continue;
            if (k >= timings[r].size())
                throw std::invalid_argument(fmt::format("measured_trace: rank {} has {} timings for more events", r,
                                                        timings[r].size()));
            const EventTiming& time = timings[r][k++];
            Event e;
            e.op = OpCode::of(event_op(in.op));  // the puzzle's names, as the puzzle world's trace has them
            e.stream = is_communication(in.op) ? Stream::comm : Stream::compute;
            e.layer = event_layer(in).value_or(kNoLayer);
            e.start = time.start;
            e.duration = time.duration;
            e.memory = time.memory;
            const std::vector<int> batches = event_batches(in);
            e.batches = IdSet::of(batches.begin(), batches.end());
            const double rows = static_cast<double>(in.batches.size()) * static_cast<double>(d.tokens);
            switch (in.op) {
                case Op::forward: e.flops = 2.0 * rows * hh; break;
                case Op::backward: e.flops = 6.0 * rows * hh; break;  // the recomputed x W, dx and dW
                case Op::allreduce:
                case Op::scatterreduce:
                case Op::send: e.bytes = bytes_of(in.ins.at(0)); break;
                case Op::allgather:
                case Op::recv: e.bytes = bytes_of(in.outs.at(0)); break;
                default: break;
            }
            rt.events.push_back(std::move(e));
        }
        if (k != timings[r].size())
            throw std::invalid_argument(
                fmt::format("measured_trace: rank {} has {} timings for {} events", r, timings[r].size(), k));
        t.ranks.push_back(std::move(rt));
    }
    summarize(t);
    t.summary.correct = correct;
    return t;
}

}  // namespace dtsim::harness
