// `dtsim run CONFIG` and `dtsim compare A B ...`: the hardware world from the
// command line. A run prints step time, MFU, tokens/s, the split of the step
// into compute, exposed communication and idle time, and the peak memory per
// GPU against its capacity with the out-of-memory verdict, and the rank the
// step's critical path spends the most time on (world.hpp: CriticalPath); with
// "stragglers" in the config, also how much they stretch the step against the
// same run without them (simulated too). `--set path=value`
// overrides any field; `--set path=v1,v2,v3` sweeps it and prints a row per value.
//
// Exit status (main.cpp): 0 when every run fits in memory (and puzzle runs are
// correct); 1 for a failed or incorrect run, or a sweep's combination that cannot
// run; 2 for bad arguments or a bad config (nothing ran); 3 when a run finished
// but does not fit in memory (a sweep or compare: some run, and none failed).
#include "commands.hpp"

#include "dtsim/hw/calibrate.hpp"
#include "dtsim/hw/config.hpp"
#include "dtsim/hw/job.hpp"
#include "dtsim/hw/run.hpp"
#include "dtsim/interrupt.hpp"
#include "dtsim/render.hpp"
#include "dtsim/trace_io.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dtsim::cli {
namespace {

using hw::Bytes;
using hw::Seconds;

struct RunArgs {
    std::string config;
    std::vector<std::string> sets;
    TraceOutputs out;
    bool json = false;
    bool evidence = false;  // also how far dtsim was off on the published runs most like this one
    int jobs = 0;  // a sweep's runs at once; 0: hw::default_sweep_jobs()
};

struct CompareArgs {
    std::vector<std::string> configs;
    std::vector<std::string> sets;
    ChartOutputs chart;
    bool json = false;
    int jobs = 0;  // configs run at once; 0: hw::default_sweep_jobs()
};

std::string percent(double part, double whole) { return whole > 0 ? fmt::format("{:.1f} %", 100 * part / whole) : "-"; }

std::string memory_verdict(const hw::RunReport& r) {
    if (r.tight_memory)
        return fmt::format("fits, but only {} to spare: PyTorch's allocator may reserve more (weakest, below)",
                           Bytes{r.capacity - r.peak.bytes});
    if (!r.oom) return "fits";
    return fmt::format("OUT OF MEMORY: rank {} passes {} at {} in {}", r.oom->rank, Bytes{r.capacity},
                       Seconds{r.oom->time}, r.oom->op);
}

// The strategy with the knobs that shape it: "interleaved (v 5)", "fsdp (hybrid)".
std::string strategy_label(const hw::Config& c) {
    const auto& s = c.strategy;
    std::string extra;
    if (s.name == "interleaved" || s.name == "bfs") extra = fmt::format("v {}", s.chunks);
    if (s.name == "interleaved" && s.microbatch_group > 0) extra += fmt::format(", group {}", s.microbatch_group);
    if (s.name == "fsdp")
        extra = s.sharding == "full"                                ? "full shard, ZeRO-3"
                : s.sharding == "hybrid" && hw::hybrid_shard_ranks(c) == 0 ? "hybrid, as full shard: its data-parallel ranks are not two or more whole nodes"
                                                                    : s.sharding;
    if (s.name == "schedule") extra = s.schedule_file;
    if (s.sequence_parallel) extra += std::string(extra.empty() ? "" : ", ") + "sequence parallel";
    return extra.empty() ? s.name : fmt::format("{} ({})", s.name, extra);
}

// What ran, in a line: "1f1b (sequence parallel) on 64 x H100-SXM, dp 2 x tp 8 x pp 4, 32 microbatches
// of 1, recompute selective, ZeRO-1".
std::string layout_line(const hw::Config& c, const hw::RunReport& r) {
    const auto& s = c.strategy;
    if (s.name == "puzzle")
        return fmt::format("puzzle strategy {} on {} x {} ({} layers, {} batches)", s.puzzle, r.gpus,
                           c.cluster.gpu.name, c.model.spec.layers, c.training.global_batch);
    const hw::RunLayout& l = r.layout;
    return fmt::format("{} on {} x {}, dp {} x tp {} x pp {}{}, {} microbatches of {}, recompute {}{}{}{}",
                       strategy_label(c), r.gpus, l.gpu, l.dp, l.tp, l.pp,
                       l.cp > 1 ? fmt::format(" x cp {}", l.cp) : "", r.microbatches, r.micro_batch, l.recompute,
                       l.zero_stage && s.name != "fsdp" ? fmt::format(", ZeRO-{}", l.zero_stage) : "",
                       l.fp8 != "none" ? fmt::format(", fp8 linears ({})", l.fp8) : "",
                       l.compile ? ", compiled blocks" : "");
}

void print_report(const hw::Config& c, const hw::RunReport& r) {
    const auto& s = c.strategy;
    fmt::print("{}: {}\n", r.name, layout_line(c, r));
    fmt::print("  step time     {}\n", Seconds{r.step_time});
    fmt::print("  MFU           {:.1f} %   (hardware FLOPs incl. recompute: {:.1f} %, {:.1f} TFLOP/s per GPU)\n",
               100 * r.mfu, 100 * r.hfu, r.tflops_per_gpu);
    fmt::print("  tokens/s      {:.0f}\n", r.tokens_per_second);
    fmt::print("  time split    compute {} ({}), exposed comm {} ({}), idle {} ({})   mean per GPU\n",
               Seconds{r.split.compute}, percent(r.split.compute, r.step_time), Seconds{r.split.comm},
               percent(r.split.comm, r.step_time), Seconds{r.split.idle}, percent(r.split.idle, r.step_time));
    if (!r.rank_splits.empty())
        fmt::print("  critical path rank {} (on it {} of the step, in transfers {})\n",
                   r.critical_rank, percent(r.critical_share, 1), percent(r.critical_transfers_share, 1));
    if (!r.stragglers.empty()) {
        if (r.baseline_step_time)
            fmt::print("  stragglers    {}: step {:+.1f} % against {} without them\n", r.stragglers,
                       100 * (r.step_time / *r.baseline_step_time - 1), Seconds{*r.baseline_step_time});
        else
            fmt::print("  stragglers    {}\n", r.stragglers);
    }
    fmt::print("  peak memory   {} of {} per GPU, worst on rank {} at {} in {}: {}\n", Bytes{r.peak.bytes},
               Bytes{r.capacity}, r.peak.rank, Seconds{r.peak.time}, r.peak.op, memory_verdict(r));
    // What the peak holds (and, where the run does not fit, the first allocation past capacity).
    const auto parts = [](const hw::MemoryParts& p) {
        std::string out;
        for (std::size_t k = 0; k < hw::kMemoryKinds; ++k)
            out += fmt::format("{}{} {}", out.empty() ? "" : ", ", hw::kind_name(static_cast<hw::MemoryKind>(k)),
                               Bytes{p[k]});
        return out;
    };
    if (r.peak.by_kind) fmt::print("  at the peak   {}\n", parts(*r.peak.by_kind));
    if (r.oom && r.oom->by_kind) fmt::print("  past capacity {}\n", parts(*r.oom->by_kind));
    if (r.correct)
        fmt::print("  correct       {}\n", *r.correct ? "yes" : "no: " + r.check_error);
    // Which ranks stood for their twins (simulated_twins), or why every rank ran where twins exist.
    std::string how;
    const bool has_twins = s.name != "puzzle" && static_cast<long long>(s.dp) * s.tp > 1;
    if (has_twins && r.simulated_ranks > 0 && r.simulated_ranks < r.gpus)
        how = fmt::format(" ({}: {} of {} GPUs)",
                          c.stragglers.slowdown.empty()
                              ? "one rank for its data- and tensor-parallel twins"
                              : "the replicas with slow GPUs, and one for the other data-parallel replicas",
                          r.simulated_ranks, r.gpus);
    else if (has_twins && r.simulated_ranks >= r.gpus) {
        const std::string why = hw::every_rank_reason(c, {.keep_trace = false});
        if (!why.empty()) how = fmt::format(" (every rank: {})", why);
    }
    fmt::print("  simulated     {} events in {:.3f} s{}\n", r.events, r.wall_seconds, how);
    for (std::size_t i = 0; i < r.caveats.size(); ++i)
        fmt::print("  {}{}\n", i == 0 ? "weakest       " : "              ", r.caveats[i]);
}

std::size_t cell_width(const std::vector<std::string>& keys) {
    std::size_t w = 18;
    for (const auto& k : keys) w = std::max(w, k.size());
    return w;
}

void table_header(const std::vector<std::string>& keys) {
    for (const auto& k : keys) fmt::print("{:<{}} ", k, cell_width(keys));
    fmt::print("{:>11} {:>6} {:>11} {:>8} {:>8} {:>8} {:>11} {}\n", "step", "MFU", "tokens/s", "compute", "comm",
               "idle", "peak mem", "memory");
}

void table_row(const std::vector<std::string>& cells, const hw::RunReport& r, std::size_t width = 18) {
    for (const auto& v : cells) fmt::print("{:<{}} ", v, width);
    fmt::print("{:>11} {:>5.1f}% {:>11.0f} {:>8} {:>8} {:>8} {:>11} {}{}\n", fmt::format("{}", Seconds{r.step_time}),
               100 * r.mfu, r.tokens_per_second, percent(r.split.compute, r.step_time),
               percent(r.split.comm, r.step_time), percent(r.split.idle, r.step_time),
               fmt::format("{}", Bytes{r.peak.bytes}), r.oom ? "OOM" : r.tight_memory ? "tight" : "fits",
               r.correct && !*r.correct ? "  INCORRECT" : "");
}

bool failed(const hw::RunReport& r) { return r.correct && !*r.correct; }

void print_evidence(const hw::calib::Evidence& e, const hw::RunReport& r) {
    const std::string traits = evidence_traits(e);
    if (e.rows.empty()) {
        fmt::print("  evidence      no published run in dtsim's data is like this one ({})\n", traits);
        return;
    }
    fmt::print("  evidence      {} published run{} like this one ({}): dtsim's throughput {} to {}, median {}\n",
               e.rows.size(), e.rows.size() == 1 ? "" : "s", traits, fast_or_slow(e.low), fast_or_slow(e.high),
               fast_or_slow(e.median));
    const auto oom = std::count_if(e.rows.begin(), e.rows.end(), [](const auto& row) { return row.out_of_memory; });
    fmt::print("                from {}{}\n", evidence_sources(e),
               oom > 0 ? fmt::format("; {} of them predicted out of memory (their time compared all the same)", oom) : "");
    // Measured step = predicted step x (1 + error), for either kind of error (calibrate.hpp).
    fmt::print("                if this run errs as they did, its step is {} to {} (median {}), not {}\n",
               Seconds{r.step_time * (1 + e.low)}, Seconds{r.step_time * (1 + e.high)},
               Seconds{r.step_time * (1 + e.median)}, Seconds{r.step_time});
}

// The most runs one sweep makes: far more than anyone reads in a table, far fewer than would
// exhaust the memory the combinations take before the first runs.
constexpr int kMaxSweepRuns = 100000;

void run(const RunArgs& a) {
    const auto settings = hw::parse_settings(a.sets);
    double runs = 1;  // the combinations, counted before they are made
    for (const auto& s : settings) runs *= static_cast<double>(s.values.size());
    if (runs > kMaxSweepRuns)
        throw UsageError(fmt::format("--set: the sweep would make {:.4g} runs (every combination of the values), more "
                                     "than the {} of one sweep",
                                     runs, kMaxSweepRuns));
    const bool sweep = runs > 1;
    const bool want_trace = a.out.any();
    if (sweep && a.evidence) throw UsageError("--evidence takes a single run, not a sweep");
    if (sweep && want_trace)
        throw UsageError("--trace, --svg, --png, --pdf and --chrome-trace take a single run, not a sweep");
    if (!a.out.picture.ranks.empty() && !a.out.pictures())
        throw UsageError("--show-ranks selects the ranks of a picture: give --svg, --png or --pdf with it");
    if (validate_only()) return;
    const auto combos = hw::combinations(settings);

    if (!sweep) {
        const hw::Config c = hw::load_config(a.config, combos.front());
        render::RankGrid grid;
        grid.tp = c.strategy.tp;
        grid.cp = c.strategy.cp;
        grid.dp = c.strategy.dp;
        grid.pp = c.strategy.pp;
        grid.known = c.strategy.name != "puzzle";  // a puzzle strategy lays its ranks out its own way
        a.out.check_ranks(c.gpus(), grid);
        const std::string shipped = a.evidence ? data_dir(true) : "";  // found before the run, or a usage error
        const auto result = hw::simulate(c, {.keep_trace = want_trace});
        std::optional<hw::calib::Evidence> evidence;
        if (a.evidence)
            evidence = hw::calib::published_evidence(c, shipped, hw::sweep_jobs(a.jobs));
        if (a.json) {
            nlohmann::json j = hw::to_json(result.report);
            if (evidence) j["evidence"] = hw::calib::to_json(*evidence);
            fmt::print("{}\n", j.dump(2));
        } else {
            print_report(c, result.report);
            if (evidence) print_evidence(*evidence, result.report);
        }
        a.out.write(result.trace);
        if (failed(result.report)) exit_status() = 1;
        else if (result.report.oom) exit_status() = 3;
        return;
    }

    // A sweep: one row per combination; a combination that cannot run says why and the sweep goes on.
    // The combinations run `jobs` at once, and each row is printed as soon as it and every row before
    // it are done: the rows, the JSON and the exit status are those of the runs one after another.
    std::vector<std::string> keys;
    for (const auto& s : settings) keys.push_back(s.path);
    // With the microbatches swept and the global batch not given, the global batch follows the
    // microbatches (config.hpp): a column says which each row used.
    const auto names = [&](const char* path) {
        return std::any_of(settings.begin(), settings.end(), [&](const hw::Setting& s) {
            return s.path == path || s.path == std::string("$.") + path;
        });
    };
    const bool batch_column = names("strategy.microbatches") && !names("training.global_batch");
    if (batch_column) keys.push_back("global_batch");
    const std::size_t width = cell_width(keys);
    nlohmann::json rows = nlohmann::json::array();
    if (!a.json) {
        fmt::print("{}: sweep of {} runs\n", a.config, combos.size());
        table_header(keys);
    }
    bool any_error = false, any_oom = false;
    const auto print_row = [&](std::size_t i, hw::SweepOutcome& o) {
        std::vector<std::string> cells;
        nlohmann::json set = nlohmann::json::object();
        for (const auto& ov : combos[i]) {
            cells.push_back(ov.value);
            set[ov.path] = ov.value;
        }
        if (batch_column) cells.push_back(o.report ? std::to_string(o.report->global_batch) : "-");
        if (o.report) {
            any_oom |= o.report->oom.has_value();
            any_error |= failed(*o.report);
            if (a.json)
                rows.push_back({{"set", set}, {"report", hw::to_json(*o.report)}});
            else
                table_row(cells, *o.report, width);
        } else {
            any_error = true;
            if (a.json) {
                rows.push_back({{"set", set}, {"error", o.error}});
            } else {
                for (const auto& v : cells) fmt::print("{:<{}} ", v, width);
                fmt::print("error: {}\n", o.error);
            }
        }
    };
    try {
        hw::run_in_order(
            combos.size(), hw::sweep_jobs(a.jobs),
            [&](std::size_t i) { return hw::run_combination(a.config, combos[i]); }, print_row);
    } catch (const Interrupted&) {
        // What the sweep has: the rows done before the first unfinished one are printed already; as
        // JSON, they are printed now.
        if (a.json) fmt::print("{}\n", rows.dump(2));
        throw;
    }
    if (a.json) fmt::print("{}\n", rows.dump(2));
    exit_status() = any_error ? 1 : any_oom ? 3 : 0;
}

void compare(const CompareArgs& a) {
    if (a.configs.size() < 2) throw UsageError("compare needs at least two configs");
    std::vector<hw::Override> overrides;
    for (const auto& s : hw::parse_settings(a.sets)) {
        if (s.values.size() > 1) throw UsageError(fmt::format("--set {}: compare does not sweep; give one value", s.path));
        overrides.push_back({s.path, s.values.front()});
    }
    if (validate_only()) return;
    // Every config is read and checked before any runs: a bad one is an input error (exit 2).
    std::vector<hw::Config> configs;
    for (const auto& path : a.configs) configs.push_back(hw::load_config(path, overrides));
    for (const auto& c : configs) hw::check_run_size(c, {.keep_trace = false});  // and every one is small enough
    std::vector<hw::RunReport> reports;
    bool any_error = false, any_oom = false;
    auto print_reports = [&] {
        if (a.json) {
            nlohmann::json rows = nlohmann::json::array();
            for (const auto& r : reports) rows.push_back(hw::to_json(r));
            fmt::print("{}\n", rows.dump(2));
            return;
        }
        std::size_t width = 6;
        for (const auto& r : reports) width = std::max(width, r.name.size());
        fmt::print("{:<{}} {:>5} ", "config", width, "gpus");
        table_header({});
        for (const auto& r : reports) {
            fmt::print("{:<{}} {:>5} ", r.name, width, r.gpus);
            table_row({}, r);
        }
        // What each config ran, as `dtsim run` words it (the names need not say).
        fmt::print("layouts:\n");
        for (std::size_t i = 0; i < reports.size(); ++i)
            fmt::print("  {:<{}} {}\n", reports[i].name, width, layout_line(configs[i], reports[i]));
    };
    try {
        // `jobs` at once, the reports kept in the configs' order; a run that fails stops the comparison.
        hw::run_in_order(
            configs.size(), hw::sweep_jobs(a.jobs),
            [&](std::size_t i) { return hw::SweepOutcome{hw::simulate(configs[i], {.keep_trace = false}).report, {}}; },
            [&](std::size_t, hw::SweepOutcome& o) {
                any_error |= failed(*o.report);
                any_oom |= o.report->oom.has_value();
                reports.push_back(std::move(*o.report));
            });
    } catch (const Interrupted&) {
        if (!reports.empty()) print_reports();  // the configs that ran (no chart)
        throw;
    }
    print_reports();
    if (!a.json) {
        const auto best = std::min_element(reports.begin(), reports.end(), [](const auto& x, const auto& y) {
            if (x.oom.has_value() != y.oom.has_value()) return !x.oom.has_value();
            return x.step_time < y.step_time;
        });
        fmt::print("fastest that fits: {}\n", best->oom ? "none (all out of memory)" : best->name);
    }
    std::vector<render::CompareRow> rows;
    for (const auto& r : reports)
        rows.push_back({r.name, r.split.compute, r.split.comm, r.split.idle, r.peak.bytes, r.capacity});
    for (const auto& path : a.chart.paths()) {
        render::write_compare_chart(rows, path, "dtsim compare: step time split and peak memory per GPU");
        if (!a.json) fmt::print("chart {}\n", path);
    }
    exit_status() = any_error ? 1 : any_oom ? 3 : 0;
}

}  // namespace

