// The work of a decoder-only transformer, per layer and per microbatch, on one
// GPU of a tensor-parallel group: FLOPs, parameters, bytes moved and the
// activation memory a layer keeps for its backward pass.
#pragma once

#include "dtsim/hw/gpu.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace dtsim::hw {

enum class Mlp : std::uint8_t { gelu, swiglu };          // 2 matrices (GPT) or 3 (Llama)
// selective: Korthikanti et al.'s (the attention core recomputed); selective_op: torchtitan's
// per-op policy (layer_activation_bytes); full: every layer from its input.
enum class Recompute : std::uint8_t { none, selective, selective_op, full };
std::string_view recompute_name(Recompute r);

// How the loss is computed over the logits (StrategyConfig::cross_entropy).
//   pytorch   F.cross_entropy(logits.float(), labels) as torchtitan (and PyTorch AMP) run it:
//             an fp32 copy of the bf16 logits, log_softmax, nll_loss
//   megatron  Megatron-LM's vocab_parallel_cross_entropy: the logits upcast once, the softmax
//             computed in place, its gradient made in place from the saved softmax
//   fused     flash-attn's fused cross-entropy kernel on the bf16 logits (llm-foundry's default)
enum class CrossEntropy : std::uint8_t { pytorch, megatron, fused };
std::string_view cross_entropy_name(CrossEntropy c);

// How the rotary position embedding of the queries and keys runs in an eager block
// (StrategyConfig::rope_kernel), per element of the heads / t + max(1, kv heads / t) heads of
// head_dim it rotates on each token, as the bytes GpuSpec::memory_seconds prices:
//   none     no rotary embedding (learned or ALiBi positions: GPT-3, MPT);
//   complex  torchtitan's apply_rotary_emb (torchtitan/models/llama3/model.py): view_as_complex of
//            the fp32 upcast, a complex multiply and view_as_real, several eager kernels: the
//            GPU's timed bytes (EagerKernelBytes::rope; on an H100 kComplexRopeForwardBytes and
//            kComplexRopeBackwardBytes);
//   fused    one kernel that reads and writes each element in the model's dtype (Transformer
//            Engine's fused_apply_rotary_pos_emb, Megatron's apply_rope_fusion; flash-attn's
//            rotary): kFusedRopeReads x its bytes per element, forward and backward alike.
// Compiled blocks count their rotary embedding in their fitted classes (kCompiledRotaryBytes).
enum class RopeKernel : std::uint8_t { none, complex, fused };
inline constexpr double kFusedRopeReads = 2;  // a read and a write
// The bytes `kernel` moves per element rotated, forward and backward, for elements of
// `element_bytes` (the fused kernel's; the complex form's are `timed`'s, bf16's).
PassBytes rope_bytes(RopeKernel kernel, double element_bytes, const EagerKernelBytes& timed);

// How an eager block's element-wise work runs (StrategyConfig::elementwise_kernels;
// layer_elementwise_bytes): `eager`, PyTorch's modules with one kernel an operation (torchtitan,
// llm-foundry), or `fused`, Megatron-Core's fused kernels (bias_dropout_add, bias_swiglu,
// Transformer Engine's fused QKV and fc1 linears).
enum class ElementwiseKernels : std::uint8_t { eager, fused };

// Float8 linears (StrategyConfig::fp8): the GEMMs of a layer's linear layers (QKV, projection,
// MLP) run in fp8, forward and backward; everything else (attention core, norms, the output
// layer, gradients, collectives) stays in the model's dtype.
//   none     no fp8
//   te       Transformer Engine's fp8 recipe on Hopper (transformer_engine/pytorch/module/linear.py,
//            layernorm_linear.py, layernorm_mlp.py, TE 1.x as Megatron-LM, NeMo and llm-foundry's
//            amp_fp8 ran it): a linear's input is cast to fp8 together with its transpose for the
//            weight gradient (fp8_cast_transpose_fused) and saved in fp8, the norms before QKV and
//            fc1 and the activation before fc2 write fp8 themselves; the gradient of each output is
//            cast and transposed the same way in the backward; the weights are cast (with their
//            transpose) into fp8 copies the module keeps, once a step when the framework says which
//            microbatch is the first (is_first_microbatch: Megatron-LM), every microbatch otherwise.
//   torchao  torchao's Float8Linear with dynamic tensorwise scaling (torchtitan's float8 option;
//            torchao/float8/float8_linear.py): every operand of every fp8 GEMM scaled by its own
//            amax (a read) and cast (a read and an fp8 write), the weights every microbatch; the
//            inputs are saved in high precision and cast again in the backward.
enum class Fp8 : std::uint8_t { none, te, torchao };
std::string_view fp8_name(Fp8 f);

