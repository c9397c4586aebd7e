#include "dtsim/trace.hpp"

#include <deque>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>

namespace dtsim {
namespace {

struct OpTable {
    std::mutex mu;
    std::deque<std::string> names;  // deque: string_views into it stay valid
    std::unordered_map<std::string_view, std::uint16_t> ids;
    OpTable() {
        for (const char* n : {"forward", "backward", "loss", "update", "allreduce", "allgather",
                              "scatterreduce", "pass"})
            add(n);
    }
    std::uint16_t add(std::string_view n) {
        names.emplace_back(n);
        auto id = static_cast<std::uint16_t>(names.size() - 1);
        ids.emplace(names.back(), id);
        return id;
    }
};

OpTable& table() {
    static OpTable t;
    return t;
}

}  // namespace

OpCode OpCode::of(std::string_view name) {
    auto& t = table();
    std::lock_guard lock(t.mu);
    if (auto it = t.ids.find(name); it != t.ids.end()) return OpCode(it->second);
    if (t.names.size() >= 0xFFFF) throw std::length_error("too many distinct operation names");
    return OpCode(t.add(name));
}

std::string_view OpCode::name() const {
    auto& t = table();
    std::lock_guard lock(t.mu);
    return t.names.at(id_);
}

OpKind op_kind(OpCode op) {
    if (op == ops::forward || op == ops::backward || op == ops::loss) return OpKind::compute;
    if (op == ops::update) return OpKind::update;
    if (op == ops::allreduce || op == ops::allgather || op == ops::scatterreduce)
        return OpKind::collective;
    if (op == ops::pass) return OpKind::p2p;
    const auto n = op.name();
    for (std::string_view c : {"all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                               "broadcast", "reduce", "barrier"})
        if (n == c) return OpKind::collective;
    for (std::string_view c : {"send", "recv"})
        if (n == c) return OpKind::p2p;
    for (std::string_view c : {"recompute", "backward_input", "backward_weight", "embedding",
                               "logits", "attention", "mlp"})
        if (n == c) return OpKind::compute;
    if (n == "optimizer") return OpKind::update;
    return OpKind::other;
}

std::size_t Trace::event_count() const {
    std::size_t n = 0;
    for (const auto& r : ranks) n += r.events.size();
    return n;
}

void summarize(Trace& trace) {
    // Per rank, then across ranks in rank order: the rule runs that keep no events use too.
    SummaryFold fold;
    for (const auto& r : trace.ranks) {
        RankSummary s;
        for (const Event& e : r.events) s.add(e.start, e.end(), e.memory);
        fold.add_rank(r.rank, s);
    }
    fold.summary.correct = trace.summary.correct;
    trace.summary = fold.summary;
}

}  // namespace dtsim
