// fsdp (fsdp.hpp) for the puzzle world's model.
#include "fsdp.hpp"

#include "dtsim/puzzle/registry.hpp"

namespace dtsim::puzzle {

template Task<> fsdp<Model>(Model& model);

}  // namespace dtsim::puzzle
