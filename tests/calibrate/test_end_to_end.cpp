// End-to-end ground truth (dtsim/hw/end_to_end.hpp): the shipped files load and every row dtsim
// can express builds a config parse_config accepts; one row's config and FLOPs checked by hand;
// the prediction's arithmetic; validate's report; and malformed rows are errors naming their path.
#include "dtsim/hw/calibrate.hpp"
#include "dtsim/hw/end_to_end.hpp"
#include "dtsim/hw/transformer.hpp"
#include "dtsim/hw/units.hpp"
#include "dtsim/hw/workload.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

using namespace dtsim::hw;
namespace cal = dtsim::hw::calib;
namespace fs = std::filesystem;

namespace {

const std::string test_data = DTSIM_CALIBRATE_TEST_DATA;
const std::string repo = std::string(DTSIM_CONFIGS) + "/..";

std::string write_temp(const std::string& name, const std::string& text) {
    const auto p = fs::temp_directory_path() / name;
    std::ofstream(p) << text;
    return p.string();
}

nlohmann::json shipped_cluster(const std::string& name) {
    return cal::read_cluster_file(std::string(DTSIM_CONFIGS) + "/clusters/" + name + ".json");
}

const cal::EndToEndSet& set_named(const cal::GroundTruth& d, const std::string& id) {
    for (const auto& s : d.end_to_end)
        if (s.id == id) return s;
    FAIL("no set " << id);
    throw std::logic_error("unreachable");
}

const cal::EndToEndRow& row_named(const cal::EndToEndSet& s, const std::string& id) {
    for (const auto& r : s.rows)
        if (r.id == id) return r;
    FAIL("no row " << id << " in " << s.id);
    throw std::logic_error("unreachable");
}

// A one-set file on the test cluster (H100 family, 8 GPUs a node, 1000 bf16 TFLOP/s).
std::string one_set(const std::string& rows, const std::string& extra = "") {
    return R"({"description": "test", "sets": [{"id": "tiny", "source": "made up", "cluster": "test-h100", )" + extra +
           R"("defaults": {"model": {"layers": 4, "hidden": 1024, "heads": 8, "seq": 1024, "vocab": 32000, "dtype": "bf16"},
                        "strategy": {"name": "fsdp", "flash_attention": true}},
           "rows": [)" + rows + "]}]}";
}

template <typename F>
ConfigError config_error(F&& f) {
    try {
        f();
    } catch (const ConfigError& e) {
        return e;
    }
    FAIL("no ConfigError");
    throw std::logic_error("unreachable");
}


// `data` validated on the test cluster: two sets (the times and the peaks) expected.
std::vector<cal::ValidationSet> validated_on_test_cluster(const cal::GroundTruth& data) {
    cal::ValidateOptions o;
    o.clusters = {test_data + "/test-cluster.json"};
    auto sets = cal::validate(data, o);
    REQUIRE(sets.size() == 2);
    return sets;
}
}  // namespace

TEST_CASE("the shipped end-to-end files load and every expressible row is a config dtsim accepts") {
    const auto data = cal::load_ground_truth({repo + "/calibration/data/end_to_end_h100.json",
                                              repo + "/calibration/data/end_to_end_a100.json",
                                              repo + "/calibration/data/end_to_end_h100_dgxc.json"});
    REQUIRE(data.end_to_end.size() == 16 + 14);
    std::size_t not_expressible = 0, expressible = 0;
    for (const auto& s : data.end_to_end) {
        CHECK_FALSE(s.source.empty());
        CHECK_FALSE(s.rows.empty());
        const auto cluster = shipped_cluster(s.cluster);
        for (const auto& r : s.rows) {
            if (!r.expressible()) {
                ++not_expressible;
                continue;
            }
            ++expressible;
            INFO(s.id << " / " << r.id);
            const Config c = cal::parse_end_to_end_row(s, r, cluster);
            CHECK(c.gpus() == r.gpus);
        }
    }
    CHECK(expressible == 295 + 82);
    CHECK(not_expressible == 0);
    // Each row dtsim cannot run yet is listed as skipped, with its reason.
    CHECK(data.skipped.size() == not_expressible);
    for (const auto& line : data.skipped) CHECK(line.find(": not expressible yet: ") != std::string::npos);
    const auto ids = cal::data_set_ids(data);
    CHECK(std::find(ids.begin(), ids.end(), "megatron_core_h100_weak_scaling") != ids.end());
}

TEST_CASE("a Megatron-Core row becomes the config and the FLOP count worked out by hand") {
    const auto data = cal::load_ground_truth({repo + "/calibration/data/end_to_end_h100.json"});
    const auto& set = set_named(data, "megatron_core_h100_weak_scaling");
    const auto& row = row_named(set, "1.7B");
    const Config c = cal::parse_end_to_end_row(set, row, shipped_cluster("dgx-h100"));
    // 48 GPUs: 6 DGX H100 nodes; tp 1 x dp 48 with the distributed optimizer; 192 sequences of
    // 4096 tokens, micro batch 1 (the set's default): 192 / 48 = 4 microbatches per GPU.
    CHECK(c.cluster.nodes == 6);
    CHECK(c.cluster.gpus_per_node == 8);
    CHECK(c.strategy.name == "megatron");
    CHECK(c.strategy.tp == 1);
    CHECK(c.strategy.dp == 48);
    CHECK(c.strategy.zero_stage == 1);
    CHECK_FALSE(c.strategy.sequence_parallel);  // tp 1
    CHECK(c.strategy.flash_attention);
    CHECK(c.microbatches() == 4);
    CHECK(c.model.spec.layers == 24);
    CHECK(c.model.spec.hidden == 2048);
    CHECK(c.model.spec.heads == 16);
    CHECK(c.model.spec.ffn == 4 * 2048);
    CHECK(c.model.spec.seq == 4096);
    CHECK(c.model.spec.vocab == 131072);
    CHECK(c.model.spec.dtype == DType::bf16);
    // Megatron's count: 12 B s l h^2 (1 + g/a + s/h + f/h + V/2lh)
    //   = 12 x 192 x 4096 x 24 x 2048^2 x (1 + 1 + 2 + 4 + 131072 / 98304)
    //   = 949,978,046,398,464 x 28/3 = 8,866,461,766,385,664 FLOPs per step.
    CHECK(cal::megatron_core_flops(c.model.spec, 192) == doctest::Approx(8866461766385664.0).epsilon(1e-12));
    CHECK(cal::counted_flops(cal::FlopCount::megatron, c) == doctest::Approx(8866461766385664.0).epsilon(1e-12));
    // So the measured 408.8 TFLOP/s per GPU is a step of 8.8665e15 / (48 x 408.8e12) = 0.4519 s,
    // 192 x 4096 / 0.4519 / 48 = 36,257 tokens per second per GPU.
    REQUIRE(row.measured.metric == cal::EndToEndMetric::tflops_per_gpu);
    CHECK(row.measured.value == 408.8);
    CHECK(row.measured.flops == cal::FlopCount::megatron);
    const double step = 8866461766385664.0 / (48 * 408.8e12);
    CHECK(step == doctest::Approx(0.4519).epsilon(1e-3));
    CHECK(192 * 4096 / step / 48 == doctest::Approx(36257).epsilon(1e-3));
}

