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
#include <memory>
#include <ostream>
#include <stdexcept>
#include <vector>

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
            const detail::Surface surface =
                detail::png_surface(layout.width, layout.height, "write SVG or PDF, or select fewer ranks");
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

namespace {

void write_laid_out_file(const Trace& trace, const detail::Layout& layout, const std::string& path, Format format) {
    dtsim::detail::write_output_file(path, [&](std::ostream& out) {
        try {
            write_laid_out(trace, layout, out, format);
        } catch (const std::runtime_error& e) {
            throw std::runtime_error(fmt::format("{}: {}", path, e.what()));
        }
    });
}

}  // namespace

void write_image(const Trace& trace, const std::string& path, const Options& options) {
    const Format format = format_from_path(path);  // a bad extension is named before any work
    write_laid_out_file(trace, detail::make_layout(trace, options), path, format);
}

struct OverviewFeed::Impl {
    const Trace& thinned;
    detail::Layout layout;
    std::vector<std::shared_ptr<detail::FedColumns>> columns;  // by row, shared with layout.rows
    std::vector<std::ptrdiff_t> row_of;                         // by rank index: its row, or -1
    std::size_t fed = 0;
    bool ok = true;

    void reset() {
        for (auto& c : columns) {
            *c = detail::FedColumns(layout.columns());
            c->peak_end = thinned.summary.max_memory_time;
        }
        fed = 0;
        ok = true;
    }
};

OverviewFeed::OverviewFeed(const Trace& thinned, const Options& options)
    : impl_(new Impl{thinned, detail::make_layout(thinned, options), {}, {}}) {
    Impl& m = *impl_;
    m.row_of.assign(thinned.ranks.size(), -1);
    if (!m.layout.overview) return;
    for (std::size_t k = 0; k < m.layout.rows.size(); ++k) {
        auto c = std::make_shared<detail::FedColumns>(m.layout.columns());
        m.layout.rows[k].fed = c;
        m.columns.push_back(std::move(c));
        for (auto i : m.layout.rows[k].members) m.row_of[i] = static_cast<std::ptrdiff_t>(k);
    }
    m.reset();
}

OverviewFeed::~OverviewFeed() = default;

void OverviewFeed::operator()(const Trace& so_far, RankTrace& rank) {
    Impl& m = *impl_;
    const std::size_t index = so_far.ranks.empty() ? 0 : so_far.ranks.size() - 1;
    if (index == 0) m.reset();  // a reader that starts again reads every rank again
    // (The readers number the ranks 0, 1, ... in order: the index is the rank.)
    if (index >= m.thinned.ranks.size() ||
        !std::all_of(rank.events.begin(), rank.events.end(), [](const Event& e) { return detail::drawable(e); }))
        m.ok = false;  // not the trace of the first read
    if (const auto k = m.layout.overview && m.ok ? m.row_of[index] : -1; k >= 0) {
        detail::tally_rank(m.layout, m.layout.rows[static_cast<std::size_t>(k)], m.thinned.summary, rank,
                           *m.columns[static_cast<std::size_t>(k)]);
    }
    std::vector<Event>().swap(rank.events);  // (assigning {} would keep the capacity)
    std::vector<double>().swap(rank.memory_by_kind);
    ++m.fed;
}

bool OverviewFeed::overview() const { return impl_->layout.overview; }

bool OverviewFeed::complete() const {
    return impl_->layout.overview && impl_->ok && impl_->fed == impl_->thinned.ranks.size();
}

void OverviewFeed::write_image(const std::string& path) const {
    const Format format = format_from_path(path);
    write_laid_out_file(impl_->thinned, impl_->layout, path, format);
}

}  // namespace dtsim::render
