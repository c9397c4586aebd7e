// gpipe (gpipe.hpp) for the puzzle world's model.
#include "gpipe.hpp"

#include "dtsim/puzzle/registry.hpp"

namespace dtsim::puzzle {

template Task<> gpipe<Model>(Model& model);

}  // namespace dtsim::puzzle
