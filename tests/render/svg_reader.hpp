// Just enough of an SVG reader for the renderer tests: the filled and stroked
// paths Cairo writes (rectangles come out as <path>, text as glyph <use>s).
#pragma once

#include <cmath>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace dtsim::render::testing {

struct Colour {
    double r = 0, g = 0, b = 0;
};

struct SvgPath {
    bool filled = false;
    Colour fill;
    double fill_opacity = 1;
    bool stroked = false;
    Colour stroke;
    bool dashed = false;
    std::vector<std::pair<double, double>> points;  // every coordinate pair of d, in order
    bool is_rect = false;                           // d is "M L L L Z M": an axis-aligned rectangle
    double x0 = 0, y0 = 0, x1 = 0, y1 = 0;          // bounding box

    [[nodiscard]] double width() const { return x1 - x0; }
    [[nodiscard]] double height() const { return y1 - y0; }
};

namespace svg_detail {

inline std::string attribute(const std::string& element, const std::string& name) {
    const std::string key = " " + name + "=\"";
    const auto at = element.find(key);
    if (at == std::string::npos) return "";
    const auto start = at + key.size();
    return element.substr(start, element.find('"', start) - start);
}

// "rgb(13.72549%,59.215686%,23.529412%)" after `key` in a style string.
inline bool style_colour(const std::string& style, const std::string& key, Colour& out) {
    const auto at = style.find(key + "rgb(");
    if (at == std::string::npos || (at > 0 && style[at - 1] != ';' && style[at - 1] != ' ')) return false;
    const char* p = style.c_str() + at + key.size() + 4;
    char* end = nullptr;
    out.r = std::strtod(p, &end) / 100;
    out.g = std::strtod(end + 2, &end) / 100;
    out.b = std::strtod(end + 2, &end) / 100;
    return true;
}

inline double style_number(const std::string& style, const std::string& key, double fallback) {
    const auto at = style.find(key);
    if (at == std::string::npos) return fallback;
    return std::strtod(style.c_str() + at + key.size(), nullptr);
}

}  // namespace svg_detail

// The paths drawn on the page (glyph outlines in <defs> left out).
inline std::vector<SvgPath> read_paths(const std::string& svg) {
    std::vector<SvgPath> out;
    const auto defs_end = svg.find("</defs>");
    std::size_t pos = defs_end == std::string::npos ? 0 : defs_end;
    while ((pos = svg.find("<path ", pos)) != std::string::npos) {
        const auto end = svg.find("/>", pos);
        const std::string el = svg.substr(pos, end - pos);
        pos = end;
        if (!svg_detail::attribute(el, "transform").empty())
            throw std::runtime_error("unexpected transform in " + el);
        SvgPath p;
        const std::string style = svg_detail::attribute(el, "style");
        p.filled = svg_detail::style_colour(style, "fill:", p.fill);
        p.fill_opacity = svg_detail::style_number(style, "fill-opacity:", 1);
        p.stroked = svg_detail::style_colour(style, "stroke:", p.stroke);
        p.dashed = style.find("stroke-dasharray") != std::string::npos;
        std::istringstream d(svg_detail::attribute(el, "d"));
        std::string cmd;
        std::string ops;
        while (d >> cmd) {
            if (cmd == "Z") {
                ops += 'Z';
                continue;
            }
            double x = 0, y = 0;
            d >> x >> y;
            ops += cmd;
            p.points.emplace_back(x, y);
        }
        if (!p.points.empty()) {
            p.x0 = p.x1 = p.points[0].first;
            p.y0 = p.y1 = p.points[0].second;
            for (const auto& [x, y] : p.points) {
                p.x0 = std::min(p.x0, x), p.x1 = std::max(p.x1, x);
                p.y0 = std::min(p.y0, y), p.y1 = std::max(p.y1, y);
            }
        }
        if (ops == "MLLLZM") {
            const auto& q = p.points;
            p.is_rect = (q[0].second == q[1].second && q[1].first == q[2].first &&
                         q[2].second == q[3].second && q[3].first == q[0].first) ||
                        (q[0].first == q[1].first && q[1].second == q[2].second && q[2].first == q[3].first &&
                         q[3].second == q[0].second);
        }
        out.push_back(std::move(p));
    }
    return out;
}

inline bool same_colour(const Colour& a, double r, double g, double b, double tol = 0.003) {
    return std::fabs(a.r - r) <= tol && std::fabs(a.g - g) <= tol && std::fabs(a.b - b) <= tol;
}

}  // namespace dtsim::render::testing
