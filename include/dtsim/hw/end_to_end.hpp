// End-to-end ground truth: published training runs, each a whole dtsim run (a model, a
// training setup and a strategy on a shipped cluster) with what was measured. They are for
// validation only: `dtsim validate` predicts them with the code `dtsim run` uses, and no
// parameter is fitted to them (calibration/data/end_to_end_*.json).
//
// A file:
//   {"description"?, "source"?, "sets": [{
//      "id", "source", "note"?,
//      "cluster": "<a file stem of configs/clusters, e.g. dgx-h100>",
//      "cluster_overrides"?: {...merged onto that cluster's "cluster" section (not "nodes"; a
//                              "gpus_per_node" at most the cluster's own: the NVLink segments the
//                              set's jobs ran on)...},
//      "defaults"?: {"model"?, "training"?, "strategy"?},
//      "rows": [{"id", "gpus", "model"?, "training"?, "strategy"?,
//                "measured": {<one of> "tokens_per_s_per_gpu" | "step_time_s" | "tflops_per_gpu" | "mfu",
//                             "flops"? (with tflops_per_gpu and mfu: "megatron", "megatron_sc21", "unstated"),
//                             "peak_tflops"? (with mfu: the peak the publisher divided by),
//                             "peak_memory_GiB"?},
//                "not_expressible"?: "why dtsim cannot run it yet", "note"?, "source"?}]}]}
// A row's model, training and strategy are the sections of a run config (docs/configs.md),
// merged over the set's defaults key by key; its cluster is the named one with the overrides
// merged in and as many nodes as `gpus` needs (a row of fewer GPUs than a node has runs on one
// node of that many). A row with not_expressible is read but not run: its sections document the
// run (they may hold keys dtsim does not have yet, such as "cp") and validate lists it as skipped.
// Bad files throw ConfigError naming the file and the JSON path ($.sets[0].rows[3].measured).
#pragma once

#include "dtsim/hw/config.hpp"
#include "dtsim/hw/run.hpp"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace dtsim::hw::calib {

// What a row's throughput was measured as.
enum class EndToEndMetric { tokens_per_s_per_gpu, step_time_s, tflops_per_gpu, mfu };

// How a published TFLOP/s or MFU figure counts a step's FLOPs.
enum class FlopCount {
    none,           // the metric needs no count (tokens/s, step time)
    megatron,       // Megatron-LM's num_floating_point_operations (megatron_core_flops)
    megatron_sc21,  // Narayanan et al. SC21, eq. 3 (megatron_flops)
    palm,           // PaLM's (Chowdhery et al. 2022, appendix B) as torchtitan counts it (palm_flops)
    unstated,       // the publisher does not say; such a row cannot be predicted
};

struct EndToEndMeasured {
    EndToEndMetric metric = EndToEndMetric::tokens_per_s_per_gpu;
    double value = 0;        // tokens/s per GPU, seconds, TFLOP/s per GPU, or MFU as a fraction
    FlopCount flops = FlopCount::none;
    double peak_tflops = 0;  // mfu: the peak per GPU the publisher divided by
    std::optional<double> peak_memory_GiB;
};

struct EndToEndRow {
    std::string id, note, not_expressible;
    std::size_t index = 0;  // in the set's "rows"
    int gpus = 1;
    nlohmann::json model = nlohmann::json::object(), training = nlohmann::json::object(),
                   strategy = nlohmann::json::object();
    EndToEndMeasured measured;
    [[nodiscard]] bool expressible() const { return not_expressible.empty(); }
};

struct EndToEndSet {
    std::string id, source, note, file;
    std::size_t index = 0;  // in the file's "sets"
    std::string cluster;    // a shipped cluster's name: configs/clusters/<cluster>.json
    // One-GPU steps timed with this repository's harness (read_harness_steps): the GPU they ran on
    // (its family's cluster runs them, as for kernel sets); empty for a published set.
    std::string gpu;
    [[nodiscard]] bool harness() const { return !gpu.empty(); }
    nlohmann::json cluster_overrides = nlohmann::json::object();
    nlohmann::json defaults = nlohmann::json::object();  // {"model"?, "training"?, "strategy"?}
    std::vector<EndToEndRow> rows;
};

