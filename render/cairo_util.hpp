// Owning handles for Cairo objects, the one font of the picture, and text
// measurement. Private to render/.
#pragma once

#include <cairo.h>

#include <memory>
#include <string>

namespace dtsim::render::detail {

struct SurfaceDeleter {
    void operator()(cairo_surface_t* s) const { cairo_surface_destroy(s); }
};
struct ContextDeleter {
    void operator()(cairo_t* cr) const { cairo_destroy(cr); }
};
using Surface = std::unique_ptr<cairo_surface_t, SurfaceDeleter>;
using Context = std::unique_ptr<cairo_t, ContextDeleter>;

// A PNG's surface (RGB24, Cairo's image surface), `width` x `height` pixels. Throws
// std::invalid_argument where a side passes the 32767 pixels Cairo allows, saying which and how
// far, then `instead` (what to do instead: "write SVG or PDF, or ..."), before anything is drawn.
Surface png_surface(double width, double height, const char* instead);

// Throws std::runtime_error naming `what` when the surface or context is in error.
void check(cairo_surface_t* surface, const char* what);
void check(cairo_t* cr, const char* what);

enum class Weight { normal, bold };

void select_font(cairo_t* cr, double size, Weight weight = Weight::normal);

// Horizontal advance of `text` in the picture's font.
double text_width(cairo_t* cr, const std::string& text, double size, Weight weight = Weight::normal);

// A scratch context for measuring text before anything is drawn.
class TextMeasure {
public:
    TextMeasure();
    [[nodiscard]] double width(const std::string& text, double size, Weight weight = Weight::normal) const;

private:
    Surface surface_;
    Context cr_;
};

}  // namespace dtsim::render::detail
