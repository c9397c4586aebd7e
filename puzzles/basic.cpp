// basic (basic.hpp) for the puzzle world's model.
#include "basic.hpp"

#include "dtsim/puzzle/registry.hpp"

namespace dtsim::puzzle {

template Task<> basic<Model>(Model& model);

}  // namespace dtsim::puzzle
