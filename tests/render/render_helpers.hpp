// Helpers the renderer's tests share: a trace drawn as SVG text, a tolerance, a file read
// whole, and the filled rectangles of one colour inside a lane. One definition each, so the
// tests also build as one unit (the sanitizer build's unity build).
#pragma once

#include "dtsim/render.hpp"
#include "layout.hpp"
#include "svg_reader.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

namespace dtsim::render::testing {

inline std::string render_svg(const Trace& t, const Options& o = {}) {
    std::ostringstream out;
    write_image(t, out, Format::svg, o);
    return out.str();
}

inline bool near(double a, double b, double tol = 0.01) { return std::fabs(a - b) <= tol; }

inline std::string read_file(const std::filesystem::path& p) {
    std::ifstream f(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// Filled rectangles of one colour inside a lane.
inline std::vector<SvgPath> rects_of(const std::vector<SvgPath>& paths, const detail::Lane& lane, detail::Rgba c) {
    std::vector<SvgPath> out;
    for (const auto& p : paths)
        if (p.filled && p.is_rect && same_colour(p.fill, c.r, c.g, c.b) && p.y0 >= lane.y - 0.01 &&
            p.y1 <= lane.bottom() + 0.01)
            out.push_back(p);
    return out;
}

}  // namespace dtsim::render::testing
