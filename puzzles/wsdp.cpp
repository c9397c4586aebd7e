// wsdp (wsdp.hpp) for the puzzle world's model.
#include "wsdp.hpp"

#include "dtsim/puzzle/registry.hpp"

namespace dtsim::puzzle {

template Task<> wsdp<Model>(Model& model);

}  // namespace dtsim::puzzle
