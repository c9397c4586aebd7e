// JSON configs: includes, overrides, one from_json per struct, and errors that
// name the file, the JSON path, and what was expected against what was found.
#include "dtsim/hw/config.hpp"
#include "dtsim/hw/run.hpp"
#include "dtsim/hw/strategies.hpp"

#include "json/reader.hpp"  // the JSON reader of configs, private to the libraries

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <stdexcept>
#include <string>

using namespace dtsim::hw;

namespace {

const std::string kData = DTSIM_HW_TEST_DATA;

std::string error_of(const std::string& file, const std::vector<Override>& overrides = {}) {
    try {
        load_config(kData + "/" + file, overrides);
    } catch (const ConfigError& e) {
        return e.what();
    }
    return "no error";
}

}  // namespace

TEST_CASE("a config merges its includes, paths relative to the including file") {
    const Config c = load_config(kData + "/run.json");
    CHECK(c.cluster.name == "two-nodes");
    CHECK(c.cluster.gpus() == 16);
    CHECK(c.cluster.gpu.peak(DType::bf16) == doctest::Approx(989.4e12));
    CHECK(c.cluster.gpu.memory_bytes == doctest::Approx(80 * kGiB));
    CHECK(c.cluster.inter_node.bandwidth == doctest::Approx(48e9));
    CHECK(c.cluster.inter_node.p2p_bandwidth == doctest::Approx(48e9));  // defaults to the bandwidth
    CHECK(c.model.spec.ffn == 4 * 2048);                                  // default 4h
    CHECK(c.model.spec.kv_heads == 16);                                   // default: multi-head
    CHECK(c.strategy.bucket_bytes == doctest::Approx(25 * kMiB));
    CHECK(c.strategy.first_bucket_bytes == doctest::Approx(1 * kMiB));
    CHECK(c.microbatches() == 32 / (2 * 4));
    CHECK(c.name == "small / two-nodes / 1f1b");
    CHECK(c.json["model"]["hidden"] == 2048);
}

TEST_CASE("the including file's keys override the included ones, object by object") {
    const Config c = load_config(kData + "/override.json");
    CHECK(c.name == "override");
    CHECK(c.cluster.nodes == 4);
    CHECK(c.cluster.gpus_per_node == 8);  // kept from the cluster file
    CHECK(c.strategy.dp == 8);
    CHECK(c.strategy.tp == 2);  // kept from run.json
}

TEST_CASE("without dp, data parallelism takes the GPUs left over") {
    const Config c = load_config(kData + "/parts/cluster.json",
                                 {parse_override("model={\"layers\": 4, \"hidden\": 1024, \"heads\": 8, \"seq\": 512, "
                                                 "\"vocab\": 0}"),
                                  parse_override("training.global_batch=64"), parse_override("strategy.name=1f1b"),
                                  parse_override("strategy.tp=4"), parse_override("strategy.pp=2")});
    CHECK(c.strategy.dp == 2);
    CHECK(error_of("parts/cluster.json", {parse_override("model={\"layers\": 3, \"hidden\": 1024, \"heads\": 8, "
                                                         "\"seq\": 512, \"vocab\": 0}"),
                                          parse_override("training.global_batch=64"),
                                          parse_override("strategy.name=megatron"), parse_override("strategy.tp=3")}) ==
          "--set strategy.tp=3: $.strategy.tp: tp x pp = 3 x 1 = 3 does not divide the GPU count: the cluster "
          "two-nodes has 16 GPUs (2 nodes x 8 GPUs per node); data parallelism takes the GPUs left over when dp is "
          "not given");
}

TEST_CASE("--set overrides any field after the includes") {
    const Config c = load_config(kData + "/run.json", {parse_override("strategy.tp=4"), parse_override("strategy.dp=2"),
                                                       parse_override("$.strategy.recompute=full"),
                                                       parse_override("name=swept")});
    CHECK(c.strategy.tp == 4);
    CHECK(c.strategy.recompute == Recompute::full);  // not JSON: taken as a string
    CHECK(c.name == "swept");
    CHECK_THROWS_WITH_AS(parse_override("strategy.tp"),
                         "--set strategy.tp: expected path=value (for example strategy.tp=4 or strategy.tp=1,2,4)",
                         ConfigError);
}

