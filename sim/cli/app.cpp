// The dtsim command line: the app with every command on it, and parsing and running it with the
// exit status of docs/command-line.md (main.cpp calls it; so does the CLI fuzz target, in
// validate-only mode).
#include "commands.hpp"

#include "dtsim/errors.hpp"
#include "dtsim/interrupt.hpp"

#include <fmt/format.h>

#include <csignal>
#include <cstdio>
#include <exception>
#include <memory>
#include <new>
#include <regex>
#include <string>
#include <string_view>

#ifndef DTSIM_VERSION
#define DTSIM_VERSION "unknown"
#endif

namespace dtsim::cli {
namespace {

// CLI11's own words for a few parse errors, said plainly.
std::string plain(const CLI::ParseError& e) {
    const std::string what = e.what();
    // "Could not convert: --checkpoint-every = 99999999999": a value of an option without a check of its own
    // that the option's type cannot hold.
    constexpr std::string_view kNotConverted = "Could not convert: ";
    if (const auto eq = what.find(" = "); what.starts_with(kNotConverted) && eq != std::string::npos)
        return fmt::format("{}: '{}' is not a value it takes (not a number, or out of its range)",
                           what.substr(kNotConverted.size(), eq - kNotConverted.size()),
                           shown(what.substr(eq + 3)));
    // std::regex recurses once per character: a long text (an argument of 100 KB) is only shortened.
    if (what.size() > 1024) return shown(what);
    std::smatch m;
    // "--layers: 1 required INT:INT in [0 - 1048576] missing"
    static const std::regex missing_value(R"(^(-[^:]*): \d+ required .* missing$)");
    if (std::regex_match(what, m, missing_value)) return m[1].str() + " needs a value";
    return what;
}

const char* signal_name(int signal) {
    return signal == SIGINT ? "SIGINT" : signal == SIGTERM ? "SIGTERM" : "a signal";
}

}  // namespace

std::unique_ptr<CLI::App> build_app() {
    auto app = std::make_unique<CLI::App>("dtsim: a discrete-event simulator of distributed training schedules", "dtsim");
    app->require_subcommand(1);
    app->set_help_all_flag("--help-all", "Print help for every command");
    app->set_version_flag("--version", "dtsim " DTSIM_VERSION);
    register_puzzle_commands(*app);
    register_render_command(*app);
    register_schedule_command(*app);
    register_run_commands(*app);
    register_plan_command(*app);
    register_calibrate_commands(*app);
    register_failures_command(*app);
    return app;
}

int run_command_line(int argc, const char* const* argv) {
    exit_status() = 0;
    const std::unique_ptr<CLI::App> built = build_app();
    CLI::App& app = *built;
    // A usage error is one line, ending with where the usage is: the command's own --help.
    auto usage_error = [&app](const std::string& what) {
        std::string command = "dtsim";
        for (const CLI::App* sub : app.get_subcommands()) command += " " + sub->get_name();
        fmt::print(stderr, "dtsim: error: {} (see '{} --help')\n", what, command);
        return 2;
    };
    // A first word that is no command: name it (CLI11 would say only that a command is required).
    if (argc > 1 && argv[1][0] == '-') {
        const std::string flag = argv[1];
        if (flag != "-h" && flag != "--help" && flag != "--help-all" && flag != "--version")
            return usage_error(fmt::format("'{}' comes before the command; options follow it: dtsim COMMAND [options]",
                                           flag));
    }
    if (argc == 1 || argv[1][0] != '-') {
        const std::string word = argc > 1 ? argv[1] : "";
        std::string names;
        bool known = false;
        for (const CLI::App* sub : app.get_subcommands({})) {
            known = known || sub->check_name(word);
            names += (names.empty() ? "" : ", ") + sub->get_name();
        }
        if (argc == 1) return usage_error("a command is required: " + names);
        if (!known) return usage_error(fmt::format("unknown command '{}'; the commands are: {}", word, names));
    }
    try {
        app.parse(argc, argv);
    } catch (const dtsim::Interrupted& e) {
        std::fflush(stdout);
        fmt::print(stderr, "dtsim: stopped by {}; no file was left half-written\n", signal_name(e.signal()));
        return 128 + e.signal();
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
        return app.exit(e);
    } catch (const CLI::ExtrasError& e) {
        // In the order given (CLI11's message lists them backwards).
        std::string rest;
        for (const auto& arg : app.remaining(true)) rest += (rest.empty() ? "" : " ") + arg;
        return usage_error(rest.empty() ? std::string(e.what()) : "unexpected argument(s): " + rest);
    } catch (const CLI::ParseError& e) {
        return usage_error(plain(e));
    } catch (const UsageError& e) {
        return usage_error(e.what());
    } catch (const std::bad_alloc&) {
        std::fflush(stdout);
        fmt::print(stderr, "dtsim: error: out of memory (the run needs more memory than the system would give)\n");
        return 1;
    } catch (const std::exception& e) {
        std::fflush(stdout);
        fmt::print(stderr, "dtsim: error: {}\n", e.what());
        return dynamic_cast<const dtsim::InputError*>(&e) ? 2 : 1;
    }
    return exit_status();
}

}  // namespace dtsim::cli
