// Where everything goes on the timeline picture, decided before anything is
// drawn: the title and legend text, the rows (one per selected rank, or one per
// group of ranks in the overview), their lanes, and the time-to-pixel mapping.
// The drawing code and the tests read the same layout.
#pragma once

#include "dtsim/render.hpp"
#include "columns.hpp"
#include "palette.hpp"
#include "pipeline.hpp"
#include "units.hpp"

#include <cmath>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace dtsim::render::detail {

// A horizontal band of a row; absent when h == 0.
struct Lane {
    double y = 0;
    double h = 0;
    [[nodiscard]] bool present() const { return h > 0; }
    [[nodiscard]] double bottom() const { return y + h; }
};

// An overview row's tallies of its members' events (tally_rank), which the row is drawn from:
// gathered rank by rank while the trace is read a second time (OverviewFeed), so that no rank's
// events need be kept, or by draw_row from the whole trace; and where the peak's red bar ends.
struct FedColumns {
    explicit FedColumns(int ncols) : compute(ncols), comm(ncols), memory(ncols) {}
    BusyColumns compute, comm;
    MaxColumns memory;
    double peak_end = 0;  // (has_peak rows) see peak_step_end
};

struct Row {
    std::string label;                 // "GPU 3", or "GPU 0-21" in the overview
    std::vector<std::size_t> members;  // indices into Trace::ranks
    Lane compute;                      // boxes of the compute stream (every event in the puzzle world)
    Lane comm;                         // boxes of the comm stream, a thinner lane (hardware traces)
    Lane memory;                       // memory in use over time
    double max_memory = 0;             // over the members' events
    bool has_peak = false;             // holds the rank and time of Summary::max_memory
    bool by_kind = false;              // the memory lane stacks the rank's memory by kind (Trace::memory_kinds)
    RankPasses passes;                 // pipeline view: the rank's passes and idle time
    double idle_fraction = 0;          // pipeline view: idle time / makespan
    std::string blocked;               // a deadlocked run: what the row's rank waits for (empty: not blocked)
    double blocked_at = 0;             // ...from the end of its last event
    std::shared_ptr<const FedColumns> fed;  // an overview row's tallies, where gathered while reading
};

struct LegendEntry {
    enum class Kind { box, marker, comm_lane, ramp, memory, memory_kind, peak, capacity, pass, bubble, blocked };
    Kind kind = Kind::box;
    BoxClass cls = BoxClass::forward;  // for Kind::box
    std::string label;
    double x = 0;         // left of the swatch
    double y = 0;         // text baseline
    double swatch_w = 0;  // width of the swatch; the label starts 5 px after it
    PassKind pass = PassKind::forward;  // for Kind::pass
    int chunk = 0;                      // for Kind::pass
    Rgba colour{};                      // for Kind::memory_kind
};

struct TextLine {
    std::string text;
    double size = 12;
    bool bold = false;
    bool faint = false;
    double y = 0;  // baseline
};

struct Layout {
    int width = 0;
    int height = 0;
    double margin = 12;

    // Time: t0 at plot_x0, t1 at plot_x1.
    double t0 = 0, t1 = 1;
    double plot_x0 = 0, plot_x1 = 0;
    double px_per_time = 1;
    [[nodiscard]] double x_of(double t) const { return plot_x0 + (t - t0) * px_per_time; }
    [[nodiscard]] int columns() const;

    bool seconds = false;     // hardware world: time in seconds
    bool bytes = false;       // hardware world: memory in bytes
    int layers = 1;           // span of the layer colour ramp
    double memory_scale = 0;  // memory drawn at full lane height (0: no memory to draw)
    bool overview = false;    // rows stand for groups of ranks
    bool pipeline = false;    // the pipeline view: rows are pipeline ranks, boxes their passes
    RankGrid grid;            // how the trace's ranks are laid out
    double bubble_fraction = 0;  // pipeline view: idle time over the rows' time
    bool has_comm = false;    // some selected rank has comm-stream events
    // Rows that stack memory by kind have an axis: these values labelled (0 first), each shown as
    // value / memory_tick_unit_size followed by memory_tick_unit ("GiB").
    std::vector<double> memory_ticks;
    double memory_tick_unit_size = 1;
    std::string memory_tick_unit;

    std::vector<TextLine> header;  // title, figures, explanation
    std::vector<LegendEntry> legend;
    double legend_swatch = 12;
    double legend_font = 11;

    Ticks ticks;
    double plot_top = 0;     // rows start below; top tick labels above
    double plot_bottom = 0;  // rows end above; bottom tick labels below
    double axis_title_y = 0;
    std::string axis_title;  // "time (steps)", "time (ms)"

    double label_font = 12;  // row labels
    double box_font = 10;    // batch ids inside boxes
    double side_font = 10;   // per-row maximum memory at the right
    std::vector<Row> rows;

    // A long run with failures (dtsim failures): the first failure again under the plot, from the
    // last checkpoint write before it to the first after its restart, on a time axis of its own;
    // its rows are the failed GPU's and one GPU's that did not fail, its header one title line.
    // At most one; its t0 and t1 are the window marked on the plot above.
    std::vector<Layout> zoom;
};

// Throws std::invalid_argument for bad options (see render.hpp).
Layout make_layout(const Trace& trace, const Options& options);

// The ranks whose events the picture draws (indices into Trace::ranks, each row's members among
// them) and whether it is the pipeline view: the layout's first decision.
struct DrawnRanks {
    std::vector<std::size_t> ranks;
    bool pipeline = false;
};
DrawnRanks drawn_ranks(const Trace& trace, const Options& options, const RankGrid& grid);
// The pipeline view's rows without a selection: the first GPU of each stage (dp, cp and tp 0), by id.
std::vector<int> pipeline_view_ranks(const RankGrid& grid);
// The grid the meta's "grid" names on its own, dp included (grid_of needs every rank read to
// infer a missing dp); unknown where it does not.
RankGrid meta_grid(const nlohmann::json& meta);
// Whether an event's times and memory can be drawn (all finite); the census names what is not.
inline bool drawable(const Event& e) {
    return std::isfinite(e.start) && std::isfinite(e.duration) && std::isfinite(e.end()) && std::isfinite(e.memory);
}

// What each blocked rank of a deadlocked run waits for, read from the trace's meta "error"
// (the deadlock report, one line per rank: a schedule's "rank 3 is blocked at 3B0 (...): it
// waits for X, which ..." or the engine's "rank 3 waits in X; last event ..."), by rank; the
// first line naming a rank wins.
std::vector<std::pair<int, std::string>> blocked_ranks(const Trace& trace);

// Whether some row stacks its memory by kind (Row::by_kind).
bool any_stacked(const Layout& l);
// Whether `row`'s memory lane shows the memory axis: stacked by kind, and tall enough for its ticks.
bool shows_memory_axis(const Layout& l, const Row& row);

// The memory axis of rows stacked by kind: a tick's number ("40") and the axis title ("memory, GiB").
inline constexpr double kMemoryTickFont = 8;
std::string memory_tick_label(const Layout& l, double value);
std::string memory_axis_title(const Layout& l);

// "idle 12.3 %": a pipeline row's idle share, written at its right.
std::string idle_label(const Row& row);

// "{0-3,7}" without the braces: the text written inside a box.
std::string batch_label(const IdSet& batches);

}  // namespace dtsim::render::detail