TEST_CASE("Llama 3 405B's rows run Meta's layout, their TFLOP/s counted as PaLM's appendix B by hand") {
    const auto data = cal::load_ground_truth({repo + "/calibration/data/end_to_end_h100.json"});
    const auto set = std::find_if(data.end_to_end.begin(), data.end_to_end.end(),
                                  [](const auto& s) { return s.id == "llama3_405b_h100"; });
    REQUIRE(set != data.end_to_end.end());
    REQUIRE(set->rows.size() == 3);
    const Config c = cal::parse_end_to_end_row(*set, set->rows[1], shipped_cluster(set->cluster));
    CHECK(c.gpus() == 16384);
    CHECK(c.strategy.chunks == 8);
    // One layer a chunk; the first chunk only the embedding, the last only the output layer.
    const std::vector<int> split = stage_layers_of(c, model_chunks(c));
    REQUIRE(split.size() == 128);
    CHECK(split.front() == 0);
    CHECK(split.back() == 0);
    CHECK(std::count(split.begin(), split.end(), 1) == 126);
    CHECK(c.microbatches() == 16);
    // Parameters by hand: a layer's q and o 16384^2 each, k and v 16384 x 1024 each, the SwiGLU MLP
    // 3 x 16384 x 53248, two norms of 16384: 3,187,703,808; x 126 = 401,650,679,808; the input
    // embedding and the output layer 128256 x 16384 = 2,101,346,304 each: 405,853,372,416 (Llama 3.1
    // 405B's 405,853,388,800 less the final norm's 16,384, which dtsim does not count).
    CHECK(c.model.spec.total_params() == doctest::Approx(405853372416.0).epsilon(1e-12));
    // PaLM's count a token: 6 x (405,853,372,416 - 2,101,346,304) + 12 x 126 x 16384 x 8192
    //   = 2,422,512,156,672 + 202,937,204,736 = 2,625,449,361,408; a step of 2,048 x 8,192 tokens.
    const double step_flops = 2625449361408.0 * 2048 * 8192;
    CHECK(cal::palm_flops(c.model.spec, 2048) == doctest::Approx(step_flops).epsilon(1e-12));
    CHECK(set->rows[1].measured.flops == cal::FlopCount::palm);
    CHECK(cal::counted_flops(cal::FlopCount::palm, c) == doctest::Approx(step_flops).epsilon(1e-12));
}

TEST_CASE("an llm-foundry row has the published model's parameters, but for biases and positions") {
    const auto data = cal::load_ground_truth({repo + "/calibration/data/end_to_end_h100.json"});
    const auto& set = set_named(data, "llm_foundry_mpt_h100_bf16");
    const auto& row = row_named(set, "7b s2048 8gpu mb6");
    const Config c = cal::parse_end_to_end_row(set, row, shipped_cluster("dgx-h100"));
    CHECK(c.cluster.nodes == 1);
    CHECK(c.strategy.name == "fsdp");
    CHECK(c.strategy.sharding == "full");
    CHECK(c.strategy.recompute == Recompute::none);
    CHECK(c.microbatches() == 1);  // 48 sequences, micro batch 6, 8 GPUs
    // The table's NumParams, 6,658,859,008, is 12 L h^2 + 13 L h + 2 h + V h + s h: the linears'
    // biases (9 h per layer), LayerNorms with weight and bias (4 h per layer, 2 h at the end) and a
    // learned positional embedding (s h). dtsim counts the norms' weights only and no positions:
    // 32 x (12 x 4096^2 + 2 x 4096) + 50368 x 4096 = 6,649,020,416.
    CHECK(c.model.spec.total_params() == doctest::Approx(6649020416.0).epsilon(1e-9));
    CHECK(6658859008.0 - 32 * 11 * 4096.0 - 2 * 4096.0 - 2048 * 4096.0 == 6649020416.0);
}

// llm-foundry's MPT runs take flash-attn's fused cross-entropy (its default loss_fn): the bf16
// logits kept (2 bytes each) and their bf16 gradient (2 more in the backward), where PyTorch's fp32
// loss peaks at 12 bytes a logit. 760M at micro batch 24 and seq 2048 ran on 8 H100s of 80 GB
// (2.5e9 logits a microbatch); with PyTorch's loss dtsim would say it does not fit.
TEST_CASE("llm-foundry's rows take the fused loss, with which a run that ran on 80 GB fits") {
    const auto data = cal::load_ground_truth({repo + "/calibration/data/end_to_end_h100.json"});
    const auto& set = set_named(data, "llm_foundry_mpt_h100_bf16");
    Config c = cal::parse_end_to_end_row(set, row_named(set, "760m s2048 8gpu mb24"), shipped_cluster("dgx-h100"));
    REQUIRE(c.strategy.cross_entropy == CrossEntropy::fused);
    const RunResult fused = simulate(c);
    CHECK_FALSE(fused.report.oom.has_value());
    const double logits = 24.0 * 2048 * 50368;
    c.strategy.cross_entropy = CrossEntropy::pytorch;
    const RunResult pytorch = simulate(c);
    CHECK(pytorch.report.oom.has_value());
    // The two peaks differ by the loss's tensors at its backward peak alone: 12 against 4 bytes a logit.
    CHECK(pytorch.report.peak.bytes - fused.report.peak.bytes == doctest::Approx(8 * logits).epsilon(1e-6));
}