// Per logit (one element of s b V / t): the bytes the loss moves forward and backward
// (loss_bytes_per_logit), what it keeps from its forward to its backward and what is alive at its
// peaks (loss_memory_per_logit), counted op by op:
//   pytorch   forward: upcast (read 2, write 4), log_softmax (read 4 for its reductions, read 4 and
//             write 4 for its output) = 18; backward: nll_loss's gradient (write 4), log_softmax's
//             backward (read 4 + 4, write 4), the cast back to bf16 (read 4, write 2) = 22.
//             Keeps log_softmax's fp32 output (4); forward peak: bf16 logits, their fp32 copy and
//             the output (10); backward peak: the output, nll's gradient and log_softmax's (12).
//   megatron  forward: upcast (2 + 4), max (4), subtract, exp and divide in place (8 each), sum
//             (4) = 38; backward: the gradient times the incoming one in place (8), cast (6) = 14.
//             Keeps the fp32 softmax (4); both peaks the bf16 logits or gradient beside it (6).
//   fused     flash-attn's Triton cross-entropy (flash_attn/ops/triton/cross_entropy.py,
//             CrossEntropyLoss, Dao-AILab/flash-attention v2.5.6; llm-foundry's default loss_fn
//             "fused_crossentropy", llmfoundry/models/mpt/modeling_mpt.py at mosaicml/llm-foundry
//             commit 49521837): forward reads the bf16 logits once (2), saves them with one fp32
//             log-sum-exp per row (ctx.save_for_backward(logits, lse, labels)); backward reads them
//             and writes their gradient into a new bf16 tensor (torch.empty_like(logits):
//             inplace_backward is off) = 4. Keeps the logits (2); forward peak 2, backward peak 4.
// Measured in eager PyTorch 2.11 on an H100 (calibration/data/h100_dtsim_torch_output_layer.json):
// kept / forward peak / backward peak 4.06 / 10.06 / 12.06 bytes (pytorch), 4.06 / 6.06 / 6.06
// (megatron), the .06 being the final norm's output. pytorch's kernels reduce over each row and
// move more than its 18 and 22 bytes at the streaming rate: it moves the GPU's timed bytes
// (EagerKernelBytes::loss; on an H100 kPytorchLossForwardBytes and kPytorchLossBackwardBytes).
// megatron's and fused's are their counts (no kernel of theirs was timed).
PassBytes loss_bytes_per_logit(CrossEntropy c, const EagerKernelBytes& timed);
struct LossMemory {
    double kept = 0, forward_peak = 0, backward_peak = 0;
};
LossMemory loss_memory_per_logit(CrossEntropy c);

struct TransformerSpec {
    std::string name;
    int layers = 1;
    int hidden = 512;
    int heads = 8;
    int kv_heads = 8;  // grouped-query attention; = heads for multi-head attention
    int ffn = 2048;
    int seq = 256;
    int vocab = 0;     // 0: no embedding / output layer (the puzzle model)
    DType dtype = DType::bf16;
    Mlp mlp = Mlp::gelu;
    bool tied_embeddings = true;
    // Hidden dropout after the attention and MLP blocks (GPT-2/3 and Megatron-LM's default
    // rate 0.1): each keeps a one-byte mask for the backward. Llama and MPT train without.
    bool dropout = true;

    [[nodiscard]] double head_dim() const { return static_cast<double>(hidden) / heads; }
    // Weights of one layer: QKV, output projection, MLP, two norms (biases ignored).
    [[nodiscard]] double params_per_layer() const;
    // Input embedding plus, when not tied, the output layer.
    [[nodiscard]] double embedding_params() const;
    [[nodiscard]] double total_params() const;
};

// Transformer Engine's userbuffers (Megatron-LM's --tp-comm-overlap) overlap a linear's GEMM with
// a tensor-parallel collective, each overlap configured by an entry of its ub_cfgs
// (StrategyConfig::tp_overlap). What such an overlap takes from the GEMMs: `held` SMs, which its
// communication kernel occupies while it runs (the GEMM beside it runs on the others), and
// `margin` SMs, which the GEMM leaves it from start to end (set_sm_margin:
// comm_gemm_overlap.cpp, _math_sms = multiProcessorCount - num_comm_sm).
struct UbSms {
    int held = 0;
    int margin = 0;
    bool operator==(const UbSms&) const = default;
};
// The overlaps by their userbuffers names, the attention block's and then the MLP block's, each
// block's in the same roles: its first forward GEMM's all-gather, its last forward GEMM's
// reduce-scatter, the backward's all-gather of the output gradient (with the last linear's
// input-gradient GEMM), and the bulk all-gather of the first linear's input (beside that
// linear's input-gradient GEMM) and reduce-scatter of its input gradient (beside its
// weight-gradient GEMM).
enum class UbLayer : std::uint8_t {
    qkv_fprop, proj_fprop, proj_dgrad, qkv_dgrad, qkv_wgrad,
    fc1_fprop, fc2_fprop, fc2_dgrad, fc1_dgrad, fc1_wgrad,
};
inline constexpr std::size_t kUbLayers = 10;
inline constexpr std::size_t kUbRoles = 5;  // per block: first, last, dgrad_gather, bulk_gather, bulk_scatter
inline constexpr std::array<const char*, kUbLayers> kUbLayerNames{
    "qkv_fprop", "proj_fprop", "proj_dgrad", "qkv_dgrad", "qkv_wgrad",
    "fc1_fprop", "fc2_fprop", "fc2_dgrad", "fc1_dgrad", "fc1_wgrad",
};
using UbConfig = std::array<UbSms, kUbLayers>;

