// The subcommands of the `dtsim` command line. Each registers itself on the app;
// its callback throws UsageError for bad arguments (exit 2) and any other
// exception for a failed run (exit 1).
#pragma once

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cerrno>
#include <charconv>
#include <limits>
#include <cstdlib>
#include <stdexcept>
#include <string>

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
                    return fmt::format("'{}' is not a whole number (expected {})", s, expected);
                if (ec == std::errc::result_out_of_range || v < lo || v > hi)
                    return fmt::format("{} is out of range (expected {})", s, expected);
                s = std::to_string(v);
                return {};
            },
            hi == std::numeric_limits<int>::max() || hi == std::numeric_limits<long long>::max()
                ? fmt::format("INT >= {}", lo)
                : fmt::format("INT in [{} - {}]", lo, hi)};
}

// A real-valued option's check: a number within [lo, hi], named as such when it is not one.
inline CLI::Validator number_in(double lo, double hi) {
    return {[lo, hi](std::string& s) -> std::string {
                char* end = nullptr;
                errno = 0;
                const double v = s.empty() ? 0 : std::strtod(s.c_str(), &end);
                if (s.empty() || end != s.c_str() + s.size() || v != v)
                    return fmt::format("'{}' is not a number (expected {:g} to {:g})", s, lo, hi);
                if (errno == ERANGE || v < lo || v > hi) return fmt::format("{} is out of range (expected {:g} to {:g})", s, lo, hi);
                return {};
            },
            fmt::format("FLOAT in [{:g} - {:g}]", lo, hi)};
}

// "basic, grad_accum, ...": the puzzles' names, for messages.
std::string puzzle_names();

void register_puzzle_commands(CLI::App& app);  // `puzzle`, `puzzles`
void register_bench_command(CLI::App& app);    // `bench`
void register_render_command(CLI::App& app);   // `render`
void register_schedule_command(CLI::App& app); // `schedule` (pipeline schedules as data)
void register_run_commands(CLI::App& app);     // `run`, `compare` (the hardware world)
void register_calibrate_commands(CLI::App& app); // `calibrate`, `validate` (ground truth)
void register_failures_command(CLI::App& app); // `failures` (faults and checkpoints, hardware world)

}  // namespace dtsim::cli
