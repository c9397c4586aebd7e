#include "layout.hpp"

#include "cairo_util.hpp"
#include "memory_profile.hpp"

#include "dtsim/interrupt.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

namespace dtsim::render::detail {
namespace {

// A span so narrow that its pixels would be infinitely wide (below 1e-300 units): a trace's is drawn
// as 1e-300, a failure's window is not drawn again.
constexpr double kMinSpan = 1e-300;

constexpr int kMinWidth = 320;
constexpr int kMaxWidth = 30000;  // Cairo image surfaces stop at 32767 pixels
// A picture taller than this is refused (some 27,000 rows of the ranks view): its height must stay an int.
constexpr double kMaxHeight = 1e6;
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

// A rank's coordinates on the grid's dimensions above size 1, e.g. "pp1 dp0 tp3"; empty
// when the grid is unknown or a single dimension (where the GPU number says it all).
std::string coords_label(const RankGrid& g, int rank) {
    if (!g.known || rank < 0 || rank >= g.size()) return {};
    const auto c = g.coords(rank);
    int dims = 0;
    std::string out;
    for (const auto& [name, n, v] : {std::tuple{"pp", g.pp, c.pp}, std::tuple{"dp", g.dp, c.dp},
                                     std::tuple{"cp", g.cp, c.cp}, std::tuple{"tp", g.tp, c.tp}})
        if (n > 1) {
            out += fmt::format("{}{}{}", out.empty() ? "" : " ", name, v);
            ++dims;
        }
    return dims > 1 ? out : std::string();
}

std::string rank_list_label(const Trace& trace, const std::vector<std::size_t>& members, const RankGrid& grid) {
    IdSet ids;
    for (auto i : members) ids.insert(trace.ranks[i].rank);
    if (ids.intervals().size() == 1 && ids.size() == 1) {
        const std::string coords = coords_label(grid, ids.min());
        return coords.empty() ? fmt::format("GPU {}", ids.min()) : fmt::format("{}  GPU {}", coords, ids.min());
    }
    if (ids.intervals().size() == 1) return fmt::format("GPU {}-{}", ids.min(), ids.max());
    return "GPUs " + batch_label(ids);
}

// The grid's sizes above 1, e.g. "dp 2, tp 8, pp 4" (empty for a single rank per dimension).
std::string grid_sizes(const RankGrid& g) {
    std::vector<std::string> parts;
    for (const auto& [name, n] : {std::pair{"dp", g.dp}, std::pair{"tp", g.tp}, std::pair{"cp", g.cp}, std::pair{"pp", g.pp}})
        if (n > 1) parts.push_back(fmt::format("{} {}", name, n));
    return join(parts, ", ");
}

std::string auto_title(const Trace& trace, const RankGrid& grid) {
    const auto& meta = trace.meta;
    std::string name = "dtsim trace";
    std::vector<std::string> details;
    // Said elsewhere: the name (once, whichever key holds it), the note (the subtitle), the error (last).
    std::vector<std::string> used{"config", "name", "note", "error", "strategy", "grid"};
    if (meta.is_object()) {
        for (const auto& [key, label] : {std::pair{"puzzle", "Puzzle"}, std::pair{"config", ""},
                                         std::pair{"name", ""}, std::pair{"model", "Model"}}) {
            auto it = meta.find(key);
            if (it == meta.end() || !it->is_string()) continue;
            const auto& v = it->get_ref<const std::string&>();
            name = *label ? fmt::format("{} \"{}\"", label, v) : v;
            used.emplace_back(key);
            break;
        }
        // A hardware run: its strategy and grid.
        if (auto it = meta.find("strategy"); it != meta.end() && it->is_object() && !meta.contains("puzzle")) {
            std::string strategy;
            if (auto n = it->find("name"); n != it->end() && n->is_string()) strategy = n->get<std::string>();
            const std::string sizes = grid.known ? grid_sizes(grid) : std::string();
            if (!strategy.empty() || !sizes.empty())
                details.push_back(strategy.empty() ? sizes : sizes.empty() ? strategy : strategy + " (" + sizes + ")");
        }
        for (const auto& [key, noun] :
             {std::pair{"stages", "stages"}, std::pair{"layers", "layers"}, std::pair{"batches", "batches"},
              std::pair{"microbatches", "microbatches"}, std::pair{"ranks", "GPUs"}}) {
            auto it = meta.find(key);
            if (it == meta.end() || !it->is_number_integer()) continue;
            details.push_back(fmt::format("{} {}", it->get<long long>(), noun));
            used.emplace_back(key);
        }
        // A few more of the meta's plain fields; a hardware config's own (its source, its file's
        // includes) stay out: its strategy, grid and note say what ran.
        std::size_t extra = meta.contains("config") ? 4 : 0;
        for (const auto& [key, value] : meta.items()) {
            if (extra == 4) break;
            if (std::find(used.begin(), used.end(), key) != used.end()) continue;
            std::string text;
            if (value.is_string())
                text = value.get_ref<const std::string&>();
            else if (value.is_number() || value.is_boolean())
                text = value.dump();
            else
                continue;
            // A schedule's generator, or the stem of its file, is already in its name.
            if (key == "generator" && name.find(text) != std::string::npos) continue;
            if (key == "file") {
                const auto slash = text.find_last_of('/');
                const std::string base = slash == std::string::npos ? text : text.substr(slash + 1);
                if (name.find(base.substr(0, base.find('.'))) != std::string::npos) continue;
            }
            details.push_back(fmt::format("{} {}", key, text));
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

// The config's note, the subtitle; empty when there is none.
std::string note_of(const Trace& trace) {
    if (!trace.meta.is_object()) return {};
    auto it = trace.meta.find("note");
    return it != trace.meta.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// What the largest sample of memory by kind holds, over all ranks (the first in rank order, then
// time): "held at the peak: weights 14.9 GiB, ..." where it is the summary's peak, else that sample's
// rank, total and time too (a peak inside one moment, which no event's start sees). Empty where the
// trace does not divide memory by kind.
std::string peak_by_kind(const Trace& trace, const Layout& l) {
    const auto& s = trace.summary;
    const RankTrace* best = nullptr;
    KindSample most;
    for (const auto& r : trace.ranks)
        if (const auto i = largest_kind_sample(trace, r))
            if (const KindSample k = kind_sample(trace, r, *i); !best || k.total > most.total) {
                best = &r;
                most = k;
            }
    if (!best || !(most.total > 0)) return {};
    if (best->rank == s.max_memory_rank && std::fabs(most.total - s.max_memory) <= 1e-9 * s.max_memory)
        return "held at the peak: " + kind_parts_text(trace, most, l.bytes);
    return fmt::format("most held by kind: {} on GPU {} at {}{}: {}", format_memory(most.total, l.bytes), best->rank,
                       l.seconds ? "" : "step ", format_time(most.time, l.seconds), kind_parts_text(trace, most, l.bytes));
}

std::string figures_line(const Trace& trace, const Layout& l) {
    const auto& s = trace.summary;
    std::vector<std::string> parts;
    if (trace.event_count() == 0) {
        parts.emplace_back("no events");
    } else {
        if (!l.seconds && !l.pipeline)  // the puzzles' measure; a pipeline is measured by its makespan
            parts.push_back(fmt::format("timesteps {}", format_time(s.timesteps, false)));
        parts.push_back(
            fmt::format("makespan {}{}", format_time(s.makespan, l.seconds), l.seconds ? "" : " steps"));
        if (s.max_memory > 0)  // a trace without memory (dtsim failures) says nothing of it
            parts.push_back(fmt::format("max memory {} on GPU {} at {}{}", format_memory(s.max_memory, l.bytes),
                                        s.max_memory_rank, l.seconds ? "" : "step ",
                                        format_time(s.max_memory_time, l.seconds)));
        if (const std::string held = peak_by_kind(trace, l); !held.empty()) parts.push_back(held);
        if (l.pipeline)
            parts.push_back(fmt::format("bubble {:.1f} % (idle share of the rows' time)", 100 * l.bubble_fraction));
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
        // A hardware run's recompute, embedding and logits are drawn as forward work, its input and
        // weight backwards (I, W) as backward work: the legend names them.
        case BoxClass::forward:
            return names.size() <= 1 ? "forward (colour = layer)"
                                     : fmt::format("forward work, colour = layer ({})", join(names, ", "));
        case BoxClass::backward:
            return names.size() <= 1 ? "backward (lighter)"
                                     : fmt::format("backward work, lighter ({})", join(names, ", "));
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

std::vector<std::pair<int, std::string>> blocked_ranks(const Trace& trace) {
    std::vector<std::pair<int, std::string>> out;
    if (!trace.meta.is_object()) return out;
    auto it = trace.meta.find("error");
    if (it == trace.meta.end() || !it->is_string()) return out;
    const auto& error = it->get_ref<const std::string&>();
    if (!error.starts_with("deadlock")) return out;
    std::size_t pos = 0;
    while (pos < error.size()) {
        auto end = error.find('\n', pos);
        if (end == std::string::npos) end = error.size();
        std::string_view line(error.data() + pos, end - pos);
        pos = end + 1;
        while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
        if (!line.starts_with("rank ")) continue;
        line.remove_prefix(5);
        int rank = 0;
        auto [num_end, ec] = std::from_chars(line.data(), line.data() + line.size(), rank);
        if (ec != std::errc() || rank < 0) continue;
        line.remove_prefix(static_cast<std::size_t>(num_end - line.data()));
        std::string what;
        if (line.starts_with(" is blocked at ")) {  // a schedule's report
            const auto action = line.substr(15, line.find(' ', 15) - 15);
            const auto waits = line.find("it waits for ");
            if (waits == std::string_view::npos) continue;
            auto reason = line.substr(waits + 13);
            reason = reason.substr(0, reason.find(", which"));
            what = fmt::format("blocked at {}: waits for {}", action, reason);
        } else if (line.starts_with(" waits in ")) {  // the engine's
            auto reason = line.substr(10);
            what = fmt::format("blocked: waits in {}", reason.substr(0, reason.find("; last event")));
        } else {
            continue;
        }
        if (std::none_of(out.begin(), out.end(), [rank](const auto& b) { return b.first == rank; }))
            out.emplace_back(rank, std::move(what));
    }
    return out;
}

std::string idle_label(const Row& row) { return fmt::format("idle {:.1f} %", 100 * row.idle_fraction); }

int Layout::columns() const { return static_cast<int>(std::ceil(plot_x1 - plot_x0)); }

std::string batch_label(const IdSet& batches) {
    std::string s = batches.str();
    return s.size() >= 2 ? s.substr(1, s.size() - 2) : s;
}

namespace {

// The selected ranks, from rank ids to indices into trace.ranks (every rank without a selection).
std::vector<std::size_t> select_ranks(const Trace& trace, const Options& opt, const RankGrid& grid) {
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
    for (int id : parse_rank_selection(opt.ranks, grid, max_id + 1)) {
        const auto it = std::lower_bound(by_id.begin(), by_id.end(), std::pair{id, std::size_t{0}});
        if (it == by_id.end() || it->first != id) throw std::invalid_argument(fmt::format("rank {} is not in the trace", id));
        selected.push_back(it->second);
    }
    return selected;
}

// A trace of a pipeline: its grid has stages and its ranks record passes of microbatches.
bool pipelined(const Trace& trace, const RankGrid& grid) {
    if (!grid.known || grid.pp < 2) return false;
    for (const auto& r : trace.ranks)
        for (const auto& e : r.events)
            if (!e.batches.empty() && pass_kind(e.op) != PassKind::other) return true;
    return false;
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
            if (!drawable(e)) {
                need_finite(e.start, r, i, e, "start");
                need_finite(e.duration, r, i, e, "duration");
                need_finite(e.end(), r, i, e, "end");
                need_finite(e.memory, r, i, e, "memory");
            }
            if (first || e.start < c.t_min) c.t_min = e.start;
            if (first || e.end() > c.t_max) c.t_max = e.end();
            if (first || e.memory > c.max_memory) c.max_memory = e.memory;
            first = false;
        }
        if (!trace.whole_memory_samples(r))
            throw std::invalid_argument(fmt::format(
                "cannot draw the trace: rank {}'s memory by kind is not whole samples of a time and {} amounts", r.rank,
                trace.memory_kinds.size()));
        for (std::size_t i = 0, n = trace.memory_samples(r); i < n; ++i) {
            const KindSample k = kind_sample(trace, r, i);
            if (!drawable(trace, k))
                throw std::invalid_argument(fmt::format(
                    "cannot draw the trace: rank {}, memory sample {}: a time or amount is not a finite number >= 0",
                    r.rank, i));
            c.max_memory = std::max(c.max_memory, k.total);
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
    if (l.t1 - l.t0 < kMinSpan) l.t1 = l.t0 + kMinSpan;
    l.memory_scale = std::max(c.max_memory, trace.memory_capacity.value_or(0.0));
    if (!(l.memory_scale > 0)) l.memory_scale = 0;
}

// The overview's groups on a known grid: the ranks that share their pipeline, data and context
// coordinates (a tensor-parallel group), else their pipeline and data ones, else their stage; the
// smallest such groups that make at most max_rows rows. Empty when none does (or the grid is unknown).
std::vector<std::vector<std::size_t>> grid_groups(const Trace& trace, const std::vector<std::size_t>& selected,
                                                  const RankGrid& g, std::size_t max_rows) {
    if (!g.known || g.size() != static_cast<int>(trace.ranks.size())) return {};
    const int inner[] = {g.tp, g.tp * g.cp, g.tp * g.cp * g.dp};  // ranks per group at each level
    int previous = 1;
    for (int per : inner) {
        if (per == previous) continue;  // a dimension of size 1 groups nothing more
        previous = per;
        std::vector<std::vector<std::size_t>> groups;
        int key = -1;
        for (auto i : selected) {
            const int k = trace.ranks[i].rank / per;
            if (groups.empty() || k != key) groups.emplace_back();
            key = k;
            groups.back().push_back(i);
        }
        if (groups.size() <= max_rows) return groups;
    }
    return {};
}

// A group's label: the coordinates its ranks share (dimensions above size 1) and their GPUs.
std::string group_label(const Trace& trace, const std::vector<std::size_t>& members, const RankGrid& g) {
    std::string label = rank_list_label(trace, members, g);
    if (!g.known || members.size() < 2) return label;
    const auto a = g.coords(trace.ranks[members.front()].rank), b = g.coords(trace.ranks[members.back()].rank);
    std::string fixed;
    for (const auto& [name, n, va, vb] : {std::tuple{"pp", g.pp, a.pp, b.pp}, std::tuple{"dp", g.dp, a.dp, b.dp},
                                          std::tuple{"cp", g.cp, a.cp, b.cp}})
        if (n > 1 && va == vb) fixed += fmt::format("{}{} ", name, va);
    return fixed.empty() ? label : fixed + " " + label;
}

// One row per selected rank (in the pipeline view: per pipeline rank), or per group of ranks in the
// overview; returns the largest group's size.
std::size_t make_rows(Layout& l, const Trace& trace, const std::vector<std::size_t>& selected, int max_rows) {
    l.overview = !l.pipeline && selected.size() > static_cast<std::size_t>(max_rows);
    std::vector<std::vector<std::size_t>> groups;
    if (l.overview) groups = grid_groups(trace, selected, l.grid, static_cast<std::size_t>(max_rows));
    if (groups.empty()) {
        const std::size_t group =
            l.overview ? (selected.size() + static_cast<std::size_t>(max_rows) - 1) / static_cast<std::size_t>(max_rows) : 1;
        for (std::size_t k = 0; k < selected.size(); k += group)
            groups.emplace_back(selected.begin() + static_cast<std::ptrdiff_t>(k),
                                selected.begin() + static_cast<std::ptrdiff_t>(std::min(k + group, selected.size())));
    }
    // A schedule's trace numbers its layers by stage: each stage of a rank is a chunk.
    const bool layer_is_stage = trace.meta.is_object() && trace.meta.contains("stages");
    const std::vector<std::int32_t> starts = stage_starts(trace);
    std::size_t largest = 1;
    double idle = 0;
    const auto blocked = blocked_ranks(trace);
    for (auto& members : groups) {
        Row row;
        row.members = std::move(members);
        largest = std::max(largest, row.members.size());
        if (l.pipeline) {
            const auto& r = trace.ranks[row.members.front()];
            const auto c = l.grid.coords(r.rank);
            row.label = !l.grid.known                   ? fmt::format("GPU {}", r.rank)
                        : l.grid.size() > l.grid.pp ? fmt::format("pp {}  GPU {}", c.pp, r.rank)
                                                    : fmt::format("pp {}", c.pp);
            row.passes = rank_passes(r, trace.summary.makespan, layer_is_stage, starts, overlapped_forwards(trace, r.rank));
            row.idle_fraction = trace.summary.makespan > 0 ? row.passes.idle_time / trace.summary.makespan : 0;
            idle += row.idle_fraction;
        } else {
            row.label = l.overview ? group_label(trace, row.members, l.grid) : rank_list_label(trace, row.members, l.grid);
        }
        if (row.members.size() == 1) {
            const auto& r = trace.ranks[row.members.front()];
            for (const auto& [rank, what] : blocked)
                if (rank == r.rank) {
                    row.blocked = what;
                    for (const auto& e : r.events) row.blocked_at = std::max(row.blocked_at, e.end());
                }
        }
        row.by_kind = !l.overview && row.members.size() == 1 && l.memory_scale > 0 &&
                      trace.memory_samples(trace.ranks[row.members.front()]) > 0;
        for (auto i : row.members) {
            const auto& r = trace.ranks[i];
            for (const auto& e : r.events) row.max_memory = std::max(row.max_memory, e.memory);
            if (row.by_kind)
                for (std::size_t k = 0, n = trace.memory_samples(r); k < n; ++k)
                    row.max_memory = std::max(row.max_memory, kind_sample(trace, r, k).total);
            if (r.rank == trace.summary.max_memory_rank && trace.summary.max_memory > 0 && l.memory_scale > 0)
                row.has_peak = true;
        }
        l.rows.push_back(std::move(row));
    }
    if (l.pipeline && !l.rows.empty()) l.bubble_fraction = idle / static_cast<double>(l.rows.size());
    return largest;
}

// The memory axis of rows stacked by kind: 0 and one or two round values up to the scale, in the
// largest binary unit the scale reaches (memory in bytes) or in the trace's units.
void set_memory_ticks(Layout& l) {
    if (!any_stacked(l)) return;
    l.memory_tick_unit_size = 1;
    l.memory_tick_unit = l.bytes ? "B" : "units";
    if (l.bytes) {
        static constexpr const char* kNames[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
        for (const char* name : kNames) {
            if (l.memory_scale < l.memory_tick_unit_size * 1024) break;
            l.memory_tick_unit_size *= 1024;
            l.memory_tick_unit = name;
        }
    }
    // The smallest step of 1, 2, 2.5, 4 or 5 times a power of ten that makes at most two ticks above 0.
    const double top = l.memory_scale / l.memory_tick_unit_size;
    double step = std::pow(10.0, std::floor(std::log10(top / 2)) - 1);
    for (int guard = 0; guard < 64; ++guard) {
        bool found = false;
        for (double f : {1.0, 2.0, 2.5, 4.0, 5.0})
            if (std::floor(top / (f * step) + 1e-9) <= 2) {
                step *= f;
                found = true;
                break;
            }
        if (found) break;
        step *= 10;
    }
    l.memory_ticks.clear();
    for (int k = 0; k <= 2 && k * step <= top * (1 + 1e-9); ++k) l.memory_ticks.push_back(k * step * l.memory_tick_unit_size);
}

// Lane heights and fonts: larger for a few rows.
struct RowSizes {
    bool big;
    double compute_h, comm_h, memory_h, row_gap;
    double kind_h;  // a memory lane stacked by kind
};
RowSizes size_rows(Layout& l) {
    const bool big = l.rows.size() <= kBigRowsUpTo && !l.overview;
    l.label_font = big ? 12 : 10;
    l.box_font = big ? 10 : 8;
    l.side_font = big ? 10 : 9;
    return {big, big ? 26.0 : 16.0, big ? 10.0 : 7.0, big ? 20.0 : 12.0, big ? 12.0 : 7.0, big ? 44.0 : 20.0};
}

// Horizontal: labels at the left, each row's maximum memory at the right, the plot between; returns its width.
double place_horizontally(Layout& l, const RowSizes& z, const Census& c, const Options& opt, const TextMeasure& m) {
    double label_w = z.big && l.memory_scale > 0 ? m.width("memory", 9) : 0, side_w = 0;
    if (z.big && !l.memory_ticks.empty()) {
        double ticks_w = 0;
        for (double v : l.memory_ticks) ticks_w = std::max(ticks_w, m.width(memory_tick_label(l, v), kMemoryTickFont));
        label_w = std::max(label_w, m.width(memory_axis_title(l), 9) + 6 + ticks_w + 4);
    }
    for (const auto& row : l.rows) {
        label_w = std::max(label_w, m.width(row.label, l.label_font, Weight::bold));
        if (l.memory_scale > 0)
            side_w = std::max(side_w, m.width("max " + format_memory(row.max_memory, l.bytes), l.side_font));
        if (l.pipeline) side_w = std::max(side_w, m.width(idle_label(row), l.side_font, Weight::bold));
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
                        std::size_t group, bool explicit_ranks, const Census& c) {
    std::string explain;
    const bool stacked = any_stacked(l);
    if (c.has_class[static_cast<std::size_t>(BoxClass::train)] && !l.overview)
        explain = "Each row is one GPU over the whole run: its training steps, checkpoint writes, failures and "
                  "restarts along time (a restart and a failure are drawn at least 2 pixels wide however short, "
                  "so that each shows; a checkpoint write shorter than that as a thin tick on the row's upper part).";
    else if (l.pipeline)
        explain = fmt::format(
            "Pipeline view: each row is one pipeline rank{}; each box is one pass of a microbatch (its number "
            "inside) through the rank's layers. Shaded: the compute stream idle, the pipeline bubble; its share "
            "of the step is at the right.{}",
            l.grid.known && l.grid.size() > l.grid.pp
                ? fmt::format(" (the GPU shown; the other {} GPUs of its stage run alike)", l.grid.size() / l.grid.pp - 1)
                : "",
            l.memory_scale > 0 ? (stacked ? " Under a row, its memory in use, stacked by what it holds."
                                          : " The grey bars under a row show its memory in use.")
                               : "");
    else if (l.overview)
        explain = fmt::format(
            "Overview of {} GPUs, up to {} per row. In each row and moment the colour is the most common "
            "operation and "
            "the height the share of the row's GPUs that are busy; grey bars show the largest memory in use "
            "among "
            "them.",
            selected.size(), group);
    else
        explain = fmt::format("Each row is one GPU: its operations as boxes along time (numbers inside are the "
                              "{} they work on){}.",
                              l.seconds ? "microbatches" : "batches",
                              l.memory_scale > 0 ? (stacked ? "; under it, its memory in use, stacked by what it holds"
                                                            : "; the grey bars under it show its memory in use")
                                                 : "");
    if (l.memory_scale > 0 && stacked)
        explain += fmt::format(" The memory lanes run from 0 to {}{}.", format_memory(l.memory_scale, l.bytes),
                               trace.memory_capacity && l.memory_scale == *trace.memory_capacity ? " (the capacity)" : "");
    else if (l.memory_scale > 0)
        explain += fmt::format(
            " A full-height memory bar is {}{}.", format_memory(l.memory_scale, l.bytes),
            trace.memory_capacity && l.memory_scale == *trace.memory_capacity ? " (the capacity)" : "");
    if (selected.size() < trace.ranks.size() && !(l.pipeline && selected.size() == l.rows.size() && !explicit_ranks)) {
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
    for (auto& line : wrap(m, opt.title.empty() ? auto_title(trace, l.grid) : opt.title, 16, text_w, Weight::bold))
        add_line(std::move(line), 16, true, false);
    // The config's note: at most two lines, the rest cut.
    if (opt.title.empty()) {
        auto note = wrap(m, note_of(trace), 11, text_w - m.width(" (...)", 11));
        if (note.size() > 2) {
            note.resize(2);
            note.back() += " (...)";
        }
        for (auto& line : note) add_line(std::move(line), 11, false, false);
    }
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
    if (l.pipeline) {
        std::array<bool, kPassKinds> kinds{};
        int chunks = 1;
        bool idle = false;
        for (const auto& row : l.rows) {
            for (const auto& p : row.passes.passes) {
                kinds[static_cast<std::size_t>(p.kind)] = true;
                if (!p.recompute.empty()) kinds[static_cast<std::size_t>(PassKind::recompute)] = true;
            }
            chunks = std::max(chunks, row.passes.chunks);
            idle = idle || !row.passes.idle.empty();
        }
        static constexpr std::pair<PassKind, const char*> kNames[] = {
            {PassKind::forward, "F: forward"},
            {PassKind::backward, "B: backward"},
            {PassKind::input_grad, "I: backward for the inputs"},
            {PassKind::weight_grad, "W: backward for the weights"},
            {PassKind::recompute, "recompute (strip: inside a backward)"},
            {PassKind::overlap, "F&B: a forward and a backward overlapped (outlined)"},
            {PassKind::other, "other compute-stream work (optimizer, collectives)"}};
        for (const auto& [kind, label] : kNames)
            if (kinds[static_cast<std::size_t>(kind)]) {
                LegendEntry e{LegendEntry::Kind::pass, BoxClass::other, label};
                e.pass = kind;
                place(std::move(e), l.legend_swatch * 1.6);
            }
        for (int k = 1; k < std::min(chunks, 4); ++k) {
            LegendEntry e{LegendEntry::Kind::pass, BoxClass::other,
                          fmt::format("lighter: model chunk {} of {}", k + 1, chunks)};
            e.chunk = k;
            place(std::move(e), l.legend_swatch * 1.6);
        }
        if (idle) place({LegendEntry::Kind::bubble, BoxClass::other, "idle (the bubble)"}, l.legend_swatch * 1.6);
    }
    for (std::size_t k = 0; k < kBoxClasses && !l.pipeline; ++k)
        if (c.has_class[k]) {
            const auto cls = static_cast<BoxClass>(k);
            place({LegendEntry::Kind::box, cls, class_label(cls, c)}, l.legend_swatch * 1.6);
        }
    if (c.has_marker && !l.pipeline)
        place({LegendEntry::Kind::marker, BoxClass::loss,
               c.markers_all_loss ? "loss (zero length)" : "zero-length op"},
              l.legend_swatch * 0.6);
    auto has = [&](BoxClass cls) { return c.has_class[static_cast<std::size_t>(cls)]; };
    if (!l.pipeline && l.layers > 1 && (has(BoxClass::forward) || has(BoxClass::backward) || has(BoxClass::collective)))
        place({LegendEntry::Kind::ramp, BoxClass::forward, fmt::format("layers 0 to {}", l.layers - 1)}, 96);
    if (c.has_comm)
        place({LegendEntry::Kind::comm_lane, BoxClass::collective, "comm stream (thin lane)"}, 19);
    if (std::any_of(l.rows.begin(), l.rows.end(), [](const Row& r) { return !r.blocked.empty(); }))
        place({LegendEntry::Kind::blocked, BoxClass::other, "blocked here (deadlock): what the GPU waits for"},
              l.legend_swatch * 0.8);
    const bool stacked = any_stacked(l);
    if (l.memory_scale > 0 && std::any_of(l.rows.begin(), l.rows.end(), [](const Row& r) { return !r.by_kind; }))
        place({LegendEntry::Kind::memory, BoxClass::other, "memory in use"}, l.legend_swatch);
    if (stacked) {
        // The kinds the stacked rows ever hold.
        std::vector<bool> held(trace.memory_kinds.size(), false);
        for (const auto& row : l.rows)
            if (row.by_kind) {
                const auto& r = trace.ranks[row.members.front()];
                for (std::size_t i = 0, n = trace.memory_samples(r); i < n; ++i) {
                    const KindSample k = kind_sample(trace, r, i);
                    for (std::size_t j = 0; j < held.size(); ++j) held[j] = held[j] || k.parts[j] > 0;
                }
            }
        for (std::size_t j = 0; j < held.size(); ++j)
            if (held[j]) {
                LegendEntry e{LegendEntry::Kind::memory_kind, BoxClass::other, "memory: " + trace.memory_kinds[j]};
                e.colour = memory_kind_colour(trace.memory_kinds[j], j);
                place(std::move(e), l.legend_swatch);
            }
    }
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
            const double h = row.by_kind ? z.kind_h : z.memory_h;
            row.memory = {y + 2, h};
            y += 2 + h;
        }
        y += z.row_gap;
    }
    l.plot_bottom = y - z.row_gap + 8;
    l.axis_title_y = l.plot_bottom + 14 + 18;
    const double height = std::ceil(l.axis_title_y + l.margin);
    if (!(height <= kMaxHeight))
        throw std::invalid_argument(fmt::format(
            "the picture would be {:.3g} pixels tall for its {} rows, more than the {:.0f} that can be drawn: "
            "select fewer ranks, or group them into fewer rows (max_rows)",
            height, l.rows.size(), kMaxHeight));
    l.height = static_cast<int>(height);
}

// The zoom around the first failure (Layout::zoom), under the plot; grows the picture's height.
void add_zoom(Layout& l, const Trace& trace, const RowSizes& z, double plot_w) {
    if (l.overview || l.pipeline) return;
    const Row* failed = nullptr;
    double t_fail = 0;
    for (const auto& row : l.rows)
        for (const auto& e : trace.ranks[row.members.front()].events)
            if (box_class(e) == BoxClass::failure) {
                if (!failed || e.start < t_fail) {
                    failed = &row;
                    t_fail = e.start;
                }
                break;
            }
    if (!failed) return;
    // From the last checkpoint write that started before the failure to the end of the first write
    // (or restart) after it.
    const auto& events = trace.ranks[failed->members.front()].events;
    double a = t_fail, b = t_fail;
    for (const auto& e : events)
        if (box_class(e) == BoxClass::checkpoint && e.start < t_fail) a = e.start;
    for (const auto& e : events)
        if (e.start > t_fail && (box_class(e) == BoxClass::restart || box_class(e) == BoxClass::checkpoint)) {
            b = std::max(b, e.end());
            if (box_class(e) == BoxClass::checkpoint) break;
        }
    if (!(b > a)) b = a + 0.05 * (l.t1 - l.t0);
    const double pad = 0.04 * (b - a);
    a = std::max(l.t0, a - pad);
    b = std::min(l.t1, b + pad);
    // Nothing to gain where the window already fills half the plot; none to draw where its pixels
    // would be infinitely wide.
    if (!(b - a >= kMinSpan) || (b - a) * l.px_per_time > 0.5 * plot_w) return;
    Layout zl;
    zl.width = l.width;
    zl.margin = l.margin;
    zl.seconds = l.seconds;
    zl.bytes = l.bytes;
    zl.layers = l.layers;
    zl.has_comm = l.has_comm;
    zl.grid = l.grid;
    zl.label_font = l.label_font;
    zl.box_font = l.box_font;
    zl.side_font = l.side_font;
    zl.t0 = a;
    zl.t1 = b;
    zl.plot_x0 = l.plot_x0;
    zl.plot_x1 = l.plot_x1;
    zl.px_per_time = plot_w / (b - a);
    zl.rows.push_back(*failed);
    for (const auto& row : l.rows)
        if (std::none_of(trace.ranks[row.members.front()].events.begin(),
                         trace.ranks[row.members.front()].events.end(),
                         [](const Event& e) { return box_class(e) == BoxClass::failure; })) {
            zl.rows.push_back(row);
            break;
        }
    double y = l.height - l.margin + 16 + 12 * 1.35;
    zl.header.push_back({fmt::format("The first failure, from {} to {} (the dashed frame above): {}{}", format_time(a, l.seconds),
                                     format_time(b, l.seconds), failed->label,
                                     zl.rows.size() > 1 ? fmt::format(", and {}, which did not fail", zl.rows[1].label) : ""),
                         12, true, false, y});
    place_vertically(zl, z, plot_w, y);
    l.height = zl.height;
    l.zoom.push_back(std::move(zl));
}

}  // namespace

bool any_stacked(const Layout& l) {
    return std::any_of(l.rows.begin(), l.rows.end(), [](const Row& r) { return r.by_kind; });
}

bool shows_memory_axis(const Layout& l, const Row& row) {
    return row.by_kind && row.memory.h >= 30 && !l.memory_ticks.empty();
}

std::string memory_tick_label(const Layout& l, double value) {
    return format_number(std::round(value / l.memory_tick_unit_size * 100) / 100);
}

std::string memory_axis_title(const Layout& l) { return "memory, " + l.memory_tick_unit; }

std::vector<int> pipeline_view_ranks(const RankGrid& grid) {
    std::vector<int> out;
    for (int p = 0; p < grid.pp; ++p) out.push_back(grid.rank({0, 0, 0, p}));
    return out;
}

DrawnRanks drawn_ranks(const Trace& trace, const Options& opt, const RankGrid& grid) {
    DrawnRanks d;
    d.pipeline = opt.view == View::pipeline || (opt.view == View::automatic && pipelined(trace, grid));
    d.ranks = select_ranks(trace, opt, grid);
    if (d.pipeline && opt.ranks.empty() && grid.known && grid.size() == static_cast<int>(trace.ranks.size())) {
        d.ranks.clear();
        for (int r : pipeline_view_ranks(grid)) d.ranks.push_back(static_cast<std::size_t>(r));
    }
    // More rows than max_rows: the overview of the ranks view, unless the pipeline view was asked for.
    if (d.pipeline && opt.view == View::automatic && d.ranks.size() > static_cast<std::size_t>(opt.max_rows)) {
        d.pipeline = false;
        d.ranks = select_ranks(trace, opt, grid);
    }
    return d;
}

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
    l.grid = grid_of(trace);
    const DrawnRanks drawn = drawn_ranks(trace, opt, l.grid);
    l.pipeline = drawn.pipeline;
    const std::vector<std::size_t>& selected = drawn.ranks;
    const Census c = take_census(trace, selected);
    set_scales(l, trace, c);
    const std::size_t group = make_rows(l, trace, selected, opt.max_rows);
    set_memory_ticks(l);
    // A deadlock's rows say what they wait for after their last event: room for it at the right.
    if (std::any_of(l.rows.begin(), l.rows.end(), [](const Row& r) { return !r.blocked.empty(); }))
        l.t1 += 0.5 * (l.t1 - l.t0);
    const RowSizes sizes = size_rows(l);
    const TextMeasure m;
    const double plot_w = place_horizontally(l, sizes, c, opt, m);
    double y = add_header(l, trace, opt, explanation(l, trace, selected, group, !opt.ranks.empty(), c), m);
    y = add_legend(l, trace, c, m, y);
    place_vertically(l, sizes, plot_w, y);
    add_zoom(l, trace, sizes, plot_w);
    return l;
}

}  // namespace dtsim::render::detail