TEST_CASE("--set parses one value or a sweep, and a sweep runs every combination in order") {
    const Setting one = parse_setting("strategy.tp=4");
    CHECK(one.path == "strategy.tp");
    CHECK(one.values == std::vector<std::string>{"4"});
    CHECK(parse_setting("strategy.tp=1,2,4").values == std::vector<std::string>{"1", "2", "4"});
    // A JSON array or object is one value, commas and all.
    CHECK(parse_setting("stragglers.slowdown={\"3\": 1.5, \"4\": 2}").values.size() == 1);
    CHECK(parse_setting("x=[1,2]").values == std::vector<std::string>{"[1,2]"});
    CHECK(parse_setting("name=a=b").values == std::vector<std::string>{"a=b"});  // the first '=' splits
    for (const char* bad : {"strategy.tp", "=4", ""}) {
        CAPTURE(bad);
        try {
            (void)parse_setting(bad);
            FAIL("no error");
        } catch (const ConfigError& e) {
            CHECK(std::string(e.what()) == fmt::format("--set {}: expected path=value (for example strategy.tp=4 or "
                                                       "strategy.tp=1,2,4)",
                                                       bad));
            CHECK(e.file == fmt::format("--set {}", bad));
            CHECK(e.path.empty());
            CHECK(dynamic_cast<const dtsim::InputError*>(&e) != nullptr);  // the command line exits 2
        }
    }
    const auto runs = combinations(parse_settings({"training.micro_batch=1,2", "strategy.zero_stage=0,1,2"}));
    REQUIRE(runs.size() == 6);
    CHECK(runs[0][0].value == "1");
    CHECK(runs[0][1].value == "0");
    CHECK(runs[1][1].value == "1");  // the last setting varies fastest
    CHECK(runs[3][0].value == "2");
    CHECK(runs[3][1].value == "0");
    CHECK(runs[5][0].path == "training.micro_batch");
    CHECK(combinations({}).size() == 1);  // no settings: one run as the file says
    const Config c = load_config(kData + "/run.json", runs[4]);
    CHECK(c.training.micro_batch == 2);
    CHECK(c.strategy.zero_stage == 1);
}

TEST_CASE("a hidden size whose default ffn (4 x hidden) an int cannot hold is refused, and taken with its ffn") {
    CHECK(error_of("run.json", {parse_override("model.hidden=536870912"), parse_override("model.heads=1")}) ==
          "--set model.hidden=536870912: $.model.hidden: hidden 536870912: the default ffn, 4 x hidden, is more than "
          "2147483647; give \"ffn\"");
    const Config c = load_config(kData + "/run.json", {parse_override("model.hidden=536870912"),
                                                        parse_override("model.heads=2"), parse_override("model.ffn=1024")});
    CHECK(c.model.spec.ffn == 1024);
}

TEST_CASE("an unknown key is rejected with a did-you-mean, naming the file and the JSON path") {
    CHECK(error_of("typo.json") ==
          kData + "/typo.json: $.strategy.microbatch: unknown key \"microbatch\"; did you mean \"microbatches\"?");
    CHECK(error_of("run.json", {parse_override("strategy.tpp=2")}) ==
          "--set strategy.tpp=2: $.strategy.tpp: unknown key \"tpp\"; did you mean \"tp\"?");
    CHECK(error_of("run.json", {parse_override("strategy.zzzzzzzz=1")}) ==
          "--set strategy.zzzzzzzz=1: $.strategy.zzzzzzzz: unknown key \"zzzzzzzz\"; the keys here are: name, dp, tp, pp, cp, cp_comm, "
          "microbatches, zero_stage, bucket_MiB, first_bucket_MiB, overlap, prefetch, recompute, sequence_parallel, "
          "flash_attention, attention_kernel, algorithm, puzzle, chunks, microbatch_group, schedule_file, sharding, fsdp_impl, "
          "grad_dtype, optimizer_dtype, distributed_optimizer, overlap_param_gather, cross_entropy, tp_comm_overlap, tp_comm_overlap_cfg, tp_async_backward, recompute_early_stop, compile, repeat_kv, norm_kernel, rope_kernel, elementwise_kernels, fp8, "
          "recompute_every, recompute_num_layers, stage_layers, first_stage_layers, last_stage_layers, account_for_embedding, "
          "account_for_loss");
}

