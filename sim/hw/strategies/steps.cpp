#include "dtsim/hw/steps.hpp"

#include "dtsim/hw/strategies.hpp"

#include "dtsim/hw/transformer.hpp"

#include <algorithm>

namespace dtsim::hw {

namespace {

void run_work(Device& gpu, OpCode op, int layer, const Work& w, int mb) {
    if (w.seconds > 0) gpu.compute(op, layer, w.seconds, w.flops, IdSet::single(mb), w.bytes);
}

bool sp(const Job& job) { return job.strategy().sequence_parallel; }

// Megatron's collectives around a block, for a rank with a tensor-parallel
// group. Forward: an all-reduce after it, or with sequence parallelism an
// all-gather before and a reduce-scatter after; the backward mirrors them.
// Plain functions returning the collective's awaiter (or task): no coroutine frame of their own.
Device::Running tp_before(Device& gpu, const Job& job, int layer) {
    return gpu.all_gather(*job.tp_group, job.work->layer.tp_bytes, layer);
}
Device::Running tp_after(Device& gpu, const Job& job, int layer) {
    if (sp(job)) return gpu.reduce_scatter(*job.tp_group, job.work->layer.tp_bytes, layer);
    return gpu.all_reduce(*job.tp_group, job.work->layer.tp_bytes, layer);
}

// `seconds` of `w`, with its FLOPs and bytes in proportion.
Work part(const Work& w, double seconds) {
    const double f = w.seconds > 0 ? seconds / w.seconds : 0;
    return Work{seconds, w.flops * f, w.bytes * f};
}

// Context parallelism's attention core (StrategyConfig::cp_comm), but PyTorch's (below).
//   ring       Megatron-Core and Transformer Engine's "p2p" context parallelism: cp steps, each
//              the fused kernel on this rank's queries against one rank's keys and values; at
//              each step but the last the keys and values it holds go on to the next rank while
//              it computes, and the next step waits for those of the previous rank. Backward
//              passes the keys and values with their gradients (twice the bytes). One tag for
//              the whole ring: messages of one sender arrive in order.
//   allgather  Llama 3's (Dubey et al. 2024, section 3.3.2): the keys and values all-gathered
//              over the context-parallel group before the core, on the compute stream (not
//              hidden), and gathered again before its backward, whose key and value gradients
//              are reduce-scattered after it. The core's work is priced as the ring's cp steps.
inline constexpr int kContextRing = -2;
// PyTorch's ring (LayerSplit::pytorch_context_parallel), torchtitan's context parallelism
// (_templated_ring_attention and its backward in torch/distributed/tensor/experimental/_attention.py,
// read at 0123248a; functional collectives on a process group of their own, so on a stream apart
// from the data-parallel collectives: CommStream::tensor, which it shares with tensor parallelism's
// overlapped collectives where those run; its gradient passes go as point-to-point sends, which do
// not queue behind its gather as they do on the group's one NCCL stream):
//   allgather  the gather starts before the first step, which runs on the rank's own keys and
//              values beside it; the second step waits for it. Forward and backward each gather.
//   ring       the keys and values go on to the next rank at each step but the last, as above
//              (all_to_all_single with one peer, in the tensors' dtype).
// Either way the backward passes the key and value gradients' fp32 sums to the next rank after
// every step (an all-to-all with one peer, LayerWork::cp_grad_bytes); a step adds its own into
// what the previous rank sent, so each waits for that transfer after its kernel, and the last
// one's end closes the core.
inline constexpr int kContextGradients = -3;

struct Ring {
    Work step;           // one step of the core
    double bytes = 0;    // this rank's keys and values (forward), with their gradients (backward)
    bool backward = false;
};

Task<> pytorch_ring_core(Device& gpu, const Job& job, OpCode op, int layer, const Ring& ring, int mb) {
    const LayerWork& L = job.work->layer;
    const IdSet ids = IdSet::single(mb);
    const bool gather = job.work->split.cp_gather;
    const double held = ring.backward ? L.cp_buffers.backward : L.cp_buffers.forward;
    gpu.allocate(held, MemoryKind::buffers, op, layer);
    Transfer gathered;
    if (gather)
        gathered = co_await gpu.start(Collective::all_gather, *job.cp_group, L.cp_kv_bytes * job.cp, layer,
                                      CommStream::tensor);
    for (int i = 0; i < job.cp; ++i) {
        if (gather && i == 1) co_await gpu.wait(gathered);
        if (!gather && i > 0) co_await gpu.recv(job.cp_prev, kContextRing, layer, ids);
        if (!gather && i + 1 < job.cp) gpu.send(job.cp_next, L.cp_kv_bytes, kContextRing, layer, ids);
        run_work(gpu, op, layer, ring.step, mb);
        if (!ring.backward) continue;
        if (i > 0) co_await gpu.recv(job.cp_prev, kContextGradients, layer, ids);
        gpu.send(job.cp_next, L.cp_grad_bytes, kContextGradients, layer, ids);
    }
    if (ring.backward) co_await gpu.recv(job.cp_prev, kContextGradients, layer, ids);
    gpu.release(held, MemoryKind::buffers);
}

Task<> megatron_ring_core(Device& gpu, const Job& job, OpCode op, int layer, const Ring& ring, int mb) {
    if (job.work->split.cp_gather) {
        const double kv = job.work->layer.cp_kv_bytes * job.cp;  // the gathered keys and values
        co_await gpu.all_gather(*job.cp_group, kv, layer);
        for (int i = 0; i < job.cp; ++i) run_work(gpu, op, layer, ring.step, mb);
        if (ring.backward) co_await gpu.reduce_scatter(*job.cp_group, kv, layer);
        co_return;
    }
    for (int i = 0; i < job.cp; ++i) {
        const bool pass = i + 1 < job.cp;
        if (pass) gpu.send(job.cp_next, ring.bytes, kContextRing, layer, IdSet::single(mb));
        run_work(gpu, op, layer, ring.step, mb);
        if (pass) co_await gpu.recv(job.cp_prev, kContextRing, layer, IdSet::single(mb));
    }
}

// The core's task, PyTorch's or the others': no frame of its own.
Task<> ring_core(Device& gpu, const Job& job, OpCode op, int layer, const Ring& ring, int mb) {
    return job.work->split.pytorch_context_parallel ? pytorch_ring_core(gpu, job, op, layer, ring, mb)
                                                    : megatron_ring_core(gpu, job, op, layer, ring, mb);
}

// The block's work but its ring's steps.
Work without_ring(const Work& w, const Ring* ring, int steps) {
    if (!ring) return w;
    return Work{w.seconds - steps * ring->step.seconds, w.flops - steps * ring->step.flops, w.bytes - steps * ring->step.bytes};
}

// A block's userbuffers overlaps: its kUbRoles entries of LayerSplit::ub and LayerWork::ub_margin.
struct BlockUb {
    const UbSms* sms;
    const double* margin;
};

// Megatron-LM's --tp-comm-overlap (Transformer Engine's userbuffers, with sequence parallelism):
// the all-gather before a block is split into t chunks in a ring, the block's first GEMM runs
// on each chunk as it arrives (the rank's own first), and the reduce-scatter after it takes the
// last GEMM's output split by split (kOverlapScatterSplits) as the GEMM produces it. Priced so:
// the all-gather starts with the first GEMM's first t - 1 chunks, its last chunk waits for the
// gather's end; the reduce-scatter starts after the last GEMM's first split and the compute
// stream waits for its end after the other splits. A backward block gathers its output gradient
// so, beside a GEMM priced as the forward's first. Transformer Engine's backward then ends with
// its bulk overlaps (LayerSplit::userbuffers; layernorm_linear.py's backward with ub_bulk_dgrad
// and ub_bulk_wgrad): the first linear's input, which sequence parallelism kept sharded, is
// all-gathered beside its input-gradient GEMM, and that gradient reduce-scattered beside its
// weight-gradient GEMM, each GEMM priced as the whole linear (`linear`); elsewhere (torchtitan's
// AsyncTP, a split backward's input pass) the reduce-scatter is pipelined as the forward's, by
// NCCL in a split backward (the bulk overlap's partner GEMM runs later there). The collectives run
// on their own stream (CommStream::tensor), beside the gradient reductions. Each overlap takes the
// SMs its configuration gives (`ub`): its kernel holds them while it runs, or its GEMM leaves them
// throughout (a margin; the forward's first and last GEMMs' in the forward and its recompute).
// Without `scatter` the block stops before its last GEMM (an early-stopping recompute): no
// reduce-scatter, and `last` and `chunking` leave that GEMM out.
Task<> overlapped_block(Device& gpu, const Job& job, OpCode op, int layer, const Work& whole, int mb, double first,
                        double last, double chunking, double linear, BlockUb ub, const Ring* ring, bool scatter) {
    const Work block = without_ring(whole, ring, job.cp);
    const double t = job.tp;
    const LayerWork& L = job.work->layer;
    const bool forward = op == ops::forward || op == ops::recompute;
    const bool bulk = op == ops::backward && job.work->split.userbuffers;
    // The roles (UbLayer) of this pass's gather and reduce-scatter.
    const std::size_t gathers = forward ? 0 : 2, scatters = forward ? 1 : 4;
    const double head_margin = ub.margin[gathers];
    const double last_margin = forward && scatter ? ub.margin[1] : 0;
    const double dgrad = linear + ub.margin[3], wgrad = linear + ub.margin[4];
    // The block as its chunked GEMMs price it (smaller GEMMs, each with its own overhead; the bulk
    // overlaps' GEMMs whole), on the SMs the margins leave.
    const double extra = bulk ? std::max(0.0, first - linear) + head_margin + ub.margin[3] + ub.margin[4]
                              : chunking + head_margin + last_margin;
    const Work w{block.seconds + extra, block.flops, block.bytes};
    const double k = kOverlapScatterSplits;
    const double head = (first + head_margin) * (t - 1) / t;
    const double tail = bulk ? dgrad + wgrad : (last + last_margin) * (k - 1) / k;
    const double middle = std::max(0.0, w.seconds - head - tail);
    const Transfer gather = co_await gpu.start(Collective::all_gather, *job.tp_group, L.tp_bytes, layer,
                                               CommStream::tensor, ub.sms[gathers].held);
    run_work(gpu, op, layer, part(w, head), mb);
    co_await gpu.wait(gather);
    run_work(gpu, op, layer, part(w, middle), mb);
    if (ring) co_await ring_core(gpu, job, op, layer, *ring, mb);
    if (!scatter) co_return;
    const double rest = std::max(0.0, w.seconds - head - middle);
    const double dgrad_part = bulk && dgrad + wgrad > 0 ? rest * dgrad / (dgrad + wgrad) : 0;
    if (bulk) {
        const Transfer input = co_await gpu.start(Collective::all_gather, *job.tp_group, L.tp_bytes, layer,
                                                  CommStream::tensor, ub.sms[3].held);
        run_work(gpu, op, layer, part(w, dgrad_part), mb);
        co_await gpu.wait(input);
    }
    // (A split backward's input pass has no weight-gradient GEMM for the bulk overlap: its input
    // gradient is reduce-scattered by NCCL, as without userbuffers; AsyncTP's by the copy engines.)
    const int scatter_sms = forward || bulk ? ub.sms[scatters].held : job.work->split.userbuffers ? kNcclCtas : 0;
    const Transfer scattered = co_await gpu.start(Collective::reduce_scatter, *job.tp_group, L.tp_bytes, layer,
                                                  CommStream::tensor, scatter_sms);
    run_work(gpu, op, layer, part(w, bulk ? rest - dgrad_part : rest), mb);
    co_await gpu.wait(scattered);
}

// Megatron-LM's backward of a block without --tp-comm-overlap (StrategyConfig::tp_async_backward;
// LinearWithGradAccumulationAndAsyncCommunication.backward in megatron/core/tensor_parallel/
// layers.py). The block's first linear (QKV, fc1) runs last in the backward. With sequence
// parallelism it kept only its sharded input, so it starts gathering it again, runs its
// input-gradient GEMM, and waits for the gather. It then starts the input gradient's all-reduce
// (reduce-scatter with sequence parallelism), runs its weight-gradient GEMM, and waits for the
// collective. Both collectives are on the tensor-parallel stream (CommStream::tensor), each GEMM
// priced as the linear's whole forward GEMM (`linear`). With sequence parallelism the gradient's
// all-gather at the block's start blocks, as before a forward block. The collectives' NCCL kernels
// hold SMs the GEMMs beside them then lack (Device::start).
Task<> async_backward_block(Device& gpu, const Job& job, OpCode op, int layer, const Work& whole, int mb,
                            double linear, const Ring* ring) {
    const Work w = without_ring(whole, ring, job.cp);
    const double tp_bytes = job.work->layer.tp_bytes;
    const double g = std::min(linear, w.seconds / 2);
    const bool seq = sp(job);
    if (seq) co_await tp_before(gpu, job, layer);
    if (seq || ring) {
        run_work(gpu, op, layer, part(w, w.seconds - 2 * g), mb);
        if (ring) co_await ring_core(gpu, job, op, layer, *ring, mb);
        if (seq) {
            const Transfer gather =
                co_await gpu.start(Collective::all_gather, *job.tp_group, tp_bytes, layer, CommStream::tensor);
            run_work(gpu, op, layer, part(w, g), mb);
            co_await gpu.wait(gather);
        } else {
            run_work(gpu, op, layer, part(w, g), mb);
        }
    } else {
        run_work(gpu, op, layer, part(w, w.seconds - g), mb);  // the rest and the input-gradient GEMM
    }
    const Transfer reduce = co_await gpu.start(seq ? Collective::reduce_scatter : Collective::all_reduce,
                                               *job.tp_group, tp_bytes, layer, CommStream::tensor);
    run_work(gpu, op, layer, part(w, g), mb);
    co_await gpu.wait(reduce);
}

// A block of work with its tensor-parallel collectives; `first` and `last` are its first and
// last GEMMs' chunked forward times, `chunking` what chunking adds (overlapped_block), `linear`
// its first linear's whole GEMM (async_backward_block).
// `ring`: the attention core's context-parallel ring, run after the rest of the block's work.
// Without `scatter` the block ends before the collective that follows its last GEMM (overlapped_block).
// The block with its collectives blocking the compute stream, before and after it.
Task<> blocking_block(Device& gpu, const Job& job, OpCode op, int layer, const Work& w, int mb, const Ring* ring,
                      bool scatter) {
    if (sp(job) && job.tp_group) co_await tp_before(gpu, job, layer);
    run_work(gpu, op, layer, without_ring(w, ring, job.cp), mb);
    if (ring) co_await ring_core(gpu, job, op, layer, *ring, mb);
    if (job.tp_group && scatter) co_await tp_after(gpu, job, layer);
}
// Which of the three runs the block: the task of the one chosen, no frame of its own.
Task<> block(Device& gpu, const Job& job, OpCode op, int layer, const Work& w, int mb, double first, double last,
             double chunking, double linear, BlockUb ub, const Ring* ring = nullptr, bool scatter = true) {
    if (sp(job) && job.tp_group && job.strategy().tp_comm_overlap)
        return overlapped_block(gpu, job, op, layer, w, mb, first, last, chunking, linear, ub, ring, scatter);
    if (op == ops::backward && job.tp_group && job.tp_async_backward)
        return async_backward_block(gpu, job, op, layer, w, mb, linear, ring);
    return blocking_block(gpu, job, op, layer, w, mb, ring, scatter);
}

// The attention block's overlaps (UbLayer qkv_fprop to qkv_wgrad) and the MLP block's.
BlockUb attention_ub(const Job& job) { return {job.work->split.ub.data(), job.work->layer.ub_margin.data()}; }
BlockUb mlp_ub(const Job& job) {
    return {job.work->split.ub.data() + kUbRoles, job.work->layer.ub_margin.data() + kUbRoles};
}

// With context parallelism: the block with its ring, which this frame keeps while the block runs.
Task<> attention_block_ring(Device& gpu, const Job& job, OpCode op, int layer, const Work& w, int mb) {
    const LayerWork& L = job.work->layer;
    const bool backward = op == ops::backward || op == ops::backward_input;
    const Ring ring{backward ? L.cp_core_backward : L.cp_core_forward, (backward ? 2 : 1) * L.cp_kv_bytes, backward};
    co_await block(gpu, job, op, layer, w, mb, L.attention_first_gemm, L.attention_last_gemm, L.attention_chunking,
                   L.attention_first_linear, attention_ub(job), &ring);
}
// Without, the block's own task: no frame of its own.
Task<> attention_block(Device& gpu, const Job& job, OpCode op, int layer, const Work& w, int mb) {
    if (job.cp_group) return attention_block_ring(gpu, job, op, layer, w, mb);
    const LayerWork& L = job.work->layer;
    return block(gpu, job, op, layer, w, mb, L.attention_first_gemm, L.attention_last_gemm, L.attention_chunking,
                 L.attention_first_linear, attention_ub(job));
}
Task<> mlp_block(Device& gpu, const Job& job, OpCode op, int layer, const Work& w, int mb) {
    const LayerWork& L = job.work->layer;
    return block(gpu, job, op, layer, w, mb, L.mlp_first_gemm, L.mlp_last_gemm, L.mlp_chunking, L.mlp_first_linear,
                 mlp_ub(job));
}

}  // namespace

Task<> attention_forward(Device& gpu, const Job& job, int layer, int mb, OpCode op) {
    return attention_block(gpu, job, op, layer, job.work->layer.attention_forward, mb);
}

Task<> mlp_forward(Device& gpu, const Job& job, int layer, int mb, OpCode op) {
    return mlp_block(gpu, job, op, layer, job.work->layer.mlp_forward, mb);
}

namespace {
// The MLP block recomputed up to fc2's input (LayerWork::recompute_early_stop): the block as its
// forward runs it (the gather before it, pipelined with fc1's chunks under tp_comm_overlap) but
// for fc2, its chunks and the collective after it.
Task<> mlp_recompute_early_stop(Device& gpu, const Job& job, int layer, const Work& w, int mb) {
    const LayerWork& L = job.work->layer;
    return block(gpu, job, ops::recompute, layer, w, mb, L.mlp_first_gemm, 0,
                 std::max(0.0, L.mlp_first_gemm - L.mlp_first_linear), L.mlp_first_linear, mlp_ub(job), nullptr, false);
}
}  // namespace

// Float8 linears: the weights cast to fp8 before the forward (every microbatch, or the first of a
// step with Transformer Engine's weight cache) and, with torchao, again before the backward.
namespace {
void fp8_weight_cast(Device& gpu, const Job& job, int layer, int mb, bool backward) {
    const LayerSplit& s = job.work->split;
    if (s.fp8 == Fp8::none) return;
    if (backward ? job.work->layer.fp8_weight_casts < 2 : s.fp8_weight_cache && mb != 0) return;
    run_work(gpu, backward ? ops::backward : ops::forward, layer, job.work->layer.fp8_weight_cast, mb);
}
}  // namespace

Task<> layer_forward(Device& gpu, const Job& job, int layer, int mb) {
    if (job.param_gather) co_await job.param_gather->wait(gpu, job, layer);
    gpu.allocate(job.work->at(layer).activation_bytes, MemoryKind::activations, ops::forward, layer);
    fp8_weight_cast(gpu, job, layer, mb, false);
    co_await attention_forward(gpu, job, layer, mb);
    co_await mlp_forward(gpu, job, layer, mb);
}

Task<> before_backward(Device& gpu, const Job& job, int layer, int mb) {
    const LayerWork& w = job.work->at(layer);
    if (job.param_gather) job.param_gather->backward(gpu, job, layer);
    switch (w.recompute) {
        case Recompute::none: break;
        case Recompute::selective: run_work(gpu, ops::recompute, layer, w.attention_recompute, mb); break;
        case Recompute::selective_op:
            // Elementwise work and half the products, no tensor-parallel collective (their outputs are kept).
            gpu.allocate(w.recompute_peak_bytes, MemoryKind::activations, ops::recompute, layer);
            run_work(gpu, ops::recompute, layer, w.attention_recompute, mb);
            run_work(gpu, ops::recompute, layer, w.mlp_recompute, mb);
            break;
        case Recompute::full:
            gpu.allocate(w.recompute_peak_bytes, MemoryKind::activations, ops::recompute, layer);
            co_await attention_forward(gpu, job, layer, mb, ops::recompute);
            if (w.recompute_early_stop)
                co_await mlp_recompute_early_stop(gpu, job, layer, w.mlp_recompute, mb);
            else
                co_await mlp_forward(gpu, job, layer, mb, ops::recompute);
            break;
    }
    fp8_weight_cast(gpu, job, layer, mb, true);
}

Task<> mlp_backward(Device& gpu, const Job& job, int layer, int mb) {
    return mlp_block(gpu, job, ops::backward, layer, job.work->layer.mlp_backward, mb);
}

Task<> attention_backward(Device& gpu, const Job& job, int layer, int mb) {
    return attention_block(gpu, job, ops::backward, layer, job.work->layer.attention_backward, mb);
}

Task<> layer_backward(Device& gpu, const Job& job, int layer, int mb) {
    co_await before_backward(gpu, job, layer, mb);
    co_await mlp_backward(gpu, job, layer, mb);
    co_await attention_backward(gpu, job, layer, mb);
    release_activations(gpu, job, layer);
}

void release_activations(Device& gpu, const Job& job, int layer) {
    const LayerWork& w = job.work->at(layer);
    gpu.release(w.activation_bytes + w.recompute_peak_bytes, MemoryKind::activations);
}

Task<> layer_backward_input(Device& gpu, const Job& job, int layer, int mb) {
    const LayerWork& w = job.work->layer;
    co_await before_backward(gpu, job, layer, mb);
    co_await mlp_block(gpu, job, ops::backward_input, layer, w.mlp_backward_input, mb);
    co_await attention_block(gpu, job, ops::backward_input, layer, w.attention_backward_input, mb);
}

Task<> layer_backward_weight(Device& gpu, const Job& job, int layer, int mb) {
    const LayerWork& w = job.work->layer;
    // Each block's column-parallel input (fc1's, then QKV's) gathered again first, blocking
    // (weight_pass_gathers_input).
    const bool gather = job.weight_pass_gathers && job.tp_group;
    if (gather) co_await tp_before(gpu, job, layer);
    run_work(gpu, ops::backward_weight, layer, w.mlp_backward_weight, mb);
    if (gather) co_await tp_before(gpu, job, layer);
    run_work(gpu, ops::backward_weight, layer, w.attention_backward_weight, mb);
    release_activations(gpu, job, layer);
}

Task<> embedding_forward(Device& gpu, const Job& job, int mb) {
    const EdgeWork& e = job.work->edge;
    if (e.embedding_forward.seconds <= 0) co_return;
    run_work(gpu, ops::embedding, kNoLayer, e.embedding_forward, mb);
    // Megatron's vocabulary-parallel embedding sums the ranks' partial lookups.
    if (job.tp_group) co_await gpu.all_reduce(*job.tp_group, job.work->layer.tp_bytes, kNoLayer);
}

void embedding_backward(Device& gpu, const Job& job, int mb) {
    run_work(gpu, ops::embedding, kNoLayer, job.work->edge.embedding_backward, mb);
}

void logits_and_loss(Device& gpu, const Job& job, int mb) {
    const EdgeWork& e = job.work->edge;
    if (e.logits_forward.seconds <= 0) return;
    // What the loss keeps, and while it runs the logits and its own temporaries (loss_memory_per_logit).
    gpu.allocate(e.logits_activation_bytes + e.loss_forward_extra_bytes, MemoryKind::activations, ops::logits, kNoLayer);
    run_work(gpu, ops::logits, kNoLayer, e.logits_forward, mb);
    run_work(gpu, ops::loss, kNoLayer, e.loss_forward, mb);
    gpu.release(e.loss_forward_extra_bytes, MemoryKind::activations);
}

void logits_backward(Device& gpu, const Job& job, int mb) {
    const EdgeWork& e = job.work->edge;
    if (e.logits_forward.seconds <= 0) return;
    gpu.allocate(e.loss_backward_extra_bytes, MemoryKind::activations, ops::loss, kNoLayer);
    run_work(gpu, ops::loss, kNoLayer, e.loss_backward, mb);
    gpu.release(e.logits_activation_bytes + e.loss_backward_extra_bytes, MemoryKind::activations);
    run_work(gpu, ops::logits, kNoLayer, e.logits_backward, mb);
}

bool grads_on_demand(const Job& job) {
    // (FSDP2 inside pipeline stages: ParamGather allocates the unsharded gradients.)
    const StrategyInfo* info = find_hw_strategy(job.strategy().name);
    return info && info->grads_in_backward(job.strategy().zero_stage);
}

void load_model_states(Device& gpu, const Job& job) {
    const ModelStateBytes s =
        zero_model_states(job.params(), job.strategy().zero_stage, job.zero_ranks(), job.work->grad_bytes,
                          job.work->adam, job.work->weight_bytes);
    MemoryParts parts{};
    parts[static_cast<std::size_t>(MemoryKind::weights)] = s.weights;
    parts[static_cast<std::size_t>(MemoryKind::gradients)] = grads_on_demand(job) ? 0 : s.grads;
    parts[static_cast<std::size_t>(MemoryKind::optimizer)] = s.optimizer;
    gpu.allocate(parts, ops::model_states);
    // Transformer Engine's cached fp8 weights and their transposes, one byte each, for the layers held.
    if (job.work->split.fp8 == Fp8::te && job.work->split.fp8_weight_cache)
        gpu.allocate(2 * job.work->layer.linear_params * job.layers, MemoryKind::weights, ops::model_states);
}

void allocate_grads(Device& gpu, const Job& job, double params, int layer) {
    if (!grads_on_demand(job)) return;
    const double shards = job.strategy().name == "fsdp" ? job.zero_ranks() : 1;
    gpu.allocate(job.work->grad_bytes * params / shards, MemoryKind::gradients, ops::backward, layer);
}

void optimizer_step(Device& gpu, const Job& job, double params) {
    gpu.memory_bound(ops::optimizer, kNoLayer, params * adam_bytes_per_param(job.config->cluster.gpu.eager_kernels, job.work->grad_bytes,
                                                                         job.work->adam, job.work->weight_bytes));
}

// ---------------------------------------------------------------- weights

Task<> ParamGather::wait(Device& gpu, const Job& job, int layer) {
    if (!started_) {
        started_ = true;
        const double el = bytes_per_element(job.work->model.dtype);
        const double per_layer = el * job.work->layer.params;
        std::vector<int> held;
        if (job.plan) {
            const PipelinePlan& p = *job.plan;
            for (int s = 0; s < p.stages; ++s)
                if (const auto k = static_cast<std::size_t>(s); p.owner[k] == job.stage)
                    for (int l = p.first_layer[k]; l < p.first_layer[k] + p.layers[k]; ++l) held.push_back(l);
        } else {
            for (int l = job.first_layer; l < job.first_layer + job.layers; ++l) held.push_back(l);
        }
        double edges = el * job.params() - per_layer * static_cast<double>(held.size());
        const bool sharded_weights = job.strategy().zero_stage == 3;
        for (int l : held) {
            if (sharded_weights) {
                gpu.allocate(per_layer + edges, MemoryKind::weights, ops::all_gather, l);
                held_weights_ += per_layer + edges;
            }
            const Transfer t = co_await gpu.all_gather_start(*job.dp_group, per_layer + edges, l);
            edges = 0;
            pending_.emplace_back(l, t);
        }
    }
    for (auto it = pending_.begin(); it != pending_.end(); ++it)
        if (it->first == layer) {
            const Transfer t = it->second;
            pending_.erase(it);
            co_await gpu.wait(t);
            break;
        }
}

void ParamGather::backward(Device& gpu, const Job& job, int layer) {
    if (job.strategy().zero_stage != 3) return;
    const bool first = grads_made_.empty();
    if (first) grads_made_.assign(static_cast<std::size_t>(job.work->model.layers), 0);
    auto& made = grads_made_[static_cast<std::size_t>(layer)];
    if (made) return;
    made = 1;
    const double edges = first ? job.params() - job.layers * job.work->layer.params : 0;
    const double bytes = job.work->grad_bytes * (job.work->layer.params + edges);
    gpu.allocate(bytes, MemoryKind::gradients, ops::backward, layer);
    held_grads_ += bytes;
}

void ParamGather::release(Device& gpu) {
    gpu.release(held_weights_, MemoryKind::weights);
    gpu.release(held_grads_, MemoryKind::gradients);
    held_weights_ = held_grads_ = 0;
}

// ---------------------------------------------------------------- gradients

double GradBuckets::add(double bytes) {
    current_ += bytes;
    const double cap = closed_ == 0 ? first_cap_ : cap_;
    if (current_ < cap) return 0;
    const double b = current_;
    current_ = 0;
    ++closed_;
    return b;
}

double GradBuckets::flush() {
    const double b = current_;
    current_ = 0;
    if (b > 0) ++closed_;
    return b;
}

GradientSync::GradientSync(Device& gpu, const Job& job)
    : gpu_(&gpu), job_(&job), buckets_(job.strategy().first_bucket_bytes, job.strategy().bucket_bytes) {}

Task<> GradientSync::launch(double bytes, int layer) {
    gpu_->allocate(bytes, MemoryKind::buffers, ops::of(Collective::all_reduce), layer);  // the bucket buffer
    const Collective c = job_->strategy().zero_stage >= 1 ? Collective::reduce_scatter : Collective::all_reduce;
    const Transfer t = co_await gpu_->start(c, *job_->dp_group, bytes, layer);
    pending_.emplace_back(t, bytes);
}

Task<> GradientSync::release_done() {
    // Bucket buffers whose transfer has ended by now are free again (in launch order).
    std::size_t done = 0;
    // (co_await outside the loop condition: g++ 12 mishandles it inside a short-circuit)
    while (done < pending_.size()) {
        const bool ended = co_await gpu_->done(pending_[done].first);
        if (!ended) break;
        gpu_->release(pending_[done++].second, MemoryKind::buffers);
    }
    pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(done));
}