// Reads the sets of an end-to-end file (`root` is the file's document, `file` names it in errors)
// into `out`, and a line into `skipped` for each row that is not expressible ("FILE: set S, row R:
// not expressible yet: why"). Throws ConfigError. A set id must be unique among `out`.
void read_end_to_end(const nlohmann::json& root, const std::string& file, std::vector<EndToEndSet>& out,
                     std::vector<std::string>& skipped);

// Reads the "training_steps" section of a harness step file (calibration/pytorch/dtsim_step.py:
// whole steps on one GPU, no communication; "meta": {"gpu"}, "training_steps": {"columns", "rows"})
// into one set, `stem`, whose rows are run configs as that script's steps are: the row's model
// ("llama": torchtitan's Llama 3, SwiGLU, untied, the keys and values repeated before SDPA; "gpt":
// MPT's form, GeLU 4h, tied), dropout off, bf16; global and micro batch the row's batch; strategy
// ddp on one GPU with fused attention, fp32 gradients (the harness keeps an fp32 master and its
// gradient per parameter) and the row's recompute (none, full, op: selective_op) and compile;
// measured step_ms and max_allocated_GiB (dtsim's peak counts allocated bytes). A case the script
// could not run (both figures null) is left out with a line in `skipped`. Throws ConfigError naming
// the file and the JSON path of a bad value.
void read_harness_steps(const nlohmann::json& root, const std::string& file, const std::string& stem,
                        std::vector<EndToEndSet>& out, std::vector<std::string>& skipped);

// The run config of a row ({"name", "cluster", "model", "training", "strategy"}) on a cluster
// document ({"cluster": ...}): the set's cluster_overrides merged in, gpus_per_node and nodes for
// the row's GPUs, and the row's sections over the set's defaults.
nlohmann::json end_to_end_config(const EndToEndSet& set, const EndToEndRow& row, const nlohmann::json& cluster_doc);

// parse_config of that document. A ConfigError names the data file and the row's JSON path where
// the bad value is (the row's section, the set's defaults or overrides; "gpus" for the node count).
Config parse_end_to_end_row(const EndToEndSet& set, const EndToEndRow& row, const nlohmann::json& cluster_doc);

// Megatron-LM's FLOPs of one step of `batch` sequences (megatron/training/training.py,
// num_floating_point_operations, Megatron-Core r0.8.0): 12 B s l h^2 ((1 + g/a + s/h) + f/h x
// (3/2 for SwiGLU) + V / 2lh), g the key-value heads, a the heads, f the MLP width: forward and
// backward of every GEMM and of the attention scores without causal halving, no recompute.
double megatron_core_flops(const TransformerSpec& m, double batch);
// A step's FLOPs as `count` counts them for `config`'s model and global batch (0 for none and unstated).
double counted_flops(FlopCount count, const Config& config);
// A step's FLOPs as PaLM's appendix B counts them and torchtitan's get_nparams_and_flops
// (torchtitan/models/llama/model.py) computes them: per token 6 x the parameters less the input
// embedding's, plus 12 x layers x hidden x seq for the attention scores and their product with V,
// forward and backward, causal masking not discounted.
double palm_flops(const TransformerSpec& m, double batch);

struct EndToEndPrediction {
    double measured = 0, predicted = 0;  // in `unit`; mfu in per cent
    std::string unit;                    // "tokens/s/GPU", "s", "TFLOP/s", "% MFU"
    double memory_GiB = 0;               // predicted peak memory of the worst GPU
    bool out_of_memory = false;          // dtsim says the run does not fit
    std::string layout;                  // "1f1b tp8 pp6 dp2, recompute full"
    RunReport report;
};

// Simulates an expressible row (dtsim::hw::simulate, what `dtsim run` calls) and gives its figure
// in the unit it was measured in. Throws ConfigError (bad row, as parse_end_to_end_row), or
// std::runtime_error naming the file, set and row when the simulation fails.
EndToEndPrediction predict_end_to_end(const EndToEndSet& set, const EndToEndRow& row, const nlohmann::json& cluster_doc);

// "tokens/s/GPU", "s", "TFLOP/s", "% MFU".
std::string end_to_end_unit(EndToEndMetric m);

}  // namespace dtsim::hw::calib