TEST_CASE("strategy.puzzle is one of the puzzles' names; a misspelt one gets a did-you-mean at its JSON path") {
    const std::string names = "expected one of \"basic\", \"grad_accum\", \"ddp\", \"wsdp\", \"fsdp\", \"pipeline\", "
                              "\"gpipe\", \"pipeline_fsdp\", found ";
    CHECK(error_of("puzzle-typo.json") ==
          kData + "/puzzle-typo.json: $.strategy.puzzle: " + names + "\"fsdb\" (did you mean \"fsdp\"?)");
    CHECK(error_of("puzzle-typo.json", {parse_override("strategy.puzzle=gpipee")}) ==
          "--set strategy.puzzle=gpipee: $.strategy.puzzle: " + names + "\"gpipee\" (did you mean \"gpipe\"?)");
    const Config c = load_config(kData + "/puzzle-typo.json", {parse_override("strategy.puzzle=wsdp")});
    CHECK(c.strategy.puzzle == "wsdp");
}

TEST_CASE("an error in an included file names that file") {
    CHECK(error_of("bad-include.json") == kData +
                                              "/parts/bad-link.json: $.cluster.links.inter_node.hop_latency: unknown key "
                                              "\"hop_latency\"; did you mean \"hop_latency_us\"?");
}

TEST_CASE("a value of the wrong type says what was expected and what was found") {
    CHECK(error_of("bad-type.json") ==
          kData + "/bad-type.json: $.strategy.tp: expected a positive integer, found \"eight\" (a string)");
    CHECK(error_of("run.json", {parse_override("strategy.name=dpp")}) ==
          "--set strategy.name=dpp: $.strategy.name: expected one of \"ddp\", \"fsdp\", \"megatron\", \"gpipe\", "
          "\"1f1b\", \"interleaved\", \"zbh1\", \"bfs\", \"dualpipev\", \"schedule\", \"puzzle\", found \"dpp\" (did "
          "you mean \"ddp\"?)");
    CHECK(error_of("run.json", {parse_override("training.global_batch=-4")}) ==
          "--set training.global_batch=-4: $.training.global_batch: expected a positive integer, found -4");
    CHECK(error_of("run.json", {parse_override("cluster.gpu.hbm_GiB=0")}) ==
          "--set cluster.gpu.hbm_GiB=0: $.cluster.gpu.hbm_GiB: expected a positive number, found 0");
}

TEST_CASE("inconsistent sizes are explained") {
    CHECK(error_of("wrong-count.json") ==
          kData + "/wrong-count.json: $.strategy.dp: tp x pp x dp = 2 x 2 x 2 = 8, but the cluster two-nodes has 16 GPUs "
                  "(2 nodes x 8 GPUs per node); the product must equal the GPU count");
    CHECK(error_of("wrong-count.json", {parse_override("strategy.pp=1")}) ==
          "--set strategy.pp=1: $.strategy.pp: tp x pp x dp = 2 x 1 x 2 = 4, but the cluster two-nodes has 16 GPUs "
          "(2 nodes x 8 GPUs per node); the product must equal the GPU count");
    CHECK(error_of("uneven-stages.json") ==
          kData + "/uneven-stages.json: $.strategy.pp: 8 layers cannot be split evenly into 3 pipeline stages (8 % 3 = 2)");
    CHECK(error_of("run.json", {parse_override("training.global_batch=30")}) ==
          "--set training.global_batch=30: $.training.global_batch: global batch 30 is not a multiple of micro_batch x "
          "dp = 2 x 4 = 8");
    CHECK(error_of("run.json", {parse_override("strategy.microbatches=3"), parse_override("training.global_batch=32")}) ==
          "--set strategy.microbatches=3: $.strategy.microbatches: 3 microbatches disagree with the training section: "
          "global_batch / (micro_batch x dp) = 32 / (2 x 4) = 4 (the global batch given by --set "
          "training.global_batch=32; without it the global batch follows the microbatches)");
    CHECK(error_of("run.json", {parse_override("strategy.tp=16"), parse_override("strategy.dp=1"),
                                parse_override("strategy.pp=1"), parse_override("model.heads=8")}) ==
          "--set strategy.tp=16: $.strategy.tp: 8 attention heads cannot be split over tp = 16");
    CHECK(error_of("run.json", {parse_override("strategy.name=ddp")}) ==
          kData + "/run.json: $.strategy.tp: strategy \"ddp\" is pure data parallelism: tp and pp must be 1 (found tp "
                  "2, pp 2); use \"megatron\" or a pipeline (\"1f1b\", \"interleaved\", ...) to combine them");
}

