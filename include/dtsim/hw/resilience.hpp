// Faults and checkpoints: a long training run of many steps with node failures
// (at given times, or drawn from a per-node MTBF), a checkpoint every k steps,
// restarts and the work lost since the last checkpoint; its goodput, and the
// checkpoint interval that maximises it next to the Young/Daly optimum.
//
// The step time and the model comes from `simulate()` of a run config; what a
// checkpoint writes follows the strategy (ZeRO stage, data-parallel size):
//   - replicas (ZeRO 0: DDP, Megatron, pipelines): the first data-parallel
//     replica writes (rank 0 alone for DDP), each rank its tp x pp shard of
//     bf16 weights and fp32 master weights, momentum and variance (14 bytes per
//     parameter, ZeRO paper section 5 without the gradients);
//   - ZeRO 1/2: every rank writes its optimizer shard (12P/dp); the first
//     replica also writes the bf16 weights;
//   - ZeRO 3 (FSDP): every rank writes its shard (14P/dp), all in parallel.
// A write takes max(bytes through the busiest node / the node's storage link,
// all bytes / the storage's aggregate write bandwidth); the restart load reads
// every rank's state the same way at the read bandwidth.
#pragma once

#include "dtsim/errors.hpp"
#include "dtsim/hw/config.hpp"
#include "dtsim/trace.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace dtsim::hw {

// What one checkpoint writes and one restart reads, per rank.
struct CheckpointPlan {
    std::vector<double> write_bytes;  // per rank; 0 = the rank does not write
    std::vector<double> read_bytes;   // per rank, at restart
    int gpus_per_node = 1;
    double write_time = 0;  // s, one checkpoint (training waits: a synchronous save)
    double read_time = 0;   // s, loading it at restart
    int writers = 0;
    double total_bytes = 0;  // written per checkpoint
    std::string who;         // "rank 0 writes the whole state", ...
};

// Throws ConfigError (at $.cluster.storage) when the cluster gives no storage.
CheckpointPlan plan_checkpoint(const Config& config);

// Times in seconds.
struct FaultOptions {
    long long steps = 1000;            // useful steps the run must complete
    long long checkpoint_every = 100;  // k: steps between checkpoints
    double node_mtbf = 0;              // mean time between failures of one node; 0 = no random failures
    std::vector<double> fail_at;       // failures at these wall-clock times (node 0), besides the drawn ones
    double restart_overhead = 600;     // relaunch, rendezvous, NCCL init: before the checkpoint load
    std::uint64_t seed = 1;
};

struct LongRun {
    long long checkpoint_every = 0;
    double wall = 0;           // s, until the last step is done
    double useful = 0;         // s of steps kept (= steps x step time)
    double lost = 0;           // s of steps (and partial steps) redone after failures
    double checkpointing = 0;  // s writing checkpoints (including writes cut short by a failure)
    double restarting = 0;     // s from failures to training again
    long long failures = 0;
    long long checkpoints = 0;
    [[nodiscard]] double goodput() const { return wall > 0 ? useful / wall : 0; }  // fraction of wall time
};

// What a run is expected to cost before it is simulated, from the closed form
// for exponential failures (Daly 2006, the expected wall-clock time of a
// segment with restarts): with the job's
// failure rate 1/M (M = node MTBF / nodes) and a restart of R (relaunch plus
// load) that a failure starts over, a segment that needs w seconds without a
// failure takes M e^{R/M} (e^{w/M} - 1) on average and meets e^{R/M} (e^{w/M} - 1)
// failures (failures arrive at rate 1/M throughout). A run is ceil(steps / k)
// segments: k steps and a checkpoint write each, the last without the write.
// Each --fail-at failure adds one failure, a restart and at most a segment of
// work, which random failures interrupt as they do any work: R + w seconds that
// take M (e^{(R+w)/M} - 1) and meet e^{(R+w)/M} - 1 failures on average (an
// upper bound: the work lost is at most a segment). Without random failures
// (node_mtbf 0) a segment takes w and a given failure R + w.
struct LongRunEstimate {
    long long segments = 0;  // ceil(steps / k)
    double failures = 0;     // expected failures per run (inf where e^{w/M} overflows)
    double wall = 0;         // expected wall time, s (inf likewise)
    double useful = 0;       // steps x step time
    double draws = 0;        // failures drawn when the run starts: one per node (random failures), else 0
    [[nodiscard]] double goodput() const { return wall > 0 && wall < 1e308 ? useful / wall : 0; }
    // Loop iterations of one simulated run: a segment or a failure each, and the draw of each node's
    // first failure.
    [[nodiscard]] double work() const { return static_cast<double>(segments) + failures + draws; }
};
LongRunEstimate estimate_long_run(double step_time, const CheckpointPlan& plan, int nodes, const FaultOptions& options);

