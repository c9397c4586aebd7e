// One GPU's compute and memory: peak FLOP/s per data type, HBM capacity and
// bandwidth, and how fast a GEMM of a given shape runs.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dtsim::hw {

enum class DType : std::uint8_t { fp32, tf32, bf16, fp16, fp8 };
inline constexpr int kDTypes = 5;

std::string_view dtype_name(DType d);
std::optional<DType> parse_dtype(std::string_view name);
double bytes_per_element(DType d);  // fp32/tf32 4, bf16/fp16 2, fp8 1

// GEMM time as a roofline with a fixed overhead:
//
//   t(m, n, k) = overhead + max(2mnk / (peak * max_efficiency),
//                               (mk + kn + mn) * element_size / (hbm_bandwidth * bandwidth_fraction))
//
// Fitted by least squares on log(TFLOP/s) to the 23 shapes of
// calibration/data/gemm.json "h100_bf16_by_shape" (OpenXLA
// matmul_interpolator_data.h, sm_90), with max_efficiency fixed to that file's
// best measured shape (794.5 of 989.4 TFLOP/s = 0.803, stas00/ml-engineering):
// overhead 5.85 us, bandwidth_fraction 0.685. Error of the fit on those shapes:
// 10.3 % RMS in log space, worst +33.8 % (512x256x4096) and -12.6 %
// (256x512x256); shapes of 1024^3 and larger are within 7 % but for
// 2048x512x4096 (+13 %). Other GPUs reuse overhead and bandwidth_fraction with
// their own max_efficiency (A100 bf16: 271.2 / 312 = 0.869, same source): the
// shape of the curve is measured on H100 only.
//
// These are the defaults. The shipped H100 and H200 clusters fit all three to GEMMs run
// back to back at sustained clocks (docs/hardware-model.md, "GEMM time"): H100 bf16 0.715,
// 5.78 us, 0.687.
//
// `dtype_efficiency` replaces max_efficiency for one data type where it is
// set (> 0): the best fp8 GEMM on H100 reaches 1402.6 of 1978.9 TFLOP/s
// (0.709), bf16 0.803 (gemm.json max_achievable). `datasets` names the
// measurements the parameters were fitted to (`dtsim calibrate`), so
// `dtsim validate` can tell in-sample points from held-out ones.
struct GemmModel {
    double max_efficiency = 0.803;
    double overhead_s = 5.85e-6;
    double bandwidth_fraction = 0.685;
    std::array<double, kDTypes> dtype_efficiency{};
    std::vector<std::string> datasets{};

    [[nodiscard]] double efficiency(DType d) const {
        const double e = dtype_efficiency[static_cast<std::size_t>(d)];
        return e > 0 ? e : max_efficiency;
    }
};

// Fused causal attention (FlashAttention and its kind) as a kernel of its own, not as
// GEMMs. For one call over `heads` = batch x heads-on-this-GPU, sequence s, head dim d:
//
//   forward FLOPs  F = 4 heads s^2 d / 2      (QK^T and PV, causal half)
//   backward FLOPs 2.5 F                     (dQ, dK, dV, dP and the recomputed QK^T)
//   tiles n = heads x ceil(s / 128)          (the query blocks the kernel's blocks work on)
//   t = FLOPs / (peak x efficiency x s / (s + half_seq) x n / (n + half_tiles))
//
// The products grow as s^2 per head while the work per query row that is not a product
// (loading Q, the softmax statistics, the diagonal block under the mask) grows as s: the
// throughput saturates at `efficiency` and reaches half of it at s = half_seq. The tiles share
// the SMs in waves, and under the mask their work differs (the last query block of a sequence
// has the most): the last wave leaves SMs idle for about one tile's time whatever their number,
// which costs the more the fewer tiles there are; half_tiles is where it halves the rate. Fitted per
// backend and head dimension to measured kernels (dtsim calibrate on
// calibration/data/h100_dtsim_torch_kernels.json "attention"); the backend is the
// strategy's attention_kernel ("flash2": FlashAttention-2 as PyTorch's SDPA runs it,
// "cudnn": cuDNN's fused attention, Transformer Engine's choice on Hopper; "flash1": the
// flash-attn 1.x kernels; on A100 all from a published benchmark, forward and backward together).
struct AttentionCurve {
    double efficiency = 0;  // of the GPU's peak for the model's data type
    double half_seq = 0;    // tokens
    double half_tiles = 0;  // query tiles of 128 rows (attention_tiles); 0: not measured
    // How much longer a call of `tiles` query tiles takes than one of very many.
    [[nodiscard]] double tile_factor(double tiles) const { return 1 + half_tiles / tiles; }
};

