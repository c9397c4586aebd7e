// The eight puzzles of the seed with their canonical sizes and targets (listed once, in the
// source tree's puzzles/all.hpp; docs/puzzle-semantics.md#the-eight-puzzles).
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

// The strategies, ports of the seed solutions: templates over the model they drive
// (puzzles/<name>.hpp defines each, for every world; puzzles/all.hpp lists them),
// instantiated for Model in dtsim::puzzles, so that `&ddp` is a Strategy and `ddp(model)`
// runs it.
template <class M>
Task<> basic(M& model);
template <class M>
Task<> grad_accum(M& model);
template <class M>
Task<> ddp(M& model);
template <class M>
Task<> wsdp(M& model);
template <class M>
Task<> fsdp(M& model);
template <class M>
Task<> pipeline(M& model);
template <class M>
Task<> gpipe(M& model);
template <class M>
Task<> pipeline_fsdp(M& model);

extern template Task<> basic<Model>(Model&);
extern template Task<> grad_accum<Model>(Model&);
extern template Task<> ddp<Model>(Model&);
extern template Task<> wsdp<Model>(Model&);
extern template Task<> fsdp<Model>(Model&);
extern template Task<> pipeline<Model>(Model&);
extern template Task<> gpipe<Model>(Model&);
extern template Task<> pipeline_fsdp<Model>(Model&);

}  // namespace dtsim::puzzle
