// Running a configuration: builds the world, places every rank, runs the
// strategy and reports what an engineer asks before renting the cluster.
#pragma once

#include "dtsim/hw/config.hpp"
#include "dtsim/hw/device.hpp"
#include "dtsim/hw/job.hpp"
#include "dtsim/hw/workload.hpp"
#include "dtsim/trace.hpp"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace dtsim::hw {

struct MemoryVerdict {
    int rank = 0;
    double time = 0;
    std::string op;  // "forward (layer 3)"
    double bytes = 0;
    // `bytes` by what it holds (MemoryKind), from the rank's allocations; none for the puzzle world.
    std::optional<MemoryParts> by_kind;
};

// What ran, defaults resolved: the names and the layout that the report's first line gives, for a
// program that reads the JSON report without the config (a sweep's row, compare's reports).
struct RunLayout {
    std::string model;    // model.name
    std::string cluster;  // cluster.name
    std::string gpu;      // cluster.gpu.name
    int seq = 0;
    std::string dtype;
    int dp = 1, tp = 1, pp = 1, cp = 1;
    int chunks = 1;              // model chunks (virtual stages) per pipeline rank
    int zero_stage = 0;
    std::string sharding;        // "fsdp": full, grad_op or hybrid; empty for the others
    bool sequence_parallel = false;
    std::string recompute;       // recompute_text
    std::string fp8;             // fp8_name
    bool compile = false;
};

struct RunReport {
    std::string name;
    std::string strategy;
    RunLayout layout;
    int gpus = 0;
    // The batch as run: sequences per step (training.global_batch, which follows a --set of
    // strategy.microbatches: config.hpp), per microbatch on one GPU, and microbatches per pipeline.
    int global_batch = 0;
    int micro_batch = 0;
    int microbatches = 0;
    double step_time = 0;        // s
    double model_flops = 0;      // one step, all GPUs, without recompute
    double hardware_flops = 0;   // one step, all GPUs, as executed (recompute included)
    double peak_flops = 0;       // per GPU, the model's dtype
    double mfu = 0;              // model_flops / (gpus x peak x step_time)
    double hfu = 0;              // hardware_flops / (gpus x peak x step_time)
    double tflops_per_gpu = 0;   // hardware_flops / gpus / step_time / 1e12 (Megatron's figure)
    double tokens_per_second = 0;
    TimeSplit split;             // mean over GPUs; compute + comm + idle = step_time
    std::vector<TimeSplit> rank_splits;  // per GPU (not for puzzle strategies)
    // The critical path (world.hpp: CriticalPath): the rank it spends the most
    // time on, that time and the time in transfers, as fractions of the step.
    int critical_rank = 0;
    double critical_share = 0;
    double critical_transfers_share = 0;
    // With stragglers: their description and the step time of the same run without them.
    std::string stragglers;
    std::optional<double> baseline_step_time;
    double capacity = 0;         // bytes per GPU
    MemoryVerdict peak;          // the worst rank's peak
    std::vector<double> rank_peaks;    // every rank's peak, bytes
    std::optional<MemoryVerdict> oom;  // the first allocation past capacity, if any
    // Fits, but with less to spare than PyTorch's caching allocator was measured to reserve above its
    // allocated peak (a caveat says how much): the run may not fit.
    bool tight_memory = false;
    std::optional<bool> correct;       // puzzle strategies: the final-weights check
    std::string check_error;
    std::size_t events = 0;
    double wall_seconds = 0;     // host time the simulation took
    int simulated_ranks = 0;     // the ranks the engine ran: gpus, or one data-parallel replica's (RunOptions)
    // Where the prediction rests on an estimate rather than a measurement, for this config
    // (prediction_caveats): one sentence each.
    std::vector<std::string> caveats;
};

struct RunResult {
    RunReport report;
    Trace trace;
};

// Where a config's prediction is weakest: the parts priced from structure or from an
// end-to-end fit rather than from kernel or collective measurements of this GPU and shape.
std::vector<std::string> prediction_caveats(const Config& c, const Workload& work);

