// `dtsim plan`: which layout to run. Enumerates the layouts of a model on a cluster (GPU count,
// strategy, tp, pp, chunks, cp, ZeRO stage, FSDP's sharding, micro-batch size, recompute, sequence
// parallelism, TP communication overlap; fp8, compile, interleaved's microbatch group and uneven
// pipeline stages where asked), rejects those that cannot run or cannot fit, orders the rest by a
// lower bound on their step time and simulates them best first, stopping when no layout left
// can beat the best found (docs/planning.md).
//
// Exact parts (each a lower bound that a simulation of the same config cannot go below;
// plan_bounds.cpp has the rules in full):
//   memory_lower_bound   the model states of the rank holding the most (estimate_run_size's, less
//                        the gradients of a strategy that makes them during the backward; with
//                        uneven stages each rank's share by its layers), and beside them what the
//                        first rank of the pipeline (every rank, with one stage) holds when its
//                        first backward starts: one microbatch through all layers and the logits
//                        with one stage, min(pp, m) forwards of its layers for 1F1B, m for GPipe
//                        (and the first backward's first recompute), the most it holds through its
//                        actions for a generated schedule or a file; for those also the rank of the
//                        last stage (its layers' states, its actions, the logits); every layer
//                        counted at the least a layer keeps;
//   step_time_lower_bound  the largest of the chains the simulation runs one thing after another:
//                        the compute stream of the rank holding the output layer (its layers x
//                        microbatches x a layer's priced forward, backward and recompute with the
//                        tensor-parallel collectives that block it, each at its cost on idle links;
//                        the logits and loss of every microbatch; the optimizer step and the
//                        distributed optimizer's blocking gather of the parameters; for 1F1B, GPipe
//                        and interleaved pipelines the forwards of the model chunks before the last
//                        rank and the backwards after it), a pipeline schedule's actions (generated
//                        or a file: every rank's actions in order, each after the actions of other
//                        ranks it needs, each at its layers' priced passes), and FSDP's
//                        data-parallel stream (each layer's gathers and reduce-scatters of every
//                        microbatch, one after another). 0 with stragglers.
//
// A search can be split over processes or machines (docs/planning.md): shard I of N takes the
// candidates at positions I, I + N, I + 2N, ... of the best-first order and searches them alone,
// keeping every row it simulates; the merge replays one process's search over the shards' rows,
// which hold every row that search simulates (a shard's N-th best is never better than the whole
// space's, so it stops no earlier). The merged answer is the one process's, byte for byte.
#pragma once

#include "dtsim/errors.hpp"
#include "dtsim/hw/config.hpp"
#include "dtsim/hw/run.hpp"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace dtsim::hw {

// A bad plan request: an unknown knob, a value a knob cannot take, no GPU count that fits the
// cluster. An input error (exit status 2).
class PlanError : public std::runtime_error, public InputError {
public:
    using std::runtime_error::runtime_error;
};

