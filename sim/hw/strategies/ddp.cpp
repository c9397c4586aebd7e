// Distributed data parallelism as PyTorch's DistributedDataParallel runs it:
// full replicas; gradient accumulation over microbatches without
// synchronisation (no_sync) and, in the last backward, gradients reduced in
// buckets (1 MiB first, then 25 MiB) that start as soon as they fill, while
// the backward goes on. With ZeRO-1 the buckets are reduce-scattered and each
// rank steps its 1/N of the optimizer, then all-gathers the weights; with
// ZeRO-2 the gradients are reduce-scattered after every microbatch's backward
// (DeepSpeed's stage 2: no rank keeps the full gradients between microbatches).
#include "dtsim/hw/steps.hpp"
#include "dtsim/hw/strategies.hpp"

namespace dtsim::hw {

Task<> ddp(Device& gpu, const Job& job) {
    const LayerWork& w = job.work->layer;
    const EdgeWork& e = job.work->edge;
    // The embeddings' gradient, one tensor (g++ 12 cannot take a braced list inside co_await).
    const std::vector<double> embedding_grad{job.work->grad_bytes * e.embedding_params};
    load_model_states(gpu, job);
    GradientSync grads(gpu, job);

    const int M = job.microbatches;
    for (int mb = 0; mb < M; ++mb) {
        const bool sync = mb == M - 1 || job.strategy().zero_stage == 2;
        // Forward
        co_await embedding_forward(gpu, job, mb);
        for (int l = 0; l < job.layers; ++l) co_await layer_forward(gpu, job, l, mb);
        logits_and_loss(gpu, job, mb);

        // Backward; each half layer's gradients join the buckets as they are produced.
        logits_backward(gpu, job, mb);
        if (sync && !job.work->model.tied_embeddings) co_await grads.ready(embedding_grad, kNoLayer);
        for (int l = job.layers - 1; l >= 0; --l) {
            co_await before_backward(gpu, job, l, mb);
            co_await mlp_backward(gpu, job, l, mb);
            if (sync) co_await grads.ready(w.mlp_grad_tensors, l);
            co_await attention_backward(gpu, job, l, mb);
            if (sync) co_await grads.ready(w.attention_grad_tensors, l);
            if (mb == 0) allocate_grads(gpu, job, w.params, l);
            release_activations(gpu, job, l);
        }
        embedding_backward(gpu, job, mb);
        if (mb == 0) allocate_grads(gpu, job, job.params() - job.layers * w.params, kNoLayer);
        if (sync && e.embedding_params > 0) co_await grads.ready(embedding_grad, kNoLayer);
        if (sync && mb < M - 1) co_await grads.flush();
    }

    // Update
    co_await finish_step(gpu, job, grads);
}

}  // namespace dtsim::hw
