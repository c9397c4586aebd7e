// Running a strategy on every rank and checking the result: run_strategy and
// the final check. Kept apart from the Model's operations (model.cpp): g++
// inlines within a translation unit under a growth budget, which code added
// there would take from the operations.
#include "dtsim/puzzle/model.hpp"
#include "dtsim/puzzle/run.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <stdexcept>

namespace dtsim {
namespace puzzle {

std::optional<std::string> check_final_weights(int layers, const std::vector<const Model*>& models) {
    // One pass over the ranks, folding every layer (each model is read once, in
    // memory order, instead of once per layer). Layers are independent, so the
    // first failure in layer order is the one a layer-by-layer check reports.
    const auto n = static_cast<std::size_t>(std::max(layers, 0));
    std::vector<std::optional<Weight>> weight(n);
    std::vector<std::optional<std::string>> error(n);
    for (const Model* m : models) {
        for (std::size_t i = 0; i < n; ++i) {
            if (error[i]) continue;
            const int l = static_cast<int>(i);
            const Weight* w = m->final_weight(l);
            if (!w) continue;
            if (w->step != 1) {
                error[i] = fmt::format("layer {}: rank {} set a final weight at step {}, expected step 1", l, m->rank,
                                       w->step);
            } else if (!weight[i]) {
                weight[i] = *w;
            } else {
                try {
                    weight[i]->combine_into(*w);
                } catch (const std::invalid_argument& e) {
                    error[i] = fmt::format("layer {}: rank {}'s final weight: {}", l, m->rank, e.what());
                }
            }
        }
    }
    for (std::size_t i = 0; i < n; ++i) {
        const int l = static_cast<int>(i);
        if (error[i]) return error[i];
        if (!weight[i]) return fmt::format("layer {}: no rank set a final weight (missing weight)", l);
        if (!weight[i]->is_complete())
            return fmt::format("layer {}: the final weights cover shards {} of {}, not all of them", l,
                               weight[i]->shards.str(), weight[i]->total);
    }
    return std::nullopt;
}

RunResult run_strategy(Strategy strategy, int layers, int batches, int ranks, const CostModel& costs,
                       nlohmann::json meta, Keep keep) {
    // No layers or no batches are sizes the reference accepts too (a model of no layers has only
    // its loss; an empty batch set costs no time).
    if (layers < 0 || batches < 0 || ranks < 1)
        throw std::invalid_argument(fmt::format(
            "layers and batches must be at least 0 and ranks at least 1 (got {}, {}, {})", layers, batches, ranks));
    Simulation sim(ranks);
    sim.keep_events(keep == Keep::events);
    const StoreArenas arenas(ranks, layers);                     // outlives the models
    dtsim::detail::FixedArray<Model> models(static_cast<std::size_t>(ranks));  // side by side, in rank order
    for (int r = 0; r < ranks; ++r) models.emplace_back(sim.gpu(r), layers, batches, costs, &arenas);
    // The trace of what ran, all of it or up to a failure; returns its number of events.
    auto assemble = [&](Trace& t) {
        std::size_t events = 0;
        t.time_unit = costs.time_unit();
        t.memory_unit = costs.memory_unit();
        t.meta = std::move(meta);
        t.meta["layers"] = layers;
        t.meta["batches"] = batches;
        t.meta["ranks"] = ranks;
        // Each rank folded its events as it recorded them (the puzzle world never
        // completes one afterwards): the summary and the count need no pass over
        // the events, which at thousands of ranks would read them all back from memory.
        SummaryFold fold;
        for (int r = 0; r < ranks; ++r) {
            const RankSummary& s = sim.gpu(r).summary();
            events += s.events;
            fold.add_rank(r, s);
        }
        t.summary = fold.summary;
        if (keep == Keep::events) t.ranks = sim.take_logs();
        return events;
    };
    try {
        sim.run([&](Gpu& g) { return strategy(models[static_cast<std::size_t>(g.rank())]); });
    } catch (ScheduleError& e) {
        if (keep == Keep::events) attach_partial_trace(e, assemble);
        throw;
    }

    RunResult out;
    out.check_error = check(models);
    out.events = assemble(out.trace);
    out.trace.summary.correct = !out.check_error.has_value();
    return out;
}

}  // namespace puzzle
}  // namespace dtsim
