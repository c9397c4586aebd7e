// pipeline_fsdp (pipeline_fsdp.hpp) for the puzzle world's model.
#include "pipeline_fsdp.hpp"

#include "dtsim/puzzle/registry.hpp"

namespace dtsim::puzzle {

template Task<> pipeline_fsdp<Model>(Model& model);

}  // namespace dtsim::puzzle