TEST_CASE("a row is predicted in the unit it was measured in") {
    const std::string file = write_temp("dtsim_e2e_predict.json", one_set(R"(
        {"id": "tokens", "gpus": 8, "training": {"global_batch": 16, "micro_batch": 2}, "measured": {"tokens_per_s_per_gpu": 1000, "peak_memory_GiB": 20}},
        {"id": "step", "gpus": 8, "training": {"global_batch": 16, "micro_batch": 2}, "measured": {"step_time_s": 0.5}},
        {"id": "tflops", "gpus": 8, "training": {"global_batch": 16, "micro_batch": 2}, "measured": {"tflops_per_gpu": 100, "flops": "megatron"}},
        {"id": "mfu", "gpus": 8, "training": {"global_batch": 16, "micro_batch": 2}, "measured": {"mfu": 0.4, "flops": "megatron_sc21", "peak_tflops": 500}},
        {"id": "4 GPUs", "gpus": 4, "training": {"global_batch": 8, "micro_batch": 2}, "measured": {"step_time_s": 0.5}},
        {"id": "palm", "gpus": 8, "training": {"global_batch": 16, "micro_batch": 2}, "measured": {"tflops_per_gpu": 100, "flops": "palm"}},
        {"id": "later", "gpus": 8, "strategy": {"cp": 2}, "measured": {"tflops_per_gpu": 1, "flops": "unstated"}, "not_expressible": "context parallelism"})"));
    const auto data = cal::load_ground_truth({file});
    REQUIRE(data.end_to_end.size() == 1);
    const auto& set = data.end_to_end[0];
    const auto cluster = cal::read_cluster_file(test_data + "/test-cluster.json");
    const auto tokens = cal::predict_end_to_end(set, set.rows[0], cluster);
    const double step = tokens.report.step_time;
    REQUIRE(step > 0);
    CHECK(tokens.unit == "tokens/s/GPU");
    CHECK(tokens.measured == 1000);
    CHECK(tokens.predicted == doctest::Approx(16.0 * 1024 / step / 8));
    CHECK(tokens.memory_GiB == doctest::Approx(tokens.report.peak.bytes / kGiB));
    CHECK(tokens.layout == "fsdp dp8");
    // The label names what the row runs beyond the layout: repeated keys and values (with GQA), a composed
    // norm (eager), the power limit.
    const std::string flagged = write_temp("dtsim_e2e_flags.json", one_set(R"(
        {"id": "flags", "gpus": 8, "model": {"kv_heads": 2}, "training": {"global_batch": 16, "micro_batch": 2},
         "strategy": {"repeat_kv": true, "norm_kernel": "composed"}, "measured": {"step_time_s": 1}})",
        R"("cluster_overrides": {"gpu": {"tdp_W": 700, "power_limit_W": 500}}, )"));
    const auto fdata = cal::load_ground_truth({flagged});
    CHECK(cal::predict_end_to_end(fdata.end_to_end[0], fdata.end_to_end[0].rows[0], cluster).layout ==
          "fsdp dp8, repeat_kv, composed norm, 500 W");
    const auto st = cal::predict_end_to_end(set, set.rows[1], cluster);
    CHECK(st.unit == "s");
    CHECK(st.predicted == doctest::Approx(step));
    const Config c = cal::parse_end_to_end_row(set, set.rows[2], cluster);
    const auto tf = cal::predict_end_to_end(set, set.rows[2], cluster);
    CHECK(tf.unit == "TFLOP/s");
    CHECK(tf.predicted == doctest::Approx(cal::megatron_core_flops(c.model.spec, 16) / 8 / step / 1e12));
    const auto mfu = cal::predict_end_to_end(set, set.rows[3], cluster);
    CHECK(mfu.unit == "% MFU");
    CHECK(mfu.measured == doctest::Approx(40));
    CHECK(mfu.predicted == doctest::Approx(100 * cal::megatron_flops(16, 1024, 4, 1024, 32000) / 8 / step / 500e12));
    // Fewer GPUs than a node has: one node of that many.
    const Config four = cal::parse_end_to_end_row(set, set.rows[4], cluster);
    CHECK(four.cluster.nodes == 1);
    CHECK(four.cluster.gpus_per_node == 4);
    const auto palm = cal::predict_end_to_end(set, set.rows[5], cluster);
    CHECK(palm.predicted == doctest::Approx(cal::palm_flops(c.model.spec, 16) / 8 / step / 1e12));
    // A row dtsim cannot express is read, listed as skipped, and not run.
    CHECK_FALSE(set.rows[6].expressible());
    REQUIRE(data.skipped.size() == 1);
    CHECK(data.skipped[0] == file + ": set tiny, row \"later\": not expressible yet: context parallelism");
    CHECK_THROWS_AS(cal::predict_end_to_end(set, set.rows[6], cluster), std::invalid_argument);

    // validate: one throughput set (its skipped row listed) and one memory set.
    const auto sets = validated_on_test_cluster(data);
    CHECK(sets[0].id == "tiny");
    CHECK(sets[0].kind == "end_to_end");
    CHECK(sets[0].points.size() == 6);
    REQUIRE(sets[0].skipped.size() == 1);
    CHECK(sets[0].skipped[0] == "later: not expressible yet: context parallelism");
    CHECK(sets[0].fit.find("held out") == 0);
    CHECK(sets[0].fit.find("mean |error|") != std::string::npos);
    double sum = 0;
    for (const auto& p : sets[0].points) {
        CHECK_FALSE(p.in_sample);
        sum += std::abs(p.error());
    }
    CHECK(sets[0].mean == doctest::Approx(sum / 6));
    CHECK(sets[0].fit.find("dtsim " + cal::mean_direction(sets[0]) + " on average") != std::string::npos);
    CHECK(sets[1].id == "tiny:memory");
    REQUIRE(sets[1].points.size() == 1);
    CHECK(sets[1].points[0].unit == "GiB");
    CHECK(sets[1].points[0].measured == 20);
    CHECK(sets[1].points[0].predicted == doctest::Approx(tokens.memory_GiB));
    CHECK(sets[1].fit.find("dtsim " + cal::mean_direction(sets[1]) + " on average") != std::string::npos);
    const auto j = cal::to_json(sets);
    CHECK(j[0]["mean_abs_error"].get<double>() == doctest::Approx(sets[0].mean));
    CHECK(j[0]["skipped"].size() == 1);
    // Every row fits on the test cluster: no wrong out-of-memory verdict to count.
    CHECK(sets[0].out_of_memory == 0);
    CHECK(j[0]["out_of_memory"] == 0);
    // All rows together (validate's closing lines): the throughput set's six, the memory set's one apart.
    const cal::EndToEndSummary together = cal::summarize_end_to_end(sets, false);
    CHECK(together.rows == 6);
    CHECK(together.sets == 1);
    CHECK(together.mean == doctest::Approx(sets[0].mean));
    CHECK(together.median == doctest::Approx(sets[0].median));
    CHECK(together.worst == doctest::Approx(sets[0].max));
    CHECK(cal::summarize_end_to_end(sets, true).rows == 1);
    // The rows simulated three at once: the same sets, figure for figure.
    cal::ValidateOptions o;
    o.clusters = {test_data + "/test-cluster.json"};
    o.jobs = 3;
    CHECK(cal::to_json(cal::validate(data, o)).dump() == j.dump());
}

TEST_CASE("every end-to-end row together: mean, median and worst |error|, time and memory apart") {
    auto set = [](std::string id, std::string kind, std::vector<cal::ValidationPoint> points) {
        cal::ValidationSet s;
        s.id = std::move(id);
        s.kind = std::move(kind);
        s.points = std::move(points);
        return s;
    };
    auto point = [](std::string label, double measured, double predicted, std::string unit, bool counted = true) {
        return cal::ValidationPoint{std::move(label), 0, measured, predicted, std::move(unit), counted, false};
    };
    const std::vector<cal::ValidationSet> sets = {
        set("a", "end_to_end", {point("r1", 100, 110, "tokens/s/GPU"), point("r2", 100, 80, "tokens/s/GPU")}),
        set("a:memory", "end_to_end", {point("r1", 50, 35, "GiB")}),
        set("sc21", "megatron", {point("1T", 100, 105, "TFLOP/s")}),
        set("nccl", "collective", {point("1 GiB", 100, 150, "us")}),                    // not end to end
        set("b", "end_to_end", {point("r3", 100, 300, "s", false)}),                     // not counted
    };
    const cal::EndToEndSummary time = cal::summarize_end_to_end(sets, false);
    CHECK(time.rows == 3);
    CHECK(time.sets == 2);
    CHECK(time.in_sample == 0);
    CHECK(time.mean == doctest::Approx((0.10 + 0.20 + 0.05) / 3));
    CHECK(time.median == doctest::Approx(0.10));
    CHECK(time.worst == doctest::Approx(0.20));
    CHECK(time.worst_row == "a: r2");
    const cal::EndToEndSummary memory = cal::summarize_end_to_end(sets, true);
    CHECK(memory.rows == 1);
    CHECK(memory.sets == 1);
    CHECK(memory.worst == doctest::Approx(0.30));
    CHECK(memory.worst_row == "a:memory: r1");
    const cal::EndToEndSummary none = cal::summarize_end_to_end({}, false);
    CHECK(none.rows == 0);
    CHECK(none.worst_row.empty());
    CHECK(cal::to_json(time)["worst_row"] == "a: r2");
}

