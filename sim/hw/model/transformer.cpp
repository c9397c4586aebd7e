#include "dtsim/hw/transformer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

#include <stdexcept>

namespace dtsim::hw {

std::string_view recompute_name(Recompute r) {
    switch (r) {
        case Recompute::none: return "none";
        case Recompute::selective: return "selective";
        case Recompute::selective_op: return "selective_op";
        case Recompute::full: return "full";
    }
    return "?";
}

std::string_view cross_entropy_name(CrossEntropy c) {
    return c == CrossEntropy::megatron ? "megatron" : c == CrossEntropy::fused ? "fused" : "pytorch";
}

PassBytes rope_bytes(RopeKernel kernel, double element_bytes, const EagerKernelBytes& timed) {
    switch (kernel) {
        case RopeKernel::complex: return eager_kernel_bytes(EagerKernel::rope, timed, 2);
        case RopeKernel::fused: return {kFusedRopeReads * element_bytes, kFusedRopeReads * element_bytes};
        case RopeKernel::none: break;
    }
    return {};
}

std::string_view fp8_name(Fp8 f) {
    switch (f) {
        case Fp8::none: return "none";
        case Fp8::te: return "te";
        case Fp8::torchao: return "torchao";
    }
    return "?";
}

PassBytes loss_bytes_per_logit(CrossEntropy c, const EagerKernelBytes& timed) {
    if (c == CrossEntropy::megatron) return {38, 14};
    if (c == CrossEntropy::fused) return {2, 4};
    return eager_kernel_bytes(EagerKernel::loss, timed, 2);
}

LossMemory loss_memory_per_logit(CrossEntropy c) {
    if (c == CrossEntropy::megatron) return {4, 6, 6};
    if (c == CrossEntropy::fused) return {2, 2, 4};
    return {4, 10, 12};
}

namespace {
double mlp_matrices(const TransformerSpec& m) { return m.mlp == Mlp::gelu ? 2 : 3; }
double kv_ratio(const TransformerSpec& m) { return static_cast<double>(m.kv_heads) / m.heads; }
}  // namespace

double TransformerSpec::params_per_layer() const {
    const double h = hidden;
    const double qkv = h * h * (1 + 2 * kv_ratio(*this));
    const double proj = h * h;
    const double mlp_weights = mlp_matrices(*this) * h * ffn;
    const double norms = 2 * h;
    return qkv + proj + mlp_weights + norms;
}

double TransformerSpec::embedding_params() const {
    const double e = static_cast<double>(vocab) * hidden;
    return tied_embeddings ? e : 2 * e;
}

double TransformerSpec::total_params() const { return layers * params_per_layer() + embedding_params(); }

LayerFlops layer_flops(const TransformerSpec& m, const LayerSplit& s) {
    const double b = s.micro_batch, S = m.seq, h = m.hidden, t = s.tp;
    LayerFlops f;
    f.qkv = 2 * b * S * h * h * (1 + 2 * kv_ratio(m)) / t;
    f.attention = 2 * b * S * S * h / t;  // 2 GEMMs x 2bs^2h, halved by the causal mask
    f.projection = 2 * b * S * h * h / t;
    f.mlp = 2 * b * S * h * m.ffn * mlp_matrices(m) / t;
    return f;
}

double logits_flops(const TransformerSpec& m, const LayerSplit& s) {
    return 2.0 * s.micro_batch * m.seq * m.hidden * m.vocab / s.tp;
}

double model_flops_per_step(const TransformerSpec& m, double samples) {
    const LayerSplit one{1, 1, false, Recompute::none};
    const double forward = m.layers * layer_flops(m, one).forward() + logits_flops(m, one);
    return 3 * forward * samples;
}

double layer_activation_bytes(const TransformerSpec& m, const LayerSplit& s) {
    const double b = s.micro_batch, S = m.seq, h = m.hidden, t = s.tp, a = m.heads;
    const double sbh = S * b * h;
    const double kept_whole = m.dropout ? 10 : 8;  // norm, attention and MLP inputs; the dropout masks
    const double whole = (s.sequence_parallel ? kept_whole / t : kept_whole) * sbh;
    // Q, K, V and the core's output; with repeat_kv the core keeps the copied keys and values.
    const double kept_kv = s.repeat_kv ? 1.0 : kv_ratio(m);
    // The MLP's ffn-wide tensors, a byte count per element: GeLU's input and output; eager SwiGLU's
    // two products, the gate's SiLU and their product; Megatron-Core's fused SwiGLU its input (the
    // two products) and its output, fc2's input (kFusedSwigluKept).
    const double mlp_kept = m.mlp == Mlp::gelu                                              ? 4
                            : s.elementwise == ElementwiseKernels::fused && !s.compiled ? kFusedSwigluKept
                                                                                            : 8;
    const double split = ((4 + 4 * kept_kv) * sbh + mlp_kept * S * b * m.ffn) / t;
    const double core = s.flash_attention ? 0 : 5 * a * S * S * b / t;
    if (s.fp8 == Fp8::te && (s.recompute == Recompute::none || s.recompute == Recompute::selective)) {
        // The four linears' inputs in fp8: QKV's and fc1's (kept whole) and fc2's in place of their
        // bf16 tensors, which nothing else keeps. The projection's is a copy when the attention is
        // fused, whose kernel keeps its bf16 output for its own backward; unfused, it replaces it.
        const double te_whole = (kept_whole - 2) * sbh / (s.sequence_parallel ? t : 1);
        const double te_split = split + ((s.flash_attention ? 1 : -1) * sbh - S * b * m.ffn) / t;
        return te_whole + te_split + (s.recompute == Recompute::none ? core : 0);
    }
    if (s.compiled && s.recompute == Recompute::none) {
        const double sb = S * b, h_whole = s.sequence_parallel ? h / t : h;
        double less = m.mlp == Mlp::swiglu ? 2 * sb * m.ffn / t : 0;
        if (s.fp8 == Fp8::torchao) less += sb * (2 * m.ffn / t + 4 * h_whole);
        return whole + split + core - less;
    }
    switch (s.recompute) {
        case Recompute::none: return whole + split + core;
        case Recompute::selective: return whole + split;
        case Recompute::selective_op: {
            const double input = s.sequence_parallel ? 2 * sbh / t : 2 * sbh;
            const double attention_out = 2 * sbh / t;
            const double kv = kv_ratio(m);
            // Every second product's output in forward order, from the first (2 bytes an element).
            const double products = m.mlp == Mlp::swiglu ? 2 * sbh / t + 2 * kv * sbh / t + 2 * S * b * m.ffn / t + 2 * sbh
                                                         : 2 * (1 + 2 * kv) * sbh / t + 2 * S * b * m.ffn / t;
            const double compiled = s.compiled ? (s.sequence_parallel ? 2 * sbh / t : 2 * sbh) : 0;
            return input + attention_out + products + core - compiled;
        }
        case Recompute::full: return s.sequence_parallel ? 2 * sbh / t : 2 * sbh;
    }
    return whole + split + core;
}

double layer_recompute_peak_bytes(const TransformerSpec& m, const LayerSplit& s) {
    LayerSplit all = s;
    all.recompute = Recompute::none;
    switch (s.recompute) {
        case Recompute::full: return layer_activation_bytes(m, all);
        case Recompute::selective_op: return layer_activation_bytes(m, all) - layer_activation_bytes(m, s);
        case Recompute::none:
        case Recompute::selective: break;
    }
    return 0;
}

double logits_activation_bytes(const TransformerSpec& m, const LayerSplit& s) {
    return loss_memory_per_logit(s.cross_entropy).kept * m.seq * s.micro_batch * m.vocab / s.tp;
}

namespace {
// Each timed kind's key in cluster.gpu.eager_kernels and its name in prose, in kTimedKernels' order.
struct TimedNames {
    EagerKernel kind;
    std::string_view key, name;
};
constexpr TimedNames kTimedNames[] = {{EagerKernel::norm, "norm", "norms"},
                                      {EagerKernel::dropout, "dropout", "dropout"},
                                      {EagerKernel::rope, "rope", "the rotary embedding"},
                                      {EagerKernel::loss, "loss", "the loss"},
                                      {EagerKernel::adam, "adam", "Adam"}};
constexpr bool in_table_order() {
    if (std::size(kTimedNames) != std::size(kTimedKernels)) return false;
    for (std::size_t i = 0; i < std::size(kTimedNames); ++i)
        if (kTimedNames[i].kind != kTimedKernels[i]) return false;
    return true;
}
static_assert(in_table_order());

const TimedNames* names_of(EagerKernel k) {
    const auto* it = std::find_if(std::begin(kTimedNames), std::end(kTimedNames),
                                  [k](const TimedNames& n) { return n.kind == k; });
    return it == std::end(kTimedNames) ? nullptr : it;
}
}  // namespace

bool timed_kind(EagerKernel k) { return names_of(k) != nullptr; }

std::string_view timed_key(EagerKernel k) {
    const TimedNames* n = names_of(k);
    return n ? n->key : std::string_view();
}

std::string_view timed_name(EagerKernel k) {
    const TimedNames* n = names_of(k);
    return n ? n->name : std::string_view();
}

namespace {
// The table's member for a timed kind other than Adam (whose figure is one factor), const or not.
template <class Table>
auto* timed_member(Table& t, EagerKernel k) {
    switch (k) {
        case EagerKernel::norm: return &t.norm;
        case EagerKernel::dropout: return &t.dropout;
        case EagerKernel::rope: return &t.rope;
        case EagerKernel::loss: return &t.loss;
        default: break;
    }
    return static_cast<decltype(&t.norm)>(nullptr);
}
}  // namespace

PassBytes timed_figures(const EagerKernelBytes& t, EagerKernel k) {
    if (k == EagerKernel::adam) return {t.adam, 0};
    const PassBytes* p = timed_member(t, k);
    return p ? *p : PassBytes{};
}

void set_timed_figures(EagerKernelBytes& t, EagerKernel k, PassBytes figures) {
    if (k == EagerKernel::adam) t.adam = figures.forward;
    else if (PassBytes* p = timed_member(t, k)) *p = figures;
}

PassBytes eager_kernel_bytes(EagerKernel kind, const EagerKernelBytes& timed, double e) {
    if (kind != EagerKernel::adam && timed_kind(kind)) {
        const PassBytes p = timed_figures(timed, kind);  // measured on bf16 tensors
        return {p.forward * e / 2, p.backward * e / 2};
    }
    switch (kind) {
        case EagerKernel::residual_add: return {3 * e, 3 * e};
        case EagerKernel::gelu: return {2 * e, 3 * e};
        case EagerKernel::swiglu: return {5 * e, 9 * e};
        case EagerKernel::adam: {
            const double moved = adam_bytes_per_param(timed, 4, adam_state_bytes(DType::fp32, DType::fp32), 4);
            return {moved, 0};
        }
        default: break;
    }
    return {};
}

PassBytes te_context_parallel_bytes(int cp, double o, double kv) {
    if (cp <= 1) return {};
    const double steps = (3.0 * cp + 1) / 4;
    return {2 * kv + o + 3 * steps * o, 2 * kv + (3 * steps - 1) * o + 2 * steps * kv + (3 * steps - 1) * kv};
}

PassBytes pytorch_context_parallel_bytes(int cp, double o, double kv, double e, bool compiled, bool gather) {
    if (cp <= 1) return {};
    const double O = o / e, K = kv / e, later = cp - 1.0;
    // A cast to or from fp32: a read and a write, nothing where the elements are fp32 already.
    const double cast = e < 4 ? e + 4 : 0;
    if (!compiled) {
        const double copies = 2 * kv + later * 2 * kv;  // contiguous, then a cat every step but the last
        const double full = cast + 32, half = cast / 2 + 16 + 8;
        const double forward = O * (cast + later / 2 * (full + half) + cast) + copies;
        const double add_full = 8 + e, add_half = (8 + e) / 2 + 8;
        const double sums = later / 2 * (add_full + add_half);
        const double query = O * (4 + add_full + sums + cast);
        const double keys = K * (4 + add_full + sums + 8 * cp + cast) + copies;
        return {forward, query + keys};
    }
    const double copies = (gather ? 1.0 : later) * 2 * kv;
    const double merges = later / 2 * ((8 + e) + (8 + e / 2));
    const double forward = O * (merges - 2 * (4 - e)) + copies;
    const double query = O * ((4 + e) + merges - (4 - e));
    const double keys = K * ((4 + e) + merges + cast) + copies;
    return {forward, query + keys};
}

PassBytes pytorch_context_parallel_memory(int cp, double o, double kv, double e, bool gather) {
    if (cp <= 1) return {};
    const double keys = gather ? (cp + 1.0) * kv : 3 * kv, sum = 4 * o / e;
    return {keys + sum, keys + 3 * (4 * kv / e) + sum};
}

std::vector<EagerKernel> timed_kernels_of(const TransformerSpec& m, const LayerSplit& s) {
    std::vector<EagerKernel> out;
    if (!s.compiled && !s.composed_norm) out.push_back(EagerKernel::norm);
    if (!s.compiled && m.dropout && s.elementwise == ElementwiseKernels::eager) out.push_back(EagerKernel::dropout);
    if (!s.compiled && s.rope == RopeKernel::complex) out.push_back(EagerKernel::rope);
    if (m.vocab > 0 && s.cross_entropy == CrossEntropy::pytorch) out.push_back(EagerKernel::loss);
    out.push_back(EagerKernel::adam);
    return out;
}

ElementwiseBytes layer_elementwise_bytes(const TransformerSpec& m, const LayerSplit& s, const EagerKernelBytes& timed) {
    const double tokens = static_cast<double>(s.micro_batch) * m.seq, e = bytes_per_element(m.dtype);
    const double hp = tokens * m.hidden / (s.sequence_parallel ? s.tp : 1), f = tokens * m.ffn / s.tp;
    const bool eager = s.elementwise == ElementwiseKernels::eager;
    const PassBytes norm = eager_kernel_bytes(EagerKernel::norm, timed, e);
    const double norm_forward = s.composed_norm ? kComposedRmsNormBytes : norm.forward;
    const double norm_backward = s.composed_norm ? 2 * kComposedRmsNormBytes : norm.backward;
    const PassBytes residual = eager_kernel_bytes(EagerKernel::residual_add, timed, e);
    double residual_forward = residual.forward, residual_backward = residual.backward;
    if (m.dropout) {
        const PassBytes dropout = eager_kernel_bytes(EagerKernel::dropout, timed, e);
        residual_forward += eager ? dropout.forward : 1;
        residual_backward += eager ? dropout.backward : 2 * e + 1;
    }
    const PassBytes gelu = eager_kernel_bytes(EagerKernel::gelu, timed, e);
    double act_forward = gelu.forward, act_backward = gelu.backward, sums = 0;
    if (m.mlp == Mlp::swiglu) {
        const PassBytes swiglu = eager_kernel_bytes(EagerKernel::swiglu, timed, e);
        act_forward = eager ? swiglu.forward : 3 * e;
        act_backward = eager ? swiglu.backward : 5 * e;
        sums = eager ? 3 * e * tokens * m.hidden : 0;  // per layer: two in the attention block, one in the MLP's
    }
    ElementwiseBytes b;
    b.residual = residual_forward * hp;
    b.attention_forward = (norm_forward + residual_forward) * hp;
    b.mlp_forward = b.attention_forward + act_forward * f;
    b.attention_backward = (norm_backward + residual_backward) * hp + 2 * sums;
    b.mlp_backward = (norm_backward + residual_backward) * hp + act_backward * f + sums;
    return b;
}

CompiledElementwiseBytes compiled_elementwise_bytes(const TransformerSpec& m, const LayerSplit& s) {
    const double tokens = static_cast<double>(s.micro_batch) * m.seq, t = s.tp, d = m.head_dim();
    const double norms = kCompiledNormBytes * tokens * m.hidden / (s.sequence_parallel ? t : 1);
    CompiledElementwiseBytes c;
    if (m.mlp == Mlp::swiglu) {
        c.attention = norms / 2 + kCompiledRotaryBytes * tokens * (m.heads + m.kv_heads) * d / t;
        c.mlp = norms / 2 + kCompiledSwigluBytes * tokens * m.ffn / t;
    } else {
        c.attention = norms / 2 + kCompiledQkvBytes * tokens * (m.heads + 2.0 * m.kv_heads) * d / t;
        c.mlp = norms / 2 + kCompiledGeluBytes * tokens * m.ffn / t;
    }
    return c;
}

Fp8CastBytes fp8_cast_bytes(const TransformerSpec& m, const LayerSplit& s) {
    Fp8CastBytes c;
    if (s.fp8 == Fp8::none) return c;
    const double tokens = static_cast<double>(s.micro_batch) * m.seq, t = s.tp, h = m.hidden, ffn = m.ffn;
    const double whole = h / (s.sequence_parallel ? t : 1);  // an h-wide tensor before its all-gather
    const double qkv_out = h * (1 + 2 * kv_ratio(m)) / t, fc1_out = (m.mlp == Mlp::gelu ? 1 : 2) * ffn / t;
    // Inputs of QKV, the projection, fc1 and fc2, and the outputs' gradients, elements per token.
    const double inputs = whole + h / t + whole + ffn / t;
    if (s.fp8 == Fp8::te) {
        c.forward = 4 * tokens * h / t;
        c.backward = tokens * (4 * (qkv_out + whole + whole) + 2 * (whole + whole + ffn / t));
        c.per_weight = 4;
        c.weight_casts = 1;
    } else {
        const double outputs = qkv_out + whole + fc1_out + whole;
        c.forward = 5 * tokens * inputs;
        c.backward = 5 * tokens * (outputs + inputs);
        c.per_weight = 5;
        c.weight_casts = 2;
        if (s.compiled) {
            c.forward *= kCompiledTorchaoCastShare;
            c.backward *= kCompiledTorchaoCastShare;
            c.per_weight *= kCompiledTorchaoCastShare;
        }
    }
    return c;
}

AdamStateBytes adam_state_bytes(DType weights, DType optimizer, bool apex) {
    const double el = bytes_per_element(optimizer);
    AdamStateBytes a{2 * el, optimizer == weights ? 0 : el};
    if (apex) {
        a.grad_shard = true;
        if (optimizer == DType::fp32 && bytes_per_element(weights) == 2) {
            a.master = 2;
            a.remainders = true;
        }
    }
    return a;
}

ModelStateBytes zero_model_states(double params, int stage, int dp, double grad_bytes, AdamStateBytes adam,
                                  double weight_bytes) {
    if (dp < 1) throw std::invalid_argument(fmt::format("data-parallel size must be at least 1, got {}", dp));
    const double n = dp;
    ModelStateBytes b{weight_bytes * params, grad_bytes * params, adam.total() * params};
    switch (stage) {
        case 0: break;
        case 1:
            b.optimizer /= n;
            if (adam.grad_shard) b.grads += grad_bytes * params / n;
            break;
        case 2:
            b.optimizer /= n;
            b.grads /= n;
            if (adam.grad_shard) b.grads += grad_bytes * params / n;
            break;
        case 3:
            // The shard is the parameter: the master copy where there is one.
            if (adam.master > 0) {
                b.weights = adam.master * params / n;
                b.optimizer = adam.moments * params / n;
            } else {
                b.weights /= n;
                b.optimizer /= n;
            }
            b.grads /= n;
            break;
        default: throw std::invalid_argument(fmt::format("ZeRO stage must be 0, 1, 2 or 3, got {}", stage));
    }
    return b;
}

double adam_bytes_per_param(const EagerKernelBytes& timed, double grad_bytes, AdamStateBytes adam, double weight_bytes) {
    const double moved = adam.remainders ? 2 * adam.moments + 2 * (weight_bytes + adam.master) + grad_bytes
                                         : 2 * adam.total() + grad_bytes + (adam.master > 0 ? weight_bytes : 2 * weight_bytes);
    return timed.adam * moved;
}

}  // namespace dtsim::hw
