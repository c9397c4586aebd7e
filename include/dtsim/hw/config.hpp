// JSON configs of the hardware world: a cluster, a model, a training setup and
// a strategy. A config may include others ("include": ["../clusters/x.json"],
// paths relative to the including file); included files merge first, in
// order, and the including file's own keys override theirs (objects merge key
// by key). Units are in the key names: _tflops, _GiB, _TBps, _GBps, _us, _MiB.
// Every object also accepts "source" and "note" (citations, ignored).
//
// Errors name the file a value came from, its JSON path, and what was expected
// against what was found; unknown keys are rejected with a did-you-mean.
#pragma once

#include "dtsim/errors.hpp"
#include "dtsim/hw/collective_cost.hpp"
#include "dtsim/hw/stragglers.hpp"
#include "dtsim/hw/topology.hpp"
#include "dtsim/hw/transformer.hpp"
#include "dtsim/hw/units.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace dtsim::hw {

// A bad config or ground-truth file, or a bad --set: "FILE: $.json.path: what is wrong"
// ("FILE: what is wrong" where there is no path).
class ConfigError : public std::runtime_error, public InputError {
public:
    ConfigError(std::string file, std::string path, const std::string& message);
    std::string file;  // the file (or "--set a.b=v") the bad value came from
    std::string path;  // "$.strategy.tp"; "" for a --set that is not path=value
};

struct TrainingConfig {
    int global_batch = 1;  // sequences per optimizer step
    int micro_batch = 1;   // sequences per microbatch on one GPU
};

struct ModelConfig {
    std::string kind = "transformer";  // "transformer" or "puzzle" (layers of hidden x hidden weights)
    TransformerSpec spec;
};

enum class ContextComm : std::uint8_t { ring, allgather };

// Transformer Engine's userbuffers overlaps as its defaults configure them: 1.9 to 1.13 (`te2`
// false: every overlap's kernel holds its SMs, 16 or a ring exchange's none) or from 2.0 (the
// bulk and pipelined overlaps' GEMMs leave 16 SMs throughout).
UbConfig ub_defaults(bool te2);

