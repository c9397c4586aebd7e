// `dtsim schedule --generate NAME --stages P --microbatches M [--chunks V] [--write FILE]`
// and `dtsim schedule FILE`: generate or read a pipeline schedule in
// torch.distributed.pipelining's action notation (text or PyTorch's CSV), run it
// on the engine, and print its makespan, bubbles and peak in-flight microbatches
// beside the published formulas.
#include "commands.hpp"

#include "dtsim/sched/executor.hpp"
#include "dtsim/sched/format.hpp"
#include "dtsim/sched/formulas.hpp"
#include "dtsim/sched/generators.hpp"
#include "dtsim/sched/lowering.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dtsim::cli {
namespace {

struct ScheduleArgs {
    std::string file;
    std::string generate;
    int stages = 0, microbatches = 0, chunks = 0, group = 0;
    bool lower = false;
    std::vector<std::string> against;  // --against NAME,NAME,... or all: built-in schedules to compare with
    bool json = false;
    std::string write;
    TraceOutputs out;
    sched::Costs costs;
};

bool same(double a, double b) { return std::abs(a - b) <= 1e-9 * std::max(1.0, std::abs(b)); }

std::string generator_names() {
    std::string s;
    for (const auto& g : sched::generators()) s += fmt::format("{}{}", s.empty() ? "" : ", ", g.name);
    return s;
}

// The generator (with its parameters) that produces this schedule's compute actions, if any.
struct Match {
    std::string name;
    sched::GenerateParams params;
};
std::optional<Match> find_generator(const sched::Schedule& s) {
    const sched::Schedule compute = s.lowered() ? sched::strip_comms(s) : s;
    const int p = s.num_ranks(), S = s.num_stages(), m = s.num_microbatches();
    if (p < 1 || m < 1 || S % p != 0) return std::nullopt;
    for (const auto& g : sched::generators()) {
        sched::GenerateParams q;
        q.p = p;
        q.m = m;
        q.v = g.takes_chunks ? S / p : 1;
        if (!g.takes_chunks && S != (g.name == "dualpipev" ? 2 * p : p)) continue;
        try {
            if (sched::generate(g.name, q) == compute) return Match{g.name, q};
        } catch (const std::invalid_argument&) {
        }
    }
    return std::nullopt;
}

// Whether each measured figure equals the published formula's.
struct Exactness {
    bool makespan = false, idle = false, bubble_fraction = false, peak_in_flight = false;
};
Exactness exactness(const sched::RunStats& st, const sched::Prediction& pred) {
    Exactness e{same(st.makespan, pred.makespan), pred.idle.size() == st.ranks.size(),
                same(st.bubble_fraction, pred.bubble_fraction), pred.peak_in_flight.size() == st.ranks.size()};
    for (std::size_t r = 0; r < st.ranks.size(); ++r) {
        e.idle = e.idle && same(st.ranks[r].idle, pred.idle[r]);
        e.peak_in_flight = e.peak_in_flight && st.ranks[r].peak_in_flight == pred.peak_in_flight[r];
    }
    return e;
}

void print_report(const sched::Schedule& s, const std::string& origin, const sched::RunStats& st,
                  const std::optional<sched::Prediction>& pred, const std::optional<Match>& match,
                  const sched::Costs& c) {
    fmt::print("schedule {}: {} ranks, {} stages, {} microbatches, {}\n", origin, s.num_ranks(), s.num_stages(),
               s.num_microbatches(), s.lowered() ? "with SEND/RECV actions" : "compute-only");
    if (match) {
        for (const auto& g : sched::generators())
            if (g.name == match->name) fmt::print("  {}\n", g.title);
        if (!s.source.empty())
            fmt::print("  (the same actions as `--generate {} --stages {} --microbatches {}{}`)\n", match->name,
                       match->params.p, match->params.m,
                       match->params.v != 1 ? fmt::format(" --chunks {}", match->params.v) : std::string());
    } else {
        fmt::print("  (no built-in generator produces these actions, so no published formula applies)\n");
    }
    fmt::print("  costs in steps: T_F {}, T_B {}, T_I {}, T_W {}, T_F&B {}{}, p2p {}; memory: {} unit(s) per (stage, "
               "microbatch)\n",
               short_number(c.forward), short_number(c.backward), short_number(c.backward_input), short_number(c.backward_weight),
               short_number(sched::overlapped_cost(c)), c.forward_backward < 0 ? " (T_F+T_B)" : "", short_number(c.p2p),
               short_number(c.activation));
    if (pred) fmt::print("  formulas: {}\n", pred->reference);

    double idle_min = st.ranks.empty() ? 0 : st.ranks.front().idle, idle_max = idle_min;
    for (const auto& r : st.ranks) {
        idle_min = std::min(idle_min, r.idle);
        idle_max = std::max(idle_max, r.idle);
    }
    const std::string idle = same(idle_min, idle_max) ? short_number(idle_min) : short_number(idle_min) + ".." + short_number(idle_max);
    auto verdict = [&](bool ok) { return ok ? "exact" : "differs"; };
    fmt::print("\n  {:<18} {:<12} {:<34} {:<12}\n", "", "measured", "published formula", "predicted");
    const Exactness exact = pred ? exactness(st, *pred) : Exactness{};
    if (pred) {
        fmt::print("  {:<18} {:<12} {:<34} {:<12} {}\n", "makespan", short_number(st.makespan), "busy + bubble",
                   short_number(pred->makespan), verdict(exact.makespan));
        double pmin = pred->bubble_time, pmax = pmin;
        for (const double idle_r : pred->idle) {
            pmin = std::min(pmin, idle_r);
            pmax = std::max(pmax, idle_r);
        }
        const std::string pidle = same(pmin, pmax) ? short_number(pmin) : short_number(pmin) + ".." + short_number(pmax);
        fmt::print("  {:<18} {:<12} {:<34} {:<12} {}\n", "bubble per rank", idle, pred->bubble_time_formula, pidle,
                   verdict(exact.idle));
        fmt::print("  {:<18} {:<12.6f} {:<34} {:<12.6f} {}\n", "bubble fraction", st.bubble_fraction,
                   pred->fraction_formula, pred->bubble_fraction, verdict(exact.bubble_fraction));
        if (!pred->memory_formula.empty()) {
            const double ratio = st.ranks.front().peak_in_flight / pred->memory_scale;
            fmt::print("  {:<18} {:<12.6g} {:<34} {:<12.6g} {}   (rank 0's peak {} / (v*p = {}))\n", "memory vs 1F1B",
                       ratio, pred->memory_formula, pred->memory_ratio, verdict(same(ratio, pred->memory_ratio)),
                       st.ranks.front().peak_in_flight, short_number(pred->memory_scale));
        }
        if (!pred->exact_expected) fmt::print("  (exact in this world only when {})\n", pred->conditions);
    } else {
        fmt::print("  {:<18} {}\n  {:<18} {}\n  {:<18} {:.6f}\n", "makespan", short_number(st.makespan), "bubble per rank", idle,
                   "bubble fraction", st.bubble_fraction);
    }

    fmt::print("\n  {:>5} {:>9} {:>9} {:>10} {:>10} {:>9} {:>10}\n", "rank", "busy", "idle", "bubble", "predicted",
               "peak", "predicted");
    for (const auto& r : st.ranks) {
        std::string pf = "-", pp = "-";
        if (pred) {
            const double pm = pred->makespan;
            const auto ri = static_cast<std::size_t>(r.rank);
            pf = fmt::format("{:.6f}", ri < pred->idle.size() && pm > 0 ? pred->idle[ri] / pm : pred->bubble_fraction);
            pp = fmt::format("{}", pred->peak_in_flight[static_cast<std::size_t>(r.rank)]);
        }
        fmt::print("  {:>5} {:>9} {:>9} {:>10.6f} {:>10} {:>9} {:>10}\n", r.rank, short_number(r.busy), short_number(r.idle),
                   r.bubble_fraction, pf, r.peak_in_flight, pp);
    }
    fmt::print("  {:>5} {:>9} {:>9} {:>10.6f} {:>10}\n", "all", "", "", st.bubble_fraction,
               pred ? fmt::format("{:.6f}", pred->bubble_fraction) : std::string("-"));
    if (pred)
        fmt::print("  peak in-flight per rank: predicted {} -- {}\n", pred->peak_formula, verdict(exact.peak_in_flight));
    fmt::print("  bubble = idle / makespan per rank (idle = makespan - busy); all = total idle / (ranks x makespan)\n"
               "  peak = most (stage, microbatch) activations held at once, each from the end of its F to the end\n"
               "         of its B (or W)\n");
}

// --against: the generators named (CLI11 splits the list at its commas and drops empty words;
// "all": every one), each known, each once, in the order given.
std::vector<std::string> against_names(const std::vector<std::string>& words) {
    std::vector<std::string> names;
    for (const auto& word : words) {
        if (word == "all") {
            for (const auto& g : sched::generators())
                if (std::find(names.begin(), names.end(), g.name) == names.end()) names.push_back(g.name);
            continue;
        }
        const std::string name = sched::canonical_generator(word);
        if (name.empty())
            throw UsageError(fmt::format("schedule: --against: unknown generator '{}'; the generators are: {} (or all)",
                                         word, generator_names()));
        if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
    return names;
}

// A schedule's model chunks per rank: its stages over its ranks (1F1B 1, interleaved v, DualPipeV 2).
int chunks_per_rank(const sched::Schedule& s) { return std::max(1, s.num_stages() / std::max(1, s.num_ranks())); }

// The most activations a rank of the run held at once, times the activation of one.
double peak_memory(const sched::RunStats& r, double activation) {
    int peak = 0;
    for (const auto& k : r.ranks) peak = std::max(peak, k.peak_in_flight);
    return peak * activation;
}

// One built-in schedule of --against, run with the compared schedule's work per rank.
struct AgainstRow {
    std::string generator;
    std::string label;   // "interleaved (v=2)"
    int v = 0;           // its model chunks per rank
    std::optional<sched::RunStats> stats;
    double activation = 0;  // a stage's, scaled
    std::string error;   // the generator does not take these sizes: why
};

// --against: the built-in schedules named, at this schedule's ranks and microbatches, each doing the
// same work per rank and microbatch (a stage's costs and activation scaled by this schedule's chunks
// per rank over the other's; interleaved and BFS at --chunks, 2 by default); a generator that does
// not take these sizes says why.
std::vector<AgainstRow> against_rows(const sched::Schedule& s, const std::vector<std::string>& names,
                                     const sched::Costs& costs, int chunks) {
    const int v = chunks_per_rank(s);
    const int v_chunked = chunks > 0 ? chunks : 2;
    std::vector<AgainstRow> rows;
    for (const auto& name : names) {
        const bool chunked = name == "interleaved" || name == "bfs";
        sched::GenerateParams q;
        q.p = s.num_ranks();
        q.m = s.num_microbatches();
        q.v = chunked ? v_chunked : 1;
        AgainstRow row{name, chunked ? fmt::format("{} (v={})", name, q.v) : name, 0, std::nullopt, 0, {}};
        sched::Schedule other;
        try {
            other = sched::generate(name, q);
        } catch (const std::invalid_argument& e) {
            row.error = e.what();
            rows.push_back(std::move(row));
            continue;
        }
        if (s.lowered()) other = sched::lower(other);
        row.v = chunks_per_rank(other);
        const double scale = static_cast<double>(v) / row.v;
        sched::Costs c = costs;
        c.forward *= scale;
        c.backward *= scale;
        c.backward_input *= scale;
        c.backward_weight *= scale;
        if (c.forward_backward >= 0) c.forward_backward *= scale;
        c.activation *= scale;
        row.activation = c.activation;
        row.stats = sched::run_stats(sched::run_schedule(other, c, nlohmann::json::object()).trace);
        rows.push_back(std::move(row));
    }
    return rows;
}

void print_against(const sched::Schedule& s, const std::string& origin, const sched::RunStats& st,
                   const std::vector<AgainstRow>& rows, const sched::Costs& costs) {
    const int v = chunks_per_rank(s);
    fmt::print("\nagainst the built-in schedules at p={}, m={}, each with this one's work per rank and microbatch (a "
               "stage's costs and activation x {}/v, v its chunks per rank):\n",
               s.num_ranks(), s.num_microbatches(), v);
    std::size_t w = origin.size();
    for (const auto& r : rows) w = std::max(w, r.label.size());
    fmt::print("  {:<{}} {:>3} {:>12} {:>10} {:>12}\n", "schedule", w, "v", "makespan", "bubble", "peak memory");
    fmt::print("  {:<{}} {:>3} {:>12} {:>10.6f} {:>12}\n", origin, w, v, short_number(st.makespan), st.bubble_fraction,
               short_number(peak_memory(st, costs.activation)));
    for (const auto& r : rows) {
        if (!r.stats) {
            fmt::print("  {:<{}} not for these sizes: {}\n", r.label, w, r.error);
            continue;
        }
        fmt::print("  {:<{}} {:>3} {:>12} {:>10.6f} {:>12}\n", r.label, w, r.v, short_number(r.stats->makespan),
                   r.stats->bubble_fraction, short_number(peak_memory(*r.stats, r.activation)));
    }
    fmt::print("  peak memory: the most activations a rank held at once (x the activation per stage and microbatch)\n");
}

// `--json`: the report's figures (docs/schedules.md).
nlohmann::json report_json(const sched::Schedule& s, const std::string& origin, const sched::RunStats& st,
                           const std::optional<sched::Prediction>& pred, const std::optional<Match>& match,
                           const sched::Costs& c, const std::optional<std::vector<AgainstRow>>& against) {
    nlohmann::json ranks = nlohmann::json::array();
    for (const auto& r : st.ranks)
        ranks.push_back({{"rank", r.rank},
                         {"busy", r.busy},
                         {"idle", r.idle},
                         {"bubble_fraction", r.bubble_fraction},
                         {"peak_in_flight", r.peak_in_flight}});
    nlohmann::json j = {{"schedule", origin},
                        {"ranks", s.num_ranks()},
                        {"stages", s.num_stages()},
                        {"microbatches", s.num_microbatches()},
                        {"lowered", s.lowered()},
                        {"generator", match ? nlohmann::json(match->name) : nlohmann::json(nullptr)},
                        {"costs",
                         {{"forward", c.forward},
                          {"backward", c.backward},
                          {"backward_input", c.backward_input},
                          {"backward_weight", c.backward_weight},
                          {"forward_backward", sched::overlapped_cost(c)},
                          {"p2p", c.p2p},
                          {"activation", c.activation}}},
                        {"makespan", st.makespan},
                        {"bubble_fraction", st.bubble_fraction},
                        {"peak_memory", peak_memory(st, c.activation)},
                        {"per_rank", ranks},
                        {"formulas", nullptr}};
    if (match) j["params"] = {{"p", match->params.p}, {"m", match->params.m}, {"v", match->params.v}};
    if (pred) {
        const Exactness e = exactness(st, *pred);
        j["formulas"] = {{"reference", pred->reference},
                         {"makespan", pred->makespan},
                         {"bubble_time_formula", pred->bubble_time_formula},
                         {"idle", pred->idle},
                         {"fraction_formula", pred->fraction_formula},
                         {"bubble_fraction", pred->bubble_fraction},
                         {"peak_formula", pred->peak_formula},
                         {"peak_in_flight", pred->peak_in_flight},
                         {"exact_expected", pred->exact_expected},
                         {"conditions", pred->conditions},
                         {"exact",
                          {{"makespan", e.makespan},
                           {"idle", e.idle},
                           {"bubble_fraction", e.bubble_fraction},
                           {"peak_in_flight", e.peak_in_flight}}}};
        if (!pred->memory_formula.empty()) {
            j["formulas"]["memory_formula"] = pred->memory_formula;
            j["formulas"]["memory_ratio"] = pred->memory_ratio;
        }
    }
    if (against) {
        nlohmann::json rows = nlohmann::json::array();
        for (const auto& r : *against) {
            if (!r.stats) {
                rows.push_back({{"schedule", r.label}, {"generator", r.generator}, {"error", r.error}});
                continue;
            }
            rows.push_back({{"schedule", r.label},
                            {"generator", r.generator},
                            {"v", r.v},
                            {"makespan", r.stats->makespan},
                            {"bubble_fraction", r.stats->bubble_fraction},
                            {"peak_memory", peak_memory(*r.stats, r.activation)}});
        }
        j["against"] = std::move(rows);
    }
    return j;
}

void run_schedule_command(const ScheduleArgs& a) {
    if (a.file.empty() == a.generate.empty())
        throw UsageError("schedule: give a schedule FILE or --generate NAME (one of them)");
    const std::vector<std::string> against = against_names(a.against);
    sched::Schedule s;
    std::string origin;
    std::optional<Match> match;
    if (!a.generate.empty()) {
        const std::string name = sched::canonical_generator(a.generate);
        if (name.empty())
            throw UsageError(fmt::format("schedule: unknown generator '{}'; the generators are: {}", a.generate,
                                         generator_names()));
        if (a.stages < 1 || a.microbatches < 1)
            throw UsageError("schedule: --generate needs --stages P (pipeline ranks) and --microbatches M");
        if (validate_only()) return;
        sched::GenerateParams q;
        q.p = a.stages;
        q.m = a.microbatches;
        const bool chunked = name == "interleaved" || name == "bfs";
        q.v = a.chunks > 0 ? a.chunks : (chunked ? 2 : 1);
        q.group = a.group;
        try {
            s = sched::generate(name, q);
        } catch (const std::invalid_argument& e) {
            throw UsageError(fmt::format("schedule: {}", e.what()));
        }
        match = Match{name, q};
        origin = fmt::format("{} (p={}, m={}{})", name, q.p, q.m,
                             chunked ? fmt::format(", v={}{}", q.v, q.group ? fmt::format(", g={}", q.group) : "")
                                     : std::string());
    } else {
        if (a.stages || a.microbatches || a.chunks || a.group)
            throw UsageError("schedule: --stages, --microbatches, --chunks and --group go with --generate; a schedule "
                             "file has its own sizes");
        if (validate_only()) return;
        s = sched::read_schedule_file(a.file);
        match = find_generator(s);
        origin = a.file;
    }
    if (a.lower) {
        if (s.lowered()) throw UsageError("schedule: --lower: the schedule already has SEND/RECV actions");
        sched::Schedule lowered = sched::lower(s);
        lowered.source = s.source;  // locations are lost: lowering reorders
        s = std::move(lowered);
    }
    render::RankGrid grid;
    grid.pp = s.num_ranks();
    grid.known = true;
    a.out.check_ranks(s.num_ranks(), grid);
    if (!a.write.empty()) {
        sched::validate(s);
        sched::write_schedule_file(s, a.write);
    }
    nlohmann::json meta = nlohmann::json::object();
    if (match) meta["generator"] = match->name;
    if (!a.file.empty()) meta["file"] = a.file;
    RunResult result;
    try {
        result = sched::run_schedule(s, a.costs, meta);
    } catch (const std::invalid_argument& e) {  // costs
        throw UsageError(fmt::format("schedule: {}", e.what()));
    } catch (const ScheduleError& e) {
        // A schedule that fails (a deadlock): what it did up to the failure still goes to the files asked for.
        if (e.partial_trace && a.out.any()) {
            // With --json, standard output holds JSON or nothing: the lines go to standard error.
            std::FILE* to = a.json ? stderr : stdout;
            fmt::print(to, "schedule {}: failed (the error follows)\n", origin);
            a.out.write_partial(*e.partial_trace, to);
        }
        throw;
    }
    std::optional<sched::Prediction> pred;
    if (match) pred = sched::predict(match->name, match->params, a.costs);
    const sched::RunStats stats = sched::run_stats(result.trace);
    std::optional<std::vector<AgainstRow>> rows;
    if (!against.empty()) rows = against_rows(s, against, a.costs, a.chunks);
    if (a.json) {
        fmt::print("{}\n", report_json(s, origin, stats, pred, match, a.costs, rows).dump(2));
    } else {
        print_report(s, origin, stats, pred, match, a.costs);
        if (rows) print_against(s, origin, stats, *rows, a.costs);
        if (!a.write.empty()) fmt::print("schedule written to {}\n", a.write);
    }

    a.out.write(result.trace);
}

}  // namespace

void register_schedule_command(CLI::App& app) {
    auto a = std::make_shared<ScheduleArgs>();
    auto* cmd = app.add_subcommand(
        "schedule",
        "Generate or read a pipeline schedule (torch.distributed.pipelining's actions such as 0F0 1B0 0I2 0W2, as "
        "per-rank text lists or PyTorch's CSV), run it, and compare its bubbles and memory with the published "
        "formulas");
    cmd->add_option("file", a->file, "Schedule to run: .csv (PyTorch's format, one row per rank) or text");
    cmd->add_option("--generate", a->generate, "Generate a schedule: " + generator_names());
    cmd->add_option("--stages", a->stages, "Pipeline ranks P (the pipeline-parallel degree); the model has P*V stages")
        ->transform(whole_number(1, 4096));
    cmd->add_option("--microbatches", a->microbatches, "Microbatches M")->transform(whole_number(1, 65536));
    cmd->add_option("--chunks", a->chunks, "Model chunks V per rank (interleaved, bfs; default 2)")
        ->transform(whole_number(1, 1024));
    cmd->add_option("--group", a->group, "interleaved: microbatch group size g, in [P, M] (default P; Megatron-LM's "
                                         "microbatch_group_size_per_vp_stage)")
        ->transform(whole_number(1, 65536));
    cmd->add_flag("--lower", a->lower,
                  "Add SEND/RECV actions as PyTorch's _add_send_recv does (compute_only -> compute_comms)");
    cmd->add_option("--against", a->against,
                    "Compare with built-in schedules at the same ranks and microbatches, each doing the same work per "
                    "rank: NAME,NAME,... or all (makespan, bubble, peak memory)")
        ->delimiter(',')
        ->allow_extra_args(false);
    cmd->add_flag("--json", a->json, "Print the report as JSON");
    cmd->add_option("--write", a->write, "Write the schedule: FILE.csv (PyTorch's CSV) or any other name (text)")
        ->check(output_file());
    // A schedule's costs, in steps (a forward is 1): up to 1e9 steps each, so that a makespan of
    // 65,536 microbatches through 4,096 stages stays far inside a double's exact range.
    const Range cost{"a cost", "steps", 0, 1e9};
    cmd->add_option("--forward", a->costs.forward, "T_F: a forward of one stage, steps")
        ->check(number_in(cost))
        ->capture_default_str();
    cmd->add_option("--backward", a->costs.backward, "T_B: a full backward (B), steps")
        ->check(number_in(cost))
        ->capture_default_str();
    cmd->add_option("--backward-input", a->costs.backward_input, "T_I: a backward for the input (I), steps")
        ->check(number_in(cost))
        ->capture_default_str();
    cmd->add_option("--backward-weight", a->costs.backward_weight, "T_W: a backward for the weights (W), steps")
        ->check(number_in(cost))
        ->capture_default_str();
    cmd->add_option("--forward-backward", a->costs.forward_backward,
                    "T_F&B: an overlapped forward and full backward ((F;B)OVERLAP_F_B, DualPipeV), steps; negative "
                    "(the default) means T_F + T_B, no gain from the overlap")
        ->check(number_in(Range{"a cost (negative: T_F + T_B)", "steps", -1e9, 1e9}))
        ->capture_default_str();
    cmd->add_option("--p2p", a->costs.p2p, "A tensor crossing ranks, steps (a boundary inside a rank is free)")
        ->check(number_in(cost))
        ->capture_default_str();
    cmd->add_option("--activation", a->costs.activation, "Memory units per (stage, microbatch) activation")
        ->check(number_in(Range{"an amount of memory", "units", 0, 1e9}))
        ->capture_default_str();
    a->out.add_options(cmd);
    cmd->callback([a] { run_schedule_command(*a); });
}

}  // namespace dtsim::cli
