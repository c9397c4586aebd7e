// The chart of `dtsim compare`: one row per run, the mean step time per GPU as
// a bar split into compute, exposed communication and idle time, and beside it
// the peak memory per GPU against the GPU's capacity (red past it). SVG, PNG
// or PDF by the path's extension; deterministic output.
#pragma once

#include <string>
#include <vector>

namespace dtsim::render {

struct CompareRow {
    std::string name;
    double compute = 0, comm = 0, idle = 0;  // seconds, mean per GPU
    double peak_memory = 0, capacity = 0;    // bytes per GPU
};

// Throws std::invalid_argument for an unknown extension, std::runtime_error when writing fails.
void write_compare_chart(const std::vector<CompareRow>& rows, const std::string& path, const std::string& title);

}  // namespace dtsim::render
