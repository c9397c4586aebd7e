// `dtsim calibrate DATA.json... -o CLUSTER.json` fits the cluster model to
// measurements; `dtsim validate [DATA.json...]` predicts every measured point
// with the simulator and prints the errors.
//
// Exit status (main.cpp): 0; 1 for a failed run or, with --check, a target not
// met; 2 for bad arguments or a bad data or cluster file.
#include "commands.hpp"

#include "dtsim/detail/output_file.hpp"
#include "dtsim/hw/calibrate.hpp"
#include "dtsim/hw/run.hpp"
#include "dtsim/hw/units.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace dtsim::cli {
namespace {

namespace cal = hw::calib;

struct CalibrateArgs {
    std::vector<std::string> data;
    std::string base, out;
    std::vector<std::string> only, exclude, megatron_rows;
    int max_lines = 3;
    double min_bytes = 64 * 1024;
};

struct ValidateArgs {
    std::vector<std::string> data;
    std::vector<std::string> clusters;
    bool json = false, holdout = false, check = false, summary = false;
    double min_bytes = 1024 * 1024;
    int jobs = 0;  // end-to-end rows simulated at once; 0: hw::default_sweep_jobs()
};

// The sizes --min-bytes takes (a collective row's size in bytes; nccl-tests sweeps reach 16 GiB).
constexpr Range kMinBytes{"a size", "bytes", 0, 1e18};

// --only and --exclude name data sets of the data: an id that matches none is a typo, not a choice.
void check_ids(const std::vector<std::string>& given, const char* option, const std::vector<std::string>& ids) {
    std::vector<std::string> unknown;
    for (const auto& id : given)
        if (std::find(ids.begin(), ids.end(), id) == ids.end()) unknown.push_back(fmt::format("\"{}\"", id));
    if (unknown.empty()) return;
    throw UsageError(fmt::format("{}: no data set {} in the data; the data sets are: {}", option,
                                 fmt::join(unknown, ", "), fmt::join(ids, ", ")));
}

void calibrate(const CalibrateArgs& a) {
    if (a.out.empty()) throw UsageError("calibrate needs -o CLUSTER.json");
    if (a.max_lines < 1 || a.max_lines > 4) throw UsageError("--max-lines takes 1 to 4");
    if (validate_only()) return;
    const cal::GroundTruth data = cal::load_ground_truth(a.data);
    const std::vector<std::string> ids = cal::data_set_ids(data);
    check_ids(a.only, "--only", ids);
    check_ids(a.exclude, "--exclude", ids);
    std::string base = a.base;
    if (base.empty()) {
        std::set<std::string> fams;
        auto want = [&](const std::string& id) {
            return (a.only.empty() || std::find(a.only.begin(), a.only.end(), id) != a.only.end()) &&
                   std::find(a.exclude.begin(), a.exclude.end(), id) == a.exclude.end();
        };
        for (const auto& s : data.collectives)
            if (want(s.id)) fams.insert(cal::gpu_family(s.gpu));
        for (const auto& s : data.gemms)
            if (want(s.id) && !s.best_shape)
                for (const auto& p : s.rows) {
                    std::string up = p.gpu;
                    for (auto& ch : up) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
                    fams.insert(cal::gpu_family(up));
                }
        for (const auto& s : data.kernels)
            if (want(s.id) && !s.attention.empty()) fams.insert(cal::gpu_family(s.gpu));
        for (const auto& s : data.streams)
            if (want(s.id)) fams.insert(cal::gpu_family(s.gpu));
        for (const auto& s : data.eager)
            if (want(s.id)) fams.insert(cal::gpu_family(s.gpu));
        if (fams.size() != 1)
            throw UsageError(fmt::format("the data covers GPU families {{{}}}; choose the cluster to calibrate with --base",
                                         fmt::join(fams, ", ")));
        base = cal::shipped_cluster_for(data_dir(), *fams.begin());
        if (base.empty()) throw UsageError(fmt::format("no shipped cluster for {}; give one with --base", *fams.begin()));
    }
    cal::CalibrateOptions o;
    o.only = a.only;
    o.exclude = a.exclude;
    o.max_lines = a.max_lines;
    o.min_bytes = a.min_bytes;
    o.megatron_rows = a.megatron_rows;
    cal::CalibrateResult result;
    try {
        result = cal::calibrate(cal::read_cluster_file(base), base, data, o);
    } catch (const std::invalid_argument& e) {  // nothing to fit, a --fit-megatron row that is not in the data
        throw UsageError(e.what());
    }
    detail::write_output_file(a.out, result.cluster.dump(2) + "\n");
    fmt::print("calibrated {} from {} file{}:\n", base, a.data.size(), a.data.size() == 1 ? "" : "s");
    for (const auto& l : result.log) fmt::print("  {}\n", l);
    for (const auto& s : data.skipped) fmt::print("  skipped {}\n", s);
    fmt::print("wrote {} (include it from a run config in place of {})\n", a.out, base);
}

std::string pct(double e) { return fmt::format("{:+.1f} %", 100 * e); }

void print_set(const cal::ValidationSet& s, double min_bytes) {
    fmt::print("{} ({}; {})\n", s.id, s.kind, s.source);
    if (!s.note.empty()) fmt::print("  {}\n", s.note);
    fmt::print("  cluster {}; {}\n", s.cluster.empty() ? "-" : s.cluster, s.fit);
    if (s.points.empty()) return;
    std::size_t w = 8;
    for (const auto& p : s.points) w = std::max(w, p.label.size());
    const std::string unit = s.points.front().unit;
    fmt::print("  {:<{}} {:>14} {:>14} {:>9}\n", "point", w, "measured " + unit, "predicted", "error");
    for (const auto& p : s.points)
        fmt::print("  {:<{}} {:>14.2f} {:>14.2f} {:>9}{}\n", p.label, w, p.measured, p.predicted, pct(p.error()),
                   p.counted ? "" : "  (not counted)");
    if (s.kind == "collective")
        fmt::print("  |error| over {} points >= {}: median {:.1f} %, max {:.1f} %\n", s.counted,
                   fmt::format("{}", hw::Bytes{min_bytes}), 100 * s.median, 100 * s.max);
    else
        fmt::print("  |error| over {} points: median {:.1f} %, max {:.1f} %\n", s.counted, 100 * s.median, 100 * s.max);
    if (s.held_counted > 0 && s.held_counted < s.counted)
        fmt::print("  |error| over the {} held-out points: median {:.1f} %, max {:.1f} %\n", s.held_counted,
                   100 * s.held_median, 100 * s.held_max);
    fmt::print("\n");
}

// The targets of the validation: collectives of 1 MiB and more
// within a median 10 % on every data set; Megatron rows each within 15 %,
// median at most 8 %. A data set none of whose points counts (collectives
// all smaller than --min-bytes) cannot meet them, nor can no data set.
std::vector<std::string> missed_targets(const std::vector<cal::ValidationSet>& sets, double min_bytes) {
    std::vector<std::string> missed;
    if (sets.empty()) missed.push_back("no data set to predict");
    for (const auto& s : sets) {
        if (s.counted == 0)
            missed.push_back(s.kind == "collective"
                                 ? fmt::format("{}: no point counted (none of {} or more)", s.id, hw::Bytes{min_bytes})
                                 : fmt::format("{}: no point counted", s.id));
        if (s.kind == "collective" && s.counted > 0 && s.median > 0.10)
            missed.push_back(fmt::format("{}: median {:.1f} % > 10 %", s.id, 100 * s.median));
        if (s.kind == "megatron" && s.counted > 0) {
            if (s.max > 0.15) missed.push_back(fmt::format("{}: max {:.1f} % > 15 %", s.id, 100 * s.max));
            if (s.median > 0.08) missed.push_back(fmt::format("{}: median {:.1f} % > 8 %", s.id, 100 * s.median));
        }
    }
    return missed;
}

// validate's closing line for every end-to-end row together (calib::summarize_end_to_end).
std::string summary_text(const cal::EndToEndSummary& s, const char* what) {
    return fmt::format("{} over {} row{} of {} set{}{}: mean |error| {:.1f} %, median {:.1f} %, worst {:.1f} % ({})",
                       what, s.rows, s.rows == 1 ? "" : "s", s.sets, s.sets == 1 ? "" : "s",
                       s.in_sample ? fmt::format(" ({} in-sample)", s.in_sample) : "", 100 * s.mean, 100 * s.median,
                       100 * s.worst, s.worst_row);
}

void validate(const ValidateArgs& a) {
    if (validate_only()) return;
    const std::vector<std::string> files = a.data.empty() ? cal::shipped_data_files(data_dir()) : a.data;
    const cal::GroundTruth data = cal::load_ground_truth(files);
    cal::ValidateOptions o;
    o.clusters = a.clusters;
    o.data_dir = data_dir(false);  // for data of a GPU family no --cluster covers
    o.min_bytes = a.min_bytes;
    o.holdout = a.holdout;
    o.jobs = hw::sweep_jobs(a.jobs);
    const auto sets = cal::validate(data, o);
    const auto missed = missed_targets(sets, a.min_bytes);
    const cal::EndToEndSummary time = cal::summarize_end_to_end(sets, false);
    const cal::EndToEndSummary memory = cal::summarize_end_to_end(sets, true);
    const cal::EndToEndSummary step_time = cal::summarize_rows(sets, false, {"step"});
    const cal::EndToEndSummary step_memory = cal::summarize_rows(sets, true, {"step"});
    if (a.json) {
        nlohmann::json j{{"files", files}, {"holdout", a.holdout}, {"min_bytes", a.min_bytes},
                         {"sets", cal::to_json(sets)}, {"targets_missed", missed},
                         {"end_to_end", {{"time", cal::to_json(time)}, {"memory", cal::to_json(memory)}}},
                         {"one_gpu_steps", {{"time", cal::to_json(step_time)}, {"memory", cal::to_json(step_memory)}}}};
        // A file name that is not UTF-8 is printed with U+FFFD in its place.
        fmt::print("{}\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
    } else {
        if (!a.summary)
            for (const auto& s : sets) print_set(s, a.min_bytes);
        std::size_t w = 8;
        for (const auto& s : sets) w = std::max(w, s.id.size());
        fmt::print("{:<{}} {:<10} {:>6} {:>8} {:>8}  {}\n", "data set", w, "kind", "points", "median", "max", "fit");
        for (const auto& s : sets) {
            fmt::print("{:<{}} {:<10} {:>6} {:>7.1f}% {:>7.1f}%  {}\n", s.id, w, s.kind, s.counted, 100 * s.median,
                       100 * s.max, s.fit);
            if (s.held_counted > 0 && s.held_counted < s.counted)
                fmt::print("{:<{}} {:<10} {:>6} {:>7.1f}% {:>7.1f}%  (held-out points only)\n", "", w, "", s.held_counted,
                           100 * s.held_median, 100 * s.held_max);
        }
        for (const auto& s : data.skipped) fmt::print("skipped {}\n", s);
        if (time.rows > 0 || memory.rows > 0) {
            fmt::print("end to end, validation only (nothing fitted to these rows; the goal: step time or throughput "
                       "within a mean of 5 % and a worst of 10 %, peak memory within 5 %):\n");
            if (time.rows > 0) fmt::print("  {}\n", summary_text(time, "step time or throughput"));
            if (memory.rows > 0) fmt::print("  {}\n", summary_text(memory, "peak memory"));
        }
        if (step_time.rows > 0 || step_memory.rows > 0) {
            fmt::print("one-GPU steps timed with this repository's harness (calibration/pytorch/dtsim_step.py; no "
                       "communication; validation only):\n");
            if (step_time.rows > 0) fmt::print("  {}\n", summary_text(step_time, "step time"));
            if (step_memory.rows > 0) fmt::print("  {}\n", summary_text(step_memory, "allocated peak memory"));
        }
        // The targets judge collective and Megatron sets only: a file of end-to-end runs (one's own,
        // say) gets no verdict it does not have.
        const bool judged = std::any_of(sets.begin(), sets.end(), [](const cal::ValidationSet& s) {
            return s.kind == "collective" || s.kind == "megatron";
        });
        if (missed.empty() && judged)
            fmt::print("targets (collectives >= 1 MiB: median <= 10 % per data set; Megatron: every row <= 15 %, "
                       "median <= 8 %): met\n");
        else if (!missed.empty())
            fmt::print("targets not met: {}\n", fmt::join(missed, "; "));
    }
    if (a.check && !missed.empty()) exit_status() = 1;
}

}  // namespace

void register_calibrate_commands(CLI::App& app) {
    auto ca = std::make_shared<CalibrateArgs>();
    auto* cal_cmd = app.add_subcommand("calibrate", "Fit a cluster config's cost models to measurements");
    // Files are checked as they are read: a missing one, or a folder, is an error naming it and why.
    cal_cmd->add_option("data", ca->data, "Ground-truth JSON files (calibration/data, or the harness's output)")
        ->required();
    cal_cmd->add_option("-o,--out", ca->out, "Write the calibrated cluster config here")->required();
    cal_cmd->add_option("--base", ca->base,
                        "Cluster config to start from (default: the shipped one of the data's GPU family)");
    cal_cmd->add_option("--only", ca->only, "Use only these data set ids (repeatable or comma-separated)")->delimiter(',');
    cal_cmd->add_option("--exclude", ca->exclude, "Leave out these data set ids (repeatable or comma-separated)")->delimiter(',');
    cal_cmd->add_option("--fit-megatron", ca->megatron_rows,
                        "Fit the fp16 GEMM ceiling end to end to these Megatron rows (model names, e.g. 1.7B; "
                        "repeatable or comma-separated); the other rows stay held out")
        ->delimiter(',');
    cal_cmd->add_option("--max-lines", ca->max_lines, "Lines (protocols) per collective curve, 1 to 4")
        ->transform(whole_number(1, 4))
        ->capture_default_str();
    cal_cmd->add_option("--min-bytes", ca->min_bytes, "Fit collective rows of at least this size")
        ->check(number_in(kMinBytes))
        ->capture_default_str();
    cal_cmd->callback([ca] { calibrate(*ca); });

    auto va = std::make_shared<ValidateArgs>();
    auto* val = app.add_subcommand("validate", "Predict every ground-truth point and print the errors");
    val->add_option("data", va->data, "Ground-truth JSON files (default: calibration/data/*.json)");
    val->add_option("--cluster", va->clusters,
                    "Cluster config to predict with, for data of its GPU family (default: configs/clusters)");
    val->add_flag("--holdout", va->holdout,
                  "Predict each collective data set from a fit to the others of its kind, each GEMM shape from the "
                  "other shapes, each timed eager kernel from the other rows of its kind");
    val->add_option("--min-bytes", va->min_bytes, "Count collective points of at least this size")
        ->check(number_in(kMinBytes))
        ->capture_default_str();
    val->add_flag("--summary", va->summary, "Print only the table of data sets");
    val->add_flag("--json", va->json, "Print the results as JSON");
    val->add_flag("--check", va->check, "Exit 1 when a validation target is not met");
    val->add_option("-j,--jobs", va->jobs,
                    "End-to-end rows simulated at once, on as many threads (default: one per hardware thread; 1: "
                    "one after another); the output is the same")
        ->transform(whole_number(1, hw::kMaxSweepJobs));
    val->callback([va] { validate(*va); });
}

}  // namespace dtsim::cli