// How one layer is split: tensor-parallel degree t, sequence parallelism, recompute policy.
struct LayerSplit {
    int micro_batch = 1;
    int tp = 1;
    bool sequence_parallel = false;
    Recompute recompute = Recompute::none;
    // Fused attention (FlashAttention) never stores the s x s scores: the
    // 5 a s^2 b term goes, as with selective recompute.
    bool flash_attention = false;
    // With flash_attention: the fused kernel whose measured curve prices the attention
    // core (GpuSpec::attention_seconds); without a curve, the core is priced as GEMMs.
    std::string attention_kernel = "flash2";
    // The dtype gradients are accumulated and reduced in (StrategyConfig::grad_dtype).
    DType grad_dtype = DType::fp32;
    CrossEntropy cross_entropy = CrossEntropy::pytorch;
    Fp8 fp8 = Fp8::none;
    // te only: the fp8 weight copies are made once a step (the framework passes
    // is_first_microbatch), not every microbatch.
    bool fp8_weight_cache = false;
    // The dtype of Adam's moments and master weights (StrategyConfig::optimizer_dtype), and
    // whether the optimizer is Apex's (StrategyConfig::distributed_optimizer "apex").
    DType optimizer_dtype = DType::fp32;
    bool apex_optimizer = false;
    // Which layers `recompute` applies to; the others keep everything (Recompute::none).
    //   recompute_every k: every k-th layer, the k-th, 2k-th, ... (torchtitan's
    //     selective_ac_option "k", full recompute of every k-th block: torchtitan/models/llama3/
    //     parallelize_llama.py, _apply_ac_to_transformer_block); 1 = every layer.
    //   recompute_num_layers n: the first n layers of each model chunk (a pipeline stage, or a
    //     virtual stage when interleaved), the chunks starting at chunk_starts (Megatron-LM's
    //     --recompute-method block --recompute-num-layers n: TransformerBlock's
    //     _checkpointed_forward checkpoints its layers l < n); 0 = every layer.
    int recompute_every = 1;
    int recompute_num_layers = 0;
    // Full recompute stops after the last tensor the backward saved (StrategyConfig::
    // recompute_early_stop): the MLP block's last GEMM and what follows it do not run again.
    bool recompute_early_stop = false;
    // The first layer of each model chunk, ascending from 0 (uneven chunks as the config's
    // stage_layers split them); empty: one chunk.
    std::vector<int> chunk_starts{};
    // Context parallelism: each GPU holds seq / cp tokens of every sequence (two chunks of
    // seq / 2cp, one from each end, so the causal mask leaves each the same work: Megatron-Core's
    // and Transformer Engine's load balancing). The functions of this header take the model's
    // seq as given: make_workload passes a copy whose seq is the GPU's share.
    int cp = 1;
    // The ring is Transformer Engine's (AttnFuncWithCPAndKVP2P, as Megatron-Core runs it), whose
    // buffers and partial results cost element-wise work of their own (te_context_parallel_bytes).
    bool te_context_parallel = false;
    // The ring is PyTorch's (torchtitan's context parallelism, pytorch_context_parallel_bytes): its
    // merges cost element-wise work, and its backward passes the key and value gradients round the
    // ring in fp32, one transfer a step (LayerWork::cp_grad_bytes).
    bool pytorch_context_parallel = false;
    // Context parallelism gathers the keys and values (StrategyConfig::cp_comm "allgather") instead
    // of passing them round the ring.
    bool cp_gather = false;
    // Each block compiled with torch.compile (compiled_elementwise_bytes, layer_activation_bytes).
    bool compiled = false;
    // The keys and values copied to every query head before the attention core
    // (StrategyConfig::repeat_kv): the core, context parallelism's exchanges and the tensors
    // kept for the backward see a / t heads of keys and values, not kv / t.
    bool repeat_kv = false;
    // The rotary embedding's kernel in eager blocks (RopeKernel; layer_split resolves the default).
    RopeKernel rope = RopeKernel::none;
    // How eager blocks run their element-wise work (layer_split resolves the default).
    ElementwiseKernels elementwise = ElementwiseKernels::fused;
    // Each block's norm as separate eager kernels (StrategyConfig::norm_kernel "composed"):
    // kComposedRmsNormBytes per element instead of the GPU's timed norm bytes (EagerKernelBytes::norm),
    // twice it in the backward. No effect on compiled blocks, whose norms Inductor fuses.
    bool composed_norm = false;
    // The SMs Transformer Engine's userbuffers take from each overlapped linear
    // (StrategyConfig::tp_overlap); all zero without it.
    UbConfig ub{};
    // The backward runs Transformer Engine's bulk overlaps (the first linear's input gathered beside
    // its input-gradient GEMM, its input gradient reduce-scattered beside its weight-gradient GEMM):
    // tp_comm_overlap under Megatron's tensor parallelism (te_userbuffers in strategies.hpp).
    bool userbuffers = false;
    // `recompute` applies to `layer` (counted from 0 over the whole model).
    [[nodiscard]] bool recomputes(int layer) const {
        if (recompute == Recompute::none) return false;
        if (recompute_every > 1) return (layer + 1) % recompute_every == 0;
        if (recompute_num_layers > 0) {
            const auto next = std::upper_bound(chunk_starts.begin(), chunk_starts.end(), layer);
            const int start = next == chunk_starts.begin() ? 0 : *(next - 1);
            return layer - start < recompute_num_layers;
        }
        return true;
    }
    // Some layers recompute and some do not.
    [[nodiscard]] bool partial_recompute() const {
        return recompute != Recompute::none && (recompute_every > 1 || recompute_num_layers > 0);
    }
};