TEST_CASE("an end-to-end set runs on the shipped cluster it names, with its overrides") {
    const auto data = cal::load_ground_truth({repo + "/calibration/data/end_to_end_a100.json"});
    const auto& set = set_named(data, "llm_foundry_mpt_a100_40gb");
    const Config c = cal::parse_end_to_end_row(set, set.rows.front(), shipped_cluster(set.cluster));
    CHECK(c.cluster.gpu.name == "A100-SXM-40GB");
    CHECK(c.cluster.gpu.memory_bytes == doctest::Approx(40 * kGiB));
    CHECK(c.cluster.gpu.memory_bandwidth == doctest::Approx(1.555e12));
    CHECK(c.cluster.gpu.peak(DType::bf16) == doctest::Approx(312e12));  // the rest is selene-a100's
}

TEST_CASE("a set's jobs may run on NVLink segments of the cluster's nodes, never larger ones") {
    const std::string rows = R"({"id": "two segments", "gpus": 8, "training": {"global_batch": 8}, "measured": {"step_time_s": 1}},
        {"id": "one of three", "gpus": 12, "training": {"global_batch": 12}, "measured": {"step_time_s": 1}},
        {"id": "in one segment", "gpus": 2, "training": {"global_batch": 2}, "measured": {"step_time_s": 1}},
        {"id": "a segment and a half", "gpus": 6, "training": {"global_batch": 8}, "measured": {"step_time_s": 1}})";
    const auto cluster = cal::read_cluster_file(test_data + "/test-cluster.json");  // 8 GPUs a node
    const auto data = cal::load_ground_truth({write_temp("dtsim_e2e_segments.json", one_set(rows, R"("cluster_overrides": {"gpus_per_node": 4}, )"))});
    const auto& set = data.end_to_end.at(0);
    const Config two = cal::parse_end_to_end_row(set, set.rows[0], cluster);
    CHECK(two.cluster.gpus_per_node == 4);
    CHECK(two.cluster.nodes == 2);
    // 12 GPUs on segments of 4: three of them, where the cluster's own nodes would need two for 16.
    CHECK(cal::parse_end_to_end_row(set, set.rows[1], cluster).cluster.nodes == 3);
    // Fewer GPUs than a segment: one node of that many, as without the override.
    const Config small = cal::parse_end_to_end_row(set, set.rows[2], cluster);
    CHECK(small.cluster.nodes == 1);
    CHECK(small.cluster.gpus_per_node == 2);
    // Not a whole number of segments: named at the row's gpus, with the segment in the message.
    const auto half = config_error([&] { (void)cal::parse_end_to_end_row(set, set.rows[3], cluster); });
    CHECK(half.path == "$.sets[0].rows[3].gpus");
    CHECK(std::string(half.what()).find("4 GPUs per node") != std::string::npos);
    // A segment beyond the cluster's node is named at the override.
    const auto wide = cal::load_ground_truth({write_temp("dtsim_e2e_wide.json", one_set(rows, R"("cluster_overrides": {"gpus_per_node": 16}, )"))});
    const auto e = config_error([&] { (void)cal::parse_end_to_end_row(wide.end_to_end.at(0), wide.end_to_end.at(0).rows[0], cluster); });
    CHECK(e.path == "$.sets[0].cluster_overrides.gpus_per_node");
    CHECK(std::string(e.what()).find("segment of 16 GPUs is larger than the cluster's nodes of 8") != std::string::npos);
    // Neither a fraction nor the node count.
    for (const char* bad : {R"("cluster_overrides": {"gpus_per_node": 4.5}, )", R"("cluster_overrides": {"nodes": 2}, )"}) {
        CAPTURE(bad);
        const auto b = config_error([&] { (void)cal::load_ground_truth({write_temp("dtsim_e2e_badseg.json", one_set(rows, bad))}); });
        CHECK(b.path.rfind("$.sets[0].cluster_overrides.", 0) == 0);
    }
}

TEST_CASE("a malformed end-to-end row is an error naming the file and the row's JSON path") {
    auto error_of = [](const std::string& name, const std::string& text) {
        const std::string file = write_temp(name, text);
        return config_error([&] { (void)cal::load_ground_truth({file}); });
    };
    SUBCASE("no measurement") {
        const auto e = error_of("dtsim_e2e_bad1.json", one_set(R"({"id": "a", "gpus": 8})"));
        CHECK(e.path == "$.sets[0].rows[0]");
        CHECK(std::string(e.what()).find("dtsim_e2e_bad1.json: $.sets[0].rows[0]: missing key \"measured\"") != std::string::npos);
    }
    SUBCASE("two measurements") {
        const auto e = error_of("dtsim_e2e_bad2.json",
                                one_set(R"({"id": "a", "gpus": 8, "measured": {"step_time_s": 1, "tokens_per_s_per_gpu": 5}})"));
        CHECK(e.path == "$.sets[0].rows[0].measured");
        CHECK(std::string(e.what()).find("expected one measured throughput, found 2") != std::string::npos);
    }
    SUBCASE("TFLOP/s without their FLOP count") {
        const auto e = error_of("dtsim_e2e_bad3.json", one_set(R"({"id": "a", "gpus": 8, "measured": {"tflops_per_gpu": 400}})"));
        CHECK(e.path == "$.sets[0].rows[0].measured");
        CHECK(std::string(e.what()).find("tflops_per_gpu needs \"flops\"") != std::string::npos);
    }
    SUBCASE("an unstated FLOP count on a row dtsim would run") {
        const auto e = error_of("dtsim_e2e_bad4.json",
                                one_set(R"({"id": "a", "gpus": 8, "measured": {"tflops_per_gpu": 400, "flops": "unstated"}})"));
        CHECK(e.path == "$.sets[0].rows[0].measured.flops");
    }
    SUBCASE("a misspelt key") {
        const auto e = error_of("dtsim_e2e_bad5.json", one_set(R"({"id": "a", "gpus": 8, "mesured": {"step_time_s": 1}})"));
        CHECK(e.path == "$.sets[0].rows[0].mesured");
        CHECK(std::string(e.what()).find("did you mean \"measured\"?") != std::string::npos);
    }
    SUBCASE("a cluster given as a path") {
        const auto e = error_of("dtsim_e2e_bad6.json",
                                R"({"sets": [{"id": "x", "source": "s", "cluster": "../clusters/dgx-h100.json", "rows": []}]})");
        CHECK(e.path == "$.sets[0].cluster");
    }
    SUBCASE("a negative GPU count") {
        const auto e = error_of("dtsim_e2e_bad7.json", one_set(R"({"id": "a", "gpus": -8, "measured": {"step_time_s": 1}})"));
        CHECK(e.path == "$.sets[0].rows[0].gpus");
    }
    SUBCASE("two sets of one id") {
        const std::string set = R"({"id": "x", "source": "s", "cluster": "dgx-h100", "rows": [{"id": "a", "gpus": 8, "measured": {"step_time_s": 1}}]})";
        const auto e = error_of("dtsim_e2e_bad8.json", R"({"sets": [)" + set + ", " + set + "]}");
        CHECK(e.path == "$.sets[1].id");
    }
}

