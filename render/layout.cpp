#include "layout.hpp"

#include "cairo_util.hpp"

#include "dtsim/interrupt.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace dtsim::render::detail {
namespace {

constexpr int kMinWidth = 320;
constexpr int kMaxWidth = 30000;  // Cairo image surfaces stop at 32767 pixels
constexpr double kMinPlotWidth = 100;
constexpr double kAutoPxPerEvent = 26;
constexpr double kAutoMinPlot = 700, kAutoMaxPlot = 1800, kOverviewPlot = 1400;
constexpr int kBigRowsUpTo = 16;  // up to this many rows get the larger lanes and fonts

// What the selected ranks contain, gathered in one pass.
struct Census {
    double t_min = 0, t_max = 0;
    double max_memory = 0;
    int max_layer = -1;
    std::size_t max_events = 0;  // on one selected rank
    bool has_comm = false;
    std::array<bool, kBoxClasses> has_class{};
    bool has_marker = false;
    bool markers_all_loss = true;
    std::array<std::vector<std::string>, kBoxClasses>
        names;  // op names per box class, in order of appearance
};

void note_name(std::vector<std::string>& names, std::string_view n) {
    if (names.size() < 8 && std::find(names.begin(), names.end(), n) == names.end()) names.emplace_back(n);
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
    std::string out;
    for (const auto& p : parts) {
        if (!out.empty()) out += sep;
        out += p;
    }
    return out;
}

std::string rank_list_label(const Trace& trace, const std::vector<std::size_t>& members) {
    IdSet ids;
    for (auto i : members) ids.insert(trace.ranks[i].rank);
    if (ids.intervals().size() == 1 && ids.size() == 1) return fmt::format("GPU {}", ids.min());
    if (ids.intervals().size() == 1) return fmt::format("GPU {}-{}", ids.min(), ids.max());
    return "GPUs " + batch_label(ids);
}

std::string auto_title(const Trace& trace) {
    const auto& meta = trace.meta;
    std::string name = "dtsim trace";
    std::vector<std::string> details;
    std::vector<std::string> used;
    if (meta.is_object()) {
        for (const auto& [key, label] : {std::pair{"puzzle", "Puzzle"}, std::pair{"config", "Config"},
                                         std::pair{"name", ""}, std::pair{"model", "Model"}}) {
            auto it = meta.find(key);
            if (it == meta.end() || !it->is_string()) continue;
            const auto& v = it->get_ref<const std::string&>();
            name = *label ? fmt::format("{} \"{}\"", label, v) : v;
            used.emplace_back(key);
            break;
        }
        for (const auto& [key, noun] :
             {std::pair{"layers", "layers"}, std::pair{"batches", "batches"},
              std::pair{"microbatches", "microbatches"}, std::pair{"ranks", "GPUs"}}) {
            auto it = meta.find(key);
            if (it == meta.end() || !it->is_number_integer()) continue;
            details.push_back(fmt::format("{} {}", it->get<long long>(), noun));
            used.emplace_back(key);
        }
        used.emplace_back("error");  // said last, as what ended the run
        std::size_t extra = 0;
        for (const auto& [key, value] : meta.items()) {
            if (extra == 4) break;
            if (std::find(used.begin(), used.end(), key) != used.end()) continue;
            if (value.is_string())
                details.push_back(fmt::format("{} {}", key, value.get_ref<const std::string&>()));
            else if (value.is_number() || value.is_boolean())
                details.push_back(fmt::format("{} {}", key, value.dump()));
            else
                continue;
            ++extra;
        }
    }
    if (!meta.is_object() || !meta.contains("ranks"))
        details.push_back(fmt::format("{} GPUs", trace.ranks.size()));
    std::string title = details.empty() ? name : fmt::format("{} \u2014 {}", name, join(details, ", "));
    // A run that failed (a partial trace): its error.
    if (meta.is_object())
        if (auto it = meta.find("error"); it != meta.end() && it->is_string()) {
            // Its first line (a deadlock's report goes on, rank by rank), at most 200 bytes of it (a
            // message can name long sets), cut between characters.
            const auto& error = it->get_ref<const std::string&>();
            auto cut = std::min(error.find('\n'), std::size_t{200});
            while (cut < error.size() && cut > 0 && (static_cast<unsigned char>(error[cut]) & 0xC0) == 0x80) --cut;
            title += fmt::format(" \u2014 failed: {}{}", error.substr(0, cut), cut < error.size() ? " (...)" : "");
        }
    return title;
}

std::string figures_line(const Trace& trace, const Layout& l) {
    const auto& s = trace.summary;
    std::vector<std::string> parts;
    if (trace.event_count() == 0) {
        parts.emplace_back("no events");
    } else {
        if (!l.seconds) parts.push_back(fmt::format("timesteps {}", format_time(s.timesteps, false)));
        parts.push_back(
            fmt::format("makespan {}{}", format_time(s.makespan, l.seconds), l.seconds ? "" : " steps"));
        parts.push_back(fmt::format("max memory {} on GPU {} at {}{}", format_memory(s.max_memory, l.bytes),
                                    s.max_memory_rank, l.seconds ? "" : "step ",
                                    format_time(s.max_memory_time, l.seconds)));
    }
    if (trace.memory_capacity)
        parts.push_back(fmt::format("capacity {}", format_memory(*trace.memory_capacity, l.bytes)));
    if (s.correct) parts.push_back(fmt::format("correct: {}", *s.correct ? "yes" : "no"));
    return join(parts, "  \u00b7  ");
}

// Greedy word wrap to `max_w` pixels.
std::vector<std::string> wrap(const TextMeasure& m, const std::string& text, double size, double max_w,
                              Weight weight = Weight::normal) {
    std::vector<std::string> lines;
    std::string line;
    std::size_t pos = 0;
    while (pos < text.size()) {
        auto sp = text.find(' ', pos);
        if (sp == std::string::npos) sp = text.size();
        const std::string word = text.substr(pos, sp - pos);
        const std::string candidate = line.empty() ? word : line + " " + word;
        if (!line.empty() && m.width(candidate, size, weight) > max_w) {
            lines.push_back(line);
            line = word;
        } else {
            line = candidate;
        }
        pos = sp + 1;
    }
    if (!line.empty()) lines.push_back(line);
    return lines;
}

std::string class_label(BoxClass c, const Census& census) {
    const auto& names = census.names[static_cast<std::size_t>(c)];
    auto with_names = [&](const char* what) {
        const std::string list = join(names, ", ");
        return list.size() <= 40 ? fmt::format("{} ({})", what, list) : std::string(what);
    };
    switch (c) {
        case BoxClass::forward: return "forward (colour = layer)";
        case BoxClass::backward: return "backward (lighter)";
        case BoxClass::loss: return "loss";
        case BoxClass::update:
            return names.size() == 1 && names[0] == "update" ? "update" : with_names("update");
        case BoxClass::collective: return with_names("collective");
        case BoxClass::p2p: return with_names("point-to-point");
        case BoxClass::train: return "training steps";
        case BoxClass::lost: return "lost work (redone)";
        case BoxClass::checkpoint: return "checkpoint write";
        case BoxClass::restart: return "restart (relaunch, load)";
        case BoxClass::failure: return "failed node";
        case BoxClass::idle: return "idle";
        case BoxClass::other: return with_names("other");
    }
    return "";
}

}  // namespace

