#include "timeline.hpp"

#include "cairo_util.hpp"
#include "columns.hpp"
#include "memory_profile.hpp"

#include "dtsim/interrupt.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dtsim::render::detail {
namespace {

// Boxes narrower than this go into per-pixel-column summaries instead.
constexpr double kMinBoxPx = 0.5;
// A long run's rare, short events (a checkpoint write, a restart, a failure) are drawn at least
// this wide, so that a 4 s checkpoint shows on a 20-hour axis.
constexpr double kMinRareEventPx = 2;
// A checkpoint write narrower than that: a tick this wide over this share of the lane's height.
constexpr double kCheckpointTickPx = 1;
constexpr double kCheckpointTickHeight = 0.4;
// Boxes at least this wide get a border.
constexpr double kOutlineFromPx = 3;
constexpr double kMarkerPx = 2;
constexpr double kMarkerPoke = 3;  // markers stick out above their lane
constexpr double kMinPeakPx = 2;
constexpr int kBusyLevels = 16;
constexpr Rgba kWhite{1, 1, 1, 1};
constexpr Rgba kLaneBackground{0.975, 0.975, 0.975};
constexpr Rgba kAxis{0.35, 0.35, 0.35};

void set_colour(cairo_t* cr, Rgba c) {
    if (c.a >= 1)
        cairo_set_source_rgb(cr, c.r, c.g, c.b);
    else
        cairo_set_source_rgba(cr, c.r, c.g, c.b, c.a);
}

void fill_rect(cairo_t* cr, double x, double y, double w, double h, Rgba c) {
    cairo_rectangle(cr, x, y, w, h);
    set_colour(cr, c);
    cairo_fill(cr);
}

// Rectangles of one opaque colour filled one after another, filled as one path: one SVG element
// for a run of them instead of one each. Opaque fills painted in turn cover the same pixels as
// their union, so the picture stays the same; a colour that is not opaque is filled at once.
// Nothing else may be drawn between add() and flush(): the rectangles are on Cairo's path.
class Fills {
public:
    explicit Fills(cairo_t* cr) : cr_(cr) {}
    Fills(const Fills&) = delete;
    Fills& operator=(const Fills&) = delete;
    ~Fills() { flush(); }

