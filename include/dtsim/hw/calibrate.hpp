// Ground truth: measurements the hardware cost models are fitted to
// (`dtsim calibrate`) and checked against (`dtsim validate`).
//
// Three kinds of data file are read (calibration/data, or what the harness in
// calibration/ writes):
//   - collective sweeps, nccl-tests' tables: {"datasets": [{"id", "source",
//     "hardware": {"gpu", "gpus_per_node", "nodes", "inter"?}, "collective",
//     "note", "algorithm"?, "rows": [{"size_bytes", "time_us", ...}]}]};
//     NCCL_ALGO=<name> in "note" (or "algorithm") says NCCL was told which
//     algorithm to run; otherwise it chose;
//   - GEMM throughput: {"max_achievable": {"source", "rows": [{"gpu", "dtype",
//     "tflops", "shape": "MxNxK"}]}, "<gpu>_<dtype>_by_shape": {"source",
//     "columns": ["m", "n", "k", "tflops", ...], "rows": [[...], ...]}};
//   - Megatron-LM runs: {"source", "columns": [..., "heads", "hidden",
//     "layers", "tp", "pp", "gpus", "global_batch", "micro_batch",
//     "tflops_per_gpu", "layers_per_virtual_stage"?, "ddp"?], "rows": [[...], ...]};
//   - end-to-end runs, each a whole dtsim run: {"sets": [{"id", "source", "cluster",
//     "rows": [{"id", "gpus", "model", "training", "strategy", "measured"}]}]}
//     (dtsim/hw/end_to_end.hpp), for validation only.
// Any object may also have "source" and "note"; "description", "meta" (the
// harness's run), "maintainer_statements", "also" and "column_sources" document a
// file. Bad files throw ConfigError naming the file, the JSON path and what was
// expected against what was found; an unknown key or column is rejected with a
// did-you-mean (calibrate.cpp lists the keys of each section).
#pragma once

#include "dtsim/hw/config.hpp"
#include "dtsim/hw/end_to_end.hpp"
#include "dtsim/hw/topology.hpp"

