// Output files and interrupted runs (docs/command-line.md, "Interrupted runs and output files"):
// a file under its final name is complete or absent, never half-written; nothing is left under a
// temporary name; an interrupt request stops the engine, the readers and the writers with
// Interrupted, which the error handling of runs lets through.
#include "dtsim/detail/output_file.hpp"
#include "dtsim/interrupt.hpp"
#include "dtsim/puzzle.hpp"
#include "dtsim/puzzle/registry.hpp"
#include "dtsim/render.hpp"
#include "dtsim/trace_io.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace dtsim {
namespace {

namespace fs = std::filesystem;

// A fresh folder of its own for each test case.
struct Folder {
    fs::path path;
    explicit Folder(const std::string& name)
        : path(fs::temp_directory_path() / fmt::format("dtsim-output-files-{}-{}", name, ::getpid())) {
        fs::remove_all(path);
        fs::create_directories(path);
    }
    ~Folder() { fs::remove_all(path); }
    [[nodiscard]] std::string file(const std::string& name) const { return (path / name).string(); }
    // The names in the folder, sorted.
    [[nodiscard]] std::vector<std::string> names() const {
        std::vector<std::string> out;
        for (const auto& e : fs::directory_iterator(path)) out.push_back(e.path().filename().string());
        std::sort(out.begin(), out.end());
        return out;
    }
};

std::string content(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::ostringstream s;
    s << f.rdbuf();
    return s.str();
}

void put(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// Clears a request when a test case ends, however it ends.
struct ClearInterrupt {
    ClearInterrupt() { clear_interrupt(); }
    ~ClearInterrupt() { clear_interrupt(); }
};

TEST_CASE("an output file appears under its name complete, and nothing else is left in its folder") {
    const Folder dir("complete");
    const std::string path = dir.file("out.txt");
    detail::write_output_file(path, [](std::ostream& out) {
        for (int i = 0; i < 100000; ++i) out << i << '\n';
    });
    CHECK(dir.names() == std::vector<std::string>{"out.txt"});
    CHECK(content(path).size() == 588890);
    // Replaced whole, keeping the file's permissions.
    REQUIRE(::chmod(path.c_str(), 0640) == 0);
    detail::write_output_file(path, std::string_view("new\n"));
    CHECK(content(path) == "new\n");
    struct stat st {};
    REQUIRE(::stat(path.c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0640);
    CHECK(dir.names() == std::vector<std::string>{"out.txt"});
}

TEST_CASE("a writer that fails midway leaves no file under the final name and no temporary file") {
    const Folder dir("midway");
    const std::string path = dir.file("trace.json");
    auto fail_midway = [](std::ostream& out) {
        out << std::string(1 << 20, 'x');  // 1 MiB out, through the buffer to the file
        throw std::runtime_error("the writer failed");
    };
    CHECK_THROWS_WITH_AS(detail::write_output_file(path, fail_midway), "the writer failed", std::runtime_error);
    CHECK(dir.names().empty());
    // A file that was there stays as it was.
    put(path, "old\n");
    CHECK_THROWS_WITH_AS(detail::write_output_file(path, fail_midway), "the writer failed", std::runtime_error);
    CHECK(dir.names() == std::vector<std::string>{"trace.json"});
    CHECK(content(path) == "old\n");
}

TEST_CASE("an interrupt while a file is written removes it and throws Interrupted") {
    const ClearInterrupt clear;
    const Folder dir("interrupted");
    const std::string path = dir.file("t.json");
    put(path, "old\n");
    bool went_on = false;
    try {
        detail::write_output_file(path, [&](std::ostream& out) {
            out << std::string(1 << 20, 'x');
            request_interrupt(15);
            out << std::string(1 << 20, 'y');  // the stream fails: nothing more goes out
            went_on = true;
        });
        FAIL("no Interrupted");
    } catch (const Interrupted& e) {
        CHECK(e.signal() == 15);
    }
    CHECK(went_on);
    CHECK(dir.names() == std::vector<std::string>{"t.json"});
    CHECK(content(path) == "old\n");
}

TEST_CASE("the writers of traces, pictures and Chrome traces leave nothing behind when interrupted") {
    const ClearInterrupt clear;
    const Folder dir("writers");
    const puzzle::PuzzleInfo& p = *puzzle::find_puzzle("ddp");
    const Trace t = puzzle::run_strategy(p.strategy, 16, 64, 64, puzzle::puzzle_costs(), {}).trace;
    request_interrupt(2);
    CHECK_THROWS_AS(write_trace_file(t, dir.file("t.json")), Interrupted);
    CHECK_THROWS_AS(render::write_chrome_trace_file(t, dir.file("c.json")), Interrupted);
    for (const char* name : {"t.svg", "t.png", "t.pdf"}) CHECK_THROWS_AS(render::write_image(t, dir.file(name)), Interrupted);
    CHECK(dir.names().empty());
    clear_interrupt();
    write_trace_file(t, dir.file("t.json"));
    CHECK(dir.names() == std::vector<std::string>{"t.json"});
}

TEST_CASE("a device is written in place, and its write errors are reported with the reason") {
    CHECK_NOTHROW(detail::write_output_file("/dev/null", std::string_view("nothing\n")));
    CHECK(!fs::exists("/dev/.null.tmp." + std::to_string(::getpid())));
    if (fs::exists("/dev/full"))
        CHECK_THROWS_WITH_AS(detail::write_output_file("/dev/full", std::string_view("x\n")),
                             "/dev/full: write failed: No space left on device", std::runtime_error);
}

TEST_CASE("an output file that cannot be opened says why, naming it") {
    const Folder dir("unopenable");
    CHECK_THROWS_WITH_AS(detail::write_output_file(dir.path.string(), std::string_view("x")),
                         (dir.path.string() + ": cannot open for writing: Is a directory").c_str(), std::runtime_error);
    CHECK_THROWS_WITH_AS(detail::write_output_file(dir.file("no/such/folder.json"), std::string_view("x")),
                         (dir.file("no/such/folder.json") + ": cannot open for writing: No such file or directory").c_str(),
                         std::runtime_error);
    const std::string long_name = dir.file(std::string(256, 'a'));
    CHECK_THROWS_WITH_AS(detail::write_output_file(long_name, std::string_view("x")),
                         (long_name + ": cannot open for writing: File name too long").c_str(), std::runtime_error);
    // The longest name a folder takes is written (under a shortened temporary name).
    const std::string longest = dir.file(std::string(255, 'b'));
    CHECK_NOTHROW(detail::write_output_file(longest, std::string_view("x")));
    CHECK(content(longest) == "x");
    CHECK(dir.names().size() == 1);
}

// The engine: an interrupt request ends Simulation::run with Interrupted (not a ScheduleError for a
// rank), within a few thousand resumed ranks, and the simulation is torn down as after an error.
TEST_CASE("an interrupt request stops a run with Interrupted, and the run's error handling lets it through") {
    const ClearInterrupt clear;
    SUBCASE("the engine") {
        Simulation sim(64);
        long rounds = 0;
        CHECK_THROWS_AS(sim.run([&](Gpu& gpu) -> Task<> {
            for (int i = 0; i < 100000; ++i) {
                if (gpu.rank() == 0 && ++rounds == 100) request_interrupt(2);
                co_await sim.world().arrive(gpu, ops::allreduce, 0, i, [](int&, int, int) {});
            }
        }),
                        Interrupted);
        CHECK(rounds < 1000);  // 64 ranks a round: stopped within a few thousand resumed ranks
    }
    SUBCASE("a puzzle run") {
        const puzzle::PuzzleInfo& p = *puzzle::find_puzzle("fsdp");
        request_interrupt(15);
        try {
            (void)puzzle::run_strategy(p.strategy, 64, 64, 64, puzzle::puzzle_costs(), {});
            FAIL("no Interrupted");
        } catch (const Interrupted& e) {
            CHECK(e.signal() == 15);
        }
    }
    SUBCASE("reading a trace") {
        std::ostringstream out;
        const puzzle::PuzzleInfo& p = *puzzle::find_puzzle("ddp");
        write_trace_json(puzzle::run_strategy(p.strategy, 16, 64, 64, puzzle::puzzle_costs(), {}).trace, out);
        std::istringstream in(out.str());
        request_interrupt(2);
        CHECK_THROWS_AS((void)read_trace_json(in, "t.json"), Interrupted);
    }
}

}  // namespace
}  // namespace dtsim