// Forward FLOPs of one layer for one microbatch on one GPU (each /t):
//   qkv        2 b s h (h + 2 kv h/a)
//   attention  2 x 2 b s^2 h x 1/2   (QK^T and AV; causal masking halves both,
//                                      as FlashAttention's causal kernels skip the upper triangle;
//                                      unfused attention executes both in full: see LayerWork)
//   projection 2 b s h^2
//   mlp        2 b s h ffn x (2 or 3 matrices)
// Backward is twice the forward; recompute adds a forward (full) or the
// attention core (selective, Korthikanti et al. 2022 section 5).
struct LayerFlops {
    double qkv = 0, attention = 0, projection = 0, mlp = 0;
    [[nodiscard]] double attention_block() const { return qkv + attention + projection; }
    [[nodiscard]] double forward() const { return qkv + attention + projection + mlp; }
};
LayerFlops layer_flops(const TransformerSpec& m, const LayerSplit& s);

// Output layer (logits) forward FLOPs for one microbatch on one GPU: 2 b s h V / t.
double logits_flops(const TransformerSpec& m, const LayerSplit& s);

// The model FLOPs of one training step over `samples` sequences: forward and
// backward (3x forward) of every layer and of the logits, without recompute
// (the numerator of MFU, PaLM appendix B; attention counted with causal masking).
double model_flops_per_step(const TransformerSpec& m, double samples);

// Float8 linears (LayerSplit::fp8): the extra memory-bound bytes their casts move for one
// layer and one microbatch on one GPU, forward and backward, and per weight cast. Two bytes
// read and one written for a cast, one more written for its transpose, two more read for an amax:
//   te       forward: the projection's input cast with its transpose, 4 bytes an element (the
//            inputs of QKV, fc1 and fc2 come fp8 from the norm or activation kernel before
//            them); backward: the output gradients of QKV, the projection and fc2 cast with
//            their transposes, 4 bytes an element (fc1's is fused into the activation's
//            backward), and the transposes of the three fp8 inputs saved without one (QKV's,
//            fc1's and fc2's, 2 bytes an element); weights: cast with transpose, 4 bytes a
//            parameter.
//   torchao  forward: each of the four inputs amax and cast, 5 bytes an element; backward:
//            each output gradient amax and cast (5) and each input cast again (5); weights:
//            amax and cast, 5 bytes a parameter, forward and again in the backward.
// With sequence parallelism the h-wide tensors are cast before their all-gather, /t.
// The torchao counts are for fused casts: eager PyTorch runs each as five kernels (abs, amax,
// fp32 multiply, clamp, cast), measured at 42-50 ms a block where compiled blocks take 2-3 ms
// (calibration/data/h100_dtsim_torch_compile.json); in compiled blocks (LayerSplit::compiled)
// they move kCompiledTorchaoCastShare of these bytes.
struct Fp8CastBytes {
    double forward = 0, backward = 0;
    double per_weight = 0;  // bytes per parameter of each weight cast
    int weight_casts = 0;   // weight casts per microbatch (torchao: forward and backward)
};
Fp8CastBytes fp8_cast_bytes(const TransformerSpec& m, const LayerSplit& s);

