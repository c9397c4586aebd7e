// Reading dtsim-membw's bandwidth files (calibration/gpu/membw_main.cpp), private to dtsim::hw.
#pragma once

#include "dtsim/hw/calibrate.hpp"
#include "json/reader.hpp"

#include <nlohmann/json.hpp>

#include <string>

namespace dtsim::hw::calib {

// A file with a "memory_bandwidth" section.
bool is_stream_file(const nlohmann::json& j);
// Its rows become a StreamSet, the file's stem its id: {"memory_bandwidth": {"gpu": name,
// "rows": [{"kernel", "bytes_per_array", "GBps", ...}, ...]}, "meta"?, "source"?, ...}.
void read_streams(const json_reader::Value& root, const std::string& file, const std::string& stem, GroundTruth& out);

}  // namespace dtsim::hw::calib