// The values searched per knob; an empty list takes the knob's default (docs/planning.md):
//   strategies        megatron, 1f1b, interleaved, fsdp
//   tp                the divisors of the GPUs per node (tp > 1 only for strategies that take it)
//   pp                the divisors of the layers >= 2 for pipelines, 1 for the others
//   chunks            interleaved and bfs: the divisors >= 2 of layers / pp; 1 for the others
//   cp                1
//   cp_comm           not searched: the config's own (strategy.cp_comm); asked for, each value with
//                     each layout of cp > 1
//   zero_stage        every stage the strategy runs (strategies.hpp)
//   micro_batch       the divisors of global_batch / dp
//   recompute         none, selective, full
//   sequence_parallel false, and true where tp > 1
//   tp_comm_overlap   false, and true where sequence_parallel
//   fp8               not searched: the config's own (strategy.fp8)
//   compile           not searched: the config's own (strategy.compile)
//   microbatch_group  not searched: interleaved runs Megatron's default group (pp); asked for, each
//                     value (0: pp) with each interleaved layout
//   sharding          fsdp: full, grad_op, hybrid (FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD)
//   recompute_num_layers, recompute_every  not searched (every layer recomputes under a policy);
//                     asked for, each value ("all" or n) with each policy but none
//   first_stage_layers, last_stage_layers  not searched (even stages); asked for, each value
//                     ("even" or n layers on the first / last pipeline rank) with each pipeline but
//                     dualpipev, and then pp runs over every value from 2 (the layers need not split
//                     evenly: the config check says which splits work)
//   schedule_file     not searched; asked for, the "schedule" strategy joins the strategies and runs
//                     each file, at the pp and microbatches the file fixes (the micro-batch follows
//                     from them), each of its ranks holding as many stages as the others
struct PlanSpace {
    std::vector<std::string> strategies;
    std::vector<int> tp, pp, chunks, cp, zero_stage, micro_batch;
    std::vector<std::string> recompute;
    std::vector<int> sequence_parallel, tp_comm_overlap;  // 0 / 1
    std::vector<std::string> fp8;  // none, te, torchao; empty: the config's own strategy.fp8
    std::vector<std::string> cp_comm;  // ring, allgather (cp > 1); empty: the config's own strategy.cp_comm
    std::vector<int> compile;      // 0 / 1; empty: the config's own strategy.compile
    std::vector<int> recompute_num_layers, recompute_every;  // 0: every layer ("all"); empty: not searched
    std::vector<int> first_stage_layers, last_stage_layers;  // 0: even stages ("even"); empty: not searched
    std::vector<int> microbatch_group;  // interleaved; 0: pp (the key unset); empty: not searched
    std::vector<std::string> sharding;  // fsdp: full, grad_op, hybrid; empty: all three
    // The "schedule" strategy's files (PyTorch's action notation or CSV), as given: relative to the
    // working directory, as `--set strategy.schedule_file=` is. Empty: the strategy is not searched.
    std::vector<std::string> schedule_files;
};

// The GPU counts `spec` names (PlanRequest::gpus) on nodes of `per_node` GPUs: each count is whole
// nodes, or one node of a divisor of `per_node` GPUs. A list keeps its order; a range "LO-HI" takes
// every such count from LO to HI, ascending (at most 256 of them). Throws PlanError naming the
// value a cluster of such nodes cannot hold, a range that holds none, or a malformed spec.
std::vector<int> gpu_counts(const std::string& spec, int per_node);

// The knobs --space takes, in the order enumeration varies them (slowest first).
const std::vector<std::string>& plan_knobs();
// Sets a knob of `space` from "key=v1,v2" (key one of plan_knobs(), or its config path as
// "strategy.tp"). A value given twice is kept once, where it first appears (tp=2,1,2 is tp=2,1).
// Throws PlanError naming the key or value and what was expected.
void set_space(PlanSpace& space, const std::string& text);
// The knob a --space text names, as set_space reads it ("schedule_file" for
// "$.strategy.schedule_file=a.txt"), or the text before its '=' when that is not a knob.
std::string space_knob(const std::string& text);

// What the search ranks by (docs/planning.md): the step time, or the GPU-seconds of a step (step
// time x GPUs: what the same global batch costs), which weighs GPU counts against each other.
enum class RankBy { step_time, gpu_seconds };
// "step_time" or "gpu_seconds"; throws PlanError naming the value otherwise.
RankBy parse_rank_by(const std::string& text);
const char* rank_by_name(RankBy by);
// A figure the search ranks by, as text: a step time in the unit that suits it ("3.428 s",
// "861.600 ms"), or GPU-seconds ("54.848 GPU-s", "0.16 GPU-s").
std::string rank_figure_text(RankBy by, double figure);

struct PlanRequest {
    std::string config_path;    // a config (includes merged); its strategy's layout keys are ignored
    nlohmann::json document;    // or the merged document itself, where config_path is empty
    std::string file = "plan";  // names the document in errors
    std::vector<Override> overrides;  // --set, applied under every candidate's layout
    // The GPU counts (docs/planning.md): "" the cluster's nodes x GPUs per node; "64" one count;
    // "64,128,256" a list; "64-256" every count in the range the cluster can hold (gpu_counts).
    std::string gpus;
    PlanSpace space;
    int top = 5;                // rows wanted: the search is exact for the best `top`
    RankBy rank_by = RankBy::step_time;
    double time_budget = 0;     // seconds of search; 0: none
    // Bytes per GPU a layout must leave free (--headroom): one whose memory bound or simulated peak
    // passes the GPU's capacity less this does not fit. 0: the whole capacity; below the capacity.
    double headroom = 0;
    int jobs = 1;               // simulations at once (run_in_order)
    int shard = 0, shards = 1;  // search only the share `shard` of `shards` (see the top)
};

