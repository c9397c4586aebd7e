// The measuring scripts' tables (tables.hpp).
#include "tables.hpp"

#include "dtsim/hw/calibrate.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace dtsim::hw::calib {

std::map<std::string, std::size_t> table_columns(const json_reader::Value& cols,
                                                 std::span<const std::string_view> required) {
    std::map<std::string, std::size_t> at;
    for (std::size_t i = 0; i < cols.size(); ++i) {
        const json_reader::Value c = cols.at(i);
        if (!at.emplace(c.string(), i).second)
            c.fail(fmt::format("column \"{}\" appears twice", json_reader::shorten(c.string())));
    }
    for (auto w : required)
        if (!at.count(std::string(w))) cols.fail(fmt::format("missing column \"{}\"", w));
    return at;
}

json_reader::Value table_row(const json_reader::Value& rows, std::size_t i, std::size_t columns) {
    const json_reader::Value r = rows.at(i);
    if (r.size() != columns) r.fail(fmt::format("expected {} values, one per column", columns));
    return r;
}

std::string gpu_named(const json_reader::Value& gpu) {
    const std::string& name = gpu.string();
    if (gpu_family(name).empty())
        gpu.fail(fmt::format("cannot tell the GPU family of \"{}\" (expected a name such as \"NVIDIA H100 80GB HBM3\")",
                             json_reader::shorten(name)));
    return name;
}

std::string measured_gpu(const json_reader::Value& root) { return gpu_named(root["meta"]["gpu"]); }

double median_of(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace dtsim::hw::calib
