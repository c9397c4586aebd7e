// What dtsim does with bad input (docs/command-line.md): every JSON reader bounds the nesting
// and the size of what it reads, an included file is read once however many files include it,
// every real number a user gives is checked against its physical range, and an error names the
// file, the JSON path and, where a file could not be opened, the system's reason. Each test is a
// case that once crashed, hung, or printed nonsense with exit status 0.
#include "dtsim/hw/calibrate.hpp"
#include "dtsim/hw/config.hpp"
#include "dtsim/sched/format.hpp"
#include "dtsim/trace_io.hpp"
#include "json/reader.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

using namespace dtsim;
using nlohmann::json;
namespace fs = std::filesystem;
namespace reader = dtsim::json_reader;

namespace {

const std::string kData = DTSIM_ERRORS_DATA;

json base() {
    std::ifstream in(kData + "/base.json");
    return json::parse(in);
}

template <class F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const std::exception& e) {
        return e.what();
    }
    return "no error";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A fresh folder of this test's own under the temporary directory.
fs::path scratch(const std::string& name) {
    const fs::path dir = fs::temp_directory_path() / ("dtsim-bad-input-" + name);
    fs::remove_all(dir);
    fs::create_directories(dir);
    return dir;
}

void write(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

// `depth` arrays, one in another.
std::string nested(int depth) {
    const auto n = static_cast<std::size_t>(depth);
    return std::string(n, '[') + std::string(n, ']');
}

// The base config with a "note" (read by nobody) holding `value`, as text.
std::string base_with_note(const std::string& value) {
    std::string text = base().dump();
    text.pop_back();  // the closing brace
    return text + ", \"note\": " + value + "}";
}

std::string config_error(const json& doc, const std::vector<std::string>& sets) {
    std::vector<hw::Override> overrides;
    for (const auto& s : sets) overrides.push_back(hw::parse_override(s));
    return error_of([&] { (void)hw::parse_config(doc, "mem.json", overrides); });
}

const reader::Dialect kTestDialect{.raise = [](const std::string& file, const std::string& path,
                                               const std::string& message) -> void {
    throw std::runtime_error(file + ": " + path + ": " + message);
}};

}  // namespace

// --------------------------------------------------- nesting and size limits

// nlohmann's copy, comparison and destructor recurse once per level, as did the merge of
// includes: 100,000 levels overflowed the stack (exit 139) in run, compare and failures.
TEST_CASE("a config nested 100,000 deep is an error at its JSON path, not a stack overflow") {
    const fs::path dir = scratch("deep-config");
    write(dir / "deep.json", base_with_note(nested(100000)));
    CHECK(error_of([&] { (void)hw::load_config((dir / "deep.json").string()); }) ==
          (dir / "deep.json").string() +
              ": $.note[0][0][0][0][0][0][0]...: arrays and objects nested more than 256 deep (dtsim reads at most "
              "256 levels)");
    // Objects too, and the path names their keys.
    std::string objects;
    for (int i = 0; i < 100000; ++i) objects += "{\"a\": ";
    objects += "1" + std::string(100000, '}');
    write(dir / "objects.json", base_with_note(objects));
    CHECK(contains(error_of([&] { (void)hw::load_config((dir / "objects.json").string()); }),
                   ": $.note.a.a.a.a.a.a.a...: arrays and objects nested more than 256 deep"));
}

TEST_CASE("the nesting limit is 256 levels, the document itself the first") {
    const fs::path dir = scratch("depth-limit");
    write(dir / "at.json", base_with_note(nested(reader::kMaxDepth - 1)));
    CHECK_NOTHROW((void)hw::load_config((dir / "at.json").string()));
    write(dir / "over.json", base_with_note(nested(reader::kMaxDepth)));
    CHECK(contains(error_of([&] { (void)hw::load_config((dir / "over.json").string()); }), "nested more than 256 deep"));
}

TEST_CASE("a --set value or path nested too deep is an error naming the --set") {
    CHECK(contains(config_error(base(), {"note=" + nested(60000)}),
                   "$.note[0][0][0][0][0][0][0][0]...: arrays and objects nested more than 256 deep"));
    CHECK(contains(config_error(base(), {"note=" + nested(60000)}), "--set note=[[[["));
    std::string path = "note";
    for (int i = 0; i < 300; ++i) path += ".a";
    CHECK(contains(config_error(base(), {path + "=1"}), "a path of 301 parts is deeper than dtsim reads (at most 255 levels)"));
}

