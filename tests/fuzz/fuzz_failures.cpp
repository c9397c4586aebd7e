// libFuzzer target: `dtsim failures`' parameters. The input is lines "KEY VALUE" (in any order, a
// later line overriding an earlier one, "#" starting a comment):
//   steps N, every N (--checkpoint-every), mtbf H, fail H1,H2,... (--fail-at-hours, appended),
//   restart M, seed N, trials N, timeline 0|1 (a timeline is asked for),
//   step S (the step time, seconds: the command simulates it, here it is given);
//   config I: the checkpoint plan of configs/resilience's I-th run config (plan_checkpoint), with
//     "set PATH=VALUE" lines applied to it as --set does (cluster.storage.write_GBps=1e-300);
//   otherwise a plan of its own: ranks N, gpn N (GPUs per node), nodes N, write S, read S (the
//     checkpoint's write and load times, seconds), uneven 1 (read lists one rank fewer).
// Numbers are read as strtod/strtoll read them: "nan", "inf", "-0", "1e-320", "0x1p-1074" and
// integers past 64 bits (saturated) reach the library as they are. The parameters go through
// the command's checks (check_sweep_request, plan_sweep); a sweep they accept must run (run_sweep)
// without an error and with finite figures that add up, and so must its timeline. The work bound
// of one input is lower than the command's (SweepLimits), so that no input takes more than a
// fraction of a second.
#include "dtsim/hw/config.hpp"
#include "dtsim/hw/resilience.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace dtsim::hw;

// The run configs of configs/resilience, read once.
const std::vector<Config>& configs() {
    static const std::vector<Config> all = [] {
        std::vector<Config> out;
        for (const char* name : {"gpt3-175b-1024xa100.json", "llama3-8b-16xh100-ddp.json", "llama3-8b-16xh100-fsdp.json"})
            out.push_back(load_config(std::string(DTSIM_RESILIENCE_CONFIGS) + "/" + name));
        return out;
    }();
    return all;
}

double real(const std::string& v) { return std::strtod(v.c_str(), nullptr); }
long long integer(const std::string& v) { return std::strtoll(v.c_str(), nullptr, 10); }
int small(const std::string& v) { return static_cast<int>(std::clamp<long long>(integer(v), INT_MIN, INT_MAX)); }

void check(bool ok, const char* what) {
    if (ok) return;
    std::fprintf(stderr, "fuzz_failures: %s\n", what);
    std::abort();
}

bool finite_and_positive(double v) { return std::isfinite(v) && v >= 0; }