TEST_CASE("a row that is not a valid run config is an error at the row's own key, or the defaults' it came from") {
    const std::string file = write_temp("dtsim_e2e_config.json", one_set(R"(
        {"id": "bad tp", "gpus": 8, "strategy": {"name": "megatron", "tp": 0}, "training": {"global_batch": 8}, "measured": {"step_time_s": 1}},
        {"id": "bad gpus", "gpus": 12, "training": {"global_batch": 16}, "measured": {"step_time_s": 1}},
        {"id": "fine", "gpus": 8, "training": {"global_batch": 8}, "measured": {"step_time_s": 1}})",
                                                                          R"("cluster_overrides": {"gpu": {"hbm_GiB": 96}}, )"));
    const auto data = cal::load_ground_truth({file});
    const auto& set = data.end_to_end.at(0);
    const auto cluster = cal::read_cluster_file(test_data + "/test-cluster.json");
    const auto tp = config_error([&] { (void)cal::parse_end_to_end_row(set, set.rows[0], cluster); });
    CHECK(tp.file == file);
    CHECK(tp.path == "$.sets[0].rows[0].strategy.tp");
    CHECK(std::string(tp.what()).find("(row \"bad tp\" of set \"tiny\" as a run config: $.strategy.tp)") != std::string::npos);
    // 12 GPUs on 8-GPU nodes: two nodes, 16 GPUs, not the row's 12.
    const auto gpus = config_error([&] { (void)cal::parse_end_to_end_row(set, set.rows[1], cluster); });
    CHECK(gpus.path == "$.sets[0].rows[1].gpus");
    // The overrides apply; a bad value in the set's defaults is named there.
    CHECK(cal::parse_end_to_end_row(set, set.rows[2], cluster).cluster.gpu.memory_bytes == doctest::Approx(96 * kGiB));
    auto broken = set;
    broken.defaults["model"]["dtype"] = "bf17";
    const auto dtype = config_error([&] { (void)cal::parse_end_to_end_row(broken, broken.rows[2], cluster); });
    CHECK(dtype.path == "$.sets[0].defaults.model.dtype");
    CHECK(std::string(dtype.what()).find("did you mean \"bf16\"?") != std::string::npos);
    broken = set;
    broken.cluster_overrides["gpu"]["hbm_GiB"] = -1;
    const auto hbm = config_error([&] { (void)cal::parse_end_to_end_row(broken, broken.rows[2], cluster); });
    CHECK(hbm.path == "$.sets[0].cluster_overrides.gpu.hbm_GiB");
    // validate stops at the first bad row in the data's order, however many rows it simulates at once.
    for (int jobs : {1, 3}) {
        CAPTURE(jobs);
        cal::ValidateOptions o;
        o.clusters = {test_data + "/test-cluster.json"};
        o.jobs = jobs;
        CHECK(config_error([&] { (void)cal::validate(data, o); }).path == "$.sets[0].rows[0].strategy.tp");
    }
}

TEST_CASE("mean_direction: a step time predicted short and a throughput predicted high are both dtsim fast") {
    cal::ValidationSet s;
    s.kind = "end_to_end";
    // Step 10 s predicted 8 s: 10 / 8 - 1 = +25 % fast. 100 tokens/s predicted 110: +10 % fast.
    // 50 TFLOP/s predicted 45: -10 %. Not counted: a row predicted 10 times too fast.
    s.points = {{"step", 0, 10, 8, "s"}, {"tokens", 0, 100, 110, "tokens/s/GPU"}, {"tflops", 0, 50, 45, "TFLOP/s"},
                {"skipped", 0, 1, 10, "s", false}};
    CHECK(cal::speed_error("s", 10, 8) == doctest::Approx(0.25));
    CHECK(cal::speed_error("tokens/s/GPU", 100, 110) == doctest::Approx(0.10));
    CHECK(cal::mean_direction(s) == "8.3 % fast");  // (25 + 10 - 10) / 3
    s.points[0].predicted = 12.5;                    // 10 / 12.5 - 1 = -20 %
    CHECK(cal::mean_direction(s) == "6.7 % slow");  // (-20 + 10 - 10) / 3
    // Peak memory: over or under what was published. 80 GiB predicted 60 (-25 %) and 40 predicted 44 (+10 %).
    cal::ValidationSet m;
    m.kind = "end_to_end";
    m.points = {{"a", 0, 80, 60, "GiB"}, {"b", 0, 40, 44, "GiB"}};
    CHECK(cal::mean_direction(m) == "7.5 % under");
    CHECK(cal::mean_direction(cal::ValidationSet{}).empty());
}

namespace {

// A harness step file (calibration/pytorch/dtsim_step.py's layout) on the test cluster's family.
std::string step_file(const std::string& name, const std::string& columns, const std::string& rows,
                      const std::string& gpu = "NVIDIA H100 80GB HBM3") {
    return write_temp(name, R"({"source": "made up", "meta": {"gpu": ")" + gpu + R"("},
        "training_steps": {"description": "d", "columns": )" + columns + R"(, "rows": )" + rows + "}}");
}

constexpr const char* kStepColumns =
    R"(["name", "kind", "hidden", "heads", "kv_heads", "ffn", "layers", "vocab", "seq", "batch", "recompute", "params",
        "step_ms", "max_allocated_GiB", "compile"])";

}  // namespace

