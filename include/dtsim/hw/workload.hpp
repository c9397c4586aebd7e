// What one GPU does for one transformer layer and one microbatch, priced once
// per configuration (seconds, FLOPs, bytes), so strategies only replay it.
#pragma once

#include "dtsim/hw/gpu.hpp"
#include "dtsim/hw/transformer.hpp"

#include <vector>

namespace dtsim::hw {

struct Work {
    double seconds = 0;
    double flops = 0;
    double bytes = 0;  // HBM bytes of its memory-bound part
};

struct LayerWork {
    Recompute recompute = Recompute::none;  // the policy this layer's work was priced for
    // Full recompute that stops early (LayerSplit::recompute_early_stop): mlp_recompute is the MLP
    // block's forward without its last GEMM and the residual add (hidden dropout included), and no
    // collective follows it.
    bool recompute_early_stop = false;
    // The two halves of a layer (Megatron splits a layer into the attention
    // block and the MLP block, each followed by a tensor-parallel collective):
    // their GEMMs on the GPU's GEMM model plus their memory-bound work
    // (layer_elementwise_bytes, and without flash_attention 9 bytes per
    // attention score for the softmax and its dropout) at the streaming rate. The
    // attention core's two products cover the causal half with flash_attention
    // and the whole s x s matrix without (unfused attention computes it all
    // and masks it in the softmax, as Megatron-LM's baddbmm/bmm); Work::flops
    // counts what runs.
    Work attention_forward, mlp_forward;
    Work attention_backward, mlp_backward;  // twice the forward GEMMs, the element-wise work's own
                                            // backward bytes, 11 (not 18) bytes per attention score;
                                            // a fused attention core with a measured curve: its own
                                            // backward
    // The backward split as zero-bubble schedules split it (Qi et al. 2023): the
    // weight gradient W is one GEMM per weight matrix with the FLOPs of its
    // forward (QKV and projection; fc1[, fc3] and fc2); the input gradient I is
    // the rest (the input-gradient GEMMs, the attention core's backward, the
    // element-wise work). I + W = the full backward.
    Work attention_backward_input, mlp_backward_input;
    Work attention_backward_weight, mlp_backward_weight;
    Work attention_recompute, mlp_recompute;  // re-run before the backward: all of the forward
                                              // (full), the attention core (selective) or nothing
    // The forward GEMMs a block starts and ends with (QKV and the projection; fc1 and fc2) as
    // tensor-parallel communication overlap runs them, split by rows to pipeline them with its
    // all-gather (t chunks, kOverlapGatherSplits) and reduce-scatter (kOverlapScatterSplits), the
    // sum of the chunks' times, and what the splitting adds to a block over whole GEMMs.
    double attention_first_gemm = 0, attention_last_gemm = 0, mlp_first_gemm = 0, mlp_last_gemm = 0;
    double attention_chunking = 0, mlp_chunking = 0;
    // What each userbuffers overlap's GEMM takes longer on the SMs its set_sm_margin leaves it
    // (LayerSplit::ub, by UbLayer): the GEMM's time as the block prices it (the forward's first
    // and last GEMMs chunked; the backward's first GEMM, beside the output gradient's gather, as the
    // chunked first GEMM; the first linear's input- and weight-gradient GEMMs whole) x margin /
    // (SMs - margin). Zero without a margin.
    std::array<double, kUbLayers> ub_margin{};
    // The first linear of each block (QKV; fc1, with the gate for SwiGLU) as one whole GEMM: its
    // input- and its weight-gradient GEMM in the backward are each priced so (the backward Work
    // above holds both). Megatron's backward runs its tensor-parallel collectives beside them
    // (StrategyConfig::tp_async_backward). Zero without tensor parallelism.
    double attention_first_linear = 0, mlp_first_linear = 0;
    // Context parallelism (LayerSplit::cp): the attention core as cp ring steps. Each step runs
    // the fused kernel on the GPU's seq/cp queries against one rank's seq/cp keys and values
    // (the balanced causal split gives every step the work of a causal call on seq/cp tokens),
    // while the keys and values move on to the next rank of the ring: cp_kv_bytes forward, and
    // twice that backward (the keys and values with their gradients). The blocks' Work above
    // includes the cp steps; these are one step's share.
    Work cp_core_forward, cp_core_backward;
    double cp_kv_bytes = 0;
    // PyTorch's ring (LayerSplit::pytorch_context_parallel): the key and value gradients it passes
    // to the next rank after each backward step, in fp32 (zero otherwise).
    double cp_grad_bytes = 0;
    // And what it holds while its core runs, forward and backward (pytorch_context_parallel_memory).
    PassBytes cp_buffers;
    double tp_bytes = 0;               // S of each tensor-parallel collective: b s h x element size
    double activation_bytes = 0;       // kept per microbatch until the backward (Korthikanti)
    double recompute_peak_bytes = 0;   // more while the backward of a fully recomputed layer runs
    double params = 0;                 // parameters of the layer on one GPU (after TP)
    // Float8 linears (LayerSplit::fp8): the weights of the linears on one GPU, and one cast of
    // them all to fp8 (fp8_cast_bytes; a layer's forward makes it every microbatch, or once a
    // step with fp8_weight_cache, and torchao's backward once more). Zero without fp8.
    double linear_params = 0;
    Work fp8_weight_cast;
    int fp8_weight_casts = 0;  // casts of the weights per microbatch at most (Fp8CastBytes::weight_casts)
    // Gradient bytes of the layer's tensors in the order the backward produces
    // them: MLP (fc2, fc1[, fc3], norm), then attention (proj, qkv, norm).
    std::vector<double> mlp_grad_tensors, attention_grad_tensors;
};

struct EdgeWork {
    Work embedding_forward, embedding_backward;  // first stage: lookup, scatter-add of its grads
    Work logits_forward, logits_backward;        // last stage: output GEMM
    Work loss_forward, loss_backward;            // last stage: softmax cross-entropy
    double logits_activation_bytes = 0;          // what the loss keeps for its backward
    // Transient bytes above those kept while the loss runs forward and backward (loss_memory_per_logit).
    double loss_forward_extra_bytes = 0, loss_backward_extra_bytes = 0;
    double embedding_params = 0;                 // on one GPU, per copy (after TP)
    double p2p_bytes = 0;                        // activation (or its gradient) between stages
};

// Transformer Engine's default userbuffers overlap (transformer_engine/pytorch/module/base.py,
// initialize_ub's default config): the all-gather before QKV and fc1 by "ring_exchange" in tp
// steps, the reduce-scatter after the projection and fc2 by "pipeline" with num_splits 4.
inline constexpr int kOverlapScatterSplits = 4;

struct Workload {
    TransformerSpec model;
    LayerSplit split;
    LayerWork layer;
    EdgeWork edge;
    // The attention core was priced from a measured fused-attention curve (GpuSpec's
    // AttentionModel), not as GEMMs.
    bool measured_attention = false;
    // Query tiles of one fused-attention call (AttentionCurve::half_tiles' count) where measured.
    double attention_tiles = 0;
    double grad_bytes = 4;  // bytes per gradient element (split.grad_dtype)
    double weight_bytes = 2;  // bytes per weight (model.dtype)
    AdamStateBytes adam;      // Adam's state per parameter (split.optimizer_dtype, model.dtype)
    // With a partial recompute (LayerSplit::partial_recompute), the layers that do not
    // recompute: `layer` priced without it.
    LayerWork plain;
    // The work of `layer` (counted from 0 over the whole model).
    [[nodiscard]] const LayerWork& at(int index) const {
        return split.partial_recompute() && !split.recomputes(index) ? plain : layer;
    }
};

// Prices every operation on `gpu` for `model` split as `split` (with context parallelism,
// the GPU's seq / cp tokens of each sequence; Workload::model stays the whole model).
Workload make_workload(const TransformerSpec& model, const LayerSplit& split, const GpuSpec& gpu);

}  // namespace dtsim::hw
