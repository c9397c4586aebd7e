// A pipeline schedule from dtsim::sched (interleaved 1F1B, ZB-H1, looped BFS,
// DualPipeV, or any schedule file in PyTorch's action notation) run in the
// hardware world: every rank of a pipeline executes its pipeline rank's
// actions in order, on its layers (stage k holds the consecutive layers
// PipelinePlan gives it: [k L/S, (k+1) L/S) when split evenly), with the tensor-parallel collectives of each layer,
// recompute, the model's edges on the ranks holding the first and last
// stage, and activations and their gradients sent between the ranks that own
// neighbouring stages (a boundary inside one rank costs nothing).
//
//   F(s, i)  receives the input of stage s for microbatch i (or embeds it on
//            stage 0), runs the layers forward, sends the output (or computes
//            logits and loss on the last stage);
//   B(s, i)  receives the output gradient (or differentiates the loss),
//            recomputes as the policy says, runs the backward, sends the input
//            gradient;
//   I, W     B split as zero-bubble schedules split it: I is B without the
//            weight gradients and keeps the activations, W computes the weight
//            gradients and frees them.
//   (F;B)OVERLAP_F_B  (DualPipeV's overlapped pairs: an F with overlap_next
//            and the B after it) runs as that F and then that B on the one
//            compute stream, each at its own cost: no gain from the overlap
//            is modelled here (DualPipe's gain comes from hiding one chunk's
//            all-to-all under the other's compute, which needs a per-kernel
//            model of both chunks); the step executor's T_F&B prices it.
// SEND/RECV actions of a lowered schedule are stripped (the transfers follow
// from F and B as above) and FSDP's UNSHARD/RESHARD/REDUCE_GRAD cost nothing.
// A stage's gradients join the data-parallel buckets, layer by layer, in the
// action that finishes its last backward on this rank; the step ends as the
// other pipelines' (finish_step).
#include "dtsim/hw/steps.hpp"
#include "dtsim/hw/strategies.hpp"

#include <vector>