struct RunOptions {
    bool keep_trace = true;  // false drops the events after the report is computed
    bool straggler_baseline = true;  // with stragglers, also run without them (baseline_step_time)
    // Simulate one rank for its twins (the same stage and context-parallel rank in every
    // data-parallel replica and tensor-parallel position), which run the same program at the same
    // times (simulated_twins): the same report and trace (each GPU's events its twin's), up to
    // dp x tp times fewer ranks simulated. A run that fails so runs again whole, for its error's ranks.
    bool twins_once = true;
};

// The ranks simulate() runs for their twins, or none where it simulates every rank. A transformer
// strategy on the whole grid with dp x tp > 1 whose twins sit alike on the nodes (a replica's
// cp x tp GPUs at a stage, and with pipelines a stage's dp x cp x tp, each fill whole nodes or
// divide one): one rank for every data-parallel replica and tensor-parallel position (hybrid
// sharding too: each shard and replica group is priced whole). With slow GPUs
// (stragglers.slowdown) the replicas that hold one are simulated whole, each of its
// tensor-parallel ranks, and one other replica stands for the rest (all of them wait alike for the
// slow ones' gradients); every rank where that saves nothing (a slow GPU in all replicas but one, or
// hybrid sharding, whose shard groups would mix the two kinds). Jitter makes every rank differ:
// none.
std::optional<Twins> simulated_twins(const Config& c, const RunOptions& options);
// Where the run has twins (a transformer strategy, dp x tp > 1, twins_once) but simulate() runs
// every rank, why, in a few words; empty otherwise.
std::string every_rank_reason(const Config& c, const RunOptions& options);
// Whether simulate() runs fewer ranks than GPUs: simulated_twins has a value.
bool twins_once_applies(const Config& c, const RunOptions& options);

// The size of a run, estimated from the config alone before anything is built
// (estimate_run_size): the events it records, and the model states (weights,
// gradients, optimizer) on the GPU that holds the most parameters.
//
// Events, for the hardware strategies: ranks x (L x m x e + m x (7, 8 for fsdp with tp > 1,
// + 4 x chunks when pp > 1) + s x buckets + 16), L the layers of one rank (layers / pp; the
// average with uneven stages, whose total is the same), m the microbatches.
// e, per layer and microbatch: the attention and MLP blocks of the forward and
// the backward, each one compute event plus its
// tensor-parallel collectives (none with tp = 1, an all-reduce, or an
// all-gather and a reduce-scatter with sequence parallelism); two more blocks
// with full recompute, one event with selective; the two weight-gradient
// events of a split backward (zbh1, schedule files); FSDP's all-gathers and
// reduce-scatter (3; 2 with grad_op, 4 hybrid). Per microbatch: the embedding,
// logits and loss, and the sends and receives of each chunk. buckets: the
// gradient buckets of one synchronisation (a few layers' gradient tensors
// poured into buckets of the strategy's sizes, scaled to L), s of them: one,
// or m with ZeRO-2. The straggler baseline run doubles it. It is at least what
// the run records and at most 1.5 x (tests/hw/test_hw_strategies.cpp: every
// strategy and recompute policy, and the shipped configs). The puzzle
// strategies: ranks x (layers x 8 + 16), x batches for grad_accum and gpipe
// (which run each batch through every layer), an upper bound.
struct RunSize {
    double events = 0;
    double layer_events = 0;       // per rank, layer and microbatch (hardware strategies)
    double model_state_bytes = 0;  // per GPU, the rank holding the most parameters (0 for the puzzle strategy)
    double model_state_grad_bytes = 0;  // the gradients' part of it (allocated during the backward where
                                        // the strategy makes its gradients on demand: grads_on_demand)
};
RunSize estimate_run_size(const Config& config, const RunOptions& options = {});

// The layers each pipeline rank holds, in rank order (pp entries): model chunk k on rank k mod pp,
// or V-shaped for "dualpipev" (rank r holds chunks r and 2 pp - 1 - r); a schedule file's placement
// is known only once it is read, and is taken as looped. One entry of every layer without a pipeline.
std::vector<double> pipeline_rank_layers(const Config& config);

