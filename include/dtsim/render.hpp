// Pictures: the timeline of a trace (one row per GPU, every operation a box,
// memory over time underneath) as SVG, PNG or PDF, the Chrome / Perfetto export
// of the same events, and the chart of `dtsim compare`. Reads only the trace
// type; this is the only part of dtsim that links Cairo (dtsim::render).
#pragma once

#include "dtsim/trace.hpp"

#include <cstddef>
#include <iosfwd>
#include <string>
#include <vector>

namespace dtsim::render {

struct Options {
    // Which ranks get a row: "0-7,1023" (ids and inclusive ranges, comma separated);
    // empty selects every rank.
    std::string ranks;
    // Image width in pixels (SVG and PDF use the same number of points); 0 picks one
    // from the number of events per rank.
    int width = 0;
    // First line of the title; empty builds it from the trace's meta (puzzle or config name).
    std::string title;
    // More selected ranks than this are drawn as an overview: consecutive ranks are
    // grouped into at most max_rows rows, each showing per time bucket the most
    // frequent kind of operation and the fraction of the group that is busy.
    int max_rows = 48;
};

enum class Format { svg, png, pdf };

// The format named by the path's extension (.svg, .png, .pdf, any case). Throws
// std::invalid_argument naming the path and the accepted extensions.
Format format_from_path(const std::string& path);

// Draws the trace. Throws std::invalid_argument for bad options (rank selection,
// width, max_rows) and std::runtime_error when Cairo or the output fails. The same
// trace and options give byte-identical SVG and PNG, also within one process.
void write_image(const Trace& trace, std::ostream& out, Format format, const Options& options = {});
// Picks the format from the path's extension (see format_from_path).
void write_image(const Trace& trace, const std::string& path, const Options& options = {});

// Chrome Trace Event Format JSON, readable by Perfetto and chrome://tracing: a
// process per rank (pid = rank, named "GPU r"), a thread per stream (tid 0
// compute, tid 1 comm), an "X" event per operation with cat = its kind and args
// {layer, batches, memory, bytes, flops} where present, and a "memory" counter per
// rank. Timestamps are microseconds: a puzzle step is drawn as 1000 us (1 ms), a
// hardware second as 1e6 us. The output is deterministic.
inline constexpr double kChromeMicrosPerStep = 1000.0;
inline constexpr double kChromeMicrosPerSecond = 1e6;
void write_chrome_trace(const Trace& trace, std::ostream& out);
void write_chrome_trace_file(const Trace& trace, const std::string& path);

// The ranks named by a selection such as "0-7,1023" (comma-separated ids and
// inclusive ranges A-B, spaces allowed), sorted and without duplicates; an empty
// spec selects 0..nranks-1. Throws std::invalid_argument naming the bad token and
// the valid range.
std::vector<int> parse_rank_selection(const std::string& spec, int nranks);

// The chart of `dtsim compare`: one row per run, the mean step time per GPU as
// a bar split into compute, exposed communication and idle time, and beside it
// the peak memory per GPU against the GPU's capacity (red past it). SVG, PNG
// or PDF by the path's extension; deterministic output.
struct CompareRow {
    std::string name;
    double compute = 0, comm = 0, idle = 0;  // seconds, mean per GPU
    double peak_memory = 0, capacity = 0;    // bytes per GPU
};

// Throws std::invalid_argument for an unknown extension, std::runtime_error when writing fails.
void write_compare_chart(const std::vector<CompareRow>& rows, const std::string& path, const std::string& title);

// The chart of `dtsim plan --svg`: each layout simulated as a point of step time against peak
// memory per GPU (grey when it fits, a red cross when it does not), the GPU's capacity as a dashed
// line, and the Pareto front (the layouts that fit and that no other that fits beats in both
// step time and memory) as a blue staircase, its layouts numbered and listed fastest first (the
// first 15). SVG, PNG or PDF by the path's extension; deterministic output.
struct ParetoPoint {
    std::string label;
    double step_time = 0;    // s
    double peak_memory = 0;  // bytes per GPU
    bool oom = false;
};

// The front: indices of `points`, by peak memory ascending (step time descending); of points with
// the same figures, the first given.
std::vector<std::size_t> pareto_front(const std::vector<ParetoPoint>& points);

// Throws std::invalid_argument for an unknown extension or a figure that is not finite,
// std::runtime_error when writing fails.
void write_pareto_chart(const std::vector<ParetoPoint>& points, double capacity, const std::string& path,
                        const std::string& title);

}  // namespace dtsim::render