void register_run_commands(CLI::App& app) {
    auto ra = std::make_shared<RunArgs>();
    auto* run_cmd = app.add_subcommand("run", "Simulate one training step of a config in the hardware world");
    run_cmd->add_option("config", ra->config, "Config JSON (see configs/)")->required();
    run_cmd->add_option("--set", ra->sets, "Override a field: path=value; path=v1,v2,v3 sweeps (repeatable)")
        ->allow_extra_args(false);
    ra->out.add_options(run_cmd);
    run_cmd->add_flag("--json", ra->json, "Print the report as JSON");
    run_cmd->add_flag("--evidence", ra->evidence,
                      "Also predict the published runs in dtsim's data most like this one (GPU, framework, "
                      "parallelism, recompute, fp8) and print how far off dtsim was on them");
    run_cmd->add_option("-j,--jobs", ra->jobs,
                        "A sweep's runs (or --evidence's published runs) at once, on as many threads (default: one "
                        "per hardware thread; 1: one after another); the output is the same")
        ->transform(whole_number(1, hw::kMaxSweepJobs));
    run_cmd->callback([ra] { run(*ra); });

    auto ca = std::make_shared<CompareArgs>();
    auto* cmp = app.add_subcommand("compare", "Simulate several configs and print one table");
    cmp->add_option("configs", ca->configs, "Config JSON files")->required();
    cmp->add_option("--set", ca->sets, "Override a field in every config: path=value (repeatable)")
        ->allow_extra_args(false);
    ca->chart.add_options(cmp, "the comparison as a chart");
    cmp->add_flag("--json", ca->json, "Print the reports as JSON");
    cmp->add_option("-j,--jobs", ca->jobs,
                    "Configs run at once, on as many threads (default: one per hardware thread; 1: one after "
                    "another); the output is the same")
        ->transform(whole_number(1, hw::kMaxSweepJobs));
    cmp->callback([ca] { compare(*ca); });
}

}  // namespace dtsim::cli
