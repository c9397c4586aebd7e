#include "cairo_util.hpp"

#include <fmt/format.h>

#include <stdexcept>
#include <utility>

namespace dtsim::render::detail {
namespace {

// DejaVu Sans is what fontconfig resolves "sans-serif" to on the machines we build on;
// naming it keeps the metrics stable.
constexpr const char* kFontFamily = "DejaVu Sans";

}  // namespace

Surface png_surface(double width, double height, const char* instead) {
    constexpr double kMaxSide = 32767;  // Cairo's image surfaces
    for (const auto& [side, size] : {std::pair{"wide", width}, std::pair{"tall", height}})
        if (!(size <= kMaxSide))
            throw std::invalid_argument(
                fmt::format("a PNG is at most {} pixels {} and this picture is {}: {}", kMaxSide, side, size, instead));
    return Surface(cairo_image_surface_create(CAIRO_FORMAT_RGB24, static_cast<int>(width), static_cast<int>(height)));
}

void check(cairo_surface_t* surface, const char* what) {
    if (const auto st = cairo_surface_status(surface); st != CAIRO_STATUS_SUCCESS)
        throw std::runtime_error(fmt::format("{}: cairo: {}", what, cairo_status_to_string(st)));
}

void check(cairo_t* cr, const char* what) {
    if (const auto st = cairo_status(cr); st != CAIRO_STATUS_SUCCESS)
        throw std::runtime_error(fmt::format("{}: cairo: {}", what, cairo_status_to_string(st)));
}

void select_font(cairo_t* cr, double size, Weight weight) {
    cairo_select_font_face(cr, kFontFamily, CAIRO_FONT_SLANT_NORMAL,
                           weight == Weight::bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, size);
}

double text_width(cairo_t* cr, const std::string& text, double size, Weight weight) {
    select_font(cr, size, weight);
    cairo_text_extents_t ext;
    cairo_text_extents(cr, text.c_str(), &ext);
    return ext.x_advance;
}

TextMeasure::TextMeasure()
    : surface_(cairo_image_surface_create(CAIRO_FORMAT_A8, 1, 1)), cr_(cairo_create(surface_.get())) {
    check(cr_.get(), "measuring text");
}

double TextMeasure::width(const std::string& text, double size, Weight weight) const {
    return text_width(cr_.get(), text, size, weight);
}

}  // namespace dtsim::render::detail
