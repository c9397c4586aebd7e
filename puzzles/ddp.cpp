// ddp (ddp.hpp) for the puzzle world's model.
#include "ddp.hpp"

#include "dtsim/puzzle/registry.hpp"

namespace dtsim::puzzle {

template Task<> ddp<Model>(Model& model);

}  // namespace dtsim::puzzle
