#include "dtsim/render.hpp"

#include "cairo_util.hpp"
#include "layout.hpp"
#include "svg_ids.hpp"
#include "timeline.hpp"

#include "dtsim/detail/output_file.hpp"

#include <cairo-pdf.h>
#include <cairo-svg.h>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <ostream>
#include <stdexcept>

namespace dtsim::render {
namespace {

cairo_status_t append_to_string(void* closure, const unsigned char* data, unsigned int length) {
    static_cast<std::string*>(closure)->append(reinterpret_cast<const char*>(data), length);
    return CAIRO_STATUS_SUCCESS;
}

cairo_status_t write_to_ostream(void* closure, const unsigned char* data, unsigned int length) {
    auto& out = *static_cast<std::ostream*>(closure);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(length));
    return out ? CAIRO_STATUS_SUCCESS : CAIRO_STATUS_WRITE_ERROR;
}

// Draws, then finishes a vector surface (which writes it out) or flushes an image one.
void draw_and_finish(cairo_surface_t* surface, const Trace& trace, const detail::Layout& layout,
                     const char* what) {
    detail::check(surface, what);
    {
        const detail::Context cr(cairo_create(surface));
        detail::draw_timeline(cr.get(), trace, layout);
    }
    if (cairo_surface_get_type(surface) == CAIRO_SURFACE_TYPE_IMAGE)
        cairo_surface_flush(surface);
    else
        cairo_surface_finish(surface);
    detail::check(surface, what);
}

void write_laid_out(const Trace& trace, const detail::Layout& layout, std::ostream& out, Format format) {
    const double w = layout.width, h = layout.height;
    switch (format) {
        case Format::svg: {
            std::string svg;
            const detail::Surface surface(cairo_svg_surface_create_for_stream(append_to_string, &svg, w, h));
            cairo_svg_surface_set_document_unit(surface.get(), CAIRO_SVG_UNIT_PX);
            draw_and_finish(surface.get(), trace, layout, "writing SVG");
            const std::string normalised = detail::normalise_surface_ids(svg);
            out.write(normalised.data(), static_cast<std::streamsize>(normalised.size()));
            break;
        }
        case Format::pdf: {
            const detail::Surface surface(cairo_pdf_surface_create_for_stream(write_to_ostream, &out, w, h));
            draw_and_finish(surface.get(), trace, layout, "writing PDF");
            break;
        }
        case Format::png: {
            const detail::Surface surface(
                cairo_image_surface_create(CAIRO_FORMAT_RGB24, layout.width, layout.height));
            draw_and_finish(surface.get(), trace, layout, "writing PNG");
            if (const auto st = cairo_surface_write_to_png_stream(surface.get(), write_to_ostream, &out);
                st != CAIRO_STATUS_SUCCESS)
                throw std::runtime_error(fmt::format("writing PNG: cairo: {}", cairo_status_to_string(st)));
            break;
        }
    }
    if (!out) throw std::runtime_error("writing the image: the output stream failed");
}

}  // namespace

Format format_from_path(const std::string& path) {
    const auto dot = path.rfind('.');
    const auto slash = path.find_last_of("/\\");
    std::string ext;
    if (dot != std::string::npos && (slash == std::string::npos || dot > slash)) ext = path.substr(dot + 1);
    std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char ch) { return std::tolower(ch); });
    if (ext == "svg") return Format::svg;
    if (ext == "png") return Format::png;
    if (ext == "pdf") return Format::pdf;
    throw std::invalid_argument(fmt::format(
        "cannot tell the image format of \"{}\": expected a file name ending in .svg, .png or .pdf", path));
}

void write_image(const Trace& trace, std::ostream& out, Format format, const Options& options) {
    write_laid_out(trace, detail::make_layout(trace, options), out, format);
}

void write_image(const Trace& trace, const std::string& path, const Options& options) {
    const Format format = format_from_path(path);
    const detail::Layout layout = detail::make_layout(trace, options);
    dtsim::detail::write_output_file(path, [&](std::ostream& out) {
        try {
            write_laid_out(trace, layout, out, format);
        } catch (const std::runtime_error& e) {
            throw std::runtime_error(fmt::format("{}: {}", path, e.what()));
        }
    });
}

}  // namespace dtsim::render