    void add(double x, double y, double w, double h, Rgba c) {
        if (pending_ && !(c == colour_)) flush();
        cairo_rectangle(cr_, x, y, w, h);
        colour_ = c;
        pending_ = true;
        if (c.a < 1) flush();
    }
    void flush() {
        if (!pending_) return;
        set_colour(cr_, colour_);
        cairo_fill(cr_);
        pending_ = false;
    }

private:
    cairo_t* cr_;
    Rgba colour_;
    bool pending_ = false;
};

enum class Align { left, centre, right };

void draw_text(cairo_t* cr, const std::string& s, double x, double y, double size, Rgba colour,
               Align align = Align::left, Weight weight = Weight::normal) {
    select_font(cr, size, weight);
    if (align != Align::left) {
        cairo_text_extents_t ext;
        cairo_text_extents(cr, s.c_str(), &ext);
        x -= align == Align::centre ? ext.x_advance / 2 : ext.x_advance;
    }
    set_colour(cr, colour);
    cairo_move_to(cr, x, y);
    cairo_show_text(cr, s.c_str());
}

void hline(cairo_t* cr, double x0, double x1, double y, double width, Rgba c) {
    cairo_move_to(cr, x0, y);
    cairo_line_to(cr, x1, y);
    cairo_set_line_width(cr, width);
    set_colour(cr, c);
    cairo_stroke(cr);
}

double text_baseline(const Lane& lane, double size) { return lane.y + lane.h / 2 + size * 0.36; }

// Idle time of the compute stream: a pale fill with diagonal hatching on a grid fixed to the page.
void draw_bubble(cairo_t* cr, double x, double y, double w, double h) {
    fill_rect(cr, x, y, w, h, colours::bubble);
    if (w < 3) return;
    constexpr double kPitch = 6;
    cairo_save(cr);
    cairo_rectangle(cr, x, y, w, h);
    cairo_clip(cr);
    for (double hx = std::floor((x - h) / kPitch) * kPitch; hx < x + w; hx += kPitch) {
        cairo_move_to(cr, hx, y + h);
        cairo_line_to(cr, hx + h, y);
    }
    cairo_set_line_width(cr, 0.8);
    set_colour(cr, colours::bubble_hatch);
    cairo_stroke(cr);
    cairo_restore(cr);
}

// Where a deadlocked rank stopped: a red bar across its lane with a notch on top.
void draw_blocked_mark(cairo_t* cr, double x, double y, double h) {
    fill_rect(cr, x - 1, y, 2, h, colours::peak);
    cairo_move_to(cr, x - 4, y - 4);
    cairo_line_to(cr, x + 4, y - 4);
    cairo_line_to(cr, x, y + 1);
    cairo_close_path(cr);
    set_colour(cr, colours::peak);
    cairo_fill(cr);
}

// A short name for boxes too narrow for the operation's full name.
std::string short_name(std::string_view op) {
    static constexpr std::pair<std::string_view, std::string_view> kShort[] = {
        {"allreduce", "AR"},     {"all_reduce", "AR"},     {"allgather", "AG"},   {"all_gather", "AG"},
        {"scatterreduce", "SR"}, {"reduce_scatter", "RS"}, {"all_to_all", "A2A"}, {"broadcast", "BC"},
        {"update", "U"},         {"optimizer", "opt"},     {"pass", "P"},         {"send", "S"},
        {"recv", "R"},           {"recompute", "RC"},      {"loss", "L"}};
    for (const auto& [name, abbrev] : kShort)
        if (name == op) return std::string(abbrev);
    return std::string(op.substr(0, 3));
}

// Fills the current path; on a box at least kOutlineFromPx wide, with a thin dark border too.
void fill_outlined(cairo_t* cr, double w) {
    if (w >= kOutlineFromPx) {
        cairo_fill_preserve(cr);
        cairo_set_line_width(cr, 0.5);
        set_colour(cr, colours::outline);
        cairo_stroke(cr);
    } else {
        cairo_fill(cr);
    }
}

// Fills a box in a style: a thin dark border on wide boxes; collectives get a
// translucent fill inside a solid border of their layer colour.
void paint_box(cairo_t* cr, double x, double y, double w, double h, StyleKey key, int layers) {
    const Rgba fill = style_colour(key, layers);
    cairo_rectangle(cr, x, y, w, h);
    set_colour(cr, fill);
    if (key_class(key) == BoxClass::collective && w >= kOutlineFromPx) {
        cairo_fill_preserve(cr);
        cairo_set_line_width(cr, 1.5);
        set_colour(cr, {fill.r, fill.g, fill.b, 1});
        cairo_stroke(cr);
    } else {
        fill_outlined(cr, w);
    }
}

// Batch ids inside compute boxes; the operation's name (or a short form) inside the others.
void label_box(cairo_t* cr, const Layout& l, const Lane& lane, const Event& e, double x, double w) {
    if (lane.h < l.box_font + 2 || w < l.box_font) return;
    std::string label;
    if (!e.batches.empty()) {
        label = batch_label(e.batches);
        if (text_width(cr, label, l.box_font) + 4 > w) return;
    } else {
        label = std::string(e.op.name());
        const BoxClass cls = box_class(e);
        const bool long_run = cls >= BoxClass::train && cls <= BoxClass::idle;  // the legend names these
        if (long_run && text_width(cr, label, l.box_font) + 6 > w) return;
        if (text_width(cr, label, l.box_font) + 6 > w) {
            label = short_name(e.op.name());
            if (text_width(cr, label, l.box_font) + 4 > w) return;
        }
    }
    const Rgba fill = style_colour(style_key(e), l.layers);
    draw_text(cr, label, x + w / 2, text_baseline(lane, l.box_font), l.box_font, text_on(fill),
              Align::centre);
}

void draw_header(cairo_t* cr, const Layout& l) {
    for (const auto& line : l.header)
        draw_text(cr, line.text, l.margin, line.y, line.size,
                  line.faint ? colours::faint_text : colours::text, Align::left,
                  line.bold ? Weight::bold : Weight::normal);
}

void draw_legend(cairo_t* cr, const Layout& l) {
    const double s = l.legend_swatch;
    for (const auto& e : l.legend) {
        const double top = e.y - s + 2;
        switch (e.kind) {
            case LegendEntry::Kind::box: {
                const std::int32_t layer =
                    e.cls == BoxClass::forward || e.cls == BoxClass::backward || e.cls == BoxClass::collective
                        ? 0
                        : kNoLayer;
                paint_box(cr, e.x, top, e.swatch_w, s, style_key(e.cls, layer), l.layers);
                break;
            }
            case LegendEntry::Kind::marker:
                fill_rect(cr, e.x + (e.swatch_w - kMarkerPx) / 2, top - kMarkerPoke, kMarkerPx,
                          s + kMarkerPoke, colours::marker);
                break;
            case LegendEntry::Kind::ramp: {
                const int n = std::min(l.layers, 48);
                const double w = e.swatch_w / n;
                for (int k = 0; k < n; ++k) {
                    const auto layer = static_cast<std::int32_t>(
                        n > 1 ? std::lround(static_cast<double>(k) * (l.layers - 1) / (n - 1)) : 0);
                    fill_rect(cr, e.x + k * w, top, w, s, layer_colour(layer, l.layers));
                }
                break;
            }
            case LegendEntry::Kind::comm_lane:
                fill_rect(cr, e.x, top, e.swatch_w, s * 0.55, kLaneBackground);
                fill_rect(cr, e.x, top + s * 0.6, e.swatch_w, s * 0.4,
                          over_white(style_colour(style_key(BoxClass::collective, 0), l.layers)));
                break;
            case LegendEntry::Kind::pass:
                if (e.pass == PassKind::overlap) {
                    fill_rect(cr, e.x, top, e.swatch_w / 2, s, pass_colour(PassKind::forward, 0));
                    fill_rect(cr, e.x + e.swatch_w / 2, top, e.swatch_w / 2, s, pass_colour(PassKind::backward, 0));
                    cairo_rectangle(cr, e.x + 0.75, top + 0.75, e.swatch_w - 1.5, s - 1.5);
                    cairo_set_line_width(cr, 1.5);
                    set_colour(cr, colours::pass_overlap);
                    cairo_stroke(cr);
                    break;
                }
                cairo_rectangle(cr, e.x, top, e.swatch_w, s);
                set_colour(cr, pass_colour(e.pass, e.chunk));
                cairo_fill_preserve(cr);
                cairo_set_line_width(cr, 0.5);
                set_colour(cr, colours::outline);
                cairo_stroke(cr);
                if (e.pass == PassKind::recompute) {
                    // Drawn as it appears: a strip along the bottom of a backward pass.
                    fill_rect(cr, e.x, top, e.swatch_w, s * 0.6, pass_colour(PassKind::backward, 0));
                }
                break;
            case LegendEntry::Kind::bubble: draw_bubble(cr, e.x, top, e.swatch_w, s); break;
            case LegendEntry::Kind::blocked: draw_blocked_mark(cr, e.x + e.swatch_w / 2, top, s); break;
            case LegendEntry::Kind::memory: fill_rect(cr, e.x, top, e.swatch_w, s, colours::memory); break;
            case LegendEntry::Kind::memory_kind: fill_rect(cr, e.x, top, e.swatch_w, s, e.colour); break;
            case LegendEntry::Kind::peak: fill_rect(cr, e.x, top, e.swatch_w, s, colours::peak); break;
            case LegendEntry::Kind::capacity: {
                const double dash[] = {4, 3};
                cairo_set_dash(cr, dash, 2, 0);
                hline(cr, e.x, e.x + e.swatch_w, top + s / 2, 1.5, colours::capacity);
                cairo_set_dash(cr, nullptr, 0, 0);
                break;
            }
        }
        draw_text(cr, e.label, e.x + e.swatch_w + 5, e.y, l.legend_font, colours::text);
    }
}

void draw_axes(cairo_t* cr, const Layout& l) {
    cairo_set_line_width(cr, 1);
    for (double v : l.ticks.values) {
        const double x = std::round(l.x_of(v)) + 0.5;
        cairo_move_to(cr, x, l.plot_top);
        cairo_line_to(cr, x, l.plot_bottom);
    }
    set_colour(cr, colours::grid);
    cairo_stroke(cr);
    hline(cr, l.plot_x0, l.plot_x1, std::round(l.plot_top) + 0.5, 1, kAxis);
    hline(cr, l.plot_x0, l.plot_x1, std::round(l.plot_bottom) + 0.5, 1, kAxis);
    for (double v : l.ticks.values) {
        const std::string label = tick_label(v, l.ticks);
        const double x = l.x_of(v);
        draw_text(cr, label, x, l.plot_top - 5, 10, colours::text, Align::centre);
        draw_text(cr, label, x, l.plot_bottom + 14, 10, colours::text, Align::centre);
    }
    draw_text(cr, l.axis_title, (l.plot_x0 + l.plot_x1) / 2, l.axis_title_y, 11, colours::text, Align::centre,
              Weight::bold);
}

// Draws the busy-column runs of a lane: height = busy fraction, colour = dominant style.
void draw_busy(cairo_t* cr, const Layout& l, const Lane& lane, const BusyColumns& busy) {
    Fills fills(cr);
    for (const auto& run : busy.runs(kBusyLevels)) {
        const double h = lane.h * run.level;
        fills.add(l.plot_x0 + run.first, lane.bottom() - h, run.end - run.first, h,
                  over_white(style_colour(run.key, l.layers)));
    }
}

// One rank's events, box by box (only its comm stream's with `comm_only`); what is too narrow is
// summarised per column.
void draw_rank_events(cairo_t* cr, const Layout& l, const Row& row, const RankTrace& rank, bool comm_only = false) {
    const int ncols = l.columns();
    BusyColumns busy_compute(ncols), busy_comm(ncols);
    std::vector<bool> marked_compute(static_cast<std::size_t>(ncols) + 1), marked_comm(marked_compute.size());
    struct Marker {
        const Lane* lane;
        double x;
    };
    std::vector<Marker> markers;
    // Checkpoint writes, restarts and failures, drawn after the rest: the training steps that follow
    // them at once would cover their widened boxes.
    std::vector<std::pair<const Event*, double>> rare;
    Fills thin(cr);  // boxes too narrow for a border or a label, drawn in turn
    for (const auto& e : rank.events) {
        const bool comm = l.has_comm && e.stream == Stream::comm;
        if (comm_only && !comm) continue;
        const Lane& lane = comm ? row.comm : row.compute;
        const double x = l.x_of(e.start);
        if (e.duration == 0) {
            auto& marked = comm ? marked_comm : marked_compute;
            const auto col =
                static_cast<std::size_t>(std::clamp(x - l.plot_x0, 0.0, static_cast<double>(ncols)));
            if (!marked[col]) markers.push_back({&lane, x});
            marked[col] = true;
            continue;
        }
        const double w = e.duration * l.px_per_time;
        if (const BoxClass cls = box_class(e);
            w < kMinRareEventPx && (cls == BoxClass::checkpoint || cls == BoxClass::restart || cls == BoxClass::failure)) {
            rare.emplace_back(&e, x);
            continue;
        }
        if (w < kMinBoxPx) {
            (comm ? busy_comm : busy_compute).add(x - l.plot_x0, x - l.plot_x0 + w, style_key(e), 1.0);
        } else if (w < kOutlineFromPx && w < l.box_font) {
            // Neither outlined nor labelled: a plain fill, as paint_box would draw it.
            thin.add(x, lane.y, w, lane.h, style_colour(style_key(e), l.layers));
        } else {
            thin.flush();
            paint_box(cr, x, lane.y, w, lane.h, style_key(e), l.layers);
            label_box(cr, l, lane, e, x, w);
        }
    }
    thin.flush();
    draw_busy(cr, l, row.compute, busy_compute);
    if (row.comm.present()) draw_busy(cr, l, row.comm, busy_comm);
    for (const auto& [e, x] : rare) {
        const Lane& lane = l.has_comm && e->stream == Stream::comm ? row.comm : row.compute;
        // Checkpoint writes come every few minutes: a thin tick on the lane's upper part, so that the
        // training between them still shows on a long axis; restarts and failures fill the lane.
        if (box_class(*e) == BoxClass::checkpoint)
            fill_rect(cr, x, lane.y, kCheckpointTickPx, lane.h * kCheckpointTickHeight,
                      style_colour(style_key(*e), l.layers));
        else
            fill_rect(cr, x, lane.y, kMinRareEventPx, lane.h, style_colour(style_key(*e), l.layers));
    }
    for (const auto& mk : markers)
        fill_rect(cr, mk.x - kMarkerPx / 2, mk.lane->y - kMarkerPoke, kMarkerPx, mk.lane->h + kMarkerPoke,
                  colours::marker);
}

// A group of ranks (its tallies, Row::fed): per column, the dominant style and the busy share of the group.
void draw_group_events(cairo_t* cr, const Layout& l, const Row& row) {
    draw_busy(cr, l, row.compute, row.fed->compute);
    if (row.comm.present()) draw_busy(cr, l, row.comm, row.fed->comm);
}

// An overview row's tallies from its members' events, rank by rank (see draw_row).
std::shared_ptr<const FedColumns> tally_row(const Layout& l, const Row& row, const Trace& trace) {
    auto t = std::make_shared<FedColumns>(l.columns());
    t->peak_end = trace.summary.max_memory_time;
    for (auto i : row.members) {
        check_interrupt();
        tally_rank(l, row, trace.summary, trace.ranks[i], *t);
    }
    return t;
}

// A blocked rank: the mark at the end of its last event and what it waits for, beside it.
void draw_blocked(cairo_t* cr, const Layout& l, const Row& row) {
    const Lane& lane = row.compute;
    const double x = l.x_of(row.blocked_at);
    draw_blocked_mark(cr, x, lane.y, lane.h);
    std::string text = row.blocked;
    const double size = l.box_font;
    // Cut to the room left of the plot's right end, between characters.
    const double room = l.plot_x1 - x - 8;
    if (text_width(cr, text, size, Weight::bold) > room) {
        while (!text.empty() && text_width(cr, text + "...", size, Weight::bold) > room) {
            while (!text.empty() && (static_cast<unsigned char>(text.back()) & 0xC0) == 0x80) text.pop_back();
            if (!text.empty()) text.pop_back();  // the character's first byte
        }
        text += "...";
    }
    draw_text(cr, text, x + 6, text_baseline(lane, size), size, colours::peak, Align::left, Weight::bold);
}

// Intervals drawn at least this far apart stay apart; closer ones are drawn as one.
template <class Draw>
void draw_merged(const Layout& l, const std::vector<Interval>& intervals, Draw&& draw) {
    double x0 = 0, x1 = -1;
    for (const auto& iv : intervals) {
        const double a = l.x_of(iv.start), b = l.x_of(iv.end);
        if (x1 >= x0 && a - x1 < kMinBoxPx) {
            x1 = std::max(x1, b);
            continue;
        }
        if (x1 >= x0) draw(x0, std::max(x1 - x0, kMinBoxPx));
        x0 = a;
        x1 = b;
    }
    if (x1 >= x0) draw(x0, std::max(x1 - x0, kMinBoxPx));
}

// An overlapped F&B pair: its F and its B side by side, each with its microbatch, outlined together.
void draw_overlap(cairo_t* cr, const Layout& l, const Lane& lane, const Pass& p) {
    const double x0 = l.x_of(p.start), xs = l.x_of(p.split), x1 = std::max(l.x_of(p.end), x0 + kMinBoxPx);
    const std::pair<double, double> parts[] = {{x0, xs}, {xs, x1}};
    for (int half = 0; half < 2; ++half) {
        const auto [a, b] = parts[half];
        const Rgba fill = half == 0 ? pass_colour(PassKind::forward, p.chunk) : pass_colour(PassKind::backward, p.backward_chunk);
        fill_rect(cr, a, lane.y, b - a, lane.h, fill);
        const IdSet& mb = half == 0 ? p.batches : p.backward_batches;
        if (mb.empty() || lane.h < l.box_font + 2) continue;
        const std::string label = batch_label(mb);
        if (text_width(cr, label, l.box_font) + 3 <= b - a)
            draw_text(cr, label, (a + b) / 2, text_baseline(lane, l.box_font), l.box_font, text_on(fill), Align::centre);
    }
    cairo_rectangle(cr, x0 + 0.75, lane.y + 0.75, x1 - x0 - 1.5, lane.h - 1.5);
    cairo_set_line_width(cr, 1.5);
    set_colour(cr, colours::pass_overlap);
    cairo_stroke(cr);
}

// A pipeline row: the idle time shaded, then each pass a box with its microbatch inside,
// recomputation as a strip along the bottom of its backward pass.
// Passes under half a pixel wide are tallied per pixel column (as the ranks view does with its
// boxes) under a key of their kind and chunk: a column's height is its busy share, its colour the
// kind that covers most of it.
StyleKey pass_key(const Pass& p) {
    return (static_cast<StyleKey>(p.kind) << 8) | static_cast<StyleKey>(std::clamp(p.chunk + 1, 0, 255));
}
Rgba pass_key_colour(StyleKey key) {
    return pass_colour(static_cast<PassKind>(key >> 8), static_cast<int>(key & 0xFF) - 1);
}

void draw_passes(cairo_t* cr, const Layout& l, const Row& row) {
    const Lane& lane = row.compute;
    draw_merged(l, row.passes.idle, [&](double x, double w) { draw_bubble(cr, x, lane.y, w, lane.h); });
    BusyColumns narrow(l.columns());
    // Recompute strips of passes without a label, drawn after the passes, a path per colour: the
    // passes of a compute stream do not overlap, so only the order of the SVG's elements changes.
    std::vector<std::pair<Rgba, std::vector<std::array<double, 2>>>> strips;
    Fills thin(cr);  // pass boxes too narrow for a border or a label
    const double strip = std::round(lane.h * 0.3);
    for (const auto& p : row.passes.passes) {
        const double x = l.x_of(p.start);
        if ((p.end - p.start) * l.px_per_time < kMinBoxPx) {
            narrow.add(x - l.plot_x0, l.x_of(p.end) - l.plot_x0, pass_key(p), 1.0);
            continue;
        }
        const double w = (p.end - p.start) * l.px_per_time;
        if (p.kind == PassKind::overlap) {
            thin.flush();
            draw_overlap(cr, l, lane, p);
            continue;
        }
        const Rgba fill = pass_colour(p.kind, p.chunk);
        std::string label;
        if (!p.batches.empty() && lane.h >= l.box_font + 2) {
            label = batch_label(p.batches);
            if (text_width(cr, label, l.box_font) + 3 > w) label.clear();
        }
        if (w < kOutlineFromPx && label.empty()) {
            thin.add(x, lane.y, w, lane.h, fill);
        } else {
            thin.flush();
            cairo_rectangle(cr, x, lane.y, w, lane.h);
            set_colour(cr, fill);
            fill_outlined(cr, w);
        }
        const Rgba strip_colour = pass_colour(PassKind::recompute, p.chunk);
        draw_merged(l, p.recompute, [&](double rx, double rw) {
            if (!label.empty()) {
                thin.add(rx, lane.bottom() - strip, rw, strip, strip_colour);
                return;
            }
            auto it = std::find_if(strips.begin(), strips.end(), [&](const auto& s) { return s.first == strip_colour; });
            if (it == strips.end()) it = strips.insert(strips.end(), {strip_colour, {}});
            it->second.push_back({rx, rw});
        });
        if (label.empty()) continue;
        thin.flush();
        const double baseline = p.recompute.empty() ? text_baseline(lane, l.box_font)
                                                    : lane.y + (lane.h - strip) / 2 + l.box_font * 0.36;
        draw_text(cr, label, x + w / 2, baseline, l.box_font, text_on(fill), Align::centre);
    }
    thin.flush();
    for (const auto& [colour, xs] : strips) {
        for (const auto& [rx, rw] : xs) thin.add(rx, lane.bottom() - strip, rw, strip, colour);
        thin.flush();
    }
    for (const auto& run : narrow.runs(kBusyLevels)) {
        const double h = lane.h * run.level;
        thin.add(l.plot_x0 + run.first, lane.bottom() - h, run.end - run.first, h, pass_key_colour(run.key));
    }
}

double bar_height(const Layout& l, const Row& row, double value) {
    return row.memory.h * std::clamp(value / l.memory_scale, 0.0, 1.0);
}

void draw_capacity_and_peak(cairo_t* cr, const Layout& l, const Row& row, const Trace& trace);

// A row's memory stacked by kind, the kinds bottom up in the trace's order. Per pixel column the
// sample with the largest total among those in effect there is drawn (a sample is in effect from
// its time to the next one's, the last to the rank's last end); neighbouring columns whose stacks
// come out alike to half a pixel are drawn as one.
void draw_memory_stack(cairo_t* cr, const Layout& l, const Row& row, const Trace& trace) {
    const Lane& lane = row.memory;
    const RankTrace& r = trace.ranks[row.members.front()];
    const std::size_t kinds = trace.memory_kinds.size();
    const std::size_t n = trace.memory_samples(r);
    const int ncols = l.columns();
    double end = 0;
    for (const auto& e : r.events) end = std::max(end, e.end());
    std::vector<std::int64_t> best(static_cast<std::size_t>(ncols), -1);
    std::vector<double> most(static_cast<std::size_t>(ncols), 0);
    for (std::size_t i = 0; i < n; ++i) {
        const KindSample s = kind_sample(trace, r, i);
        const double t1 = i + 1 < n ? kind_sample(trace, r, i + 1).time : std::max(end, s.time);
        if (!(s.total > 0)) continue;
        // (Samples beyond the events' span, which a trace may have, are clipped to the plot.)
        const auto [c0, c1] = column_span(l.x_of(s.time) - l.plot_x0, l.x_of(t1) - l.plot_x0, ncols);
        for (int c = c0; c < c1; ++c)
            if (best[static_cast<std::size_t>(c)] < 0 || s.total > most[static_cast<std::size_t>(c)]) {
                best[static_cast<std::size_t>(c)] = static_cast<std::int64_t>(i);
                most[static_cast<std::size_t>(c)] = s.total;
            }
    }
    // Each column's stack as the heights of its kinds' tops, in half pixels.
    const auto tops = [&](int c, std::vector<long>& out) {
        out.assign(kinds, 0);
        const std::int64_t i = best[static_cast<std::size_t>(c)];
        if (i < 0) return;
        const KindSample s = kind_sample(trace, r, static_cast<std::size_t>(i));
        double sum = 0;
        for (std::size_t k = 0; k < kinds; ++k) {
            sum += s.parts[k];
            out[k] = std::lround(2 * bar_height(l, row, sum));
        }
    };
    struct Run {
        int first, end;
        std::vector<long> tops;
    };
    std::vector<Run> runs;
    std::vector<long> t;
    for (int c = 0; c < ncols; ++c) {
        if (best[static_cast<std::size_t>(c)] < 0) continue;
        tops(c, t);
        if (!runs.empty() && runs.back().end == c && runs.back().tops == t)
            runs.back().end = c + 1;
        else
            runs.push_back({c, c + 1, t});
    }
    for (std::size_t k = 0; k < kinds; ++k) {
        Fills fills(cr);
        const Rgba colour = memory_kind_colour(trace.memory_kinds[k], k);
        for (const Run& run : runs) {
            const long below = k == 0 ? 0 : run.tops[k - 1];
            if (run.tops[k] <= below) continue;
            fills.add(l.plot_x0 + run.first, lane.bottom() - 0.5 * static_cast<double>(run.tops[k]),
                      run.end - run.first, 0.5 * static_cast<double>(run.tops[k] - below), colour);
        }
    }
    // The axis: a faint line at each tick above 0, its number at the left, and the title.
    if (shows_memory_axis(l, row)) {
        const double ticks_right = l.plot_x0 - 4;
        double ticks_w = 0;
        for (double v : l.memory_ticks) {
            const double y = lane.bottom() - bar_height(l, row, v);
            if (v > 0) hline(cr, l.plot_x0, l.plot_x1, std::round(y) + 0.5, 0.5, colours::grid);
            const std::string label = memory_tick_label(l, v);
            ticks_w = std::max(ticks_w, text_width(cr, label, kMemoryTickFont));
            draw_text(cr, label, ticks_right, std::clamp(y + kMemoryTickFont * 0.36, lane.y + kMemoryTickFont * 0.8, lane.bottom()),
                      kMemoryTickFont, colours::faint_text, Align::right);
        }
        draw_text(cr, memory_axis_title(l), ticks_right - ticks_w - 6, lane.y + lane.h / 2 + 9 * 0.36, 9,
                  colours::faint_text, Align::right);
    }
}

void draw_memory(cairo_t* cr, const Layout& l, const Row& row, const Trace& trace) {
    if (row.by_kind) {
        draw_memory_stack(cr, l, row, trace);
        draw_capacity_and_peak(cr, l, row, trace);
        return;
    }
    const Lane& lane = row.memory;
    MaxColumns cols(l.columns());
    {
        Fills fills(cr);
        if (!row.fed)  // (an overview row has its tallies)
            for (auto i : row.members)
                for (const auto& s : memory_steps(trace.ranks[i])) {
                    if (!(s.value > 0)) continue;
                    const double x0 = l.x_of(s.t0), x1 = l.x_of(s.t1);
                    if (x1 - x0 >= 1) {
                        const double h = bar_height(l, row, s.value);
                        fills.add(x0, lane.bottom() - h, x1 - x0, h, colours::memory);
                    } else {
                        cols.add(x0 - l.plot_x0, x1 - l.plot_x0, s.value);
                    }
                }
        for (const auto& run : (row.fed ? row.fed->memory : cols).runs(l.memory_scale / (2 * lane.h))) {
            const double h = bar_height(l, row, run.value);
            fills.add(l.plot_x0 + run.first, lane.bottom() - h, run.end - run.first, h, colours::memory);
        }
    }
    draw_capacity_and_peak(cr, l, row, trace);
}

// The capacity's dashed line; on the peak's row the peak in red: over grey bars, the bar of the
// step that starts at the summary's peak time; over a stack by kind, a line up the stack there.
void draw_capacity_and_peak(cairo_t* cr, const Layout& l, const Row& row, const Trace& trace) {
    const Lane& lane = row.memory;
    if (trace.memory_capacity && *trace.memory_capacity > 0) {
        const double y = lane.bottom() - bar_height(l, row, *trace.memory_capacity);
        const double dash[] = {4, 3};
        cairo_set_dash(cr, dash, 2, 0);
        hline(cr, l.plot_x0, l.plot_x1, y, 1.5, colours::capacity);
        cairo_set_dash(cr, nullptr, 0, 0);
    }
    if (row.has_peak) {
        // The step that starts at the summary's peak time, on the peak rank, in red.
        const auto& s = trace.summary;
        double t_end = s.max_memory_time;
        if (row.fed)
            t_end = row.fed->peak_end;
        else
            for (auto i : row.members)
                if (trace.ranks[i].rank == s.max_memory_rank) t_end = peak_step_end(s, trace.ranks[i], t_end);
        const double x0 = l.x_of(s.max_memory_time);
        const double w = std::max(kMinPeakPx, l.x_of(t_end) - x0);
        const double h = bar_height(l, row, s.max_memory);
        if (row.by_kind)
            fill_rect(cr, x0, lane.bottom() - h, kMinPeakPx, h, colours::peak);
        else
            fill_rect(cr, x0, lane.bottom() - h, w, h, colours::peak);
    }
}

// Lane backgrounds go under the time grid; everything else over it.
void draw_row_background(cairo_t* cr, const Layout& l, const Row& row) {
    const double w = l.plot_x1 - l.plot_x0;
    fill_rect(cr, l.plot_x0, row.compute.y, w, row.compute.h, kLaneBackground);
    if (row.comm.present()) fill_rect(cr, l.plot_x0, row.comm.y, w, row.comm.h, kLaneBackground);
    if (row.memory.present()) fill_rect(cr, l.plot_x0, row.memory.y, w, row.memory.h, colours::memory_lane);
}

void draw_row(cairo_t* cr, const Layout& l, const Row& given, const Trace& trace) {
    // An overview row is drawn from its tallies: gathered while the trace was read, or now.
    Row tallied;
    if (l.overview && !given.fed) {
        tallied = given;
        tallied.fed = tally_row(l, given, trace);
    }
    const Row& row = l.overview && !given.fed ? tallied : given;
    // Drawing a large trace takes a while: an interrupt request is answered row by row (and rank by
    // rank in an overview's rows), with Interrupted.
    check_interrupt();
    draw_text(cr, row.label, l.plot_x0 - 10, text_baseline(row.compute, l.label_font), l.label_font,
              colours::text, Align::right, Weight::bold);
    if (row.comm.present() && row.comm.h >= 9)
        draw_text(cr, "comm", l.plot_x0 - 10, text_baseline(row.comm, 8), 8, colours::faint_text,
                  Align::right);
    if (l.pipeline) {
        draw_passes(cr, l, row);
        if (row.comm.present()) draw_rank_events(cr, l, row, trace.ranks[row.members.front()], /*comm_only=*/true);
        draw_text(cr, idle_label(row), l.plot_x1 + 10, text_baseline(row.compute, l.side_font), l.side_font,
                  colours::text, Align::left, Weight::bold);
    } else if (l.overview) {
        draw_group_events(cr, l, row);
    } else {
        draw_rank_events(cr, l, row, trace.ranks[row.members.front()]);
    }
    if (!row.blocked.empty()) draw_blocked(cr, l, row);
    if (row.memory.present()) {
        if (row.memory.h >= 14 && !shows_memory_axis(l, row))
            draw_text(cr, "memory", l.plot_x0 - 10, text_baseline(row.memory, 9), 9, colours::faint_text,
                      Align::right);
        draw_memory(cr, l, row, trace);
        draw_text(cr, "max " + format_memory(row.max_memory, l.bytes), l.plot_x1 + 10,
                  text_baseline(row.memory, l.side_font), l.side_font,
                  row.has_peak ? colours::peak : colours::faint_text);
    }
}

}  // namespace

