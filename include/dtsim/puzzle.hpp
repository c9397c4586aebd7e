// Everything a puzzle-world strategy author needs in one include: the Model a
// strategy drives (its five stores, local operations, collectives and passes),
// the values and stores, run_strategy and the registry of the eight puzzles.
//
//   #include <dtsim/puzzle.hpp>
//   using dtsim::Task;
//   using namespace dtsim::puzzle;
//   Task<> my_strategy(Model& model) { ... }
//   auto result = run_strategy(my_strategy, layers, batches, ranks);
#pragma once

#include "dtsim/puzzle/model.hpp"
#include "dtsim/puzzle/registry.hpp"
#include "dtsim/puzzle/run.hpp"
#include "dtsim/puzzle/store.hpp"
#include "dtsim/puzzle/values.hpp"
#include "dtsim/simulation.hpp"