// The rows of a query tile in AttentionCurve's tile count: FlashAttention-2's forward block at
// head dimension 128 (Dao-AILab/flash-attention csrc/flash_attn/src/flash_fwd_launch_template.h
// at 01afd16d, run_mha_fwd_hdim128: Flash_fwd_kernel_traits<128, 128, 64, 4, ...> but on sm86 and
// sm89; the kernel PyTorch's SDPA ran in calibration/data/h100_dtsim_torch_steps.json's
// top_kernels). A unit of the count: half_tiles is fitted in it.
inline constexpr double kAttentionTileRows = 128;

// The query tiles of a fused-attention call over `heads` (batch x heads on a GPU) of `seq` tokens.
inline double attention_tiles(double heads, double seq) { return heads * std::ceil(seq / kAttentionTileRows); }

struct AttentionKernel {
    int head_dim = 128;
    AttentionCurve forward, backward;
    // Fitted to forward + backward times together (a published chart): one curve for both
    // passes, their split taken as their FLOPs' (1 : 2.5). The cluster file's "from_sums".
    bool from_sums = false;
    // The fewest query tiles of a call the curves were fitted to, where they have a tile term
    // (0: not known): below it half_tiles is extrapolated. The cluster file's "min_tiles".
    double min_tiles = 0;
};

struct AttentionModel {
    std::map<std::string, std::vector<AttentionKernel>, std::less<>> backends;
    std::vector<std::string> datasets;

    // The curve measured at the head dimension nearest to `head_dim` (by ratio), or
    // nullptr when the backend has none.
    [[nodiscard]] const AttentionKernel* find(std::string_view backend, double head_dim) const;
};

// How the tensor clock follows board power, from the two 132-SM Hopper parts NVIDIA rates at
// different powers (H100 Tensor Core GPU datasheet): H100 SXM, 989.4 dense bf16 TFLOP/s at up to
// 700 W, and H100 NVL, 835.5 at up to 400 W, the same SMs at 1,830 and 1,545 MHz. Their ratio
// gives clock ~ power^0.302 (ln(835.5 / 989.4) / ln(400 / 700)), near the cube root that
// dynamic power (frequency x voltage squared, voltage following frequency) predicts.
inline constexpr double kPowerClockSxmTflops = 989.4, kPowerClockSxmWatts = 700;
inline constexpr double kPowerClockNvlTflops = 835.5, kPowerClockNvlWatts = 400;
double power_clock_exponent();

// The fraction of HBM bandwidth that memory-bound kernels reach when they stream (each element read
// or written once, no reduction across it), as STREAM's copy and triad measure it. H100 SXM: the
// median of the fourteen copy and triad rows with arrays of 64 MiB to 4 GiB (beyond the 50 MB L2)
// in calibration/data/h100_dtsim_membw.json, 2,892.8 GB/s, over the datasheet's 3.35 TB/s
// (calibration/data/gpus.json): 0.8635. The default where a cluster gives no gpu.stream_fraction.
inline constexpr double kStreamFraction = 0.8635;

// A kernel's bytes an element, its forward and its backward apart.
struct PassBytes {
    double forward = 0, backward = 0;
};

// The memory-bound kernels that do not stream at stream_fraction (reductions, complex arithmetic,
// many small launches), priced by their measured time: each kind's time on one GPU as bytes at
// that GPU's memory_seconds rate, per element of its bf16 input (a logit for the loss; for Adam,
// a factor on the bytes it counts). `dtsim calibrate` fits them to the eager kernels that
// calibration/pytorch/dtsim_kernels.py times (cluster.gpu.eager_kernels; the medians, rounded to
// 0.01, of a kernel file's elementwise rows rms_norm and layer_norm, dropout and
// rotary_torchtitan, its cross_entropy rows and its fused AdamW rows: forward, and fwd_bwd_us
// less fwd_us for the backward). The defaults are the H100's, from the kernels timed on one H100
// in eager PyTorch 2.11 (calibration/data/h100_dtsim_torch_kernels.json: bf16 [tokens, width],
// 4,096 and 16,384 tokens x 2,048 to 16,384 wide; the loss over 2,048 to 16,384 tokens x 16,032
// to 128,256 logits; Adam over 25, 100 and 400 million fp32 parameters) at its 3.35 TB/s x 0.8635:
//   norm      a fused RMSNorm or LayerNorm (PyTorch's nn.RMSNorm and nn.LayerNorm, as Transformer
//             Engine and Apex run one kernel each way): its reductions keep it below the streaming
//             rate, where it reads and writes 4 bytes forward and 6 to 10 backward
//   dropout   PyTorch's native_dropout as a kernel of its own, and its backward
//   rope      torchtitan's complex rotary embedding (view_as_complex, a complex product,
//             view_as_real, type_as: several kernels), per element rotated
//   loss      PyTorch's F.cross_entropy over bf16 logits (log-softmax, then the NLL), per logit
//   adam      torch.optim.AdamW(fused=True) over the 28 bytes a parameter it counts (fp32 parameter,
//             gradient and moments read, parameter and moments written): a factor on
//             adam_bytes_per_param's count (the foreach form took 2.8-2.9 times as long)
inline constexpr double kNormForwardBytes = 6.07, kNormBackwardBytes = 14.96;
inline constexpr double kDropoutForwardBytes = 6.02, kDropoutBackwardBytes = 4.95;
inline constexpr double kComplexRopeForwardBytes = 23.22, kComplexRopeBackwardBytes = 23.68;
inline constexpr double kPytorchLossForwardBytes = 23.43, kPytorchLossBackwardBytes = 25.19;
inline constexpr double kAdamKernelBytes = 1.12;
struct EagerKernelBytes {
    PassBytes norm{kNormForwardBytes, kNormBackwardBytes};
    PassBytes dropout{kDropoutForwardBytes, kDropoutBackwardBytes};
    PassBytes rope{kComplexRopeForwardBytes, kComplexRopeBackwardBytes};
    PassBytes loss{kPytorchLossForwardBytes, kPytorchLossBackwardBytes};
    double adam = kAdamKernelBytes;
    std::vector<std::string> datasets;  // the kernel sets dtsim calibrate fitted them to
};

