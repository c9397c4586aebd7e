// Per-pixel-column summaries for what is too narrow to draw one by one: boxes
// under half a pixel, memory steps under a pixel, and the rows of the overview
// that stand for several ranks. Each column keeps how busy it is and which style
// covers most of it; consecutive equal columns come back as one run.
#pragma once

#include "palette.hpp"

#include <utility>
#include <vector>

namespace dtsim::render::detail {

// The columns [first, end) that [x0, x1) touches (pixels from the plot's left edge), clipped to
// [0, ncols); a point inside gets its column. Any finite or infinite x is safe.
std::pair<int, int> column_span(double x0, double x1, int ncols);

class BusyColumns {
public:
    explicit BusyColumns(int ncols);

    // Adds `weight` times the part of [x0, x1) (pixels from the plot's left edge)
    // that falls in each column, tallied under `key`.
    void add(double x0, double x1, StyleKey key, double weight);

    struct Run {
        int first = 0;  // first column
        int end = 0;    // one past the last column
        StyleKey key = 0;
        double level = 0;  // busy fraction in (0, 1], rounded to 1/levels
    };
    // Runs of columns with the same dominant style and rounded busy fraction; idle
    // columns are left out, barely busy ones get the lowest level.
    [[nodiscard]] std::vector<Run> runs(int levels) const;

private:
    std::vector<float> busy_;
    std::vector<float> lead_;  // weighted majority vote: how far key_ leads
    std::vector<StyleKey> key_;
};

class MaxColumns {
public:
    explicit MaxColumns(int ncols);

    // Raises every column that [x0, x1) touches to at least `value`.
    void add(double x0, double x1, double value);

    struct Run {
        int first = 0;
        int end = 0;
        double value = 0;  // the largest value in the run
    };
    // Runs of touched columns whose values round to the same multiple of `quantum`.
    [[nodiscard]] std::vector<Run> runs(double quantum) const;

private:
    std::vector<double> max_;
    std::vector<bool> touched_;
};

}  // namespace dtsim::render::detail
