// grad_accum (grad_accum.hpp) for the puzzle world's model.
#include "grad_accum.hpp"

#include "dtsim/puzzle/registry.hpp"

namespace dtsim::puzzle {

template Task<> grad_accum<Model>(Model& model);

}  // namespace dtsim::puzzle
