// dtsim plan's bounds: the least memory and step time a layout can simulate to (plan.hpp).
#include "hw/runtime/plan_bounds.hpp"

#include "dtsim/hw/strategies.hpp"
#include "dtsim/sched/generators.hpp"

#include <algorithm>

namespace dtsim::hw {
namespace plan_bounds {

// The model states of the rank holding the most parameters, as it allocates them before it
// starts (load_model_states), less the gradients where the strategy makes them during the
// backward (StrategyInfo::grads_in_backward); it keeps them all step.
double model_states_bound(const Config& c, const RunSize& size) {
    const StrategyInfo* info = find_hw_strategy(c.strategy.name);
    const bool on_demand = info && info->grads_in_backward(c.strategy.zero_stage);
    return size.model_state_bytes - (on_demand ? size.model_state_grad_bytes : 0);
}

// The activations the first rank of the pipeline (with one stage: every rank) holds when its first
// backward starts: each forward before it keeps its layers' activations until that microbatch's
// backward (release_activations), so they are all allocated at once, on top of the model states.
//   one stage           one microbatch through every layer, and the logits and the loss's
//                       temporaries (logits_and_loss) on top;
//   1F1B                min(pp, m) forwards of its layers (the pp - 1 of the warm-up and the first of
//                       the steady state: one_f_one_b);
//   GPipe               all m forwards;
//   generated schedules the forwards of rank 0 before its first other action, each of one stage's
//                       layers (even stages).
// Each layer counted at the least a layer keeps (partial recompute: the two kinds differ).
double held_activations(const Config& c, const Workload& w, const sched::Schedule* schedule) {
    const StrategyConfig& s = c.strategy;
    const double kept = std::min(w.layer.activation_bytes,
                                 w.split.partial_recompute() ? w.plain.activation_bytes : w.layer.activation_bytes);
    const double layers = c.model.spec.layers;
    if (s.pp == 1) {
        double a = layers * kept;
        if (w.edge.logits_forward.seconds > 0) a += w.edge.logits_activation_bytes + w.edge.loss_forward_extra_bytes;
        return a;
    }
    const double m = c.microbatches();
    if (s.name == "1f1b") return std::min<double>(s.pp, m) * layers / s.pp * kept;
    if (s.name == "gpipe") return m * layers / s.pp * kept;
    if (schedule && !schedule->ranks.empty() && schedule->num_stages() > 0) {
        double forwards = 0;
        for (const auto& a : schedule->ranks.front()) {
            if (a.type != sched::ActionType::forward) break;
            ++forwards;
        }
        return std::max(1.0, forwards) * layers / schedule->num_stages() * kept;
    }
    return kept;  // one layer of one microbatch, at least
}

// What a rank allocates beyond its model states, at least: the activations above; with ZeRO-3
// inside pipeline stages, also the weights of every layer it holds, gathered at its first forward
// and kept to the end of the step (ParamGather: no reshard after forward), and beside them at the
// end of the step the unsharded gradients of those layers, made during the backward (where the
// states are sharded over dp x cp > 1: make_jobs). The first rank holds its layers and the embedding.
double activations_bound(const Config& c, const Workload& w, const sched::Schedule* schedule) {
    const StrategyConfig& s = c.strategy;
    const double acts = held_activations(c, w, schedule);
    const StrategyInfo* info = find_hw_strategy(s.name);
    if (s.pp > 1 && s.zero_stage == 3 && info &&
        info->gathers_layers(s.zero_stage, false, static_cast<long long>(s.dp) * s.cp)) {
        const double params = static_cast<double>(c.model.spec.layers) / s.pp * w.layer.params + w.edge.embedding_params;
        return bytes_per_element(c.model.spec.dtype) * params + std::max(acts, w.grad_bytes * params);
    }
    return acts;
}

double step_time_bound(const Config& c, const Workload& w) {
    if (c.stragglers.any()) return 0;  // jitter may make a kernel faster than priced
    const StrategyConfig& s = c.strategy;
    const auto layer_time = [](const LayerWork& l) {
        return l.attention_forward.seconds + l.mlp_forward.seconds + l.attention_backward.seconds +
               l.mlp_backward.seconds + l.attention_recompute.seconds + l.mlp_recompute.seconds;
    };
    // The cheaper of the two layer kinds where only some layers recompute.
    const LayerWork& l = w.split.partial_recompute() && layer_time(w.plain) < layer_time(w.layer) ? w.plain : w.layer;
    const double per_layer = layer_time(l);
    const double layers = static_cast<double>(c.model.spec.layers) / s.pp;  // even stages: plan searches no others
    // The rank that holds the output layer runs its share of layers and, for every microbatch, the
    // logits and the loss forward and backward; with one stage it also holds the embedding.
    const EdgeWork& e = w.edge;
    double edges = e.logits_forward.seconds + e.loss_forward.seconds + e.loss_backward.seconds + e.logits_backward.seconds;
    if (s.pp == 1) edges += e.embedding_forward.seconds + e.embedding_backward.seconds;
    double bound = c.microbatches() * (layers * per_layer + edges);
    if (s.pp > 1 && (s.name == "1f1b" || s.name == "gpipe" || s.name == "interleaved") && !uneven_stages(s)) {
        // Microbatch 0 passes pp - 1 model chunks forward before the last rank's first forward;
        // the last rank's last backward (of some chunk k >= pp - 1) is followed by that
        // microbatch's backward through chunks k - 1 .. 0, pp - 1 of them at least.
        const double chunk_layers = layers / (s.name == "interleaved" ? s.chunks : 1);
        const double forward = l.attention_forward.seconds + l.mlp_forward.seconds;
        const double backward = l.attention_backward.seconds + l.mlp_backward.seconds;
        bound += (s.pp - 1) * chunk_layers * (forward + backward);
        // The first rank looks microbatch 0 up before its first forward, and the gradient of the
        // last microbatch reaches the embedding after its backward through chunk 0.
        bound += e.embedding_forward.seconds + e.embedding_backward.seconds;
    }
    return bound;
}

// The two parts summed, less one part in 10^9: the simulation adds the same bytes one allocation
// at a time, and a peak that equals the bound must not fall below it by rounding.
double memory_bound(double states, double activations) { return (states + activations) * (1 - 1e-9); }

// The schedule a generated-pipeline strategy runs (as make_plan generates it), or none.
std::optional<sched::Schedule> generated_schedule(const Config& c) {
    const StrategyConfig& s = c.strategy;
    const StrategyInfo* info = find_hw_strategy(s.name);
    if (!info || info->pipeline != PipelineKind::scheduled || s.name == "schedule") return std::nullopt;
    return sched::generate(s.name, {s.pp, c.microbatches(), s.name == "dualpipev" ? 2 : s.chunks, s.microbatch_group});
}

}  // namespace plan_bounds

using namespace plan_bounds;

double memory_lower_bound(const Config& c) {
    const auto schedule = generated_schedule(c);
    return memory_bound(model_states_bound(c, estimate_run_size(c, kEstimate)),
                        activations_bound(c, make_workload(c.model.spec, layer_split(c), c.cluster.gpu),
                                          schedule ? &*schedule : nullptr));
}

double step_time_lower_bound(const Config& c) {
    return step_time_bound(c, make_workload(c.model.spec, layer_split(c), c.cluster.gpu));
}

}  // namespace dtsim::hw
