// dtsim: simulate distributed training schedules.
//
// Exit status, the same for every command (docs/command-line.md):
//   0  the command did what was asked, and its run finished and is correct
//   1  a run or a check failed: a schedule broke a rule or deadlocked, final weights are
//      wrong, a target was missed under --strict, validate --check missed a target, a
//      file could not be written, the simulator ran out of memory
//   2  bad arguments, or bad input found before anything ran: a malformed or invalid
//      config, schedule, trace or ground-truth file (InputError)
//   3  the run finished but does not fit in the GPUs' memory (run; a sweep or compare:
//      some run does not fit and none failed)
//   130, 143  stopped by SIGINT (130) or SIGTERM (143): what was computed is printed, files
//      finished before the signal are kept, the file being written is removed
//
// Standard output is line-buffered, so every report line is out as soon as it is printed, on a
// pipe or a file too.
#include "commands.hpp"

#include "dtsim/errors.hpp"
#include "dtsim/interrupt.hpp"

#include <fmt/format.h>

#include <signal.h>

#include <csignal>
#include <cstdio>
#include <exception>
#include <new>
#include <regex>
#include <string>
#include <string_view>

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
                           dtsim::cli::shown(what.substr(eq + 3)));
    // std::regex recurses once per character: a long text (an argument of 100 KB) is only shortened.
    if (what.size() > 1024) return dtsim::cli::shown(what);
    std::smatch m;
    // "--layers: 1 required INT:INT in [0 - 1048576] missing"
    static const std::regex missing_value(R"(^(-[^:]*): \d+ required .* missing$)");
    if (std::regex_match(what, m, missing_value)) return m[1].str() + " needs a value";
    return what;
}

extern "C" void on_stop_signal(int signal) { dtsim::request_interrupt(signal); }

// SIGINT and SIGTERM request an interrupt: the run stops at its next poll, cleans up and exits with
// 128 + the signal's number. The handler is for one signal: a second one of the same kind ends the
// process at once (as without the handler). A signal the process was started to ignore (a
// background job's SIGINT) stays ignored.
void handle_stop_signals() {
    for (const int signal : {SIGINT, SIGTERM}) {
        struct sigaction old {};
        if (sigaction(signal, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
        struct sigaction action {};
        action.sa_handler = on_stop_signal;
        sigemptyset(&action.sa_mask);
        action.sa_flags = SA_RESTART | SA_RESETHAND;
        sigaction(signal, &action, nullptr);
    }
}

const char* signal_name(int signal) {
    return signal == SIGINT ? "SIGINT" : signal == SIGTERM ? "SIGTERM" : "a signal";
}

}  // namespace

int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // a report line is out once printed
    handle_stop_signals();
    CLI::App app{"dtsim: a discrete-event simulator of distributed training schedules", "dtsim"};
    app.require_subcommand(1);
    app.set_help_all_flag("--help-all", "Print help for every command");
    app.set_version_flag("--version", "dtsim " DTSIM_VERSION);
    dtsim::cli::register_puzzle_commands(app);
    dtsim::cli::register_render_command(app);
    dtsim::cli::register_schedule_command(app);
    dtsim::cli::register_run_commands(app);
    dtsim::cli::register_calibrate_commands(app);
    dtsim::cli::register_failures_command(app);
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
    } catch (const dtsim::cli::UsageError& e) {
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
    return dtsim::cli::exit_status();
}
