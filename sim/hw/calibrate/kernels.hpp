// Reading kernel files (calibration/pytorch/dtsim_kernels.py), private to dtsim::hw.
#pragma once

#include "dtsim/hw/calibrate.hpp"
#include "json/reader.hpp"

#include <nlohmann/json.hpp>

#include <string>

namespace dtsim::hw::calib {

// A file with an "attention" section.
bool is_kernel_file(const nlohmann::json& j);
// Its "attention" rows become a KernelSet, its GEMMs a set per data type; "launch" is checked for
// form only.
void read_kernels(const json_reader::Value& root, const std::string& file, const std::string& stem, GroundTruth& out);
// Its memory-bound kernels (the elementwise, cross_entropy and optimizer sections, any of them)
// become an EagerKernelSet "<stem>:eager_kernels", where it has any.
void read_eager_kernels(const json_reader::Value& root, const std::string& file, const std::string& stem,
                        GroundTruth& out);

}  // namespace dtsim::hw::calib
