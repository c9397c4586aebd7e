#include "cairo_util.hpp"
#include "chart_output.hpp"
#include "dtsim/render.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace dtsim::render {
namespace {

struct Rgb {
    double r, g, b;
};
constexpr Rgb kCompute{0.27, 0.45, 0.69}, kComm{0.93, 0.55, 0.17}, kIdle{0.75, 0.75, 0.75};
constexpr Rgb kMemory{0.45, 0.62, 0.35}, kOom{0.84, 0.15, 0.16}, kInk{0.1, 0.1, 0.1}, kGrid{0.88, 0.88, 0.88};

constexpr double kMargin = 16, kRow = 30, kBar = 18, kFont = 12, kTitle = 15, kPanelGap = 40;
constexpr double kTimeWidth = 440, kMemoryWidth = 260;

void fill(cairo_t* cr, Rgb c) { cairo_set_source_rgb(cr, c.r, c.g, c.b); }

void text(cairo_t* cr, double x, double y, const std::string& s, double size, detail::Weight w = detail::Weight::normal,
          bool right = false) {
    detail::select_font(cr, size, w);
    if (right) x -= detail::text_width(cr, s, size, w);
    fill(cr, kInk);
    cairo_move_to(cr, x, y);
    cairo_show_text(cr, s.c_str());
}

struct Geometry {
    double label_width, width, height, time_x, memory_x, top;
};

void draw(cairo_t* cr, const std::vector<CompareRow>& rows, const std::string& title, const Geometry& g) {
    fill(cr, {1, 1, 1});
    cairo_paint(cr);
    text(cr, kMargin, kMargin + kTitle, title, kTitle, detail::Weight::bold);
    // Legend.
    double lx = kMargin;
    const double ly = kMargin + kTitle + 18;
    for (auto [name, c] : {std::pair{"compute", kCompute}, {"exposed comm", kComm}, {"idle (bubble, waits)", kIdle},
                           {"peak memory", kMemory}, {"past capacity", kOom}}) {
        fill(cr, c);
        cairo_rectangle(cr, lx, ly - 10, 12, 12);
        cairo_fill(cr);
        text(cr, lx + 16, ly, name, kFont);
        lx += 16 + detail::text_width(cr, name, kFont) + 18;
    }
    double max_time = 0, max_memory = 0;
    for (const auto& r : rows) {
        max_time = std::max(max_time, r.compute + r.comm + r.idle);
        max_memory = std::max({max_memory, r.peak_memory, r.capacity});
    }
    if (max_time <= 0) max_time = 1;
    if (max_memory <= 0) max_memory = 1;
    const double bottom = g.top + kRow * static_cast<double>(rows.size());
    // Axes: grid lines and tick labels under each panel.
    // At most 12 ticks (tick_step aims at 5 or 4 over the range), whatever the rounding.
    const double ts = detail::tick_step(max_time, 5);
    double t = 0;
    for (int i = 0; i <= 12 && t <= max_time * 1.0001; ++i, t += ts) {
        const double x = g.time_x + kTimeWidth * t / max_time;
        fill(cr, kGrid);
        cairo_rectangle(cr, x, g.top, 1, bottom - g.top);
        cairo_fill(cr);
        text(cr, x - 8, bottom + 16, fmt::format("{:g} s", t), kFont - 1);
    }
    const double gib = 1024.0 * 1024.0 * 1024.0, ms = detail::tick_step(max_memory / gib, 4);
    double m = 0;
    for (int i = 0; i <= 12 && m <= max_memory / gib * 1.0001; ++i, m += ms) {
        const double x = g.memory_x + kMemoryWidth * m * gib / max_memory;
        fill(cr, kGrid);
        cairo_rectangle(cr, x, g.top, 1, bottom - g.top);
        cairo_fill(cr);
        text(cr, x - 8, bottom + 16, fmt::format("{:g} GiB", m), kFont - 1);
    }
    text(cr, g.time_x, g.top - 6, "step time per GPU (mean)", kFont, detail::Weight::bold);
    text(cr, g.memory_x, g.top - 6, "peak memory per GPU", kFont, detail::Weight::bold);
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const CompareRow& r = rows[i];
        const double y = g.top + kRow * static_cast<double>(i) + (kRow - kBar) / 2;
        text(cr, g.time_x - 8, y + kBar - 5, r.name, kFont, detail::Weight::normal, true);
        double x = g.time_x;
        for (auto [v, c] : {std::pair{r.compute, kCompute}, {r.comm, kComm}, {r.idle, kIdle}}) {
            const double w = kTimeWidth * v / max_time;
            fill(cr, c);
            cairo_rectangle(cr, x, y, w, kBar);
            cairo_fill(cr);
            x += w;
        }
        text(cr, x + 4, y + kBar - 5, fmt::format("{:.3f} s", r.compute + r.comm + r.idle), kFont - 1);
        const bool oom = r.capacity > 0 && r.peak_memory > r.capacity;
        const double fits = kMemoryWidth * std::min(r.peak_memory, r.capacity > 0 ? r.capacity : r.peak_memory) / max_memory;
        fill(cr, kMemory);
        cairo_rectangle(cr, g.memory_x, y, fits, kBar);
        cairo_fill(cr);
        if (oom) {
            fill(cr, kOom);
            cairo_rectangle(cr, g.memory_x + fits, y, kMemoryWidth * r.peak_memory / max_memory - fits, kBar);
            cairo_fill(cr);
        }
        if (r.capacity > 0) {  // the capacity, dashed
            const double cx = g.memory_x + kMemoryWidth * r.capacity / max_memory;
            fill(cr, kInk);
            const double dash[] = {3, 2};
            cairo_set_dash(cr, dash, 2, 0);
            cairo_set_line_width(cr, 1.5);
            cairo_move_to(cr, cx, y - 3);
            cairo_line_to(cr, cx, y + kBar + 3);
            cairo_stroke(cr);
            cairo_set_dash(cr, nullptr, 0, 0);
        }
        text(cr, g.memory_x + kMemoryWidth + 6, y + kBar - 5,
             fmt::format("{:.1f} GiB{}", r.peak_memory / gib, oom ? " OOM" : ""), kFont - 1);
    }
}

}  // namespace