TEST_CASE("microbatches given on the command line without the global batch: the global batch follows") {
    // run.json: global_batch 32, micro_batch 2, dp 4 (4 microbatches).
    for (const int m : {1, 3, 8, 16}) {
        CAPTURE(m);
        const Config c = load_config(kData + "/run.json", {parse_override(fmt::format("strategy.microbatches={}", m))});
        CHECK(c.training.global_batch == m * 2 * 4);
        CHECK(c.microbatches() == m);
        CHECK(c.json["training"]["global_batch"] == m * 2 * 4);  // the document as run says so too
    }
    // With the micro batch and dp given too, from all of them.
    const Config c = load_config(kData + "/run.json", {parse_override("strategy.microbatches=5"),
                                                       parse_override("training.micro_batch=3"),
                                                       parse_override("strategy.dp=2"), parse_override("strategy.tp=4")});
    CHECK(c.training.global_batch == 5 * 3 * 2);
    // The same through a --set of the whole section, and in a document in memory.
    CHECK(load_config(kData + "/run.json", {parse_override(R"(strategy={"name": "1f1b", "dp": 4, "tp": 2, "pp": 2, "microbatches": 6})")})
              .training.global_batch == 6 * 2 * 4);
    // Given on the command line too, the global batch wins, and must agree.
    CHECK(load_config(kData + "/run.json", {parse_override("strategy.microbatches=8"),
                                            parse_override("training.global_batch=64")})
              .microbatches() == 8);
    CHECK(error_of("run.json", {parse_override("training.global_batch=64"), parse_override("strategy.microbatches=2")}) ==
          "--set strategy.microbatches=2: $.strategy.microbatches: 2 microbatches disagree with the training section: "
          "global_batch / (micro_batch x dp) = 64 / (2 x 4) = 8 (the global batch given by --set "
          "training.global_batch=64; without it the global batch follows the microbatches)");
    // A global batch past an int is an error at the microbatches.
    CHECK(error_of("run.json", {parse_override("strategy.microbatches=2000000000")}) ==
          "--set strategy.microbatches=2000000000: $.strategy.microbatches: the global batch would follow the "
          "microbatches: microbatches x micro_batch x dp = 2000000000 x 2 x 4 sequences, more than dtsim counts (at "
          "most 2147483647)");
}

TEST_CASE("microbatches a file gives are checked against its global batch, as before") {
    // run.json merged, with "microbatches": 4 in the document itself (global_batch 32, micro_batch 2, dp 4).
    nlohmann::json d = load_config(kData + "/run.json").json;
    d["strategy"]["microbatches"] = 4;
    CHECK(parse_config(d, "mem.json").training.global_batch == 32);
    // A --set of the micro batch does not make the global batch follow the file's microbatches.
    try {
        (void)parse_config(d, "mem.json", {parse_override("training.micro_batch=1")});
        FAIL("no error");
    } catch (const ConfigError& e) {
        CHECK(std::string(e.what()) == "mem.json: $.strategy.microbatches: 4 microbatches disagree with the training "
                                       "section: global_batch / (micro_batch x dp) = 32 / (1 x 4) = 8");
    }
    // A --set of the microbatches does.
    CHECK(parse_config(d, "mem.json", {parse_override("strategy.microbatches=2")}).training.global_batch == 16);
}

TEST_CASE("missing keys, missing files, include cycles and malformed JSON are errors with a place") {
    CHECK(error_of("run.json", {parse_override("model={\"layers\": 2}")}) ==
          "--set model={\"layers\": 2}: $.model: missing key \"hidden\"");
    CHECK(error_of("missing-include.json") ==
          kData + "/missing-include.json: $.include[0]: included file \"parts/nosuch.json\" not found (looked for " +
              kData + "/parts/nosuch.json)");
    CHECK(error_of("cycle.json") ==
          kData + "/cycle.json: $.include: \"cycle.json\" includes itself (through " + kData + "/cycle.json)");
    CHECK(error_of("not-json.json") == kData + "/not-json.json: $: invalid JSON at line 2, column 30");
    CHECK(error_of("nosuch.json") == kData + "/nosuch.json: $: cannot open the file: No such file or directory");
}