namespace dtsim::hw {

namespace {

using sched::ActionType;

// One tag per (stage, microbatch, direction): a pair of ranks can exchange
// tensors of several stages (interleaved, V-shaped placements) in any order.
int tag(const PipelinePlan& plan, int stage, int mb, int direction) {
    return (mb * plan.stages + stage) * 2 + direction;
}

struct Stage {
    const Job& job;
    int stage;
    [[nodiscard]] const PipelinePlan& plan() const { return *job.plan; }
    [[nodiscard]] int first_layer() const { return plan().first_layer[static_cast<std::size_t>(stage)]; }
    [[nodiscard]] int last_layer() const { return first_layer() + plan().layers[static_cast<std::size_t>(stage)] - 1; }
    // The layer this stage's point-to-point transfers are labelled with: its first (last) layer,
    // none on a stage that holds only the embedding or only the output layer.
    [[nodiscard]] bool empty() const { return plan().layers[static_cast<std::size_t>(stage)] == 0; }
    [[nodiscard]] int entry_layer() const { return empty() ? kNoLayer : first_layer(); }
    [[nodiscard]] int exit_layer() const { return empty() ? kNoLayer : last_layer(); }
    [[nodiscard]] bool first() const { return stage == 0; }
    [[nodiscard]] bool last() const { return stage == plan().stages - 1; }
    // The rank holding the neighbouring stage, or -1 when it is this rank (or none).
    [[nodiscard]] int peer(int other, int self) const {
        if (other < 0 || other >= plan().stages) return -1;
        const int r = job.rank_of_stage(other);
        return r == self ? -1 : r;
    }
};

Task<> forward(Device& gpu, const Stage& st, int mb) {
    const Job& job = st.job;
    const PipelinePlan& plan = st.plan();
    if (st.first())
        co_await embedding_forward(gpu, job, mb);
    else if (const int from = st.peer(st.stage - 1, gpu.rank()); from >= 0)
        co_await gpu.recv(from, tag(plan, st.stage, mb, kActivation), st.entry_layer(), IdSet::single(mb));
    for (int l = st.first_layer(); l <= st.last_layer(); ++l) co_await layer_forward(gpu, job, l, mb);
    if (st.last())
        logits_and_loss(gpu, job, mb);
    else if (const int to = st.peer(st.stage + 1, gpu.rank()); to >= 0)
        gpu.send(to, job.work->edge.p2p_bytes, tag(plan, st.stage + 1, mb, kActivation), st.exit_layer(),
                 IdSet::single(mb));
}

// The edges' gradients join the buckets (`grads` is given for this stage's last backward).
Task<> edge_gradients(const Stage& st, GradientSync* grads, bool output) {
    const Job& job = st.job;
    if (!grads || job.work->edge.embedding_params <= 0) co_return;
    const std::vector<double> edge{job.work->grad_bytes * job.work->edge.embedding_params};
    if (output ? st.last() && job.separate_output : st.first()) co_await grads->ready(edge, kNoLayer);
}

// B (input and weights) or I (input only). For the stage's last backward on
// this rank, `grads` takes each half layer's gradients as the backward
// produces them, as in the built-in pipelines.
Task<> backward(Device& gpu, const Stage& st, int mb, bool weights, GradientSync* grads) {
    const Job& job = st.job;
    const PipelinePlan& plan = st.plan();
    const LayerWork& w = job.work->layer;
    if (st.last())
        logits_backward(gpu, job, mb);
    else if (const int from = st.peer(st.stage + 1, gpu.rank()); from >= 0)
        co_await gpu.recv(from, tag(plan, st.stage, mb, kGradient), st.exit_layer(), IdSet::single(mb));
    if (weights) co_await edge_gradients(st, grads, true);
    for (int l = st.last_layer(); l >= st.first_layer(); --l) {
        if (weights) {
            co_await before_backward(gpu, job, l, mb);
            co_await mlp_backward(gpu, job, l, mb);
            if (grads) co_await grads->ready(w.mlp_grad_tensors, l);
            co_await attention_backward(gpu, job, l, mb);
            if (grads) co_await grads->ready(w.attention_grad_tensors, l);
            release_activations(gpu, job, l);
        } else {
            co_await layer_backward_input(gpu, job, l, mb);
        }
    }
    if (st.first())
        embedding_backward(gpu, job, mb);
    else if (const int to = st.peer(st.stage - 1, gpu.rank()); to >= 0)
        gpu.send(to, job.work->edge.p2p_bytes, tag(plan, st.stage - 1, mb, kGradient), st.entry_layer(),
                 IdSet::single(mb));
    if (weights) co_await edge_gradients(st, grads, false);
}

Task<> weights(Device& gpu, const Stage& st, int mb, GradientSync* grads) {
    const LayerWork& w = st.job.work->layer;
    co_await edge_gradients(st, grads, true);
    for (int l = st.last_layer(); l >= st.first_layer(); --l) {
        co_await layer_backward_weight(gpu, st.job, l, mb);
        if (grads) {
            co_await grads->ready(w.mlp_grad_tensors, l);
            co_await grads->ready(w.attention_grad_tensors, l);
        }
    }
    co_await edge_gradients(st, grads, false);
}

}  // namespace

Task<> scheduled_pipeline(Device& gpu, const Job& job) {
    const PipelinePlan& plan = *job.plan;
    const auto& actions = plan.schedule.ranks[static_cast<std::size_t>(job.stage)];
    // The action that completes each stage's last weight gradients on this rank.
    std::vector<std::size_t> last_weights(static_cast<std::size_t>(plan.stages), actions.size());
    for (std::size_t i = 0; i < actions.size(); ++i)
        if (actions[i].type == ActionType::full_backward || actions[i].type == ActionType::backward_weight)
            last_weights[static_cast<std::size_t>(actions[i].stage)] = i;

    load_model_states(gpu, job);
    GradientSync grads(gpu, job);
    for (std::size_t i = 0; i < actions.size(); ++i) {
        const sched::Action& a = actions[i];
        const Stage st{job, a.stage};
        GradientSync* sync = last_weights[static_cast<std::size_t>(a.stage)] == i ? &grads : nullptr;
        switch (a.type) {  // an overlapped F (overlap_next) runs as a plain F, its B next
            case ActionType::forward: co_await forward(gpu, st, a.microbatch); break;
            case ActionType::full_backward: co_await backward(gpu, st, a.microbatch, true, sync); break;
            case ActionType::backward_input: co_await backward(gpu, st, a.microbatch, false, nullptr); break;
            case ActionType::backward_weight: co_await weights(gpu, st, a.microbatch, sync); break;
            default: break;  // SEND/RECV are stripped; UNSHARD, RESHARD, REDUCE_GRAD cost nothing here
        }
    }
    co_await finish_step(gpu, job, grads);
}

}  // namespace dtsim::hw