TEST_CASE("one-GPU steps timed with the harness run as the harness ran them, apart from the published runs") {
    const std::string file = step_file("dtsim_harness_steps.json", kStepColumns, R"([
        ["tiny-llama", "llama", 1024, 8, 2, 3584, 4, 32000, 2048, 2, "op", 1, 150.0, 20.5, false],
        ["tiny-mpt", "gpt", 1024, 8, 8, 4096, 4, 32000, 1024, 4, "full", 1, 90.0, 10.25, true]])");
    const auto data = cal::load_ground_truth({file});
    REQUIRE(data.end_to_end.size() == 1);
    const cal::EndToEndSet& set = data.end_to_end[0];
    CHECK(set.harness());
    CHECK(set.id == "dtsim_harness_steps");
    CHECK(set.gpu == "NVIDIA H100 80GB HBM3");
    REQUIRE(set.rows.size() == 2);
    CHECK(set.rows[0].id == "tiny-llama seq 2048 batch 2 recompute op");
    CHECK(set.rows[1].id == "tiny-mpt seq 1024 batch 4 recompute full compiled");
    CHECK(set.rows[0].measured.metric == cal::EndToEndMetric::step_time_s);
    CHECK(set.rows[0].measured.value == doctest::Approx(0.150));
    CHECK(*set.rows[1].measured.peak_memory_GiB == 10.25);

    // Each row is the config written out by hand: one GPU, ddp, the row's model and batch.
    const auto cluster = cal::read_cluster_file(test_data + "/test-cluster.json");
    const std::string by_hand = write_temp("dtsim_harness_step_config.json", R"({"include": ")" + test_data +
        R"(/test-cluster.json", "cluster": {"nodes": 1, "gpus_per_node": 1},
        "model": {"name": "tiny-llama", "layers": 4, "hidden": 1024, "heads": 8, "kv_heads": 2, "ffn": 3584, "vocab": 32000,
                  "seq": 2048, "dropout": false, "dtype": "bf16", "mlp": "swiglu", "tied_embeddings": false},
        "training": {"global_batch": 2, "micro_batch": 2},
        "strategy": {"name": "ddp", "dp": 1, "flash_attention": true, "grad_dtype": "fp32", "recompute": "selective_op",
                     "compile": false, "repeat_kv": true}})");
    const RunResult expected = simulate(load_config(by_hand), {.keep_trace = false, .straggler_baseline = false});
    const auto llama = cal::predict_end_to_end(set, set.rows[0], cluster);
    CHECK(llama.unit == "s");
    CHECK(llama.predicted == expected.report.step_time);
    CHECK(llama.memory_GiB == expected.report.peak.bytes / kGiB);
    CHECK(llama.layout == "ddp dp1, recompute selective_op, repeat_kv");
    const Config mpt = cal::parse_end_to_end_row(set, set.rows[1], cluster);
    CHECK(mpt.gpus() == 1);
    CHECK(mpt.model.spec.mlp == Mlp::gelu);
    CHECK(mpt.model.spec.tied_embeddings);
    CHECK(mpt.strategy.compile);
    CHECK_FALSE(mpt.strategy.repeat_kv);
    CHECK(mpt.strategy.recompute == Recompute::full);
    CHECK(mpt.training.global_batch == 4);
    CHECK(mpt.training.micro_batch == 4);

    // validate: kind "step", with the allocated peaks as its memory set; the published runs' summary
    // leaves them out, and the harness's own counts them.
    const auto sets = validated_on_test_cluster(data);
    CHECK(sets[0].id == "dtsim_harness_steps");
    CHECK(sets[0].kind == "step");
    // A step's time in milliseconds.
    CHECK(sets[0].points[0].unit == "ms");
    CHECK(sets[0].points[0].measured == doctest::Approx(150));
    CHECK(sets[0].points[0].predicted == doctest::Approx(1e3 * expected.report.step_time).epsilon(1e-12));
    // dtsim's step shorter than measured is "fast", as for a published step time.
    CHECK(cal::mean_direction(sets[0]).ends_with(sets[0].points[0].predicted < 150 ? " fast" : " slow"));
    CHECK(sets[1].id == "dtsim_harness_steps:memory");
    CHECK(sets[1].kind == "step");
    CHECK(sets[1].points[0].measured == 20.5);
    CHECK(sets[1].note.find("max_memory_allocated") != std::string::npos);
    CHECK(cal::summarize_end_to_end(sets, false).rows == 0);
    CHECK(cal::summarize_end_to_end(sets, true).rows == 0);
    CHECK(cal::summarize_rows(sets, false, {"step"}).rows == 2);
    CHECK(cal::summarize_rows(sets, true, {"step"}).rows == 2);

    // A set's memory set is named "<id>:memory": a block file of that name (another folder, the same
    // stem) would make two sets of one id.
    fs::create_directories(fs::temp_directory_path() / "dtsim_other");
    const std::string blocks = write_temp("dtsim_other/dtsim_harness_steps.json", R"({"meta": {"gpu": "NVIDIA H100"},
        "memory": {"columns": ["name", "policy", "hidden", "heads", "kv_heads", "ffn", "seq", "batch", "saved_bytes"],
                   "rows": [["mpt-1b", "full", 1024, 8, 8, 4096, 1024, 1, 2097152]]}})");
    const auto twice = config_error([&] { (void)cal::load_ground_truth({file, blocks}); });
    CHECK(twice.file == blocks);
    CHECK(std::string(twice.what()).ends_with("data set id \"dtsim_harness_steps:memory\" appears twice (also in " +
                                              file + ")"));
}

TEST_CASE("a malformed harness step file is an error naming the file and the JSON path") {
    const auto e = [](const std::string& f) { return config_error([&] { (void)cal::load_ground_truth({f}); }); };
    const std::string row = R"(["m", "llama", 1024, 8, 2, 3584, 4, 32000, 2048, 2, "none", 1, 150.0, 20.5, false])";
    // A missing column.
    const auto missing = e(step_file("dtsim_steps_missing.json", R"(["name", "kind"])", "[]"));
    CHECK(missing.path == "$.training_steps.columns");
    CHECK(std::string(missing.what()).ends_with("missing column \"hidden\""));
    // A recompute the harness does not write, a kind it does not know.
    auto bad = std::string(row);
    bad.replace(bad.find("\"none\""), 6, "\"selective\"");
    const auto recompute = e(step_file("dtsim_steps_recompute.json", kStepColumns, "[" + bad + "]"));
    CHECK(recompute.path == "$.training_steps.rows[0][10]");
    CHECK(std::string(recompute.what()).ends_with("expected one of \"none\", \"full\", \"op\", found \"selective\""));
    bad = row;
    bad.replace(bad.find("\"llama\""), 7, "\"moe\"");
    CHECK(e(step_file("dtsim_steps_kind.json", kStepColumns, "[" + bad + "]")).path == "$.training_steps.rows[0][1]");
    // A row short of a value, a step time that is not positive, a GPU of no family.
    CHECK(e(step_file("dtsim_steps_short.json", kStepColumns, R"([["m", "llama"]])")).path == "$.training_steps.rows[0]");
    bad = row;
    bad.replace(bad.find("150.0"), 5, "-1");
    CHECK(e(step_file("dtsim_steps_time.json", kStepColumns, "[" + bad + "]")).path == "$.training_steps.rows[0][12]");
    CHECK(e(step_file("dtsim_steps_gpu.json", kStepColumns, "[" + row + "]", "some gpu")).path == "$.meta.gpu");
    // Two rows of the same step, a misspelt section.
    CHECK(e(step_file("dtsim_steps_twice.json", kStepColumns, "[" + row + ", " + row + "]")).path ==
          "$.training_steps.rows[1]");
    // A case the script could not run (out of memory) has neither figure: left out, and said so. With
    // one of the two, the other is an error; a file of failed cases alone has nothing to predict.
    auto failed = std::string(row);
    failed.replace(failed.find("150.0, 20.5"), 11, "null, null");
    const std::string one_failed = step_file("dtsim_steps_failed.json", kStepColumns, "[" + row + ", " + failed + "]");
    const auto data = cal::load_ground_truth({one_failed});
    REQUIRE(data.end_to_end.size() == 1);
    CHECK(data.end_to_end[0].rows.size() == 1);
    REQUIRE(data.skipped.size() == 1);
    CHECK(data.skipped[0] == one_failed + ": $.training_steps.rows[1]: not measured (no step time nor peak: the case "
                                          "failed, its \"details\" entry says why)");
    auto half = std::string(row);
    half.replace(half.find("150.0"), 5, "null");
    CHECK(e(step_file("dtsim_steps_half.json", kStepColumns, "[" + half + "]")).path == "$.training_steps.rows[0][12]");
    CHECK(e(step_file("dtsim_steps_all_failed.json", kStepColumns, "[" + failed + "]")).path == "$.training_steps.rows");
    const auto typo = e(write_temp("dtsim_steps_typo.json", R"({"meta": {"gpu": "NVIDIA H100"}, "training_step": {}})"));
    CHECK(std::string(typo.what()).find("did you mean \"training_steps\"?") != std::string::npos);
}

