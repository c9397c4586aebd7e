// The chart of `dtsim plan --svg`: step time against peak memory per GPU of the layouts a search
// simulated, the GPU's capacity, and the Pareto front (render.hpp).
#include "cairo_util.hpp"
#include "chart_output.hpp"
#include "dtsim/render.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <stdexcept>

namespace dtsim::render {
// (Its own namespace: the renderer's unity build puts this file beside compare_chart.cpp.)
namespace pareto {
namespace {

struct Rgb {
    double r, g, b;
};
constexpr Rgb kInk{0.1, 0.1, 0.1}, kGrid{0.88, 0.88, 0.88}, kFits{0.62, 0.62, 0.62}, kFront{0.16, 0.38, 0.69},
    kOom{0.84, 0.15, 0.16};
constexpr double kMargin = 16, kFont = 12, kTitle = 15, kPlotW = 560, kPlotH = 340, kAxisLeft = 64, kListRow = 17;
constexpr std::size_t kListed = 15;  // front layouts listed under the plot
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

void ink(cairo_t* cr, Rgb c) { cairo_set_source_rgb(cr, c.r, c.g, c.b); }

void text(cairo_t* cr, double x, double y, const std::string& s, double size,
          detail::Weight w = detail::Weight::normal, Rgb c = kInk, bool right = false) {
    detail::select_font(cr, size, w);
    if (right) x -= detail::text_width(cr, s, size, w);
    ink(cr, c);
    cairo_move_to(cr, x, y);
    cairo_show_text(cr, s.c_str());
}

// The fitting points no other fitting point beats in both step time and memory, by memory
// ascending (so step time descending); ties keep the first given.
std::vector<std::size_t> front_of(const std::vector<ParetoPoint>& points) {
    std::vector<std::size_t> fits;
    for (std::size_t i = 0; i < points.size(); ++i)
        if (!points[i].oom) fits.push_back(i);
    std::stable_sort(fits.begin(), fits.end(), [&](std::size_t a, std::size_t b) {
        const auto& x = points[a];
        const auto& y = points[b];
        return x.peak_memory != y.peak_memory ? x.peak_memory < y.peak_memory : x.step_time < y.step_time;
    });
    std::vector<std::size_t> front;
    double best = std::numeric_limits<double>::infinity();
    for (std::size_t i : fits)
        if (points[i].step_time < best) {
            best = points[i].step_time;
            front.push_back(i);
        }
    return front;
}

}  // namespace

void write(const std::vector<ParetoPoint>& points, double capacity, double headroom, const std::string& path,
           const std::string& title) {
    for (const auto& p : points)
        if (!std::isfinite(p.step_time) || !std::isfinite(p.peak_memory) || p.step_time < 0 || p.peak_memory < 0)
            throw std::invalid_argument(
                fmt::format("cannot draw the Pareto chart: \"{}\" has step time {} and peak memory {}", p.label,
                            p.step_time, p.peak_memory));
    if (!std::isfinite(capacity) || capacity < 0)
        throw std::invalid_argument(fmt::format("cannot draw the Pareto chart: capacity {}", capacity));
    if (!std::isfinite(headroom) || headroom < 0 || (capacity > 0 && headroom >= capacity))
        throw std::invalid_argument(
            fmt::format("cannot draw the Pareto chart: headroom {} with capacity {}", headroom, capacity));
    const std::vector<std::size_t> front = front_of(points);
    // Fastest first in the list and in the numbers drawn beside the points.
    std::vector<std::size_t> listed(front.rbegin(), front.rend());
    const std::size_t shown = std::min(listed.size(), kListed);

    double t_lo = std::numeric_limits<double>::infinity(), t_hi = 0, m_hi = capacity;
    std::size_t oom = 0;
    for (const auto& p : points) {
        t_lo = std::min(t_lo, p.step_time);
        t_hi = std::max(t_hi, p.step_time);
        m_hi = std::max(m_hi, p.peak_memory);
        oom += p.oom ? 1 : 0;
    }
    if (points.empty()) t_lo = 0, t_hi = 1;
    if (m_hi <= 0) m_hi = kGiB;
    // The time axis from a round value below the fastest to one above the slowest.
    const double t_step = detail::tick_step(std::max(t_hi - t_lo, t_hi * 0.02 + 1e-9), 5);
    t_lo = std::max(0.0, std::floor(t_lo / t_step) * t_step);
    t_hi = std::max(t_lo + t_step, std::ceil(t_hi / t_step) * t_step);
    const double m_step = detail::tick_step(m_hi * 1.05 / kGiB, 6);
    const double m_max = std::ceil(m_hi * 1.05 / kGiB / m_step) * m_step * kGiB;

    const detail::TextMeasure measure;
    const double top = kMargin + kTitle + 54;
    const double left = kMargin + kAxisLeft;
    const double list_top = top + kPlotH + 46;
    // The list's columns: number, step time and peak memory right-aligned, the layout.
    constexpr double kNumberX = 20, kTimeX = 110, kMemoryX = 210, kLabelX = 226;
    double list_width = 0;
    for (std::size_t k = 0; k < shown; ++k)
        list_width = std::max(list_width, kLabelX + measure.width(points[listed[k]].label, kFont - 1));
    const std::string subtitle =
        fmt::format("{} layouts simulated: {} fit, {} out of memory{}; blue: the Pareto front ({} layouts: none "
                    "other is both faster and smaller)",
                    points.size(), points.size() - oom, oom,
                    capacity > 0 && headroom > 0 ? " or into the headroom" : "", front.size());
    const double width = std::max({left + kPlotW + 40, kMargin + measure.width(title, kTitle, detail::Weight::bold),
                                   kMargin + measure.width(subtitle, kFont), kMargin + list_width}) +
                         kMargin;
    const double height = list_top + kListRow * static_cast<double>(shown + 1 + (listed.size() > shown ? 1 : 0)) +
                          kMargin;
    const auto x_of = [&](double bytes) { return left + kPlotW * bytes / m_max; };
    const auto y_of = [&](double s) { return top + kPlotH * (1 - (s - t_lo) / (t_hi - t_lo)); };

    detail::write_chart(path, width, height, "drawing the Pareto chart", [&](cairo_t* cr) {
        ink(cr, {1, 1, 1});
        cairo_paint(cr);
        text(cr, kMargin, kMargin + kTitle, title, kTitle, detail::Weight::bold);
        text(cr, kMargin, kMargin + kTitle + 20, subtitle, kFont);
        // Grid and ticks.
        cairo_set_line_width(cr, 1);
        for (int i = 0; i <= 40; ++i) {
            const double m = m_step * i * kGiB;
            if (m > m_max * 1.0001) break;
            ink(cr, kGrid);
            cairo_rectangle(cr, x_of(m), top, 1, kPlotH);
            cairo_fill(cr);
            text(cr, x_of(m) - 6, top + kPlotH + 16, fmt::format("{:g}", m_step * i), kFont - 1);
        }
        for (int i = 0; i <= 40; ++i) {
            const double t = t_lo + t_step * i;
            if (t > t_hi * 1.0001) break;
            ink(cr, kGrid);
            cairo_rectangle(cr, left, y_of(t), kPlotW, 1);
            cairo_fill(cr);
            text(cr, left - 6, y_of(t) + 4, fmt::format("{:g} s", t), kFont - 1, detail::Weight::normal, kInk, true);
        }
        text(cr, left + kPlotW / 2 - 60, top + kPlotH + 34, "peak memory per GPU (GiB)", kFont, detail::Weight::bold);
        text(cr, kMargin, top - 8, "step time", kFont, detail::Weight::bold);
        // A memory limit as a vertical line across the plot, in the out-of-memory colour, its label
        // right-aligned to its left at `label_y` below the plot's top.
        const auto limit_line = [&](double bytes, double on, double off, double label_y, const std::string& label) {
            const double x = x_of(bytes);
            ink(cr, kOom);
            const double dash[] = {on, off};
            cairo_set_dash(cr, dash, 2, 0);
            cairo_set_line_width(cr, 1.5);
            cairo_move_to(cr, x, top);
            cairo_line_to(cr, x, top + kPlotH);
            cairo_stroke(cr);
            cairo_set_dash(cr, nullptr, 0, 0);
            text(cr, x - 4, top + label_y, label, kFont - 1, detail::Weight::normal, kOom, true);
        };
        // The capacity, dashed; less the headroom (plan --headroom), dotted: a layout fits left of it.
        if (capacity > 0) limit_line(capacity, 4, 3, 12, fmt::format("capacity {:g} GiB", capacity / kGiB));
        if (capacity > 0 && headroom > 0)
            limit_line(capacity - headroom, 1.5, 3, 28,
                       fmt::format("fits up to {:g} GiB (headroom {:g} GiB)", (capacity - headroom) / kGiB,
                                   headroom / kGiB));
        // Every layout: fitting ones as grey dots, the others as red crosses.
        for (const auto& p : points) {
            const double x = x_of(p.peak_memory), y = y_of(p.step_time);
            if (p.oom) {
                ink(cr, kOom);
                cairo_set_line_width(cr, 1.2);
                cairo_move_to(cr, x - 3, y - 3);
                cairo_line_to(cr, x + 3, y + 3);
                cairo_move_to(cr, x - 3, y + 3);
                cairo_line_to(cr, x + 3, y - 3);
                cairo_stroke(cr);
            } else {
                ink(cr, kFits);
                cairo_arc(cr, x, y, 2.5, 0, 2 * std::numbers::pi);
                cairo_fill(cr);
            }
        }
        // The front: a staircase through its points, each numbered as in the list.
        if (!front.empty()) {
            ink(cr, kFront);
            cairo_set_line_width(cr, 1.5);
            cairo_move_to(cr, x_of(points[front[0]].peak_memory), y_of(points[front[0]].step_time));
            for (std::size_t k = 1; k < front.size(); ++k) {
                cairo_line_to(cr, x_of(points[front[k]].peak_memory), y_of(points[front[k - 1]].step_time));
                cairo_line_to(cr, x_of(points[front[k]].peak_memory), y_of(points[front[k]].step_time));
            }
            cairo_stroke(cr);
            for (std::size_t k = 0; k < listed.size(); ++k) {
                const ParetoPoint& p = points[listed[k]];
                ink(cr, kFront);
                cairo_arc(cr, x_of(p.peak_memory), y_of(p.step_time), 4, 0, 2 * std::numbers::pi);
                cairo_fill(cr);
                if (k < shown)
                    text(cr, x_of(p.peak_memory) + 5, y_of(p.step_time) - 5, fmt::format("{}", k + 1), kFont - 1,
                         detail::Weight::bold, kFront);
            }
        }
        // The front's layouts, fastest first.
        const auto bold = detail::Weight::bold, normal = detail::Weight::normal;
        text(cr, kMargin + kNumberX, list_top, "#", kFont, bold, kInk, true);
        text(cr, kMargin + kTimeX, list_top, "step time", kFont, bold, kInk, true);
        text(cr, kMargin + kMemoryX, list_top, "peak memory", kFont, bold, kInk, true);
        text(cr, kMargin + kLabelX, list_top, "layout (the Pareto front, fastest first)", kFont, bold);
        for (std::size_t k = 0; k < shown; ++k) {
            const ParetoPoint& p = points[listed[k]];
            const double y = list_top + kListRow * static_cast<double>(k + 1);
            text(cr, kMargin + kNumberX, y, fmt::format("{}", k + 1), kFont - 1, bold, kFront, true);
            text(cr, kMargin + kTimeX, y, fmt::format("{:.3f} s", p.step_time), kFont - 1, normal, kInk, true);
            text(cr, kMargin + kMemoryX, y, fmt::format("{:.2f} GiB", p.peak_memory / kGiB), kFont - 1, normal, kInk,
                 true);
            text(cr, kMargin + kLabelX, y, p.label, kFont - 1);
        }
        if (listed.size() > shown)
            text(cr, kMargin, list_top + kListRow * static_cast<double>(shown + 1),
                 fmt::format("... and {} more (--csv FILE lists every layout simulated that fits)",
                             listed.size() - shown),
                 kFont - 1);
    });
}

}  // namespace pareto

std::vector<std::size_t> pareto_front(const std::vector<ParetoPoint>& points) { return pareto::front_of(points); }

void write_pareto_chart(const std::vector<ParetoPoint>& points, double capacity, const std::string& path,
                        const std::string& title, double headroom) {
    pareto::write(points, capacity, headroom, path, title);
}

}  // namespace dtsim::render
