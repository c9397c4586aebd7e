// The three output formats, picking them by extension, and the errors.
#include "dtsim/render.hpp"
#include "render_helpers.hpp"
#include "sample_traces.hpp"

#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>

namespace dtsim::render {
namespace {

using testing::read_file;

Options with_ranks(std::string ranks) {
    Options o;
    o.ranks = std::move(ranks);
    return o;
}

Options with_width(int width) {
    Options o;
    o.width = width;
    return o;
}

std::filesystem::path scratch_dir() {
    auto dir = std::filesystem::temp_directory_path() / "dtsim-render-tests";
    std::filesystem::create_directories(dir);
    return dir;
}

}  // namespace

TEST_CASE("the image format comes from the extension, in any case") {
    CHECK(format_from_path("out.svg") == Format::svg);
    CHECK(format_from_path("dir.v2/OUT.PNG") == Format::png);
    CHECK(format_from_path("a.b.Pdf") == Format::pdf);
    CHECK_THROWS_WITH_AS(
        format_from_path("out.jpg"),
        "cannot tell the image format of \"out.jpg\": expected a file name ending in .svg, .png or .pdf",
        std::invalid_argument);
    CHECK_THROWS_AS(format_from_path("svg"), std::invalid_argument);
    CHECK_THROWS_AS(format_from_path("dir.svg/out"), std::invalid_argument);
}

TEST_CASE("write_image writes SVG, PNG and PDF files with the right magic bytes") {
    const Trace t = testing::ddp_trace();
    const auto dir = scratch_dir();
    for (const auto& file :
         {std::pair{"ddp.svg", std::string("<?xml")}, std::pair{"ddp.png", std::string("\x89PNG\r\n\x1a\n")},
          std::pair{"ddp.pdf", std::string("%PDF-")}}) {
        const char* name = file.first;
        const std::string& magic = file.second;
        CAPTURE(name);
        const auto path = dir / name;
        std::filesystem::remove(path);
        write_image(t, path.string());
        const std::string bytes = read_file(path);
        CHECK(bytes.size() > 1000);
        CHECK(bytes.compare(0, magic.size(), magic) == 0);
    }
    CHECK(read_file(dir / "ddp.svg").find("<svg") != std::string::npos);
}

TEST_CASE("PNG output is byte-identical across renders") {
    const Trace t = testing::hardware_trace();
    std::ostringstream a, b;
    write_image(t, a, Format::png);
    write_image(t, b, Format::png);
    CHECK(a.str() == b.str());
}

TEST_CASE("the width option sets the picture width") {
    const Trace t = testing::ddp_trace();
    std::ostringstream out;
    write_image(t, out, Format::svg, with_width(900));
    CHECK(out.str().find("width=\"900px\"") != std::string::npos);
}

TEST_CASE("bad options and unwritable paths are reported, and no file is left for bad options") {
    const Trace t = testing::ddp_trace();
    const auto path = scratch_dir() / "bad-options.png";
    std::filesystem::remove(path);
    CHECK_THROWS_WITH_AS(write_image(t, path.string(), with_ranks("4")),
                         doctest::Contains("valid ranks are 0-3"), std::invalid_argument);
    CHECK(!std::filesystem::exists(path));
    CHECK_THROWS_WITH_AS(write_image(t, path.string(), with_width(50)),
                         doctest::Contains("image width 50 is out of range"), std::invalid_argument);
    Trace wide;  // a long rank label and a long memory label leave no room for the plot at 330 px
    wide.ranks.resize(1);
    wide.ranks[0].rank = 1999999999;
    wide.ranks[0].events = {testing::make_event(ops::forward, 0, 0, 1, 123456789012345.0)};
    summarize(wide);
    CHECK_THROWS_WITH_AS(write_image(wide, path.string(), with_width(330)),
                         doctest::Contains("too small for this trace: at least"), std::invalid_argument);
    CHECK_NOTHROW(write_image(wide, path.string(), with_width(600)));
    Options no_rows;
    no_rows.max_rows = 0;
    CHECK_THROWS_WITH_AS(write_image(t, path.string(), no_rows), doctest::Contains("max_rows 0"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(write_image(t, "/nonexistent-dir/x.svg"),
                         "/nonexistent-dir/x.svg: cannot open for writing: No such file or directory",
                         std::runtime_error);
}

TEST_CASE("an empty trace still renders a picture") {
    Trace t;
    std::ostringstream out;
    write_image(t, out, Format::svg);
    CHECK(out.str().find("<svg") != std::string::npos);
    Trace idle;
    idle.ranks.resize(2);
    idle.ranks[1].rank = 1;
    std::ostringstream png;
    write_image(idle, png, Format::png);
    CHECK(png.str().size() > 100);
}

}  // namespace dtsim::render