// parse_config took a document built in memory and copied it, once per level: the config fuzz
// target, whose documents come from nlohmann's parser (it does not recurse), overflowed the stack at
// 200,000 levels.
TEST_CASE("a config document in memory nested 100,000 deep is an error at its JSON path, not a stack overflow") {
    json doc = base();
    doc["note"] = json::parse(nested(100000));
    CHECK(config_error(doc, {}) ==
          "mem.json: $.note[0][0][0][0][0][0][0]...: arrays and objects nested more than 256 deep (dtsim reads at "
          "most 256 levels)");
    std::string objects;
    for (int i = 0; i < 100000; ++i) objects += "{\"b\": ";
    doc["note"] = json::object();
    doc["note"]["a"] = json::parse(objects + "1" + std::string(100000, '}'));
    CHECK(contains(config_error(doc, {}), "mem.json: $.note.a.b.b.b.b.b.b...: arrays and objects nested"));
    // At the limit it is read.
    doc["note"] = json::parse(nested(reader::kMaxDepth - 1));
    CHECK(config_error(doc, {}) == "no error");
    doc["note"] = json::parse(nested(reader::kMaxDepth));
    CHECK(contains(config_error(doc, {}), "nested more than 256 deep"));
}

// Copying a trace's meta (render) overflowed the stack on a 600 KB file.
TEST_CASE("a trace nested deep is an error at its JSON path, not a crash") {
    std::istringstream in(R"({"format": "dtsim-trace", "version": 1, "meta": {"x": )" + nested(300000) +
                          R"(}, "ranks": []})");
    CHECK(error_of([&] { (void)read_trace_json(in, "t.json"); }) ==
          "t.json: at $.meta.x[0][0][0][0][0][0]...: arrays and objects nested more than 256 deep (dtsim reads at "
          "most 256 levels)");
}

TEST_CASE("a ground-truth file nested deep is an error, not a crash") {
    const fs::path dir = scratch("deep-ground-truth");
    write(dir / "gt.json", "{\"datasets\": " + nested(100000) + "}");
    CHECK(contains(error_of([&] { (void)hw::calib::load_ground_truth({(dir / "gt.json").string()}); }),
                   "gt.json: $.datasets[0][0][0][0][0][0][0]...: arrays and objects nested more than 256 deep"));
}

TEST_CASE("a config or ground-truth file larger than 64 MiB is refused before it is read") {
    const fs::path dir = scratch("large");
    const fs::path big = dir / "big.json";
    write(big, "");
    fs::resize_file(big, reader::kMaxFileBytes + 1);  // sparse: nothing is written
    CHECK(error_of([&] { (void)hw::load_config(big.string()); }) ==
          big.string() + ": $: the file is larger than dtsim reads (64 MiB; found 67108865 bytes)");
    CHECK(contains(error_of([&] { (void)hw::calib::load_ground_truth({big.string()}); }),
                   "the file is larger than dtsim reads (64 MiB"));
    fs::remove_all(dir);
}

// A stream has no size to look at: it is read up to the limit (a trace's is 8 GiB).
TEST_CASE("a stream longer than its limit is an error when it reaches it") {
    std::istringstream in(R"({"a": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]})");
    CHECK(error_of([&] { (void)reader::Document::read(in, "s.json", kTestDialect, 16); }) ==
          "s.json: $: the file is larger than dtsim reads (16 bytes; found more)");
    std::istringstream fits(R"({"a": 1})");
    CHECK_NOTHROW((void)reader::Document::read(fits, "s.json", kTestDialect, 16));
}

// ------------------------------------------------------------------ includes

