// The strategies of the hardware world, free coroutines over a GPU and its job:
//   ddp       data parallelism with PyTorch's bucketed gradient all-reduce overlapping the backward
//   fsdp      ZeRO-3: per-layer parameter all-gather (prefetching the next layer) and gradient reduce-scatter,
//             x tensor parallelism inside a node (torchtitan's 2D)
//   megatron  Megatron-LM tensor parallelism (x data parallelism), gradient accumulation over microbatches
//   gpipe     pipeline: all forwards, then all backwards (x tensor x data parallelism)
//   1f1b      pipeline: PipeDream-Flush / Megatron's one-forward-one-backward schedule
//   interleaved, zbh1, bfs, dualpipev, schedule
//             a dtsim::sched pipeline schedule (generated, or read from a file) x tensor x data parallelism
// and `puzzle`, which runs one of the eight puzzle strategies on HardwareCosts.
// The registry (hw_strategies) is the one list of these names: the config reader
// takes the names it accepts and the keys and sizes each strategy takes from it.
#pragma once

#include "dtsim/hw/device.hpp"
#include "dtsim/hw/job.hpp"

#include <span>
#include <string>
#include <string_view>

namespace dtsim::hw {

using HwStrategy = Task<> (*)(Device&, const Job&);

Task<> ddp(Device& gpu, const Job& job);
Task<> fsdp(Device& gpu, const Job& job);
Task<> megatron(Device& gpu, const Job& job);
Task<> gpipe(Device& gpu, const Job& job);
Task<> one_f_one_b(Device& gpu, const Job& job);
// Runs job.plan's schedule.
Task<> scheduled_pipeline(Device& gpu, const Job& job);

// How a strategy lays out its pipeline stages.
enum class PipelineKind {
    none,       // no pipeline: pp must be 1
    fixed,      // a fixed order of forwards and backwards (gpipe, 1f1b)
    scheduled,  // a dtsim::sched schedule, generated or read from a file (Job::plan)
};

// A strategy as configs name it: what it runs, and which keys and sizes it takes
// (the config reader checks a config against these).
struct StrategyInfo {
    std::string_view name;
    HwStrategy run = nullptr;  // null for "puzzle", which runs on the puzzle model instead
    std::string_view title;
    bool tensor_parallel = true;  // takes tp > 1 (ddp is pure data parallelism)
    bool context_parallel = true;  // takes cp > 1 (all but ddp and puzzle)
    PipelineKind pipeline = PipelineKind::none;
    bool chunks = false;            // takes "chunks", model chunks per pipeline rank
    int fixed_chunks = 0;           // model chunks per pipeline rank set by the schedule (dualpipev: 2)
    bool microbatch_group = false;  // takes "microbatch_group"
    bool schedule_file = false;     // needs "schedule_file"
    bool sharding = false;          // takes "sharding"
    int min_zero_stage = 0, max_zero_stage = 1;  // the ZeRO stages it runs
    // Also runs ZeRO stage 3, FSDP inside its pipeline stages (torchtitan's 3D: ParamGather).
    bool zero3 = false;
    bool puzzle = false;            // runs a puzzle strategy (key "puzzle") on a model of kind "puzzle"
    bool split_backward = false;    // every backward split into input and weight gradients (ZB-H1)
    bool splits_last_backwards = false;  // its last few backwards split so (DualPipeV)
    // PyTorch's own data parallelism (DDP, FSDP), not Megatron-LM's: its loss by default
    // (CrossEntropy::pytorch) and no gradients held between steps (grads_on_demand).
    bool pytorch = false;