// The zoom under the plot (Layout::zoom): its window framed on the plot, its title, its rows clipped
// to its own axis.
void draw_zoom(cairo_t* cr, const Trace& trace, const Layout& l, const Layout& z) {
    const double x0 = std::round(l.x_of(z.t0)) + 0.5, x1 = std::round(l.x_of(z.t1)) + 0.5;
    const double dash[] = {4, 3};
    cairo_set_dash(cr, dash, 2, 0);
    cairo_rectangle(cr, x0 - 2, l.plot_top + 2, x1 - x0 + 4, l.plot_bottom - l.plot_top - 4);
    cairo_set_line_width(cr, 1.5);
    set_colour(cr, colours::text);
    cairo_stroke(cr);
    cairo_set_dash(cr, nullptr, 0, 0);
    draw_header(cr, z);
    for (const auto& row : z.rows) draw_row_background(cr, z, row);
    draw_axes(cr, z);
    for (const auto& row : z.rows) {
        draw_text(cr, row.label, z.plot_x0 - 10, text_baseline(row.compute, z.label_font), z.label_font, colours::text,
                  Align::right, Weight::bold);
        cairo_save(cr);
        cairo_rectangle(cr, z.plot_x0, z.plot_top, z.plot_x1 - z.plot_x0, z.plot_bottom - z.plot_top);
        cairo_clip(cr);
        draw_rank_events(cr, z, row, trace.ranks[row.members.front()]);
        cairo_restore(cr);
    }
}

