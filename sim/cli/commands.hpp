// The subcommands of the `dtsim` command line. Each registers itself on the app;
// its callback throws UsageError for bad arguments (exit 2) and any other
// exception for a failed run (exit 1).
#pragma once

#include "../json/range.hpp"
#include "dtsim/render.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace dtsim::hw::calib {
struct Evidence;
}

namespace dtsim::cli {

class UsageError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// Exit status of the command that ran (set by callbacks that report a verdict).
inline int& exit_status() {
    static int status = 0;
    return status;
}

// Validate-only mode (the CLI fuzz target's, tests/fuzz/fuzz_cli.cpp): each command checks its
// arguments as it always does, then returns before it reads a file, runs or writes anything.
inline bool& validate_only() {
    static bool on = false;
    return on;
}

// A value as a message quotes it: at most 64 bytes of it.
inline std::string shown(const std::string& s) {
    return s.size() <= 64 ? s : fmt::format("{}... ({} bytes)", s.substr(0, 64), s.size());
}

// An integer option's transform: a whole number in decimal (CLI11 alone reads "010" as octal 8 and
// "0x10" as 16) within [lo, hi]; a value that is not one is named as such ("'x' is not a whole
// number", where CLI::Range would say "not in range"). The value is rewritten in plain decimal.
inline CLI::Validator whole_number(long long lo, long long hi) {
    const std::string expected = hi == std::numeric_limits<int>::max() || hi == std::numeric_limits<long long>::max()
                                     ? fmt::format("at least {}", lo)
                                     : fmt::format("{} to {}", lo, hi);
    return {[lo, hi, expected](std::string& s) -> std::string {
                const char* b = s.data() + (s.starts_with('+') ? 1 : 0);
                const char* e = s.data() + s.size();
                long long v = 0;
                const auto [end, ec] = std::from_chars(b, e, v);
                if (b == e || end != e || (ec != std::errc() && ec != std::errc::result_out_of_range))
                    return fmt::format("'{}' is not a whole number (expected {})", shown(s), expected);
                if (ec == std::errc::result_out_of_range || v < lo || v > hi)
                    return fmt::format("{} is out of range (expected {})", shown(s), expected);
                s = std::to_string(v);
                return {};
            },
            hi == std::numeric_limits<int>::max() || hi == std::numeric_limits<long long>::max()
                ? fmt::format("INT >= {}", lo)
                : fmt::format("INT in [{} - {}]", lo, hi)};
}

// Every real-valued option of every command is checked here: a number in decimal (strtod alone
// also reads "0x5", "inf" and "nan") within the option's physical range (json/range.hpp, the
// check of the real numbers of configs too), named as such when it is not one:
// "--min-bytes: 'nan' is not a number (expected a size in [0, 1e18] bytes)". `expected` is
// what the message says was expected.
inline CLI::Validator real_in(const Range& range, const std::string& expected) {
    return {[range, expected](std::string& s) -> std::string {
                char* end = nullptr;
                errno = 0;
                const bool decimal = !s.empty() && s.find_first_not_of("0123456789.eE+-") == std::string::npos;
                const double v = decimal ? std::strtod(s.c_str(), &end) : 0;
                if (!decimal || end != s.c_str() + s.size() || v != v)
                    return fmt::format("'{}' is not a number (expected {})", shown(s), expected);
                if (errno == ERANGE || !range.contains(v))
                    return fmt::format("{} is out of range (expected {})", shown(s), expected);
                return {};
            },
            fmt::format("FLOAT in {}", range.interval())};
}

// A quantity: "(expected a size in [0, 1e18] bytes)".
inline CLI::Validator number_in(const Range& range) { return real_in(range, range.describe()); }

// A plain number in [lo, hi]: "(expected 0 to 1000)".
inline CLI::Validator number_in(double lo, double hi) {
    return real_in(Range{"a number", "", lo, hi}, fmt::format("{} to {}", Range::bound(lo), Range::bound(hi)));
}

// Where a file is to be written: not an empty name, and in a folder that exists (checked before a
// run, which would otherwise fail only when it writes).
inline std::string unwritable(const std::string& path) {
    if (path.empty()) return "an empty file name (expected a path)";
    const std::filesystem::path folder = std::filesystem::path(path).parent_path();
    std::error_code ec;
    if (!folder.empty() && !std::filesystem::is_directory(folder, ec))
        return fmt::format("\"{}\": there is no folder \"{}\"", path, folder.string());
    return "";
}

// An output file option's check: see unwritable().
inline CLI::Validator output_file() {
    return {[](std::string& s) { return unwritable(s); }, ""};
}

// An image option's check: a path ending in the option's format, e.g. --svg x.svg (writing a PNG
// for --svg x.png would surprise), or in any of .svg, .png and .pdf where the option takes them all.
inline CLI::Validator image_file(std::optional<render::Format> format = std::nullopt) {
    return {[format](std::string& s) -> std::string {
                if (std::string bad = unwritable(s); !bad.empty()) return bad;
                try {
                    const render::Format f = render::format_from_path(s);
                    if (format && f != *format) {
                        const char* ext = *format == render::Format::svg ? "svg" : *format == render::Format::png ? "png" : "pdf";
                        return fmt::format("\"{}\" does not end in .{}", s, ext);
                    }
                } catch (const std::invalid_argument& e) {
                    return e.what();
                }
                return "";
            },
            ""};
}

// A rank selection for pictures (--show-ranks) against the run's ranks and their grid, before the run.
inline void check_rank_selection(const std::string& spec, int nranks, const render::RankGrid& grid = {}) {
    if (spec.empty()) return;
    try {
        (void)render::parse_rank_selection(spec, grid, nranks);
    } catch (const std::invalid_argument& e) {
        throw UsageError(fmt::format("--show-ranks: {}", e.what()));
    }
}

// A figure for people: whole numbers as they are, others with the fewest significant digits that
// keep the value to 1e-9 (the tolerance traces are compared to), to a millionth of it where it is
// smaller than 1e-3, and to a few units in its last place where it is large: 19.900000000000006 ->
// 19.9, 1999999.5 stays itself (where 6 significant digits would print 2e+06), 17283942.799999993
// -> 17283942.8, 1.2345e-07 stays itself.
inline std::string short_number(double v) {
    if (std::isfinite(v) && v == std::floor(v) && std::abs(v) < 1e15)
        return fmt::format("{}", static_cast<long long>(v));
    if (!std::isfinite(v) || std::abs(v) >= 1e15) return fmt::format("{}", v);  // the shortest exact form
    const double tolerance = std::max(std::min(1e-9, std::abs(v) * 1e-6), std::abs(v) * 1e-14);
    for (int digits = 1; digits < 17; ++digits) {
        std::string s = fmt::format("{:.{}g}", v, digits);
        if (std::abs(std::strtod(s.c_str(), nullptr) - v) <= tolerance) return s;
    }
    return fmt::format("{}", v);
}

// The files every command that has a trace writes from it, under the same names everywhere
// (puzzle, schedule, run, failures, render): --trace, --svg, --png, --pdf (each image option
// takes its own extension), --chrome-trace, and --show-ranks for the pictures.
struct TraceOutputs {
    std::string trace, svg, png, pdf, chrome;
    render::Options picture;  // picture.ranks is --show-ranks

