// The tools' command lines: exit statuses, the recorded command line, sizes as nccl-tests reads them.
#include "host/cli.hpp"

#include <CLI/CLI.hpp>
#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

using namespace dtsim::harness;

namespace {

struct Tool {
    CLI::App app{"a test tool", "dtsim-test"};
    std::uint64_t min_bytes = 1024;
    int iters = 20;
    std::string out;
    bool check = false;
    Tool() {
        app.add_option("--min-bytes", min_bytes, "smallest size")->transform(byte_size());
        app.add_option("--iters", iters, "timed iterations")->check(at_least(1))->capture_default_str();
        app.add_option("--out", out, "JSON output");
        app.add_flag("--check", check, "check results");
    }
    // The exit status of `dtsim-test ARGS` whose run returns `status` or throws what `fail` throws.
    int run(std::vector<std::string> args, int status = 0, std::function<void()> fail = {}) {
        std::vector<const char*> argv{"dtsim-test"};
        for (const auto& a : args) argv.push_back(a.c_str());
        return run_tool(app, static_cast<int>(argv.size()), argv.data(), [&] {
            if (fail) fail();
            return status;
        });
    }
};

}  // namespace

TEST_CASE("exit statuses: 0 done and --help, 1 a failed run, 2 bad arguments") {
    CHECK(Tool().run({}) == 0);
    CHECK(Tool().run({"--help"}) == 0);
    CHECK(Tool().run({}, 1) == 1);  // the run's own status (a failed check)
    CHECK(Tool().run({"--iter", "3"}) == 2);
    CHECK(Tool().run({"--iters"}) == 2);
    CHECK(Tool().run({"--iters", "ten"}) == 2);
    CHECK(Tool().run({"--iters", "0"}) == 2);
    CHECK(Tool().run({"--min-bytes", "lots"}) == 2);
    CHECK(Tool().run({"stray"}) == 2);
    CHECK(Tool().run({}, 0, [] { throw ArgError("--ranks: 3 is not a size this puzzle runs"); }) == 2);
    CHECK(Tool().run({}, 0, [] { throw std::runtime_error("NCCL failed"); }) == 1);
}

TEST_CASE("options take --name VALUE and --name=VALUE; sizes read as nccl-tests reads -b and -e") {
    Tool t;
    CHECK(t.run({"--iters", "50", "--out=sweep.json", "--check", "--min-bytes", "4G"}) == 0);
    CHECK(t.iters == 50);
    CHECK(t.out == "sweep.json");
    CHECK(t.check);
    CHECK(t.min_bytes == 4ull << 30);
    const std::vector<std::pair<std::string, std::uint64_t>> sizes = {
        {"8", 8}, {"1K", 1024}, {"1KiB", 1024}, {"64M", 64ull << 20}, {"4GB", 4ull << 30}, {"2t", 2ull << 40},
        {"512B", 512}};
    for (const auto& [text, bytes] : sizes) {
        CAPTURE(text);
        Tool s;
        CHECK(s.run({"--min-bytes", text}) == 0);
        CHECK(s.min_bytes == bytes);
    }
}

TEST_CASE("the recorded command line quotes what the shell would need quoted") {
    const char* argv[] = {"dtsim-test", "--out", "my file.json", "--name=it's"};
    CHECK(command_line(4, argv) == "dtsim-test --out 'my file.json' '--name=it'\\''s'");
    const char* plain[] = {"dtsim-collectives", "--ops", "all_reduce,all_gather", "--max-bytes", "64M"};
    CHECK(command_line(5, plain) == "dtsim-collectives --ops all_reduce,all_gather --max-bytes 64M");
}