// Bytes of activations one layer keeps for one microbatch until its backward
// (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
// Transformer Models", section 4 and Table 2), for a layer of the general
// shape with s seq, b microbatch, h hidden, a heads, t = tp:
//   kept whole on every TP rank (norm inputs, attention and MLP inputs, two
//   dropout masks):                      10 sbh          (/t with sequence parallelism)
//   split by TP: Q, K, V and projection input (4 + 4 kv/a) sbh, the MLP's
//   intermediate ffn-wide tensors (4 or 8; 6 for SwiGLU with fused element-wise
//   kernels, kFusedSwigluKept) sb ffn                                          (/t)
//   attention core (softmax, its dropout mask and output): 5 a s^2 b           (/t)
// For GPT (ffn = 4h, kv = a) this is sbh(34 + 5as/h) without parallelism,
// sbh(10 + 24/t + 5as/(ht)) with TP and sbh/t (34 + 5as/h) with TP+SP, as in
// the paper. Without dropout (TransformerSpec::dropout false) the two masks, 2sbh
// of the 10, are not kept. Selective recompute (and fused attention) drops the
// attention core; full recompute keeps only the layer input, 2sbh (/t with SP).
// selective_op is torchtitan's per-op policy (torchtitan/models/llama3/
// parallelize_llama.py, _save_list with its mm counter): it keeps the layer input,
// the fused attention's output and every second matrix product's output in forward
// order (the first, third, ...), and recomputes everything else. Llama (SwiGLU) has
// seven products, wq wk wv wo w1 w3 w2: it keeps wq's, wv's, w1's and w2's outputs,
// (8 + 2kv/a) sbh + 2 sb ffn; GPT (GeLU, fused QKV) has four, qkv proj fc1 fc2: it keeps
// qkv's and fc1's, (6 + 4kv/a) sbh + 2 sb ffn. Row-parallel outputs (wo, w2) are whole
// on each TP rank, the others /t. Measured in eager PyTorch 2.11 on an H100
// (calibration/data/h100_dtsim_torch_memory.json): 15.53 sbh for Llama 3 8B, 18.03 for
// an MPT-style block, exactly these plus the fp32 log-sum-exp.
// Float8 linears with Transformer Engine (Fp8::te) keep the inputs of the four linears in
// fp8: the QKV and fc1 inputs (2 sbh of the kept-whole part) and fc2's (sb ffn of the split
// part) take one byte an element, not two. The projection's fp8 input is one byte more beside
// a fused attention core, which keeps its bf16 output for its own backward (Transformer
// Engine's FusedAttnFunc and flash-attn save `out`), and one byte less beside an unfused one.
// That is Transformer Engine 1.x's recipe, as `te` prices it. Not modelled: from Megatron-Core
// 0.14 with Transformer Engine 2.6 and a recipe other than delayed scaling, the projection keeps
// its bf16 input, the core's output itself (megatron/core/transformer/attention.py,
// set_save_original_input), one byte less again. torchao keeps them in high precision.
// Compiled blocks (LayerSplit::compiled) keep what Inductor's partitioner saves, measured on one
// H100 (calibration/data/h100_dtsim_torch_compile.json): with no recompute a SwiGLU block keeps
// no product of its gate (2 sb ffn / t less: Llama 3 8B and the TP8 shares of 70B and 405B),
// a GeLU block the same as eager; with torchao's float8 linears both keep 2 sb ffn / t + 4 sbh
// (/t with SP) less again (all four shapes); with selective_op 2 sbh less (/t with SP; Llama 3
// 8B); full recompute keeps the input as eager does.
double layer_activation_bytes(const TransformerSpec& m, const LayerSplit& s);
// Megatron-Core's fused SwiGLU (megatron/core/fusions/fused_bias_swiglu.py, SwiGLUFunction and
// BiasSwiGLUFunction: save_for_backward(input) and the backward recomputes SiLU from it), which its
// MLP runs with bias_activation_fusion (Megatron-LM's default --bias-swiglu-fusion): it keeps the
// fc1 output of both halves, 4 bytes per ffn element, and fc2 keeps the activation, 2 more.
inline constexpr double kFusedSwigluKept = 6;
// The layer's activations while its backward runs after a full recompute (what
// `none` keeps, with or without the attention core as flash_attention says),
// present for one layer at a time; after selective_op's recompute, what it
// recomputed (`none`'s bytes less what it kept). 0 for the other policies.
double layer_recompute_peak_bytes(const TransformerSpec& m, const LayerSplit& s);
// What the loss keeps on the last stage from its forward to its backward: 4 s b V / t
// (fp32 log-probabilities or softmax, loss_bytes_per_logit).
double logits_activation_bytes(const TransformerSpec& m, const LayerSplit& s);

// The eager kernels of a layer, the loss and the optimizer step, each as GpuSpec::memory_seconds
// prices it alone: bytes an element of its input with elements of `e` bytes (the loss: a logit;
// Adam: a parameter of fp32 state, weights and gradient), forward and backward. The timed kinds
// are `timed`'s (measured in bf16: x e / 2); the streaming ones their counts, reads and writes
// of e bytes each: a residual add 3e forward (two reads, a write; its backward, the gradients'
// sum where the residual stream branches, 3e), GeLU 2e and 3e (the input's gradient from the
// input and the output's), SwiGLU's silu then product of gate and up (over the width of one of
// them) 5e and 9e.
enum class EagerKernel : std::uint8_t { norm, dropout, rope, residual_add, gelu, swiglu, loss, adam };
PassBytes eager_kernel_bytes(EagerKernel kind, const EagerKernelBytes& timed, double e);
// The kinds an EagerKernelBytes holds, in its order: each one's key in cluster.gpu.eager_kernels
// (timed_key), its name in prose ("norms", "the rotary embedding": timed_name), its figures in a
// table (timed_figures; Adam's factor as the forward, no backward) and their replacement
// (set_timed_figures).
inline constexpr EagerKernel kTimedKernels[] = {EagerKernel::norm, EagerKernel::dropout, EagerKernel::rope,
                                                EagerKernel::loss, EagerKernel::adam};
bool timed_kind(EagerKernel k);
std::string_view timed_key(EagerKernel k);
std::string_view timed_name(EagerKernel k);
PassBytes timed_figures(const EagerKernelBytes& t, EagerKernel k);
void set_timed_figures(EagerKernelBytes& t, EagerKernel k, PassBytes figures);
// The kinds a run of `m` split as `s` prices by the GPU's timed bytes (EagerKernelBytes), in its
// fields' order: a fused norm (not composed, not compiled), eager hidden dropout, the complex
// rotary embedding (not compiled: Inductor's kernels take those three), PyTorch's loss, Adam.
std::vector<EagerKernel> timed_kernels_of(const TransformerSpec& m, const LayerSplit& s);

