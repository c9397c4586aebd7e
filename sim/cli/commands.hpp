// The subcommands of the `dtsim` command line. Each registers itself on the app;
// its callback throws UsageError for bad arguments (exit 2) and any other
// exception for a failed run (exit 1).
#pragma once

#include <CLI/CLI.hpp>

#include <stdexcept>

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

void register_puzzle_commands(CLI::App& app);  // `puzzle`, `puzzles`
void register_bench_command(CLI::App& app);    // `bench`
void register_render_command(CLI::App& app);   // `render`
void register_schedule_command(CLI::App& app); // `schedule` (pipeline schedules as data)
void register_run_commands(CLI::App& app);     // `run`, `compare` (the hardware world)
void register_calibrate_commands(CLI::App& app); // `calibrate`, `validate` (ground truth)
void register_failures_command(CLI::App& app); // `failures` (faults and checkpoints, hardware world)

}  // namespace dtsim::cli
