// Just enough of an SVG reader for the renderer tests: the filled and stroked
// paths Cairo writes (rectangles come out as <path>, text as glyph <use>s), and
// the ink box of each piece of text.
#pragma once

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
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

// The bounding box of a path read, and whether it is one rectangle (`ops` its commands).
inline SvgPath finish_path(SvgPath p, const std::string& ops) {
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
        p.is_rect = (q[0].second == q[1].second && q[1].first == q[2].first && q[2].second == q[3].second &&
                     q[3].first == q[0].first) ||
                    (q[0].first == q[1].first && q[1].second == q[2].second && q[2].first == q[3].first &&
                     q[3].second == q[0].second);
    }
    return p;
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
        // The renderer fills runs of rectangles of one colour as one path, "M L L L Z" each and a
        // last "M": read back as the rectangles they are.
        constexpr std::string_view kRect = "MLLLZ";
        const std::size_t n = ops.size() / kRect.size();
        bool rects = n > 1 && ops.size() == n * kRect.size() + 1 && ops.back() == 'M';
        for (std::size_t i = 0; rects && i < n; ++i)
            rects = std::string_view(ops).substr(i * kRect.size(), kRect.size()) == kRect;
        if (rects) {
            const auto all = std::move(p.points);
            for (std::size_t i = 0; i < n; ++i) {
                SvgPath one = p;
                const auto first = all.begin() + static_cast<std::ptrdiff_t>(4 * i);
                one.points.assign(first, first + 4);
                one.points.push_back(*first);
                out.push_back(svg_detail::finish_path(std::move(one), "MLLLZM"));
            }
            continue;
        }
        out.push_back(svg_detail::finish_path(std::move(p), ops));
    }
    return out;
}

// The ink box of one piece of text: Cairo writes each string it shows as a group of glyph <use>s,
// each glyph's outline a <symbol> in <defs>; the box spans the outlines' points (curve control
// points included) placed at each <use>'s x and y.
struct TextBox {
    double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
    std::size_t glyphs = 0;  // glyphs with ink (a space has none)
};

inline std::vector<TextBox> read_text_boxes(const std::string& svg) {
    struct Box {
        double x0, y0, x1, y1;
    };
    std::map<std::string, Box> glyph_box;  // glyph id -> box of its outline, around its origin
    const auto defs_end = svg.find("</defs>");
    for (std::size_t pos = 0; (pos = svg.find("<symbol ", pos)) != std::string::npos && pos < defs_end;) {
        const auto end = svg.find("</symbol>", pos);
        const std::string sym = svg.substr(pos, end - pos);
        pos = end;
        const std::string id = svg_detail::attribute(sym.substr(0, sym.find('>')), "id");
        const auto path = sym.find("<path ");
        if (path == std::string::npos) continue;
        std::istringstream d(svg_detail::attribute(sym.substr(path), "d"));
        std::string token;
        bool any = false;
        Box b{0, 0, 0, 0};
        double x = 0;
        bool have_x = false;
        while (d >> token) {
            if (std::isalpha(static_cast<unsigned char>(token[0]))) continue;  // M, L, C, Q, Z
            const double v = std::strtod(token.c_str(), nullptr);
            if (!have_x) {
                x = v;
                have_x = true;
                continue;
            }
            have_x = false;
            if (!any) b = {x, v, x, v};
            b = {std::min(b.x0, x), std::min(b.y0, v), std::max(b.x1, x), std::max(b.y1, v)};
            any = true;
        }
        if (any) glyph_box[id] = b;
    }
    std::vector<TextBox> out;
    bool in_text = false;
    for (std::size_t pos = defs_end == std::string::npos ? 0 : defs_end; pos < svg.size();) {
        const auto lt = svg.find('<', pos);
        if (lt == std::string::npos) break;
        const auto gt = svg.find('>', lt);
        const std::string el = svg.substr(lt, gt - lt + 1);
        pos = gt + 1;
        if (el.rfind("<g", 0) == 0 && el.find(" id=") == std::string::npos &&
            el.find("clip-path") == std::string::npos) {
            in_text = true;
            out.push_back({});
        } else if (el.rfind("</g", 0) == 0) {
            in_text = false;
        } else if (in_text && el.rfind("<use", 0) == 0) {
            std::string href = svg_detail::attribute(el, "xlink:href");
            if (href.empty()) href = svg_detail::attribute(el, "href");
            if (href.size() < 2 || href[0] != '#') continue;
            const auto it = glyph_box.find(href.substr(1));
            if (it == glyph_box.end()) continue;
            const double x = std::strtod(svg_detail::attribute(el, "x").c_str(), nullptr);
            const double y = std::strtod(svg_detail::attribute(el, "y").c_str(), nullptr);
            const Box& g = it->second;
            TextBox& t = out.back();
            if (t.glyphs == 0) t = {x + g.x0, y + g.y0, x + g.x1, y + g.y1, 0};
            t = {std::min(t.x0, x + g.x0), std::min(t.y0, y + g.y0), std::max(t.x1, x + g.x1),
                 std::max(t.y1, y + g.y1), t.glyphs + 1};
        }
    }
    std::erase_if(out, [](const TextBox& t) { return t.glyphs == 0; });
    return out;
}

// Pairs of text boxes whose ink overlaps by more than `tol` pixels both ways.
inline std::vector<std::pair<TextBox, TextBox>> overlapping_text(const std::vector<TextBox>& boxes, double tol = 0.5) {
    std::vector<std::pair<TextBox, TextBox>> out;
    for (std::size_t i = 0; i < boxes.size(); ++i)
        for (std::size_t j = i + 1; j < boxes.size(); ++j) {
            const auto& a = boxes[i];
            const auto& b = boxes[j];
            const double w = std::min(a.x1, b.x1) - std::max(a.x0, b.x0);
            const double h = std::min(a.y1, b.y1) - std::max(a.y0, b.y0);
            if (w > tol && h > tol) out.emplace_back(a, b);
        }
    return out;
}

inline bool same_colour(const Colour& a, double r, double g, double b, double tol = 0.003) {
    return std::fabs(a.r - r) <= tol && std::fabs(a.g - g) <= tol && std::fabs(a.b - b) <= tol;
}

}  // namespace dtsim::render::testing
