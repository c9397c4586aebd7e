// Writing a chart of a fixed size as SVG, PNG or PDF (by the path's extension) through one drawing
// function: the surface, its checks, SVG ids made stable (svg_ids.hpp), and the file written whole
// or not at all (dtsim/detail/output_file.hpp). Private to render/.
#pragma once

#include <cairo.h>

#include <functional>
#include <string>

namespace dtsim::render::detail {

// Throws std::invalid_argument for an unknown extension, std::runtime_error when drawing or
// writing fails (`what` names the chart in the message).
// A round axis step: 1, 2 or 5 times a power of ten, about `target` ticks over `max` (> 0).
double tick_step(double max, int target);

void write_chart(const std::string& path, double width, double height, const char* what,
                 const std::function<void(cairo_t*)>& draw);

}  // namespace dtsim::render::detail
