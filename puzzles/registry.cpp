#include "dtsim/puzzle/registry.hpp"

#include <array>

namespace dtsim::puzzle {

std::span<const PuzzleInfo> puzzles() {
    // Canonical sizes and targets from the seed (shared/seeds/004_*.txt).
    static const std::array<PuzzleInfo, 8> all{{
        {"basic", &basic, 2, 4, 1, 17, 2600000, "Standard training: all batches at once"},
        {"grad_accum", &grad_accum, 2, 4, 1, 17, 2000000, "Gradient accumulation: one batch at a time"},
        {"ddp", &ddp, 2, 4, 4, 5, 1800000, "Distributed data parallel: all-reduce the weight grads"},
        {"wsdp", &wsdp, 6, 4, 4, 20, 2800000, "Weight-sharded data parallel: all-gather weights per layer"},
        {"fsdp", &fsdp, 6, 4, 4, 20, 2300000, "Fully sharded data parallel: scatter-reduce the grads"},
        {"pipeline", &pipeline, 8, 4, 4, 66, 3300000, "Pipeline parallel: layers split over ranks"},
        {"gpipe", &gpipe, 8, 4, 4, 33, 4100000, "GPipe: the pipeline one batch at a time"},
        {"pipeline_fsdp", &pipeline_fsdp, 4, 4, 16, 15, 1000000, "Pipeline + FSDP on 16 ranks"},
    }};
    return all;
}

const PuzzleInfo* find_puzzle(std::string_view name) {
    for (const auto& p : puzzles())
        if (p.name == name) return &p;
    return nullptr;
}

}  // namespace dtsim::puzzle