// Transformer Engine's context parallelism over a ring (AttnFuncWithCPAndKVP2P in
// transformer_engine/pytorch/attention.py, TE v1.10, Megatron-Core's cp_comm_type "p2p"): beyond
// the core's cp steps, the element-wise work on its buffers and partial results, counted from the
// code for the sbhd layout (whose half-sequence slices are views, not copies) with fused (cuDNN)
// attention in bf16, with `o` the bytes of this GPU's queries (and output) and `kv` those of its
// keys and values together:
//   forward   the keys and values concatenated into the first ring buffer (a read and a write of
//             kv), the output zeroed (a write of o), and each step's partial output folded into it
//             with the log-sum-exp correction (flash_attn_fwd_out_correction, one kernel where
//             its jit_fuser is torch.compile: read the step's output and the sum, write the sum:
//             3 o a full step);
//   backward  the keys and values copied into the first buffer (2 kv), each step's dq added into
//             dq (3 o a full step, the first a copy, 2 o), its dk and dv concatenated (2 kv) and
//             added into the gradient buffer that goes round the ring (3 kv, the first a copy).
// On a ring of cp ranks, rank r runs r + 1 steps on all its queries and cp - 1 - r on half of them
// (the second half), r steps on half its keys and values and cp - r on all: (3 cp + 1) / 4 full
// steps of each, on average over the ring's ranks, which is what every rank is given (the "first
// a copy" terms hold on that average, not rank by rank). Not counted: the flash-attn backend's
// extra copies and per-step zeroing, and fp8 attention (NVTE_FP8_DPA), whose path differs.
PassBytes te_context_parallel_bytes(int cp, double o, double kv);

// PyTorch's context parallelism (torchtitan's; torch/distributed/tensor/experimental/_attention.py,
// read at 0123248a: _templated_ring_attention and its backward, _SDPAMerger, _partial_update):
// beyond the core's cp steps, the element-wise work on its buffers and partial results, with `o`
// the bytes of this GPU's queries (and output) and `kv` those of its keys and values together, in
// elements of `e` bytes; O = o / e and K = kv / e elements. It keeps its partial results in fp32
// (convert_to_f32): a cast to or from fp32 costs e + 4 an element, nothing where e is 4 already.
// `gather`: the allgather rotate method, else the ring's (alltoall). The bytes are priced with the
// attention block's element-wise work, not placed between the ring's steps. Eager, per step:
//   forward   each step's output cast to fp32 (e + 4 an element); from the second step merged into
//             the sum (out - sigmoid(lse' - lse) (out - out'): three passes, 12 + 8 + 12 bytes), a
//             step on half the queries on that half, then the sum rebuilt whole by torch.cat
//             (8); the result cast back (4 + e). The keys and values made contiguous (2 kv) and
//             concatenated for the next rank at every step but the last (2 kv each), whatever the
//             rotate method (allgather sends only the first).
//   backward  fp32 sums of the query and key/value gradients zeroed (4 each); each step's
//             gradients (in e) added in (8 + e), a half-size one into its half and the whole rebuilt
//             by torch.cat (8 more); the key/value sum concatenated for the next rank every step
//             (8 on K); both cast back at the end (4 + e); the keys and values made contiguous and
//             concatenated as in the forward.
// Compiled (torchtitan compiles each block with fullgraph, the ring inside it; counted as Inductor
// fuses it, one pass a step between the attention kernels, dead concatenations dropped, and the
// contiguous copies folded into what produces the keys and values):
//   forward   a merge reads the sum and the step's output and writes the sum (8 + e; a step on half
//             the queries 8 + e / 2, the cat folded in), the first reading the first step's output
//             in e and the last writing the result in e; the first concatenation (the allgather's
//             input, or the ring's first send) and the ring's later ones (2 kv each);
//   backward  the same for the query gradient's sum and the key/value sum (the first a cast, 4 + e;
//             the last cast back, 4 + e on K) and the same concatenations.
// A rank r of the ring runs r of its cp - 1 later steps on all its queries and half the keys and
// values and cp - 1 - r on half its queries and all of them: half of each on average over the
// ring, which every rank is given. The log-sum-exps (1 / head_dim of the output) are not counted.
PassBytes pytorch_context_parallel_bytes(int cp, double o, double kv, double e, bool compiled, bool gather);
// The memory PyTorch's ring holds while its core runs (same source and units), beyond what the
// layer keeps: the gathered keys and values of every rank (cp kv) and the gather's input, a
// concatenation (kv); or, passed round the ring, three buffers of them (the one the step reads,
// the one sent on, the one arriving); and the fp32 sum of the output (4 O). The backward holds the
// same keys and values, three fp32 sums of their gradients (the one added into, the one sent on,
// the one arriving: 4 K each) and the query gradient's fp32 sum (4 O). Not counted: a step's own
// outputs, the eager merges' temporaries and the eager contiguous copy of the keys and values (kv,
// held beside the gather through the first step).
PassBytes pytorch_context_parallel_memory(int cp, double o, double kv, double e, bool gather);

