// The eight puzzles of the seed with their canonical sizes and targets.
#pragma once

#include "dtsim/puzzle/run.hpp"

#include <span>
#include <string>
#include <string_view>

namespace dtsim::puzzle {

struct PuzzleInfo {
    std::string name;
    Strategy strategy;
    int layers;
    int batches;
    int ranks;
    double target_steps;   // the seed's target "Timesteps" (rounded figures)
    double target_memory;  // the seed's target "Maximum Memory"
    std::string title;
};

std::span<const PuzzleInfo> puzzles();
const PuzzleInfo* find_puzzle(std::string_view name);

// The strategies (puzzles/*.cpp), ports of the seed solutions.
Task<> basic(Model& model);
Task<> grad_accum(Model& model);
Task<> ddp(Model& model);
Task<> wsdp(Model& model);
Task<> fsdp(Model& model);
Task<> pipeline(Model& model);
Task<> gpipe(Model& model);
Task<> pipeline_fsdp(Model& model);

}  // namespace dtsim::puzzle