Task<> GradientSync::ready(const std::vector<double>& tensors, int layer) {
    if (!job_->dp_group) co_return;
    co_await release_done();
    last_layer_ = layer;
    for (double t : tensors) {
        const double b = buckets_.add(t);
        if (b <= 0) continue;
        if (job_->strategy().overlap)
            co_await launch(b, layer);
        else
            deferred_.emplace_back(b, layer);
    }
}

Task<> GradientSync::flush() {
    if (!job_->dp_group) co_return;
    co_await release_done();
    if (const double b = buckets_.flush(); b > 0) {
        if (job_->strategy().overlap)
            co_await launch(b, last_layer_);
        else
            deferred_.emplace_back(b, last_layer_);
    }
}

Task<> finish_step(Device& gpu, const Job& job, GradientSync& grads) {
    co_await grads.finish();
    const double el = bytes_per_element(job.work->model.dtype);
    if (job.embedding_group)
        co_await gpu.all_reduce(*job.embedding_group, job.work->grad_bytes * job.work->edge.embedding_params);
    const bool sharded = job.strategy().zero_stage >= 1 && job.dp_group;
    optimizer_step(gpu, job, sharded ? job.params() / job.dp_group->size() : job.params());
    if (sharded && !job.param_gather) co_await gpu.all_gather(*job.dp_group, el * job.params());
    if (job.param_gather) job.param_gather->release(gpu);  // ZeRO-3's gathered weights and gradients
}

Task<> GradientSync::finish() {
    if (!job_->dp_group) co_return;
    if (const double b = buckets_.flush(); b > 0) deferred_.emplace_back(b, last_layer_);
    for (const auto& [bytes, layer] : deferred_) co_await launch(bytes, layer);
    deferred_.clear();
    for (const auto& [t, bytes] : pending_) {
        co_await gpu_->wait(t);
        gpu_->release(bytes, MemoryKind::buffers);
    }
    pending_.clear();
}

}  // namespace dtsim::hw