// The memory-bound work of one eager layer (norms, residual adds, hidden dropout, the MLP's
// activation, and the gradient sums of the backward) for one microbatch, by block and pass, as the
// bytes GpuSpec::memory_seconds prices. Per token, with h' = h (/t with SP), f = ffn / t and e the
// bytes of an element:
//   norm            the GPU's timed norm bytes (EagerKernelBytes::norm) x h' each block (x e / 2)
//   residual add    forward 3e x h' each block (two reads, a write); backward, the sum of the two
//                   gradients where the residual stream branches, 3e x h'
//   hidden dropout  (TransformerSpec::dropout) eager: the GPU's timed dropout bytes
//                   (EagerKernelBytes::dropout) x h' (x e / 2); fused into the residual add (Megatron's bias_dropout_add):
//                   a one-byte mask written more forward, the gradient times the mask backward
//                   (2e + 1) x h'
//   activation      GeLU 2e forward, 3e backward x f; SwiGLU eager (silu, then its product with
//                   the up projection; backward two products and silu's gradient) 5e, 9e x f,
//                   fused (one kernel over the gate and up halves) 3e, 5e x f
//   gradient sums   eager SwiGLU models (torchtitan's Llama: wq, wk and wv, and w1 and w3, are
//                   separate linears on one input): autograd sums their input gradients, 2 + 1
//                   adds of 3e x h a layer; fused code (one QKV and one fc1 GEMM) has none
// The streaming kinds' pass counts are checked against the eager kernels timed on an H100
// (calibration/data/h100_dtsim_torch_kernels.json elementwise: residual_add, gelu_tanh, swiglu,
// at 2.89 TB/s within 4 %). Compiled blocks use compiled_elementwise_bytes instead.
struct ElementwiseBytes {
    double attention_forward = 0, mlp_forward = 0;
    double attention_backward = 0, mlp_backward = 0;
    double residual = 0;  // one block's residual add forward, hidden dropout included
};
// Norms (fused or eager) and eager hidden dropout are priced by the GPU's timed bytes `timed`
// (EagerKernelBytes::norm, dropout), scaled from bf16 to the model's element size.
ElementwiseBytes layer_elementwise_bytes(const TransformerSpec& m, const LayerSplit& s, const EagerKernelBytes& timed);

// RMSNorm written as tensor operations and run eagerly, one kernel each: torchtitan's RMSNorm
// module until March 2025 (torchtitan/models/norms.py: x.float(), pow(2), mean(-1), + eps,
// rsqrt, x * rsqrt, type_as(x), * weight; replaced by nn.RMSNorm in torchtitan 3b39d7ab), and
// PyTorch's nn.RMSNorm itself before its fused CUDA kernel (pytorch PR 153666, May 2025). Per
// element of a bf16 input, forward: the upcast reads 2 bytes and writes 4, the square and the
// normalising product read and write 4 each, the mean reads 4, the downcast reads 4 and writes 2,
// the weight's product reads and writes 2 (the per-token mean and rsqrt are negligible): 36
// bytes, in place of a fused norm's timed bytes (EagerKernelBytes::norm); the backward twice that.
inline constexpr double kComposedRmsNormBytes = 2 + 4 + 4 + 4 + 4 + 4 + 4 + 4 + 2 + 2 + 2;

// The memory-bound work of one compiled layer (LayerSplit::compiled: torch.compile of each block,
// as torchtitan does), forward and backward together for one microbatch, as the bytes
// GpuSpec::memory_seconds prices: Inductor fuses the norms, residual adds, activation, rotary
// embedding and casts between the GEMMs and the attention kernel into generated kernels. Three
// classes of those kernels, each per token per element of its width:
//   norms and residual adds   kCompiledNormBytes x h (/t with SP), half to each block
//   the MLP's activation      kCompiledSwigluBytes (kCompiledGeluBytes) x ffn / t
//   around the attention      kCompiledRotaryBytes x (heads + kv heads) x head_dim / t for SwiGLU
//                             models (torchtitan's complex rotary embedding, partly left to eager
//                             kernels, and repeat_kv), kCompiledQkvBytes x (heads + 2 kv heads) x
//                             head_dim / t for GeLU ones (the fused QKV gradient's stacking)
// Fitted to the kernels' GPU time (bytes = time x the H100's memory_seconds bandwidth, 2.89 TB/s)
// of compiled blocks profiled on one H100 (PyTorch 2.11, calibration/data/
// h100_dtsim_torch_compile.json): Llama 3 8B, TP8 shares of 70B and 405B, an MPT-style 1B block.
// Class by class the shapes lie within -12 to +27 % of the fitted coefficient (norms), -3.5 to
// +7 % (rotary) and 2 % (activation); the block totals within -18 % (405B's share) to +7 %.
struct CompiledElementwiseBytes {
    double attention = 0, mlp = 0;
};
inline constexpr double kCompiledNormBytes = 54.4;
inline constexpr double kCompiledSwigluBytes = 14.8;
inline constexpr double kCompiledGeluBytes = 9.53;
inline constexpr double kCompiledRotaryBytes = 43.4;
inline constexpr double kCompiledQkvBytes = 3.81;
CompiledElementwiseBytes compiled_elementwise_bytes(const TransformerSpec& m, const LayerSplit& s);
// torchao's float8 casts in compiled blocks: this share of what Fp8CastBytes counts for torchao
// (activations and weights). Fitted as above to the compiled float8 blocks' memory-bound time
// less the compiled bf16 blocks': 0.78 (Llama 3 8B), 0.93 and 0.94 (70B's and 405B's TP8
// shares), 1.23 (MPT-style 1B); their geometric mean. (Over 1 where Inductor's cast kernels reach
// less of the streaming rate than the count's fused casts would.)
inline constexpr double kCompiledTorchaoCastShare = 0.958;