namespace {

namespace reader = dtsim::json_reader;

const reader::Dialect kTestDialect{.raise = [](const std::string& file, const std::string& path,
                                               const std::string& message) -> void {
    throw std::runtime_error(file + ": " + path + ": " + message);
}};

std::string reader_error(const reader::Json& doc, void (*read)(const reader::Value&)) {
    try {
        const reader::Document d(doc, "t.json", kTestDialect);
        read(d.root());
    } catch (const std::runtime_error& e) {
        return e.what();
    }
    return "no error";
}

}  // namespace

TEST_CASE("the reader suggests the nearest key or choice, within a few edits") {
    CHECK(reader::edit_distance("tpp", "tp") == 1);
    CHECK(reader::edit_distance("microbatch", "microbatches") == 2);
    CHECK(reader::edit_distance("", "abc") == 3);
    CHECK(reader::edit_distance("kitten", "sitting") == 3);
    const std::string_view keys[] = {"tp", "pp", "microbatches"};
    CHECK(reader::nearest("tpp", keys) == "tp");
    CHECK(reader::nearest("microbatch", keys) == "microbatches");
    CHECK(reader::nearest("zzzzzzzz", keys).empty());
    // A key of megabytes is no typo of any of them, and is not compared with them letter by letter
    // (64 MiB against each key took seconds): counted, not timed.
    std::size_t compared = 0;
    CHECK(reader::nearest(std::string(64 << 20, 'k'), keys, &compared).empty());
    CHECK(compared == 0);
    CHECK(reader::nearest("microbatch", keys, &compared) == "microbatches");
    CHECK(compared == 1);  // only "microbatches" is within 3 letters of its length
    CHECK(reader_error({{"s", {{"tpp", 2}}}}, [](const reader::Value& v) { v["s"].keys({"tp", "pp"}); }) ==
          "t.json: $.s.tpp: unknown key \"tpp\"; did you mean \"tp\"?");
    CHECK(reader_error({{"zzzz", 2}}, [](const reader::Value& v) { v.keys({"tp", "pp"}); }) ==
          "t.json: $.zzzz: unknown key \"zzzz\"; the keys here are: tp, pp");
    CHECK(reader_error({{"source", "a paper"}, {"note", "why"}, {"tp", 1}},
                       [](const reader::Value& v) { v.keys({"tp"}); }) == "no error");
    CHECK(reader_error({{"r", "ful"}}, [](const reader::Value& v) { (void)v["r"].choice({"none", "full"}); }) ==
          "t.json: $.r: expected \"none\" or \"full\", found \"ful\" (did you mean \"full\"?)");
    CHECK(reader_error({{"a", {1, {{"b", "x"}}}}}, [](const reader::Value& v) { (void)v["a"].at(1)["b"].real(dtsim::Range{"a number", "", -1, 1}); }) ==
          "t.json: $.a[1].b: expected a number, found \"x\" (a string)");
    CHECK(reader_error({{"a", {1}}}, [](const reader::Value& v) { (void)v["a"].at(0)["b"]; }) ==
          "t.json: $.a[0]: expected an object, found 1");
}

TEST_CASE("the strategy names a config takes are the registry's") {
    std::string names;
    for (const auto& s : hw_strategies()) names += std::string(names.empty() ? "" : " ") + std::string(s.name);
    CHECK(names == "ddp fsdp megatron gpipe 1f1b interleaved zbh1 bfs dualpipev schedule puzzle");
    CHECK(is_scheduled_pipeline("zbh1"));
    CHECK_FALSE(is_scheduled_pipeline("1f1b"));
    const bool puzzle_runs_elsewhere = find_hw_strategy("puzzle")->run == nullptr;
    CHECK(puzzle_runs_elsewhere);
    const bool ddp_runs_ddp = find_hw_strategy("ddp")->run == &ddp;
    CHECK(ddp_runs_ddp);
}

TEST_CASE("fsdp is ZeRO stage 3: another stage is an error, none given is 3") {
    CHECK(load_config(kData + "/run.json", {parse_override("strategy.name=fsdp"), parse_override("strategy.tp=1"),
                                            parse_override("strategy.pp=1"), parse_override("strategy.dp=16")})
              .strategy.zero_stage == 3);
    CHECK(error_of("run.json", {parse_override("strategy.name=fsdp"), parse_override("strategy.tp=1"),
                                parse_override("strategy.pp=1"), parse_override("strategy.dp=16"),
                                parse_override("strategy.zero_stage=1")}) ==
          "--set strategy.zero_stage=1: $.strategy.zero_stage: strategy \"fsdp\" is ZeRO stage 3, found 1");
}

