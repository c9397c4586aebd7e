// `dtsim schedule`: generate, read, write and run pipeline schedules
// (sim/cli/cmd_schedule.cpp). Declared here so that the command line can
// register it; the same declaration may live in sim/cli/commands.hpp.
#pragma once

#include <CLI/CLI.hpp>

namespace dtsim::cli {

void register_schedule_command(CLI::App& app);  // `schedule`

}  // namespace dtsim::cli
