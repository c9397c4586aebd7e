// How configs and ground-truth files are read (private to dtsim::hw): with the
// JSON reader (sim/json/reader.hpp) in the dialect whose errors are ConfigErrors.
#pragma once

#include "dtsim/hw/config.hpp"
#include "json/reader.hpp"

namespace dtsim::hw {

// Errors are ConfigError(file, path, message); an object's members are "keys".
const json_reader::Dialect& config_dialect();

}  // namespace dtsim::hw
