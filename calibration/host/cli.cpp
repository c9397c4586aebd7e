#include "host/cli.hpp"

#include "dtsim/detail/output_file.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <new>
#include <string_view>

namespace dtsim::harness {
namespace {

std::string shell_quote(std::string_view arg) {
    const bool plain = !arg.empty() && std::all_of(arg.begin(), arg.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || std::string_view("-_=./:,@+%").find(c) !=
                                                                   std::string_view::npos;
    });
    if (plain) return std::string(arg);
    std::string out = "'";
    for (char c : arg) {
        if (c == '\'')
            out += "'\\''";
        else
            out += c;
    }
    out += '\'';
    return out;
}

}  // namespace

std::string command_line(int argc, const char* const* argv) {
    std::string out;
    for (int i = 0; i < argc; ++i) out += (i ? " " : "") + shell_quote(argv[i]);
    return out;
}

int run_tool(CLI::App& app, int argc, const char* const* argv, const std::function<int()>& body) {
    const std::string name = app.get_name();
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);  // --help
        fmt::print(stderr, "{}: error: {} (see '{} --help')\n", name, e.what(), name);
        return 2;
    }
    try {
        return body();
    } catch (const ArgError& e) {
        std::fflush(stdout);
        fmt::print(stderr, "{}: error: {} (see '{} --help')\n", name, e.what(), name);
        return 2;
    } catch (const std::bad_alloc&) {
        std::fflush(stdout);
        fmt::print(stderr, "{}: error: out of memory\n", name);
        return 1;
    } catch (const std::exception& e) {
        std::fflush(stdout);
        fmt::print(stderr, "{}: error: {}\n", name, e.what());
        return 1;
    }
}

CLI::Validator at_least(int lo) { return CLI::Range(lo, 1 << 30).description(""); }

CLI::Validator byte_size() { return CLI::AsSizeValue(false).description(""); }

void write_json_file(const std::string& path, const nlohmann::json& doc) {
    dtsim::detail::write_output_file(path, doc.dump(1) + "\n");
}

}  // namespace dtsim::harness
