// What the three tools share on the command line (CLI11): how a run ends and with which
// exit status, the command line recorded in their outputs, and writing a JSON output.
//
// Exit status, as for dtsim (sim/cli/main.cpp):
//   0  done (also --help)
//   1  a run or a check failed: a GPU, NCCL or a rendezvous failed, results were wrong
//   2  bad arguments: CLI11's parse errors, and ArgError for values found wrong afterwards
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <functional>
#include <stdexcept>
#include <string>

namespace CLI {
class App;
class Validator;
}  // namespace CLI

namespace dtsim::harness {

// A bad argument found after parsing (a size a strategy cannot run with, a value out of
// a list): what() names the option and the offending value. Exit status 2.
class ArgError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// The command line as given, shell-quoted where needed (for the outputs' metadata).
std::string command_line(int argc, const char* const* argv);

// Parses the command line with `app`, then runs `body`: returns the exit status, 0 for
// --help, 2 for a parse error or an ArgError, body's own status, or 1 when it throws
// anything else. Errors are printed as "NAME: error: what" on stderr.
int run_tool(CLI::App& app, int argc, const char* const* argv, const std::function<int()>& body);

// Checks of the tools' options, named in an error and not in the help's type column:
// a whole number from `lo` to 2^30, and a size in bytes as nccl-tests reads -b and -e (a
// count, or with K, M, G, T: powers of 1024, optionally followed by B or iB).
CLI::Validator at_least(int lo);
CLI::Validator byte_size();

// Writes `doc` to `path` (indented, trailing newline). Throws std::runtime_error naming the path.
void write_json_file(const std::string& path, const nlohmann::json& doc);

}  // namespace dtsim::harness