struct GpuSpec {
    std::string name;
    std::array<double, kDTypes> peak_flops{};  // dense FLOP/s by DType; 0 = not supported
    double memory_bytes = 0;                   // HBM capacity
    double memory_bandwidth = 0;               // HBM bytes/s
    double stream_fraction = kStreamFraction;  // of memory_bandwidth, for memory-bound kernels (cluster.gpu.stream_fraction)
    std::vector<std::string> stream_datasets;  // the bandwidth sets dtsim calibrate fitted it to (gpu.stream_datasets)
    EagerKernelBytes eager_kernels;            // kernels priced by their timed bytes (cluster.gpu.eager_kernels)
    GemmModel gemm;
    AttentionModel attention;
    // Board power (cluster.gpu.tdp_W, power_limit_W): a part run below its TDP (nvidia-smi -pl)
    // holds a lower tensor clock. 0 = not given (the part runs at its TDP).
    double tdp_watts = 0;
    double power_limit_watts = 0;
    // The exponent of the tensor clock's power law (cluster.gpu.power_clock: {"exponent",
    // "datasets"}), fitted by dtsim calibrate to GEMMs measured on this part at a power limit, and
    // those data sets; 0 = the datasheets' (power_clock_exponent()).
    double power_exponent = 0;
    std::vector<std::string> power_datasets;
    // Streaming multiprocessors (cluster.gpu.sms; 0 = not given): what a GEMM shares with
    // communication kernels that take SMs from it (StrategyConfig::tp_overlap, Device::hold_sms).
    int sms = 0;
    // Whether NCCL's collectives running beside compute take SMs from it (cluster.gpu.
    // collectives_take_sms, default true; nothing is taken where sms is 0): while a collective's
    // kernel runs, each of its CTAs (CollectiveCost::ctas) holds an SM, and the compute stream's
    // kernels run on the others (Device::compute).
    bool collectives_take_sms = true;
    // Whether they do here: the switch on and an SM count to take from.
    [[nodiscard]] bool collectives_hold_sms() const { return collectives_take_sms && sms > 0; }

    // The factor on every tensor-core throughput (GEMMs, fused attention) under the power
    // limit: (limit / TDP)^exponent, the fitted power_exponent or else power_clock_exponent(),
    // 1 without a limit. Memory-bound work keeps
    // its speed (HBM's clock is not the SMs'). The peaks themselves (peak(), MFU) stay the
    // datasheet's, as frameworks report MFU against them.
    [[nodiscard]] double tensor_clock_scale() const;

    // Throws std::invalid_argument naming the GPU when it has no peak for `d`.
    [[nodiscard]] double peak(DType d) const;
    // Seconds for `count` GEMMs (m x k) * (k x n).
    [[nodiscard]] double gemm_seconds(double m, double n, double k, DType d, double count = 1) const;
    // Achieved / peak FLOP/s for one such GEMM.
    [[nodiscard]] double gemm_efficiency(double m, double n, double k, DType d) const;
    // Memory-bound work (norms, element-wise ops, the loss, the optimizer step): bytes read plus
    // written at the streaming bandwidth, memory_bandwidth x stream_fraction. A kernel that does
    // not stream (a norm's reduction, torchtitan's complex rotary embedding) is priced by bytes
    // fitted to its measured time at that rate (eager_kernels).
    [[nodiscard]] double memory_seconds(double bytes) const;
    // Seconds of one fused causal attention call (see AttentionModel) over `heads`
    // (batch x heads on this GPU) of sequence `seq` and head dimension `head_dim`,
    // forward or backward; nullopt when there is no measured curve for `backend`.
    [[nodiscard]] std::optional<double> attention_seconds(std::string_view backend, double heads, double seq,
                                                          double head_dim, DType d, bool backward) const;
};

}  // namespace dtsim::hw
