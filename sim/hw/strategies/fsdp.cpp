// Fully sharded data parallelism (ZeRO-3, PyTorch FSDP with one unit per
// layer): every rank keeps 1/N of the weights, gradients and optimizer state;
// a layer's weights are all-gathered before its forward and again before its
// backward and freed after; its gradients are reduce-scattered after its
// backward. With prefetch the next layer's all-gather is started before this
// layer computes (forward_prefetch, backward_prefetch=BACKWARD_PRE), so it
// overlaps the computation. The embeddings form the root unit, gathered for
// the whole step.
//
// Sharding strategies (torch.distributed.fsdp.ShardingStrategy):
//   full     FULL_SHARD as above (ZeRO-3: 3 x the parameter bytes moved per step).
//   grad_op  SHARD_GRAD_OP: a layer gathered for its forward stays gathered
//            through its backward (no second all-gather; ZeRO-2's 2 x).
//   hybrid   HYBRID_SHARD: FULL_SHARD inside a node (the shard group), and
//            each rank's reduced gradient shard all-reduced across the nodes
//            holding the same shard (the replica group).
//
// With tp > 1 this is torchtitan's 2D parallelism (parallelize_llama: apply_tp,
// then fully_shard over the data-parallel mesh): ranks in Megatron-LM's order
// (make_jobs), so a tensor-parallel group sits inside a node and the FSDP group
// is the same tp_rank of every data-parallel replica, across nodes. A layer's
// parameters in the workload are already this rank's 1/tp (LayerWork::params),
// so each all-gather and reduce-scatter moves the layer's bytes / tp, and the
// model states are sharded over tp x dp (load_model_states). The layer's own
// tensor-parallel collectives come from layer_forward / layer_backward: blocking
// the compute stream (sequence_parallel or not), or with tp_comm_overlap (which
// stands for torchtitan's AsyncTP) pipelined with the GEMMs on their own stream.
//
// FSDP2 (strategy.fsdp_impl "fsdp2", the default) copies on the compute stream: each gathered
// unit's all-gather output into its parameters once the gather is waited for (reading and writing
// the gathered bytes), and each unit's gradients into the reduce-scatter's input before it starts
// (reading them in the model's dtype, writing them in the reduction's), at the GPU's memory rate.
// FSDP1's flat parameters and Megatron-FSDP's buffers need neither copy.
//
// Streams: FSDP2 issues its all-gathers and reduce-scatters from two CUDA
// streams of its own (FSDPCommContext.lazy_init in
// torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py: all_gather_stream,
// reduce_scatter_stream), off the compute stream, but both over the one
// data-parallel process group, whose NCCL communicator runs them one after
// another; here they queue on the rank's data-parallel communication stream,
// never behind the compute, and never behind the tensor-parallel collectives
// (a communicator of their own).
#include "dtsim/hw/steps.hpp"
#include "dtsim/hw/strategies.hpp"

#include <deque>
#include <utility>

