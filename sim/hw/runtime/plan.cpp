// dtsim plan: enumerating layouts and the best-first search (plan.hpp); the bounds are in plan_bounds.cpp.
#include "dtsim/hw/plan.hpp"

#include "hw/runtime/plan_bounds.hpp"

#include "dtsim/hw/job.hpp"
#include "dtsim/hw/strategies.hpp"
#include "dtsim/hw/units.hpp"
#include "dtsim/hw/workload.hpp"
#include "dtsim/interrupt.hpp"
#include "dtsim/sched/executor.hpp"
#include "dtsim/sched/format.hpp"
#include "dtsim/sched/generators.hpp"
#include "dtsim/sched/lowering.hpp"
#include "dtsim/sched/schedule.hpp"
#include "json/reader.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cctype>
#include <optional>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <limits>
#include <numeric>

namespace dtsim::hw {
using namespace plan_bounds;

namespace {

const std::vector<std::string> kDefaultStrategies = {"megatron", "1f1b", "interleaved", "fsdp"};
const std::vector<std::string> kRecompute = {"none", "selective", "full"};
const std::vector<std::string> kShardings = {"full", "grad_op", "hybrid"};

// The strategy keys a layout sets: the base config's own are dropped, so that every candidate
// states its whole layout (and a base written for another layout does not leak into it).
const std::vector<std::string> kLayoutKeys = {
    "name", "dp", "tp", "pp", "cp", "zero_stage", "microbatches", "chunks", "microbatch_group", "sharding",
    "sequence_parallel", "tp_comm_overlap", "recompute", "recompute_every", "recompute_num_layers", "stage_layers",
    "first_stage_layers", "last_stage_layers", "account_for_embedding",
    "account_for_loss", "schedule_file", "puzzle", "overlap_param_gather"};

// Ascending; by trial up to sqrt(n), so a batch of 2^31 takes 46,341 trials, not 2^31.
std::vector<int> divisors(long long n) {
    std::vector<int> low, high;
    for (long long d = 1; d * d <= n; ++d)
        if (n % d == 0) {
            low.push_back(static_cast<int>(d));
            if (d * d != n) high.push_back(static_cast<int>(n / d));
        }
    low.insert(low.end(), high.rbegin(), high.rend());
    return low;
}

// `v` as a whole number in [lo, hi], all of it (no sign, no trailing text), or nothing.
std::optional<long long> whole_number(const std::string& v, long long lo, long long hi) {
    std::size_t used = 0;
    long long x = 0;
    try {
        x = std::stoll(v, &used);
    } catch (const std::exception&) {
        return std::nullopt;
    }
    if (v.empty() || used != v.size() || !std::isdigit(static_cast<unsigned char>(v.front())) || x < lo || x > hi)
        return std::nullopt;
    return x;
}

int to_int(const std::string& key, const std::string& v, int lo) {
    const auto x = whole_number(v, lo, 1'000'000);
    if (!x)
        throw PlanError(fmt::format("--space {}: '{}' is not a whole number from {} to 1000000", key, v, lo));
    return static_cast<int>(*x);
}

int to_bool(const std::string& key, const std::string& v) {
    if (v == "true" || v == "1") return 1;
    if (v == "false" || v == "0") return 0;
    throw PlanError(fmt::format("--space {}: '{}' is not true or false", key, v));
}

std::string strip(const std::string& key) {
    for (const char* prefix : {"$.strategy.", "strategy.", "$.training.", "training."})
        if (key.starts_with(prefix)) return key.substr(std::string(prefix).size());
    return key;
}

// An integer of the document where it is one (the config reader reports it where it is not).
int int_or(const nlohmann::json& object, const char* key, int fallback) {
    if (!object.is_object() || !object.contains(key)) return fallback;
    const auto& v = object[key];
    return v.is_number_integer() && v.get<long long>() >= 1 && v.get<long long>() <= 1'000'000'000
               ? static_cast<int>(v.get<long long>())
               : fallback;
}

bool pipeline(const StrategyInfo& info) { return info.pipeline != PipelineKind::none; }

// A schedule file the search runs (--space schedule_file): the sizes it fixes.
struct FileSchedule {
    std::string given;  // as --space named it
    int ranks = 0, microbatches = 0, stages = 0;
    int output_rank = -1;      // the owner of its last stage, which holds the output layer
    sched::Schedule schedule;  // without its communication actions
};

// Each file read, checked (its static rules, and a run of its steps, which names a deadlock) and
// measured once. The step-time and states bounds take every rank to hold as many layers
// (plan_bounds.cpp), so a file must give each of its ranks as many stages: the layers then split
// evenly over the ranks whatever the file's placement. (The activations bound reads the file: the
// actions of the ranks that hold the first and the last stage.)
std::vector<FileSchedule> read_schedule_files(const std::vector<std::string>& files) {
    std::vector<FileSchedule> out;
    for (const std::string& f : files) {
        const auto fail = [&](const std::string& why) {
            return PlanError(fmt::format("--space schedule_file={}: {}", f, why));
        };
        sched::Schedule sc;
        try {
            sc = sched::read_schedule_file(f);
            if (sc.lowered()) sc = sched::strip_comms(sc);
            (void)sched::run_schedule(sc);  // validates it first
        } catch (const std::exception& e) {
            throw fail(e.what());
        }
        const std::vector<int> owners = sched::stage_owners(sc);
        std::vector<int> held(static_cast<std::size_t>(sc.num_ranks()), 0);
        for (int owner : owners)
            if (owner >= 0 && owner < sc.num_ranks()) ++held[static_cast<std::size_t>(owner)];
        for (int r = 1; r < sc.num_ranks(); ++r)
            if (held[static_cast<std::size_t>(r)] != held[0])
                throw fail(fmt::format("rank 0 holds {} stage(s) and rank {} holds {}; plan searches schedules whose "
                                       "ranks hold as many stages each (its bounds assume it): run this one with "
                                       "dtsim run",
                                       held[0], r, held[static_cast<std::size_t>(r)]));
        const int output_rank = owners.empty() ? -1 : owners.back();
        out.push_back({f, sc.num_ranks(), sc.num_microbatches(), sc.num_stages(), output_rank, std::move(sc)});
    }
    return out;
}

template <class T>
const std::vector<T>& or_default(const std::vector<T>& given, const std::vector<T>& fallback) {
    return given.empty() ? fallback : given;
}

}  // namespace

RankBy parse_rank_by(const std::string& text) {
    if (text == "step_time") return RankBy::step_time;
    if (text == "gpu_seconds") return RankBy::gpu_seconds;
    throw PlanError(fmt::format("--rank-by {}: expected step_time or gpu_seconds", text));
}

const char* rank_by_name(RankBy by) { return by == RankBy::gpu_seconds ? "gpu_seconds" : "step_time"; }

std::string rank_figure_text(RankBy by, double figure) {
    if (by == RankBy::step_time) return fmt::format("{}", Seconds{figure});
    // Three decimals as Seconds prints a step of a second or more; three digits below that.
    if (std::abs(figure) >= 1 || figure == 0) return fmt::format("{:.3f} GPU-s", figure);
    return fmt::format("{:.3g} GPU-s", figure);
}

std::vector<int> gpu_counts(const std::string& spec, int per_node) {
    constexpr int kMaxGpus = 1 << 24;
    constexpr std::size_t kMaxCounts = 256;
    const auto number = [&](const std::string& v) {
        const auto x = whole_number(v, 1, kMaxGpus);
        if (!x)
            throw PlanError(fmt::format("--gpus {}: '{}' is not a GPU count (a whole number from 1 to {})", spec, v,
                                        kMaxGpus));
        return static_cast<int>(*x);
    };
    const auto holds = [&](int n) { return n % per_node == 0 || (n < per_node && per_node % n == 0); };
    std::vector<int> out;
    if (const auto dash = spec.find('-'); dash != std::string::npos && dash > 0) {
        const int lo = number(spec.substr(0, dash)), hi = number(spec.substr(dash + 1));
        if (lo > hi) throw PlanError(fmt::format("--gpus {}: the range is empty ({} > {})", spec, lo, hi));
        // Below a node: its divisors; from a node up: whole nodes.
        for (int n = lo; n <= hi; n = n < per_node ? n + 1 : (n / per_node + 1) * per_node) {
            if (n >= per_node && n % per_node != 0) continue;  // raise to the next whole node first
            if (!holds(n)) continue;
            out.push_back(n);
            if (out.size() > kMaxCounts)
                throw PlanError(fmt::format("--gpus {}: more than {} GPU counts in the range; give a narrower range "
                                            "or a list (--gpus 64,128,256)",
                                            spec, kMaxCounts));
        }
        if (out.empty())
            throw PlanError(fmt::format("--gpus {}: no count in the range is whole nodes of the cluster's {} GPUs or a "
                                        "divisor of {} (one node)",
                                        spec, per_node, per_node));
        return out;
    }
    for (std::size_t start = 0;;) {
        const auto comma = spec.find(',', start);
        const int n = number(spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
        if (!holds(n))
            throw PlanError(fmt::format("--gpus {}: {} GPUs: expected whole nodes of the cluster's {} GPUs, or a "
                                        "divisor of {} (one node)",
                                        spec, n, per_node, per_node));
        if (std::find(out.begin(), out.end(), n) != out.end())
            throw PlanError(fmt::format("--gpus {}: {} given twice", spec, n));
        out.push_back(n);
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    return out;
}

const std::vector<std::string>& plan_knobs() {
    static const std::vector<std::string> knobs = {"strategy", "schedule_file", "tp", "pp", "chunks", "cp",
                                                   "cp_comm", "zero_stage", "micro_batch", "recompute", "sequence_parallel",
                                                   "tp_comm_overlap", "fp8", "compile",
                                                   "recompute_num_layers", "recompute_every",
                                                   "microbatch_group", "sharding", "first_stage_layers",
                                                   "last_stage_layers"};
    return knobs;
}

namespace {

// Each value once, where it first appears: --space tp=2,2 (or tp=2,02) searches tp = 2 once.
template <typename T>
void keep_first(std::vector<T>& values) {
    std::vector<T> out;
    for (auto& v : values)
        if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(std::move(v));
    values = std::move(out);
}

void keep_first(PlanSpace& s) {
    for (auto* v : {&s.strategies, &s.recompute, &s.fp8, &s.cp_comm, &s.sharding, &s.schedule_files}) keep_first(*v);
    for (auto* v : {&s.tp, &s.pp, &s.chunks, &s.cp, &s.zero_stage, &s.micro_batch, &s.sequence_parallel,
                    &s.tp_comm_overlap, &s.compile, &s.recompute_num_layers, &s.recompute_every,
                    &s.first_stage_layers, &s.last_stage_layers, &s.microbatch_group})
        keep_first(*v);
}

}  // namespace

void set_space(PlanSpace& space, const std::string& text) {
    const auto eq = text.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
        throw PlanError(fmt::format("--space {}: expected knob=v1,v2 (for example tp=1,2,4)", text));
    const std::string key = strip(text.substr(0, eq));
    std::vector<std::string> values;
    std::string rest = text.substr(eq + 1);
    for (std::size_t start = 0;;) {
        const auto comma = rest.find(',', start);
        values.push_back(rest.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    std::string names;
    for (const auto& k : plan_knobs()) names += (names.empty() ? "" : ", ") + k;
    const auto ints = [&](std::vector<int>& out, int lo) {
        out.clear();
        for (const auto& v : values) out.push_back(to_int(key, v, lo));
    };
    const auto bools = [&](std::vector<int>& out) {
        out.clear();
        for (const auto& v : values) out.push_back(to_bool(key, v));
    };
    if (key == "strategy" || key == "name") {
        space.strategies.clear();
        for (const auto& v : values) {
            const StrategyInfo* info = find_hw_strategy(v);
            if (!info || info->puzzle)
                throw PlanError(fmt::format("--space strategy: '{}' is not a strategy plan searches (expected "
                                            "ddp, fsdp, megatron, gpipe, 1f1b, interleaved, zbh1, bfs, dualpipev "
                                            "or schedule)",
                                            v));
            space.strategies.push_back(v);
        }
    } else if (key == "schedule_file") {
        for (const auto& v : values)
            if (v.empty()) throw PlanError("--space schedule_file: expected file names, found an empty one");
        space.schedule_files = values;
    } else if (key == "tp") ints(space.tp, 1);
    else if (key == "pp") ints(space.pp, 1);
    else if (key == "chunks") ints(space.chunks, 1);
    else if (key == "cp") ints(space.cp, 1);
    else if (key == "zero_stage") {
        ints(space.zero_stage, 0);
        for (int z : space.zero_stage)
            if (z > 3) throw PlanError(fmt::format("--space zero_stage: {} is not a ZeRO stage (expected 0 to 3)", z));
    } else if (key == "micro_batch") ints(space.micro_batch, 1);
    else if (key == "recompute") {
        for (const auto& v : values)
            if (v != "none" && v != "selective" && v != "full" && v != "selective_op")
                throw PlanError(fmt::format("--space recompute: '{}' is not a recompute policy (expected none, "
                                            "selective, selective_op or full)",
                                            v));
        space.recompute = values;
    } else if (key == "sequence_parallel") bools(space.sequence_parallel);
    else if (key == "tp_comm_overlap") bools(space.tp_comm_overlap);
    else if (key == "compile") bools(space.compile);
    else if (key == "recompute_num_layers" || key == "recompute_every") {
        // "all" (every layer recomputes: the key unset) or a whole number >= 1.
        std::vector<int> ns;
        for (const auto& v : values) ns.push_back(v == "all" ? 0 : to_int(key, v, 1));
        (key == "recompute_every" ? space.recompute_every : space.recompute_num_layers) = ns;
    } else if (key == "microbatch_group") {
        // "pp" (Megatron-LM's default group: the key unset) or a whole number >= 1.
        space.microbatch_group.clear();
        for (const auto& v : values) space.microbatch_group.push_back(v == "pp" ? 0 : to_int(key, v, 1));
    } else if (key == "first_stage_layers" || key == "last_stage_layers") {
        // "even" (the key unset: every stage the same share) or a whole number of layers >= 1.
        std::vector<int> ns;
        for (const auto& v : values) ns.push_back(v == "even" ? 0 : to_int(key, v, 1));
        (key == "first_stage_layers" ? space.first_stage_layers : space.last_stage_layers) = ns;
    } else if (key == "sharding") {
        for (const auto& v : values)
            if (std::find(kShardings.begin(), kShardings.end(), v) == kShardings.end())
                throw PlanError(fmt::format("--space sharding: '{}' is not an FSDP sharding (expected full, grad_op or "
                                            "hybrid)",
                                            v));
        space.sharding = values;
    } else if (key == "cp_comm") {
        for (const auto& v : values)
            if (v != "ring" && v != "allgather")
                throw PlanError(fmt::format("--space cp_comm: '{}' is not a context-parallel exchange (expected ring "
                                            "or allgather)",
                                            v));
        space.cp_comm = values;
    } else if (key == "fp8") {
        for (const auto& v : values)
            if (v != "none" && v != "te" && v != "torchao")
                throw PlanError(fmt::format("--space fp8: '{}' is not an fp8 recipe (expected none, te or torchao)", v));
        space.fp8 = values;
    } else
        throw PlanError(fmt::format("--space {}: unknown knob (the knobs are: {})", text.substr(0, eq), names));
    keep_first(space);
}

std::string space_knob(const std::string& text) { return strip(text.substr(0, text.find('='))); }

std::size_t Enumeration::rejected_total() const {
    std::size_t n = 0;
    for (const auto& [_, count] : rejected) n += count;
    return n;
}

Enumeration enumerate_layouts(const PlanRequest& request) {
    Enumeration e;
    nlohmann::json doc = request.config_path.empty() ? request.document : read_config_document(request.config_path);
    const std::string file = request.config_path.empty() ? request.file : request.config_path;
    if (!doc.is_object()) throw PlanError(fmt::format("{}: expected a config object", file));
    doc.erase("include");
    // The layout keys --space searches (kLayoutKeys' others follow from them, or are not searched).
    static const std::vector<std::string> searched = {
        "name", "tp", "pp", "cp", "zero_stage", "chunks", "microbatch_group", "sharding", "sequence_parallel",
        "tp_comm_overlap", "recompute", "recompute_every", "recompute_num_layers", "first_stage_layers",
        "last_stage_layers", "schedule_file"};
    for (const auto& o : request.overrides)
        for (const auto& k : kLayoutKeys)
            if (strip(o.path) == k && o.path.find("training") == std::string::npos) {
                if (std::find(searched.begin(), searched.end(), k) != searched.end())
                    throw PlanError(fmt::format("--set {}: plan searches the layout; give it with --space "
                                                "(for example --space {}=...)",
                                                o.path, k == "name" ? "strategy" : k));
                throw PlanError(fmt::format("--set {}: plan lays out each candidate's strategy itself and does not "
                                            "search {}{}; run such a layout with dtsim run",
                                            o.path, k,
                                            k == "dp" || k == "microbatches"
                                                ? " (dp and the microbatches follow from the GPU count, tp x pp x cp "
                                                  "and the batch)"
                                                : ""));
            }
    // cp_comm only varies layouts that split sequences: asked for without one, it would search nothing.
    const auto& asked_cps = request.space.cp;
    if (!request.space.cp_comm.empty() &&
        std::none_of(asked_cps.begin(), asked_cps.end(), [](int cp) { return cp > 1; }))
        throw PlanError("--space cp_comm: no layout searched has cp > 1 (context parallelism is searched only when "
                        "asked for: give --space cp=1,2, for instance)");
    // Keys a config may set but --space may search instead: not both.
    const std::pair<std::string_view, bool> searched_or_set[] = {{"cp_comm", !request.space.cp_comm.empty()},
                                                                 {"fp8", !request.space.fp8.empty()},
                                                                 {"compile", !request.space.compile.empty()}};
    for (const auto& o : request.overrides)
        for (const auto& [key, searched_here] : searched_or_set)
            if (searched_here && strip(o.path) == key)
                throw PlanError(fmt::format("--set {}: {} is searched here (--space {}=...); give it one way", o.path,
                                            key, key));
    for (const auto& o : request.overrides)
        if (strip(o.path) == "micro_batch")
            throw PlanError(fmt::format("--set {}: plan searches the micro-batch size; give it with --space "
                                        "micro_batch=...",
                                        o.path));
    if (!doc["cluster"].is_object()) throw PlanError(fmt::format("{}: the config has no cluster", file));
    if (doc.contains("strategy") && doc["strategy"].is_object())
        for (const auto& k : kLayoutKeys) doc["strategy"].erase(k);
    else
        doc["strategy"] = nlohmann::json::object();
    if (doc.contains("training") && doc["training"].is_object()) doc["training"].erase("micro_batch");
    e.base = doc;

    // The model and cluster as checked: the base under a layout every config takes (ddp over every
    // GPU, one sequence a GPU).
    const Config probe = [&] {
        const int nodes = int_or(doc["cluster"], "nodes", 1);
        const int gpn = int_or(doc["cluster"], "gpus_per_node", 8);
        std::vector<Override> o = request.overrides;
        o.push_back({"strategy.name", "\"ddp\""});
        o.push_back({"training.global_batch", std::to_string(static_cast<long long>(nodes) * gpn)});
        return parse_config(doc, file, o);
    }();
    const int per_node = probe.cluster.gpus_per_node;
    if (!(request.headroom >= 0 && request.headroom < probe.cluster.gpu.memory_bytes))
        throw PlanError(fmt::format("--headroom {:.6g} GiB: expected at least 0 and below the GPU's {:.6g} GiB",
                                    request.headroom / kGiB, probe.cluster.gpu.memory_bytes / kGiB));
    const TransformerSpec& m = probe.model.spec;
    // The GPU counts, slowest in the enumeration: the cluster's own (its config as it is), or each
    // count asked for as whole nodes, or one node of fewer GPUs (the candidate sets the cluster).
    e.gpu_counts =
        request.gpus.empty() ? std::vector<int>{probe.cluster.gpus()} : gpu_counts(request.gpus, per_node);
    const std::vector<int>& counts = e.gpu_counts;
    // The global batch as the base gives it (with --set), not the probe's: checked as every
    // candidate will check it (with a layout of one GPU a replica, which any whole batch takes).
    const int global_batch = [&] {
        std::vector<Override> o = request.overrides;
        o.push_back({"strategy.name", "\"ddp\""});
        nlohmann::json d = doc;
        d["cluster"]["nodes"] = 1;
        d["cluster"]["gpus_per_node"] = 1;
        return parse_config(d, file, o).training.global_batch;
    }();

    const PlanSpace& sp = request.space;
    static const std::vector<int> one = {1};
    static const std::vector<int> no = {0};
    static const std::vector<int> both = {0, 1};
    std::size_t index = 0;
    const bool uneven_searched = !sp.first_stage_layers.empty() || !sp.last_stage_layers.empty();
    // The schedule files: the "schedule" strategy runs each (and joins the strategies when they are named).
    std::vector<std::string> names = or_default(sp.strategies, kDefaultStrategies);
    const bool schedule_named = std::find(names.begin(), names.end(), "schedule") != names.end();
    if (schedule_named && sp.schedule_files.empty())
        throw PlanError("--space strategy=schedule: name the schedule files with --space schedule_file=F1,F2");
    if (!schedule_named && !sp.schedule_files.empty()) names.push_back("schedule");
    const std::vector<FileSchedule> files = read_schedule_files(sp.schedule_files);
    std::vector<const FileSchedule*> each_file;
    for (const auto& f : files) each_file.push_back(&f);
    static const std::vector<const FileSchedule*> no_file = {nullptr};
    for (const int gpus : counts)
    for (const auto& name : names)
    for (const FileSchedule* sf : name == "schedule" ? each_file : no_file) {
        const int node = gpus < per_node ? gpus : per_node;
        std::vector<Override> cluster;
        if (!request.gpus.empty()) {
            cluster.push_back({"cluster.nodes", std::to_string(gpus < per_node ? 1 : gpus / per_node)});
            if (gpus < per_node) cluster.push_back({"cluster.gpus_per_node", std::to_string(gpus)});
        }
        const StrategyInfo& info = *find_hw_strategy(name);
        std::vector<int> tps = sp.tp.empty() ? divisors(node) : sp.tp;
        if (!info.tensor_parallel) tps = one;
        std::vector<int> pps;
        if (!pipeline(info)) pps = one;
        else if (sf) {
            // The file fixes pp: its ranks, where --space pp (if given) holds them.
            if (sp.pp.empty() || std::find(sp.pp.begin(), sp.pp.end(), sf->ranks) != sp.pp.end()) pps = {sf->ranks};
        } else if (!sp.pp.empty()) {
            for (int p : sp.pp)
                if (p >= 2) pps.push_back(p);
        } else if (uneven_searched) {
            // The first or last stage's layers set, the others share the rest: pp need not divide
            // the layers (the config check says which splits work).
            for (int p = 2; p <= std::min(m.layers, gpus); ++p) pps.push_back(p);
        } else {
            for (int p : divisors(m.layers))
                if (p >= 2 && p <= gpus) pps.push_back(p);
        }
        std::vector<int> zeros;
        if (!sp.zero_stage.empty()) {
            for (int z : sp.zero_stage)
                if ((z >= info.min_zero_stage && z <= info.max_zero_stage) || (z == 3 && info.zero3)) zeros.push_back(z);
        } else {
            for (int z = info.min_zero_stage; z <= info.max_zero_stage; ++z) zeros.push_back(z);
            if (info.zero3 && info.max_zero_stage < 3) zeros.push_back(3);
        }
        const std::vector<int> cps = info.context_parallel ? or_default(sp.cp, one) : one;
        // Partial recompute, where a policy recomputes: every layer (0: the keys unset), the first n
        // of each chunk, or every k-th layer, as asked.
        const auto partials = [&](const std::string& rc) {
            std::vector<std::pair<std::string, int>> out;
            bool all = false;
            const auto add = [&](const char* key, int n) {
                if (n > 0) out.emplace_back(key, n);
                else if (!all) all = true, out.emplace_back("", 0);
            };
            if (rc == "none" || (sp.recompute_num_layers.empty() && sp.recompute_every.empty())) add("", 0);
            else {
                for (int n : sp.recompute_num_layers) add("recompute_num_layers", n);
                for (int k : sp.recompute_every) add("recompute_every", k);
            }
            return out;
        };
        // cp_comm: the config's own unless searched, and only where cp > 1 ("" keeps it).
        static const std::vector<std::string> keep = {""};
        const std::vector<std::string>& comms = sp.cp_comm.empty() ? keep : sp.cp_comm;
        // fp8: the config's own unless searched ("" keeps it).
        const std::vector<std::string> fp8s = sp.fp8.empty() ? std::vector<std::string>{""} : sp.fp8;
        // compile: likewise (-1 keeps it).
        const std::vector<int> compiles = sp.compile.empty() ? std::vector<int>{-1} : sp.compile;
        // microbatch_group: interleaved only, Megatron-LM's default (0: pp) unless searched.
        const std::vector<int>& groups = info.microbatch_group ? or_default(sp.microbatch_group, no) : no;
        // sharding: fsdp only ("" leaves the key unset where the strategy takes none).
        static const std::vector<std::string> unsharded = {""};
        const std::vector<std::string>& shardings = info.sharding ? or_default(sp.sharding, kShardings) : unsharded;
        // Uneven stages (Megatron-LM's first/last pipeline stage layers): pipelines that take them only,
        // even (0) unless searched.
        const bool takes_uneven = pipeline(info) && name != "dualpipev" && !sf;
        const std::vector<int>& firsts = takes_uneven ? or_default(sp.first_stage_layers, no) : no;
        const std::vector<int>& lasts = takes_uneven ? or_default(sp.last_stage_layers, no) : no;
        for (int tp : tps)
            for (int pp : pps) {
                std::vector<int> chunk_values = one;
                if (info.chunks) {
                    if (!sp.chunks.empty()) chunk_values = sp.chunks;
                    else {
                        chunk_values.clear();
                        for (int v : divisors(std::max(1, m.layers / pp)))
                            if (v >= 2) chunk_values.push_back(v);
                    }
                }
                for (int v : chunk_values)
                    for (int first : firsts)
                    for (int last : lasts)
                    for (int cp : cps)
                    for (const std::string& comm : cp > 1 ? comms : keep)
                        for (int zero : zeros) {
                            const long long mp = static_cast<long long>(tp) * pp * cp;
                            const int dp = mp > 0 && gpus % mp == 0 ? static_cast<int>(gpus / mp) : 0;
                            const int replica = dp > 0 && global_batch % dp == 0 ? global_batch / dp : 0;
                            std::vector<int> mbs = sp.micro_batch.empty() ? divisors(std::max(1, replica)) : sp.micro_batch;
                            if (sf) {
                                // The file fixes the microbatches, and so the micro-batch (0: none whole).
                                const int mb = replica > 0 && replica % sf->microbatches == 0
                                                   ? replica / sf->microbatches
                                                   : 0;
                                const bool asked = sp.micro_batch.empty() ||
                                                   (mb > 0 && std::find(sp.micro_batch.begin(), sp.micro_batch.end(),
                                                                        mb) != sp.micro_batch.end());
                                mbs = asked ? std::vector<int>{mb} : std::vector<int>{};
                            }
                            for (int mb : mbs)
                                for (const auto& rc : or_default(sp.recompute, kRecompute))
                                for (const auto& [part_key, part] : partials(rc)) {
                                    const std::vector<int>& sps = tp > 1 ? or_default(sp.sequence_parallel, both) : no;
                                    for (int seq : sps) {
                                        if (seq && tp == 1) continue;
                                        const std::vector<int>& ovs = seq ? or_default(sp.tp_comm_overlap, both) : no;
                                        for (int ov : ovs)
                                        for (const std::string& f8 : fp8s)
                                        for (int cc : compiles)
                                        for (int group : groups)
                                        for (const std::string& shard : shardings) {
                                            if (ov && !seq) continue;
                                            ++e.enumerated;
                                            const auto rejected = [&](const std::string& why) { ++e.rejected[why]; };
                                            if (node % tp != 0) { rejected(reject::tp_node); continue; }
                                            if (tp > 1 && (m.heads % tp != 0 || m.ffn % tp != 0 ||
                                                           (m.kv_heads % tp != 0 && tp % m.kv_heads != 0))) {
                                                rejected(reject::tp_heads);
                                                continue;
                                            }
                                            const bool uneven = first > 0 || last > 0;
                                            if (sf && m.layers % sf->stages != 0) {
                                                rejected(reject::schedule_layers);
                                                continue;
                                            }
                                            // (The layers are split into pp chunks before the file is read.)
                                            if (sf && part_key == "recompute_num_layers" && sf->stages != pp) {
                                                rejected(reject::schedule_recompute);
                                                continue;
                                            }
                                            if (!uneven && m.layers % pp != 0) { rejected(reject::pp_layers); continue; }
                                            if (dp == 0) { rejected(reject::gpus); continue; }
                                            if (mb == 0) { rejected(reject::schedule_batch); continue; }
                                            if (!uneven && m.layers % (pp * v) != 0) { rejected(reject::chunks); continue; }
                                            if (global_batch % (static_cast<long long>(mb) * dp) != 0) {
                                                rejected(reject::batch);
                                                continue;
                                            }
                                            Candidate c;
                                            c.index = index;
                                            c.gpus = gpus;
                                            auto& o = c.overrides;
                                            o = cluster;
                                            o.push_back({"strategy.name", fmt::format("\"{}\"", name)});
                                            if (sf) {
                                                const std::string path = nlohmann::json(sf->given).dump();
                                                o.push_back({"strategy.schedule_file", path});
                                            }
                                            o.push_back({"strategy.tp", std::to_string(tp)});
                                            o.push_back({"strategy.pp", std::to_string(pp)});
                                            o.push_back({"strategy.dp", std::to_string(dp)});
                                            if (cp > 1) o.push_back({"strategy.cp", std::to_string(cp)});
                                            if (!comm.empty())
                                                o.push_back({"strategy.cp_comm", fmt::format("\"{}\"", comm)});
                                            if (info.chunks) o.push_back({"strategy.chunks", std::to_string(v)});
                                            if (first > 0) o.push_back({"strategy.first_stage_layers", std::to_string(first)});
                                            if (last > 0) o.push_back({"strategy.last_stage_layers", std::to_string(last)});
                                            o.push_back({"strategy.zero_stage", std::to_string(zero)});
                                            o.push_back({"training.micro_batch", std::to_string(mb)});
                                            o.push_back({"strategy.recompute", fmt::format("\"{}\"", rc)});
                                            if (part > 0) o.push_back({"strategy." + part_key, std::to_string(part)});
                                            if (seq) o.push_back({"strategy.sequence_parallel", "true"});
                                            if (ov) o.push_back({"strategy.tp_comm_overlap", "true"});
                                            if (!f8.empty()) o.push_back({"strategy.fp8", fmt::format("\"{}\"", f8)});
                                            if (cc >= 0) o.push_back({"strategy.compile", cc ? "true" : "false"});
                                            if (group > 0)
                                                o.push_back({"strategy.microbatch_group", std::to_string(group)});
                                            if (!shard.empty() && shard != "full")
                                                o.push_back({"strategy.sharding", fmt::format("\"{}\"", shard)});
                                            // FSDP's sharding beside its ZeRO stage (full: the default, unnamed).
                                            const std::string sharded = !shard.empty() && shard != "full"
                                                                            ? fmt::format(" sharding={}", shard)
                                                                            : "";
                                            c.label = fmt::format("{} tp={} pp={} dp={}{}{}{}{} zero_stage={}{} micro_batch={} "
                                                                  "recompute={}{}{}{}{}{}{}",
                                                                  sf ? "schedule " + sf->given : name, tp, pp, dp,
                                                                  cp > 1 ? fmt::format(" cp={}{}", cp,
                                                                                       comm.empty() ? "" : " cp_comm=" + comm)
                                                                         : "",
                                                                  info.chunks ? fmt::format(" chunks={}", v) : "",
                                                                  first > 0 ? fmt::format(" first_stage_layers={}", first) : "",
                                                                  last > 0 ? fmt::format(" last_stage_layers={}", last) : "",
                                                                  zero,
                                                                  sharded, mb, rc,
                                                                  part > 0 ? fmt::format(" {}={}", part_key, part) : "",
                                                                  seq ? " sp" : "", ov ? " overlap" : "",
                                                                  f8.empty() ? "" : fmt::format(" fp8={}", f8),
                                                                  cc < 0 ? "" : cc ? " compile" : " eager",
                                                                  group > 0 ? fmt::format(" microbatch_group={}", group)
                                                                            : "");
                                            Config config;
                                            try {
                                                std::vector<Override> all = request.overrides;
                                                all.insert(all.end(), o.begin(), o.end());
                                                config = parse_config(doc, file, all);
                                            } catch (const ConfigError& err) {
                                                const std::string category =
                                                    reject::config_prefix + (err.path.empty() ? err.file : err.path);
                                                rejected(category);
                                                if (e.example_error.empty())
                                                    e.example_error = fmt::format("{}: {}", c.label, err.what());
                                                if (!e.config_examples.count(category)) {
                                                    // What the check said, without the file and path the category names.
                                                    std::string said = err.what();
                                                    const std::string where =
                                                        err.file + ": " + (err.path.empty() ? "" : err.path + ": ");
                                                    if (said.starts_with(where)) said.erase(0, where.size());
                                                    e.config_examples.emplace(category, fmt::format("{}: {}", c.label, said));
                                                }
                                                continue;
                                            }
                                            // HYBRID_SHARD shards inside a node and replicates across nodes only
                                            // where the data-parallel ranks form whole nodes of them, two or more
                                            // (hybrid_shard_ranks); otherwise the run is the full
                                            // shard's, step for step.
                                            if (shard == "hybrid" && hybrid_shard_ranks(config) == 0) {
                                                rejected(reject::hybrid_full);
                                                continue;
                                            }
                                            std::optional<sched::Schedule> schedule;
                                            try {
                                                // The generated schedule's own rules (interleaved: g in [p, m]).
                                                schedule = generated_schedule(config);
                                            } catch (const std::invalid_argument&) {
                                                rejected(reject::schedule);
                                                continue;
                                            }
                                            const RunSize size = estimate_run_size(config, kEstimate);
                                            if (size.events > kMaxRunEvents) {
                                                rejected(reject::too_large);
                                                continue;
                                            }
                                            c.capacity = config.cluster.gpu.memory_bytes;
                                            const double limit = c.capacity - request.headroom;
                                            const bool margin = request.headroom > 0;
                                            const double states = model_states_bound(config, size);
                                            if (states > limit) {
                                                rejected(margin ? reject::states_headroom : reject::states);
                                                continue;
                                            }
                                            const Workload work =
                                                make_workload(config.model.spec, layer_split(config), config.cluster.gpu);
                                            // A generated schedule, or a file: the actions of the ranks that hold
                                            // the first and the last stage (plan_bounds.cpp, activations_bound).
                                            if (!sf && !schedule) schedule = builtin_schedule(config);
                                            const sched::Schedule* order =
                                                sf ? &sf->schedule : schedule ? &*schedule : nullptr;
                                            c.memory_bound =
                                                memory_bound(states, activations_bound(config, work, order, size));
                                            if (c.memory_bound > limit) {
                                                rejected(margin ? reject::activations_headroom : reject::activations);
                                                continue;
                                            }
                                            c.time_bound =
                                                step_time_bound(config, work, sf ? sf->output_rank : -1, order);
                                            ++index;
                                            e.candidates.push_back(std::move(c));
                                        }
                                    }
                                }
                        }
            }
    }
    return e;
}

Config candidate_config(const Enumeration& e, const PlanRequest& request, const Candidate& c) {
    std::vector<Override> all = request.overrides;
    all.insert(all.end(), c.overrides.begin(), c.overrides.end());
    return parse_config(e.base, request.config_path.empty() ? request.file : request.config_path, all);
}

namespace {

// What a row is ranked by, from its step time (RankBy), and the bound on it of a candidate: the
// step-time bound times the same GPU count, so a lower bound still.
double ranked(double step_time, const Candidate& c, RankBy by) {
    return by == RankBy::gpu_seconds ? step_time * c.gpus : step_time;
}
double bound_of(const Candidate& c, RankBy by) { return ranked(c.time_bound, c, by); }

// The candidates in best-first order: by their bound, ties in enumeration order.
std::vector<std::size_t> best_first(const std::vector<Candidate>& cands, RankBy by) {
    std::vector<std::size_t> order(cands.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return bound_of(cands[a], by) < bound_of(cands[b], by); });
    return order;
}

// Whether a row that ran within the GPU's memory passes it less the headroom.
void mark_headroom(PlanRow& row, double headroom) {
    row.over_headroom = headroom > 0 && row.figures && !row.figures->oom &&
                        row.figures->peak_bytes > row.figures->capacity - headroom;
}

PlanRow make_row(std::size_t candidate, std::optional<RunReport> report, std::string error, double headroom) {
    PlanRow row{candidate, std::nullopt, nullptr, std::move(error)};
    if (report) {
        row.report = to_json(*report);
        row.figures = plan_figures(row.report, "report");
    }
    mark_headroom(row, headroom);
    return row;
}

// The fitting rows ranked: step time (or GPU-seconds), ties in enumeration order.
void rank_rows(PlanResult& r) {
    r.best.clear();
    for (std::size_t i = 0; i < r.simulated.size(); ++i)
        if (r.simulated[i].fits()) r.best.push_back(i);
    const auto key = [&](std::size_t i) {
        return ranked(r.simulated[i].figures->step_time, r.enumeration.candidates[r.simulated[i].candidate], r.rank_by);
    };
    std::stable_sort(r.best.begin(), r.best.end(), [&](std::size_t a, std::size_t b) {
        const double x = key(a), y = key(b);
        return x != y ? x < y : r.simulated[a].candidate < r.simulated[b].candidate;
    });
}

// The step times of the fitting rows delivered so far, fastest first, and the rule that stops a
// best-first search: a candidate whose bound is no better than the top-th of them cannot enter
// the top, nor can any after it (bounds ascending).
struct TopSoFar {
    std::size_t top;
    RankBy by;
    std::vector<double> fitting;  // ranked figures (RankBy)
    [[nodiscard]] bool stops_at(const Candidate& c) const {
        return fitting.size() >= top && bound_of(c, by) >= fitting[top - 1];
    }
    void add(double step_time, const Candidate& c) {
        const double v = ranked(step_time, c, by);
        fitting.insert(std::upper_bound(fitting.begin(), fitting.end(), v), v);
    }
};

void count_row(PlanResult& r, const PlanRow& row) {
    if (row.fits()) return;
    if (!row.error.empty()) ++r.failed;
    else if (row.over_headroom) ++r.over_headroom;
    else ++r.out_of_memory;
}

}  // namespace

PlanFigures plan_figures(const nlohmann::json& report, const std::string& where) {
    const auto number = [&](std::initializer_list<const char*> path) {
        const nlohmann::json* j = &report;
        std::string at = where;
        for (const char* key : path) {
            at += fmt::format(".{}", key);
            if (!j->is_object() || !j->contains(key)) throw PlanError(fmt::format("{}: missing", at));
            j = &(*j)[key];
        }
        if (!j->is_number()) throw PlanError(fmt::format("{}: expected a number, got {}", at, j->dump()));
        return j->get<double>();
    };
    PlanFigures f;
    f.step_time = number({"step_time_s"});
    f.mfu = number({"mfu"});
    f.tokens_per_second = number({"tokens_per_s"});
    f.peak_bytes = number({"memory", "peak", "bytes"});
    f.capacity = number({"memory", "capacity_bytes"});
    f.split = {number({"time_split_s", "compute"}), number({"time_split_s", "exposed_comm"}),
               number({"time_split_s", "idle"})};
    const auto oom = report.find("memory");
    f.oom = oom->contains("oom") && !(*oom)["oom"].is_null();
    return f;
}

PlanResult plan(const PlanRequest& request, const std::function<void(const PlanProgress&)>& progress) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
    if (request.shards < 1 || request.shard < 0 || request.shard >= request.shards)
        throw PlanError(fmt::format("--shard {}/{}: expected I/N with 0 <= I < N", request.shard, request.shards));
    PlanResult r;
    r.shard = request.shard;
    r.shards = request.shards;
    r.rank_by = request.rank_by;
    r.headroom = request.headroom;
    r.enumeration = enumerate_layouts(request);
    const auto& cands = r.enumeration.candidates;
    const RankBy by = request.rank_by;
    std::vector<std::size_t> order;
    {
        const std::vector<std::size_t> all = best_first(cands, by);
        for (std::size_t p = static_cast<std::size_t>(request.shard); p < all.size();
             p += static_cast<std::size_t>(request.shards))
            order.push_back(all[p]);
    }
    // `threshold` lets the threads skip candidates early: it only falls as rows are delivered (in
    // order), so a candidate skipped on a thread is one the delivery stops at.
    TopSoFar so_far{static_cast<std::size_t>(std::max(1, request.top)), by, {}};
    std::atomic<double> threshold{std::numeric_limits<double>::infinity()};
    bool stopped = false;
    std::size_t pos = 0;
    const int jobs = std::max(1, request.jobs);
    const std::size_t wave = static_cast<std::size_t>(jobs) * 4;
    while (pos < order.size() && !stopped) {
        if (request.time_budget > 0 && elapsed() >= request.time_budget) {
            r.budget_hit = true;
            break;
        }
        const std::size_t n = std::min(wave, order.size() - pos);
        run_in_order(
            n, jobs,
            [&](std::size_t k) -> SweepOutcome {
                const Candidate& c = cands[order[pos + k]];
                if (bound_of(c, by) >= threshold.load()) return {};
                try {
                    const Config config = candidate_config(r.enumeration, request, c);
                    return {simulate(config, {.keep_trace = false, .straggler_baseline = false}).report, {}};
                } catch (const Interrupted&) {
                    throw;
                } catch (const std::exception& err) {
                    return {std::nullopt, err.what()};
                }
            },
            [&](std::size_t k, SweepOutcome& o) {
                if (stopped) return;
                const Candidate& c = cands[order[pos + k]];
                if (so_far.stops_at(c)) {
                    stopped = true;
                    return;
                }
                PlanRow row = make_row(order[pos + k], std::move(o.report), o.error, request.headroom);
                if (row.fits()) {
                    so_far.add(row.figures->step_time, c);
                    if (so_far.fitting.size() >= so_far.top) threshold.store(so_far.fitting[so_far.top - 1]);
                }
                count_row(r, row);
                r.simulated.push_back(std::move(row));
                if (progress) {
                    PlanProgress p{r.simulated.size(), order.size(), order.size(), std::nullopt};
                    if (!so_far.fitting.empty()) p.best = so_far.fitting.front();
                    if (so_far.fitting.size() >= so_far.top) {
                        const double beat = so_far.fitting[so_far.top - 1];
                        p.may_simulate = static_cast<std::size_t>(
                            std::partition_point(order.begin(), order.end(),
                                                 [&](std::size_t i) { return bound_of(cands[i], by) < beat; }) -
                            order.begin());
                    }
                    p.may_simulate = std::max(p.may_simulate, p.simulated);
                    progress(p);
                }
            });
        pos += n;
    }
    const std::size_t rest = order.size() - r.simulated.size();
    if (r.budget_hit) r.left = rest;
    else r.pruned = rest;
    rank_rows(r);
    r.wall_seconds = elapsed();
    return r;
}

std::string plan_fingerprint(const Enumeration& e, const PlanRequest& request) {
    // FNV-1a, 64 bits, over a canonical text of the request and its candidates.
    std::uint64_t h = 14695981039346656037ULL;
    const auto add = [&](const std::string& text) {
        for (const unsigned char ch : text) {
            h ^= ch;
            h *= 1099511628211ULL;
        }
        h ^= 0xff;  // a separator no text holds
        h *= 1099511628211ULL;
    };
    add(e.base.dump());
    for (const auto& o : request.overrides) add(o.path + "=" + o.value);
    // The GPU counts as parsed, not as spelled ("064" is "64"; "8-16" on nodes of 8 is "8,16").
    std::string gpus;
    if (!request.gpus.empty())
        for (const int n : e.gpu_counts) gpus += fmt::format("{}{}", gpus.empty() ? "" : ",", n);
    add(fmt::format("gpus {} top {} rank_by {} headroom {:.17g} enumerated {}", gpus, std::max(1, request.top),
                    rank_by_name(request.rank_by), request.headroom, e.enumerated));
    for (const auto& c : e.candidates)
        add(fmt::format("{} {} {:.17g} {:.17g}", c.gpus, c.label, c.time_bound, c.memory_bound));
    // A schedule file's actions, which the labels name only by the file (one edited between the shards
    // and the merge would mix two searches).
    for (const auto& f : request.space.schedule_files) {
        std::ifstream in(f, std::ios::binary);
        add(std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()));
    }
    return fmt::format("{:016x}", h);
}

nlohmann::json shard_to_json(const PlanResult& r, const PlanRequest& request) {
    nlohmann::json rows = nlohmann::json::array();
    for (const PlanRow& row : r.simulated) {
        const Candidate& c = r.enumeration.candidates[row.candidate];
        nlohmann::json j = {{"candidate", row.candidate},
                            {"gpus", c.gpus},
                            {"layout", c.label},
                            {"step_time_bound_s", c.time_bound},
                            {"memory_bound_bytes", c.memory_bound}};
        if (row.error.empty()) j["report"] = row.report;
        else j["error"] = row.error;
        rows.push_back(std::move(j));
    }
    return {{"dtsim_plan_shard", 1},
            {"shard", r.shard},
            {"shards", r.shards},
            {"fingerprint", plan_fingerprint(r.enumeration, request)},
            {"candidates", r.enumeration.candidates.size()},
            {"time_budget_reached", r.budget_hit},
            {"wall_s", r.wall_seconds},
            {"rows", std::move(rows)}};
}

nlohmann::json read_shard_file(const std::string& path) {
    static const json_reader::Dialect dialect{
        .raise = [](const std::string& file, const std::string& at, const std::string& message) {
            throw PlanError(fmt::format("{}: {}: {}", file, at, message));
        }};
    return json_reader::Document::load(path, dialect).json();
}

PlanResult merge_shards(const PlanRequest& request, const std::vector<nlohmann::json>& shards,
                        const std::vector<std::string>& names) {
    if (shards.empty() || shards.size() != names.size()) throw PlanError("--merge: expected the shard files");
    PlanResult r;
    r.rank_by = request.rank_by;
    r.headroom = request.headroom;
    r.enumeration = enumerate_layouts(request);
    const auto& cands = r.enumeration.candidates;
    const std::string fingerprint = plan_fingerprint(r.enumeration, request);
    const auto field = [](const nlohmann::json& j, const char* key, const std::string& where) -> const nlohmann::json& {
        if (!j.is_object() || !j.contains(key)) throw PlanError(fmt::format("{}.{}: missing", where, key));
        return j[key];
    };
    const auto whole = [&](const nlohmann::json& j, const char* key, const std::string& where) {
        const nlohmann::json& v = field(j, key, where);
        if (!v.is_number_integer() || v.get<std::int64_t>() < 0)
            throw PlanError(fmt::format("{}.{}: expected a whole number >= 0, got {}", where, key, v.dump()));
        return static_cast<std::uint64_t>(v.get<std::int64_t>());
    };
    std::size_t count = 0;
    std::vector<std::string> seen;
    // Every row the shards simulated, by candidate.
    std::vector<std::optional<PlanRow>> rows(cands.size());
    for (std::size_t f = 0; f < shards.size(); ++f) {
        const nlohmann::json& s = shards[f];
        const std::string& name = names[f];
        const std::string root = name + ": $";
        if (!s.is_object() || !s.contains("dtsim_plan_shard"))
            throw PlanError(fmt::format("{}: not a shard file of dtsim plan (no $.dtsim_plan_shard)", name));
        if (whole(s, "dtsim_plan_shard", root) != 1)
            throw PlanError(fmt::format("{}: $.dtsim_plan_shard: version {} is not 1", name, s["dtsim_plan_shard"].dump()));
        const std::size_t n = whole(s, "shards", root), i = whole(s, "shard", root);
        if (f == 0) {
            count = n;
            seen.assign(n, {});
        }
        if (n != count || n != shards.size())
            throw PlanError(fmt::format("{}: $.shards: {} shards, but {} shard files given{}", name, n, shards.size(),
                                        n != count ? fmt::format(" and {} says {}", names[0], count) : ""));
        if (i >= n) throw PlanError(fmt::format("{}: $.shard: {} is not below $.shards {}", name, i, n));
        if (!seen[i].empty()) throw PlanError(fmt::format("{}: shard {} of {} again (also {})", name, i, n, seen[i]));
        seen[i] = name;
        const nlohmann::json& fp = field(s, "fingerprint", root);
        if (!fp.is_string() || fp.get<std::string>() != fingerprint)
            throw PlanError(fmt::format("{}: $.fingerprint: {} is another search's (this one's is \"{}\": the same config, "
                                        "--gpus, --set, --space and --top give the same)",
                                        name, fp.dump(), fingerprint));
        const nlohmann::json& budget = field(s, "time_budget_reached", root);
        if (!budget.is_boolean()) throw PlanError(fmt::format("{}: $.time_budget_reached: expected true or false", name));
        r.budget_hit = r.budget_hit || budget.get<bool>();
        const nlohmann::json& wall = field(s, "wall_s", root);
        if (!wall.is_number() || !(wall.get<double>() >= 0))
            throw PlanError(fmt::format("{}: $.wall_s: expected seconds >= 0", name));
        r.wall_seconds += wall.get<double>();
        const nlohmann::json& list = field(s, "rows", name + ": $");
        if (!list.is_array()) throw PlanError(fmt::format("{}: $.rows: expected an array", name));
        for (std::size_t k = 0; k < list.size(); ++k) {
            const std::string where = fmt::format("{}: $.rows[{}]", name, k);
            const std::size_t c = whole(list[k], "candidate", where);
            if (c >= cands.size())
                throw PlanError(fmt::format("{}.candidate: {} is not a candidate (there are {})", where, c, cands.size()));
            if (rows[c]) throw PlanError(fmt::format("{}.candidate: candidate {} twice", where, c));
            PlanRow row{c, std::nullopt, nullptr, {}};
            if (list[k].contains("error")) {
                const nlohmann::json& e = list[k]["error"];
                if (!e.is_string() || e.get<std::string>().empty())
                    throw PlanError(fmt::format("{}.error: expected the simulation's message", where));
                row.error = e.get<std::string>();
            } else {
                row.report = field(list[k], "report", where);
                row.figures = plan_figures(row.report, where + ".report");
            }
            mark_headroom(row, request.headroom);
            rows[c] = std::move(row);
        }
    }
    // Replay one process's search: best first, stopping where it stops. Every row it needs is in
    // a shard unless a shard stopped at its time budget; then every row stored is ranked.
    const std::vector<std::size_t> order = best_first(cands, request.rank_by);
    TopSoFar so_far{static_cast<std::size_t>(std::max(1, request.top)), request.rank_by, {}};
    if (r.budget_hit) {
        for (const std::size_t c : order)
            if (rows[c]) {
                count_row(r, *rows[c]);
                r.simulated.push_back(std::move(*rows[c]));
            }
        r.left = cands.size() - r.simulated.size();
    } else {
        for (std::size_t p = 0; p < order.size(); ++p) {
            const Candidate& c = cands[order[p]];
            if (so_far.stops_at(c)) break;
            if (!rows[order[p]])
                throw PlanError(fmt::format("{}: candidate {} ({}) was not simulated, yet the search needs it: the shard "
                                            "files do not come from one search",
                                            seen[p % count], order[p], c.label));
            PlanRow& row = *rows[order[p]];
            if (row.fits()) so_far.add(row.figures->step_time, c);
            count_row(r, row);
            r.simulated.push_back(std::move(row));
        }
        r.pruned = cands.size() - r.simulated.size();
    }
    rank_rows(r);
    r.merged = static_cast<int>(count);
    return r;
}

nlohmann::json settings_json(const Candidate& c) {
    nlohmann::json set = nlohmann::json::object();
    for (const auto& o : c.overrides) set[o.path] = nlohmann::json::parse(o.value);
    return set;
}

nlohmann::json to_json(const PlanResult& r, std::size_t top, bool timings) {
    const auto& e = r.enumeration;
    nlohmann::json rejected = nlohmann::json::object();
    for (const auto& [why, n] : e.rejected) rejected[why] = n;
    nlohmann::json rows = nlohmann::json::array();
    for (std::size_t i = 0; i < r.best.size() && i < top; ++i) {
        const PlanRow& row = r.simulated[r.best[i]];
        const Candidate& c = e.candidates[row.candidate];
        nlohmann::json report = row.report;
        if (!timings) report.erase("wall_s");
        rows.push_back({{"rank", i + 1},
                        {"gpus", c.gpus},
                        {"layout", c.label},
                        {"set", settings_json(c)},
                        {"step_time_bound_s", c.time_bound},
                        {"memory_bound_bytes", c.memory_bound},
                        {"report", report}});
    }
    nlohmann::json j = {{"counts",
                         {{"enumerated", e.enumerated},
                          {"rejected", e.rejected_total()},
                          {"rejected_by_reason", rejected},
                          {"config_check_examples", e.config_examples},
                          {"candidates", e.candidates.size()},
                          {"simulated", r.simulated.size()},
                          {"out_of_memory_in_simulation", r.out_of_memory},
                          {"over_headroom_in_simulation", r.over_headroom},
                          {"failed_in_simulation", r.failed},
                          {"pruned_by_bound", r.pruned},
                          {"left_by_time_budget", r.left}}},
                        {"time_budget_reached", r.budget_hit},
                        {"rank_by", rank_by_name(r.rank_by)},
                        {"headroom_bytes", r.headroom},
                        {"top", rows}};
    if (timings) {
        j["wall_s"] = r.wall_seconds;
        j["configs_per_s"] = r.wall_seconds > 0 ? static_cast<double>(r.simulated.size()) / r.wall_seconds : 0.0;
    }
    return j;
}

}  // namespace dtsim::hw
