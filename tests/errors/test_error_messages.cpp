// Every class of user-facing error names the place of the problem: the file and
// JSON path of a config value, the file, line and column (or CSV cell) of a
// schedule action, the JSON path of a trace field, the rank, operation and layer
// of a failed step, the rank and action of a deadlock. One test per class; the
// full texts are checked where they are short enough to read.
#include "dtsim/simulation.hpp"
#include "dtsim/hw/calibrate.hpp"
#include "dtsim/hw/config.hpp"
#include "dtsim/puzzle/registry.hpp"
#include "dtsim/puzzle/run.hpp"
#include "dtsim/render.hpp"
#include "dtsim/sched/executor.hpp"
#include "dtsim/sched/format.hpp"
#include "dtsim/sched/generators.hpp"
#include "dtsim/sched/schedule.hpp"
#include "dtsim/trace_io.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>
#include <string>

using namespace dtsim;
using nlohmann::json;

namespace {

const std::string kData = DTSIM_ERRORS_DATA;

json base() {
    std::ifstream in(kData + "/base.json");
    return json::parse(in);
}

// The message of the ConfigError that loading `doc` (in memory, named mem.json) throws.
std::string config_error(const json& doc, const std::vector<hw::Override>& overrides = {}) {
    try {
        (void)hw::parse_config(doc, "mem.json", overrides);
    } catch (const hw::ConfigError& e) {
        return e.what();
    }
    return "no error";
}

std::string config_file_error(const std::string& file) {
    try {
        (void)hw::load_config(kData + "/" + file);
    } catch (const hw::ConfigError& e) {
        return e.what();
    }
    return "no error";
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

}  // namespace

TEST_CASE("the base config of these tests loads") { CHECK(config_error(base()) == "no error"); }

// ------------------------------------------------------------------ configs

TEST_CASE("config: invalid JSON names the file, line and column") {
    CHECK(config_file_error("not-json.json") == kData + "/not-json.json: $: invalid JSON at line 3, column 15");
}

// A number too large for a double (nlohmann reports it as out_of_range, not as a
// parse error) is invalid JSON at its line and column, like any other (fuzz_config_include).
TEST_CASE("config: a number out of range names the file, line and column") {
    CHECK(config_file_error("huge-number.json") ==
          kData + "/huge-number.json: $: invalid JSON at line 3, column 24: the number 444e444444 is out of range");
}

TEST_CASE("config: an unknown key names its JSON path and suggests the near miss") {
    json d = base();
    d["strategy"]["tpp"] = 2;
    CHECK(config_error(d) == "mem.json: $.strategy.tpp: unknown key \"tpp\"; did you mean \"tp\"?");
    d = base();
    d["cluster"]["zzzzzzzz"] = 1;
    CHECK(contains(config_error(d), "mem.json: $.cluster.zzzzzzzz: unknown key \"zzzzzzzz\"; the keys here are: name,"));
}

TEST_CASE("config: a value of the wrong type names its path, what was expected and what was found") {
    json d = base();
    d["cluster"]["gpus_per_node"] = "8";
    CHECK(config_error(d) == "mem.json: $.cluster.gpus_per_node: expected a positive integer, found \"8\" (a string)");
    d = base();
    d["cluster"]["links"]["intra_node"]["bandwidth_GBps"] = -1;
    CHECK(config_error(d) == "mem.json: $.cluster.links.intra_node.bandwidth_GBps: expected a positive number, found -1");
    d = base();
    d["strategy"]["recompute"] = "ful";
    CHECK(config_error(d) == "mem.json: $.strategy.recompute: expected one of \"none\", \"selective\", \"selective_op\", \"full\", found "
                             "\"ful\" (did you mean \"full\"?)");
}

TEST_CASE("config: a missing key names the object it is missing from") {
    json d = base();
    d["cluster"].erase("gpu");
    CHECK(config_error(d) == "mem.json: $.cluster: missing key \"gpu\"");
}

TEST_CASE("config: a bad value from an included file names that file") {
    CHECK(config_file_error("bad-value-included.json") ==
          kData + "/bad-cluster-part.json: $.cluster.gpus_per_node: expected a positive integer, found \"eight\" (a "
                  "string)");
}

TEST_CASE("config: a missing include and an include cycle name the include entry") {
    CHECK(contains(config_file_error("missing-include.json"),
                   kData + "/missing-include.json: $.include[1]: included file \"no-such-part.json\" not found"));
    CHECK(contains(config_file_error("cycle-a.json"),
                   kData + "/cycle-b.json: $.include[1]: \"cycle-a.json\" includes itself"));
    CHECK(config_file_error("no-such-file.json") == kData + "/no-such-file.json: $: cannot open the file: No such file or directory");
}

TEST_CASE("config: a value set on the command line is blamed on the --set") {
    CHECK(config_error(base(), {hw::parse_override("strategy.dp=3")}) ==
          "--set strategy.dp=3: $.strategy.dp: tp x pp x dp = 1 x 1 x 3 = 3, but the cluster small has 8 GPUs (1 node "
          "x 8 GPUs per node); the product must equal the GPU count");
    CHECK(error_of([] { (void)hw::parse_setting("strategy.tp"); }) ==
          "--set strategy.tp: expected path=value (for example strategy.tp=4 or strategy.tp=1,2,4)");
    // A value the file's own keys would not take is blamed on the --set too.
    CHECK(config_error(base(), {hw::parse_override("strategy.recompute=ful")}) ==
          "--set strategy.recompute=ful: $.strategy.recompute: expected one of \"none\", \"selective\", \"selective_op\", \"full\", "
          "found \"ful\" (did you mean \"full\"?)");
}

TEST_CASE("config: sizes that disagree across sections name the key to change") {
    json d = base();
    d["training"]["global_batch"] = 12;
    CHECK(config_error(d) == "mem.json: $.training.global_batch: global batch 12 is not a multiple of micro_batch x dp "
                             "= 1 x 8 = 8");
    d = base();
    d["strategy"] = {{"name", "1f1b"}, {"pp", 3}};
    CHECK(contains(config_error(d), "mem.json: $.strategy: tp x pp = 1 x 3 = 3 does not divide the GPU count"));
}

TEST_CASE("config: a dtype the GPU has no peak for names $.model.dtype and where peaks are given") {
    json d = base();
    d["cluster"]["gpu"]["peak_tflops"] = {{"bf16", 100}};
    d["model"]["dtype"] = "fp8";
    const std::string e = config_error(d);
    CHECK(contains(e, "mem.json: $.model.dtype: the model computes in fp8 but the GPU"));
    CHECK(contains(e, "$.cluster.gpu.peak_tflops"));
}

// Sizes whose products overflow an int are multiplied in 64 bits and rejected at their path (fuzz_config).
TEST_CASE("config: sizes whose product overflows an int are rejected at their path") {
    json d = base();
    d["strategy"] = {{"name", "1f1b"}, {"tp", 65536}, {"pp", 65536}};
    CHECK(contains(config_error(d), "mem.json: $.strategy: tp x pp = 65536 x 65536 = 4294967296 does not divide the "
                                    "GPU count"));
    d["strategy"]["dp"] = 65536;
    CHECK(contains(config_error(d), "mem.json: $.strategy.dp: tp x pp x dp = 65536 x 65536 x 65536 = 4294967296 x "
                                    "65536, but the cluster small has 8 GPUs"));
    d = base();
    d["cluster"]["nodes"] = 2147483647;
    CHECK(config_error(d) == "mem.json: $.cluster.nodes: 2147483647 nodes x 8 GPUs per node is more GPUs than dtsim "
                             "counts (at most 2147483647)");
    d = base();
    d["training"]["micro_batch"] = 2147483647;
    CHECK(config_error(d) == "mem.json: $.training.global_batch: global batch 16 is not a multiple of micro_batch x dp "
                             "= 2147483647 x 8 = 17179869176");
}

// ------------------------------------------------------------------- traces

TEST_CASE("trace: a bad field names its JSON path") {
    CHECK(error_of([] { (void)read_trace_file(kData + "/bad-op.trace.json"); }) ==
          kData + "/bad-op.trace.json: at $.ranks[0].events[1].duration: expected >= 0, found -1");
    std::istringstream in(R"({"format": "dtsim-trace", "version": 2, "ranks": []})");
    CHECK(error_of([&] { (void)read_trace_json(in, "v.json"); }) == "v.json: at $.version: expected 1, found 2");
    std::istringstream bad("{\"format\": ");
    CHECK(error_of([&] { (void)read_trace_json(bad, "cut.json"); }) == "cut.json: at $: invalid JSON at line 1, column 12");
    std::istringstream late("{\"format\": \"dtsim-trace\",\n \"version\": 1,\n \"ranks\": [}");
    CHECK(error_of([&] { (void)read_trace_json(late, "late.json"); }) ==
          "late.json: at $: invalid JSON at line 3, column 12");
    std::istringstream missing(R"({"format": "dtsim-trace", "version": 1, "ranks": [{"rank": 0, "events": [{"op": "f"}]}]})");
    CHECK(error_of([&] { (void)read_trace_json(missing, "m.json"); }) ==
          "m.json: at $.ranks[0].events[0]: missing field \"start\"");
    CHECK(error_of([] { (void)read_trace_file(kData + "/no-such.trace.json"); }) ==
          kData + "/no-such.trace.json: at $: cannot open the file: No such file or directory");
}

// ------------------------------------------------------------ ground truth

TEST_CASE("ground truth: a typo in a key is rejected with a did-you-mean, not ignored") {
    CHECK(error_of([] { (void)hw::calib::load_ground_truth({kData + "/typo-ground-truth.json"}); }) ==
          kData + "/typo-ground-truth.json: $.datasets[0].algoritm: unknown key \"algoritm\"; did you mean "
                  "\"algorithm\"?");
    CHECK(error_of([] { (void)hw::calib::load_ground_truth({kData + "/typo-ground-truth-kind.json"}); }) ==
          kData + "/typo-ground-truth-kind.json: $.datasetz: unknown key \"datasetz\"; did you mean \"datasets\"?");
    CHECK(error_of([] { (void)hw::calib::load_ground_truth({kData + "/typo-megatron-column.json"}); }) ==
          kData + "/typo-megatron-column.json: $.columns[3]: unknown column \"layers_per_virtual_stag\"; did you "
                  "mean \"layers_per_virtual_stage\"?");
}

// ---------------------------------------------------------------- schedules

TEST_CASE("schedule text: a bad action names file:line:column and the rank") {
    CHECK(contains(error_of([] { (void)sched::read_schedule_file(kData + "/bad-action.txt"); }),
                   kData + "/bad-action.txt:2:13: rank 1: '1X0': unknown action type 'X'"));
    std::istringstream twice("rank 0: 0F0\nrank 1: 1F0\n  rank 0: 0B0\n");
    CHECK(error_of([&] { (void)sched::read_schedule_text(twice, "t.txt"); }) ==
          "t.txt:3:1: rank 0 is listed twice (first at line 1)");
    std::istringstream orphan("0F0 0B0\n");
    CHECK(error_of([&] { (void)sched::read_schedule_text(orphan, "o.txt"); }) ==
          "o.txt:1:1: expected 'rank N:' before the first action, got '0F0'");
    std::istringstream gap("rank 0: 0F0\nrank 2: 0B0\n");
    CHECK(error_of([&] { (void)sched::read_schedule_text(gap, "g.txt"); }) ==
          "g.txt: rank 1 is missing: the ranks must be 0..2, each listed once");
}

TEST_CASE("schedule CSV: a bad cell names file:line, the cell and the rank") {
    CHECK(contains(error_of([] { (void)sched::read_schedule_file(kData + "/bad-action.csv"); }),
                   kData + "/bad-action.csv:2: cell 3 (rank 1): '1B0x': unexpected 'x' after the action"));
    std::istringstream open_quote("0F0\n\"1F0,1B0\n");
    CHECK(error_of([&] { (void)sched::read_schedule_csv(open_quote, "q.csv"); }) ==
          "q.csv:2: cell 1 (rank 1): unterminated quoted field");
}

TEST_CASE("schedule checks: each problem names the rank, the action and its file position") {
    std::istringstream in("rank 0: 0B0 0F0\n");
    const sched::Schedule s = sched::read_schedule_text(in, "v.txt");
    const std::string msg = error_of([&] { sched::validate(s); });
    CHECK(contains(msg, "v.txt: invalid schedule, 1 problem:\n  rank 0's action 1 (0B0, at v.txt:1:9)"));
}

TEST_CASE("schedule deadlock: names the blocked ranks, their actions and file positions") {
    std::istringstream in("rank 0: 0F0 0B0 0F1 0B1\nrank 1: 1F0 1F1 1B0 1B1\n");
    const sched::Schedule s = sched::read_schedule_text(in, "d.txt");
    const std::string msg = error_of([&] { (void)sched::run_schedule(s); });
    CAPTURE(msg);
    CHECK(contains(msg, "rank 0 is blocked at 0B0 (its action 2 of 4, at d.txt:1:13)"));
    CHECK(contains(msg, "rank 1 is blocked at 1F1 (its action 2 of 4, at d.txt:2:13)"));
}

TEST_CASE("schedule generators: a bad size names the generator and the parameter") {
    CHECK(error_of([] { (void)sched::one_f_one_b(0, 4); }) == "1f1b: the number of ranks p must be at least 1, got 0");
}

// ------------------------------------------------------------ puzzle world

namespace {
template <class F>
std::string puzzle_error(F body, int ranks) {
    static F* current;
    current = &body;
    return error_of([&] {
        (void)puzzle::run_strategy([](puzzle::Model& m) -> Task<> { co_await (*current)(m); }, 2, 2, ranks);
    });
}
}  // namespace

TEST_CASE("puzzle: a failed check names the rank, the operation and the layer") {
    CHECK(puzzle_error(
              [](puzzle::Model& m) -> Task<> {
                  auto [w, o] = m.load_weights(0, 0, 2);
                  m.forward(0, m.get_activation({0}), w);
                  co_return;
              },
              1) == "rank 0: forward (layer 0): weight is incomplete (Weight(layer 0, step 0, shards {0} of 2)); "
                    "allgather it first");
}

TEST_CASE("puzzle: mismatched collectives name the communicator, both ranks and both calls") {
    CHECK(puzzle_error(
              [](puzzle::Model& m) -> Task<> {
                  if (m.rank == 0)
                      co_await m.allreduce(puzzle::WeightGrad{0, IdSet{0}}, 0);
                  else
                      co_await m.allgather(puzzle::Weight{0}, 0);
              },
              2) == "collective #0 on communicator world does not match: rank 0 called allreduce(layer 0) but rank 1 "
                    "called allgather(layer 0)");
}

TEST_CASE("puzzle: the same collective with values of different types is a mismatch, not a crash") {
    // Same operation, same layer: only the value types tell the calls apart.
    CHECK(puzzle_error(
              [](puzzle::Model& m) -> Task<> {
                  if (m.rank == 0)
                      co_await m.allgather(puzzle::Weight{0}, 0);
                  else
                      co_await m.allgather(puzzle::OptState{0}, 0);
              },
              2) == "collective #0 on communicator world does not match: rank 0 and rank 1 both called "
                    "allgather(layer 0), but with values of different types");
}

// ------------------------------------------------------------------ render

TEST_CASE("render: a bad rank selection quotes the selection and the bad token") {
    CHECK(contains(error_of([] { (void)render::parse_rank_selection("1,x", 4); }), "invalid rank selection \"1,x\": \"x\""));
}

// A schedule naming a huge stage or microbatch index is one problem, at the action:
// a problem per (stage, microbatch) pair would take minutes and gigabytes for one
// line of input (fuzz_schedule_reader).
TEST_CASE("schedule checks: an index far beyond the actions is reported once, at the action") {
    std::istringstream in("rank 0: 0F0 0B0 0F16000000\n");
    const sched::Schedule s = sched::read_schedule_text(in, "big.txt");
    const auto problems = sched::find_problems(s);
    REQUIRE(problems.size() == 1);
    CHECK(problems[0] == "1 stages x 16000001 microbatches = 16000001 (stage, microbatch) pairs, each needing a "
                         "forward and a backward, but the schedule has 3 actions: stage 0 is named by rank 0's action "
                         "3 (0F16000000, at big.txt:1:17), microbatch 16000000 by rank 0's action 3 (0F16000000, at "
                         "big.txt:1:17)");
    std::istringstream stages("rank 0: 0F0 0B0 9000000UNSHARD\n");
    const auto p2 = sched::find_problems(sched::read_schedule_text(stages, "st.txt"));
    REQUIRE(p2.size() == 1);
    CHECK(contains(p2[0], "stage 9000000 is named by rank 0's action 3 (9000000UNSHARD, at st.txt:1:17)"));
}
