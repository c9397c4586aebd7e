// Reading the harness's transformer-block files (calibration/pytorch/dtsim_layer.py's "layers",
// dtsim_memory.py's "memory"), private to dtsim::hw.
#pragma once

#include "dtsim/hw/calibrate.hpp"
#include "json/reader.hpp"

#include <nlohmann/json.hpp>

#include <string>

namespace dtsim::hw::calib {

// A file with a "layers" section (block times) or a "memory" section (what a block keeps).
bool is_layer_file(const nlohmann::json& j);
// Its rows become a LayerSet; its other sections (the output layer, saved tensors) are
// documentation. Throws ConfigError naming the file and the JSON path.
void read_layers(const json_reader::Value& root, const std::string& file, const std::string& stem, GroundTruth& out);

}  // namespace dtsim::hw::calib