TEST_CASE("every shipped config loads") {
    int n = 0;
    for (const auto& entry : std::filesystem::directory_iterator(std::string(DTSIM_CONFIGS) + "/runs")) {
        if (entry.path().extension() != ".json") continue;
        CAPTURE(entry.path().string());
        CHECK_NOTHROW(load_config(entry.path().string()));
        ++n;
    }
    CHECK(n >= 6);
}

TEST_CASE("float8 linears need a GPU with fp8 GEMMs and a model that is not fp8 already") {
    CHECK(error_of("run.json", {parse_override("strategy.fp8=te")}) ==
          "--set strategy.fp8=te: $.strategy.fp8: float8 linears need fp8 GEMMs, but the GPU H100 has no fp8 peak in "
          "$.cluster.gpu.peak_tflops (Hopper and later have them)");
    const Override fp8_peak = parse_override("cluster.gpu.peak_tflops={\"bf16\": 989.4, \"fp8\": 1978.9}");
    CHECK(error_of("run.json", {parse_override("strategy.fp8=torchao"), fp8_peak}) == "no error");
    CHECK(error_of("run.json", {parse_override("strategy.fp8=te"), fp8_peak, parse_override("model.dtype=fp8")}) ==
          "--set strategy.fp8=te: $.strategy.fp8: float8 linears (\"te\") run the linears in fp8 and the rest in the "
          "model's dtype, which is fp8 already; give the model \"dtype\": \"bf16\"");
    CHECK(error_of("run.json", {parse_override("strategy.fp8=e4m3")}).find(
              "$.strategy.fp8: expected one of \"none\", \"te\", \"torchao\"") != std::string::npos);
}

TEST_CASE("recompute_every and recompute_num_layers choose the layers of a recompute policy") {
    CHECK(error_of("run.json", {parse_override("strategy.recompute_every=2")}) ==
          "--set strategy.recompute_every=2: $.strategy.recompute_every: chooses the layers \"recompute\" applies "
          "to, but recompute is \"none\"");
    const Override full = parse_override("strategy.recompute=full");
    CHECK(error_of("run.json", {full, parse_override("strategy.recompute_every=2")}) == "no error");
    CHECK(error_of("run.json", {full, parse_override("strategy.recompute_every=2"),
                                parse_override("strategy.recompute_num_layers=1")}) ==
          "--set strategy.recompute_num_layers=1: $.strategy.recompute_num_layers: give one of \"recompute_every\" "
          "(every k-th layer, torchtitan) and \"recompute_num_layers\" (the first n of each stage, Megatron-LM), "
          "not both");
    // run.json: 1f1b over pp 2.
    const std::string e = error_of("run.json", {full, parse_override("strategy.recompute_num_layers=99")});
    CHECK(e.find("$.strategy.recompute_num_layers: the first 99 layers of each model chunk, but a chunk has") !=
          std::string::npos);
    CHECK(error_of("run.json", {full, parse_override("strategy.recompute_every=0")}).find(
              "$.strategy.recompute_every: expected a positive integer, found 0") != std::string::npos);
}

TEST_CASE("the recompute policy as reports print it, with English ordinals") {
    StrategyConfig s;
    CHECK(recompute_text(s) == "none");
    s.recompute = Recompute::full;
    CHECK(recompute_text(s) == "full");
    const std::pair<int, const char*> ordinals[] = {{2, "2nd"},   {3, "3rd"},   {4, "4th"},   {11, "11th"},
                                                    {12, "12th"}, {13, "13th"}, {21, "21st"}, {22, "22nd"},
                                                    {23, "23rd"}, {101, "101st"}, {111, "111th"}};
    for (const auto& [k, text] : ordinals) {
        s.recompute_every = k;
        CHECK(recompute_text(s) == fmt::format("full every {} layer", text));
    }
    s.recompute_every = 1;
    s.recompute_num_layers = 1;
    CHECK(recompute_text(s) == "full, the first 1 layer of each chunk");
    s.recompute_num_layers = 3;
    CHECK(recompute_text(s) == "full, the first 3 layers of each chunk");
}