TEST_CASE("the harness's blocks: each priced as dtsim prices a layer of the one-GPU run that holds it") {
    const std::string times = write_temp("dtsim_harness_layers.json", R"({"source": "made up",
        "meta": {"gpu": "NVIDIA H100 80GB HBM3"},
        "layers": {"columns": ["name", "kind", "attention", "hidden", "heads", "kv_heads", "ffn", "seq", "batch",
                               "nograd_ms", "fwd_ms", "fwd_bwd_ms"],
                   "rows": [["tiny-llama", "llama", "cudnn", 1024, 8, 2, 3584, 2048, 2, 1.0, 1.1, 3.3],
                            ["tiny-mpt", "gpt", "flash2", 1024, 8, 8, 4096, 1024, 4, null, null, null]]},
        "output_layer": {"columns": [], "rows": []}})");
    const std::string memory = write_temp("dtsim_harness_memory.json", R"({"source": "made up",
        "meta": {"gpu": "NVIDIA H100 80GB HBM3"},
        "memory": {"columns": ["name", "policy", "hidden", "heads", "kv_heads", "ffn", "seq", "batch", "saved_bytes"],
                   "rows": [["llama-tiny", "op", 1024, 8, 2, 3584, 2048, 2, 30000000],
                            ["llama-tiny-enable_gqa", "none", 1024, 8, 2, 3584, 2048, 2, 90000000],
                            ["mpt-tiny", "full", 1024, 8, 8, 4096, 1024, 4, 8388608]]},
        "saved_tensors": {}})");
    const auto data = cal::load_ground_truth({times, memory});
    REQUIRE(data.layers.size() == 2);
    // A backend that refused its shape (null times) is left out.
    REQUIRE(data.layers[0].rows.size() == 1);
    CHECK(data.layers[0].id == "dtsim_harness_layers:layers");
    CHECK(data.layers[1].id == "dtsim_harness_memory:memory");
    // On the shipped H100 cluster, whose fused-attention curves tell cuDNN's kernel from FlashAttention-2's.
    const std::string h100 = std::string(DTSIM_CONFIGS) + "/clusters/dgx-h100.json";
    cal::ValidateOptions o;
    o.clusters = {h100};
    const auto sets = cal::validate(data, o);
    REQUIRE(sets.size() == 2);
    CHECK(sets[0].kind == "layer");
    CHECK(sets[1].kind == "layer");

    // The timed block by hand: its one-GPU run config, then the layer make_workload prices for it.
    const auto config = [&](const std::string& name, const std::string& model, const std::string& strategy) {
        return load_config(write_temp(name, R"({"include": ")" + h100 + R"(",
            "cluster": {"nodes": 1, "gpus_per_node": 1}, "model": )" + model + R"(, "strategy": )" + strategy + "}"));
    };
    const Config llama = config("dtsim_block_llama.json",
        R"({"layers": 1, "hidden": 1024, "heads": 8, "kv_heads": 2, "ffn": 3584, "seq": 2048, "vocab": 32000,
            "dropout": false, "dtype": "bf16", "mlp": "swiglu", "tied_embeddings": false},
            "training": {"global_batch": 2, "micro_batch": 2})",
        R"({"name": "ddp", "dp": 1, "flash_attention": true, "attention_kernel": "cudnn", "recompute": "none"})");
    const LayerWork L = make_workload(llama.model.spec, layer_split(llama), llama.cluster.gpu).layer;
    const double forward = L.attention_forward.seconds + L.mlp_forward.seconds;
    const double both = forward + L.attention_backward.seconds + L.mlp_backward.seconds;
    REQUIRE(sets[0].points.size() == 2);
    CHECK(sets[0].points[0].label == "tiny-llama seq 2048 batch 2 cudnn forward");
    CHECK(sets[0].points[0].unit == "ms");
    CHECK(sets[0].points[0].measured == doctest::Approx(1.1));
    CHECK(sets[0].points[0].predicted == doctest::Approx(1e3 * forward).epsilon(1e-12));
    CHECK(sets[0].points[1].label == "tiny-llama seq 2048 batch 2 cudnn forward+backward");
    CHECK(sets[0].points[1].predicted == doctest::Approx(1e3 * both).epsilon(1e-12));
    // A block slower than measured is "slow" (a time, not a throughput).
    CHECK(cal::speed_error("ms", 2.0, 2.5) == doctest::Approx(-0.2));

    // What a block keeps: torchtitan's per-op policy with the keys and values repeated, the same
    // block reading them with enable_gqa, and a fully recomputed MPT block, which keeps its input:
    // 2 bytes x 1024 tokens x 4 x 1024 hidden = 8 MiB.
    REQUIRE(sets[1].points.size() == 3);
    CHECK(sets[1].points[0].label == "llama-tiny seq 2048 batch 2 recompute op");
    CHECK(sets[1].points[0].unit == "MiB");
    const std::string llama_model = R"({"layers": 1, "hidden": 1024, "heads": 8, "kv_heads": 2, "ffn": 3584, "seq": 2048,
        "vocab": 32000, "dropout": false, "dtype": "bf16", "mlp": "swiglu", "tied_embeddings": false},
        "training": {"global_batch": 2, "micro_batch": 2})";
    const Config op = config("dtsim_block_op.json", llama_model,
        R"({"name": "ddp", "dp": 1, "flash_attention": true, "recompute": "selective_op", "repeat_kv": true})");
    const Config gqa = config("dtsim_block_gqa.json", llama_model,
        R"({"name": "ddp", "dp": 1, "flash_attention": true, "recompute": "none", "repeat_kv": false})");
    CHECK(sets[1].points[0].predicted == doctest::Approx(layer_activation_bytes(op.model.spec, layer_split(op)) / kMiB));
    CHECK(sets[1].points[1].predicted == doctest::Approx(layer_activation_bytes(gqa.model.spec, layer_split(gqa)) / kMiB));
    CHECK(sets[1].points[2].label == "mpt-tiny seq 1024 batch 4 recompute full");
    CHECK(sets[1].points[2].measured == 8);
    CHECK(sets[1].points[2].predicted == doctest::Approx(8));
    CHECK(sets[1].fit.find("mean |error|") != std::string::npos);
    // Memory is worded over or under, not fast or slow.
    const std::string direction = cal::mean_direction(sets[1]);
    CHECK((direction.ends_with(" over") || direction.ends_with(" under")));
    CHECK(sets[1].fit.find("dtsim " + direction + " on average") != std::string::npos);
}