struct StrategyConfig {
    std::string name;  // one of hw_strategies() (dtsim/hw/strategies.hpp)
    int dp = 1, tp = 1, pp = 1;  // dp not given: the GPU count / (tp x cp x pp)
    // Context parallelism (Megatron-Core's and Transformer Engine's, torchtitan's): each sequence
    // split over cp ranks, attention as a ring passing the keys and values around (LayerSplit::cp).
    int cp = 1;
    // How the context-parallel ranks share keys and values: a ring of point-to-point passes
    // beside the attention (Megatron-Core, Transformer Engine, PyTorch's "alltoall" rotate
    // method), or an all-gather: before it (Llama 3's) or, in PyTorch's strategies, beside its
    // first step (PyTorch's "allgather" rotate method; LayerSplit::pytorch_context_parallel).
    ContextComm cp_comm = ContextComm::ring;
    // Per pipeline and step; 0 = global_batch / (micro_batch x dp). Given, it must equal that, but
    // for one case: given by a --set without training.global_batch, the global batch follows it
    // (microbatches x micro_batch x dp), so that a sweep of the microbatches alone runs.
    int microbatches = 0;
    int zero_stage = 0;
    double bucket_bytes = 25 * kMiB;       // PyTorch DDP bucket_cap_mb default
    double first_bucket_bytes = 1 * kMiB;  // PyTorch DDP first bucket (dist._DEFAULT_FIRST_BUCKET_BYTES)
    bool overlap = true;                   // overlap gradient reduction with backward
    bool prefetch = true;                  // FSDP: all-gather the next layer while computing this one
    // ZeRO-1/2: all-gather the updated weights during the next forward, layer by layer
    // (Megatron-LM's --overlap-param-gather; its default is off), not after the step (ParamGather).
    bool overlap_param_gather = false;
    Recompute recompute = Recompute::none;
    // The layers `recompute` applies to (LayerSplit): every k-th (torchtitan's selective_ac_option
    // "k"), or the first n of each model chunk (Megatron-LM's --recompute-method block
    // --recompute-num-layers n); the others recompute nothing. 1 and 0: every layer.
    int recompute_every = 1;
    int recompute_num_layers = 0;
    bool sequence_parallel = false;
    // Megatron-LM's --tp-comm-overlap (needs sequence_parallel): each block's all-gather and
    // reduce-scatter pipelined with its first and last GEMMs (overlapped_block in steps.cpp).
    // With "fsdp" it stands for torchtitan's AsyncTP (enable_async_tensor_parallel), which
    // decomposes the same all-gather + GEMM and GEMM + reduce-scatter pairs (symmetric memory).
    bool tp_comm_overlap = false;
    // What Transformer Engine's userbuffers take from each overlapped linear's GEMMs (UbSms), from
    // the config's tp_comm_overlap_cfg (a ub_tp_comm_overlap_cfg: per linear its method, num_sm,
    // set_sm_margin and use_ce, the rest TE's defaults of 1.9 to 1.13 or from 2.0), TE 2's defaults
    // where none is given (tp_overlap_given false). Used where tp_comm_overlap runs userbuffers
    // (te_userbuffers in strategies.hpp; LayerSplit::ub), not under PyTorch's tensor parallelism,
    // whose AsyncTP copies with the copy engines.
    UbConfig tp_overlap = ub_defaults(true);
    bool tp_overlap_given = false;
    // Megatron-LM's asynchronous tensor-parallel backward (without tp_comm_overlap): a block's
    // first linear (QKV, fc1) starts the all-reduce of its input gradient, or with sequence
    // parallelism its reduce-scatter, before its weight-gradient GEMM and waits for it after; with
    // sequence parallelism it first gathers its sharded input again, beside its input-gradient
    // GEMM (LinearWithGradAccumulationAndAsyncCommunication in Megatron-LM's tensor_parallel/
    // layers.py; async_backward_block in steps.cpp). Not given: on for Megatron's strategies, off
    // for PyTorch's tensor parallelism ("fsdp", and ZeRO-3 inside pipeline stages), whose backward
    // blocks on these collectives (tp_async_backward in strategies.hpp resolves it).
    std::optional<bool> tp_async_backward;
    // Whether full recompute stops once it has made again the last tensor the backward saved, as
    // PyTorch's non-reentrant checkpoint does since 2.1 (torch/utils/checkpoint.py, early stop on
    // by default: pytorch/pytorch#96866): a block's last GEMM (fc2, w2) and the residual add after
    // it do not run again, nor, with tensor parallelism, the collective after that GEMM. Megatron-LM
    // recomputes the whole forward (tensor_parallel.checkpoint). Not given: on for PyTorch's own
    // data parallelism (DDP, "fsdp") and ZeRO-3 inside pipeline stages (torchtitan), off for the
    // others (recompute_early_stop in strategies.hpp resolves it).
    std::optional<bool> recompute_early_stop;
    // torch.compile of each transformer block (torchtitan's training.compile): Inductor's fused
    // kernels for the memory-bound work and its choice of what to keep (LayerSplit::compiled).
    bool compile = false;
    // Grouped-query attention by copying the keys and values to every query head before the core
    // (torchtitan's Llama until January 2026: repeat_kv in torchtitan/models/llama/model.py, removed
    // by "GQA without kv repeats", ff0829c1; Hugging Face's eager and SDPA Llama attention), rather
    // than a kernel that reads the kv heads as they are (Megatron-LM, Transformer Engine,
    // PyTorch's SDPA with enable_gqa). Costs the copies, keeps the copies for the backward and
    // sends them in context parallelism's exchanges.
    bool repeat_kv = false;
    // How each block's norm runs eagerly (norm_kernel): "fused", one kernel (Transformer Engine,
    // Apex, PyTorch's nn.RMSNorm from 2.8), or "composed", its tensor operations one kernel each
    // (torchtitan's RMSNorm module through March 2025, nn.RMSNorm before 2.8: kComposedRmsNormBytes).
    bool composed_norm = false;
    // How the rotary embedding runs in eager blocks (RopeKernel in transformer.hpp): "complex",
    // "fused" or "none". Unless given: none for a GeLU model (GPT-3's learned positions, MPT's
    // ALiBi), and for a SwiGLU one (the Llama form, whose models rotate) complex under PyTorch's
    // strategies, ddp and fsdp (torchtitan), and fused under the others and with fsdp_impl
    // "megatron" (Transformer Engine): layer_split.
    std::optional<RopeKernel> rope_kernel;
    // How eager blocks run their norms' neighbours, dropout and MLP activation
    // (ElementwiseKernels in transformer.hpp): "eager", PyTorch's modules one kernel an operation,
    // or "fused", Megatron-Core's fused kernels, which also keep less of a SwiGLU for the backward
    // (kFusedSwigluKept). Unless given: eager in PyTorch's code (ddp, fsdp, and a pipeline with
    // ZeRO-3 in its stages), fused in Megatron-Core's (the other strategies, and fsdp_impl
    // "megatron"): layer_split.
    std::optional<ElementwiseKernels> elementwise_kernels;
    bool flash_attention = false;          // fused attention: no s x s scores kept
    std::string attention_kernel = "flash2";  // which fused kernel: "flash2", "cudnn" or "flash1" (AttentionModel)
    // The dtype gradients are accumulated in and reduced across data-parallel ranks: fp32 as
    // Megatron-LM with bf16 (accumulate_allreduce_grads_in_fp32), torchtitan's FSDP2
    // (mixed_precision_reduce) and PyTorch AMP (fp32 parameters) do; "bf16"/"fp16" as
    // Megatron-LM with fp16 or FSDP with reduce_dtype = param_dtype.
    DType grad_dtype = DType::fp32;
    // The dtype of Adam's moments and master weights: "fp32" (the default: Megatron-LM, PyTorch's
    // mixed precision, NeMo's optim.dtype default) or "bf16" (NeMo's distributed_fused_adam with
    // optim.dtype bf16, as its Nemotron-4 340B config has it). Where it is the model's dtype
    // there is no master copy (AdamStateBytes in transformer.hpp).
    DType optimizer_dtype = DType::fp32;
    // The distributed optimizer of ZeRO stage 1 or 2 outside PyTorch's strategies: "megatron"
    // (Megatron-Core's DistributedOptimizer, the default) or "apex" (Apex's DistributedFusedAdam,
    // NeMo's distributed_fused_adam: AdamStateBytes says what it keeps besides).
    std::string distributed_optimizer = "megatron";
    // How the loss is computed (CrossEntropy): "pytorch" for ddp and fsdp (with tp > 1 too:
    // layer_split), "megatron" for the tensor- and pipeline-parallel strategies, unless given.
    std::optional<CrossEntropy> cross_entropy;
    // Float8 linears (Fp8 in transformer.hpp): "none", "te" (Transformer Engine) or "torchao".
    Fp8 fp8 = Fp8::none;
    std::optional<Algorithm> algorithm;    // overrides the cluster's collective algorithm
    std::string puzzle;                    // name == "puzzle": which puzzle strategy
    // Schedule-driven pipelines (names "interleaved", "zbh1", "bfs", "dualpipev", "schedule"):
    int chunks = 1;             // "interleaved", "bfs": model chunks (virtual stages) per pipeline rank, v
    int microbatch_group = 0;   // "interleaved": Megatron's microbatch_group_size_per_vp_stage; 0 = pp
    std::string schedule_file;  // "schedule": a schedule in PyTorch action notation (.txt) or CSV,
                                // resolved against the file that names it
    // Uneven pipeline stages (any pipeline strategy; stage_layers_of says how they resolve):
    //   stage_layers: the layers of each model chunk (pipeline stage, or virtual stage with
    //     chunks) in model order: pp x chunks entries (2 pp for "dualpipev", the file's stages for
    //     "schedule"), each >= 1, summing to the model's layers;
    //   first_stage_layers / last_stage_layers: Megatron-LM's --decoder-first-pipeline-num-layers
    //     and --decoder-last-pipeline-num-layers: the layers of the first / last pipeline rank,
    //     split evenly over its chunks; the other ranks share the rest evenly. 0 = not given.
    //   account_for_embedding / account_for_loss: Megatron-LM's --account-for-embedding-in-
    //     pipeline-split and --account-for-loss-in-pipeline-split: the embedding (the output layer
    //     with the loss) counts as a layer in the split, so every model chunk holds (layers + the
    //     edges counted) / (pp x chunks) and the first (last) one layer fewer.
    // None given: every chunk holds layers / (pp x chunks).
    std::vector<int> stage_layers;
    int first_stage_layers = 0;
    int last_stage_layers = 0;
    bool account_for_embedding = false;
    bool account_for_loss = false;
    // "fsdp": "full" (FULL_SHARD, ZeRO-3), "grad_op" (SHARD_GRAD_OP: weights stay
    // gathered from forward to backward), "hybrid" (HYBRID_SHARD: full shard
    // inside a node, replicas across nodes).
    std::string sharding = "full";
    // "fsdp": which implementation runs it. "fsdp2", FSDP2 (torch.distributed.fsdp.fully_shard:
    // torchtitan), shards each parameter and copies on the compute stream: an all-gather's output
    // out into the parameters before the layer runs (foreach_all_gather_copy_out, in
    // wait_for_unshard), the gradients into the reduce-scatter's input, cast to its dtype
    // (foreach_reduce_scatter_copy_in, in foreach_reduce; both in
    // torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py). "fsdp1" (FullyShardedDataParallel
    // with flat parameters: Composer, LLM Foundry) gathers into the flat parameter itself and casts
    // its gradient on its post-backward stream; "megatron" (Megatron-FSDP) gathers into and reduces
    // from contiguous buffers the parameters and gradients are views of: neither copies.
    std::string fsdp_impl = "fsdp2";
};

