// A small command-line parser for the calibration tools: `--name VALUE`, `--name=VALUE`
// and `--flag`, declared up front so that an unknown option is an error with a
// did-you-mean suggestion. No CUDA here; unit-tested on the CPU.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace dtsim::calib {

// A bad command line: what() names the option and the offending value.
class ArgError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// "4G" -> 4294967296. Accepts a plain count of bytes or a number with K, M, G or T
// (powers of 1024, as nccl-tests reads -b/-e), optionally followed by "B" or "iB".
std::uint64_t parse_bytes(std::string_view text);

// 4294967296 -> "4 GiB", 1536 -> "1536 B": the largest binary unit that divides exactly.
std::string format_bytes(std::uint64_t bytes);

// The closest of `candidates` to `word` (edit distance at most 3), or empty.
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

class ArgParser {
public:
    ArgParser(std::string program, std::string summary);

    // --name (no value)
    void add_flag(const std::string& name, std::string help);
    // --name VALUE; an empty default means "not set unless given".
    void add_option(const std::string& name, std::string value_name, std::string help,
                    std::string default_value = {});

    // Throws ArgError on an unknown option, a missing value or a repeated option.
    void parse(int argc, const char* const* argv);
    void parse(const std::vector<std::string>& args);

    [[nodiscard]] bool help_requested() const { return help_; }
    [[nodiscard]] std::string help() const;
    // The command line as given, shell-quoted where needed (for the output's metadata).
    [[nodiscard]] const std::string& command_line() const { return command_line_; }

    [[nodiscard]] bool flag(std::string_view name) const;
    // True if the option was given or has a default.
    [[nodiscard]] bool has(std::string_view name) const;
    [[nodiscard]] bool given(std::string_view name) const;
    [[nodiscard]] std::string str(std::string_view name) const;
    [[nodiscard]] std::optional<std::string> maybe(std::string_view name) const;
    [[nodiscard]] std::int64_t integer(std::string_view name) const;
    [[nodiscard]] std::int64_t integer_at_least(std::string_view name, std::int64_t min) const;
    [[nodiscard]] double number(std::string_view name) const;
    [[nodiscard]] std::uint64_t bytes(std::string_view name) const;
    // Comma-separated values, empty items dropped.
    [[nodiscard]] std::vector<std::string> list(std::string_view name) const;

private:
    struct Spec {
        bool is_flag = false;
        std::string value_name;
        std::string help;
        std::string default_value;
    };
    const Spec& spec(std::string_view name) const;

    std::string program_;
    std::string summary_;
    std::vector<std::string> order_;
    std::map<std::string, Spec, std::less<>> specs_;
    std::map<std::string, std::string, std::less<>> values_;
    bool help_ = false;
    std::string command_line_;
};

}  // namespace dtsim::calib
