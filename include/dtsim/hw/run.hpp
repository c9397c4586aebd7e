// Running a configuration: builds the world, places every rank, runs the
// strategy and reports what an engineer asks before renting the cluster.
#pragma once

#include "dtsim/hw/config.hpp"
#include "dtsim/hw/device.hpp"
#include "dtsim/trace.hpp"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace dtsim::hw {

struct MemoryVerdict {
    int rank = 0;
    double time = 0;
    std::string op;  // "forward (layer 3)"
    double bytes = 0;
};

struct RunReport {
    std::string name;
    std::string strategy;
    int gpus = 0;
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
    std::optional<bool> correct;       // puzzle strategies: the final-weights check
    std::string check_error;
    std::size_t events = 0;
    double wall_seconds = 0;     // host time the simulation took
};

struct RunResult {
    RunReport report;
    Trace trace;
};

struct RunOptions {
    bool keep_trace = true;  // false drops the events after the report is computed
    bool straggler_baseline = true;  // with stragglers, also run without them (baseline_step_time)
};

// Throws ScheduleError if the strategy cannot finish, std::invalid_argument for
// a configuration the strategy cannot run.
RunResult simulate(const Config& config, const RunOptions& options = {});

nlohmann::json to_json(const RunReport& r);

// "rank 3 x1.50, ranks 8-15 x1.10, jitter lognormal cv 0.050 seed 42" ("" without stragglers).
std::string describe(const Stragglers& s);

}  // namespace dtsim::hw
