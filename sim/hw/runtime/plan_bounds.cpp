// dtsim plan's bounds: the least memory and step time a layout can simulate to (plan.hpp).
#include "hw/runtime/plan_bounds.hpp"

#include "dtsim/hw/job.hpp"
#include "dtsim/hw/strategies.hpp"
#include "dtsim/hw/collective_cost.hpp"
#include "dtsim/sched/generators.hpp"
#include "dtsim/sched/schedule.hpp"

#include <algorithm>

namespace dtsim::hw {
namespace plan_bounds {

namespace {
// `part` of a layer at the less of the two kinds of layer (partial recompute: they differ).
template <class Part>
double least(const Workload& w, Part part) {
    return w.split.partial_recompute() ? std::min(part(w.layer), part(w.plain)) : part(w.layer);
}
}  // namespace

// What a layer keeps from its forward to its backward, and what its recompute allocates before its
// backward releases (recompute_peak_bytes; 0 unless the policy allocates), at the less of the two
// kinds of layer.
double kept_bytes(const Workload& w) {
    return least(w, [](const LayerWork& l) { return l.activation_bytes; });
}
double redo_bytes(const Workload& w) {
    return least(w, [](const LayerWork& l) { return l.recompute_peak_bytes; });
}

// The most rank `r` holds through its actions of `schedule`, as scheduled_pipeline allocates: an F
// keeps its layers' activations (`kept` a layer) until the B or W of its microbatch; an I recomputes
// (`redo` a layer) and keeps that too until its W; a B recomputes and releases layer by layer, so it
// holds one layer's recompute on top at its start. With `logits` (the rank holds the last stage),
// the last stage's F also keeps the logits until its B or I, and holds the loss's temporaries on
// top while the loss runs, forward and backward (logits_and_loss, logits_backward). A release takes
// what its F and I added, so what is held is never more than the simulation holds.
double most_held(const sched::Schedule& schedule, std::size_t r, const std::vector<int>& split, double kept,
                 double redo, const EdgeWork* logits) {
    const int last = static_cast<int>(split.size()) - 1;
    double held = 0, most = 0;
    for (const auto& a : schedule.ranks[r]) {
        if (a.stage < 0 || a.stage > last) continue;
        const double n = split[static_cast<std::size_t>(a.stage)];
        const bool loss = logits && a.stage == last && logits->logits_forward.seconds > 0;
        switch (a.type) {
            case sched::ActionType::forward:
                held += n * kept;
                if (loss) {
                    most = std::max(most, held + logits->logits_activation_bytes + logits->loss_forward_extra_bytes);
                    held += logits->logits_activation_bytes;
                }
                break;
            case sched::ActionType::backward_input:
            case sched::ActionType::full_backward:
                if (loss) {
                    most = std::max(most, held + logits->loss_backward_extra_bytes);
                    held -= logits->logits_activation_bytes;
                }
                if (a.type == sched::ActionType::backward_input) {
                    held += n * redo;
                } else {
                    if (n > 0) most = std::max(most, held + redo);
                    held -= n * kept;
                }
                break;
            case sched::ActionType::backward_weight: held -= n * (kept + redo); break;
            default: break;
        }
        most = std::max(most, held);
    }
    return most;
}

namespace {

// Where a pipeline's model chunks sit: chunk k on rank k mod pp, or V-shaped for "dualpipev"
// (make_plan; a schedule file's placement is known only once it is read, and is taken as looped).
int owner_of_chunk(const StrategyConfig& s, int k) {
    const int pp = std::max(1, s.pp);
    return s.name == "dualpipev" && k >= pp ? 2 * pp - 1 - k : k % pp;
}

// The pipeline rank that holds the output layer: the owner of the last model chunk.
int logits_rank(const Config& c) { return owner_of_chunk(c.strategy, model_chunks(c) - 1); }

// The model states of pipeline rank r as a share of estimate_run_size's, which are those of its
// layers and one copy of the embedding (embedding_copy_params) on a rank holding the most layers:
// the states are linear in the parameters (zero_model_states). Rank r holds its layers, and rank 0
// the input embedding (counted on rank 0 only: another rank may hold the output layer's copy too,
// or not).
double states_share(const Config& c, int r) {
    const StrategyConfig& s = c.strategy;
    if (s.pp <= 1 || !uneven_stages(s)) return 1;
    const TransformerSpec& m = c.model.spec;
    const double copy = embedding_copy_params(m);
    const std::vector<double> layers = pipeline_rank_layers(c);
    const double most = *std::max_element(layers.begin(), layers.end());
    const double whole = most * m.params_per_layer() + copy;
    return whole > 0 ? (layers[static_cast<std::size_t>(r)] * m.params_per_layer() + (r == 0 ? copy : 0)) / whole : 1;
}

// The GPUs of a tensor-parallel group (tp_rank varies) or of a data-parallel group over dp x cp
// (dp_rank and cp_rank vary) of pipeline rank `stage`, where make_jobs places them (gpu_of), and
// the cost of one collective on it on idle links, as the world prices it (Group::cost). A transfer
// never ends sooner than that (network.hpp: no flow runs faster than its full rate, and its latency
// is not shared).
std::vector<int> group_gpus(const StrategyConfig& s, int stage, bool data_parallel) {
    std::vector<int> gpus;
    if (data_parallel) {
        for (int d = 0; d < s.dp; ++d)
            for (int cp = 0; cp < s.cp; ++cp) gpus.push_back(gpu_of(s, stage, d, cp, 0));
    } else {
        for (int t = 0; t < s.tp; ++t) gpus.push_back(gpu_of(s, stage, 0, 0, t));
    }
    return gpus;
}
double idle_cost(const Config& c, Collective coll, double bytes, const std::vector<int>& gpus) {
    if (gpus.size() < 2 || bytes <= 0) return 0;
    return collective_cost(c.cluster, coll, bytes, GroupShape::of(c.cluster, gpus),
                           c.strategy.algorithm.value_or(c.cluster.algorithm))
        .seconds;
}

// A pipeline schedule's placement: each stage's owner (sched::stage_owners) and layers
// (stage_layers_of), and the ranks of the first stage (rank 0, or where a schedule file puts it) and of
// the last.
struct Placement {
    std::vector<int> owners, split;
    int head = 0, tail = -1;
};
std::optional<Placement> placement_of(const Config& c, const sched::Schedule* schedule) {
    if (!schedule || schedule->ranks.empty()) return std::nullopt;
    Placement p;
    p.owners = sched::stage_owners(*schedule);
    if (p.owners.empty()) return std::nullopt;
    p.split = stage_layers_of(c, static_cast<int>(p.owners.size()));
    if (p.split.size() != p.owners.size()) return std::nullopt;
    const auto rank = [&](int r) { return r >= 0 && r < schedule->num_ranks() ? r : -1; };
    if (c.strategy.name == "schedule" && rank(p.owners.front()) >= 0) p.head = p.owners.front();
    p.tail = rank(p.owners.back());
    return p;
}

// The activations the first rank of the pipeline (with one stage: every rank) holds when its first
// backward starts: each forward before it keeps its layers' activations until that microbatch's
// backward (release_activations), so they are all allocated at once, on top of the model states.
//   one stage           one microbatch through every layer, and the logits and the loss's
//                       temporaries (logits_and_loss) on top; FSDP's gathered root unit, and with
//                       SHARD_GRAD_OP every layer's gathered weights;
//   a pipeline          the most that rank 0 holds through its actions (a schedule file: the rank
//                       that holds its first stage, and the embedding), in the order it runs them
//                       (the generated schedule, or 1F1B's and GPipe's own: builtin_schedule): each
//                       F's layers' activations until the B or W of its microbatch, each I's
//                       recomputed activations until its W, and at a B's start one layer's recompute
//                       on top. For 1F1B that is min(pp, m) forwards and that recompute; for GPipe all
//                       m forwards and that recompute.
// Each layer counted at the least a layer keeps (partial recompute: the two kinds differ).
double held_activations(const Config& c, const Workload& w, const sched::Schedule* schedule,
                        const std::optional<Placement>& place) {
    const StrategyConfig& s = c.strategy;
    const double kept = kept_bytes(w);
    const double layers = c.model.spec.layers;
    if (s.pp == 1) {
        double a = layers * kept;
        if (w.edge.logits_forward.seconds > 0) a += w.edge.logits_activation_bytes + w.edge.loss_forward_extra_bytes;
        // FSDP's gathered weights at that moment (fsdp.cpp): the root unit's (one copy of the
        // embedding at least), gathered for the whole step, and with SHARD_GRAD_OP every layer's,
        // gathered for its forward and kept through its backward.
        if (s.name == "fsdp") {
            const double el = bytes_per_element(c.model.spec.dtype);
            a += el * w.edge.embedding_params + (s.sharding == "grad_op" ? layers * el * w.layer.params : 0);
        }
        return a;
    }
    // The rank of the first stage, which holds the embedding, whose states model_states_bound
    // counts; the logits too where it holds the last stage.
    if (place)
        return most_held(*schedule, static_cast<std::size_t>(place->head), place->split, kept, redo_bytes(w),
                         place->tail == place->head ? &w.edge : nullptr);
    return kept;  // one layer of one microbatch, at least
}

// estimate_run_size's model states, less the gradients a strategy makes during the backward.
double held_states(const Config& c, const RunSize& size) {
    const StrategyInfo* info = find_hw_strategy(c.strategy.name);
    const bool on_demand = info && info->grads_in_backward(c.strategy.zero_stage);
    return size.model_state_bytes - (on_demand ? size.model_state_grad_bytes : 0);
}

// The largest of the pipeline ranks' states shares (1 with even stages).
double most_share(const Config& c) {
    double most = 0;
    for (int r = 0; r < std::max(1, c.strategy.pp); ++r) most = std::max(most, states_share(c, r));
    return most;
}

}  // namespace

// The model states of the rank holding the most: with even stages estimate_run_size's (less the
// gradients a strategy makes during the backward); with uneven stages the largest of the ranks'
// shares of it (states_share).
double model_states_bound(const Config& c, const RunSize& size) { return held_states(c, size) * most_share(c); }

// What the rank of model_states_bound allocates beyond its model states, at least: rank 0's
// activations above; with ZeRO-3 inside pipeline stages, also the weights of every layer it holds,
// gathered at its first forward and kept to the end of the step (ParamGather: no reshard after
// forward), and beside them at the end of the step the unsharded gradients of those layers, made
// during the backward (where the states are sharded over dp x cp > 1: make_jobs). Rank 0 holds its
// layers and the embedding. With uneven stages rank 0 need not hold the most states: what it
// allocates in all, less the most states, or nothing. With a generated schedule or a file, also the
// rank of the last stage, where it is another: what it allocates in all, less the most states.
double activations_bound(const Config& c, const Workload& w, const sched::Schedule* schedule, const RunSize& size) {
    const StrategyConfig& s = c.strategy;
    const std::optional<Placement> place = s.pp > 1 ? placement_of(c, schedule) : std::nullopt;
    double acts = held_activations(c, w, schedule, place);
    const StrategyInfo* info = find_hw_strategy(s.name);
    const bool zero3 = s.pp > 1 && s.zero_stage == 3 && info &&
                       info->gathers_layers(s.zero_stage, false, static_cast<long long>(s.dp) * s.cp);
    if (zero3) {
        const double params = pipeline_rank_layers(c).front() * w.layer.params + w.edge.embedding_params;
        acts = bytes_per_element(c.model.spec.dtype) * params + std::max(acts, w.grad_bytes * params);
    }
    const double held = held_states(c, size);
    if (s.pp > 1 && uneven_stages(s)) acts = std::max(0.0, held * states_share(c, 0) + acts - held * most_share(c));
    if (!place) return acts;
    // The rank that holds the last stage, where another rank holds the first: its layers' states (no
    // embedding copy counted: states_share's rule) and the most it holds through its actions, the
    // logits and the loss's temporaries included; with ZeRO-3 its layers' gathered weights and
    // gradients as above. Beyond the most states, or nothing.
    if (place->tail < 0 || place->tail == place->head) return acts;
    double layers = 0;
    for (std::size_t k = 0; k < place->owners.size(); ++k)
        if (place->owners[k] == place->tail) layers += place->split[k];
    const TransformerSpec& m = c.model.spec;
    const std::vector<double> ranks = pipeline_rank_layers(c);
    const double whole =
        *std::max_element(ranks.begin(), ranks.end()) * m.params_per_layer() + embedding_copy_params(m);
    const double states = whole > 0 ? held * layers * m.params_per_layer() / whole : 0;
    double tail_acts = most_held(*schedule, static_cast<std::size_t>(place->tail), place->split, kept_bytes(w),
                                 redo_bytes(w), &w.edge);
    if (zero3) {
        const double params = layers * w.layer.params;
        tail_acts = bytes_per_element(m.dtype) * params + std::max(tail_acts, w.grad_bytes * params);
    }
    return std::max(acts, states + tail_acts - held * most_share(c));
}

// The least step time of a layout (plan.hpp: step_time_lower_bound), the largest of the chains
// that the simulation runs one thing after another:
//
// The compute stream of the rank holding the output layer. Its layers x microbatches x one layer's
// forward, backward and recompute as the simulation prices them, and every microbatch's logits and
// loss forward and backward (with one stage, the embedding's too); the tensor-parallel collectives
// of every block (attention, MLP) of those that block the compute stream (tp > 1 without
// tp_comm_overlap: an all-reduce after each, or with sequence parallelism an all-gather before and
// a reduce-scatter after; forward, backward, and a full recompute's forward (which, stopping
// early, runs none after its MLP block); in a backward with
// tp_async_backward only the sequence-parallel all-gather before it), each at least its cost on
// idle links; with one stage, the vocabulary-parallel embedding's all-reduce of each
// microbatch; its optimizer step (memory-bound: Adam's bytes per parameter of its share); and
// after that step, with the distributed optimizer (ZeRO-1, 2) and no layer-wise gathering, the
// blocking all-gather of its parameters. For 1F1B, GPipe and interleaved pipelines also the
// embedding and the forwards of the pp - 1 model chunks that must pass before the last rank
// starts, and the backwards of pp - 1 chunks and the embedding's after it ends, with their blocking
// tensor-parallel collectives; or, where it is longer, any rank's layers between the forwards of
// the chunks before its first and their backwards after its last (uneven stages).
//
// A pipeline schedule's actions (`schedule`, generated or a file; schedule_ends): every rank's
// actions in order, each after those of other ranks it needs, each at its layers' passes with the
// blocking collectives and margins above; the latest rank's end, and the output layer's rank's end
// followed by its optimizer step. It counts the fill and drain of any schedule.
//
// FSDP's data-parallel stream (pp = 1): every microbatch gathers each layer's weights (twice
// unless grad_op: forward and backward) and reduce-scatters its gradients, one after another on
// the rank's data-parallel communication stream (FIFO: each starts after the previous ends), the
// root unit (the embeddings) gathered once and reduce-scattered each microbatch. The compute chain
// also waits for the root's gather before its first kernel, and for the last reduce-scatter (the
// root's, issued after the embedding's backward) before the optimizer step.
//
// With Transformer Engine's userbuffers, the time their SM margins add to the GEMMs they slow.
// Nothing else: no pipeline transfers, no gradient reductions of the other strategies, no
// context-parallel ring. 0 with stragglers or jitter (a kernel may run faster than priced).
double step_time_bound(const Config& c, const Workload& w, int output_rank, const sched::Schedule* schedule) {
    if (c.stragglers.any()) return 0;  // jitter may make a kernel faster than priced
    const StrategyConfig& s = c.strategy;
    const auto layer_time = [](const LayerWork& l) {
        return l.attention_forward.seconds + l.mlp_forward.seconds + l.attention_backward.seconds +
               l.mlp_backward.seconds + l.attention_recompute.seconds + l.mlp_recompute.seconds;
    };
    // The cheaper of the two layer kinds where only some layers recompute.
    const LayerWork& l = w.split.partial_recompute() && layer_time(w.plain) < layer_time(w.layer) ? w.plain : w.layer;
    const bool given = output_rank >= 0 && output_rank < std::max(1, c.strategy.pp);
    const int critical = given ? output_rank : logits_rank(c);
    const double layers = pipeline_rank_layers(c)[static_cast<std::size_t>(critical)];
    const double m = c.microbatches();

    // Blocking tensor-parallel collectives of one forward block (attention or MLP) and of one
    // backward block: with tp_async_backward only the sequence-parallel gradient's all-gather
    // before it (its re-gather and reduce-scatter, or its all-reduce, run beside GEMMs).
    double tp_forward = 0, tp_backward = 0, gather = 0;
    if (s.tp > 1 && !(s.sequence_parallel && s.tp_comm_overlap)) {
        const std::vector<int> tp = group_gpus(s, critical, false);
        gather = s.sequence_parallel ? idle_cost(c, Collective::all_gather, l.tp_bytes, tp) : 0;
        tp_forward = s.sequence_parallel ? gather + idle_cost(c, Collective::reduce_scatter, l.tp_bytes, tp)
                                         : idle_cost(c, Collective::all_reduce, l.tp_bytes, tp);
        tp_backward = tp_async_backward(s) ? gather : tp_forward;
    }
    // A full recompute's forward runs both blocks' collectives again, or where it stops early
    // (recompute_early_stop) the attention block's and only the MLP block's gather.
    double recompute_tp = 0;
    if (l.recompute == Recompute::full) recompute_tp = tp_forward + (l.recompute_early_stop ? gather : tp_forward);
    // What userbuffers' margins add to the GEMMs they slow (LayerWork::ub_margin, by UbLayer), in
    // every pass overlapped_block runs them: the forward's first and last GEMMs (a recompute that
    // stops early runs no fc2), the backward's gathered GEMM, and the bulk overlaps' GEMMs where
    // the backward is whole.
    double margins = 0;
    if (w.split.userbuffers) {
        const auto& u = l.ub_margin;
        const double forward_margins = u[0] + u[1] + u[5] + u[6];
        const StrategyInfo* kind = find_hw_strategy(s.name);
        const bool whole_backward = kind && !kind->may_split_backward();
        margins = forward_margins + u[2] + u[7] + (whole_backward ? u[3] + u[4] + u[8] + u[9] : 0);
        if (l.recompute == Recompute::full) margins += forward_margins - (l.recompute_early_stop ? u[6] : 0);
    }
    const double per_layer = layer_time(l) + 2 * tp_forward + recompute_tp + 2 * tp_backward + margins;

    // The rank that holds the output layer runs its share of layers and, for every microbatch, the
    // logits and the loss forward and backward; with one stage it also holds the embedding.
    const EdgeWork& e = w.edge;
    double edges = e.logits_forward.seconds + e.loss_forward.seconds + e.loss_backward.seconds + e.logits_backward.seconds;
    if (s.pp == 1) {
        edges += e.embedding_forward.seconds + e.embedding_backward.seconds;
        if (e.embedding_forward.seconds > 0 && s.tp > 1)
            edges += idle_cost(c, Collective::all_reduce, l.tp_bytes, group_gpus(s, critical, false));
    }
    double bound = m * (layers * per_layer + edges);

    // Its optimizer step, on its share of its parameters (at least its layers and one embedding copy).
    const StrategyInfo* info = find_hw_strategy(s.name);
    const long long replicas = static_cast<long long>(s.dp) * s.cp;
    const double params = layers * w.layer.params + e.embedding_params;
    const bool sharded = replicas > 1 && (s.name == "fsdp" || s.zero_stage >= 1);
    // (After the rank's last backward: with a pipeline it may run while the drain below does.)
    double tail = c.cluster.gpu.memory_seconds((sharded ? params / static_cast<double>(replicas) : params) *
                                               adam_bytes_per_param(c.cluster.gpu.eager_kernels, w.grad_bytes, w.adam, w.weight_bytes));
    // The distributed optimizer's gather of the updated parameters (finish_step).
    const std::vector<int> dp = replicas > 1 ? group_gpus(s, critical, true) : std::vector<int>{};
    if (sharded && s.name != "fsdp" && info && !info->gathers_layers(s.zero_stage, s.overlap_param_gather, replicas))
        tail += idle_cost(c, Collective::all_gather, bytes_per_element(c.model.spec.dtype) * params, dp);
    double drain = 0, busiest = 0;

    const bool chained = s.pp > 1 && (s.name == "1f1b" || s.name == "gpipe" || s.name == "interleaved");
    const std::vector<int> split = s.pp > 1 ? stage_layers_of(c, model_chunks(c)) : std::vector<int>{};
    const double forward = l.attention_forward.seconds + l.mlp_forward.seconds;
    const double backward = l.attention_backward.seconds + l.mlp_backward.seconds;
    if (chained) {
        // Microbatch 0 passes pp - 1 model chunks forward before the last rank's first forward;
        // the last rank's last backward (of some chunk k >= pp - 1) is followed by that
        // microbatch's backward through chunks k - 1 .. 0, pp - 1 of them at least: chunks
        // 0 .. pp - 2, each with its blocks' tensor-parallel collectives.
        double before = 0;
        for (int k = 0; k + 1 < s.pp && k < static_cast<int>(split.size()); ++k) before += split[static_cast<std::size_t>(k)];
        // The first rank looks microbatch 0 up before its first forward, and the gradient of the
        // last microbatch reaches the embedding after its backward through chunk 0.
        bound += before * (forward + 2 * tp_forward) + e.embedding_forward.seconds;
        drain = before * (backward + 2 * tp_backward) + e.embedding_backward.seconds;
    }
    // With uneven stages another rank may be busier than the output layer's (Llama 3's pipeline: the
    // last rank's last chunk holds only the output layer): every rank's own layers run one after
    // another on its compute stream, whatever the schedule. For 1F1B, GPipe and interleaved
    // pipelines also between the forwards of the chunks before its first and their backwards after
    // its last: rank r's first forward (of a chunk r + j pp) waits for a microbatch through chunks
    // 0 .. r - 1, and its last backward is of its first chunk r (a later chunk's backward is followed
    // by its lower chunks', some of them on r), after which the gradient passes back through chunks
    // r - 1 .. 0. (Not for a schedule file: which rank holds which stage is the file's.)
    if (s.pp > 1 && s.name != "schedule") {
        const std::vector<double> held = pipeline_rank_layers(c);
        double below = 0;
        for (int r = 0; r < s.pp; ++r) {
            const auto k = static_cast<std::size_t>(r);
            const double own = m * (held[k] * per_layer + (r == critical ? edges : 0));
            const bool waits = chained && r > 0;
            const double fill = waits ? below * (forward + 2 * tp_forward) + e.embedding_forward.seconds : 0;
            const double back = waits ? below * (backward + 2 * tp_backward) + e.embedding_backward.seconds : 0;
            busiest = std::max(busiest, fill + own + back);
            if (k < split.size()) below += split[k];
        }
    }
    // The last rank's optimizer step waits for the drain only through the tied embeddings'
    // all-reduce (finish_step; untied, it runs beside the drain): the larger of the two.
    bound = std::max(bound + std::max(drain, tail), busiest);
    // A pipeline schedule's actions, fill and drain included; the output layer's rank then steps its
    // optimizer.
    if (schedule && s.pp > 1) {
        // Per layer: the cheaper kind's kernels of each pass (as `l`, the kind whose layers cost less
        // in all), with the blocking tensor-parallel collectives above. A split backward's I runs
        // each block as a forward does (gather before, reduce after: block), its recompute's
        // collectives included; W none, or more where it gathers its inputs again.
        ActionSeconds a;
        a.forward = least(w, [](const LayerWork& x) { return x.attention_forward.seconds + x.mlp_forward.seconds; }) +
                    2 * tp_forward;
        const double redo =
            least(w, [](const LayerWork& x) { return x.attention_recompute.seconds + x.mlp_recompute.seconds; });
        a.backward = redo +
                     least(w, [](const LayerWork& x) {
                         return x.attention_backward.seconds + x.mlp_backward.seconds;
                     }) +
                     2 * tp_backward + recompute_tp;
        a.input = redo +
                  least(w, [](const LayerWork& x) {
                      return x.attention_backward_input.seconds + x.mlp_backward_input.seconds;
                  }) +
                  2 * tp_forward + recompute_tp;
        a.weight = least(w, [](const LayerWork& x) {
            return x.attention_backward_weight.seconds + x.mlp_backward_weight.seconds;
        });
        // Userbuffers' margins as overlapped_block adds them: an F's first and last GEMMs', a B's or
        // I's gathered GEMM's, a B's bulk overlaps' (a whole backward always runs them), a full
        // recompute's forward's again in B and I; a W's GEMMs have none.
        if (w.split.userbuffers) {
            const auto& u = l.ub_margin;
            const double forward_margins = u[0] + u[1] + u[5] + u[6];
            const double redo_margins =
                l.recompute == Recompute::full ? forward_margins - (l.recompute_early_stop ? u[6] : 0) : 0;
            a.forward += forward_margins;
            a.backward += u[2] + u[7] + u[3] + u[4] + u[8] + u[9] + redo_margins;
            a.input += u[2] + u[7] + redo_margins;
        }
        const std::vector<double> ends = schedule_ends(c, w, *schedule, a);
        if (static_cast<int>(ends.size()) > critical) {
            bound = std::max(bound, *std::max_element(ends.begin(), ends.end()));
            bound = std::max(bound, ends[static_cast<std::size_t>(critical)] + tail);
        }
    }

    if (s.name == "fsdp" && replicas > 1) {
        const double el = bytes_per_element(c.model.spec.dtype);
        const double layer_bytes = el * w.layer.params;
        const double grad_scale = w.grad_bytes / el;
        const double root_bytes = el * (params - layers * w.layer.params);
        // The shard group: dp x cp, or with hybrid sharding a node's data-parallel ranks, which
        // gather and reduce-scatter; a replica group all-reduces the shard across nodes.
        std::vector<int> shard = dp;
        if (const int per_node = hybrid_shard_ranks(c); per_node > 0) shard.resize(static_cast<std::size_t>(per_node));
        const double gathers = s.sharding == "grad_op" ? 1 : 2;
        const double root_gather = idle_cost(c, Collective::all_gather, root_bytes, shard);
        const double root_scatter = idle_cost(c, Collective::reduce_scatter, grad_scale * root_bytes, shard);
        const double stream =
            root_gather + m * (layers * (gathers * idle_cost(c, Collective::all_gather, layer_bytes, shard) +
                                         idle_cost(c, Collective::reduce_scatter, grad_scale * layer_bytes, shard)) +
                               root_scatter);
        bound = std::max(bound + root_gather + root_scatter, stream);
    }
    // Less one part in 10^9: the simulation adds the same seconds in another order, and a step
    // that equals the bound must not fall below it by rounding.
    return bound * (1 - 1e-9);
}

// Each rank's end through a pipeline schedule's actions: a rank runs its actions one after another,
// each taking at least `per_layer`'s time for each layer of its stage (stage_layers_of) and, on the
// first and last stage, the model's edges' kernels (as scheduled_pipeline runs them), with no
// transfer between the ranks; an F starts after the F of the stage before for its microbatch, a B
// or I after the B or I of the stage after (the last stage's after its own F), a W after its I.
// Empty where the schedule cannot run so.
std::vector<double> schedule_ends(const Config& c, const Workload& w, const sched::Schedule& schedule,
                                  const ActionSeconds& per_layer) {
    using sched::ActionType;
    const int stages = schedule.num_stages(), mbs = schedule.num_microbatches();
    if (stages <= 0 || mbs <= 0) return {};
    const std::vector<int> split = stage_layers_of(c, stages);
    if (static_cast<int>(split.size()) != stages) return {};
    const double forward = per_layer.forward, backward = per_layer.backward, input = per_layer.input,
                 weight = per_layer.weight;
    const EdgeWork& e = w.edge;
    const auto seconds = [&](const sched::Action& a) {
        const double layers = split[static_cast<std::size_t>(a.stage)];
        const bool first = a.stage == 0, last = a.stage == stages - 1;
        switch (a.type) {
            case ActionType::forward:
                return layers * forward + (first ? e.embedding_forward.seconds : 0) +
                       (last ? e.logits_forward.seconds + e.loss_forward.seconds : 0);
            case ActionType::full_backward:
            case ActionType::backward_input:
                return layers * (a.type == ActionType::full_backward ? backward : input) +
                       (first ? e.embedding_backward.seconds : 0) +
                       (last ? e.loss_backward.seconds + e.logits_backward.seconds : 0);
            case ActionType::backward_weight: return layers * weight;
            default: return 0.0;
        }
    };
    // When each (stage, microbatch)'s F and its B or I end; negative until they have.
    const auto at = [&](int stage, int mb) { return static_cast<std::size_t>(stage) * static_cast<std::size_t>(mbs) +
                                                    static_cast<std::size_t>(mb); };
    std::vector<double> f_end(static_cast<std::size_t>(stages) * static_cast<std::size_t>(mbs), -1);
    std::vector<double> b_end(f_end.size(), -1), i_end(f_end.size(), -1);
    const std::size_t ranks = schedule.ranks.size();
    std::vector<double> clock(ranks, 0);
    std::vector<std::size_t> next(ranks, 0);
    for (bool moved = true; moved;) {
        moved = false;
        for (std::size_t r = 0; r < ranks; ++r) {
            const auto& list = schedule.ranks[r];
            for (; next[r] < list.size(); ++next[r]) {
                const sched::Action& a = list[next[r]];
                if (a.stage < 0 || a.stage >= stages || a.microbatch < 0 || a.microbatch >= mbs) return {};
                double ready = 0;
                if (a.type == ActionType::forward) {
                    if (a.stage > 0) ready = f_end[at(a.stage - 1, a.microbatch)];
                } else if (a.type == ActionType::full_backward || a.type == ActionType::backward_input) {
                    ready = a.stage + 1 < stages ? b_end[at(a.stage + 1, a.microbatch)]
                                                 : f_end[at(a.stage, a.microbatch)];
                } else if (a.type == ActionType::backward_weight) {
                    ready = i_end[at(a.stage, a.microbatch)];
                }
                if (ready < 0) break;  // waits for another rank's action
                clock[r] = std::max(clock[r], ready) + seconds(a);
                if (a.type == ActionType::forward) f_end[at(a.stage, a.microbatch)] = clock[r];
                if (a.type == ActionType::full_backward || a.type == ActionType::backward_input)
                    b_end[at(a.stage, a.microbatch)] = clock[r];
                if (a.type == ActionType::backward_input) i_end[at(a.stage, a.microbatch)] = clock[r];
                moved = true;
            }
        }
    }
    for (std::size_t r = 0; r < ranks; ++r)
        if (next[r] < schedule.ranks[r].size()) return {};
    return clock;
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

// The order the built-in pipelines run their stages' forwards and backwards (pipeline.cpp): 1F1B's
// warm-up forwards, then one forward and one backward, then the cool-down backwards (the same as
// sched::one_f_one_b); GPipe's forwards, then its backwards from the last microbatch to the first.
// None otherwise.
std::optional<sched::Schedule> builtin_schedule(const Config& c) {
    const StrategyConfig& s = c.strategy;
    if (s.pp <= 1 || (s.name != "1f1b" && s.name != "gpipe")) return std::nullopt;
    const int m = c.microbatches();
    try {
        if (s.name == "1f1b") return sched::one_f_one_b(s.pp, m);
        sched::Schedule order = sched::gpipe(s.pp, m);
        for (auto& actions : order.ranks) std::reverse(actions.begin() + m, actions.end());
        return order;
    } catch (const std::invalid_argument&) {
        return std::nullopt;
    }
}

}  // namespace plan_bounds

using namespace plan_bounds;

namespace {
// The actions the bounds walk: the generated schedule, or the built-in pipeline's order.
std::optional<sched::Schedule> walked_schedule(const Config& c) {
    auto schedule = generated_schedule(c);
    return schedule ? schedule : builtin_schedule(c);
}
}  // namespace

double memory_lower_bound(const Config& c) {
    const auto schedule = walked_schedule(c);
    const RunSize size = estimate_run_size(c, kEstimate);
    return memory_bound(model_states_bound(c, size),
                        activations_bound(c, make_workload(c.model.spec, layer_split(c), c.cluster.gpu),
                                          schedule ? &*schedule : nullptr, size));
}

double step_time_lower_bound(const Config& c) {
    const auto schedule = walked_schedule(c);
    return step_time_bound(c, make_workload(c.model.spec, layer_split(c), c.cluster.gpu), -1,
                           schedule ? &*schedule : nullptr);
}

}  // namespace dtsim::hw