// A run's figures: finite, not negative, adding up to its wall time, its goodput at most 1.
void check_run(const LongRun& r) {
    check(finite_and_positive(r.wall) && finite_and_positive(r.useful) && finite_and_positive(r.lost) &&
              finite_and_positive(r.checkpointing) && finite_and_positive(r.restarting),
          "a figure of the run is not finite and >= 0");
    check(r.failures >= 0 && r.checkpoints >= 0, "a negative count");
    const double parts = r.useful + r.lost + r.checkpointing + r.restarting;
    check(std::abs(r.wall - parts) <= 1e-6 * std::max(r.wall, parts) + 1e-300,
          "the wall time is not its parts' sum");
    check(r.goodput() >= 0 && r.goodput() <= 1 + 1e-9, "the goodput is not in [0, 1]");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    SweepRequest request;
    request.steps = 2000;
    request.trials = 2;
    double step_time = 2.0;
    int config = -1;
    std::vector<Override> sets;
    int ranks = 16, gpus_per_node = 8, nodes = 2;
    double write_time = 30, read_time = 10;
    bool uneven = false;

    std::string_view text(reinterpret_cast<const char*>(data), size);
    while (!text.empty()) {
        const auto nl = text.find('\n');
        std::string line(text.substr(0, nl));
        text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
        if (line.empty() || line[0] == '#') continue;
        const auto space = line.find(' ');
        const std::string key = line.substr(0, space);
        const std::string value = space == std::string::npos ? "" : line.substr(space + 1);
        if (key == "steps") request.steps = integer(value);
        else if (key == "every") request.checkpoint_every = integer(value);
        else if (key == "mtbf") request.mtbf_hours = real(value);
        else if (key == "restart") request.restart_minutes = real(value);
        else if (key == "seed") request.seed = std::strtoull(value.c_str(), nullptr, 10);
        else if (key == "trials") request.trials = small(value);
        else if (key == "timeline") request.timeline = value != "0";
        else if (key == "step") step_time = real(value);
        else if (key == "config") config = std::abs(small(value) % 3);
        else if (key == "ranks") ranks = std::clamp(small(value), 0, 1 << 14);
        else if (key == "gpn") gpus_per_node = small(value);
        else if (key == "nodes") nodes = small(value);
        else if (key == "write") write_time = real(value);
        else if (key == "read") read_time = real(value);
        else if (key == "uneven") uneven = value != "0";
        else if (key == "set") {
            try {
                sets.push_back(parse_override(value));
            } catch (const ConfigError&) {
                return 0;
            }
        } else if (key == "fail") {
            std::size_t start = 0;
            for (;;) {
                const auto comma = value.find(',', start);
                request.fail_at_hours.push_back(real(value.substr(start, comma - start)));
                if (comma == std::string::npos) break;
                start = comma + 1;
            }
        }
    }

    CheckpointPlan plan;
    if (config >= 0) {
        // As the command reads its config: the overrides through the config's own checks.
        try {
            const Config& base = configs()[static_cast<std::size_t>(config)];
            const Config c = sets.empty() ? base : parse_config(base.json, base.file, sets);
            plan = plan_checkpoint(c);
            nodes = c.cluster.nodes;
        } catch (const ConfigError&) {
            return 0;
        }
    } else {
        plan.gpus_per_node = gpus_per_node;
        plan.write_time = write_time;
        plan.read_time = read_time;
        plan.write_bytes.assign(static_cast<std::size_t>(ranks), 0.0);
        plan.read_bytes.assign(static_cast<std::size_t>(ranks), 1e9);
        for (std::size_t r = 0; r < plan.write_bytes.size(); r += static_cast<std::size_t>(std::max(1, gpus_per_node)))
            plan.write_bytes[r] = 1e9;
        if (uneven && !plan.read_bytes.empty()) plan.read_bytes.pop_back();
    }

    // A bound on one input's work far below the command's (5e8 loop iterations, 3e7 timeline events).
    const SweepLimits limits{.work = 2e4, .timeline_events = 2e4};
    Sweep sweep;
    try {
        check_sweep_request(request);
        sweep = plan_sweep(request, step_time, plan, nodes, limits);
    } catch (const SweepError&) {
        return 0;
    } catch (const std::invalid_argument&) {  // a step time or a plan the command never makes
        return 0;
    }
    check(sweep.work <= limits.work, "the sweep's work is above its limit");
    double done = 0;
    const SweepRow& best = run_sweep(sweep, [&](double work) { done += work; });
    check(std::abs(done - sweep.work) <= 1e-9 * sweep.work, "the progress does not add up to the sweep's work");
    for (const SweepRow& row : sweep.rows) {
        check(row.run.has_value() == row.simulated(), "a row simulated or not against its estimate");
        if (row.run) check_run(*row.run);
        check(!row.run || row.run->goodput() <= best.run->goodput(), "a row better than the best");
    }

    if (request.timeline) {
        FaultOptions o;
        try {
            o = timeline_options(sweep, request.checkpoint_every > 0 ? request.checkpoint_every : best.k);
        } catch (const SweepError&) {  // too many events to keep, as the command says after its table
            return 0;
        }
        dtsim::Trace trace;
        const LongRun one = simulate_long_run(sweep.step_time, sweep.plan, sweep.nodes, o, &trace);
        check_run(one);
        check(trace.ranks.size() == sweep.plan.write_bytes.size(), "the timeline has a row per rank");
    }
    return 0;
}
