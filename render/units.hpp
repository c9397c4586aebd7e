// How times and memory sizes read on the picture: axis ticks, units picked by
// magnitude (steps in the puzzle world; ns/us/ms/s, and hours from 3 h, and
// B/KiB/MiB/GiB in the hardware world).
#pragma once

#include <string>
#include <vector>

namespace dtsim::render::detail {

// Evenly spaced "nice" tick positions (1, 2 or 5 times a power of ten) covering [t0, t1].
struct Ticks {
    double step = 1;             // in trace units
    std::vector<double> values;  // in trace units
    std::string unit;            // "steps", "h", "s", "ms", "us" (as "µs"), "ns"
    double unit_scale = 1;       // trace value * unit_scale = displayed value
    int decimals = 0;            // digits after the point in the labels
};

// About `target` ticks over [t0, t1]; `seconds` selects the hardware units.
Ticks time_ticks(double t0, double t1, int target, bool seconds);
std::string tick_label(double value, const Ticks& ticks);

// "5.1" (puzzle steps) or "4.1 ms" (hardware seconds).
std::string format_time(double t, bool seconds);
// "1,835,008 units" (puzzle world) or "1.75 MiB" (bytes).
std::string format_memory(double m, bool bytes);
// A plain number: integers in full, otherwise six significant digits.
std::string format_number(double v);

}  // namespace dtsim::render::detail
