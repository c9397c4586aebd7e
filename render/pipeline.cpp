#include "pipeline.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string_view>

namespace dtsim::render::detail {

PassKind pass_kind(OpCode op) {
    const std::string_view n = op.name();
    if (n == "forward" || n == "embedding" || n == "logits" || n == "loss") return PassKind::forward;
    if (n == "backward") return PassKind::backward;
    if (n == "backward_input") return PassKind::input_grad;
    if (n == "backward_weight") return PassKind::weight_grad;
    if (n == "recompute") return PassKind::recompute;
    return PassKind::other;
}

namespace {

// The chunk of each layer this rank computes, in layer order: a run of consecutive layers, or where
// the stages are known (stage_starts) each stage the rank holds. A stage without layers is held by
// the rank that computes the embedding (the first stage) or the output layer and the loss (the last):
// their operations, which name no layer, are placed in it.
struct Chunks {
    std::vector<std::int32_t> first;  // first layer of each run, or of every stage
    std::vector<int> held;            // by stage: the stages the rank holds, in order (empty: by runs)
    [[nodiscard]] int count() const {
        return std::max<int>(1, static_cast<int>(held.empty() ? first.size() : held.size()));
    }
    // The stage of a layer or of an edge operation; -1 for neither.
    [[nodiscard]] int stage_of(const Event& e) const {
        if (e.layer < 0) {
            const std::string_view n = e.op.name();
            return n == "embedding" ? 0 : n == "logits" || n == "loss" ? static_cast<int>(first.size()) - 1 : -1;
        }
        const auto it = std::upper_bound(first.begin(), first.end(), e.layer);
        return it == first.begin() ? 0 : static_cast<int>(it - first.begin()) - 1;
    }
    [[nodiscard]] int of(const Event& e) const {
        if (first.empty()) return -1;
        if (held.empty()) return e.layer < 0 ? -1 : stage_of(e);
        const int stage = stage_of(e);
        if (stage < 0) return -1;
        return static_cast<int>(std::lower_bound(held.begin(), held.end(), stage) - held.begin());
    }
};

Chunks find_chunks(const RankTrace& rank, bool layer_is_stage, const std::vector<std::int32_t>& stage_starts) {
    if (!layer_is_stage && !stage_starts.empty()) {
        Chunks c{stage_starts, {}};
        for (const auto& e : rank.events)
            if (e.stream == Stream::compute && !e.batches.empty() && pass_kind(e.op) != PassKind::other)
                if (const int k = c.stage_of(e); k >= 0) c.held.push_back(k);
        std::sort(c.held.begin(), c.held.end());
        c.held.erase(std::unique(c.held.begin(), c.held.end()), c.held.end());
        if (!c.held.empty()) return c;
    }
    std::vector<std::int32_t> layers;
    for (const auto& e : rank.events)
        if (e.stream == Stream::compute && e.layer >= 0 && !e.batches.empty() && pass_kind(e.op) != PassKind::other)
            layers.push_back(e.layer);
    std::sort(layers.begin(), layers.end());
    layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
    Chunks c;
    for (std::size_t i = 0; i < layers.size(); ++i)
        if (i == 0 || layer_is_stage || layers[i] != layers[i - 1] + 1 ||
            std::binary_search(stage_starts.begin(), stage_starts.end(), layers[i]))
            c.first.push_back(layers[i]);
    return c;
}

// Backward-direction kinds: recomputation joins the backward pass it feeds.
bool joins(PassKind pass, PassKind event) {
    if (pass == event) return true;
    const bool backward = pass == PassKind::backward || pass == PassKind::input_grad;
    return (backward && event == PassKind::recompute) || (pass == PassKind::recompute &&
                                                          (event == PassKind::backward || event == PassKind::input_grad));
}

void add_interval(std::vector<Interval>& v, double start, double end) {
    if (!v.empty() && start <= v.back().end) {
        v.back().end = std::max(v.back().end, end);
        return;
    }
    v.push_back({start, end});
}

}  // namespace

std::vector<std::int32_t> stage_starts(const Trace& trace) {
    std::vector<std::int32_t> out;
    if (!trace.meta.is_object()) return out;
    const auto grid = trace.meta.find("grid");
    if (grid == trace.meta.end() || !grid->is_object()) return out;
    const auto layers = grid->find("stage_layers");
    if (layers == grid->end() || !layers->is_array()) return out;
    long long first = 0;
    for (const auto& n : *layers) {
        if (!n.is_number_integer() || n.get<long long>() < 0 || first > (1 << 24)) return {};
        out.push_back(static_cast<std::int32_t>(first));
        first += n.get<long long>();
    }
    return out;
}

std::vector<std::size_t> overlapped_forwards(const Trace& trace, int rank) {
    std::vector<std::size_t> out;
    if (!trace.meta.is_object()) return out;
    const auto pairs = trace.meta.find("overlapped");
    if (pairs == trace.meta.end() || !pairs->is_array()) return out;
    for (const auto& p : *pairs)
        if (p.is_array() && p.size() == 2 && p[0].is_number_integer() && p[1].is_number_integer() &&
            p[0].get<long long>() == rank && p[1].get<long long>() >= 0)
            out.push_back(static_cast<std::size_t>(p[1].get<long long>()));
    std::sort(out.begin(), out.end());
    return out;
}

RankPasses rank_passes(const RankTrace& rank, double makespan, bool layer_is_stage,
                       const std::vector<std::int32_t>& stage_starts, const std::vector<std::size_t>& overlapped) {
    RankPasses out;
    const Chunks chunks = find_chunks(rank, layer_is_stage, stage_starts);
    out.chunks = chunks.count();
    // Work without a microbatch since the last event of a pass, not yet placed.
    std::vector<const Event*> pending;
    bool open = false;
    Pass cur;
    auto touches = [](double t, double end) { return t <= end + 1e-12 * std::max(1.0, std::abs(t)); };
    auto add_other = [&](const Event* e) {
        if (!out.passes.empty() && out.passes.back().kind == PassKind::other && touches(e->start, out.passes.back().end)) {
            out.passes.back().end = std::max(out.passes.back().end, e->end());
            return;
        }
        Pass p;
        p.start = e->start;
        p.end = e->end();
        out.passes.push_back(std::move(p));
    };
    // Before a new pass starting at `next` (or the end): the pending work of a layer (its collectives)
    // right after the open pass belongs to that pass, and right before `next` to the new one (the
    // returned start); the rest, and work of no layer (the optimizer), is other work.
    auto place_pending = [&](std::optional<double> next) {
        std::size_t i = 0, j = pending.size();
        if (open)
            for (; i < j && pending[i]->layer != kNoLayer && touches(pending[i]->start, cur.end); ++i)
                cur.end = std::max(cur.end, pending[i]->end());
        double start = next.value_or(0);
        if (next)
            for (; j > i && pending[j - 1]->layer != kNoLayer && touches(start, pending[j - 1]->end()); --j)
                start = pending[j - 1]->start;
        if (open) out.passes.push_back(std::move(cur));
        open = false;
        for (std::size_t k = i; k < j; ++k) add_other(pending[k]);
        pending.clear();
        return start;
    };
    std::vector<Interval> busy;
    bool overlap_wants_backward = false;  // the open pass is an F&B pair whose B is next
    for (std::size_t index = 0; index < rank.events.size(); ++index) {
        const Event& e = rank.events[index];
        if (e.stream != Stream::compute || e.duration <= 0) continue;
        add_interval(busy, e.start, e.end());
        const PassKind k = pass_kind(e.op);
        if (k == PassKind::other || e.batches.empty()) {
            pending.push_back(&e);
            continue;
        }
        const int chunk = chunks.of(e);
        if (overlap_wants_backward && k != PassKind::forward) {  // the pair's B
            overlap_wants_backward = false;
            pending.clear();
            cur.split = e.start;
            cur.end = e.end();
            cur.backward_batches = e.batches;
            cur.backward_chunk = chunk;
            continue;
        }
        overlap_wants_backward = false;
        if (k == PassKind::forward && std::binary_search(overlapped.begin(), overlapped.end(), index)) {
            place_pending(e.start);
            cur = Pass{};
            cur.kind = PassKind::overlap;
            cur.start = e.start;
            cur.end = cur.split = e.end();
            cur.batches = e.batches;
            cur.chunk = chunk;
            open = true;
            overlap_wants_backward = true;
            continue;
        }
        // The same pass goes on: the same kind, microbatch and chunk, with no gap since its last event
        // (the work between, a tensor-parallel collective, is part of it).
        bool contiguous = open && touches(e.start, pending.empty() ? cur.end : pending.back()->end());
        for (std::size_t n = 0; contiguous && n < pending.size(); ++n)
            contiguous = touches(pending[n]->start, n == 0 ? cur.end : pending[n - 1]->end());
        if (contiguous && joins(cur.kind, k) && cur.batches == e.batches &&
            (chunk < 0 || cur.chunk < 0 || chunk == cur.chunk)) {
            pending.clear();
            cur.end = std::max(cur.end, e.end());
            if (cur.chunk < 0) cur.chunk = chunk;
            if (k == PassKind::recompute)
                add_interval(cur.recompute, e.start, e.end());
            else if (cur.kind == PassKind::recompute)
                cur.kind = k;  // a recompute followed by its backward: a backward that began recomputing
            continue;
        }
        const double start = place_pending(e.start);
        cur = Pass{};
        cur.kind = k;
        cur.start = start;
        cur.end = e.end();
        cur.batches = e.batches;
        cur.chunk = chunk;
        if (k == PassKind::recompute) cur.recompute.push_back({e.start, e.end()});
        open = true;
    }
    place_pending(std::nullopt);
    // Idle: the gaps between busy intervals, up to the makespan.
    double t = 0;
    for (const auto& b : busy) {
        if (b.start > t) out.idle.push_back({t, b.start});
        t = std::max(t, b.end);
    }
    if (makespan > t) out.idle.push_back({t, makespan});
    for (const auto& g : out.idle) out.idle_time += g.end - g.start;
    return out;
}

}  // namespace dtsim::render::detail