// Adam's state per parameter, in bytes: its two moments (exp_avg, exp_avg_sq) and a master copy
// of the weights, each in the optimizer's dtype; no master where the weights already are in it.
// The rule is NeMo's for Apex's DistributedFusedAdam (megatron_base_model.py, setup_optimization,
// NVIDIA/NeMo r2.0.0rc1 commit db624485: store_params False when optim.dtype equals the model's
// dtype), and what PyTorch's Adam keeps on parameters of its own dtype; the state tensors are
// apex/contrib/optimizers/distributed_fused_adam.py's StateBucket (exp_avg_shard, exp_avg_sq_shard,
// params_shard, all in `dtype`; NVIDIA/apex commit f3f04924). fp32 moments and master: 8 + 4, the
// 12 of ZeRO; NeMo's Nemotron-4 340B (optim.dtype bf16 with bf16 weights): 4 + 0.
// Apex's optimizer as NeMo sets it up (`apex`) differs twice: with fp32 state over 16-bit weights
// it keeps the 16 bits an fp32 master has beyond them (store_param_remainders: param_remainders_shard,
// int16), 2 bytes, not 4; and each bucket's reduce-scattered gradient shard stays beside the
// contiguous gradient buffer until the step (_finish_bucket_grad_sync: grads_shard =
// sync_grads_shard), G/N more, where Megatron-Core's distributed optimizer reduce-scatters into its
// buffer in place.
struct AdamStateBytes {
    double moments = 8;
    double master = 4;
    bool remainders = false;  // `master` is the 16-bit remainder of an fp32 master (Apex)
    bool grad_shard = false;  // the optimizer keeps the reduce-scattered gradient shard (Apex)
    [[nodiscard]] double total() const { return moments + master; }
};
AdamStateBytes adam_state_bytes(DType weights, DType optimizer, bool apex = false);

// Model states per GPU for `params` parameters held by the data-parallel group of `dp` GPUs at
// ZeRO `stage` (Rajbhandari et al. 2020, ZeRO, section 5): W bytes of weights (weight_bytes: 2 in
// bf16), G of gradients (grad_bytes: 4 in fp32, 2 in bf16) and Adam's state A (AdamStateBytes: 12
// with fp32 moments and master) per parameter:
//   stage 0: (W + G + A)P   stage 1: (W + G)P + AP/N   stage 2: WP + (G + A)P/N
//   stage 3: (G + A)P/N with a master copy, (W + G + A)P/N without
// (stages 1 and 2 with Apex's gradient shard: GP/N more).
// With W = 2, A = 12 and G = 2 the first three are ZeRO's 16P, 4P + 12P/N, 2P + 14P/N; with G = 4
// Megatron-LM's bf16 figures (docs/source/api-guide/dist_optimizer.md: 18 bytes per parameter,
// 6 + 12/d with the distributed optimizer). Stage 3 is PyTorch FSDP's: the sharded parameter is
// the only copy of the weights it keeps (torch/distributed/_composable/fsdp/_fsdp_param.py,
// ShardedState.SHARDED, "the only contributor to parameter memory", pytorch/pytorch commit
// 007472c8; FSDP1's FlatParameter shard likewise), kept in the dtype the model was built in,
// which is the master's under mixed precision; the bf16 weights exist only gathered. So 16P/N with
// fp32 gradients, not DeepSpeed's ZeRO-3 figure with its extra bf16 shard.
struct ModelStateBytes {
    double weights = 0, grads = 0, optimizer = 0;
    [[nodiscard]] double total() const { return weights + grads + optimizer; }
};
ModelStateBytes zero_model_states(double params, int stage, int dp, double grad_bytes = 2, AdamStateBytes adam = {},
                                  double weight_bytes = 2);

// Bytes the Adam step reads and writes per parameter it updates: its state read and written
// (2A), the gradient read (G) and the weights written (W), or read and written where there is no
// master copy or the master is a remainder of them (the step updates them in place). fp32 state,
// bf16 weights: 24 + G + 2; Apex with remainders: 16 + 2 (2 + 2) + G. All x the GPU's timed factor
// (EagerKernelBytes::adam), as GpuSpec::memory_seconds prices the Adam step as one fused
// multi-tensor kernel (torch.optim.AdamW(fused=True), torchtitan's default; Apex's and Transformer
// Engine's FusedAdam in Megatron-LM), which moves its bytes below the streaming rate.
double adam_bytes_per_param(const EagerKernelBytes& timed, double grad_bytes, AdamStateBytes adam = {},
                            double weight_bytes = 2);

}  // namespace dtsim::hw