// The limits of one simulated run (simulate_long_run refuses a run beyond them
// with std::invalid_argument, before it starts):
//  - expected failures per run: past 1e5 a checkpoint interval is hopeless (its
//    goodput is the closed form's, near 0) and each failure is a simulated event;
//  - segments per run (steps / k): 1e9, a few seconds of simulation;
//  - a timeline (trace) of at most 3e7 events (ranks x (2 segments + 3 failures)),
//    2 GB in memory at 64 bytes an event: the bound of a kept `dtsim run` trace.
// A run that meets 100 times the failures expected (a draw that unlikely does not
// happen: the count is close to geometric) stops with std::runtime_error, so the
// loop ends whatever the draws.
inline constexpr double kMaxExpectedFailuresPerRun = 1e5;
inline constexpr double kMaxSegmentsPerRun = 1e9;
inline constexpr double kMaxTimelineEvents = 3e7;
inline constexpr int kMaxNodes = 1 << 20;  // a million nodes: far above any cluster built
// The events of the timeline of a run expected as `e`, on `ranks` ranks.
double timeline_events(const LongRunEstimate& e, std::size_t ranks);

// One run; `trace` (if not null) receives the timeline: per rank "train",
// "lost", "checkpoint" (writers) or "idle" (the others during a write),
// "failure" (the failed node's ranks until relaunched; "idle" on the others)
// and "restart" (everyone loading the checkpoint).
// Throws std::invalid_argument for inputs it cannot run: a step time that is not
// finite and positive, a checkpoint or load time, MTBF, restart or failure time
// that is not finite and >= 0, nodes not in [1, kMaxNodes], a plan whose gpus_per_node < 1 or
// whose write and read lists differ in length, steps or k < 1, or a run past
// the limits above.
LongRun simulate_long_run(double step_time, const CheckpointPlan& plan, int nodes, const FaultOptions& options,
                          Trace* trace = nullptr);

// The mean over `trials` seeds (seed, seed+1, ...) of runs with interval k;
// `after_each` (if set) is called after each trial (progress).
LongRun mean_long_run(double step_time, const CheckpointPlan& plan, int nodes, FaultOptions options, int trials,
                      const std::function<void()>& after_each = {});

// ------------------------------------------------------- `dtsim failures`' sweep
//
// A sweep of checkpoint intervals as `dtsim failures` runs it: its parameters in the command's
// units, checked against the command's ranges and limits, the intervals and what each is expected
// to cost, then the mean long run of each interval that is simulated. The checks are the command's
// own: their messages start with "failures: " and name its options (--mtbf-hours, --steps, ...).

// The parameters as the command takes them (hours, minutes).
struct SweepRequest {
    long long steps = 10000;             // useful steps the run must complete: >= 1
    long long checkpoint_every = 0;      // the timeline's interval; 0: the best of the sweep
    double mtbf_hours = 0;               // of one node, in [0, kMaxFailureHours]; 0: no random failures
    std::vector<double> fail_at_hours;   // failures of node 0 at these wall-clock hours, each in [0, kMaxFailureHours]
    double restart_minutes = 10;         // relaunch before the checkpoint load, in [0, kMaxRestartMinutes]
    std::uint64_t seed = 1;              // of the first trial; trial i has seed + i
    int trials = 100;                    // runs averaged per interval (1 without random failures): >= 1
    bool timeline = false;               // a timeline of one run is wanted (--trace, --svg, ...)
};

// The physical ranges of the real-valued parameters: a node MTBF and failure times up to 1e7 hours
// (1,141 years), a relaunch up to a week.
inline constexpr double kMaxFailureHours = 1e7;
inline constexpr double kMaxRestartMinutes = 7 * 24 * 60;
// The most loop iterations (a segment of steps, a failure or a node's first draw, each;
// LongRunEstimate::work) a sweep may simulate over all its intervals and trials: from a few
// seconds (segments) to about half a minute (failures on a cluster of a hundred nodes) on one
// core. The default 10,000 steps x 100 trials is about 4e6; the 200,000-step example of
// docs/stragglers-and-failures.md about 8e7.
inline constexpr double kMaxSweepWork = 5e8;