void write_compare_chart(const std::vector<CompareRow>& rows, const std::string& path, const std::string& title) {
    (void)format_from_path(path);  // an unknown extension is the first error
    // Every figure drawn is finite (and so are the sums and scales made of them).
    for (const auto& r : rows)
        for (const auto& [v, what] : {std::pair{r.compute + r.comm + r.idle, "step time"},
                                      std::pair{r.peak_memory, "peak memory"}, std::pair{r.capacity, "capacity"}})
            if (!std::isfinite(v) || !std::isfinite(v * 1.0001))
                throw std::invalid_argument(
                    fmt::format("cannot draw the comparison: the {} of \"{}\" is not finite ({})", what, r.name, v));
    const detail::TextMeasure measure;
    double label = 0;
    for (const auto& r : rows) label = std::max(label, measure.width(r.name, kFont));
    Geometry g{};
    g.label_width = label;
    g.time_x = kMargin + label + 10;
    g.memory_x = g.time_x + kTimeWidth + 60 + kPanelGap;
    g.top = kMargin + kTitle + 18 + 34;
    g.width = std::ceil(std::max(g.memory_x + kMemoryWidth + 120, kMargin + measure.width(title, kTitle) + kMargin));
    g.height = std::ceil(g.top + kRow * static_cast<double>(rows.size()) + 24 + kMargin);
    detail::write_chart(path, g.width, g.height, "drawing the comparison",
                        [&](cairo_t* cr) { draw(cr, rows, title, g); });
}

}  // namespace dtsim::render
