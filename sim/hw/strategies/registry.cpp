#include "dtsim/hw/strategies.hpp"

#include <array>

namespace dtsim::hw {

std::span<const StrategyInfo> hw_strategies() {
    using enum PipelineKind;
    static const std::array<StrategyInfo, 11> all{{
        {.name = "ddp",
         .run = &ddp,
         .title = "data parallel, bucketed gradient all-reduce overlapping the backward",
         .tensor_parallel = false,
         .context_parallel = false,
         .max_zero_stage = 2,  // ZeRO-1 and -2 reduce-scatter the buckets (DeepSpeed's stages)
         .pytorch = true},
        {.name = "fsdp",
         .run = &fsdp,
         .title = "ZeRO-3: per-layer all-gather (prefetched) and reduce-scatter, x tensor parallelism (2D)",
         .sharding = true,
         .min_zero_stage = 3,
         .max_zero_stage = 3,
         .pytorch = true},
        {.name = "megatron", .run = &megatron, .title = "Megatron-LM tensor parallelism x data parallelism"},
        {.name = "gpipe",
         .run = &gpipe,
         .title = "GPipe pipeline x tensor x data parallelism",
         .pipeline = fixed,
         .zero3 = true},
        {.name = "1f1b",
         .run = &one_f_one_b,
         .title = "1F1B pipeline (PipeDream-Flush) x tensor x data parallelism",
         .pipeline = fixed,
         .zero3 = true},
        {.name = "interleaved",
         .run = &scheduled_pipeline,
         .title = "interleaved 1F1B with v chunks per rank (Megatron-LM's order)",
         .pipeline = scheduled,
         .chunks = true,
         .microbatch_group = true,
         .zero3 = true},
        {.name = "zbh1",
         .run = &scheduled_pipeline,
         .title = "ZB-H1 zero-bubble pipeline (backward split into I and W)",
         .pipeline = scheduled,
         .zero3 = true,
         .split_backward = true},
        {.name = "bfs",
         .run = &scheduled_pipeline,
         .title = "looped breadth-first pipeline with v chunks per rank",
         .pipeline = scheduled,
         .chunks = true,
         .zero3 = true},
        {.name = "dualpipev",
         .run = &scheduled_pipeline,
         .title = "DualPipeV: V-shaped two-chunk pipeline",
         .pipeline = scheduled,
         .fixed_chunks = 2,
         .zero3 = true,
         .splits_last_backwards = true},
        {.name = "schedule",
         .run = &scheduled_pipeline,
         .title = "a pipeline schedule read from a file (PyTorch action notation or CSV)",
         .pipeline = scheduled,
         .schedule_file = true,
         .zero3 = true},
        {.name = "puzzle",
         .title = "one of the eight puzzle strategies on the puzzle model's hardware costs",
         .tensor_parallel = false,
         .context_parallel = false,
         .puzzle = true},
    }};
    return all;
}

const StrategyInfo* find_hw_strategy(std::string_view name) {
    for (const auto& s : hw_strategies())
        if (s.name == name) return &s;
    return nullptr;
}

bool is_scheduled_pipeline(std::string_view name) {
    const StrategyInfo* s = find_hw_strategy(name);
    return s && s->pipeline == PipelineKind::scheduled;
}

namespace {
// Megatron-LM's tensor parallelism (its column- and row-parallel linears), not DTensor's.
bool megatron_tensor_parallel(const StrategyInfo& info, const StrategyConfig& s) {
    return !info.pytorch && s.zero_stage != 3;
}
}  // namespace

bool tp_async_backward(const StrategyConfig& s) {
    const StrategyInfo* info = find_hw_strategy(s.name);
    if (!info || s.tp < 2 || (s.sequence_parallel && s.tp_comm_overlap) || info->split_backward) return false;
    if (s.tp_async_backward) return *s.tp_async_backward;
    return megatron_tensor_parallel(*info, s);
}

bool te_userbuffers(const StrategyConfig& s) {
    const StrategyInfo* info = find_hw_strategy(s.name);
    return info && s.tp > 1 && s.sequence_parallel && s.tp_comm_overlap && megatron_tensor_parallel(*info, s);
}

bool pytorch_parallelism(const StrategyConfig& s) {
    const StrategyInfo* info = find_hw_strategy(s.name);
    return info && info->grads_in_backward(s.zero_stage);
}

bool pytorch_modules(const StrategyConfig& s) {
    const StrategyInfo* info = find_hw_strategy(s.name);
    return info && ((info->pytorch && s.fsdp_impl != "megatron") || (info->zero3 && s.zero_stage == 3));
}

bool pytorch_context_parallel(const StrategyConfig& s) { return s.cp > 1 && pytorch_modules(s); }

bool recompute_early_stop(const StrategyConfig& s) {
    return s.recompute_early_stop ? *s.recompute_early_stop : pytorch_parallelism(s);
}

bool weight_pass_gathers_input(const StrategyConfig& s) {
    const StrategyInfo* info = find_hw_strategy(s.name);
    return info && s.tp > 1 && s.sequence_parallel && !s.tp_comm_overlap && megatron_tensor_parallel(*info, s);
}

}  // namespace dtsim::hw