// The bounds of one sweep: the command's by default (a test or a fuzzer may ask for less).
struct SweepLimits {
    double work = kMaxSweepWork;                  // loop iterations over all intervals and trials
    double timeline_events = kMaxTimelineEvents;  // events of the timeline of one run
};

// A sweep's parameters that cannot run: out of range, no failures asked for, or work out of reach.
// `dtsim failures` reports it as a usage error (exit status 2).
class SweepError : public std::invalid_argument, public InputError {
public:
    using std::invalid_argument::invalid_argument;
};

// An interval of the sweep: what the closed form expects of it and, once run, the mean over the trials.
struct SweepRow {
    long long k = 0;
    LongRunEstimate expected;
    std::optional<LongRun> run;  // absent: not (yet) simulated
    // Simulated when it expects at most kMaxExpectedFailuresPerRun failures per run.
    [[nodiscard]] bool simulated() const { return expected.failures <= kMaxExpectedFailuresPerRun; }
};

struct Sweep {
    FaultOptions options;  // in seconds; checkpoint_every is the last interval set
    int trials = 1;        // the request's with random failures, else 1
    double step_time = 0;
    CheckpointPlan plan;
    int nodes = 1;
    SweepLimits limits;
    std::vector<SweepRow> rows;  // 1, then about 12 % apart, up to the whole run
    double work = 0;             // loop iterations of the simulated rows over all trials
};

// Checks the request on its own (before a config is read): each value in its range and some
// failures asked for (an MTBF or failure times). Throws SweepError.
void check_sweep_request(const SweepRequest& request);

// Checks the request and plans its sweep: the intervals and what each is expected to cost
// (estimate_long_run), before anything is simulated. Throws SweepError where the request is out of
// range, the cluster has more than kMaxNodes nodes, the run's figures overflow, no interval can be
// simulated (the message says what would make the run feasible), the simulated intervals' work is
// above `limits.work` (or one has more than kMaxSegmentsPerRun segments), or the timeline's interval
// (request.checkpoint_every, when given with request.timeline) is refused as timeline_options
// refuses one; std::invalid_argument where the step time is not finite and positive or the plan
// cannot run (as simulate_long_run). A sweep it returns runs (run_sweep) without an error.
Sweep plan_sweep(const SweepRequest& request, double step_time, const CheckpointPlan& plan, int nodes,
                 const SweepLimits& limits = {});

// Runs each simulated interval (mean_long_run over the trials), calling `progress(work)` after each
// trial with the work its interval was expected to take; returns the row of the best goodput (the
// first of equals).
const SweepRow& run_sweep(Sweep& sweep, const std::function<void(double)>& progress = {});

// The options of the timeline of one run at interval k (the request's seed), for simulate_long_run
// with a trace: throws SweepError where the run expects more than kMaxExpectedFailuresPerRun failures
// or its timeline would hold more events than the sweep's limit (at most kMaxTimelineEvents).
FaultOptions timeline_options(const Sweep& sweep, long long k);

// A duration as the command and the sweep's messages print it: "2.25 s", "12.5 min", "3.10 h", and
// below 0.1 s "12.5 ms", "1.8 us".
std::string duration_text(double seconds);

// Young (1974) first-order optimum checkpoint interval, in seconds of work
// between checkpoints: sqrt(2 x checkpoint cost x MTBF), MTBF of the whole job.
double young_interval(double checkpoint_cost, double mtbf);
// Daly (2006, eq. 37) higher-order optimum: sqrt(2 d M) [1 + sqrt(d/(2M))/3 + d/(18 M)] - d
// for d < 2M, else M.
double daly_interval(double checkpoint_cost, double mtbf);

// A deterministic generator (splitmix64, Steele et al. 2014) and the
// exponential draw by inversion, written out so every standard library gives
// the same sequence.
class SplitMix64 {
public:
    explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
    std::uint64_t next();
    double uniform();                    // [0, 1), 53 bits
    double exponential(double mean);     // -mean x ln(1 - u)
private:
    std::uint64_t state_;
};

}  // namespace dtsim::hw
