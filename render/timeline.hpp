// Draws the timeline picture of a trace onto a Cairo context, following a layout.
#pragma once

#include "layout.hpp"

#include <cairo.h>

namespace dtsim::render::detail {

void draw_timeline(cairo_t* cr, const Trace& trace, const Layout& layout);

}  // namespace dtsim::render::detail