TEST_CASE("selective_op needs fused attention; grad_dtype and optimizer_dtype are float dtypes") {
    CHECK(error_of("run.json", {parse_override("strategy.recompute=selective_op")}) ==
          "--set strategy.recompute=selective_op: $.strategy.recompute: \"selective_op\" (torchtitan's per-op policy) "
          "keeps the fused attention's output: it needs \"flash_attention\": true");
    CHECK(error_of("run.json", {parse_override("strategy.recompute=selective_op"),
                                parse_override("strategy.flash_attention=true")}) == "no error");
    CHECK(error_of("run.json", {parse_override("strategy.grad_dtype=fp8")}).find(
              "$.strategy.grad_dtype: expected one of \"fp32\", \"bf16\", \"fp16\"") != std::string::npos);
    CHECK(error_of("run.json", {parse_override("strategy.optimizer_dtype=fp8")}).find(
              "$.strategy.optimizer_dtype: expected one of \"fp32\", \"bf16\", \"fp16\"") != std::string::npos);
    CHECK(error_of("run.json", {parse_override("strategy.optimizer_dtype=bf16")}) == "no error");
}

TEST_CASE("Apex's distributed optimizer needs ZeRO stage 1 or 2 under a Megatron strategy") {
    const std::string e = error_of("run.json", {parse_override("strategy.distributed_optimizer=apex")});
    CHECK(e.find("$.strategy.distributed_optimizer: \"apex\" is NeMo's distributed Adam") != std::string::npos);
    CHECK(e.find("this strategy runs ZeRO stage 0") != std::string::npos);
    CHECK(error_of("run.json", {parse_override("strategy.distributed_optimizer=apex"),
                                parse_override("strategy.zero_stage=1")}) == "no error");
    CHECK(error_of("run.json", {parse_override("strategy.distributed_optimizer=deepspeed")}).find(
              "$.strategy.distributed_optimizer: expected \"megatron\" or \"apex\", found \"deepspeed\"") != std::string::npos);
}

TEST_CASE("collectives take SMs from the compute beside them unless the cluster says not") {
    CHECK(load_config(kData + "/run.json").cluster.gpu.collectives_take_sms);
    CHECK_FALSE(load_config(kData + "/run.json", {parse_override("cluster.gpu.collectives_take_sms=false")})
                    .cluster.gpu.collectives_take_sms);
    CHECK(error_of("run.json", {parse_override("cluster.gpu.collectives_take_sms=2")})
              .find("$.cluster.gpu.collectives_take_sms") != std::string::npos);
}

TEST_CASE("a power limit needs the part's TDP and cannot exceed it") {
    CHECK(error_of("run.json", {parse_override("cluster.gpu.power_limit_W=500")}).find(
              "$.cluster.gpu.power_limit_W: a power limit needs the part's TDP: give $.cluster.gpu.tdp_W") !=
          std::string::npos);
    CHECK(error_of("run.json", {parse_override("cluster.gpu.tdp_W=700"), parse_override("cluster.gpu.power_limit_W=800")})
              .find("$.cluster.gpu.power_limit_W: 800 W is above the part's TDP of 700 W (tdp_W)") != std::string::npos);
    CHECK(error_of("run.json", {parse_override("cluster.gpu.tdp_W=700"), parse_override("cluster.gpu.power_limit_W=0")})
              .find("$.cluster.gpu.power_limit_W") != std::string::npos);
    CHECK(error_of("run.json", {parse_override("cluster.gpu.tdp_W=700"), parse_override("cluster.gpu.power_limit_W=500")}) ==
          "no error");
    CHECK(load_config(kData + "/run.json", {parse_override("cluster.gpu.tdp_W=700"),
                                              parse_override("cluster.gpu.power_limit_W=500")})
              .cluster.gpu.power_limit_watts == 500);
    // A fitted power law: its exponent in (0, 4], the data sets it came from.
    const Config fitted = load_config(
        kData + "/run.json", {parse_override("cluster.gpu.tdp_W=700"), parse_override("cluster.gpu.power_limit_W=500"),
                              parse_override(R"(cluster.gpu.power_clock={"exponent": 0.5, "datasets": ["a:b"]})")});
    CHECK(fitted.cluster.gpu.power_exponent == 0.5);
    CHECK(fitted.cluster.gpu.power_datasets == std::vector<std::string>{"a:b"});
    CHECK(fitted.cluster.gpu.tensor_clock_scale() == doctest::Approx(std::sqrt(5.0 / 7)));
    CHECK(error_of("run.json", {parse_override(R"(cluster.gpu.power_clock={"exponent": 0})")})
              .find("$.cluster.gpu.power_clock.exponent") != std::string::npos);
    CHECK(error_of("run.json", {parse_override(R"(cluster.gpu.power_clock={"exponent": 0.5, "exponant": 1})")})
              .find("$.cluster.gpu.power_clock.exponant: unknown key") != std::string::npos);
    CHECK(error_of("run.json", {parse_override("cluster.gpu.power_clock=0.5")}).find("$.cluster.gpu.power_clock") !=
          std::string::npos);
}

