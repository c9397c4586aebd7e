// Pictures: the timeline of a trace (one row per GPU, every operation a box,
// memory over time underneath) as SVG, PNG or PDF, the Chrome / Perfetto export
// of the same events, and the chart of `dtsim compare`. Reads only the trace
// type; this is the only part of dtsim that links Cairo (dtsim::render).
#pragma once

#include "dtsim/trace.hpp"

#include <cstddef>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

namespace dtsim::render {

// What the rows of the timeline are.
enum class View {
    automatic,  // the pipeline view for a pipelined trace (RankGrid::pp > 1, microbatches recorded), else ranks
    pipeline,   // one row per pipeline rank: its passes (F, B, I, W, recompute) per microbatch, idle time shaded
    ranks,      // one row per GPU: every operation a box
};

struct Options {
    // Which ranks get a row: "0-7,1023" (ids and inclusive ranges) or coordinates of the
    // trace's grid such as "pp=0-3,dp=0" (see parse_rank_selection); empty selects every
    // rank (in the pipeline view: one rank per pipeline rank).
    std::string ranks;
    View view = View::automatic;
    // Image width in pixels (SVG and PDF use the same number of points); 0 picks one
    // from the number of events per rank.
    int width = 0;
    // First line of the title; empty builds it from the trace's meta (puzzle or config name).
    std::string title;
    // More selected ranks than this are drawn as an overview: ranks are grouped into at
    // most max_rows rows, each showing per time bucket the most frequent kind of
    // operation and the fraction of the group that is busy. Where the trace records its
    // grid, a row is a whole group (a tensor-parallel group, a pipeline stage's ranks...).
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
// process per rank (pid = rank, named "GPU r", with its grid coordinates where the
// trace has a grid), a thread per stream (compute, comm, and comm 2, ... for comm events
// that overlap, so that no thread's slices cross; thread ids unique across the export), an
// "X" event per operation named like "F mb3 L12" (pass letter or operation, microbatches,
// layer) with cat = its kind and args {layer, batches, memory, bytes, flops} where present, a
// flow arrow from each send to its receive, and a "memory GPU r" counter per rank (GiB for
// traces in bytes, the trace's units otherwise; none where the trace records no memory). Timestamps are
// microseconds: a puzzle step is drawn as 1000 us (1 ms), a hardware second as 1e6 us.
// The output is deterministic.
inline constexpr double kChromeMicrosPerStep = 1000.0;
inline constexpr double kChromeMicrosPerSecond = 1e6;
void write_chrome_trace(const Trace& trace, std::ostream& out);
void write_chrome_trace_file(const Trace& trace, const std::string& path);

// How the ranks of a run are laid out: Megatron-LM's order, tensor-parallel fastest,
// then context, data and pipeline parallel (rank = ((pp * dp + dp_rank) * cp + cp_rank)
// * tp + tp_rank). Read from the trace's meta "grid" (docs/trace-format.md).
struct RankGrid {
    int tp = 1, cp = 1, dp = 1, pp = 1;
    bool known = false;  // the trace records its grid
    struct Coords {
        int tp = 0, cp = 0, dp = 0, pp = 0;
    };
    [[nodiscard]] int size() const { return tp * cp * dp * pp; }
    [[nodiscard]] Coords coords(int rank) const;
    [[nodiscard]] int rank(const Coords& c) const { return ((c.pp * dp + c.dp) * cp + c.cp) * tp + c.tp; }
};

// The grid of a trace: its meta "grid" ({"tp", "cp", "dp", "pp"}, each optional, default 1);
// for traces written before that field, a hardware config's "strategy" (dp, tp, pp, cp) or a
// pipeline schedule's "stages" (pp = ranks). Unknown (known = false, one rank per dp) when
// none is there or the sizes do not multiply to the number of ranks.
RankGrid grid_of(const Trace& trace);

// The ranks named by a selection, sorted and without duplicates: comma-separated ids and
// inclusive ranges A-B ("0-7,1023", spaces allowed), and coordinates of the grid, NAME=A or
// NAME=A-B with NAME one of tp, cp, dp, pp ("pp=0-3,dp=0"). A rank is selected when it is
// named by an id or range, or when it matches every coordinate named (a coordinate named
// twice matches either range). An empty spec selects 0..nranks-1. Throws
// std::invalid_argument naming the bad token and the valid range; coordinates need a known grid.
std::vector<int> parse_rank_selection(const std::string& spec, int nranks);
std::vector<int> parse_rank_selection(const std::string& spec, const RankGrid& grid, int nranks);

// Reading a trace only to draw it (dtsim render): a hook for read_trace_file (trace_io.hpp,
// passed as std::ref) that keeps whole only the ranks the picture draws, where that is known
// before their events are read: the trace's meta, which dtsim writes before the ranks, gives the
// whole grid (tp, cp, dp and pp), and `options` ask for one row per pipeline rank (the pipeline
// view without --show-ranks) or name the ranks. Of every other rank it keeps what sets the
// picture's time span, memory scale, figures and the trace's summary: the events with the
// earliest start, the latest end and the highest memory (each the first such), the last event
// and the first pass of a microbatch, in their order, and the largest sample of memory by kind. A
// rank holding a number the picture would refuse (not finite; a negative amount) stays whole, so
// that the error names what it names in the whole trace. The picture of the thinned trace is then
// the picture of the whole trace, in memory that grows with the ranks drawn, not with all of them.
// complete() says whether it is: where the layout draws a rank that was thinned (the grid did not
// fit the ranks, a selection named a rank that is not there, a pipeline view that falls back to
// the overview), the trace must be read again without the hook.
class RankThinner {
public:
    explicit RankThinner(Options options);
    void operator()(const Trace& so_far, RankTrace& rank);
    [[nodiscard]] bool complete(const Trace& trace) const;
    [[nodiscard]] std::size_t thinned() const;  // ranks thinned
    // The overview (more ranks drawn than max_rows, in group rows) was thinned: its ranks keep also
    // what the overview's layout reads of the ranks it draws (the first event of each kind and name,
    // the first instant and the first that is not the loss, the first on the comm stream, the highest
    // layer), and its rows are gathered by an OverviewFeed on a second read; complete() is false.
    [[nodiscard]] bool overview() const;

private:
    enum class Plan { undecided, keep_all, select, overview };
    void decide(const Trace& so_far);
    Options options_;
    Plan plan_ = Plan::undecided;
    std::vector<int> wanted_;        // rank ids drawn, sorted (Plan::select)
    std::vector<char> kept_;         // by rank index: kept whole
};

// The overview from a trace read twice (dtsim render), in memory that does not grow with its
// events: a first read through a RankThinner whose overview() holds; then this lays the picture out
// from the thinned trace and, as the hook of a second read of the same file (passed as std::ref),
// tallies each rank's events into its row's pixel columns (busy share and kind per column, the
// largest memory per column, where the peak's bar ends) and drops them. write_image then draws what
// write_image of the whole trace draws, byte for byte. complete() says whether the picture is an
// overview and the second read gave every rank of the first, in order; where it is not, read the
// trace whole. The constructor throws what write_image would (std::invalid_argument); `thinned` must
// outlive the feed.
class OverviewFeed {
public:
    OverviewFeed(const Trace& thinned, const Options& options);
    ~OverviewFeed();
    OverviewFeed(const OverviewFeed&) = delete;
    OverviewFeed& operator=(const OverviewFeed&) = delete;
    void operator()(const Trace& so_far, RankTrace& rank);
    [[nodiscard]] bool overview() const;  // the thinned trace's picture is an overview: worth a second read
    [[nodiscard]] bool complete() const;
    // The format from the path's extension (see format_from_path); the file is written whole or not at all.
    void write_image(const std::string& path) const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

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
// line (with a headroom, plan --headroom, the capacity less it as a dotted one), and the Pareto
// front (the layouts that fit and that no other that fits beats in both step time and memory) as
// a blue staircase, its layouts numbered and listed fastest first (the first 15). SVG, PNG or PDF
// by the path's extension; deterministic output.
struct ParetoPoint {
    std::string label;
    double step_time = 0;    // s
    double peak_memory = 0;  // bytes per GPU
    bool oom = false;
};

// The front: indices of `points`, by peak memory ascending (step time descending); of points with
// the same figures, the first given.
std::vector<std::size_t> pareto_front(const std::vector<ParetoPoint>& points);

// Throws std::invalid_argument for an unknown extension, a figure that is not finite or a headroom
// not below the capacity, std::runtime_error when writing fails.
void write_pareto_chart(const std::vector<ParetoPoint>& points, double capacity, const std::string& path,
                        const std::string& title, double headroom = 0);

}  // namespace dtsim::render
