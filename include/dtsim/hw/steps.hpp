// Building blocks of transformer strategies in the hardware world: half
// layers with the tensor-parallel collectives Megatron-LM puts around them
// (an all-reduce after the attention block and after the MLP block, forward
// and backward; all-gather before and reduce-scatter after with sequence
// parallelism), the model's edges, model states, the optimizer step and
// DDP-style gradient buckets.
//
// Every function takes the GPU first and the rank's job; microbatch `mb`
// goes into the trace. Memory: layer_forward allocates the activations a
// layer keeps, layer_backward frees them.
#pragma once

#include "dtsim/hw/device.hpp"
#include "dtsim/hw/job.hpp"

#include <vector>

namespace dtsim::hw {

// One half of a layer, forward (op is forward, or recompute when re-run).
Task<> attention_forward(Device& gpu, const Job& job, int layer, int mb, OpCode op = ops::forward);
Task<> mlp_forward(Device& gpu, const Job& job, int layer, int mb, OpCode op = ops::forward);
// Both halves, after allocating the activations the layer keeps for `mb`.
Task<> layer_forward(Device& gpu, const Job& job, int layer, int mb);
// What a layer's backward needs first: the recompute the policy asks for (nothing for none), and
// the fp8 weights cast again where the recipe casts them for the backward too (torchao).
Task<> before_backward(Device& gpu, const Job& job, int layer, int mb);
Task<> mlp_backward(Device& gpu, const Job& job, int layer, int mb);
Task<> attention_backward(Device& gpu, const Job& job, int layer, int mb);
// before_backward, both halves backward, then frees the layer's activations for `mb`. The
// strategies whose gradients join buckets as each half ends (Megatron-LM's data parallelism, the
// pipelines) write this sequence out with GradientSync::ready between the halves rather than call a
// coroutine that does: at scale a resumed rank reads each coroutine level's frame back from memory,
// and one more level shows in the cost per event (docs/performance.md).
Task<> layer_backward(Device& gpu, const Job& job, int layer, int mb);
// Frees what `layer` kept for one microbatch (and what its recompute brought back).
void release_activations(Device& gpu, const Job& job, int layer);
// The zero-bubble split of the backward (Qi et al. 2023): recompute, then the
// input gradients of both halves with their tensor-parallel collectives; the
// activations stay until the weight gradients...
Task<> layer_backward_input(Device& gpu, const Job& job, int layer, int mb);
// ...which free them. With Megatron-LM's sequence parallelism they first gather each
// column-parallel linear's sharded input again (Job::weight_pass_gathers).
Task<> layer_backward_weight(Device& gpu, const Job& job, int layer, int mb);

// The model's edges (no-ops for a model without a vocabulary).
Task<> embedding_forward(Device& gpu, const Job& job, int mb);  // first stage; TP all-reduce of the lookup
void embedding_backward(Device& gpu, const Job& job, int mb);
void logits_and_loss(Device& gpu, const Job& job, int mb);      // last stage; keeps the fp32 logits
void logits_backward(Device& gpu, const Job& job, int mb);      // frees them

// Allocates this rank's weights, gradients and optimizer state for the
// strategy's ZeRO stage over the data-parallel group (the shard group when hybrid).
// PyTorch's DDP (ZeRO-0) and FSDP hold no gradients between steps (zero_grad(set_to_none=True),
// PyTorch's default): their gradients are allocated as the first backward makes them
// (allocate_grads); Megatron-LM's gradient buffer (main_grad) and ZeRO-1/2's are held throughout.
void load_model_states(Device& gpu, const Job& job);
bool grads_on_demand(const Job& job);
// The gradients of `params` parameters (FSDP: their shard), made by `layer`'s backward; nothing
// where load_model_states holds them already.
void allocate_grads(Device& gpu, const Job& job, double params, int layer);
// The Adam step over `params` parameters (memory-bound).
void optimizer_step(Device& gpu, const Job& job, double params);

// Megatron-LM's --overlap-param-gather with the distributed optimizer (ZeRO-1/2): the weights the
// sharded optimizer updated are all-gathered during the next forward rather than after the step,
// each layer's forward waiting for its own weights (megatron/core/distributed: the forward
// pre-hook dispatches the next bucket's all-gather and waits for its own). In one simulated step
// the gathers of the step's own first forward stand for the next step's: on the first wait every
// layer the rank holds is gathered in layer order, one transfer a layer (the first carries the
// embeddings' share) on the communication stream, and each layer's first forward waits for its
// transfer. finish_step then gathers nothing.
//
// The same gathers run FSDP (ZeRO-3) inside pipeline stages as torchtitan runs it by default
// (torchtitan/models/llama3/infra/parallelize.py, apply_fsdp: reshard_after_forward = not
// pp_enabled, "to avoid per-microbatch all-gathers"): each layer is gathered once a step, before
// the first microbatch's forward, and stays gathered through every microbatch; its unsharded
// gradients accumulate over the microbatches and are reduce-scattered with the last one's
// backward (GradientSync). With zero_stage 3 the gathered bf16 weights (2 bytes a parameter) are
// allocated when their gather starts and each layer's unsharded gradients (G bytes a parameter)
// when its first backward runs (before_backward calls `backward`); finish_step frees both.
class ParamGather {
public:
    // Waits (the first time `layer` is forwarded) for its weights.
    Task<> wait(Device& gpu, const Job& job, int layer);
    // ZeRO-3: the unsharded gradients of `layer` (and, the first time, the edges'), when its
    // first backward starts; nothing otherwise.
    void backward(Device& gpu, const Job& job, int layer);
    // ZeRO-3: frees the gathered weights and the unsharded gradients (after the reduction).
    void release(Device& gpu);

private:
    std::vector<std::pair<int, Transfer>> pending_;  // layer, its gather, in layer order
    bool started_ = false;
    std::vector<char> grads_made_;  // by layer: its unsharded gradients are allocated
    double held_weights_ = 0;      // ZeRO-3: gathered weights allocated here, freed by release
    double held_grads_ = 0;        // ZeRO-3: unsharded gradients allocated here, freed by release
};

// PyTorch DDP's gradient buckets (torch/nn/parallel/distributed.py,
// bucket_cap_mb = 25 and a first bucket of 1 MiB,
// dist._DEFAULT_FIRST_BUCKET_BYTES): gradients fill buckets in the order the
// backward produces them; a bucket closes when it reaches its cap, and a
// tensor larger than the cap fills a bucket alone.
class GradBuckets {
public:
    GradBuckets(double first_cap, double cap) : first_cap_(first_cap), cap_(cap) {}
    // Adds a tensor's gradient bytes; returns the size of the bucket this closed, or 0.
    double add(double bytes);
    // Closes the last, partly filled bucket; returns its size (0 if empty).
    double flush();
    [[nodiscard]] int closed() const { return closed_; }

private:
    double first_cap_, cap_;
    double current_ = 0;
    int closed_ = 0;
};

// Reduces gradients over the data-parallel group bucket by bucket: each
// bucket starts as soon as it fills when `overlap` is on (during the last
// backward), or all of them after the backward otherwise. With ZeRO stage >= 1
// the buckets are reduce-scattered instead of all-reduced. Bucket buffers
// count as memory while in flight.
class GradientSync;
// The end of a step of a replicated-weights strategy (DDP, Megatron, the
// pipelines): waits for the gradient buckets, all-reduces the tied
// embeddings' gradients between the ranks holding the input and output
// layer, steps the optimizer (1/dp of it with ZeRO-1 and 2, then all-gathers
// the updated bf16 weights over the data-parallel group).
Task<> finish_step(Device& gpu, const Job& job, GradientSync& grads);

class GradientSync {
public:
    GradientSync(Device& gpu, const Job& job);
    // The backward produced these gradient tensors (bytes each) of `layer`.
    Task<> ready(const std::vector<double>& tensors, int layer);
    // Starts the partly filled bucket now (ZeRO-2 reduces every microbatch's
    // gradients as DeepSpeed does: the full gradients are never kept).
    Task<> flush();
    // Starts what is left and waits for every bucket.
    Task<> finish();
    [[nodiscard]] int buckets() const { return buckets_.closed(); }

private:
    Task<> launch(double bytes, int layer);
    Task<> release_done();
    Device* gpu_;
    const Job* job_;
    GradBuckets buckets_;
    std::vector<std::pair<double, int>> deferred_;  // without overlap: (bucket bytes, layer)
    std::vector<std::pair<Transfer, double>> pending_;
    int last_layer_ = kNoLayer;
};

// What a pipeline's point-to-point message carries: the activation going forward or the
// gradient coming back (part of the message's tag).
inline constexpr int kActivation = 0;
inline constexpr int kGradient = 1;

}  // namespace dtsim::hw