// The recompute policy as reports print it: "none", "full", "full every 2nd layer",
// "full, the first 2 layers of each chunk".
std::string recompute_text(const StrategyConfig& s);

struct Config;
// How a config's layers are split and trained (LayerSplit), from its training and strategy.
LayerSplit layer_split(const Config& c);

// The model chunks a pipeline's layers are split into: pp x chunks (2 pp for "dualpipev"), or
// the length of strategy.stage_layers when given (a "schedule" file's stage count is known
// only once the file is read); 1 without a pipeline.
int model_chunks(const Config& c);
// The layers of each of `stages` model chunks, in model order: strategy.stage_layers, Megatron-LM's
// first/last shorthand (chunk c x pp + r on pipeline rank r, as interleaved and looped schedules
// place them), or layers / stages each. Only a validated config's split is meaningful; one that
// cannot be split (which load_config reports) gets layers / stages (rounded down) each.
std::vector<int> stage_layers_of(const Config& c, int stages);
// Whether the config asks for uneven stages (stage_layers or either shorthand).
bool uneven_stages(const StrategyConfig& s);

struct Config {
    std::string name;
    std::string file;  // the top-level file
    Cluster cluster;
    ModelConfig model;
    TrainingConfig training;
    StrategyConfig strategy;
    // "stragglers": {"slowdown": {"3": 1.5, "8-15": 1.1},
    //                "jitter": {"distribution": "lognormal", "cv": 0.05, "seed": 42}}
    // slowdown: ranks (a rank or a range "a-b") -> factor on their compute
    // durations (GEMMs and memory-bound work; "slow_memory_bound": false
    // slows the GEMM time only); jitter: "lognormal" (with "cv", or "sigma" of ln X), "normal"
    // (cv <= 0.25) or "uniform" (cv < 1/sqrt(3)), mean 1, "seed" an integer >= 0
    // (default 0). See stragglers.hpp.
    Stragglers stragglers;
    nlohmann::json json;  // the merged document, as run

