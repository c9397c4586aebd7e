#include "host/args.hpp"

#include <doctest/doctest.h>

using namespace dtsim::calib;

namespace {
ArgParser make_parser() {
    ArgParser p("dtsim-test", "a test");
    p.add_option("min-bytes", "SIZE", "smallest size", "1K");
    p.add_option("iters", "N", "timed iterations", "20");
    p.add_option("out", "FILE", "JSON output");
    p.add_option("ops", "LIST", "collectives", "all_reduce,all_gather");
    p.add_flag("check", "check results");
    return p;
}
}  // namespace

TEST_CASE("parse_bytes reads plain counts and binary units as nccl-tests does") {
    CHECK(parse_bytes("8") == 8);
    CHECK(parse_bytes("1K") == 1024);
    CHECK(parse_bytes("1KiB") == 1024);
    CHECK(parse_bytes("64M") == 64ull << 20);
    CHECK(parse_bytes("4G") == 4ull << 30);
    CHECK(parse_bytes("4GB") == 4ull << 30);
    CHECK(parse_bytes("2t") == 2ull << 40);
    CHECK(parse_bytes("512B") == 512);
}

TEST_CASE("parse_bytes rejects garbage with the value in the message") {
    CHECK_THROWS_WITH_AS(parse_bytes("lots"), doctest::Contains("\"lots\""), ArgError);
    CHECK_THROWS_AS(parse_bytes(""), ArgError);
    CHECK_THROWS_AS(parse_bytes("4Q"), ArgError);
    CHECK_THROWS_AS(parse_bytes("99999999999999999999"), ArgError);
    CHECK_THROWS_AS(parse_bytes("20000000000T"), ArgError);
}

TEST_CASE("format_bytes picks the largest exact binary unit") {
    CHECK(format_bytes(4ull << 30) == "4 GiB");
    CHECK(format_bytes(1024) == "1 KiB");
    CHECK(format_bytes(1536) == "1536 B");
    CHECK(format_bytes(0) == "0 B");
}

TEST_CASE("options take defaults, --name VALUE and --name=VALUE") {
    auto p = make_parser();
    p.parse(std::vector<std::string>{"--iters", "50", "--out=sweep.json", "--check"});
    CHECK(p.integer("iters") == 50);
    CHECK(p.str("out") == "sweep.json");
    CHECK(p.bytes("min-bytes") == 1024);
    CHECK(p.flag("check"));
    CHECK(p.given("iters"));
    CHECK_FALSE(p.given("min-bytes"));
    CHECK(p.has("min-bytes"));
    CHECK(p.list("ops") == std::vector<std::string>{"all_reduce", "all_gather"});
    CHECK(p.command_line() == "--iters 50 --out=sweep.json --check");
}

TEST_CASE("an unknown option is an error with a did-you-mean suggestion") {
    auto p = make_parser();
    CHECK_THROWS_WITH_AS(p.parse(std::vector<std::string>{"--iter", "3"}),
                         doctest::Contains("did you mean --iters?"), ArgError);
}

TEST_CASE("a missing value, a repeated option and a bad integer are errors naming the option") {
    auto p = make_parser();
    CHECK_THROWS_WITH_AS(p.parse(std::vector<std::string>{"--iters"}), doctest::Contains("--iters needs a value"),
                         ArgError);
    CHECK_THROWS_WITH_AS(p.parse(std::vector<std::string>{"--iters", "1", "--iters", "2"}),
                         doctest::Contains("given twice"), ArgError);
    p.parse(std::vector<std::string>{"--iters", "ten"});
    CHECK_THROWS_WITH_AS((void)p.integer("iters"), doctest::Contains("--iters expects an integer, got \"ten\""),
                         ArgError);
    CHECK_THROWS_WITH_AS((void)p.str("out"), doctest::Contains("--out is required"), ArgError);
}

TEST_CASE("--help is recognised and the help lists every option with its default") {
    auto p = make_parser();
    p.parse(std::vector<std::string>{"--help"});
    CHECK(p.help_requested());
    const std::string h = p.help();
    CHECK(h.find("--min-bytes SIZE") != std::string::npos);
    CHECK(h.find("[default: 20]") != std::string::npos);
}

TEST_CASE("the recorded command line quotes what the shell would need quoted") {
    auto p = make_parser();
    const char* argv[] = {"dtsim-test", "--out", "my file.json"};
    p.parse(3, argv);
    CHECK(p.command_line() == "dtsim-test --out 'my file.json'");
}
