// libFuzzer target: the dtsim command line's argument parsing, for every command. The fuzzer's
// bytes become argv: the first byte picks the command (or none: the first argument is then the
// first word as given), the rest are the arguments, separated by newlines or NUL bytes. They run
// through the same CLI11 app and the same checks and exit statuses as `dtsim` (run_command_line,
// sim/cli/app.cpp), in validate-only mode: each command checks its arguments and returns before it
// reads a file, runs or writes anything. What must hold: no crash, no sanitizer report, no hang,
// whatever the arguments (run with -close_fd_mask=3: every input prints a usage error or a help).
#include "cli/commands.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace {

constexpr const char* kCommands[] = {"puzzle",   "puzzles",   "schedule", "run",   "compare",
                                     "failures", "calibrate", "validate", "render"};
constexpr std::size_t kNumCommands = sizeof(kCommands) / sizeof(kCommands[0]);
constexpr std::size_t kMaxArguments = 4096;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    dtsim::cli::validate_only() = true;
    std::vector<std::string> args{"dtsim"};
    if (const std::size_t pick = data[0] % (kNumCommands + 1); pick < kNumCommands) args.emplace_back(kCommands[pick]);
    if (size > 1) {
        std::string arg;
        for (std::size_t i = 1; i < size && args.size() < kMaxArguments; ++i) {
            const char c = static_cast<char>(data[i]);
            if (c == '\n' || c == '\0') {
                args.push_back(std::move(arg));
                arg.clear();
            } else {
                arg += c;
            }
        }
        if (args.size() < kMaxArguments) args.push_back(std::move(arg));
    }
    std::vector<const char*> argv;
    argv.reserve(args.size());
    for (const auto& a : args) argv.push_back(a.c_str());
    (void)dtsim::cli::run_command_line(static_cast<int>(argv.size()), argv.data());
    return 0;
}
