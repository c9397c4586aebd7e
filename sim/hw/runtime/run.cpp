#include "dtsim/hw/run.hpp"

#include "dtsim/hw/job.hpp"
#include "dtsim/hw/puzzle_costs.hpp"
#include "dtsim/hw/steps.hpp"
#include "dtsim/hw/strategies.hpp"
#include "dtsim/hw/workload.hpp"
#include "dtsim/hw/world.hpp"
#include "dtsim/puzzle/registry.hpp"
#include "dtsim/sched/executor.hpp"
#include "dtsim/sched/format.hpp"
#include "dtsim/sched/generators.hpp"
#include "dtsim/sched/lowering.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string_view>

namespace dtsim::hw {

namespace {

std::string describe_op(OpCode op, int layer) {
    return layer == kNoLayer ? std::string(op.name()) : fmt::format("{} (layer {})", op.name(), layer);
}

void rates(RunReport& r, const Config& c) {
    const double denom = r.gpus * r.peak_flops * r.step_time;
    r.mfu = denom > 0 ? r.model_flops / denom : 0;
    r.hfu = denom > 0 ? r.hardware_flops / denom : 0;
    r.tflops_per_gpu = r.step_time > 0 ? r.hardware_flops / r.gpus / r.step_time / kTera : 0;
    r.tokens_per_second =
        r.step_time > 0 ? static_cast<double>(c.training.global_batch) * c.model.spec.seq / r.step_time : 0;
}

// The schedule a scheduled-pipeline strategy runs, checked against the config.
PipelinePlan make_plan(const Config& c) {
    const StrategyConfig& s = c.strategy;
    PipelinePlan plan;
    const int m = c.microbatches();
    try {
        if (s.name == "schedule") {
            plan.schedule = sched::read_schedule_file(s.schedule_file);
        } else {
            sched::GenerateParams params{s.pp, m, s.name == "dualpipev" ? 2 : s.chunks, s.microbatch_group};
            plan.schedule = sched::generate(s.name, params);
        }
        if (plan.schedule.lowered()) plan.schedule = sched::strip_comms(plan.schedule);
        sched::validate(plan.schedule);
    } catch (const ConfigError&) {
        throw;
    } catch (const std::exception& e) {
        throw ConfigError(c.file, s.name == "schedule" ? "$.strategy.schedule_file" : "$.strategy",
                          fmt::format("strategy \"{}\": {}", s.name, e.what()));
    }
    const sched::Schedule& sc = plan.schedule;
    const std::string where = s.name == "schedule" ? "$.strategy.schedule_file" : "$.strategy";
    if (sc.num_ranks() != s.pp)
        throw ConfigError(c.file, where, fmt::format("the schedule has {} ranks, but pp = {}", sc.num_ranks(), s.pp));
    if (sc.num_microbatches() != m)
        throw ConfigError(c.file, where,
                          fmt::format("the schedule has {} microbatches, but the config runs {} (global_batch / "
                                      "(micro_batch x dp) = {} / ({} x {}))",
                                      sc.num_microbatches(), m, c.training.global_batch, c.training.micro_batch, s.dp));
    plan.stages = sc.num_stages();
    if (!s.stage_layers.empty()) {
        // (load_config checked their sum, and their count where the strategy fixes it.)
        if (static_cast<int>(s.stage_layers.size()) != plan.stages)
            throw ConfigError(c.file, "$.strategy.stage_layers",
                              fmt::format("expected {} entries, one per stage of the schedule in model order, found {}",
                                          plan.stages, s.stage_layers.size()));
    } else if (!uneven_stages(s) && c.model.spec.layers % plan.stages != 0) {
        throw ConfigError(c.file, where,
                          fmt::format("{} layers cannot be split evenly into the schedule's {} stages ({} % {} = {})",
                                      c.model.spec.layers, plan.stages, c.model.spec.layers, plan.stages,
                                      c.model.spec.layers % plan.stages));
    }
    // recompute_num_layers counts from each model chunk's first layer, and the layers were split
    // into chunks (layer_split) before the file was read: one a pipeline rank, unless stage_layers
    // gave the file's stages.
    if (s.recompute_num_layers > 0 && plan.stages != model_chunks(c))
        throw ConfigError(c.file, "$.strategy.recompute_num_layers",
                          fmt::format("counts the first layers of each model chunk, but the schedule's {} stages are "
                                      "not the pp = {} chunks the layers were split into before it was read: give "
                                      "\"stage_layers\" ({} entries, the layers of every stage) with it",
                                      plan.stages, s.pp, plan.stages));
    plan.split(stage_layers_of(c, plan.stages));
    plan.owner = sched::stage_owners(sc);
    // A schedule that cannot progress is diagnosed in steps first, where the
    // executor names who waits for which tensor (the hardware world would only
    // see ranks blocked in recv): run_schedule throws DeadlockError.
    (void)sched::run_schedule(sc);
    return plan;
}

}  // namespace

namespace {

// simulated_twins, and where the run has twins but simulates every rank, why (`why`).
std::optional<Twins> choose_twins(const Config& c, const RunOptions& options, std::string& why) {
    const StrategyConfig& s = c.strategy;
    why.clear();
    if (!options.twins_once || s.name == "puzzle" || s.dp * s.tp < 2) return std::nullopt;
    if (static_cast<long long>(s.dp) * s.cp * s.tp * s.pp != c.gpus()) {
        why = "the layout does not fill the cluster";
        return std::nullopt;
    }
    // Twins sit alike on the nodes: the cp x tp GPUs of a replica at one stage (its tensor- and
    // context-parallel groups) and the dp x cp x tp GPUs of a stage (a pipeline's sends, the
    // embedding group) each fill whole nodes or share one with their likes, never straddle two.
    const long long g = c.cluster.gpus_per_node, replica = static_cast<long long>(s.cp) * s.tp,
                    stage = replica * s.dp;
    const auto aligned = [g](long long block) { return g % block == 0 || block % g == 0; };
    if (!aligned(replica) || (s.pp > 1 && !aligned(stage))) {
        why = fmt::format("{} straddle the nodes of {} GPUs unevenly, so twins would cross other links",
                          !aligned(replica) ? fmt::format("the cp x tp = {} GPUs of a replica's stage", replica)
                                            : fmt::format("the dp x cp x tp = {} GPUs of a pipeline stage", stage),
                          g);
        return std::nullopt;
    }
    if (c.stragglers.jitter.on()) {
        why = "jitter makes twins differ";
        return std::nullopt;
    }
    if (c.stragglers.slowdown.empty()) return Twins{};
    // Slow GPUs: their replicas run apart (every tensor-parallel rank: a slow one's peers wait for
    // it), the others alike, as one of them; hybrid sharding's shard groups would mix the two.
    if (hybrid_shard_ranks(c) > 0) {
        why = "slow GPUs with hybrid sharding make twins differ";
        return std::nullopt;
    }
    std::vector<int> slow;
    for (const auto& [gpu, factor] : c.stragglers.slowdown)
        if (gpu >= 0 && gpu < c.gpus()) slow.push_back(replica_of(s, gpu));
    std::sort(slow.begin(), slow.end());
    slow.erase(std::unique(slow.begin(), slow.end()), slow.end());
    if (static_cast<int>(slow.size()) + 1 >= s.dp) {
        why = "slow GPUs in every data-parallel replica, or all but one";
        return std::nullopt;
    }
    int stand_in = 0;
    while (std::binary_search(slow.begin(), slow.end(), stand_in)) ++stand_in;
    Twins twins{slow, s.tp, 0};
    const auto at = std::lower_bound(twins.replicas.begin(), twins.replicas.end(), stand_in);
    twins.stand_in = static_cast<std::size_t>(at - twins.replicas.begin());
    twins.replicas.insert(at, stand_in);
    return twins;
}

}  // namespace

std::optional<Twins> simulated_twins(const Config& c, const RunOptions& options) {
    std::string why;
    return choose_twins(c, options, why);
}

std::string every_rank_reason(const Config& c, const RunOptions& options) {
    std::string why;
    (void)choose_twins(c, options, why);
    return why;
}

bool twins_once_applies(const Config& c, const RunOptions& options) { return simulated_twins(c, options).has_value(); }

namespace {

// A transformer strategy's run on a world of every GPU, or of the ranks that stand for their twins.
RunResult simulate_world(const Config& c, const RunOptions& options, const Twins* twins) {
    RunResult out;
    RunReport& r = out.report;
    const StrategyInfo* strategy = find_hw_strategy(c.strategy.name);
    if (!strategy) throw std::invalid_argument(fmt::format("no hardware strategy \"{}\"", c.strategy.name));
    const Workload work = make_workload(c.model.spec, layer_split(c), c.cluster.gpu);

    // With twins the world holds the GPUs that stand for them (twin_gpus); `simulated` is the rank
    // that stands for a GPU of the cluster.
    std::vector<int> placement = twins ? twin_gpus(c, *twins) : std::vector<int>{};
    const auto simulated = [&](int gpu) { return twins ? twin_of(c, *twins, gpu) : gpu; };
    const int ranks = twins ? static_cast<int>(placement.size()) : c.gpus();
    World world(c.cluster, ranks, std::move(placement));
    if (c.strategy.algorithm) world.set_algorithm(*c.strategy.algorithm);
    world.set_recording(options.keep_trace);
    world.set_stragglers(c.stragglers);
    std::optional<PipelinePlan> plan;
    if (is_scheduled_pipeline(c.strategy.name)) plan = make_plan(c);
    std::vector<Job> jobs = make_jobs(world, c, work, plan ? &*plan : nullptr, twins);
    std::vector<ParamGather> gathers;
    // ZeRO-1/2 with overlap_param_gather, and ZeRO-3 inside pipeline stages, gather the weights layer by layer.
    if (strategy->gathers_layers(c.strategy.zero_stage, c.strategy.overlap_param_gather,
                                 static_cast<long long>(c.strategy.dp) * c.strategy.cp)) {
        gathers.resize(jobs.size());
        for (std::size_t i = 0; i < jobs.size(); ++i) jobs[i].param_gather = &gathers[i];
    }
    world.run([&](Device& d) { return strategy->run(d, jobs[static_cast<std::size_t>(d.rank())]); });

    r.step_time = world.step_time();
    r.model_flops = model_flops_per_step(c.model.spec, c.training.global_batch);
    // Every GPU of the cluster, in order, each as the rank that simulated it (the same sums as a
    // world of every GPU would make).
    for (int i = 0; i < c.gpus(); ++i) {
        const Device& d = world.device(simulated(i));
        r.hardware_flops += d.flops();
        r.events += d.events();
        r.split.compute += d.time_split().compute / c.gpus();
        r.split.comm += d.time_split().comm / c.gpus();
        r.split.idle += d.time_split().idle / c.gpus();
        r.rank_splits.push_back(d.time_split());
        const MemoryStats& m = d.memory_stats();
        r.rank_peaks.push_back(m.peak.bytes);
        if (i == 0 || m.peak.bytes > r.peak.bytes)
            r.peak = MemoryVerdict{i, m.peak.time, describe_op(m.peak.op, m.peak.layer), m.peak.bytes, m.peak.by_kind};
        if (m.oom && (!r.oom || m.oom->time < r.oom->time))
            r.oom = MemoryVerdict{i, m.oom->time, describe_op(m.oom->op, m.oom->layer), m.oom->bytes, m.oom->by_kind};
    }
    r.caveats = prediction_caveats(c, work);
    // The peak is of allocated bytes (max_memory_allocated). PyTorch's caching allocator reserved 2.1
    // to 9.8 GiB above its allocated peak in the single-GPU steps of
    // calibration/data/h100_dtsim_torch_steps.json (max_reserved_GiB - max_allocated_GiB); the CUDA
    // context and NCCL's buffers are outside it.
    constexpr double kMeasuredReserveMin = 2.1 * kGiB, kMeasuredReserveMax = 9.8 * kGiB;
    const double capacity = c.cluster.gpu.memory_bytes, left = capacity - r.peak.bytes;
    r.tight_memory = !r.oom && capacity > 0 && left < kMeasuredReserveMax;
    if (r.tight_memory)
        r.caveats.push_back(fmt::format(
            "the peak is {:.2f} GiB under the GPU's {:.2f} GiB, and it is of allocated bytes: PyTorch's caching "
            "allocator reserved {:.1f} to {:.1f} GiB above its allocated peak in measured steps "
            "(calibration/data/h100_dtsim_torch_steps.json), and the CUDA context and NCCL's buffers come on top: "
            "the run may not fit",
            left / kGiB, capacity / kGiB, kMeasuredReserveMin / kGiB, kMeasuredReserveMax / kGiB));
    const CriticalPath path = world.critical_path();
    r.critical_rank = world.placement(path.rank);
    r.simulated_ranks = world.ranks();
    if (r.step_time > 0) {
        r.critical_share = path.on_rank[static_cast<std::size_t>(path.rank)] / r.step_time;
        r.critical_transfers_share = path.transfers / r.step_time;
    }
    if (options.keep_trace) {
        nlohmann::json meta = c.json;
        meta["config"] = c.name;
        // How the ranks are laid out (Megatron-LM's order, job.hpp), for the pictures' rows.
        meta["grid"] = {{"tp", c.strategy.tp}, {"cp", c.strategy.cp}, {"dp", c.strategy.dp}, {"pp", c.strategy.pp}};
        // A schedule's stages (several per rank: its model chunks), by their layers.
        if (plan) meta["grid"]["stage_layers"] = plan->layers;
        out.trace = world.take_trace(std::move(meta));
        if (twins) {
            // Every GPU's events are its twin's: its log, with its own rank.
            std::vector<RankTrace> all(static_cast<std::size_t>(c.gpus()));
            for (int i = 0; i < c.gpus(); ++i) {
                all[static_cast<std::size_t>(i)].rank = i;
                const RankTrace& twin = out.trace.ranks[static_cast<std::size_t>(simulated(i))];
                all[static_cast<std::size_t>(i)].events = twin.events;
                all[static_cast<std::size_t>(i)].memory_by_kind = twin.memory_by_kind;
            }
            out.trace.ranks = std::move(all);
            summarize(out.trace);
        }
    }
    return out;
}

RunResult simulate_transformer(const Config& c, const RunOptions& options) {
    if (const std::optional<Twins> twins = simulated_twins(c, options)) {
        try {
            return simulate_world(c, options, &*twins);
        } catch (const ScheduleError&) {
            // The engine names the ranks of a failed run: the whole world runs again to name them as
            // they are. (Other errors, out of memory among them, are the same either way.)
        }
    }
    return simulate_world(c, options, nullptr);
}

RunResult simulate_puzzle(const Config& c, const RunOptions& options) {
    const puzzle::PuzzleInfo* p = puzzle::find_puzzle(c.strategy.puzzle);
    if (!p) {
        std::string names;
        for (const auto& q : puzzle::puzzles()) names += (names.empty() ? "" : ", ") + q.name;
        throw ConfigError(c.file, "$.strategy.puzzle",
                          fmt::format("unknown puzzle strategy \"{}\"; the puzzles are: {}", c.strategy.puzzle, names));
    }
    const TransformerSpec& m = c.model.spec;
    Cluster cluster = c.cluster;
    if (c.strategy.algorithm) cluster.algorithm = *c.strategy.algorithm;
    const HardwareCosts costs(cluster, c.gpus(), m.hidden, m.seq, m.dtype);
    nlohmann::json meta = c.json;
    meta["config"] = c.name;
    meta["puzzle"] = p->name;
    auto run = puzzle::run_strategy(p->strategy, m.layers, c.training.global_batch, c.gpus(), costs, std::move(meta));

    RunResult out;
    RunReport& r = out.report;
    out.trace = std::move(run.trace);
    out.trace.memory_capacity = c.cluster.gpu.memory_bytes;
    const Trace& t = out.trace;
    r.step_time = t.summary.makespan;
    r.model_flops = 3 * costs.forward_flops_per_batch() * m.layers * c.training.global_batch;
    r.hardware_flops = r.model_flops;
    for (const auto& rank : t.ranks) {
        double peak = 0;
        for (const auto& e : rank.events) peak = std::max(peak, e.memory);
        r.rank_peaks.push_back(peak);
        TimeSplit s;
        for (const auto& e : rank.events) {
            const OpKind k = op_kind(e.op);
            if (k == OpKind::collective || k == OpKind::p2p)
                s.comm += e.duration;
            else
                s.compute += e.duration;
        }
        s.idle = std::max(0.0, r.step_time - s.compute - s.comm);
        r.split.compute += s.compute / static_cast<double>(t.ranks.size());
        r.split.comm += s.comm / static_cast<double>(t.ranks.size());
        r.split.idle += s.idle / static_cast<double>(t.ranks.size());
    }
    // The puzzle world's trace has no kinds: no breakdown.
    r.peak = MemoryVerdict{t.summary.max_memory_rank, t.summary.max_memory_time, "", t.summary.max_memory, std::nullopt};
    for (const auto& e : t.ranks[static_cast<std::size_t>(t.summary.max_memory_rank)].events)
        if (e.start == t.summary.max_memory_time && e.memory == t.summary.max_memory) {
            r.peak.op = describe_op(e.op, e.layer);
            break;
        }
    if (r.peak.bytes > c.cluster.gpu.memory_bytes) r.oom = r.peak;
    r.correct = t.summary.correct;
    if (run.check_error) r.check_error = *run.check_error;
    r.events = t.event_count();
    r.simulated_ranks = c.gpus();
    if (!options.keep_trace) out.trace.ranks.clear();
    return out;
}

// The puzzle strategies that run every batch through every layer one by one (their events grow with
// the batches); the others take the batches together.
bool puzzle_per_batch(const std::string& name) { return name == "grad_accum" || name == "gpipe"; }

// Every figure of the report is finite, or the run is an error naming the first that is not.
void check_finite(const RunReport& r) {
    auto need = [&](double v, std::string_view what) {
        if (!std::isfinite(v))
            throw std::runtime_error(fmt::format("{}: the run's {} is not finite ({}): the config's sizes or rates are "
                                                 "beyond what the cost models can compute",
                                                 r.name, what, v));
    };
    need(r.step_time, "step time");
    need(r.model_flops, "model FLOPs");
    need(r.hardware_flops, "hardware FLOPs");
    need(r.peak_flops, "peak FLOP/s");
    need(r.mfu, "MFU");
    need(r.hfu, "HFU");
    need(r.tflops_per_gpu, "TFLOP/s per GPU");
    need(r.tokens_per_second, "tokens/s");
    need(r.split.compute, "compute time");
    need(r.split.comm, "exposed communication time");
    need(r.split.idle, "idle time");
    for (std::size_t i = 0; i < r.rank_splits.size(); ++i) {
        const double total = r.rank_splits[i].compute + r.rank_splits[i].comm + r.rank_splits[i].idle;
        if (!std::isfinite(total)) need(total, fmt::format("time split of rank {}", i));
    }
    need(r.critical_share, "critical path share");
    need(r.critical_transfers_share, "critical path share in transfers");
    if (r.baseline_step_time) {
        need(*r.baseline_step_time, "step time without stragglers");
        need(r.step_time / *r.baseline_step_time - 1, "stretch against the run without stragglers");
    }
    need(r.capacity, "memory capacity");
    need(r.peak.bytes, "peak memory");
    need(r.peak.time, "time of the peak memory");
    for (std::size_t i = 0; i < r.rank_peaks.size(); ++i)
        if (!std::isfinite(r.rank_peaks[i])) need(r.rank_peaks[i], fmt::format("peak memory of rank {}", i));
    if (r.oom) {
        need(r.oom->bytes, "memory at the first allocation past capacity");
        need(r.oom->time, "time of the first allocation past capacity");
    }
}

double most_layers(const Config& c) {
    const std::vector<double> on_rank = pipeline_rank_layers(c);
    return *std::max_element(on_rank.begin(), on_rank.end());
}

}  // namespace

std::vector<double> pipeline_rank_layers(const Config& c) {
    const StrategyConfig& s = c.strategy;
    const int pp = std::max(1, s.pp);
    if (!uneven_stages(s)) return std::vector<double>(static_cast<std::size_t>(pp), static_cast<double>(c.model.spec.layers) / pp);
    const std::vector<int> split = stage_layers_of(c, model_chunks(c));
    std::vector<double> on_rank(static_cast<std::size_t>(pp), 0);
    for (std::size_t k = 0; k < split.size(); ++k) {
        const int stage = static_cast<int>(k);
        const int r = s.name == "dualpipev" && stage >= pp ? 2 * pp - 1 - stage : stage % pp;
        on_rank[static_cast<std::size_t>(std::clamp(r, 0, pp - 1))] += split[k];
    }
    return on_rank;
}

RunSize estimate_run_size(const Config& c, const RunOptions& options) {
    RunSize size;
    const StrategyConfig& s = c.strategy;
    const TransformerSpec& m = c.model.spec;
    const double ranks = static_cast<double>(s.dp) * s.tp * s.pp * s.cp;
    if (s.name == "puzzle") {
        const double batches = puzzle_per_batch(s.puzzle) ? c.training.global_batch : 1;
        size.events = ranks * (static_cast<double>(m.layers) * batches * 8 + 16);
        return size;
    }
    // On one rank, on average: every rank's events scale with its layers, so uneven stages
    // (strategy.stage_layers) record as many in all as even ones.
    const double layers = static_cast<double>(m.layers) / s.pp;
    const double mb = c.microbatches();
    // Gradient buckets of one synchronisation (DDP's, ZeRO's; FSDP has its own): the layers' gradient
    // tensors poured into buckets as GradientSync does, counted over up to 4 layers and scaled.
    double buckets = 0;
    if (s.name != "fsdp" && static_cast<long long>(s.dp) * s.cp > 1) {
        const Workload work = make_workload(m, layer_split(c), c.cluster.gpu);
        GradBuckets b(s.first_bucket_bytes, s.bucket_bytes);
        const int replayed = static_cast<int>(std::min(4.0, layers));
        for (int l = 0; l < replayed; ++l)
            for (const auto* tensors : {&work.layer.mlp_grad_tensors, &work.layer.attention_grad_tensors})
                for (double t : *tensors) b.add(t);
        buckets = replayed > 0 ? b.closed() * layers / replayed + 1 : 1;
    }
    // A block and its tp collectives (overlapped: three compute parts and two collectives).
    const double block = s.tp > 1 ? (s.sequence_parallel ? (s.tp_comm_overlap ? 5 : 3) : 2) : 1;
    // Megatron's backward block (async_backward_block): three parts and three collectives with
    // sequence parallelism, two parts (three around a context-parallel ring) and an all-reduce
    // without; with userbuffers (overlapped_block's bulk overlaps) four parts and three collectives.
    const double backward_block = tp_async_backward(s) ? (s.sequence_parallel ? 6 : s.cp > 1 ? 4 : 3)
                                  : te_userbuffers(s)  ? 7
                                                       : block;
    double per_layer = 2 * block + 2 * backward_block;  // attention and MLP, forward and backward
    if (s.recompute == Recompute::full) per_layer += 2 * block;
    if (s.recompute == Recompute::selective) per_layer += 1;
    if (s.recompute == Recompute::selective_op) per_layer += 2;
    // The weight-gradient halves of a backward split throughout (ZB-H1, a schedule file), and where
    // the W pass gathers its inputs (weight_pass_gathers_input) those gathers. DualPipeV splits only
    // its last few backwards: their W events are within what its whole backwards are counted at.
    if (s.name == "zbh1" || s.name == "schedule") per_layer += weight_pass_gathers_input(s) ? 4 : 2;
    // Context parallelism: the core's cp steps and a send and receive between them, forward,
    // backward and in a full recompute (a gather instead: fewer); PyTorch's backward passes the
    // gradients on after each step as well, a send and a receive.
    if (s.cp > 1) per_layer += (s.recompute == Recompute::full ? 3 : 2) * (3.0 * s.cp - 2);
    if (pytorch_context_parallel(s)) per_layer += 2.0 * s.cp;
    if (s.name == "fsdp") {
        per_layer += hybrid_shard_ranks(c) > 0 ? 4 : s.sharding == "grad_op" ? 2 : 3;
        // FSDP2's copies: each gather's out, the gradients in.
        if (s.fsdp_impl == "fsdp2") per_layer += s.sharding == "grad_op" ? 2 : 3;
    }
    const double chunks = s.name == "dualpipev" ? 2 : is_scheduled_pipeline(s.name) ? std::max(1, s.chunks) : 1;
    // Edges (the embedding and its TP all-reduce, logits, loss, their backwards; FSDP's root
    // reduce-scatter, one more beside that all-reduce with tp > 1); sends and receives.
    // FSDP2's root copies (its gradients in; its gather's out, once a step, counted here too).
    const double per_microbatch = 7 + (s.name == "fsdp" && s.tp > 1 ? 1 : 0) + (s.pp > 1 ? 4 * chunks : 0) +
                                  (s.name == "fsdp" && s.fsdp_impl == "fsdp2" ? 2 : 0);
    // ZeRO-2 synchronises after every microbatch, the others after the last.
    const double syncs = s.zero_stage == 2 ? mb : 1;
    size.layer_events = per_layer + (layers > 0 && s.zero_stage == 2 ? buckets / layers : 0);
    const StrategyInfo* info = find_hw_strategy(s.name);
    const bool gathered = info && info->gathers_layers(s.zero_stage, s.overlap_param_gather,
                                                       static_cast<long long>(s.dp) * s.cp);
    const double gathers = gathered ? layers : 0;  // ParamGather: one a layer
    size.events = ranks * (layers * mb * per_layer + mb * per_microbatch + syncs * buckets + gathers + 16);
    if (c.stragglers.any() && options.straggler_baseline) size.events *= 2;

    // Model states: the rank with the most parameters holds its layers and the embeddings (both copies
    // when untied and pp = 1), split by tp; ZeRO shards them over its group (make_jobs, load_model_states).
    const double copy = embedding_copy_params(m);
    const double edges = (s.pp == 1 && !m.tied_embeddings ? 2 : 1) * copy;
    const double params = (most_layers(c) * m.params_per_layer() + edges) / s.tp;
    const int shard_ranks = hybrid_shard_ranks(c);
    const int zero_ranks = shard_ranks > 0 ? shard_ranks : s.dp * s.cp;
    const ModelStateBytes states = zero_model_states(params, s.zero_stage, zero_ranks, bytes_per_element(s.grad_dtype),
                                                     adam_state_bytes(m.dtype, s.optimizer_dtype, s.distributed_optimizer == "apex"),
                                                     bytes_per_element(m.dtype));
    size.model_state_bytes = states.total();
    size.model_state_grad_bytes = states.grads;
    return size;
}

void check_run_size(const Config& c, const RunOptions& options) {
    const RunSize size = estimate_run_size(c, options);
    const double limit = options.keep_trace ? kMaxKeptEvents : kMaxRunEvents;
    // Twins: the simulated ranks' events only (a trace holds every rank's events all the same).
    const std::optional<Twins> twins = options.keep_trace ? std::nullopt : simulated_twins(c, options);
    if (size.events * (twins ? twins->share(c.strategy) : 1) <= limit) return;
    const StrategyConfig& s = c.strategy;
    const double ranks = static_cast<double>(s.dp) * s.tp * s.pp * s.cp;
    std::string how;
    if (s.name == "puzzle")
        how = fmt::format("{:g} GPUs x {} layers{} x about 8 operations", ranks, c.model.spec.layers,
                          puzzle_per_batch(s.puzzle) ? fmt::format(" x {} batches", c.training.global_batch) : "");
    else
        how = fmt::format("{:g} GPUs x {:g} layers each x {} microbatches x about {:g} operations per layer and "
                          "microbatch{}",
                          ranks, static_cast<double>(c.model.spec.layers) / s.pp, c.microbatches(),
                          size.layer_events, c.stragglers.any() && options.straggler_baseline
                                                 ? ", twice for the run without stragglers"
                                                 : "");
    std::string memory;
    const double capacity = c.cluster.gpu.memory_bytes;
    if (size.model_state_bytes > 0)
        memory = fmt::format("; its model states alone would take {} per GPU of {}{}", Bytes{size.model_state_bytes},
                             Bytes{capacity},
                             size.model_state_bytes > capacity ? ": out of memory before the first step" : "");
    throw ConfigError(c.file, "",
                      fmt::format("the run would record about {:.3g} events ({}), above the limit of {:g}{}: it was "
                                  "not simulated; make model.layers, training.global_batch or the cluster smaller{}{}",
                                  size.events, how, limit,
                                  options.keep_trace ? " for a run that keeps its events for files" : "",
                                  options.keep_trace ? ", or write no trace or picture" : "", memory));
}

RunResult simulate(const Config& c, const RunOptions& options) {
    check_run_size(c, options);
    const auto t0 = std::chrono::steady_clock::now();
    RunResult out = c.strategy.name == "puzzle" ? simulate_puzzle(c, options) : simulate_transformer(c, options);
    RunReport& r = out.report;
    if (c.stragglers.any()) {
        r.stragglers = describe(c.stragglers);
        if (options.straggler_baseline) {
            Config without = c;
            without.stragglers = Stragglers{};
            r.baseline_step_time =
                simulate_transformer(without, {.keep_trace = false, .twins_once = options.twins_once}).report.step_time;
        }
    }
    r.name = c.name;
    r.strategy = c.strategy.name == "puzzle" ? "puzzle " + c.strategy.puzzle : c.strategy.name;
    const StrategyConfig& s = c.strategy;
    r.layout = {.model = c.model.spec.name,
                .cluster = c.cluster.name,
                .gpu = c.cluster.gpu.name,
                .seq = c.model.spec.seq,
                .dtype = std::string(dtype_name(c.model.spec.dtype)),
                .dp = s.dp,
                .tp = s.tp,
                .pp = s.pp,
                .cp = s.cp,
                .chunks = s.chunks,
                .zero_stage = s.zero_stage,
                .sharding = s.name == "fsdp" ? s.sharding : "",
                .sequence_parallel = s.sequence_parallel,
                .recompute = recompute_text(s),
                .fp8 = std::string(fp8_name(s.fp8)),
                .compile = s.compile};
    r.gpus = c.gpus();
    r.global_batch = c.training.global_batch;
    r.micro_batch = c.training.micro_batch;
    r.microbatches = c.microbatches();
    r.peak_flops = c.cluster.gpu.peak(c.model.spec.dtype);
    r.capacity = c.cluster.gpu.memory_bytes;
    rates(r, c);
    check_finite(r);
    r.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return out;
}

std::string describe(const Stragglers& s) {
    std::string out;
    auto add = [&](const std::string& part) { out += (out.empty() ? "" : ", ") + part; };
    // Runs of consecutive ranks with one factor print as a range.
    for (auto it = s.slowdown.begin(); it != s.slowdown.end();) {
        auto last = it;
        for (auto next = std::next(it); next != s.slowdown.end() && next->first == last->first + 1 &&
                                        next->second == it->second;
             ++next)
            last = next;
        add(last == it ? fmt::format("rank {} x{:.2f}", it->first, it->second)
                       : fmt::format("ranks {}-{} x{:.2f}", it->first, last->first, it->second));
        it = std::next(last);
    }
    if (!s.slowdown.empty() && !s.slow_memory_bound) add("memory-bound work at full speed");
    if (s.jitter.on()) add(fmt::format("jitter {} cv {:.3f} seed {}", jitter_name(s.jitter.distribution), s.jitter.cv,
                                       s.jitter.seed));
    return out;
}

std::vector<std::string> prediction_caveats(const Config& c, const Workload& work) {
    std::vector<std::string> out;
    const GpuSpec& gpu = c.cluster.gpu;
    const bool nccl_holds_sms = gpu.collectives_hold_sms();
    const StrategyConfig& s = c.strategy;
    const DType d = c.model.spec.dtype;
    if (s.flash_attention && !work.measured_attention && c.model.kind == "transformer")
        out.push_back(fmt::format("fused attention priced as two GEMMs on the roofline: {} has no measured \"{}\" curve "
                                  "(cluster.gpu.attention)",
                                  gpu.name, s.attention_kernel));
    if (work.measured_attention) {
        const AttentionKernel* k = gpu.attention.find(s.attention_kernel, c.model.spec.head_dim());
        if (k && k->head_dim != static_cast<int>(c.model.spec.head_dim()))
            out.push_back(fmt::format("attention curve measured at head dimension {}, used for {:g}", k->head_dim,
                                      c.model.spec.head_dim()));
        // Fewer query tiles a call than the curve was measured at: its tile term extrapolated.
        if (k && k->min_tiles > 0 && work.attention_tiles < k->min_tiles &&
            (k->forward.half_tiles > 0 || k->backward.half_tiles > 0))
            out.push_back(fmt::format("attention calls of {:g} query tiles (batch x heads on a GPU x ceil(seq / {:g})), "
                                      "fewer than the {:g} the \"{}\" curve was measured at: the slowdown of few tiles "
                                      "(forward x{:.2f}, backward x{:.2f}) extrapolated",
                                      work.attention_tiles, kAttentionTileRows, k->min_tiles, s.attention_kernel,
                                      k->forward.tile_factor(work.attention_tiles),
                                      k->backward.tile_factor(work.attention_tiles)));
        // A curve fitted to forward + backward sums (a published chart) serves both passes alike.
        if (k && k->from_sums)
            out.push_back(fmt::format("\"{}\" attention fitted to forward + backward times together (a published "
                                      "chart of the kernel's own benchmark): their split is assumed 1 : 2.5 (their "
                                      "FLOPs), which a recomputed forward and a pipeline's stage times rest on",
                                      s.attention_kernel));
    }
    // The early stop is PyTorch's default since 2.1, taken without asking which PyTorch runs.
    if (s.recompute == Recompute::full && !s.recompute_early_stop && recompute_early_stop(s))
        out.push_back("full recompute stops once the backward's saved tensors exist again, as PyTorch's non-reentrant "
                      "checkpoint does from 2.1 (the MLP's last GEMM not rerun): for an older PyTorch or reentrant "
                      "checkpointing, set strategy.recompute_early_stop false");
    if (s.fp8 == Fp8::torchao && !s.compile)
        out.push_back("torchao's float8 casts priced as fused kernels, as torch.compile runs them: without compile "
                      "(strategy.compile) they took 42-50 ms of a Llama 3 8B block's 76 ms on an H100, compiled 2-3 ms "
                      "(calibration/data/h100_dtsim_torch_compile.json)");
    if (gpu.tensor_clock_scale() < 1) {
        std::string beyond;
        if (gpu.power_limit_watts / gpu.tdp_watts < kPowerClockNvlWatts / kPowerClockSxmWatts)
            beyond += ", extrapolated below the lower point's share of the TDP";
        if (gpu.name.find("H100") == std::string::npos && gpu.name.find("H200") == std::string::npos)
            beyond += fmt::format(", and carried from Hopper to {}", gpu.name);
        if (gpu.power_exponent > 0)
            out.push_back(fmt::format("tensor-core throughput x{:.3f} under the {:g} W power limit on a {:g} W part: clock "
                                      "~ power^{:.3f}, fitted to GEMMs measured on a power-limited part ({}); at another "
                                      "limit, a law fitted at one",
                                      gpu.tensor_clock_scale(), gpu.power_limit_watts, gpu.tdp_watts, gpu.power_exponent,
                                      fmt::join(gpu.power_datasets, ", ")));
        else
            out.push_back(fmt::format("tensor-core throughput x{:.3f} under the {:g} W power limit on a {:g} W part: "
                                      "estimated from NVIDIA's datasheet peaks of two Hopper parts (H100 SXM at 700 W, "
                                      "H100 NVL at 400 W: clock ~ power^{:.3f}){}, not measured at this limit",
                                      gpu.tensor_clock_scale(), gpu.power_limit_watts, gpu.tdp_watts,
                                      power_clock_exponent(), beyond));
    }
    if (s.compile && s.fp8 == Fp8::te)
        out.push_back("compiled blocks with Transformer Engine's float8 linears were not measured: priced as compiled "
                      "bf16 blocks plus Transformer Engine's own casts");
    const auto& ds = gpu.gemm.datasets;
    const bool end_to_end = std::any_of(ds.begin(), ds.end(), [](const std::string& id) {
        return id.find("megatron") != std::string::npos || id.find("end_to_end") != std::string::npos;
    });
    if (ds.empty())
        out.push_back(fmt::format("GEMM model: the built-in defaults (an H100 fit); no fit for {}", gpu.name));
    else if (end_to_end && gpu.gemm.dtype_efficiency[static_cast<std::size_t>(d)] > 0)
        out.push_back(fmt::format("the {} GEMM ceiling of {} was fitted end to end to training runs, not to kernel "
                                  "measurements (cluster.gpu.gemm.datasets)",
                                  dtype_name(d), gpu.name));
    if (s.tp_overlap_given && !te_userbuffers(s))
        out.push_back(std::string("strategy.tp_comm_overlap_cfg unused: ") +
                      (s.tp_comm_overlap && s.tp > 1 && s.sequence_parallel
                           ? "this strategy's tensor parallelism is PyTorch's, whose overlap (AsyncTP) takes no "
                             "userbuffers"
                           : "no userbuffers overlap here (it needs tp_comm_overlap, sequence_parallel and tp > 1)"));
    // Tensor parallelism's collectives against what the frameworks do (calibration.md, "What the
    // Megatron-Core H100 misses point to").
    if (te_userbuffers(s))
        out.push_back(gpu.sms > 0
                          ? fmt::format("tensor-parallel collectives overlapped with their GEMMs by Transformer "
                                        "Engine's userbuffers: each takes the SMs strategy.tp_comm_overlap_cfg gives "
                                        "it{} (of {}), for as long as NCCL would take; not measured at kernel level: "
                                        "the userbuffers kernels' speed on those SMs, HBM sharing; published runs with "
                                        "this overlap ran slower than predicted (docs/calibration.md)",
                                        s.tp_overlap_given ? "" : " (none given: Transformer Engine 2's defaults)",
                                        gpu.sms)
                          : std::string("tensor-parallel collectives overlapped with their GEMMs by Transformer "
                                        "Engine's userbuffers at no cost: no SM count to take from (cluster.gpu.sms)"));
    else if (s.tp > 1 && s.tp_comm_overlap)
        out.push_back("tensor-parallel collectives overlapped with their GEMMs (AsyncTP) at no cost: copies by the "
                      "copy engines, no contention modelled; not measured at kernel level");
    else if (tp_async_backward(s))
        out.push_back(std::string("the backward's tensor-parallel ") +
                      (s.sequence_parallel ? "re-gathers and reduce-scatters" : "all-reduces") + " run beside the GEMMs" +
                      (nccl_holds_sms ? " on the SMs their NCCL kernels leave them (GEMMs lose more on an H200: "
                                   "docs/hardware-model.md)"
                                 : " at no cost to them") +
                      (s.name == "schedule" ? " (where the schedule's backward is whole, not split into input and weight gradients)"
                                            : ""));
    // What the cluster config says its own figures rest on least (Cluster::caveats).
    out.insert(out.end(), c.cluster.caveats.begin(), c.cluster.caveats.end());
    // PyTorch's context-parallel ring (LayerSplit::pytorch_context_parallel).
    if (work.split.pytorch_context_parallel)
        out.push_back(std::string("context parallelism by PyTorch's ring: its fp32 merges and gradient sums counted from "
                                  "its code") +
                      (s.compile ? ", as Inductor would fuse them (not measured)" : "") +
                      "; the published torchtitan runs with it ran slower than predicted, the more so at cp 4 and 8 "
                      "(docs/calibration.md)");
    // What collectives beside compute take from it (Device::hold_sms).
    if (s.dp > 1 || s.cp > 1 || tp_async_backward(s)) {
        if (nccl_holds_sms)
            out.push_back(fmt::format("compute beside a collective runs on the SMs its NCCL kernel leaves (of {}, one "
                                      "per channel): a Llama 3 8B block beside 16-24 SMs held on an H200 lost about that "
                                      "share, GEMMs alone more (docs/hardware-model.md); not modelled: that loss, HBM "
                                      "and cache sharing",
                                      gpu.sms));
        else
            out.push_back(std::string("NCCL's collectives beside compute take nothing from it (") +
                          (gpu.sms > 0 ? "cluster.gpu.collectives_take_sms false" : "no SM count: cluster.gpu.sms") + ")");
    }
    if (c.cluster.nodes > 1) {
        int measured = 0;
        for (const auto& f : c.cluster.inter_node.fits) measured = std::max(measured, f.nodes);
        if (measured == 0)
            out.push_back(fmt::format("collectives across nodes from per-link figures only: no measured curve on {}",
                                      c.cluster.inter_node.name));
        else if (c.cluster.nodes > measured)
            out.push_back(fmt::format("collective curves measured on at most {} nodes, the cluster has {}: a group over "
                                      "more nodes rests on the per-link model",
                                      measured, c.cluster.nodes));
    }
    // Kernels priced by timed bytes that are still the H100's on another GPU (EagerKernelBytes).
    if (c.model.kind == "transformer" && gpu.name.find("H100") == std::string::npos) {
        const EagerKernelBytes h100;
        std::vector<std::string> kinds;
        for (const EagerKernel kind : timed_kernels_of(c.model.spec, work.split)) {
            const PassBytes here = timed_figures(gpu.eager_kernels, kind), there = timed_figures(h100, kind);
            if (here.forward != there.forward || here.backward != there.backward) continue;
            kinds.emplace_back(timed_name(kind));
        }
        if (!kinds.empty())
            out.push_back(fmt::format(
                "{} priced by the H100's timed bytes at {}'s streaming rate: none timed on {} (cluster.gpu.eager_kernels, "
                "which dtsim calibrate fits to a kernel file); on an H200 its own were 3-20 % higher",
                kinds.size() == 1 ? kinds[0]
                                  : fmt::format("{} and {}", fmt::join(kinds.begin(), kinds.end() - 1, ", "), kinds.back()),
                gpu.name, gpu.name));
    }
    return out;
}

namespace {

nlohmann::json layout_json(const RunLayout& l) {
    nlohmann::json j{{"model", l.model},
                     {"cluster", l.cluster},
                     {"gpu", l.gpu},
                     {"seq", l.seq},
                     {"dtype", l.dtype},
                     {"dp", l.dp},
                     {"tp", l.tp},
                     {"pp", l.pp},
                     {"cp", l.cp},
                     {"chunks", l.chunks},
                     {"zero_stage", l.zero_stage},
                     {"sequence_parallel", l.sequence_parallel},
                     {"recompute", l.recompute},
                     {"fp8", l.fp8},
                     {"compile", l.compile}};
    if (!l.sharding.empty()) j["sharding"] = l.sharding;
    return j;
}

}  // namespace

nlohmann::json to_json(const RunReport& r) {
    auto verdict = [](const MemoryVerdict& v) {
        nlohmann::json j{{"rank", v.rank}, {"time_s", v.time}, {"op", v.op}, {"bytes", v.bytes}, {"by_kind", nullptr}};
        if (v.by_kind) {
            j["by_kind"] = nlohmann::json::object();
            for (std::size_t k = 0; k < kMemoryKinds; ++k)
                j["by_kind"][std::string(kind_name(static_cast<MemoryKind>(k)))] = (*v.by_kind)[k];
        }
        return j;
    };
    nlohmann::json j{{"name", r.name},
                     {"strategy", r.strategy},
                     {"layout", layout_json(r.layout)},
                     {"gpus", r.gpus},
                     {"global_batch", r.global_batch},
                     {"micro_batch", r.micro_batch},
                     {"microbatches", r.microbatches},
                     {"step_time_s", r.step_time},
                     {"mfu", r.mfu},
                     {"hfu", r.hfu},
                     {"tflops_per_gpu", r.tflops_per_gpu},
                     {"tokens_per_s", r.tokens_per_second},
                     {"model_flops", r.model_flops},
                     {"hardware_flops", r.hardware_flops},
                     {"time_split_s", {{"compute", r.split.compute}, {"exposed_comm", r.split.comm}, {"idle", r.split.idle}}},
                     {"memory",
                      {{"capacity_bytes", r.capacity}, {"peak", verdict(r.peak)}, {"oom", nullptr}, {"tight", r.tight_memory}}},
                     {"events", r.events},
                     {"simulated_ranks", r.simulated_ranks},
                     {"wall_s", r.wall_seconds}};
    if (r.oom) j["memory"]["oom"] = verdict(*r.oom);
    if (!r.rank_splits.empty())
        j["critical_path"] = {{"rank", r.critical_rank},
                              {"share", r.critical_share},
                              {"transfers_share", r.critical_transfers_share}};
    if (!r.stragglers.empty()) {
        j["stragglers"] = {{"description", r.stragglers}};
        if (r.baseline_step_time) {
            j["stragglers"]["baseline_step_time_s"] = *r.baseline_step_time;
            j["stragglers"]["stretch"] = r.step_time / *r.baseline_step_time - 1;
        }
    }
    j["caveats"] = r.caveats;
    if (r.correct) j["correct"] = *r.correct;
    if (!r.check_error.empty()) j["check_error"] = r.check_error;
    return j;
}

}  // namespace dtsim::hw