// One layout that passed every check: its overrides (on the prepared base document) and bounds.
struct Candidate {
    std::size_t index = 0;  // in enumeration order
    int gpus = 0;           // the GPU count it runs on
    std::vector<Override> overrides;
    std::string label;      // "1f1b tp=2 pp=2 dp=2 zero_stage=1 micro_batch=1 recompute=full sp"
    double memory_bound = 0;     // bytes per GPU
    double time_bound = 0;       // s
    double capacity = 0;         // bytes per GPU: the GPU's memory (a layout's peak may reach capacity - headroom)
};

// Why layouts were rejected before simulation: counts by category (stable texts, sorted).
namespace reject {
inline constexpr const char* tp_node = "tp does not divide the GPUs of a node";
inline constexpr const char* tp_heads = "tp does not split the attention heads, kv heads or ffn";
inline constexpr const char* pp_layers = "pp does not divide the layers";
inline constexpr const char* gpus = "tp x cp x pp does not divide the GPU count";
inline constexpr const char* chunks = "pp x chunks does not divide the layers";
inline constexpr const char* batch = "micro_batch x dp does not divide the global batch";
inline constexpr const char* schedule = "the pipeline schedule does not take these sizes (interleaved: pp <= microbatch_group <= microbatches)";
inline constexpr const char* schedule_layers = "the schedule file's stages do not divide the layers";
inline constexpr const char* schedule_batch =
    "dp x the schedule file's microbatches does not divide the global batch";
inline constexpr const char* schedule_recompute =
    "recompute_num_layers counts the first layers of each of pp chunks, and the schedule file has more stages";
inline constexpr const char* hybrid_full =
    "hybrid sharding runs as full sharding here (the data-parallel ranks are not whole nodes of two or more)";
inline constexpr const char* states = "does not fit: model states alone exceed memory";
inline constexpr const char* activations =
    "does not fit: model states and the activations it must hold exceed memory";
// The same with PlanRequest::headroom > 0: against the memory less the headroom.
inline constexpr const char* states_headroom = "does not fit: model states alone exceed memory less the headroom";
inline constexpr const char* activations_headroom =
    "does not fit: model states and the activations it must hold exceed memory less the headroom";
inline constexpr const char* too_large = "too large to simulate (event estimate above the limit)";
// Any other check of the config: "config check: $.strategy.microbatches".
inline constexpr const char* config_prefix = "config check: ";
}  // namespace reject

struct Enumeration {
    nlohmann::json base;          // the document every candidate's overrides apply to
    std::size_t enumerated = 0;   // layouts generated from the space
    // The GPU counts searched, in enumeration order: PlanRequest::gpus parsed (gpu_counts), or the
    // cluster's own where it is empty.
    std::vector<int> gpu_counts;
    std::vector<Candidate> candidates;
    std::map<std::string, std::size_t> rejected;  // category -> count
    std::string example_error;    // the first config-check message, for "nothing fits"
    // Each config-check category's first layout and what the check said of it ("fsdp tp=8 ...: hybrid
    // sharding shards over ..."): the category names only the JSON path.
    std::map<std::string, std::string> config_examples;
    [[nodiscard]] std::size_t rejected_total() const;
};

// Every layout of the space, in a deterministic order; throws PlanError or ConfigError for a bad
// request or base config.
Enumeration enumerate_layouts(const PlanRequest& request);

// The config of a candidate (the base document with its overrides), checked.
Config candidate_config(const Enumeration& e, const PlanRequest& request, const Candidate& c);

// The bounds, for any checked config (see the top of this file).
double memory_lower_bound(const Config& c);
double step_time_lower_bound(const Config& c);