    // The options above, each checked as it is parsed (render reads a trace: no --trace).
    void add_options(CLI::App* cmd, bool with_trace = true);
    // render's: --width, --title, --max-rows (--view is in add_options).
    void add_picture_options(CLI::App* cmd);
    [[nodiscard]] bool any() const;       // something to write: the run keeps its events
    [[nodiscard]] bool pictures() const;  // --svg, --png or --pdf
    // --show-ranks goes with a picture and names ranks of the run (by id, or by coordinates of
    // `grid` where it is known): a UsageError otherwise.
    void check_ranks(int nranks, const render::RankGrid& grid = {}) const;
    void write(const Trace& t) const;
    // After a failed run: writes what it did up to the failure and says so (or why it could not)
    // in an indented line on `to`; the run's own error follows.
    void write_partial(const Trace& t, std::FILE* to = stdout) const;
};

// A chart's files (compare): --svg, --png, --pdf, each with its own extension.
struct ChartOutputs {
    std::string svg, png, pdf;
    void add_options(CLI::App* cmd, const std::string& what);
    [[nodiscard]] std::vector<std::string> paths() const;
};

// "basic, grad_accum, ...": the puzzles' names, for messages.
std::string puzzle_names();

// The folder of the data dtsim ships (configs/, calibration/data/): see data_dir.cpp. Not found:
// an error, or "" where not `required`.
std::string data_dir(bool required = true);

// The words for the published runs most like a layout (evidence.cpp): an error of dtsim's
// throughput as "3.5 % fast" or "2.0 % slow"; what the runs share with the layout ("H100, ...;
// not matched: ..."); and their data sets with their counts ("set (8), other (3)").
std::string fast_or_slow(double error);
std::string evidence_traits(const hw::calib::Evidence& e);
std::string evidence_sources(const hw::calib::Evidence& e);

// The dtsim command line: the app with every command registered (app.cpp).
std::unique_ptr<CLI::App> build_app();
// Parses the arguments and runs the command: prints what is wrong and returns the exit status
// (docs/command-line.md), as main() does.
int run_command_line(int argc, const char* const* argv);

void register_puzzle_commands(CLI::App& app);  // `puzzle`, `puzzles`
void register_render_command(CLI::App& app);   // `render`
void register_schedule_command(CLI::App& app); // `schedule` (pipeline schedules as data)
void register_run_commands(CLI::App& app);     // `run`, `compare` (the hardware world)
void register_calibrate_commands(CLI::App& app); // `calibrate`, `validate` (ground truth)
void register_failures_command(CLI::App& app); // `failures` (faults and checkpoints, hardware world)
void register_plan_command(CLI::App& app);     // `plan` (the fastest layout that fits)

}  // namespace dtsim::cli