    [[nodiscard]] int gpus() const { return strategy.dp * strategy.tp * strategy.pp * strategy.cp; }
    // Microbatches each pipeline runs per step.
    [[nodiscard]] int microbatches() const;
};

// `--set path=value`, one value: path is dotted ("strategy.tp", "$.strategy.tp");
// value is JSON when it parses as JSON ("4", "true", "\"x\"") and a string otherwise.
struct Override {
    std::string path;
    std::string value;
};

// `--set path=v1,v2,v3` as the command line gives it: a path and its values, more than
// one for a sweep. A value that starts with '[' or '{' is one JSON value, commas and all.
struct Setting {
    std::string path;
    std::vector<std::string> values;
};

// "strategy.tp=4" -> {strategy.tp, [4]}; "strategy.tp=1,2,4" -> {strategy.tp, [1, 2, 4]}.
// Throws ConfigError "--set X: expected path=value (for example strategy.tp=4 or strategy.tp=1,2,4)".
Setting parse_setting(const std::string& text);
std::vector<Setting> parse_settings(const std::vector<std::string>& texts);
// The runs of a sweep: every combination of the settings' values (their cartesian product),
// the first setting's values varying slowest. No settings: one run without overrides.
std::vector<std::vector<Override>> combinations(const std::vector<Setting>& settings);
// "a.b=v" as one Override, commas and all (no sweep); throws ConfigError as parse_setting.
Override parse_override(const std::string& text);

// Loads, merges, overrides, validates. Throws ConfigError.
Config load_config(const std::string& path, const std::vector<Override>& overrides = {});
// The merged document of the config at `path` (its includes merged), not yet checked: what
// load_config checks, for tools that complete a partial config (dtsim plan). Throws ConfigError.
nlohmann::json read_config_document(const std::string& path);
// The same from a document already in memory; `file` names it in errors.
Config parse_config(const nlohmann::json& document, const std::string& file,
                    const std::vector<Override>& overrides = {});

}  // namespace dtsim::hw
