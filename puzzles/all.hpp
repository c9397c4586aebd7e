// The eight puzzle strategies, listed once: each with its name, the strategy (a template
// over the model it drives, puzzles/<name>.hpp), the seed's canonical sizes and targets, its
// title, and the sizes it is written for.
//
// Every world takes the strategies from here: the registry (registry.cpp, for
// dtsim::puzzle::Model: `dtsim puzzle`, `dtsim puzzles`, the hardware world's `puzzle`
// strategy) with all_puzzles<Model>, the real-GPU harness (calibration/host/schedule.cpp)
// with all_puzzles<harness::Model>. A new strategy is registered by adding its line here,
// its header puzzles/<name>.hpp, its instantiation for Model in puzzles/<name>.cpp and its
// declaration in include/dtsim/puzzle/registry.hpp.
#pragma once

#include "basic.hpp"
#include "ddp.hpp"
#include "fsdp.hpp"
#include "gpipe.hpp"
#include "grad_accum.hpp"
#include "pipeline.hpp"
#include "pipeline_fsdp.hpp"
#include "wsdp.hpp"

#include "dtsim/puzzle/registry.hpp"  // the templates' declarations, and their instantiations for Model
#include "dtsim/task.hpp"

#include <array>
#include <string_view>

namespace dtsim::puzzle {

// The sizes a port of a seed solution is written for, beyond the puzzle's own (at least one
// layer, batch and rank): "" where the strategy runs at `layers`, `batches` and `ranks`, else
// why it does not. The puzzle world runs any sizes and lets a strategy break a rule or fail
// the final check there, as the reference library does; dtsim-puzzle-real refuses sizes
// outside these before it touches a GPU.
using SizeRule = std::string_view (*)(int layers, int batches, int ranks);

namespace size_rules {

// basic, grad_accum: one GPU takes every batch.
constexpr std::string_view one_gpu(int /*layers*/, int /*batches*/, int ranks) {
    return ranks == 1 ? "" : "it runs on one GPU: ranks must be 1";
}

// ddp, wsdp, fsdp: get_activation({rank}).
constexpr std::string_view batch_per_rank(int /*layers*/, int batches, int ranks) {
    return batches == ranks ? "" : "rank r takes batch r, so batches must equal ranks";
}

// pipeline, gpipe: rank r holds layers [r * LAYERS / RANKS, (r + 1) * LAYERS / RANKS).
constexpr std::string_view layers_per_rank(int layers, int /*batches*/, int ranks) {
    return layers % ranks == 0 ? ""
                               : "each rank holds LAYERS / RANKS layers, so layers must be a multiple of ranks";
}

// pipeline_fsdp: 4 stages of consecutive ranks, a batch per group of 4; the seed's rank holds
// LAYERS // (RANKS // 4) layers from (rank % 4) times that on.
constexpr std::string_view four_stages(int layers, int batches, int ranks) {
    if (ranks % 4 != 0) return "4 pipeline stages of consecutive ranks, so ranks must be a multiple of 4";
    if (batches != ranks / 4) return "each group of 4 ranks takes one batch, so batches must equal ranks / 4";
    if (ranks != 16) return "its 4 pipeline stages of LAYERS / (RANKS / 4) layers hold every layer only at 16 ranks";
    if (layers % 4 != 0) return "4 pipeline stages, so layers must be a multiple of 4";
    return "";
}

}  // namespace size_rules

template <class M>
struct PuzzleStrategy {
    std::string_view name;
    Task<> (*strategy)(M&);
    int layers;            // the seed's canonical sizes
    int batches;
    int ranks;
    double target_steps;   // the seed's target "Timesteps" (rounded figures)
    double target_memory;  // the seed's target "Maximum Memory"
    std::string_view title;
    SizeRule sizes;
};

// Canonical sizes and targets from the seed (docs/puzzle-semantics.md#the-eight-puzzles).
template <class M>
inline constexpr auto all_puzzles = std::to_array<PuzzleStrategy<M>>({
    {"basic", &basic<M>, 2, 4, 1, 17, 2600000, "Standard training: all batches at once", size_rules::one_gpu},
    {"grad_accum", &grad_accum<M>, 2, 4, 1, 17, 2000000, "Gradient accumulation: one batch at a time",
     size_rules::one_gpu},
    {"ddp", &ddp<M>, 2, 4, 4, 5, 1800000, "Distributed data parallel: all-reduce the weight grads",
     size_rules::batch_per_rank},
    {"wsdp", &wsdp<M>, 6, 4, 4, 20, 2800000, "Weight-sharded data parallel: all-gather weights per layer",
     size_rules::batch_per_rank},
    {"fsdp", &fsdp<M>, 6, 4, 4, 20, 2300000, "Fully sharded data parallel: scatter-reduce the grads",
     size_rules::batch_per_rank},
    {"pipeline", &pipeline<M>, 8, 4, 4, 66, 3300000, "Pipeline parallel: layers split over ranks",
     size_rules::layers_per_rank},
    {"gpipe", &gpipe<M>, 8, 4, 4, 33, 4100000, "GPipe: the pipeline one batch at a time", size_rules::layers_per_rank},
    {"pipeline_fsdp", &pipeline_fsdp<M>, 4, 4, 16, 15, 1000000, "Pipeline + FSDP on 16 ranks",
     size_rules::four_stages},
});

}  // namespace dtsim::puzzle
