// `dtsim plan CONFIG`: which layout to run (docs/planning.md). Enumerates the layouts of the
// config's model on its cluster (or on each of the --gpus counts), rejects those that cannot run
// or cannot fit, simulates the rest best first by a lower bound on their step time (or GPU-seconds,
// --rank-by), and prints the best that fit with the counts of what was rejected, pruned and
// simulated.
//
// A search splits over processes (--shard I/N --out FILE, then --merge FILE...) and over a Slurm
// cluster (--slurm DIR --shards N writes the job array and the merge job that do both).
//
// Exit status (main.cpp): 0 when some layout fits (a shard: when it wrote its file); 3 when every simulated layout ran out of
// memory or none passed the checks and the memory bound (no layout fits); 1 when a simulation
// failed and none fits; 2 for bad arguments or a bad config (nothing ran); 130/143 when
// interrupted.
#include "commands.hpp"
#include "progress.hpp"

#include "dtsim/detail/output_file.hpp"
#include "dtsim/hw/calibrate.hpp"
#include "dtsim/hw/config.hpp"
#include "dtsim/hw/plan.hpp"
#include "dtsim/hw/resilience.hpp"
#include "dtsim/hw/run.hpp"
#include "dtsim/hw/units.hpp"

#include "dtsim/render.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

