// dtsim: simulate distributed training schedules.
#include "commands.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <exception>

int main(int argc, char** argv) {
    CLI::App app{"dtsim: a discrete-event simulator of distributed training schedules", "dtsim"};
    app.require_subcommand(1);
    app.set_help_all_flag("--help-all", "Print help for every command");
    dtsim::cli::register_puzzle_commands(app);
    dtsim::cli::register_bench_command(app);
    dtsim::cli::register_render_command(app);
    dtsim::cli::register_schedule_command(app);
#ifdef DTSIM_WITH_HW
    dtsim::cli::register_run_commands(app);
    dtsim::cli::register_calibrate_commands(app);
    dtsim::cli::register_failures_command(app);
#endif
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        fmt::print(stderr, "dtsim: error: {}\nRun with --help for usage.\n", e.what());
        return 2;
    } catch (const dtsim::cli::UsageError& e) {
        fmt::print(stderr, "dtsim: error: {}\nRun with --help for usage.\n", e.what());
        return 2;
    } catch (const std::exception& e) {
        std::fflush(stdout);
        fmt::print(stderr, "dtsim: error: {}\n", e.what());
        return 1;
    }
    return dtsim::cli::exit_status();
}
