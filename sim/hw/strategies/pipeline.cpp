// Pipeline parallelism (x tensor x data parallelism, Megatron-LM's 3D
// layout): each stage runs its layers for one microbatch at a time and
// passes activations forward and their gradients back. GPipe runs every
// forward, then every backward; 1F1B (PipeDream-Flush, Narayanan et al. 2021)
// runs p - s - 1 warm-up forwards on stage s, then alternates one forward and
// one backward, so stage s keeps at most p - s microbatches of activations
// instead of m. Gradients are reduced over the data-parallel group during the
// last microbatch's backward (overlap) or after it, the tied embeddings'
// gradients between the first and last stage, then every rank steps its
// optimizer (1/dp of it with ZeRO-1, followed by an all-gather of the weights).
#include "dtsim/hw/steps.hpp"
#include "dtsim/hw/strategies.hpp"

#include <algorithm>

namespace dtsim::hw {

namespace {

int last_layer(const Job& job) { return job.first_layer + job.layers - 1; }
// The layer a stage's point-to-point transfers are labelled with: its first (last) layer, none
// on a stage that holds only the embedding or only the output layer.
int entry_layer(const Job& job) { return job.layers > 0 ? job.first_layer : kNoLayer; }
int exit_layer(const Job& job) { return job.layers > 0 ? last_layer(job) : kNoLayer; }

Task<> forward_step(Device& gpu, const Job& job, int mb) {
    if (job.first_stage())
        co_await embedding_forward(gpu, job, mb);
    else
        co_await gpu.recv(job.prev, kActivation, entry_layer(job), IdSet::single(mb));
    for (int l = job.first_layer; l <= last_layer(job); ++l) co_await layer_forward(gpu, job, l, mb);
    if (job.last_stage())
        logits_and_loss(gpu, job, mb);
    else
        gpu.send(job.next, job.work->edge.p2p_bytes, kActivation, exit_layer(job), IdSet::single(mb));
}

// `grads` is given for the last microbatch: its gradients join the buckets.
Task<> backward_step(Device& gpu, const Job& job, int mb, GradientSync* grads) {
    const LayerWork& w = job.work->layer;
    // The embeddings' gradient, one tensor (g++ 12 cannot take a braced list inside co_await).
    const std::vector<double> embedding_grad{job.work->grad_bytes * job.work->edge.embedding_params};
    if (job.last_stage()) {
        logits_backward(gpu, job, mb);
        if (grads && job.work->edge.embedding_params > 0 && job.separate_output)
            co_await grads->ready(embedding_grad, kNoLayer);
    } else {
        co_await gpu.recv(job.next, kGradient, exit_layer(job), IdSet::single(mb));
    }
    for (int l = last_layer(job); l >= job.first_layer; --l) {
        co_await before_backward(gpu, job, l, mb);
        co_await mlp_backward(gpu, job, l, mb);
        if (grads) co_await grads->ready(w.mlp_grad_tensors, l);
        co_await attention_backward(gpu, job, l, mb);
        if (grads) co_await grads->ready(w.attention_grad_tensors, l);
        release_activations(gpu, job, l);
    }
    if (job.first_stage()) {
        embedding_backward(gpu, job, mb);
        if (grads && job.work->edge.embedding_params > 0) co_await grads->ready(embedding_grad, kNoLayer);
    } else {
        gpu.send(job.prev, job.work->edge.p2p_bytes, kGradient, entry_layer(job), IdSet::single(mb));
    }
}

}  // namespace

Task<> gpipe(Device& gpu, const Job& job) {
    load_model_states(gpu, job);
    GradientSync grads(gpu, job);
    const int m = job.microbatches;
    for (int i = 0; i < m; ++i) co_await forward_step(gpu, job, i);
    // Backwards in reverse, so the last stage starts with the microbatch it just finished.
    for (int i = m - 1; i >= 0; --i) co_await backward_step(gpu, job, i, i == 0 ? &grads : nullptr);
    co_await finish_step(gpu, job, grads);
}

Task<> one_f_one_b(Device& gpu, const Job& job) {
    load_model_states(gpu, job);
    GradientSync grads(gpu, job);
    const int p = job.pp, m = job.microbatches, s = job.stage;
    const int warmup = std::min(p - s - 1, m);
    auto last = [&](int i) { return i == m - 1 ? &grads : nullptr; };
    for (int i = 0; i < warmup; ++i) co_await forward_step(gpu, job, i);
    for (int i = 0; i < m - warmup; ++i) {
        co_await forward_step(gpu, job, warmup + i);
        co_await backward_step(gpu, job, i, last(i));
    }
    for (int i = m - warmup; i < m; ++i) co_await backward_step(gpu, job, i, last(i));
    co_await finish_step(gpu, job, grads);
}

// Megatron-LM tensor parallelism without a pipeline: 1F1B with one stage,
// i.e. forward and backward of one microbatch after another.
Task<> megatron(Device& gpu, const Job& job) { co_await one_f_one_b(gpu, job); }

}  // namespace dtsim::hw
