// pipeline (pipeline.hpp) for the puzzle world's model.
#include "pipeline.hpp"

#include "dtsim/puzzle/registry.hpp"

namespace dtsim::puzzle {

template Task<> pipeline<Model>(Model& model);

}  // namespace dtsim::puzzle
