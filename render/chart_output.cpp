#include "chart_output.hpp"

#include "cairo_util.hpp"
#include "dtsim/detail/output_file.hpp"
#include "dtsim/render.hpp"
#include "svg_ids.hpp"

#include <cairo-pdf.h>
#include <cairo-svg.h>
#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

namespace dtsim::render::detail {
namespace {

cairo_status_t append(void* closure, const unsigned char* data, unsigned int length) {
    static_cast<std::string*>(closure)->append(reinterpret_cast<const char*>(data), length);
    return CAIRO_STATUS_SUCCESS;
}

void render(cairo_surface_t* surface, const char* what, const std::function<void(cairo_t*)>& draw) {
    check(surface, what);
    {
        const Context cr(cairo_create(surface));
        draw(cr.get());
        check(cr.get(), what);
    }
    if (cairo_surface_get_type(surface) == CAIRO_SURFACE_TYPE_IMAGE)
        cairo_surface_flush(surface);
    else
        cairo_surface_finish(surface);
    check(surface, what);
}

}  // namespace

double tick_step(double max, int target) {
    const double raw = max / target;
    const double p = std::pow(10.0, std::floor(std::log10(raw)));
    for (double m : {1.0, 2.0, 5.0, 10.0})
        if (raw <= m * p) return m * p;
    return 10 * p;
}

void write_chart(const std::string& path, double width, double height, const char* what,
                 const std::function<void(cairo_t*)>& draw) {
    const Format format = format_from_path(path);
    width = std::ceil(width);
    height = std::ceil(height);
    std::string data;
    switch (format) {
        case Format::svg: {
            const Surface s(cairo_svg_surface_create_for_stream(append, &data, width, height));
            cairo_svg_surface_set_document_unit(s.get(), CAIRO_SVG_UNIT_PX);
            render(s.get(), what, draw);
            data = normalise_surface_ids(data);
            break;
        }
        case Format::pdf: {
            const Surface s(cairo_pdf_surface_create_for_stream(append, &data, width, height));
            render(s.get(), what, draw);
            break;
        }
        case Format::png: {
            const Surface s = png_surface(width, height, "write SVG or PDF, or chart fewer rows");
            render(s.get(), what, draw);
            if (cairo_surface_write_to_png_stream(s.get(), append, &data) != CAIRO_STATUS_SUCCESS)
                throw std::runtime_error(fmt::format("{}: writing PNG failed", path));
            break;
        }
    }
    dtsim::detail::write_output_file(path, data);
}

}  // namespace dtsim::render::detail
