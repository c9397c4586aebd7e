// Reading kernel files (calibration/pytorch/dtsim_kernels.py), private to dtsim::hw.
#pragma once

#include "dtsim/hw/calibrate.hpp"
#include "json/reader.hpp"

#include <nlohmann/json.hpp>

#include <string>

namespace dtsim::hw::calib {

// A file with an "attention" section.
bool is_kernel_file(const nlohmann::json& j);
// Its "attention" rows become a KernelSet; the other sections are checked for form only.
void read_kernels(const json_reader::Value& root, const std::string& file, const std::string& stem, GroundTruth& out);

}  // namespace dtsim::hw::calib