TEST_CASE("strategy.norm_kernel is fused or composed, and reaches the layer split") {
    CHECK_FALSE(layer_split(load_config(kData + "/run.json")).composed_norm);
    CHECK(layer_split(load_config(kData + "/run.json", {parse_override("strategy.norm_kernel=composed")})).composed_norm);
    CHECK_FALSE(layer_split(load_config(kData + "/run.json", {parse_override("strategy.norm_kernel=fused")})).composed_norm);
    CHECK(error_of("run.json", {parse_override("strategy.norm_kernel=fusd")}).find("$.strategy.norm_kernel") !=
          std::string::npos);
}

TEST_CASE("strategy.rope_kernel: given, or by the model's MLP and the strategy's code") {
    const auto rope = [](std::vector<Override> o) {
        return layer_split(load_config(kData + "/run.json", std::move(o))).rope;
    };
    // A GeLU model has no rotary embedding (GPT-3's learned positions, MPT's ALiBi); a SwiGLU one (the
    // Llama form) rotates, as torchtitan does it under PyTorch's strategies, fused under Megatron's.
    CHECK(rope({parse_override("model.mlp=gelu")}) == RopeKernel::none);
    CHECK(rope({parse_override("model.mlp=swiglu")}) == RopeKernel::fused);  // 1f1b: Megatron's
    CHECK(rope({parse_override("model.mlp=swiglu"), parse_override("strategy.name=fsdp"), parse_override("strategy.tp=1"),
                parse_override("strategy.pp=1"), parse_override("strategy.dp=16")}) == RopeKernel::complex);
    CHECK(rope({parse_override("model.mlp=swiglu"), parse_override("strategy.name=ddp"), parse_override("strategy.tp=1"),
                parse_override("strategy.pp=1"), parse_override("strategy.dp=16")}) == RopeKernel::complex);
    // torchtitan's 3D: a pipeline with ZeRO-3 in its stages runs PyTorch's code; with ZeRO-1 Megatron's.
    CHECK(rope({parse_override("model.mlp=swiglu"), parse_override("strategy.zero_stage=3")}) == RopeKernel::complex);
    CHECK(rope({parse_override("model.mlp=swiglu"), parse_override("strategy.zero_stage=1")}) == RopeKernel::fused);
    // Megatron-FSDP is Megatron-Core's code: Transformer Engine's kernel.
    CHECK(rope({parse_override("model.mlp=swiglu"), parse_override("strategy.name=fsdp"), parse_override("strategy.tp=1"),
                parse_override("strategy.pp=1"), parse_override("strategy.dp=16"),
                parse_override("strategy.fsdp_impl=megatron")}) == RopeKernel::fused);
    CHECK(rope({parse_override("model.mlp=swiglu"), parse_override("strategy.rope_kernel=none")}) == RopeKernel::none);
    CHECK(rope({parse_override("model.mlp=gelu"), parse_override("strategy.rope_kernel=complex")}) == RopeKernel::complex);
    CHECK(error_of("run.json", {parse_override("strategy.rope_kernel=real")})
              .ends_with("$.strategy.rope_kernel: expected one of \"complex\", \"fused\", \"none\", found \"real\""));
}

TEST_CASE("strategy.repeat_kv reaches the layer split; it is a boolean") {
    CHECK_FALSE(layer_split(load_config(kData + "/run.json")).repeat_kv);
    CHECK(layer_split(load_config(kData + "/run.json", {parse_override("strategy.repeat_kv=true")})).repeat_kv);
    CHECK(error_of("run.json", {parse_override("strategy.repeat_kv=2")}).find("$.strategy.repeat_kv") !=
          std::string::npos);
}