namespace dtsim::hw {

namespace {

// Allocates the unsharded weights of a unit and starts gathering them.
Task<Transfer> gather(Device& gpu, const Job& job, double bytes, int layer) {
    gpu.allocate(bytes, MemoryKind::weights, ops::all_gather, layer);
    if (!job.zero_group()) co_return Transfer::at(gpu.now());
    co_return co_await gpu.all_gather_start(*job.zero_group(), bytes, layer);
}

// Reduce-scatters of gradients in flight; their unsharded buffers are freed once done.
struct Scatters {
    std::deque<std::pair<Transfer, double>> pending;
    Task<> release_done(Device& gpu) {
        // (co_await outside the loop condition: g++ 12 mishandles it inside a short-circuit)
        while (!pending.empty()) {
            const bool ended = co_await gpu.done(pending.front().first);
            if (!ended) break;
            gpu.release(pending.front().second, MemoryKind::gradients);
            pending.pop_front();
        }
    }
    Task<> drain(Device& gpu) {
        for (const auto& [t, bytes] : pending) {
            co_await gpu.wait(t);
            gpu.release(bytes, MemoryKind::gradients);
        }
        pending.clear();
    }
};

Task<> scatter(Device& gpu, const Job& job, Scatters& s, double bytes, int layer) {
    gpu.allocate(bytes, MemoryKind::gradients, ops::reduce_scatter, layer);
    Transfer t = Transfer::at(gpu.now());
    if (job.zero_group()) t = co_await gpu.reduce_scatter_start(*job.zero_group(), bytes, layer);
    // Hybrid: this rank's reduced shard, all-reduced with the other replicas (after it on the comm stream).
    if (job.replica_group) t = co_await gpu.all_reduce_start(*job.replica_group, bytes / job.zero_ranks(), layer);
    s.pending.emplace_back(t, bytes);
}

}  // namespace

Task<> fsdp(Device& gpu, const Job& job) {
    const int L = job.layers;
    const bool prefetch = job.strategy().prefetch;
    const bool regather = job.strategy().sharding != "grad_op";
    const double layer_bytes = bytes_per_element(job.work->model.dtype) * job.work->layer.params;
    const double root_bytes = bytes_per_element(job.work->model.dtype) * (job.params() - L * job.work->layer.params);
    // Gradients are reduce-scattered in their own dtype (fp32 by default: FSDP2's reduce_dtype).
    const double grad_scale = job.work->grad_bytes / bytes_per_element(job.work->model.dtype);
    // FSDP2's copy of `bytes` read and written on the compute stream (nothing for the others).
    const bool copies = job.strategy().fsdp_impl == "fsdp2";
    const auto copy = [&](OpCode op, int layer, int mb, double bytes) {
        if (copies && bytes > 0) gpu.memory_bound(op, layer, bytes, IdSet::single(mb));
    };
    load_model_states(gpu, job);
    Scatters scatters;

    if (root_bytes > 0) {
        co_await gpu.wait(co_await gather(gpu, job, root_bytes, kNoLayer));
        copy(ops::forward, kNoLayer, 0, 2 * root_bytes);
    }
    for (int mb = 0; mb < job.microbatches; ++mb) {
        // Forward
        co_await embedding_forward(gpu, job, mb);
        Transfer next = co_await gather(gpu, job, layer_bytes, 0);
        for (int l = 0; l < L; ++l) {
            const Transfer current = next;
            if (prefetch && l + 1 < L) next = co_await gather(gpu, job, layer_bytes, l + 1);
            co_await gpu.wait(current);
            copy(ops::forward, l, mb, 2 * layer_bytes);
            co_await layer_forward(gpu, job, l, mb);
            if (regather) gpu.release(layer_bytes, MemoryKind::weights);  // reshard after forward
            if (!prefetch && l + 1 < L) next = co_await gather(gpu, job, layer_bytes, l + 1);
        }
        logits_and_loss(gpu, job, mb);

        // Backward
        logits_backward(gpu, job, mb);
        if (regather) next = co_await gather(gpu, job, layer_bytes, L - 1);
        for (int l = L - 1; l >= 0; --l) {
            const Transfer current = next;
            if (regather && prefetch && l > 0) next = co_await gather(gpu, job, layer_bytes, l - 1);
            if (regather) {
                co_await gpu.wait(current);
                copy(ops::backward, l, mb, 2 * layer_bytes);
            }
            co_await layer_backward(gpu, job, l, mb);
            gpu.release(layer_bytes, MemoryKind::weights);
            copy(ops::backward, l, mb, (1 + grad_scale) * layer_bytes);
            co_await scatter(gpu, job, scatters, grad_scale * layer_bytes, l);
            if (mb == 0) allocate_grads(gpu, job, job.work->layer.params, l);
            co_await scatters.release_done(gpu);
            if (regather && !prefetch && l > 0) next = co_await gather(gpu, job, layer_bytes, l - 1);
        }
        embedding_backward(gpu, job, mb);
        if (root_bytes > 0) {
            copy(ops::backward, kNoLayer, mb, (1 + grad_scale) * root_bytes);
            co_await scatter(gpu, job, scatters, grad_scale * root_bytes, kNoLayer);
        }
        if (mb == 0) allocate_grads(gpu, job, job.params() - L * job.work->layer.params, kNoLayer);
    }

    // Update: each rank steps its own shard.
    co_await scatters.drain(gpu);
    if (root_bytes > 0) gpu.release(root_bytes, MemoryKind::weights);
    optimizer_step(gpu, job, job.params() / job.zero_ranks());
}

}  // namespace dtsim::hw
