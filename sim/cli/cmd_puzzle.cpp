// `dtsim puzzle NAME` and `dtsim puzzles`: run the seed's puzzles, check them,
// compare with their targets, write traces and pictures.
#include "commands.hpp"

#include "dtsim/puzzle/registry.hpp"
#include "dtsim/render.hpp"
#include "dtsim/trace_io.hpp"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

namespace dtsim::cli {

std::string puzzle_names() {
    std::string s;
    for (const auto& p : puzzle::puzzles()) s += (s.empty() ? "" : ", ") + p.name;
    return s;
}

namespace {

using puzzle::PuzzleInfo;

const PuzzleInfo& lookup(const std::string& name) {
    const PuzzleInfo* p = puzzle::find_puzzle(name);
    if (!p) throw UsageError(fmt::format("unknown puzzle '{}'; the puzzles are: {}", name, puzzle_names()));
    return *p;
}

struct Verdict {
    double ratio;
    bool met;
};

Verdict against(double achieved, double target, double tolerance_pct) {
    const double ratio = achieved / target;
    return {ratio, ratio <= 1.0 + tolerance_pct / 100.0};
}

struct PuzzleOptions {
    std::string name;
    int layers = -1, batches = -1, ranks = -1;  // -1: the puzzle's canonical size (0 layers or batches is a size)
    double tolerance = 5.0;
    bool strict = false;
    TraceOutputs out;
};

void run_one(const PuzzleOptions& o) {
    if (o.name.empty()) throw UsageError(fmt::format("a puzzle name is required; the puzzles are: {}", puzzle_names()));
    const PuzzleInfo& p = lookup(o.name);
    const int L = o.layers >= 0 ? o.layers : p.layers;
    const int B = o.batches >= 0 ? o.batches : p.batches;
    const int R = o.ranks >= 0 ? o.ranks : p.ranks;
    o.out.check_ranks(R);
    if (validate_only()) return;
    const bool keep = o.out.any();  // events only when something is written from them
    std::optional<puzzle::RunResult> ran;
    try {
        ran = puzzle::run_strategy(p.strategy, L, B, R, puzzle::puzzle_costs(), {{"puzzle", p.name}},
                                   keep ? puzzle::Keep::events : puzzle::Keep::summary);
    } catch (const ScheduleError& e) {
        // A broken strategy: what it did up to the failure still goes to the files asked for.
        if (e.partial_trace) {
            fmt::print("puzzle {} (layers {}, batches {}, ranks {}): {}\n", p.name, L, B, R, p.title);
            fmt::print("  correct     no: the run failed (the error follows)\n");
            o.out.write_partial(*e.partial_trace);
        }
        throw;
    }
    auto& result = *ran;
    const auto& s = result.trace.summary;
    fmt::print("puzzle {} (layers {}, batches {}, ranks {}): {}\n", p.name, L, B, R, p.title);
    fmt::print("  correct     {}\n", result.check_error ? "no: " + *result.check_error : "yes");
    const bool canonical = L == p.layers && B == p.batches && R == p.ranks;
    bool missed = false;
    if (canonical) {
        auto t = against(s.timesteps, p.target_steps, o.tolerance);
        auto m = against(s.max_memory, p.target_memory, o.tolerance);
        missed = !t.met || !m.met;
        fmt::print("  timesteps   {:<12} target {:<10} ratio {:.3f}  {}\n", short_number(s.timesteps), short_number(p.target_steps),
                   t.ratio, t.met ? "met" : "MISSED");
        fmt::print("  makespan    {}\n", short_number(s.makespan));
        fmt::print("  max memory  {:<12} target {:<10} ratio {:.3f}  {}   at rank {}, time {}\n", short_number(s.max_memory),
                   short_number(p.target_memory), m.ratio, m.met ? "met" : "MISSED", s.max_memory_rank,
                   short_number(s.max_memory_time));
        fmt::print("  (a target is met when achieved <= target x {}; the seed's targets are rounded)\n",
                   short_number(1.0 + o.tolerance / 100.0));
    } else {
        fmt::print("  timesteps   {}\n  makespan    {}\n", short_number(s.timesteps), short_number(s.makespan));
        fmt::print("  max memory  {}   at rank {}, time {}\n", short_number(s.max_memory), s.max_memory_rank,
                   short_number(s.max_memory_time));
        fmt::print("  (targets apply to the canonical sizes: layers {}, batches {}, ranks {})\n", p.layers,
                   p.batches, p.ranks);
    }
    if (keep) o.out.write(result.trace);
    if (result.check_error || (o.strict && missed)) exit_status() = 1;
}

struct TableOptions {
    double tolerance = 5.0;
    bool strict = false;
    std::string out_dir;
};

void run_all(const TableOptions& o) {
    if (!o.out_dir.empty()) {
        std::error_code ec;
        if (std::filesystem::exists(o.out_dir, ec) && !std::filesystem::is_directory(o.out_dir, ec))
            throw UsageError(fmt::format("--out: \"{}\" is a file, not a folder", o.out_dir));
        if (validate_only()) return;
        if (std::filesystem::create_directories(o.out_dir, ec); ec)
            throw std::runtime_error(fmt::format("{}: cannot create the folder: {}", o.out_dir, ec.message()));
    }
    if (validate_only()) return;
    fmt::print("{:<14} {:>3} {:>3} {:>3}  {:>10} {:>7} {:>6}  {:>10} {:>8} {:>6}  {:>12}  {:<7} {}\n", "puzzle", "L",
               "B", "R", "timesteps", "target", "ratio", "max memory", "target", "ratio", "peak at r/t", "correct",
               "targets");
    int failed = 0, missed = 0;
    const int n = static_cast<int>(puzzle::puzzles().size());
    for (const auto& p : puzzle::puzzles()) {
        std::optional<puzzle::RunResult> result;
        try {
            result = puzzle::run_strategy(p.strategy, p.layers, p.batches, p.ranks, puzzle::puzzle_costs(),
                                          {{"puzzle", p.name}});
        } catch (const ScheduleError& e) {
            ++failed;
            fmt::print("{:<14} failed: {}\n", p.name, e.what());
            continue;
        }
        const auto& s = result->trace.summary;
        auto t = against(s.timesteps, p.target_steps, o.tolerance);
        auto m = against(s.max_memory, p.target_memory, o.tolerance);
        const bool ok = !result->check_error;
        failed += ok ? 0 : 1;
        missed += (t.met && m.met) ? 0 : 1;
        fmt::print("{:<14} {:>3} {:>3} {:>3}  {:>10} {:>7} {:>6.3f}  {:>10} {:>8} {:>6.3f}  {:>12}  {:<7} {}\n", p.name,
                   p.layers, p.batches, p.ranks, short_number(s.timesteps), short_number(p.target_steps), t.ratio, short_number(s.max_memory),
                   short_number(p.target_memory), m.ratio, fmt::format("{}/{}", s.max_memory_rank, short_number(s.max_memory_time)),
                   ok ? "yes" : "NO", (t.met && m.met) ? "met" : "MISSED");
        if (!ok) fmt::print("    {}\n", *result->check_error);
        if (!o.out_dir.empty()) {
            const auto base = std::filesystem::path(o.out_dir) / p.name;
            write_trace_file(result->trace, base.string() + ".json");
            render::write_image(result->trace, base.string() + ".svg", {});
        }
    }
    fmt::print("\n{} of {} puzzles correct; {} meet both targets (achieved <= target x {}; the seed's targets are "
               "rounded, several seed solutions land a few per cent above them)\n",
               n - failed, n, n - missed - failed, short_number(1.0 + o.tolerance / 100.0));
    if (!o.out_dir.empty())
        fmt::print("traces and SVG timelines: {}/<puzzle>.json, {}/<puzzle>.svg\n", o.out_dir, o.out_dir);
    if (failed > 0 || (o.strict && missed > 0)) exit_status() = 1;
}

void add_tolerance(CLI::App* cmd, double& tolerance, bool& strict) {
    cmd->add_option("--tolerance", tolerance, "Per cent above a target that still counts as met")
        ->check(number_in(Range{"a tolerance", "%", 0, 1000}))
        ->capture_default_str();
    cmd->add_flag("--strict", strict, "Exit with status 1 when a target is missed");
}

}  // namespace

void register_puzzle_commands(CLI::App& app) {
    auto po = std::make_shared<PuzzleOptions>();
    auto* one = app.add_subcommand("puzzle", "Run one puzzle strategy, check it and compare with its targets");
    one->add_option("name", po->name, "Puzzle: " + puzzle_names());
    one->add_option("--layers", po->layers, "Layers (default: the puzzle's canonical size)")
        ->transform(whole_number(0, 1 << 20));
    one->add_option("--batches", po->batches, "Batches (default: canonical)")->transform(whole_number(0, 1 << 24));
    one->add_option("--ranks", po->ranks, "Ranks, i.e. GPUs (default: canonical)")->transform(whole_number(1, 1 << 20));
    po->out.add_options(one);
    add_tolerance(one, po->tolerance, po->strict);
    one->callback([po] { run_one(*po); });

    auto to = std::make_shared<TableOptions>();
    auto* all = app.add_subcommand("puzzles", "Run the eight puzzles at their canonical sizes and print one table");
    all->add_option("--out", to->out_dir, "Write <puzzle>.json traces and <puzzle>.svg timelines into this folder")
        ->check(output_file());
    add_tolerance(all, to->tolerance, to->strict);
    all->callback([to] { run_all(*to); });
}

}  // namespace dtsim::cli