int Layout::columns() const { return static_cast<int>(std::ceil(plot_x1 - plot_x0)); }

std::string batch_label(const IdSet& batches) {
    std::string s = batches.str();
    return s.size() >= 2 ? s.substr(1, s.size() - 2) : s;
}

namespace {

// The selected ranks, from rank ids to indices into trace.ranks (every rank without a selection).
std::vector<std::size_t> select_ranks(const Trace& trace, const Options& opt) {
    std::vector<std::size_t> selected;
    if (opt.ranks.empty()) {
        for (std::size_t i = 0; i < trace.ranks.size(); ++i) selected.push_back(i);
        return selected;
    }
    std::vector<std::pair<int, std::size_t>> by_id;
    int max_id = -1;
    for (std::size_t i = 0; i < trace.ranks.size(); ++i) {
        by_id.emplace_back(trace.ranks[i].rank, i);
        max_id = std::max(max_id, trace.ranks[i].rank);
    }
    std::sort(by_id.begin(), by_id.end());
    for (int id : parse_rank_selection(opt.ranks, max_id + 1)) {
        const auto it = std::lower_bound(by_id.begin(), by_id.end(), std::pair{id, std::size_t{0}});
        if (it == by_id.end() || it->first != id) throw std::invalid_argument(fmt::format("rank {} is not in the trace", id));
        selected.push_back(it->second);
    }
    return selected;
}

// A number the picture is placed by must be finite: the time and pixel arithmetic of a trace holding
// an infinity or a NaN has no answer (a box at x = NaN, ticks that never reach the end).
void need_finite(double v, const RankTrace& r, std::size_t i, const Event& e, const char* what) {
    if (!std::isfinite(v))
        throw std::invalid_argument(fmt::format(
            "cannot draw the trace: rank {}, event {} ({}): its {} is not finite ({})", r.rank, i, e.op.name(), what, v));
}

// What there is to draw: the time and memory of every rank, the kinds of the selected ranks' events.
Census take_census(const Trace& trace, const std::vector<std::size_t>& selected) {
    Census c;
    bool first = true;
    for (const auto& r : trace.ranks) {
        check_interrupt();  // a large trace takes a while: an interrupt is answered rank by rank
        for (std::size_t i = 0; i < r.events.size(); ++i) {
            const Event& e = r.events[i];
            need_finite(e.start, r, i, e, "start");
            need_finite(e.duration, r, i, e, "duration");
            need_finite(e.end(), r, i, e, "end");
            need_finite(e.memory, r, i, e, "memory");
            if (first || e.start < c.t_min) c.t_min = e.start;
            if (first || e.end() > c.t_max) c.t_max = e.end();
            if (first || e.memory > c.max_memory) c.max_memory = e.memory;
            first = false;
        }
    }
    for (auto i : selected) {
        const auto& r = trace.ranks[i];
        c.max_events = std::max(c.max_events, r.events.size());
        for (const auto& e : r.events) {
            const BoxClass cls = box_class(e);
            if (cls == BoxClass::forward || cls == BoxClass::backward || cls == BoxClass::collective)
                c.max_layer = std::max(c.max_layer, e.layer);
            if (e.stream == Stream::comm) c.has_comm = true;
            if (e.duration == 0) {
                c.has_marker = true;
                if (e.op != ops::loss) c.markers_all_loss = false;
                continue;
            }
            c.has_class[static_cast<std::size_t>(cls)] = true;
            note_name(c.names[static_cast<std::size_t>(cls)], e.op.name());
        }
    }
    return c;
}

// The span of time and memory drawn, and the layer colour ramp.
void set_scales(Layout& l, const Trace& trace, const Census& c) {
    l.has_comm = c.has_comm;
    l.layers = std::max(1, c.max_layer + 1);
    if (trace.meta.is_object())
        if (auto it = trace.meta.find("layers"); it != trace.meta.end() && it->is_number_integer())
            l.layers = std::max<long long>(l.layers, std::min<long long>(it->get<long long>(), 1 << 24));
    for (const auto& [v, what] : {std::pair{trace.summary.makespan, "makespan"},
                                  std::pair{trace.summary.max_memory, "maximum memory"},
                                  std::pair{trace.summary.max_memory_time, "time of the maximum memory"},
                                  std::pair{trace.memory_capacity.value_or(0.0), "memory capacity"}})
        if (!std::isfinite(v))
            throw std::invalid_argument(fmt::format("cannot draw the trace: its {} is not finite ({})", what, v));
    // The span drawn holds 0, so it is at least as wide as its ends are far from 0: every time maps to
    // a finite pixel, and the ticks over it are a handful whatever the magnitudes.
    l.t0 = std::min(0.0, c.t_min);
    l.t1 = std::max({0.0, trace.summary.makespan, c.t_max});
    if (!(l.t1 > l.t0)) l.t1 = l.t0 + 1;
    if (!std::isfinite(l.t1 - l.t0))
        throw std::invalid_argument(fmt::format(
            "cannot draw the trace: its times run from {} to {}, a span a double cannot hold", l.t0, l.t1));
    // A span so narrow that its pixels would be infinitely wide (below 1e-300 units) is drawn as 1e-300.
    constexpr double kMinSpan = 1e-300;
    if (l.t1 - l.t0 < kMinSpan) l.t1 = l.t0 + kMinSpan;
    l.memory_scale = std::max(c.max_memory, trace.memory_capacity.value_or(0.0));
    if (!(l.memory_scale > 0)) l.memory_scale = 0;
}

// One row per selected rank, or per group of consecutive ones in the overview; returns the group size.
std::size_t make_rows(Layout& l, const Trace& trace, const std::vector<std::size_t>& selected, int max_rows) {
    l.overview = selected.size() > static_cast<std::size_t>(max_rows);
    const std::size_t group =
        l.overview ? (selected.size() + static_cast<std::size_t>(max_rows) - 1) / static_cast<std::size_t>(max_rows) : 1;
    for (std::size_t k = 0; k < selected.size(); k += group) {
        Row row;
        row.members.assign(selected.begin() + static_cast<std::ptrdiff_t>(k),
                           selected.begin() + static_cast<std::ptrdiff_t>(std::min(k + group, selected.size())));
        row.label = rank_list_label(trace, row.members);
        for (auto i : row.members) {
            const auto& r = trace.ranks[i];
            for (const auto& e : r.events) row.max_memory = std::max(row.max_memory, e.memory);
            if (r.rank == trace.summary.max_memory_rank && trace.summary.max_memory > 0 && l.memory_scale > 0)
                row.has_peak = true;
        }
        l.rows.push_back(std::move(row));
    }
    return group;
}

// Lane heights and fonts: larger for a few rows.
struct RowSizes {
    bool big;
    double compute_h, comm_h, memory_h, row_gap;
};
RowSizes size_rows(Layout& l) {
    const bool big = l.rows.size() <= kBigRowsUpTo && !l.overview;
    l.label_font = big ? 12 : 10;
    l.box_font = big ? 10 : 8;
    l.side_font = big ? 10 : 9;
    return {big, big ? 26.0 : 16.0, big ? 10.0 : 7.0, big ? 20.0 : 12.0, big ? 12.0 : 7.0};
}

// Horizontal: labels at the left, each row's maximum memory at the right, the plot between; returns its width.
double place_horizontally(Layout& l, const RowSizes& z, const Census& c, const Options& opt, const TextMeasure& m) {
    double label_w = z.big && l.memory_scale > 0 ? m.width("memory", 9) : 0, side_w = 0;
    for (const auto& row : l.rows) {
        label_w = std::max(label_w, m.width(row.label, l.label_font, Weight::bold));
        if (l.memory_scale > 0)
            side_w = std::max(side_w, m.width("max " + format_memory(row.max_memory, l.bytes), l.side_font));
    }
    l.plot_x0 = std::round(l.margin + label_w + 12);
    const double right = std::round(l.margin + std::max(side_w + 10, 24.0));
    double plot_w = 0;
    if (opt.width > 0) {
        plot_w = opt.width - l.plot_x0 - right;
        if (plot_w < kMinPlotWidth)
            throw std::invalid_argument(
                fmt::format("image width {} is too small for this trace: at least {} pixels are needed",
                            opt.width, static_cast<int>(l.plot_x0 + right + kMinPlotWidth)));
        l.width = opt.width;
    } else {
        plot_w = l.overview ? kOverviewPlot
                            : std::clamp(kAutoPxPerEvent * static_cast<double>(c.max_events), kAutoMinPlot,
                                         kAutoMaxPlot);
        l.width = static_cast<int>(l.plot_x0 + plot_w + right);
    }
    l.plot_x1 = l.plot_x0 + plot_w;
    l.px_per_time = plot_w / (l.t1 - l.t0);
    return plot_w;
}

// What the picture shows, in a sentence or three under the title and figures.
std::string explanation(const Layout& l, const Trace& trace, const std::vector<std::size_t>& selected,
                        std::size_t group) {
    std::string explain;
    if (l.overview)
        explain = fmt::format(
            "Overview of {} GPUs, up to {} per row. In each row and moment the colour is the most common "
            "operation and "
            "the height the share of the row's GPUs that are busy; grey bars show the largest memory in use "
            "among "
            "them.",
            selected.size(), group);
    else
        explain =
            "Each row is one GPU: its operations as boxes along time (numbers inside are batch ids); the "
            "grey "
            "bars under it show its memory in use.";
    if (l.memory_scale > 0)
        explain += fmt::format(
            " A full-height memory bar is {}{}.", format_memory(l.memory_scale, l.bytes),
            trace.memory_capacity && l.memory_scale == *trace.memory_capacity ? " (the capacity)" : "");
    if (selected.size() < trace.ranks.size()) {
        IdSet ids;
        for (auto i : selected) ids.insert(trace.ranks[i].rank);
        explain +=
            fmt::format(" Showing {} of {} GPUs: {}.", selected.size(), trace.ranks.size(), batch_label(ids));
    } else if (l.overview) {
        explain += " Select GPUs with --show-ranks to see their operations one by one.";
    }
    return explain;
}

// Header: title, figures, what the picture shows; returns the baseline of its last line.
double add_header(Layout& l, const Trace& trace, const Options& opt, const std::string& explain,
                  const TextMeasure& m) {
    double y = l.margin;
    const double text_w = l.width - 2 * l.margin;
    auto add_line = [&](std::string text, double size, bool bold, bool faint) {
        y += size * 1.35;
        l.header.push_back({std::move(text), size, bold, faint, y});
    };
    for (auto& line : wrap(m, opt.title.empty() ? auto_title(trace) : opt.title, 16, text_w, Weight::bold))
        add_line(std::move(line), 16, true, false);
    for (auto& line : wrap(m, figures_line(trace, l), 12, text_w))
        add_line(std::move(line), 12, false, false);
    for (auto& line : wrap(m, explain, 11, text_w)) add_line(std::move(line), 11, false, true);
    return y;
}

// Legend below the header from `y`: the kinds that appear, then the layer ramp and the memory marks;
// returns the baseline of its last line.
double add_legend(Layout& l, const Trace& trace, const Census& c, const TextMeasure& m, double y) {
    y += 8;
    const double lf = l.legend_font;
    double x = l.margin;
    y += lf * 1.5;
    auto place = [&](LegendEntry e, double swatch_w) {
        e.swatch_w = swatch_w;
        const double w = swatch_w + 5 + m.width(e.label, lf) + 18;
        if (x > l.margin && x + w - 18 > l.width - l.margin) {
            x = l.margin;
            y += lf * 1.7;
        }
        e.x = x;
        e.y = y;
        x += w;
        l.legend.push_back(std::move(e));
    };
    for (std::size_t k = 0; k < kBoxClasses; ++k)
        if (c.has_class[k]) {
            const auto cls = static_cast<BoxClass>(k);
            place({LegendEntry::Kind::box, cls, class_label(cls, c)}, l.legend_swatch * 1.6);
        }
    if (c.has_marker)
        place({LegendEntry::Kind::marker, BoxClass::loss,
               c.markers_all_loss ? "loss (zero length)" : "zero-length op"},
              l.legend_swatch * 0.6);
    auto has = [&](BoxClass cls) { return c.has_class[static_cast<std::size_t>(cls)]; };
    if (l.layers > 1 && (has(BoxClass::forward) || has(BoxClass::backward) || has(BoxClass::collective)))
        place({LegendEntry::Kind::ramp, BoxClass::forward, fmt::format("layers 0 to {}", l.layers - 1)}, 96);
    if (c.has_comm)
        place({LegendEntry::Kind::comm_lane, BoxClass::collective, "comm stream (thin lane)"}, 19);
    if (l.memory_scale > 0)
        place({LegendEntry::Kind::memory, BoxClass::other, "memory in use"}, l.legend_swatch);
    if (l.memory_scale > 0 && trace.summary.max_memory > 0)
        place({LegendEntry::Kind::peak, BoxClass::other, "maximum memory"}, l.legend_swatch);
    if (trace.memory_capacity && l.memory_scale > 0)
        place({LegendEntry::Kind::capacity, BoxClass::other, "capacity"}, 19);
    return y;
}

// Top axis labels below `y`, the rows' lanes, the bottom axis, and the picture's height.
void place_vertically(Layout& l, const RowSizes& z, double plot_w, double y) {
    l.plot_top = std::round(y + 10 + 14);  // whole pixels from here down: crisp lane edges
    l.ticks = time_ticks(l.t0, l.t1, std::max(2, static_cast<int>(plot_w / 90)), l.seconds);
    l.axis_title = fmt::format("time ({})", l.ticks.unit);
    y = l.plot_top + 8;
    for (auto& row : l.rows) {
        row.compute = {y, z.compute_h};
        y += z.compute_h;
        if (l.has_comm) {
            row.comm = {y + 1, z.comm_h};
            y += 1 + z.comm_h;
        }
        if (l.memory_scale > 0) {
            row.memory = {y + 2, z.memory_h};
            y += 2 + z.memory_h;
        }
        y += z.row_gap;
    }
    l.plot_bottom = y - z.row_gap + 8;
    l.axis_title_y = l.plot_bottom + 14 + 18;
    l.height = static_cast<int>(std::ceil(l.axis_title_y + l.margin));
}

}  // namespace

Layout make_layout(const Trace& trace, const Options& opt) {
    if (opt.width != 0 && (opt.width < kMinWidth || opt.width > kMaxWidth))
        throw std::invalid_argument(
            fmt::format("image width {} is out of range: expected {} to {} pixels (or 0 for automatic)",
                        opt.width, kMinWidth, kMaxWidth));
    if (opt.max_rows < 1)
        throw std::invalid_argument(
            fmt::format("max_rows {} is out of range: expected at least 1", opt.max_rows));

    Layout l;
    l.seconds = trace.time_unit == "s";
    l.bytes = trace.memory_unit == "byte";
    const std::vector<std::size_t> selected = select_ranks(trace, opt);
    const Census c = take_census(trace, selected);
    set_scales(l, trace, c);
    const std::size_t group = make_rows(l, trace, selected, opt.max_rows);
    const RowSizes sizes = size_rows(l);
    const TextMeasure m;
    const double plot_w = place_horizontally(l, sizes, c, opt, m);
    double y = add_header(l, trace, opt, explanation(l, trace, selected, group), m);
    y = add_legend(l, trace, c, m, y);
    place_vertically(l, sizes, plot_w, y);
    return l;
}

}  // namespace dtsim::render::detail