#include <nlohmann/json.hpp>

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dtsim::hw::calib {

struct CollectivePoint {
    double bytes = 0;    // nccl-tests size (the whole array)
    double seconds = 0;  // measured time
};

struct CollectiveSet {
    std::string id, source, file, note;
    std::string gpu;      // hardware.gpu as published ("H100 SXM 80GB")
    std::string network;  // hardware.inter ("" inside one node)
    std::size_t index = 0;  // in the file's "datasets"
    std::string op;       // all_reduce, all_gather, reduce_scatter, broadcast, reduce, sendrecv
    int gpus_per_node = 8, nodes = 1;
    Algorithm algorithm = Algorithm::automatic;
    std::vector<CollectivePoint> rows;
    [[nodiscard]] int ranks() const { return gpus_per_node * nodes; }
};

struct GemmPoint {
    std::string gpu;
    DType dtype = DType::bf16;
    double m = 0, n = 0, k = 0;
    double tflops = 0;  // measured
};

struct GemmSet {
    std::string id;  // "<file stem>:<section>"
    std::string source, file;
    bool best_shape = false;  // max_achievable: the best shape of a search, which sets the efficiency ceiling
    std::vector<GemmPoint> rows;
    // A by-shape section's "gpu_overrides": what its GPU had unlike the cluster config of its
    // family (HBM bandwidth, a power limit); 0 = as the config says. limit_path is the limit's
    // JSON path, for the error when the config gives no TDP or a lower one.
    double hbm_TBps = 0;
    double power_limit_W = 0;
    std::string limit_path;
};

struct MegatronRow {
    std::string model;
    int heads = 0, hidden = 0, layers = 0, tp = 1, pp = 1, gpus = 1, global_batch = 1, micro_batch = 1;
    double tflops_per_gpu = 0;  // measured, Megatron's count (megatron_flops)
    // Megatron's --num-layers-per-virtual-pipeline-stage (optional column
    // "layers_per_virtual_stage"; null or absent: 0, not interleaved): the run
    // used interleaved 1F1B with layers / (pp x this) model chunks per GPU.
    int layers_per_virtual_stage = 0;
    // Megatron's --DDP-impl (optional column "ddp"): "torch" (PyTorch DDP, the
    // gradient all-reduce overlaps the last microbatch's backward), "local"
    // (all-reduced after the backward), "" (unknown: as local).
    std::string ddp;
    [[nodiscard]] int dp() const { return gpus / (tp * pp); }
    [[nodiscard]] int microbatches() const { return global_batch / (micro_batch * dp()); }
    // Model chunks per GPU of the interleaved schedule; 1 when not interleaved.
    [[nodiscard]] int chunks() const {
        return layers_per_virtual_stage > 0 && pp > 1 ? layers / (pp * layers_per_virtual_stage) : 1;
    }
};

struct MegatronSet {
    std::string id, source, file;
    std::string gpu = "A100";
    std::vector<MegatronRow> rows;
};

// One fused causal attention call as calibration/pytorch/dtsim_kernels.py measured it, or as a
// published benchmark gives it (forward and backward together only: `combined`; the forward
// alone: `forward_only`; or the two passes apart).
struct AttentionPoint {
    std::string gpu;
    std::string backend;  // "flash2" (the file's "flash"), "cudnn" or "flash1"
    double batch = 1, heads = 1, head_dim = 128, seq = 0;
    double forward_us = 0, forward_backward_us = 0;
    bool combined = false;      // only forward_backward_us is known
    bool forward_only = false;  // only forward_us is known
    bool check_only = false;    // a check of a curve, never fitted: a forward alone, or its file's held_out
};

// What a point's time covers: the forward, the backward (fwd_bwd - fwd), or both together.
enum class AttentionPass { forward, backward, both };

struct KernelSet {
    std::string id;  // "<file stem>:attention"
    std::string source, file, gpu;
    std::string held_out;  // why its file fits no curve (a published chart's "held_out"); "" when it may
    std::vector<AttentionPoint> attention;
};

// A memory-bound kernel timed alone in eager PyTorch (calibration/pytorch/dtsim_kernels.py: a kernel
// file's elementwise, cross_entropy and optimizer rows): its kind, the elements of its bf16 input
// (logits for the loss, parameters for Adam) and its times.
struct EagerKernelPoint {
    EagerKernel kind = EagerKernel::norm;
    std::string label;  // "rms_norm 4096 x 4096", "cross_entropy 8192 x 128256", "adamw fused 1e+08"
    double elements = 0;
    double forward_s = 0;  // Adam: its step
    std::optional<double> backward_s;  // fwd_bwd less fwd, where timed
};

struct EagerKernelSet {
    std::string id;  // "<file stem>:eager_kernels"
    std::string source, file, gpu;
    std::vector<EagerKernelPoint> rows;
};

// Each timed kind's rows (timed_kind) as bytes an element at `bytes_per_s` (memory_seconds' rate),
// forward and backward; Adam's as its factor on the bytes it counts.
struct TimedBytes {
    std::vector<double> forward, backward;
};
TimedBytes timed_bytes(const EagerKernelSet& s, EagerKernel kind, double bytes_per_s);
// The table the sets give at `bytes_per_s`: each timed kind's medians over all of them, rounded to
// 0.01 (Adam: its factor on the counted bytes); a kind without rows keeps `base`'s.
EagerKernelBytes fit_eager_kernels(const std::vector<const EagerKernelSet*>& sets, double bytes_per_s,
                                   EagerKernelBytes base);

// One transformer block on one GPU as the harness measured it (calibration/pytorch/dtsim_layer.py:
// its times; dtsim_memory.py: what it keeps for its backward), and the run config sections of a
// one-GPU ddp run of that block (model with 1 layer, training, strategy) that dtsim prices it in.
struct LayerRow {
    std::string label;  // "llama3-8b seq 8192 batch 1 flash2", "mpt-1b seq 2048 batch 4 recompute op"
    std::string path;   // its JSON path in the file ("$.layers.rows[2]")
    nlohmann::json model, training, strategy;
    double forward_s = 0, forward_backward_s = 0;  // a timed block (0 in a memory set)
    double saved_bytes = 0;                        // a memory set's: what one block keeps
};

struct LayerSet {
    std::string id;  // "<file stem>:layers" (times) or "<file stem>:memory" (what a block keeps)
    std::string source, file, gpu;
    bool memory = false;  // saved_bytes rows, not times
    std::vector<LayerRow> rows;
};

// Memory-bound kernels' bandwidth on one GPU as dtsim-membw measures it (its "memory_bandwidth"
// section: STREAM's copy and triad, one array size a row): what gpu.stream_fraction is fitted to.
struct StreamPoint {
    std::string kernel;
    double array_bytes = 0, gbps = 0;  // bytes of each array; bytes moved / time, GB = 1e9 bytes
};

struct StreamSet {
    std::string id;  // the file's stem
    std::string source, file, gpu;
    std::vector<StreamPoint> rows;
};

// The rows a fit and a prediction count: arrays of this size or more, beyond the L2 cache of the
// GPUs measured (50 MB on an H100), where smaller arrays read partly from L2 at more than HBM's
// bandwidth (h100_dtsim_membw.json: up to 4.6 TB/s at 8 MiB on a 3.35 TB/s part).
inline constexpr double kStreamMinArrayBytes = 64.0 * 1024 * 1024;
// The fraction of `hbm_bytes_per_s` the set reaches: the median GB/s of its rows with arrays of
// kStreamMinArrayBytes or more (0 where there is none).
double stream_fraction(const StreamSet& s, double hbm_bytes_per_s);

struct GroundTruth {
    std::vector<CollectiveSet> collectives;
    std::vector<GemmSet> gemms;
    std::vector<MegatronSet> megatron;
    std::vector<EndToEndSet> end_to_end;
    std::vector<KernelSet> kernels;
    std::vector<LayerSet> layers;
    std::vector<StreamSet> streams;
    std::vector<EagerKernelSet> eager;
    // Files of no kind read here (e.g. gpus.json), and why; and end-to-end rows dtsim cannot
    // express yet ("FILE: set S, row \"R\": not expressible yet: why").
    std::vector<std::string> skipped;
};

// Reads and checks the files. Throws ConfigError; a GPU name whose family cannot be told
// ("some gpu") is one (no cluster config could predict its data).
GroundTruth load_ground_truth(const std::vector<std::string>& files);
// The ids of the data sets (collective, GEMM, Megatron, end to end), in the order they were read: what
// CalibrateOptions::only and exclude name.
std::vector<std::string> data_set_ids(const GroundTruth& data);
// The data dtsim ships lies under one folder, `data_dir`: configs/ and calibration/data/ (the
// source tree, or share/dtsim where dtsim is installed; the command finds it, see docs/calibration.md).
// The data files shipped in calibration/data (the default of `dtsim validate`).
std::vector<std::string> shipped_data_files(const std::string& data_dir);
// The shipped cluster config for a GPU family and network ("H100" -> configs/clusters/dgx-h100.json,
// "H100" over EFA -> p5-h100-efa.json, over RoCE -> h100-roce.json; "H200" -> dgx-h200.json, over
// RoCE -> h200-roce.json; "B200" -> dgx-b200.json; "GB200" -> gb200-nvl72.json), or "".
std::string shipped_cluster_for(const std::string& data_dir, const std::string& family,
                                const std::string& network = "");

// "H100" from "H100 SXM 80GB", "H100-SXM", "A100 (p4d)": the first run of
// capital letters followed by at least two digits; "" if none.
std::string gpu_family(const std::string& name);
// The kind of network of hardware.inter: "EFA", "RoCE", "InfiniBand", or the text itself.
std::string network_kind(const std::string& inter);
// `gpu` (any case: "h100", "A100-SXM") is of `family`.
bool same_family(const std::string& gpu, const std::string& family);

// nccl-tests' bus factor for an operation name ("sendrecv": 1).
double op_bus_factor(const std::string& op, int ranks);

// ------------------------------------------------------------------- fitting

// The lower envelope of at most `max_lines` lines t = latency + x / bandwidth
// (x = bus_factor x size) that minimizes the squared relative error over the
// points: the points, by size, are cut into contiguous runs, each run gets a
// weighted least-squares line (latency >= 0), and the cut whose envelope fits
// best wins; another line is kept only if it removes a quarter of the squared
// error fewer lines leave (a protocol switch does; +-1 % noise around one
// line does not). Lines come back by increasing bandwidth. Throws std::invalid_argument for fewer than 2 points.
std::vector<FitLine> fit_lines(std::vector<std::pair<double, double>> x_seconds, int max_lines = 3);

// The GEMM model's overhead and bandwidth_fraction by least squares on
// log(TFLOP/s) over `points` (max efficiency as in `gpu`); returns the
// GemmModel with them and the RMS of log(predicted / measured).
struct GemmFitResult {
    GemmModel model;
    double rms_log = 0;
};
GemmFitResult fit_gemm(const GpuSpec& gpu, const std::vector<GemmPoint>& points);

// The exponent k of the tensor clock's power law (GpuSpec::power_exponent) by least squares on
// log(TFLOP/s) over `points`, GEMMs measured on `gpu` at its power limit (power_limit_watts below
// tdp_watts; its GEMM curve as fitted at the TDP), k searched in (0, 4]; returns k and the RMS of
// log(predicted / measured). Throws std::invalid_argument without points or without a limit below
// the TDP.
struct PowerFitResult {
    double exponent = 0;
    double rms_log = 0;
};
PowerFitResult fit_power_exponent(const GpuSpec& gpu, const std::vector<GemmPoint>& points);

struct CalibrateOptions {
    std::vector<std::string> only;     // data set ids to use (empty: all that match the cluster's GPU)
    std::vector<std::string> exclude;  // data set ids to leave out
    int max_lines = 3;
    double min_bytes = 64 * 1024;      // collective rows below this are not fitted (launch noise)
    // Megatron rows (model names, e.g. "1.7B") the GEMM efficiency ceiling of
    // their dtype is fitted to, end to end: the ceiling at which the median
    // signed error of those rows' TFLOP/s is zero. The other rows stay held out.
    std::vector<std::string> megatron_rows;
};

struct CalibrateResult {
    nlohmann::json cluster;          // {"cluster": {...}}: a cluster config as configs/clusters/*.json
    std::vector<std::string> log;    // what was fitted to what, one line each
    int fitted = 0;                  // parameters fitted: curves, GEMM ceilings, the shape curve, the Megatron ceiling
};

// Fits the parameters of `base` (a cluster config document, {"cluster": ...})
// to the data of its GPU family: per operation and level the measured curve
// (Link::fits), the GEMM efficiency ceiling per dtype (max_achievable) and
// its shape curve (<gpu>_<dtype>_by_shape). Throws ConfigError when two data
// sets of different hardware would fit the same curve, std::invalid_argument
// when nothing is fitted (no data of the cluster's GPU family, or every curve
// with fewer than 2 rows of at least min_bytes) or a Megatron row named in
// megatron_rows is not in the data.
CalibrateResult calibrate(const nlohmann::json& base, const std::string& base_file, const GroundTruth& data,
                          const CalibrateOptions& options = {});

// ---------------------------------------------------------------- validation

// Megatron-LM's count of FLOPs per iteration with full recompute (Narayanan et
// al. SC21, eq. 3): 96 B s l h^2 (1 + s / 6h + V / 16 l h).
double megatron_flops(double batch, double seq, double layers, double hidden, double vocab);

// The strategy a Megatron row runs with: "interleaved" with row.chunks() chunks
// where the row gives layers per virtual stage, else "1f1b" (pp = 1: no
// pipeline); full recompute; the gradient all-reduce overlapping the backward
// only with torch DDP. Throws ConfigError (naming `file` and the row) when the
// row breaks a constraint of SC21-era Megatron's interleaved schedule: layers
// divisible by pp x layers per virtual stage, more than one chunk, and the
// microbatches a multiple of pp.
nlohmann::json megatron_strategy(const MegatronRow& row, const std::string& file = "megatron row");
// How the row's schedule reads in validate's output: "interleaved 1F1B v=2",
// "1F1B", "no pipeline".
std::string megatron_schedule_label(const MegatronRow& row);
// The whole config of a Megatron row on `cluster` ({"cluster": ...}).
nlohmann::json megatron_config(const MegatronRow& row, const nlohmann::json& cluster);
// Megatron's TFLOP/s per GPU for the row as dtsim::hw::simulate predicts it on `cluster`.
double predict_megatron(const MegatronRow& row, const nlohmann::json& cluster, const std::string& file);
// The id a Megatron row is fitted under: "<set id>:<model>".
std::string megatron_row_id(const MegatronSet& set, const MegatronRow& row);

struct ValidationPoint {
    std::string label;          // "1 MiB", "1024x1024x1024 bf16", "175B"
    double x = 0;               // size in bytes, FLOPs or GPUs (for ordering)
    double measured = 0, predicted = 0;
    std::string unit;           // "us", "ms", "s", "TFLOP/s", "tokens/s/GPU", "% MFU", "GiB" or "MiB"
    bool counted = true;        // in the set's median and maximum
    bool in_sample = false;     // a parameter was fitted to this very point
    [[nodiscard]] double error() const { return measured != 0 ? predicted / measured - 1 : 0; }
};

struct ValidationSet {
    std::string id, kind, source, file;  // kind: collective, gemm, megatron, end_to_end, step, attention, layer, stream, eager
    std::string cluster;                 // the cluster config it ran on
    std::string fit;                     // "in-sample (fitted to it)", "held out", ...
    std::string note;                    // what the prediction assumes
    std::vector<ValidationPoint> points;
    double median = 0, max = 0;          // of |error| over counted points
    int counted = 0;
    double held_median = 0, held_max = 0;  // the same over counted points not in-sample
    int held_counted = 0;
    double mean = 0, held_mean = 0;      // mean |error| over the same points
    std::vector<std::string> skipped;    // end to end: rows not run ("R: not expressible yet: why")
    // End to end: rows dtsim says do not fit (each of them ran on its GPUs: a wrong verdict).
    int out_of_memory = 0;
};

struct ValidateOptions {
    // Cluster config files: a data set runs on the first of its GPU family (for multi-node
    // collectives, the first whose inter_node link name is of the data's network kind, if any),
    // else on the shipped config of its family.
    std::vector<std::string> clusters;
    std::string data_dir;               // where the shipped cluster configs are (see shipped_cluster_for); "": none
    double min_bytes = 1024 * 1024;     // collective points below this are shown, not counted
    bool holdout = false;               // collectives: fit on the other data sets; GEMM: leave one shape out
    int max_lines = 3;
    double calibrate_min_bytes = 64 * 1024;
    int jobs = 1;  // end-to-end rows simulated at once (run_each); the results do not depend on it
};

// FLOPs and measured seconds of a point's pass: forward (F), backward (2.5 F, fwd_bwd - fwd) or
// both (3.5 F, fwd_bwd).
double attention_flops(const AttentionPoint& p, AttentionPass pass);
double attention_measured_seconds(const AttentionPoint& p, AttentionPass pass);
// The passes a point measures apart: forward and backward, or both together for a combined one.
std::vector<AttentionPass> attention_passes(const AttentionPoint& p);
// dtsim's time for a point's pass on `gpu` (nullopt: no curve for its backend).
std::optional<double> attention_predicted_seconds(const GpuSpec& gpu, const AttentionPoint& p, AttentionPass pass, DType d);
// One curve per backend and head dimension (AttentionModel), by least squares on the relative
// error of t = F / (peak e) x (1 + half_seq / s) x (1 + half_tiles / n), n the point's query
// tiles (GpuSpec::attention_seconds), half_tiles the best of a grid from 0 to
// kMaxAttentionHalfTiles (15 waves of an H100's 132 SMs), fitted only where some length was
// measured at two tile counts; a group of fewer than two points is left out.
// A group of combined points (forward and backward together) gets one curve for both passes,
// fitted to their sum: it splits a call's time 1 : 2.5 between them, as their FLOPs.
AttentionModel fit_attention(const std::vector<AttentionPoint>& points, double peak_flops);
inline constexpr double kMaxAttentionHalfTiles = 2000;
// Whether `m`'s curve for a point could have been fitted to it: a curve of its backend and exact
// head dimension, fitted to sums (from_sums) where the point is one, to passes apart where not.
bool attention_fitted_from(const AttentionModel& m, const AttentionPoint& p);
nlohmann::json attention_json(const AttentionModel& m);
// Predicts a kernel set's attention rows on `gpu` (holdout: each from a fit to the others).
ValidationSet validate_attention(const KernelSet& s, const GpuSpec& gpu, const std::string& cluster_file, bool holdout);

std::vector<ValidationSet> validate(const GroundTruth& data, const ValidateOptions& options = {});

// How far dtsim was off on the published runs most like a config (`dtsim run --evidence`): the
// shipped end-to-end rows of its GPU family and framework (Megatron-LM's code, or PyTorch's own:
// DDP, FSDP, ZeRO-3 in pipeline stages) that share its other traits (tensor parallelism and its
// overlap, pipelining, context parallelism, the recompute policy, fp8, compiled blocks), each
// predicted as `dtsim validate` predicts it. Where fewer than `min_rows` share every trait, the
// least telling are let go one by one (compile, fp8, recompute, context, pipeline, the overlap,
// tensor parallelism), and `relaxed` names them.
struct EvidenceRow {
    std::string set, row, layout;
    double error = 0;  // throughput, predicted / measured - 1 (a step time: measured / predicted - 1): > 0, dtsim fast
    bool out_of_memory = false;  // dtsim says the published run does not fit (its time is compared all the same)
};
struct Evidence {
    std::vector<std::string> traits;   // what every row shares with the run, in words
    std::vector<std::string> relaxed;  // what the run has that some rows do not
    std::vector<EvidenceRow> rows;     // in the data's order
    double median = 0, low = 0, high = 0;  // of the rows' errors; meaningless without rows (null in to_json)
};
// The rows are predicted `jobs` at once (run_each); the result does not depend on it.
Evidence published_evidence(const Config& run, const std::string& data_dir, int jobs = 1, std::size_t min_rows = 5);
// The same for several runs at once, in order: the data read once, and each row any of them needs
// predicted once.
std::vector<Evidence> published_evidence(const std::vector<Config>& runs, const std::string& data_dir, int jobs = 1,
                                         std::size_t min_rows = 5);
nlohmann::json to_json(const Evidence& e);

// median, mean and maximum of |error| over the counted points.
void summarize(ValidationSet& s);

// How much faster than measured dtsim ran a published run, as `run --evidence` and `validate` word
// it: a throughput's predicted / measured - 1, a time's (unit "s", "ms" or "us") measured / predicted
// - 1; > 0: dtsim fast.
double speed_error(const std::string& unit, double measured, double predicted);
// Which way an end-to-end set errs on average, in words: the mean speed_error of its counted points
// ("12.3 % fast", "2.0 % slow"), or for a set of memory sizes (unit "GiB" or "MiB") their mean error
// ("21.2 % under", "14.9 % over"). Empty without counted points.
std::string mean_direction(const ValidationSet& s);

nlohmann::json to_json(const std::vector<ValidationSet>& sets);

// Every counted end-to-end row together (sets of kind end_to_end and megatron): their step time or
// throughput (memory false) or their peak memory (true, the "<id>:memory" sets), against the fidelity
// goal (step time or throughput within a mean |error| of 5 % and a worst of 10 %, peak memory within
// 5 %). Validation only: nothing is fitted to these rows, and no target holds them to the goal.
struct EndToEndSummary {
    int rows = 0, sets = 0, in_sample = 0;
    double mean = 0, median = 0, worst = 0;  // of |error|
    std::string worst_row;                   // "set: row"
};
EndToEndSummary summarize_end_to_end(const std::vector<ValidationSet>& sets, bool memory);
// The same over the sets of the given kinds (summarize_end_to_end: "end_to_end" and "megatron"; the
// harness's one-GPU steps: "step").
EndToEndSummary summarize_rows(const std::vector<ValidationSet>& sets, bool memory,
                               std::initializer_list<std::string_view> kinds);
nlohmann::json to_json(const EndToEndSummary& s);

// Reads a cluster config file ({"cluster": ...}, "include" allowed) as a document.
nlohmann::json read_cluster_file(const std::string& path);
// The Cluster of a cluster document with `nodes` nodes of `gpus_per_node` (0: as in the document).
// Throws ConfigError naming `file` and the JSON path of a bad value.
Cluster make_cluster(const nlohmann::json& doc, const std::string& file, int nodes = 0, int gpus_per_node = 0);
// The whole number at `key` of a cluster section ("nodes", "gpus_per_node"), or `fallback` where it
// is absent or not one (make_cluster reports it).
int whole_size(const nlohmann::json& cluster, const char* key, int fallback);

}  // namespace dtsim::hw::calib