// What plan prints of a simulated layout, read from its report (`dtsim run --json`'s form), so
// that a row read back from a shard file is the row that was simulated.
struct PlanFigures {
    double step_time = 0, mfu = 0, tokens_per_second = 0;  // s, fraction, tokens/s
    double peak_bytes = 0, capacity = 0;                   // per GPU
    TimeSplit split;                                       // mean per GPU
    bool oom = false;
};
// Throws PlanError naming `where` when a field is missing or not a number.
PlanFigures plan_figures(const nlohmann::json& report, const std::string& where);

struct PlanRow {
    std::size_t candidate = 0;  // index into Enumeration::candidates
    std::optional<PlanFigures> figures;
    nlohmann::json report;      // to_json(RunReport) of the simulation; null when it failed
    std::string error;          // a simulation that failed
    bool over_headroom = false;  // ran, but its peak is within PlanRequest::headroom of the capacity
    [[nodiscard]] bool fits() const { return figures && !figures->oom && !over_headroom && error.empty(); }
};

struct PlanResult {
    Enumeration enumeration;
    std::vector<PlanRow> simulated;  // in the order simulated (best bound first)
    std::vector<std::size_t> best;   // indices into `simulated`: fitting rows, best first by rank_by (all of them)
    std::size_t pruned = 0;          // not simulated: their bound could not beat the best `top`
    std::size_t left = 0;            // not simulated: the time budget ran out first
    bool budget_hit = false;
    std::size_t out_of_memory = 0, failed = 0;  // simulated rows that did not fit / failed
    std::size_t over_headroom = 0;   // simulated rows that fit the GPU but not its memory less the headroom
    double headroom = 0;             // PlanRequest::headroom
    double wall_seconds = 0;         // host time of the search (merged: the sum of the shards')
    int shard = 0, shards = 1;       // a share of the search (PlanRequest), or the whole
    int merged = 0;                  // merge_shards: the shard files it merged
    RankBy rank_by = RankBy::step_time;  // how `best` is ordered
};

// How far a search is, after each row it simulates.
struct PlanProgress {
    std::size_t simulated = 0;     // rows so far
    std::size_t may_simulate = 0;  // the candidates whose bound beats the top-th best so far (all of
                                   // them until there are `top`): the search simulates no more
    std::size_t candidates = 0;    // of the search (of the share, for a shard)
    std::optional<double> best;    // the best fitting figure so far (RankBy: s, or GPU-s)
};

// Enumerates and searches. `progress` (optional) is called after each row.
PlanResult plan(const PlanRequest& request, const std::function<void(const PlanProgress&)>& progress = {});

// The result as JSON (docs/planning.md); without host times where `timings` is false.
nlohmann::json to_json(const PlanResult& r, std::size_t top, bool timings = true);
// A candidate's settings as the JSON's `set` gives them: {"strategy.tp": 2, "strategy.name": "fsdp", ...}.
nlohmann::json settings_json(const Candidate& c);

// A digest of everything a search's rows depend on: the prepared base document, the overrides,
// the GPU count, the space, `top` and the candidates (labels and bounds). Shards of one search
// carry the same one.
std::string plan_fingerprint(const Enumeration& e, const PlanRequest& request);

// A shard's result as the file `dtsim plan --shard I/N --out FILE` writes (docs/planning.md): its
// share, the fingerprint, the counts, and every row it simulated with its full report.
nlohmann::json shard_to_json(const PlanResult& r, const PlanRequest& request);

// The result one process gives for `request`, from the files of its shards 0 .. N-1 (each once,
// as `names` name them, in any order): it enumerates again, checks each shard's fingerprint and
// share, and replays the best-first search over their rows. Where a shard stopped at its time
// budget the replay cannot be exact: the result then ranks every row the shards simulated and
// says the budget was reached. Throws PlanError naming the file and field for a file that is not
// a shard of this search, a missing or repeated shard, or a row missing where the replay needs it.
// Reads a shard file (a JSON object); throws PlanError naming the file and what is wrong.
nlohmann::json read_shard_file(const std::string& path);

PlanResult merge_shards(const PlanRequest& request, const std::vector<nlohmann::json>& shards,
                        const std::vector<std::string>& names);

}  // namespace dtsim::hw
