// Draws the timeline picture of a trace onto a Cairo context, following a layout.
#pragma once

#include "layout.hpp"

#include <cairo.h>

namespace dtsim::render::detail {

void draw_timeline(cairo_t* cr, const Trace& trace, const Layout& layout);

// An overview row's tallies of one member rank, the members taken in order (Row::fed, gathered
// while the trace is read or by draw_row): its events' busy share per pixel column, weighted by
// 1 / members, on the compute and comm lanes, its memory steps' largest value per column, and on
// the peak's row where the peak's step ends.
void tally_rank(const Layout& l, const Row& row, const Summary& summary, const RankTrace& rank, FedColumns& t);
// The end of the red bar at the peak: that of the peak rank's memory step that starts at or before the
// summary's peak time, lasts beyond it and holds the peak (the last such), else `t_end`.
double peak_step_end(const Summary& s, const RankTrace& rank, double t_end);

}  // namespace dtsim::render::detail