    // Whether some backward may run split into input and weight gradients (a schedule file's may).
    [[nodiscard]] bool may_split_backward() const { return split_backward || splits_last_backwards || schedule_file; }
    // Whether, at ZeRO `zero_stage`, the gradients are made during the backward rather than held
    // between steps: PyTorch's DDP (ZeRO-0) and FSDP (ZeRO-3), and FSDP inside pipeline stages
    // (zero3 at stage 3); ZeRO-1/2 and Megatron-LM keep a gradient buffer.
    [[nodiscard]] bool grads_in_backward(int zero_stage) const {
        return (pytorch && (zero_stage == 0 || zero_stage == 3)) || (zero3 && zero_stage == 3);
    }
    // Whether its weights are gathered layer by layer once a step and kept to its end (ParamGather):
    // ZeRO-3 inside pipeline stages, or the distributed optimizer's overlapped parameter gather
    // (overlap_param_gather), where the states are sharded (dp x cp > 1).
    [[nodiscard]] bool gathers_layers(int zero_stage, bool overlap_param_gather, long long zero_ranks) const {
        return (overlap_param_gather || (zero3 && zero_stage == 3)) && zero_ranks > 1;
    }
};

// Every strategy a config may name, in the order error messages list them.
std::span<const StrategyInfo> hw_strategies();
const StrategyInfo* find_hw_strategy(std::string_view name);
// Strategies that run a pipeline schedule from dtsim::sched.
bool is_scheduled_pipeline(std::string_view name);
// Whether the backward's tensor-parallel collectives run as Megatron-LM runs them, beside the
// first linear's GEMMs (StrategyConfig::tp_async_backward, async_backward_block in steps.cpp): never
// without tensor parallelism, where tp_comm_overlap pipelines them instead, or where every backward
// is split (its weight-gradient GEMM runs later); else as given, or for every strategy but
// PyTorch's own ("fsdp") and ZeRO-3 inside pipeline stages (torchtitan's 3D), whose tensor
// parallelism is DTensor's, blocking in the backward.
bool tp_async_backward(const StrategyConfig& s);
// Whether tp_comm_overlap runs Transformer Engine's userbuffers (Megatron-LM's --tp-comm-overlap):
// with tp > 1 and sequence parallelism, under Megatron's tensor parallelism, not PyTorch's
// ("fsdp", ZeRO-3 inside pipeline stages), where it stands for torchtitan's AsyncTP.
bool te_userbuffers(const StrategyConfig& s);
// Whether a config runs as PyTorch's own parallelism runs (DDP, FSDP, ZeRO-3 inside pipeline
// stages: torchtitan, Composer), gradients made during the backward (grads_in_backward), rather
// than as Megatron-LM's code or DeepSpeed's ZeRO-1/2 buckets.
bool pytorch_parallelism(const StrategyConfig& s);
// Whether a config's blocks are PyTorch's modules run eagerly (torchtitan, Composer: ddp, fsdp, and a
// pipeline with ZeRO-3 in its stages), not Megatron-Core's (its strategies, and fsdp_impl
// "megatron"): the defaults of rope_kernel and elementwise_kernels (layer_split).
bool pytorch_modules(const StrategyConfig& s);
// Whether the attention core runs as PyTorch's context-parallel ring (LayerSplit::
// pytorch_context_parallel): context parallelism in PyTorch's own modules, by either method.
bool pytorch_context_parallel(const StrategyConfig& s);
// Whether full recompute stops early (StrategyConfig::recompute_early_stop): as given, or with
// PyTorch's own parallelism.
bool recompute_early_stop(const StrategyConfig& s);
// Whether a weight-gradient pass (W, of a backward split into I and W) first gathers each
// column-parallel linear's input again, blocking: Megatron-LM's tensor parallelism with sequence
// parallelism keeps only the sequence-sharded input of QKV and fc1, and the zero-bubble schedules'
// implementation (sail-sg/zero-bubble-pipeline-parallelism) runs the gather that Megatron-LM's
// backward runs beside its input-gradient GEMM with the deferred weight-gradient GEMM instead.
// Never without sequence parallelism, with tp_comm_overlap, or for DTensor's tensor parallelism
// (PyTorch's strategies, ZeRO-3 inside pipeline stages), which keeps the gathered input.
bool weight_pass_gathers_input(const StrategyConfig& s);

}  // namespace dtsim::hw