// The most events a run may record: 1e8, about 7 x the largest shipped run (GPT-3
// 175B on 1,024 GPUs, SC21's 1F1B: 14,993,600 events, a few seconds), under a
// minute of simulation; 3e7 when it keeps them for files (64 bytes an event in memory,
// about 180 in a trace file: 2 GB and 5 GB).
inline constexpr double kMaxRunEvents = 1e8;
inline constexpr double kMaxKeptEvents = 3e7;

// Throws ConfigError (exit status 2) when the estimated events pass the limit,
// naming the estimate, the limit, what to make smaller and whether the model
// states alone would fit.
void check_run_size(const Config& config, const RunOptions& options = {});

// Throws ConfigError as check_run_size() does; ScheduleError if the strategy
// cannot finish; std::invalid_argument for a configuration the strategy cannot
// run; std::runtime_error naming the figure when a figure of the report (step
// time, FLOPs, MFU, tokens/s, time split, memory, critical path, baseline) is
// not finite.
RunResult simulate(const Config& config, const RunOptions& options = {});

nlohmann::json to_json(const RunReport& r);

// "rank 3 x1.50, ranks 8-15 x1.10, jitter lognormal cv 0.050 seed 42" ("" without stragglers).
std::string describe(const Stragglers& s);

// ------------------------------------------------------- sweeps of `dtsim run --set path=v1,v2`
//
// A simulation keeps its state to itself: its config, world, io_context and trace, and its
// coroutine frames (from a pool per thread: detail/frame_pool.hpp). What the process shares is
// safe on several threads: the operation names (OpCode, interned under a lock), the page blocks
// kept for reuse (detail/pages.hpp, under a lock), the registries and tables made once
// (function-local statics, read only once made), the system's error texts (detail/errno_text.hpp)
// and the interrupt request (an atomic). So simulations on several threads at once each give what
// they give alone (tests/hw/test_hw_sweep.cpp).

// One combination of a sweep, evaluated: its report, or why it could not run.
struct SweepOutcome {
    std::optional<RunReport> report;
    std::string error;  // what stopped it: a bad combination, a run too large, a failed run
};

// Loads the config at `path` with `overrides` and simulates it without keeping its events. Any
// std::exception becomes the outcome's error; Interrupted (not one) passes through.
SweepOutcome run_combination(const std::string& path, const std::vector<Override>& overrides);

// The most runs a sweep makes at once.
inline constexpr int kMaxSweepJobs = 1024;

// The runs a sweep makes at once when none are asked for: one per hardware thread, at least 1
// (at most kMaxSweepJobs).
int default_sweep_jobs();
// `asked`, or default_sweep_jobs() where it is 0 (the command line's default for -j).
int sweep_jobs(int asked);

// Evaluates items 0..count-1 with `evaluate`, up to `jobs` at once on threads of their own, and
// hands each outcome to `done` on the calling thread in index order: item i as soon as items 0 to
// i have finished, so that a long sweep streams and its output reads as one made one item after
// another. `jobs` <= 1 (or one item) evaluates them one after another on the calling thread and
// starts no thread (as when the system gives no thread at all). An interrupt request (interrupt.hpp) found before an item starts counts as
// Interrupted thrown by it. An item whose evaluation throws stops the sweep: no item starts after
// it, `done` has had every item before it and gets none after it (items after it that finished
// are dropped), and the exception is rethrown once every thread has stopped; an exception from
// `done` likewise. Output made this way is, cut where it stops, the output of the items one
// after another.
void run_in_order(std::size_t count, int jobs, const std::function<SweepOutcome(std::size_t)>& evaluate,
                  const std::function<void(std::size_t, SweepOutcome&)>& done);
// Items 0 to count - 1, `jobs` at once, each keeping its own result where `evaluate` puts it: run_in_order
// with nothing handed on. What the first item in index order to throw threw is thrown again.
void run_each(std::size_t count, int jobs, const std::function<void(std::size_t)>& evaluate);

}  // namespace dtsim::hw