// Files reached through many routes were read once per route: 30 levels of two files, each including
// both of the next level's, read the bottom 2^30 times. Counted, not timed: 12 levels here (2^13
// reads of the bottom, a fraction of a second, if each route read its file again).
TEST_CASE("includes: a file included through many routes is read once") {
    const fs::path dir = scratch("diamond");
    constexpr int kLevels = 12;
    for (int i = 0; i <= kLevels; ++i)
        for (const char* side : {"a", "b"})
            write(dir / fmt::format("{}{}.json", side, i),
                  i == kLevels ? R"({"note": "the bottom"})"
                               : fmt::format(R"({{"include": ["a{}.json", "b{}.json"]}})", i + 1, i + 1));
    write(dir / "top.json", fmt::format(R"({{"include": ["a0.json", "b0.json", "{}"]}})", kData + "/base.json"));
    const auto doc = reader::Document::load((dir / "top.json").string(), kTestDialect, true);
    // top, a0..a12, b0..b12 and base.json, each read once; merged: each file's own keys, every include
    // (two in each of the 24 files above the bottom, three in top).
    const std::size_t files = 2 * (kLevels + 1) + 2;
    CHECK(doc.load_counts().files_read == files);
    CHECK(doc.load_counts().merges == files + 2 * (2 * kLevels) + 3);
    const hw::Config c = hw::load_config((dir / "top.json").string());
    CHECK(c.json["note"] == "the bottom");
    CHECK(c.name == "errors base");
}

// An include listing a file many times merged it once per listing, each merge as long as the file:
// 20,000 listings of a file of 5,000 keys took a minute (and the include fuzz target's seed of 50,000
// listings, two and a half). Counted, not timed: 2,000 listings of 500 keys here.
TEST_CASE("includes: a file listed many times is merged once") {
    const fs::path dir = scratch("listed");
    std::string keys;
    for (int i = 0; i < 500; ++i) keys += fmt::format("{}\"k{}\": {}", i == 0 ? "" : ", ", i, i);
    write(dir / "big.json", "{\"note\": {" + keys + "}}");
    std::string list;
    for (int i = 0; i < 2000; ++i) list += "\"big.json\", ";
    write(dir / "top.json", "{\"include\": [" + list + "\"" + kData + "/base.json\", \"big.json\"]}");
    // big.json read and merged once (where it is last listed), base.json once, and each file's own keys.
    const auto doc = reader::Document::load((dir / "top.json").string(), kTestDialect, true);
    CHECK(doc.load_counts().files_read == 3);
    CHECK(doc.load_counts().merges == 3 + 2);
    const hw::Config c = hw::load_config((dir / "top.json").string());
    CHECK(c.json["note"]["k499"] == 499);
    CHECK(c.name == "errors base");
}

// Merged where it is last listed: what the files listed between set is overridden as before.
TEST_CASE("includes: a file listed again overrides what the files between it set") {
    const fs::path dir = scratch("listed-again");
    write(dir / "a.json", R"({"note": {"x": {"y": 1}, "z": "a"}, "name": "from a"})");
    write(dir / "b.json", R"({"note": {"x": 5, "w": "b"}, "name": "from b"})");
    const std::string base = "\"" + kData + "/base.json\"";
    write(dir / "aba.json", R"({"include": [)" + base + R"(, "a.json", "b.json", "a.json"]})");
    const hw::Config aba = hw::load_config((dir / "aba.json").string());
    CHECK(aba.json["note"] == json::parse(R"({"x": {"y": 1}, "z": "a", "w": "b"})"));
    CHECK(aba.name == "from a");
    write(dir / "ab.json", R"({"include": [)" + base + R"(, "a.json", "a.json", "b.json"]})");
    const hw::Config ab = hw::load_config((dir / "ab.json").string());
    CHECK(ab.json["note"] == json::parse(R"({"x": 5, "z": "a", "w": "b"})"));
    CHECK(ab.name == "from b");
    // A bad value names the file it came from, the last to set it.
    write(dir / "bad.json", R"({"cluster": {"gpus_per_node": 0}})");
    write(dir / "good.json", R"({"cluster": {"gpus_per_node": 8}})");
    write(dir / "bgb.json", R"({"include": [)" + base + R"(, "bad.json", "good.json", "bad.json"]})");
    CHECK(contains(error_of([&] { (void)hw::load_config((dir / "bgb.json").string()); }),
                   "bad.json: $.cluster.gpus_per_node: expected a positive integer"));
}

TEST_CASE("includes: a cycle below a file included twice is still an error naming it") {
    const fs::path dir = scratch("cycle");
    write(dir / "top.json", R"({"include": ["a.json", "a.json"]})");
    write(dir / "a.json", R"({"include": "b.json"})");
    write(dir / "b.json", R"({"include": "a.json"})");
    CHECK(error_of([&] { (void)hw::load_config((dir / "top.json").string()); }) ==
          (dir / "b.json").string() + ": $.include: \"a.json\" includes itself (through " + (dir / "a.json").string() +
              ")");
}

