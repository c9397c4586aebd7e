// Draws the timeline picture of a trace onto a Cairo context, following a layout.
#pragma once

#include "layout.hpp"

#include <cairo.h>

namespace dtsim::render::detail {

void draw_timeline(cairo_t* cr, const Trace& trace, const Layout& layout);

// An overview row's tallies of one member rank, the members taken in order (draw_row draws them, or
// Row::fed where they were gathered while reading): its events' busy share per pixel column, weighted
// by 1 / members, on the compute and comm lanes, and its memory steps' largest value per column.
void add_group_rank(const Layout& l, const Row& row, const RankTrace& rank, BusyColumns& compute, BusyColumns& comm);
void add_memory_rank(const Layout& l, const RankTrace& rank, MaxColumns& memory);
// The end of the red bar at the peak: that of the peak rank's memory step that starts at or before the
// summary's peak time, lasts beyond it and holds the peak (the last such), else `t_end`.
double peak_step_end(const Summary& s, const RankTrace& rank, double t_end);

}  // namespace dtsim::render::detail