namespace dtsim::cli {
namespace {

using hw::Bytes;
using hw::Seconds;

struct PlanArgs {
    std::string config;
    std::string gpus;  // a count, a list or a range (PlanRequest::gpus)
    std::vector<std::string> sets, space;
    int top = 5;
    std::string rank_by = "step_time";
    bool json = false;
    bool evidence = false;  // how far dtsim was off on the published runs most like each printed layout
    std::string csv;
    int jobs = 0;
    double time_budget = 0;
    double headroom = 0;  // GiB (PlanRequest::headroom)
    bool no_timings = false;
    std::string shard, out;         // --shard I/N --out FILE
    std::vector<std::string> merge; // --merge FILE...
    std::string slurm;              // --slurm DIR
    int shards = 0;                 // --shards N
    std::vector<std::string> slurm_args;
    ChartOutputs chart;  // --svg, --png, --pdf: the Pareto chart
};

// "I/N" with 0 <= I < N.
std::pair<int, int> parse_shard(const std::string& text) {
    const auto slash = text.find('/');
    int i = -1, n = 0;
    const auto whole = [](const std::string& t, int& v) {
        const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
        return !t.empty() && ec == std::errc() && end == t.data() + t.size();
    };
    if (slash == std::string::npos || !whole(text.substr(0, slash), i) || !whole(text.substr(slash + 1), n) || n < 1 ||
        n > 1000000 || i < 0 || i >= n)
        throw UsageError(fmt::format("--shard {}: expected I/N, whole numbers with 0 <= I < N <= 1000000", shown(text)));
    return {i, n};
}

// A word for /bin/sh: in single quotes, a quote as '\''.
std::string quoted(const std::string& word) {
    std::string out = "'";
    for (const char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

std::string absolute(const std::string& path) { return std::filesystem::absolute(path).lexically_normal().string(); }

// The options every shard and the merge repeat, as words: what defines the search.
std::vector<std::string> search_words(const PlanArgs& a) {
    std::vector<std::string> w = {absolute(a.config)};
    if (!a.gpus.empty()) w.insert(w.end(), {"--gpus", a.gpus});
    for (const auto& s : a.sets) w.insert(w.end(), {"--set", s});
    for (const auto& s : a.space) {
        // Schedule files are relative to the working directory, which a job's need not be: read as the
        // search reads them (set_space), and named by absolute path.
        if (hw::space_knob(s) != "schedule_file") {
            w.insert(w.end(), {"--space", s});
            continue;
        }
        hw::PlanSpace one;
        hw::set_space(one, s);
        std::string files;
        for (const auto& f : one.schedule_files) files += (files.empty() ? "" : ",") + absolute(f);
        w.insert(w.end(), {"--space", "schedule_file=" + files});
    }
    w.insert(w.end(), {"--top", std::to_string(a.top)});
    if (a.rank_by != "step_time") w.insert(w.end(), {"--rank-by", a.rank_by});
    if (a.time_budget > 0) w.insert(w.end(), {"--time-budget", fmt::format("{}", a.time_budget)});
    if (a.headroom > 0) w.insert(w.end(), {"--headroom", fmt::format("{}", a.headroom)});
    return w;
}

std::string join(const std::vector<std::string>& words) {
    std::string out;
    for (const auto& w : words) out += (out.empty() ? "" : " ") + quoted(w);
    return out;
}

// --slurm DIR: DIR/shards.sbatch (a job array, one task per shard), DIR/merge.sbatch (the merge,
// after every task ended well) and DIR/submit.sh, which submits both (docs/planning.md).
void write_slurm(const PlanArgs& a) {
    const std::string dir = absolute(a.slurm);
    if (dir.find_first_of(" \t\n\r%'\"\\$`") != std::string::npos)
        throw UsageError(fmt::format("--slurm {}: the folder's path must not hold spaces, quotes, '%', '$' or '`' "
                                     "(the #SBATCH lines take it as it is)",
                                     shown(a.slurm)));
    for (const auto& s : a.slurm_args)
        if (s.find_first_of("\n\r") != std::string::npos)
            throw UsageError(fmt::format("--slurm-arg {}: one line, please", shown(s)));
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw std::runtime_error(fmt::format("--slurm {}: cannot create the folder: {}", a.slurm, ec.message()));
    std::error_code self_ec;
    const std::string self = std::filesystem::read_symlink("/proc/self/exe", self_ec).string();
    if (self_ec) throw std::runtime_error(fmt::format("--slurm: cannot find dtsim's own path: {}", self_ec.message()));
    const int cpus = a.jobs > 0 ? a.jobs : 1;
    const int n = a.shards;
    std::string extra;
    for (const auto& s : a.slurm_args) extra += fmt::format("#SBATCH {}\n", s);
    const std::string search = join(search_words(a));
    std::string shards = fmt::format(
        "#!/bin/sh\n"
        "#SBATCH --job-name=dtsim-plan\n"
        "#SBATCH --array=0-{last}\n"
        "#SBATCH --cpus-per-task={cpus}\n"
        "#SBATCH --output={dir}/shard-%a.log\n"
        "{extra}"
        "# dtsim plan, one shard of {n} per task of the array: writes {dir}/shard-I.json\n"
        "set -eu\n"
        "i=\"$SLURM_ARRAY_TASK_ID\"\n"
        "exec {self} plan {search} -j {cpus} --shard \"$i/{n}\" --out {dirq}/shard-\"$i\".json\n",
        fmt::arg("last", n - 1), fmt::arg("cpus", cpus), fmt::arg("dir", dir), fmt::arg("extra", extra),
        fmt::arg("n", n), fmt::arg("self", quoted(self)), fmt::arg("search", search), fmt::arg("dirq", quoted(dir)));
    std::vector<std::string> files;
    for (int i = 0; i < n; ++i) files.push_back(fmt::format("{}/shard-{}.json", dir, i));
    std::vector<std::string> outputs;
    if (a.json) outputs.push_back("--json");
    if (a.evidence) outputs.push_back("--evidence");
    if (!a.csv.empty()) outputs.insert(outputs.end(), {"--csv", absolute(a.csv)});
    for (const auto& [option, path] : {std::pair{"--svg", &a.chart.svg}, {"--png", &a.chart.png}, {"--pdf", &a.chart.pdf}})
        if (!path->empty()) outputs.insert(outputs.end(), {option, absolute(*path)});
    if (a.no_timings) outputs.push_back("--no-timings");
    const std::string merge = fmt::format(
        "#!/bin/sh\n"
        "#SBATCH --job-name=dtsim-plan-merge\n"
        "#SBATCH --output={dir}/plan.out\n"
        "#SBATCH --error={dir}/merge.log\n"
        "{extra}"
        "# dtsim plan: the shards' files merged into the answer one process gives, in {dir}/plan.out\n"
        "exec {self} plan {search} {outputs}{space}--merge {files}\n",
        fmt::arg("dir", dir), fmt::arg("extra", extra), fmt::arg("self", quoted(self)), fmt::arg("search", search),
        fmt::arg("outputs", join(outputs)), fmt::arg("space", outputs.empty() ? "" : " "), fmt::arg("files", join(files)));
    const std::string submit = fmt::format(
        "#!/bin/sh\n"
        "# Submits the shards of a dtsim plan search as a job array and the merge after them.\n"
        "# Arguments go to the merge's sbatch: `--wait` returns when it has ended, with its status.\n"
        "set -eu\n"
        "rm -f {dirq}/plan.out {dirq}/shard-*.json\n"
        "array=$(sbatch --parsable {dirq}/shards.sbatch)\n"
        "array=${{array%%;*}}\n"
        "echo \"dtsim plan: {n} shards in job array $array; the merge runs after them and writes {dir}/plan.out\"\n"
        "sbatch --parsable --dependency=afterok:\"$array\" --kill-on-invalid-dep=yes \"$@\" {dirq}/merge.sbatch\n",
        fmt::arg("dirq", quoted(dir)), fmt::arg("n", n), fmt::arg("dir", dir));
    detail::write_output_file(dir + "/shards.sbatch", shards);
    detail::write_output_file(dir + "/merge.sbatch", merge);
    detail::write_output_file(dir + "/submit.sh", submit);
    std::filesystem::permissions(dir + "/submit.sh", std::filesystem::perms::owner_exec | std::filesystem::perms::group_exec,
                                 std::filesystem::perm_options::add, ec);
    fmt::print("wrote {0}/shards.sbatch ({1} shards, {2} CPU{3} each), {0}/merge.sbatch and {0}/submit.sh\n"
               "submit with: sh {0}/submit.sh   (the answer: {0}/plan.out)\n",
               dir, n, cpus, cpus == 1 ? "" : "s");
}

std::string cell_percent(double part, double whole) { return whole > 0 ? fmt::format("{:.1f}%", 100 * part / whole) : "-"; }

// A CSV cell (RFC 4180): quoted, its quotes doubled, where it holds a comma, a quote or a line break.
std::string csv_cell(const std::string& v) {
    if (v.find_first_of(",\"\r\n") == std::string::npos) return v;
    std::string q = "\"";
    for (const char ch : v) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
    return q + "\"";
}

// Every fitting layout simulated, fastest first: its figures, then one column per setting the search
// made (the JSON's `set`: strategy.tp, training.micro_batch, ...), in the order the rows first give
// them, empty where a row's layout does not set it.
void write_csv(const hw::PlanResult& r, const std::string& path) {
    std::ofstream out(path);
    if (!out) throw std::runtime_error(fmt::format("--csv {}: cannot write the file", path));
    std::vector<std::string> settings;
    for (const std::size_t b : r.best)
        for (const auto& o : r.enumeration.candidates[r.simulated[b].candidate].overrides)
            if (std::find(settings.begin(), settings.end(), o.path) == settings.end()) settings.push_back(o.path);
    out << "rank,gpus,layout,step_time_s,mfu,tokens_per_s,peak_bytes,capacity_bytes,compute_s,comm_s,idle_s,"
           "step_time_bound_s,memory_bound_bytes";
    for (const auto& s : settings) out << ',' << csv_cell(s);
    out << '\n';
    for (std::size_t i = 0; i < r.best.size(); ++i) {
        const auto& row = r.simulated[r.best[i]];
        const auto& c = r.enumeration.candidates[row.candidate];
        const auto& p = *row.figures;
        out << fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{}", i + 1, c.gpus, csv_cell(c.label), p.step_time,
                           p.mfu, p.tokens_per_second, p.peak_bytes, p.capacity, p.split.compute, p.split.comm,
                           p.split.idle, c.time_bound, c.memory_bound);
        const nlohmann::json set = hw::settings_json(c);
        for (const auto& s : settings) {
            out << ',';
            // A value as --set gives it: a string without its quotes.
            if (const auto v = set.find(s); v != set.end())
                out << csv_cell(v->is_string() ? v->get<std::string>() : v->dump());
        }
        out << '\n';
    }
    if (!out.flush()) throw std::runtime_error(fmt::format("--csv {}: writing failed", path));
}

// ", 3 into the headroom" where a search keeps a headroom (--headroom): rows whose peak fits the
// GPU but passes its capacity less the headroom.
std::string over_headroom_text(const hw::PlanResult& r) {
    return r.headroom > 0 ? fmt::format(", {} into the headroom", r.over_headroom) : "";
}

// The published runs most like each printed layout, best first (--evidence).
std::vector<hw::calib::Evidence> top_evidence(const hw::PlanResult& r, const hw::PlanRequest& request,
                                              std::size_t top, const std::string& data) {
    std::vector<hw::Config> layouts;
    for (std::size_t i = 0; i < r.best.size() && i < top; ++i)
        layouts.push_back(
            hw::candidate_config(r.enumeration, request, r.enumeration.candidates[r.simulated[r.best[i]].candidate]));
    return hw::calib::published_evidence(layouts, data, request.jobs);
}

// The figure the search ranks by (step time or GPU-seconds) of the i-th best.
double rank_figure(const hw::PlanResult& r, std::size_t i) {
    const hw::PlanRow& row = r.simulated[r.best[i]];
    const double step = row.figures->step_time;
    return r.rank_by == hw::RankBy::gpu_seconds ? step * r.enumeration.candidates[row.candidate].gpus : step;
}

// Two layouts judged on the same runs, described alike (what the runs share with the layout, and
// what they do not).
bool same_runs(const hw::calib::Evidence& a, const hw::calib::Evidence& b) {
    return a.traits == b.traits && a.relaxed == b.relaxed && a.rows.size() == b.rows.size() &&
           std::equal(a.rows.begin(), a.rows.end(), b.rows.begin(),
                      [](const auto& x, const auto& y) { return x.set == y.set && x.row == y.row; });
}

// Each layout's runs, and its step had dtsim erred on it as on them (measured = predicted x
// (1 + error)); then whether the order holds with each ranking figure corrected by its runs'
// median error (a layout without runs keeps its figure).
void print_evidence(const hw::PlanResult& r, const std::vector<hw::calib::Evidence>& layouts) {
    fmt::print("evidence: dtsim's error on the published runs most like each layout (its throughput: fast, the runs "
               "were slower), and the step had the layout erred as they did\n");
    for (std::size_t i = 0; i < layouts.size(); ++i) {
        const auto& e = layouts[i];
        const double step = r.simulated[r.best[i]].figures->step_time;
        if (e.rows.empty()) {
            fmt::print("  #{:<2} no published run in dtsim's data is like it ({})\n", i + 1, evidence_traits(e));
            continue;
        }
        const auto before = layouts.begin() + static_cast<std::ptrdiff_t>(i);
        const auto earlier = std::find_if(layouts.begin(), before, [&](const auto& x) { return same_runs(x, e); });
        const std::string runs =
            earlier != before
                ? fmt::format("the runs of #{}", earlier - layouts.begin() + 1)
                : fmt::format("{} run{} ({}) from {}", e.rows.size(), e.rows.size() == 1 ? "" : "s", evidence_traits(e),
                              evidence_sources(e));
        fmt::print("  #{:<2} {}: {} to {}, median {}: step {} to {} (median {})\n", i + 1, runs, fast_or_slow(e.low),
                   fast_or_slow(e.high), fast_or_slow(e.median), Seconds{step * (1 + e.low)},
                   Seconds{step * (1 + e.high)}, Seconds{step * (1 + e.median)});
    }
    std::vector<std::size_t> order(layouts.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    const auto corrected = [&](std::size_t i) { return rank_figure(r, i) * (1 + layouts[i].median); };
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return corrected(a) < corrected(b); });
    if (order.size() < 2) return;
    if (std::is_sorted(order.begin(), order.end())) {
        fmt::print("  corrected by its runs' median error, each layout keeps its place\n");
        return;
    }
    std::string by;
    for (const std::size_t i : order) by += fmt::format("{}#{}", by.empty() ? "" : ", ", i + 1);
    fmt::print("  corrected by its runs' median error, the order would be {}: dtsim errs differently on these kinds "
               "of layout, by more than the gaps between their predictions\n",
               by);
}

void print_plan(const hw::PlanResult& r, std::size_t top, bool timings,
                const std::vector<hw::calib::Evidence>* evidence) {
    const auto& e = r.enumeration;
    fmt::print("layouts: {} enumerated, {} rejected, {} candidates; {} simulated ({} out of memory{}, {} failed), "
               "{} pruned by the step-time bound{}\n",
               e.enumerated, e.rejected_total(), e.candidates.size(), r.simulated.size(), r.out_of_memory,
               over_headroom_text(r), r.failed, r.pruned,
               r.budget_hit ? fmt::format(", {} left unsimulated: time budget reached", r.left) : "");
    if (r.headroom > 0 && !e.candidates.empty()) {
        const double capacity = e.candidates.front().capacity;
        fmt::print("headroom: {} per GPU left free: a layout fits when its peak is at most {} of {}\n",
                   Bytes{r.headroom}, Bytes{capacity - r.headroom}, Bytes{capacity});
    }
    for (const auto& [why, n] : e.rejected) {
        fmt::print("  rejected {:>6}  {}\n", n, why);
        if (const auto ex = e.config_examples.find(why); ex != e.config_examples.end())
            fmt::print("{:>17}  e.g. {}\n", "", ex->second);
    }
    const bool gpu_seconds = r.rank_by == hw::RankBy::gpu_seconds;
    if (r.best.empty()) {
        fmt::print("no layout fits\n");
        if (!e.example_error.empty() && e.candidates.empty()) fmt::print("  for example: {}\n", e.example_error);
    } else {
        if (gpu_seconds) fmt::print("ranked by GPU-seconds a step (step time x GPUs)\n");
        fmt::print("{:>3} {:>5} {:>11} {:>6} {:>11} {:>21} {:>8} {:>8} {:>8}  {}\n", "#", "gpus", "step", "MFU", "tokens/s",
                   "peak mem / capacity", "compute", "comm", "idle", "layout");
        for (std::size_t i = 0; i < r.best.size() && i < top; ++i) {
            const auto& row = r.simulated[r.best[i]];
            const auto& p = *row.figures;
            fmt::print("{:>3} {:>5} {:>11} {:>5.1f}% {:>11.0f} {:>21} {:>8} {:>8} {:>8}  {}\n", i + 1,
                       e.candidates[row.candidate].gpus,
                       fmt::format("{}", Seconds{p.step_time}), 100 * p.mfu, p.tokens_per_second,
                       fmt::format("{} / {}", Bytes{p.peak_bytes}, Bytes{p.capacity}),
                       cell_percent(p.split.compute, p.step_time), cell_percent(p.split.comm, p.step_time),
                       cell_percent(p.split.idle, p.step_time), e.candidates[row.candidate].label);
        }
        // Where the prediction of the fastest rests on estimates rather than measurements.
        const hw::PlanRow& first = r.simulated[r.best.front()];
        const nlohmann::json& caveats = first.report["caveats"];
        for (std::size_t i = 0; caveats.is_array() && i < caveats.size(); ++i)
            if (caveats[i].is_string())
                fmt::print("{}{}\n", i == 0 ? "weakest (#1): " : "              ", caveats[i].get<std::string>());
        // The fastest may fit only on paper (run.cpp's `tight`: less free than PyTorch's allocator was
        // measured to reserve above its peak): say how to ask for room.
        const nlohmann::json& memory = first.report["memory"];
        if (r.headroom == 0 && memory.is_object() && memory.value("tight", false))
            fmt::print("tight (#1): it leaves {} free; --headroom GIB ranks only layouts that leave GIB free "
                       "(docs/planning.md#headroom)\n",
                       Bytes{first.figures->capacity - first.figures->peak_bytes});
        if (r.pruned > 0 && !r.budget_hit)
            fmt::print("exact: no layout left unsimulated can beat the {} above (its step-time bound{} is no better)\n",
                       std::min(top, r.best.size()), gpu_seconds ? " x GPUs" : "");
        if (evidence) print_evidence(r, *evidence);
    }
    if (timings && r.merged > 0)
        fmt::print("merged {} shards, which searched for {:.2f} s in all\n", r.merged, r.wall_seconds);
    else if (timings)
        fmt::print("searched in {:.2f} s: {:.1f} configs/s simulated\n", r.wall_seconds,
                   r.wall_seconds > 0 ? static_cast<double>(r.simulated.size()) / r.wall_seconds : 0.0);
}

void plan(const PlanArgs& a) {
    hw::PlanRequest request;
    request.config_path = a.config;
    request.gpus = a.gpus;
    request.top = a.top;
    try {
        request.rank_by = hw::parse_rank_by(a.rank_by);
    } catch (const hw::PlanError& e) {
        throw UsageError(e.what());
    }
    request.time_budget = a.time_budget;
    request.headroom = a.headroom * hw::kGiB;
    for (const auto& s : hw::parse_settings(a.sets)) {
        if (s.values.size() > 1)
            throw UsageError(fmt::format("--set {}: plan does not sweep; give one value (or search it with --space)",
                                         s.path));
        request.overrides.push_back({s.path, s.values.front()});
    }
    try {
        for (const auto& s : a.space) hw::set_space(request.space, s);
    } catch (const hw::PlanError& e) {
        throw UsageError(e.what());
    }
    const int modes = !a.shard.empty() + !a.merge.empty() + !a.slurm.empty();
    if (modes > 1) throw UsageError("--shard, --merge and --slurm: give one of them");
    if (!a.shard.empty()) {
        std::tie(request.shard, request.shards) = parse_shard(a.shard);
        if (a.out.empty()) throw UsageError("--shard: give the file to write with --out FILE");
        if (a.json || a.evidence || !a.csv.empty() || !a.chart.paths().empty())
            throw UsageError("--shard writes its share to --out; --json, --evidence, --csv and the chart are the "
                             "merge's");
    } else if (!a.out.empty()) {
        throw UsageError("--out: only with --shard I/N");
    }
    if (!a.slurm.empty() && a.shards < 1) throw UsageError("--slurm: give the number of shards with --shards N");
    if (a.slurm.empty() && a.shards > 0) throw UsageError("--shards: only with --slurm DIR");
    if (validate_only()) return;
    // Found before the search (or before a Slurm search is written), or a usage error.
    const std::string shipped = a.evidence ? data_dir(true) : "";
    if (!a.slurm.empty()) {
        write_slurm(a);
        return;
    }
    request.jobs = hw::sweep_jobs(a.jobs);
    // On a terminal: the rows simulated, how many more the search may simulate (the candidates
    // whose bound still beats the top), the best so far, and the time that would take at most.
    Progress bar;
    const auto show = [&bar, by = request.rank_by](const hw::PlanProgress& p) {
        if (!bar.due()) return;
        const double per_row = bar.seconds() / static_cast<double>(std::max<std::size_t>(1, p.simulated));
        bar.show(fmt::format("simulated {} of at most {} ({} candidates){}; at most {} left", p.simulated,
                             p.may_simulate, p.candidates,
                             p.best ? ", best " + hw::rank_figure_text(by, *p.best) : std::string(),
                             hw::duration_text(per_row * static_cast<double>(p.may_simulate - p.simulated))));
    };
    if (!a.shard.empty()) {
        const hw::PlanResult r = hw::plan(request, show);
        bar.clear();
        detail::write_output_file(a.out, hw::shard_to_json(r, request).dump() + "\n");
        fmt::print("shard {} of {}: {} of {} candidates; {} simulated ({} out of memory{}, {} failed), {} pruned by "
                   "the step-time bound{}; wrote {}\n",
                   request.shard, request.shards, r.simulated.size() + r.pruned + r.left,
                   r.enumeration.candidates.size(), r.simulated.size(), r.out_of_memory, over_headroom_text(r),
                   r.failed, r.pruned,
                   r.budget_hit ? fmt::format(", {} left unsimulated: time budget reached", r.left) : "", a.out);
        return;
    }
    hw::PlanResult r;
    if (!a.merge.empty()) {
        std::vector<nlohmann::json> shards;
        for (const auto& f : a.merge) shards.push_back(hw::read_shard_file(f));
        r = hw::merge_shards(request, shards, a.merge);
    } else {
        r = hw::plan(request, show);
        bar.clear();
    }
    const std::size_t top = static_cast<std::size_t>(a.top);
    const auto charts = a.chart.paths();
    if (!charts.empty()) {
        std::vector<render::ParetoPoint> points;
        double capacity = 0;
        for (const auto& row : r.simulated) {
            if (!row.figures) continue;  // a simulation that failed
            const auto& f = *row.figures;
            points.push_back({r.enumeration.candidates[row.candidate].label, f.step_time, f.peak_bytes, !row.fits()});
            capacity = std::max(capacity, f.capacity);
        }
        const nlohmann::json& name = r.enumeration.base.contains("name") ? r.enumeration.base["name"] : nullptr;
        const std::string title = fmt::format("dtsim plan: {}: step time against peak memory per GPU",
                                              name.is_string() ? name.get<std::string>() : a.config);
        for (const auto& path : charts) render::write_pareto_chart(points, capacity, path, title, r.headroom);
    }
    std::optional<std::vector<hw::calib::Evidence>> evidence;
    if (a.evidence) evidence = top_evidence(r, request, top, shipped);
    if (a.json) {
        nlohmann::json j = hw::to_json(r, top, !a.no_timings);
        for (std::size_t i = 0; evidence && i < evidence->size(); ++i) {
            const auto& e = (*evidence)[i];
            nlohmann::json& row = j["top"][i];
            row["evidence"] = hw::calib::to_json(e);
            const double step = r.simulated[r.best[i]].figures->step_time;
            row["step_time_if_erred_s"] =
                e.rows.empty() ? nlohmann::json(nullptr)
                               : nlohmann::json{{"min", step * (1 + e.low)},
                                                {"median", step * (1 + e.median)},
                                                {"max", step * (1 + e.high)}};
        }
        fmt::print("{}\n", j.dump(2));
    } else {
        print_plan(r, top, !a.no_timings, evidence ? &*evidence : nullptr);
    }
    if (!a.csv.empty()) write_csv(r, a.csv);
    if (!a.json)
        for (const auto& path : charts) fmt::print("chart {}\n", path);
    exit_status() = !r.best.empty() ? 0 : r.failed > 0 ? 1 : 3;
}

}  // namespace

void register_plan_command(CLI::App& app) {
    auto pa = std::make_shared<PlanArgs>();
    auto* cmd = app.add_subcommand("plan", "Find the fastest layout that fits: enumerate, bound, simulate best first");
    cmd->add_option("config", pa->config, "Config JSON: model, cluster, training (its strategy's layout is searched)")
        ->required();
    cmd->add_option("--gpus", pa->gpus,
                    "GPU counts to search: N, a list N1,N2,... or a range LO-HI (every whole number of nodes in it, "
                    "and a node's divisors below a node); default: the cluster's nodes x GPUs per node")
        ->allow_extra_args(false)
        ->check([](const std::string& v) { return v.empty() ? std::string("expected a GPU count, list or range") : std::string(); });
    cmd->add_option("--set", pa->sets, "Override a field that is not searched: path=value (repeatable)")
        ->allow_extra_args(false);
    cmd->add_option("--space", pa->space,
                    fmt::format("The values of a knob to search: knob=v1,v2 ({}; repeatable)",
                                fmt::join(hw::plan_knobs(), ", ")))
        ->allow_extra_args(false);
    cmd->add_option("--top", pa->top, "Layouts to print: the search is exact for the best N (default 5)")
        ->transform(whole_number(1, 1000000));
    cmd->add_option("--rank-by", pa->rank_by,
                    "Rank by step_time (default) or gpu_seconds (step time x GPUs: the cost of a step, which "
                    "weighs GPU counts against each other)")
        ->check(CLI::IsMember({"step_time", "gpu_seconds"}));
    cmd->add_option("--time-budget", pa->time_budget,
                    "Stop simulating after this many seconds and say what was left (default: none)")
        ->transform(number_in(0, 1e9));
    cmd->add_option("--headroom", pa->headroom,
                    "GiB each layout must leave free per GPU: one whose memory bound or simulated peak passes the "
                    "capacity less this does not fit (default 0)")
        ->transform(number_in(0, 1e6));
    cmd->add_flag("--json", pa->json, "Print the result as JSON");
    cmd->add_flag("--evidence", pa->evidence,
                  "Also predict the published runs in dtsim's data most like each layout printed, say how far off "
                  "dtsim was on them, and whether the order holds once each layout is corrected by its runs' "
                  "median error");
    cmd->add_option("--csv", pa->csv, "Write every fitting layout simulated, fastest first, as CSV")
        ->transform(output_file());
    pa->chart.add_options(cmd, "the Pareto chart (step time against peak memory of the layouts simulated)");
    cmd->add_flag("--no-timings", pa->no_timings, "Leave out the host times (for output compared byte for byte)");
    cmd->add_option("-j,--jobs", pa->jobs,
                    "Simulations at once, on as many threads (default: one per hardware thread); the output is "
                    "the same")
        ->transform(whole_number(1, hw::kMaxSweepJobs));
    cmd->add_option("--shard", pa->shard,
                    "Search only share I of N (0 <= I < N) and write it to --out; --merge combines the shares")
        ->allow_extra_args(false);
    cmd->add_option("--out", pa->out, "With --shard: the shard file to write")->transform(output_file());
    cmd->add_option("--merge", pa->merge,
                    "Combine the shard files of one search (the same config and options) into its answer")
        ->expected(1, 1000000);
    cmd->add_option("--slurm", pa->slurm,
                    "Write a Slurm job array (one task per shard) and a merge job into this folder, and the "
                    "script that submits them")
        ->allow_extra_args(false);
    cmd->add_option("--shards", pa->shards, "With --slurm: the number of shards (array tasks)")
        ->transform(whole_number(1, 1000000));
    cmd->add_option("--slurm-arg", pa->slurm_args,
                    "With --slurm: a line for both jobs' #SBATCH header, e.g. --slurm-arg=--partition=cpu (repeatable)")
        ->allow_extra_args(false);
    cmd->callback([pa] { plan(*pa); });
}

}  // namespace dtsim::cli
