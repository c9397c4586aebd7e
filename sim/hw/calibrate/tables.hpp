// The tables the measuring scripts write ({"description"?, "columns": [...], "rows": [[...], ...]})
// and the GPU their files name, read alike by the kernel, step, block and bandwidth readers, and the
// median the fits and validate take; private to dtsim::hw.
#pragma once

#include "json/reader.hpp"

#include <cstddef>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dtsim::hw::calib {

// The keys of a table section.
inline constexpr std::string_view kTableKeys[] = {"description", "columns", "rows"};

// Index of each column by name: every `required` one must be there, none twice; other columns are
// kept (the scripts write more than the readers use).
std::map<std::string, std::size_t> table_columns(const json_reader::Value& cols,
                                                 std::span<const std::string_view> required);

// Row i of `rows`, checked to be an array of one value per column.
json_reader::Value table_row(const json_reader::Value& rows, std::size_t i, std::size_t columns);

// The GPU a measurement names at `gpu`, whose family must be told (gpu_family: "NVIDIA H100 80GB
// HBM3" -> H100), else the error names that value's path.
std::string gpu_named(const json_reader::Value& gpu);
// The GPU a measurement file names ("meta": {"gpu"}): gpu_named at $.meta.gpu.
std::string measured_gpu(const json_reader::Value& root);

// The median of `v` (the mean of the middle two of an even count); v must not be empty.
double median_of(std::vector<double> v);

}  // namespace dtsim::hw::calib