// Each level of includes is a frame of the loader: a chain of 100,000 files would overflow the stack.
TEST_CASE("includes nest at most 64 deep") {
    const fs::path dir = scratch("chain");
    for (int i = 0; i < 70; ++i) write(dir / fmt::format("c{}.json", i), fmt::format(R"({{"include": "c{}.json"}})", i + 1));
    write(dir / "c70.json", "{}");
    CHECK(error_of([&] { (void)hw::load_config((dir / "c0.json").string()); }) ==
          (dir / "c63.json").string() +
              ": $.include: includes nested more than 64 deep (\"c64.json\" includes files that include files, 64 "
              "levels down from " +
              (dir / "c0.json").string() + ")");
}

// ------------------------------------------------------------- real numbers

// 1e308 printed "step time inf s" and "-nan %"; 1e-300 a 300-digit step time; both with exit 0.
TEST_CASE("a real number out of its physical range is an error with the range and the unit") {
    const json b = base();
    CHECK(config_error(b, {"stragglers.slowdown.3=1e308"}) ==
          "--set stragglers.slowdown.3=1e308: $.stragglers.slowdown.3: expected a slowdown factor in (0, 1000], "
          "found 1e+308");
    CHECK(config_error(b, {"cluster.gpu.peak_tflops.bf16=1e-300"}) ==
          "--set cluster.gpu.peak_tflops.bf16=1e-300: $.cluster.gpu.peak_tflops.bf16: expected a peak in [0.001, "
          "1e6] TFLOP/s, found 1e-300");
    CHECK(config_error(b, {"cluster.links.intra_node.bandwidth_GBps=1e-300"}) ==
          "--set cluster.links.intra_node.bandwidth_GBps=1e-300: $.cluster.links.intra_node.bandwidth_GBps: expected "
          "a bandwidth in [0.001, 1e12] GB/s, found 1e-300");
    CHECK(config_error(b, {"cluster.links.intra_node.hop_latency_us=1e300"}) ==
          "--set cluster.links.intra_node.hop_latency_us=1e300: $.cluster.links.intra_node.hop_latency_us: expected a "
          "latency in [0, 1e6] us, found 1e+300");
    CHECK(contains(config_error(b, {"cluster.gpu.hbm_GiB=1e300"}), "expected a memory size in (0, 1e6] GiB, found 1e+300"));
    CHECK(contains(config_error(b, {"cluster.gpu.hbm_TBps=1e-300"}),
                   "expected a memory bandwidth in [1e-6, 1e9] TB/s, found 1e-300"));
    CHECK(contains(config_error(b, {"strategy.bucket_MiB=1e300"}), "expected a bucket size in (0, 1e9] MiB, found 1e+300"));
    CHECK(contains(config_error(b, {"cluster.links.intra_node.nvls_bandwidth_GBps=1e-300"}),
                   "expected a bandwidth in [0.001, 1e12] GB/s, found 1e-300"));
    CHECK(contains(config_error(b, {R"(stragglers.jitter={"distribution": "lognormal", "cv": 1e300})"}),
                   "$.stragglers.jitter.cv: expected a coefficient of variation in [0, 100], found 1e+300"));
    CHECK(contains(config_error(b, {R"(cluster.links.intra_node.fits={"all_reduce": {"ranks": 8, "lines": [[1e300, 1]]}})"}),
                   "$.cluster.links.intra_node.fits.all_reduce.lines[0][0]: expected a latency in [0, 1e6] us, found 1e+300"));
    // A value of the wrong sign still says so as it did.
    CHECK(config_error(b, {"stragglers.slowdown.3=0"}) ==
          "--set stragglers.slowdown.3=0: $.stragglers.slowdown.3: expected a positive number, found 0");
    // The values of the ranges' ends are in them.
    CHECK(config_error(b, {"stragglers.slowdown.3=1000", "cluster.gpu.peak_tflops.bf16=1e6",
                           "cluster.links.intra_node.bandwidth_GBps=1e12"}) == "no error");
}

