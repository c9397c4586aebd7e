#include "dtsim/hw/workload.hpp"

#include <algorithm>

namespace dtsim::hw {

namespace {
Work times(const Work& w, double k) { return Work{w.seconds * k, w.flops * k, w.bytes * k}; }
Work minus(const Work& a, const Work& b) { return Work{a.seconds - b.seconds, a.flops - b.flops, a.bytes - b.bytes}; }
}  // namespace

Workload make_workload(const TransformerSpec& model, const LayerSplit& s, const GpuSpec& gpu) {
    Workload w;
    w.model = model;
    w.split = s;
    // This GPU's share of each sequence; the attention core is priced as cp ring steps below.
    TransformerSpec m = model;
    m.seq = model.seq / std::max(1, s.cp);
    const double steps = std::max(1, s.cp);
    const DType d = m.dtype;
    const double el = bytes_per_element(d);
    const double b = s.micro_batch, S = m.seq, h = m.hidden, t = s.tp, a = m.heads;
    const double hd = m.head_dim(), kv = m.kv_heads, ffn = m.ffn;
    const double tokens = b * S;
    const double mlp_in = m.mlp == Mlp::gelu ? 1 : 2;  // SwiGLU fuses gate and up projections
    const LayerFlops f = layer_flops(m, s);

    // GEMMs of one layer on one GPU (Megatron: QKV and fc1 column-parallel, proj and fc2 row-parallel),
    // in fp8 with float8 linears (their casts below).
    const DType ld = s.fp8 == Fp8::none ? d : DType::fp8;
    const double qkv = gpu.gemm_seconds(tokens, h * (1 + 2 * kv / a) / t, h, ld);
    // Attention core as one batched GEMM per product over b x a/t heads. A fused
    // causal kernel (FlashAttention) skips the upper triangle: half of both.
    // Unfused attention multiplies the whole s x s matrix and masks it in the
    // softmax afterwards: Megatron-LM's ParallelAttention (megatron/model/
    // transformer.py, 2021) runs torch.baddbmm for Q K^T and torch.bmm for the
    // probabilities times V over all s x s scores, so it pays (and executes) both
    // products in full.
    const double core_share = s.flash_attention ? 0.5 : 1.0;
    double core = core_share * (gpu.gemm_seconds(S * b * a / t, S, hd, d) + gpu.gemm_seconds(S * b * a / t, hd, S, d));
    const double core_flops = f.attention * 2 * core_share;  // f.attention is the causal half
    // A fused kernel with a measured curve is priced as that kernel, forward and backward
    // on their own curves (GpuSpec::attention_seconds); the backward otherwise is twice the
    // forward's GEMMs.
    double core_backward = 2 * core;
    if (s.flash_attention) {
        const auto fwd = gpu.attention_seconds(s.attention_kernel, b * a / t, S, hd, d, false);
        const auto bwd = gpu.attention_seconds(s.attention_kernel, b * a / t, S, hd, d, true);
        if (fwd && bwd) {
            core = *fwd;
            core_backward = *bwd;
            w.measured_attention = true;
            w.attention_tiles = attention_tiles(b * a / t, S);
        }
    }
    // Context parallelism: one step's core is a causal call on this GPU's seq / cp tokens; the
    // ring runs cp of them (LayerWork::cp_core_forward).
    const Work core_step{core, core_flops, 0}, core_step_backward{core_backward, 2 * core_flops, 0};
    core *= steps;
    core_backward *= steps;
    const double core_total_flops = core_flops * steps;
    const double proj = gpu.gemm_seconds(tokens, h, h / t, ld);
    const double fc1 = gpu.gemm_seconds(tokens, mlp_in * ffn / t, h, ld);
    const double fc2 = gpu.gemm_seconds(tokens, h, ffn / t, ld);

    // The element-wise work (layer_elementwise_bytes), or in compiled blocks Inductor's kernels:
    // a third of their bytes in the forward, two thirds in the backward.
    // Without fused attention the s x s scores go through HBM: softmax reads and
    // writes them, dropout reads them and writes its output and mask (9 bytes
    // per score, the full matrix: Megatron's fused masked softmax covers it all).
    const double scores = s.flash_attention ? 0 : 9 * b * (a / t) * S * S;
    ElementwiseBytes elementwise = layer_elementwise_bytes(m, s, gpu.eager_kernels);
    if (s.compiled) {
        const CompiledElementwiseBytes c = compiled_elementwise_bytes(m, s);
        elementwise = {c.attention / 3, c.mlp / 3, 2 * c.attention / 3, 2 * c.mlp / 3, 0};
    }
    const double attn_bytes = elementwise.attention_forward + scores;
    const double mlp_bytes = elementwise.mlp_forward;
    // This GPU's heads of keys and values: kv heads / t (one when the kv heads are fewer than t),
    // or, with repeat_kv, as many as its query heads.
    const double kv_here = std::max(1.0, kv / t);
    const double kv_core = s.repeat_kv ? a / t : kv_here;
    // The keys and values the core reads (kv_core heads): what context parallelism's ring passes.
    const double core_kv_bytes = 2 * tokens * kv_core * hd * el;
    // repeat_kv's copies (torchtitan's repeat_kv: expand and reshape, a copy once transposed for
    // SDPA): the forward reads the keys and values and writes a / t heads of each; the backward
    // reads the copies' gradients and writes their sums over the repeated heads. In compiled blocks
    // the fitted kernel bytes (kCompiledRotaryBytes) stand for them: the Llama 3 8B block they were
    // fitted to repeats; the TP8 shares were measured with SDPA's enable_gqa, without copies.
    const double kv_copies = s.repeat_kv && kv < a && !s.compiled ? 2 * tokens * (kv_here + a / t) * hd * el : 0;

    LayerWork& L = w.layer;
    L.recompute = s.recompute;
    L.attention_forward = {qkv + core + proj + gpu.memory_seconds(attn_bytes), f.qkv + core_total_flops + f.projection,
                           attn_bytes};
    L.mlp_forward = {fc1 + fc2 + gpu.memory_seconds(mlp_bytes), f.mlp, mlp_bytes};
    // The backward: twice the forward's GEMMs, the core's own backward (below), and the element-wise
    // work's own bytes in place of twice the forward's.
    const auto backward_of = [&](const Work& forward, double forward_bytes, double backward_bytes) {
        Work back = times(forward, 2);
        back.seconds += gpu.memory_seconds(backward_bytes) - 2 * gpu.memory_seconds(forward_bytes);
        back.bytes += backward_bytes - 2 * forward_bytes;
        return back;
    };
    L.attention_backward =
        backward_of(L.attention_forward, elementwise.attention_forward, elementwise.attention_backward);
    L.attention_backward.seconds += core_backward - 2 * core;
    // The scores' backward is not twice their forward: dropout's backward reads
    // the gradient and the mask and writes the gradient (2 + 1 + 2 bytes), the
    // softmax's reads the gradient and its output and writes the gradient
    // (2 + 2 + 2; Megatron-LM's fused scaled_upper_triang_masked_softmax backward):
    // 11 bytes per score against the 2 x 9 of two forwards.
    const double scores_backward = s.flash_attention ? 0 : 11 * b * (a / t) * S * S;
    L.attention_backward.seconds -= gpu.memory_seconds(2 * scores) - gpu.memory_seconds(scores_backward);
    L.attention_backward.bytes -= 2 * scores - scores_backward;
    L.mlp_backward = backward_of(L.mlp_forward, mlp_bytes, elementwise.mlp_backward);
    const auto add = [&](Work& into, double bytes) {
        into.seconds += gpu.memory_seconds(bytes);
        into.bytes += bytes;
    };
    if (kv_copies > 0) {
        add(L.attention_forward, kv_copies);
        add(L.attention_backward, kv_copies);
    }
    const double query_bytes = tokens * (a / t) * hd * el;
    const PassBytes te_cp =
        s.te_context_parallel ? te_context_parallel_bytes(s.cp, query_bytes, core_kv_bytes) : PassBytes{};
    add(L.attention_forward, te_cp.forward);
    add(L.attention_backward, te_cp.backward);
    const PassBytes torch_cp = s.pytorch_context_parallel
                                   ? pytorch_context_parallel_bytes(s.cp, query_bytes, core_kv_bytes, el, s.compiled,
                                                                    s.cp_gather)
                                   : PassBytes{};
    add(L.attention_forward, torch_cp.forward);
    add(L.attention_backward, torch_cp.backward);
    // The rotary embedding of this GPU's query and key heads (RopeKernel), before the core.
    // Compiled blocks count it in their fitted classes.
    const double rotated = s.compiled ? 0 : tokens * (a / t + kv_here) * hd;
    const PassBytes rope = rope_bytes(s.rope, el, gpu.eager_kernels);
    const double rope_forward = rope.forward * rotated;
    if (rope_forward > 0) {
        add(L.attention_forward, rope_forward);
        add(L.attention_backward, rope.backward * rotated);
    }
    // Float8 linears' casts: memory-bound bytes split between the blocks by their linears' share
    // (QKV and projection against fc1 and fc2, by weight), and the weight casts (fp8_cast_bytes).
    if (s.fp8 != Fp8::none) {
        const Fp8CastBytes c = fp8_cast_bytes(m, s);
        const double attn_weights = h * h * (2 + 2 * kv / a) / t, mlp_weights = (mlp_in + 1) * h * ffn / t;
        const double share = attn_weights / (attn_weights + mlp_weights);
        add(L.attention_forward, share * c.forward);
        add(L.mlp_forward, (1 - share) * c.forward);
        add(L.attention_backward, share * c.backward);
        add(L.mlp_backward, (1 - share) * c.backward);
        L.linear_params = attn_weights + mlp_weights;
        const double cast = c.per_weight * L.linear_params;
        L.fp8_weight_cast = {gpu.memory_seconds(cast), 0, cast};
        L.fp8_weight_casts = c.weight_casts;
    }
    L.attention_backward_weight = {qkv + proj, f.qkv + f.projection, 0};
    L.mlp_backward_weight = {fc1 + fc2, f.mlp, 0};
    L.attention_backward_input = minus(L.attention_backward, L.attention_backward_weight);
    L.mlp_backward_input = minus(L.mlp_backward, L.mlp_backward_weight);
    switch (s.recompute) {
        case Recompute::full:
            L.attention_recompute = L.attention_forward;
            L.mlp_recompute = L.mlp_forward;
            if (s.recompute_early_stop) {
                // PyTorch's non-reentrant checkpoint stops once the last tensor the backward saved
                // exists again: fc2's input (w2's). fc2 and the residual add after it, with its hidden
                // dropout (not counted apart in compiled blocks), do not run again.
                const double residual = elementwise.residual;
                const double fc2_flops = f.mlp / (mlp_in + 1);
                L.mlp_recompute = {L.mlp_forward.seconds - fc2 - gpu.memory_seconds(residual),
                                   L.mlp_forward.flops - fc2_flops, L.mlp_forward.bytes - residual};
                L.recompute_early_stop = true;
            }
            break;
        case Recompute::selective:
            // Megatron-LM checkpoints CoreAttention whole (megatron/model/transformer.py,
            // _checkpointed_attention_forward, commit 53718d4c): Q K^T, the masked softmax, the
            // dropout and the product with V, so the scores' memory-bound forward runs again too;
            // Megatron-Core's core attention, Transformer Engine's, with its context-parallel ring's work.
            L.attention_recompute = {core + gpu.memory_seconds(scores + te_cp.forward), core_total_flops,
                                     scores + te_cp.forward};
            break;
        case Recompute::selective_op: {
            // The products it did not keep (layer_activation_bytes) and all the memory-bound work.
            // Llama: wk (the second), wo, w3 (half of the fused gate and up GEMM priced above);
            // GPT: proj and fc2. The fused attention's output is kept: no core.
            const double kv_flops = 2 * tokens * h * h * kv / a / t;
            if (m.mlp == Mlp::swiglu) {
                const double wk = gpu.gemm_seconds(tokens, h * kv / a / t, h, ld);
                const double w3 = gpu.gemm_seconds(tokens, ffn / t, h, ld);
                // repeat_kv's copies and the rotary embedding are not kept by the policy either: they run again.
                const double again = attn_bytes + kv_copies + rope_forward;
                L.attention_recompute = {wk + proj + gpu.memory_seconds(again), kv_flops + f.projection, again};
                L.mlp_recompute = {w3 + gpu.memory_seconds(mlp_bytes), f.mlp / 3, mlp_bytes};
            } else {
                const double again = attn_bytes + kv_copies + rope_forward;
                L.attention_recompute = {proj + gpu.memory_seconds(again), f.projection, again};
                L.mlp_recompute = {fc2 + gpu.memory_seconds(mlp_bytes), f.mlp / 2, mlp_bytes};
            }
            break;
        }
        case Recompute::none: break;
    }
    if (s.tp > 1) {
        const double rows = tokens / t, k = kOverlapScatterSplits, split = tokens / k;
        L.attention_first_gemm = t * gpu.gemm_seconds(rows, h * (1 + 2 * kv / a) / t, h, ld);
        L.attention_last_gemm = k * gpu.gemm_seconds(split, h, h / t, ld);
        L.mlp_first_gemm = t * gpu.gemm_seconds(rows, mlp_in * ffn / t, h, ld);
        L.mlp_last_gemm = k * gpu.gemm_seconds(split, h, ffn / t, ld);
        L.attention_chunking = std::max(0.0, L.attention_first_gemm + L.attention_last_gemm - qkv - proj);
        // Transformer Engine's set_sm_margin: the overlapped GEMM runs on the SMs the communication
        // kernels leave (UbSms::margin), each priced as the block's step functions run it.
        const double gemms[kUbLayers] = {L.attention_first_gemm, L.attention_last_gemm, L.attention_first_gemm,
                                         qkv, qkv, L.mlp_first_gemm, L.mlp_last_gemm, L.mlp_first_gemm, fc1, fc1};
        for (std::size_t i = 0; i < kUbLayers; ++i) {
            const int taken = s.ub[i].margin;
            L.ub_margin[i] = taken > 0 && gpu.sms > taken ? gemms[i] * taken / (gpu.sms - taken) : 0.0;
        }
        L.mlp_chunking = std::max(0.0, L.mlp_first_gemm + L.mlp_last_gemm - fc1 - fc2);
        L.attention_first_linear = qkv;
        L.mlp_first_linear = fc1;
    }
    if (s.cp > 1) {
        L.cp_core_forward = core_step;
        L.cp_core_backward = core_step_backward;
        L.cp_kv_bytes = core_kv_bytes;
        if (s.pytorch_context_parallel) {
            L.cp_grad_bytes = core_kv_bytes / el * bytes_per_element(DType::fp32);
            L.cp_buffers = pytorch_context_parallel_memory(s.cp, query_bytes, core_kv_bytes, el, s.cp_gather);
        }
    }
    L.tp_bytes = s.tp > 1 ? tokens * h * el : 0;
    L.activation_bytes = layer_activation_bytes(m, s);
    L.recompute_peak_bytes = layer_recompute_peak_bytes(m, s);
    L.params = (m.params_per_layer() - 2 * h) / t + 2 * h;  // norms are replicated
    // Gradients in their dtype (LayerSplit::grad_dtype), in the order the backward produces them.
    const double g = bytes_per_element(s.grad_dtype);
    w.grad_bytes = g;
    w.weight_bytes = bytes_per_element(m.dtype);
    w.adam = adam_state_bytes(m.dtype, s.optimizer_dtype, s.apex_optimizer);
    L.mlp_grad_tensors = {g * h * ffn / t, g * h * ffn * mlp_in / t, g * h};
    L.attention_grad_tensors = {g * h * h / t, g * h * h * (1 + 2 * kv / a) / t, g * h};

    EdgeWork& E = w.edge;
    if (m.vocab > 0) {
        const double v = m.vocab;
        E.embedding_forward = {gpu.memory_seconds(2 * tokens * h * el), 0, 2 * tokens * h * el};
        E.embedding_backward = times(E.embedding_forward, 2);
        E.logits_forward = {gpu.gemm_seconds(tokens, v / t, h, d), logits_flops(m, s), 0};
        E.logits_backward = times(E.logits_forward, 2);
        // Softmax cross-entropy over fp32 logits, as loss_bytes_per_logit and loss_memory_per_logit count it.
        const double logits = tokens * v / t;
        const PassBytes moved = loss_bytes_per_logit(s.cross_entropy, gpu.eager_kernels);
        const LossMemory alive = loss_memory_per_logit(s.cross_entropy);
        E.loss_forward = {gpu.memory_seconds(moved.forward * logits), 0, moved.forward * logits};
        E.loss_backward = {gpu.memory_seconds(moved.backward * logits), 0, moved.backward * logits};
        E.logits_activation_bytes = logits_activation_bytes(m, s);
        E.loss_forward_extra_bytes = (alive.forward_peak - alive.kept) * logits;
        E.loss_backward_extra_bytes = (alive.backward_peak - alive.kept) * logits;
        E.embedding_params = v * h / t;
    }
    // Megatron's scatter/gather optimization: each TP rank sends 1/t of the activation.
    E.p2p_bytes = tokens * h * el / t;
    if (s.partial_recompute()) {
        LayerSplit none = s;
        none.recompute = Recompute::none;
        w.plain = make_workload(model, none, gpu).layer;
    }
    return w;
}

}  // namespace dtsim::hw
