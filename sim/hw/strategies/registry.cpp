#include "dtsim/hw/strategies.hpp"

#include <array>

namespace dtsim::hw {

std::span<const StrategyInfo> hw_strategies() {
    static const std::array<StrategyInfo, 10> all{{
        {"ddp", &ddp, "data parallel, bucketed gradient all-reduce overlapping the backward"},
        {"fsdp", &fsdp, "ZeRO-3: per-layer all-gather (prefetched) and reduce-scatter"},
        {"megatron", &megatron, "Megatron-LM tensor parallelism x data parallelism"},
        {"gpipe", &gpipe, "GPipe pipeline x tensor x data parallelism"},
        {"1f1b", &one_f_one_b, "1F1B pipeline (PipeDream-Flush) x tensor x data parallelism"},
        {"interleaved", &scheduled_pipeline, "interleaved 1F1B with v chunks per rank (Megatron-LM's order)"},
        {"zbh1", &scheduled_pipeline, "ZB-H1 zero-bubble pipeline (backward split into I and W)"},
        {"bfs", &scheduled_pipeline, "looped breadth-first pipeline with v chunks per rank"},
        {"dualpipev", &scheduled_pipeline, "DualPipeV: V-shaped two-chunk pipeline"},
        {"schedule", &scheduled_pipeline, "a pipeline schedule read from a file (PyTorch action notation or CSV)"},
    }};
    return all;
}

const StrategyInfo* find_hw_strategy(std::string_view name) {
    for (const auto& s : hw_strategies())
        if (s.name == name) return &s;
    return nullptr;
}

}  // namespace dtsim::hw