void tally_rank(const Layout& l, const Row& row, const Summary& summary, const RankTrace& rank, FedColumns& t) {
    const double weight = 1.0 / static_cast<double>(row.members.size());
    for (const auto& e : rank.events) {
        if (e.duration == 0) continue;
        const double x = l.x_of(e.start) - l.plot_x0;
        const bool on_comm = l.has_comm && e.stream == Stream::comm;
        (on_comm ? t.comm : t.compute).add(x, x + e.duration * l.px_per_time, style_key(e), weight);
    }
    for (const auto& s : memory_steps(rank))
        if (s.value > 0) t.memory.add(l.x_of(s.t0) - l.plot_x0, l.x_of(s.t1) - l.plot_x0, s.value);
    if (row.has_peak && rank.rank == summary.max_memory_rank) t.peak_end = peak_step_end(summary, rank, t.peak_end);
}

double peak_step_end(const Summary& s, const RankTrace& rank, double t_end) {
    for (const auto& step : memory_steps(rank))
        if (step.t0 <= s.max_memory_time && s.max_memory_time < step.t1 && step.value == s.max_memory) t_end = step.t1;
    return t_end;
}

void draw_timeline(cairo_t* cr, const Trace& trace, const Layout& layout) {
    set_colour(cr, kWhite);
    cairo_paint(cr);
    draw_header(cr, layout);
    draw_legend(cr, layout);
    for (const auto& row : layout.rows) draw_row_background(cr, layout, row);
    draw_axes(cr, layout);
    for (const auto& row : layout.rows) draw_row(cr, layout, row, trace);
    for (const auto& zoom : layout.zoom) draw_zoom(cr, trace, layout, zoom);
    check(cr, "drawing the timeline");
}

}  // namespace dtsim::render::detail