TEST_CASE("a real number of a ground-truth file out of its physical range is an error") {
    const fs::path dir = scratch("gt-range");
    write(dir / "gt.json", R"({"datasets": [{"id": "x", "source": "s", "collective": "all_reduce",
        "hardware": {"gpu": "H100", "gpus_per_node": 8, "nodes": 1},
        "rows": [{"size_bytes": 1048576, "time_us": 1e300}]}]})");
    CHECK(error_of([&] { (void)hw::calib::load_ground_truth({(dir / "gt.json").string()}); }) ==
          (dir / "gt.json").string() + ": $.datasets[0].rows[0].time_us: expected a time in (0, 1e12] us, found 1e+300");
    write(dir / "shape.json", R"({"max_achievable": {"source": "s", "rows": [
        {"gpu": "H100", "dtype": "bf16", "tflops": 700, "shape": "infx8192x8192"}]}})");
    CHECK(contains(error_of([&] { (void)hw::calib::load_ground_truth({(dir / "shape.json").string()}); }),
                   "$.max_achievable.rows[0].shape: expected a shape \"MxNxK\""));
}

// ------------------------------------------------------------------ messages

TEST_CASE("a folder given as a file says so, naming it") {
    CHECK(error_of([] { (void)hw::load_config(kData); }) == kData + ": $: cannot open the file: it is a directory");
    CHECK(error_of([] { (void)read_trace_file(kData); }) == kData + ": at $: cannot open the file: it is a directory");
    CHECK(error_of([] { (void)sched::read_schedule_file(kData); }) == kData + ": cannot open: it is a directory");
    CHECK(error_of([] { (void)hw::calib::load_ground_truth({kData}); }) ==
          kData + ": $: cannot open the file: it is a directory");
}

// A --set string that is not UTF-8 reached the trace's meta, whose writing threw nlohmann's
// "[json.exception.type_error.316] invalid UTF-8 byte".
TEST_CASE("a --set that is not UTF-8 is an error naming it") {
    CHECK(contains(config_error(base(), {"name=\xff"}), ": $: the text is not UTF-8"));
    CHECK(contains(config_error(base(), {"note.\xff=1"}), ": $: the text is not UTF-8"));
    CHECK(config_error(base(), {"name=caf\xc3\xa9"}) == "no error");
}

TEST_CASE("a long string or key is quoted shortened") {
    json d = base();
    d["strategy"]["recompute"] = std::string(50000, 'x');
    const std::string msg = config_error(d, {});
    CHECK(msg.size() < 300);
    CHECK(contains(msg, "found \"xxxxxxxx"));
    CHECK(contains(msg, "... (50000 bytes)\""));
    d = base();
    d["strategy"][std::string(50000, 'k')] = 1;
    // The key shortened, then the strategy's keys listed (about 600 bytes).
    CHECK(config_error(d, {}).size() < 800);
}

// Looking the file up to know it again (std::filesystem::weakly_canonical) threw "filesystem error:
// status: File name too long" before the file was opened.
// A did-you-mean compared an unknown key with each key allowed, letter by letter: a key of 64 MiB (a
// config file may hold 64 MiB) took 5.5 s, a key of 256 KiB a second in the fuzz target's build.
// That the comparison is skipped is counted in test_hw_config ("the reader suggests the nearest key");
// here, the whole refusal's message.
TEST_CASE("an unknown key of megabytes is refused at once, without a did-you-mean") {
    json doc = base();
    doc[std::string(64 << 20, 'k')] = 1;
    const std::string error = config_error(doc, {});
    CHECK(contains(error, "mem.json: $.kkkkkkkk"));
    CHECK(contains(error, "... (67108864 bytes)\"; the keys here are: name, cluster"));
    // A typo still gets its did-you-mean.
    doc = base();
    doc["clustre"] = doc["cluster"];
    CHECK(contains(config_error(doc, {}), "unknown key \"clustre\"; did you mean \"cluster\"?"));
}

TEST_CASE("a file name too long is an error naming the file and why") {
    const std::string name = (fs::temp_directory_path() / (std::string(300, 'a') + ".json")).string();
    CHECK(error_of([&] { (void)hw::load_config(name); }) == name + ": $: cannot open the file: File name too long");
    const fs::path dir = scratch("long-include");
    write(dir / "top.json", R"({"include": ")" + std::string(300, 'b') + R"(.json"})");
    CHECK(error_of([&] { (void)hw::load_config((dir / "top.json").string()); }) ==
          (dir / (std::string(300, 'b') + ".json")).string() + ": $: cannot open the file: File name too long");
    CHECK(error_of([&] { (void)read_trace_file(name); }) == name + ": at $: cannot open the file: File name too long");
}