TEST_CASE("a malformed block file is an error naming the file and the JSON path") {
    const auto e = [](const std::string& f) { return config_error([&] { (void)cal::load_ground_truth({f}); }); };
    const auto block = [](const std::string& name, const std::string& columns, const std::string& rows) {
        return write_temp(name, R"({"meta": {"gpu": "NVIDIA H100"}, "memory": {"columns": )" + columns +
                                    R"(, "rows": )" + rows + "}}");
    };
    const std::string cols = R"(["name", "policy", "hidden", "heads", "kv_heads", "ffn", "seq", "batch", "saved_bytes"])";
    const auto missing = e(block("dtsim_block_missing.json", R"(["name", "policy"])", "[]"));
    CHECK(missing.path == "$.memory.columns");
    CHECK(std::string(missing.what()).ends_with("missing column \"hidden\""));
    const auto form = e(block("dtsim_block_form.json", cols, R"([["moe-1b", "none", 1024, 8, 8, 4096, 1024, 1, 1]])"));
    CHECK(form.path == "$.memory.rows[0][0]");
    CHECK(std::string(form.what()).find("starting with \"llama\"") != std::string::npos);
    CHECK(e(block("dtsim_block_policy.json", cols, R"([["mpt-1b", "sac", 1024, 8, 8, 4096, 1024, 1, 1]])")).path ==
          "$.memory.rows[0][1]");
    CHECK(e(block("dtsim_block_bytes.json", cols, R"([["mpt-1b", "none", 1024, 8, 8, 4096, 1024, 1, -5]])")).path ==
          "$.memory.rows[0][8]");
    // A block the config reader refuses (heads that do not divide the hidden size) names its row.
    const auto odd = cal::load_ground_truth(
        {block("dtsim_block_shape.json", cols, R"([["mpt-1b", "none", 1000, 7, 7, 4096, 1024, 1, 1]])")});
    cal::ValidateOptions o;
    o.clusters = {test_data + "/test-cluster.json"};
    const auto shape = config_error([&] { (void)cal::validate(odd, o); });
    CHECK(shape.path == "$.memory.rows[0]");
    CHECK(std::string(shape.what()).find("the block \"mpt-1b seq 1024 batch 1 recompute none\" as a run config: ") !=
          std::string::npos);
    // Nothing kept is not a measurement (full recompute keeps the block's input).
    CHECK(e(block("dtsim_block_zero.json", cols, R"([["mpt-1b", "none", 1024, 8, 8, 4096, 1024, 1, 0]])")).path ==
          "$.memory.rows[0][8]");
    // The same block twice.
    const auto twice = e(block("dtsim_block_twice.json", cols,
                               R"([["mpt-1b", "full", 1024, 8, 8, 4096, 1024, 1, 1], ["mpt-1b", "full", 1024, 8, 8, 4096, 1024, 1, 2]])"));
    CHECK(twice.path == "$.memory.rows[1]");
    CHECK(std::string(twice.what()).ends_with("a second row of mpt-1b seq 1024 batch 1 recompute full (also $.memory.rows[0])"));
    // A row that is not an array of one value per column.
    CHECK(e(block("dtsim_block_row.json", cols, R"([{"name": "mpt-1b"}])")).path == "$.memory.rows[0]");
    const auto timed = [](const std::string& name, const std::string& times) {
        return write_temp(name, R"({"meta": {"gpu": "NVIDIA H100"},
            "layers": {"columns": ["name", "kind", "attention", "hidden", "heads", "kv_heads", "ffn", "seq", "batch",
                                   "fwd_ms", "fwd_bwd_ms"],
                       "rows": [["m", "gpt", "flash2", 1024, 8, 8, 4096, 1024, 1, )" + times + "]]}}");
    };
    CHECK(e(timed("dtsim_block_times.json", "2.0, 1.5")).path == "$.layers.rows[0][10]");
    // One time of the two: an error; neither (the backend refused the shape): the row is left out and
    // said so, and a file with no row left is an error.
    CHECK(e(timed("dtsim_block_half.json", "null, 1.5")).path == "$.layers.rows[0][9]");
    const std::string none = timed("dtsim_block_none.json", "null, null");
    CHECK(e(none).path == "$.layers.rows");
    // A GPU whose family has no cluster: the data set cannot be predicted, at $.meta.gpu.
    const auto b200 = cal::load_ground_truth({write_temp("dtsim_block_b200.json", R"({"meta": {"gpu": "NVIDIA B200"},
        "memory": {"columns": ["name", "policy", "hidden", "heads", "kv_heads", "ffn", "seq", "batch", "saved_bytes"],
                   "rows": [["mpt-1b", "full", 1024, 8, 8, 4096, 1024, 1, 2097152]]}})")});
    const auto family = config_error([&] { (void)cal::validate(b200, o); });
    CHECK(family.path == "$.meta.gpu");
    CHECK(std::string(family.what()).find("no cluster config for GPU family \"B200\"") != std::string::npos);
}

TEST_CASE("a timed block a backend refused is left out with a line saying so") {
    const std::string file = write_temp("dtsim_block_refused.json", R"({"meta": {"gpu": "NVIDIA H100"},
        "layers": {"columns": ["name", "kind", "attention", "hidden", "heads", "kv_heads", "ffn", "seq", "batch",
                               "fwd_ms", "fwd_bwd_ms"],
                   "rows": [["m", "gpt", "flash2", 1024, 8, 8, 4096, 1024, 1, 1.0, 3.0],
                            ["m", "gpt", "cudnn", 1024, 8, 8, 4096, 1024, 1, null, null]]}})");
    const auto data = cal::load_ground_truth({file});
    REQUIRE(data.layers.size() == 1);
    CHECK(data.layers[0].rows.size() == 1);
    REQUIRE(data.skipped.size() == 1);
    CHECK(data.skipped[0] == file + ": $.layers.rows[1]: not timed (both times null: the backend refused the shape)");
}
