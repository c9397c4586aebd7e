// Cairo 1.16 names the SVG's top group after the surface's id, which comes from a
// process-wide counter: the second picture drawn in a process says "surface6"
// where the first said "surface1". Renumbering makes the output depend only on
// what was drawn.
#pragma once

#include <string>

namespace dtsim::render::detail {

// Renames every "surfaceN" id (definitions and references) in order of first
// appearance to surface1, surface2, ...
std::string normalise_surface_ids(const std::string& svg);

}  // namespace dtsim::render::detail
