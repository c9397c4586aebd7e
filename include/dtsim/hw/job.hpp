// What a hardware-world strategy is given for its rank: the configuration,
// the priced workload, this rank's place in the dp x tp x pp grid and the
// groups it communicates over.
//
// Ranks follow Megatron-LM's order (tensor-parallel innermost, then context,
// data, pipeline: rank = ((stage * dp + dp_rank) * cp + cp_rank) * tp + tp_rank),
// so a tensor-parallel group of up to gpus_per_node ranks sits inside one node.
#pragma once

#include "dtsim/hw/config.hpp"
#include "dtsim/hw/group.hpp"
#include "dtsim/hw/workload.hpp"
#include "dtsim/sched/schedule.hpp"

#include <cstddef>
#include <memory>
#include <vector>

namespace dtsim::hw {

// A pipeline schedule from dtsim::sched run in this world (strategies
// "interleaved", "zbh1", "bfs", "dualpipev", "schedule"): its stages, which
// pipeline rank owns each, and the layers of each stage (consecutive, in model
// order: layers / stages each, or as strategy.stage_layers and Megatron-LM's
// first/last shorthand split them). Shared by every rank of the job.
struct PipelinePlan {
    sched::Schedule schedule;      // compute-only (a lowered one has its SEND/RECV stripped)
    std::vector<int> owner;        // pipeline rank of each stage
    int stages = 1;
    std::vector<int> first_layer;  // of each stage
    std::vector<int> layers;       // of each stage
    // Sets first_layer and layers from the layers of each stage.
    void split(const std::vector<int>& stage_layers);
};

class ParamGather;

struct Job {
    const Config* config = nullptr;
    const Workload* work = nullptr;
    int dp = 1, tp = 1, pp = 1, cp = 1;
    // The data-parallel replicas and tensor-parallel ranks the world simulates: dp and tp, or fewer
    // where ranks stand for their twins (make_jobs' Twins); rank numbers in the world follow them.
    int simulated_dp = 1, simulated_tp = 1;
    int microbatches = 1;
    int dp_rank = 0, tp_rank = 0, stage = 0, cp_rank = 0;
    int simulated_dp_rank = 0;  // this replica's place among the simulated ones (dp_rank without twins)
    // Same stage and tp_rank, every dp_rank and cp_rank: the ranks that reduce gradients and shard
    // model states together (null when dp x cp = 1).
    Group* dp_group = nullptr;
    Group* tp_group = nullptr;         // same stage, dp_rank and cp_rank (null when tp = 1)
    Group* cp_group = nullptr;         // same stage, dp_rank and tp_rank (null when cp = 1)
    int cp_prev = -1, cp_next = -1;    // the neighbours in the context-parallel ring
    Group* embedding_group = nullptr;  // first and last stage of this pipeline (tied embeddings, pp > 1)
    int prev = -1, next = -1;          // neighbouring stages of this pipeline, -1 at the ends
    // This stage's layers; for a plan, all of this rank's chunks: `layers` in all, the first of
    // its first chunk at first_layer (its chunks need not be adjacent: PipelinePlan has each).
    int first_layer = 0, layers = 0;
    // This rank holds the input embedding / the output layer (with a plan, the
    // owner of the first / last stage; a rank can hold both, as DualPipeV's rank 0).
    bool embedding_here = false, logits_here = false;
    // The output layer has weights of its own: untied, or tied but on another rank.
    bool separate_output = false;
    const PipelinePlan* plan = nullptr;  // schedule-driven pipelines only
    // The backward's tensor-parallel collectives beside the first linear's GEMMs (tp_async_backward
    // in strategies.hpp, resolved once for the job).
    bool tp_async_backward = false;
    // A weight-gradient pass gathers the column-parallel linears' inputs first
    // (weight_pass_gathers_input in strategies.hpp, resolved once for the job).
    bool weight_pass_gathers = false;
    // Hybrid sharding (FSDP HYBRID_SHARD): ZeRO inside shard_group (the node),
    // gradients all-reduced across replica_group; null otherwise.
    Group* shard_group = nullptr;
    Group* replica_group = nullptr;
    // The weights' all-gather overlapped with the forward (strategy.overlap_param_gather with
    // ZeRO-1/2); null otherwise. Owned by the caller of the strategy, one per rank.
    ParamGather* param_gather = nullptr;

    [[nodiscard]] const StrategyConfig& strategy() const { return config->strategy; }
    [[nodiscard]] bool first_stage() const { return stage == 0; }
    [[nodiscard]] bool last_stage() const { return stage == pp - 1; }
    // Ranks that shard the model states (the data-parallel group, or the shard group when hybrid).
    [[nodiscard]] Group* zero_group() const { return shard_group ? shard_group : dp_group; }
    [[nodiscard]] int zero_ranks() const;
    // The global rank holding pipeline stage `s` of this rank's pipeline (plans only).
    [[nodiscard]] int rank_of_stage(int s) const;
    // Parameters this GPU holds before ZeRO: its layers and its share of the embeddings.
    [[nodiscard]] double params() const;
};

class World;
// The ranks a run simulates where twins stand for the others: for every pipeline stage and
// context-parallel rank, the data-parallel replicas in `replicas` (ascending) and of each the first
// `tp` tensor-parallel ranks (1, or all of them). Every GPU of a replica not listed is the twin of
// its place in replicas[stand_in]; with tp = 1 a replica's tensor-parallel ranks are twins of its
// rank 0. All of them run the same program at the same times (run.hpp, simulated_twins).
struct Twins {
    std::vector<int> replicas{0};
    int tp = 1;
    std::size_t stand_in = 0;
    // Every replica and tensor-parallel rank of a dp x tp grid (no twins).
    static Twins whole(int dp, int tp);
    // Replica d's place in `replicas`, or -1 where it is not simulated.
    [[nodiscard]] int place(int d) const;
    // The share of the grid's ranks simulated.
    [[nodiscard]] double share(const StrategyConfig& s) const {
        return static_cast<double>(replicas.size()) * tp / (static_cast<double>(s.dp) * s.tp);
    }
};
// The grid's groups on `world` and every rank's job.
// `plan` (kept alive by the caller) is given for schedule-driven pipelines.
// `twins`: the world holds the twins' simulated ranks only (at their GPUs, in the grid's order).
// Context-parallel and embedding groups and the pipeline's neighbours are as in the whole job; a
// tensor- or data-parallel group (or hybrid sharding's shard and replica group) keeps its simulated
// members but has the size and shape of the whole group, so its collectives are priced as the whole
// group's, on its simulated members' ports (each GPU has its own: they carry what their twins'
// carry).
std::vector<Job> make_jobs(World& world, const Config& config, const Workload& work,
                           const PipelinePlan* plan = nullptr, const Twins* twins = nullptr);
// The cluster's GPU of the rank at (stage, dp_rank, cp_rank, tp_rank) of `s`'s grid, in Megatron-LM's
// order (tp innermost, then cp, dp, pp): make_jobs' placement of the whole job.
int gpu_of(const StrategyConfig& s, int stage, int dp_rank, int cp_rank, int tp_rank);
// The data-parallel rank (replica) of the cluster's GPU `gpu` in that placement.
int replica_of(const StrategyConfig& s, int gpu);
// FSDP's HYBRID_SHARD shards the model states over the data-parallel ranks of one node
// (gpus_per_node / tp of them, at most dp) and all-reduces across nodes, but only where the
// data-parallel ranks make whole nodes of them, two or more: dp > that and a multiple of it.
// Otherwise (or with another strategy or sharding) the run is FULL_SHARD's, step for step.
// The ranks of a shard group where hybrid sharding is in effect so; 0 otherwise.
int hybrid_shard_ranks(const Config& config);
// One copy of the embedding's parameters: the input embedding's, or the output layer's (the same
// size; TransformerSpec::embedding_params counts both when they are untied).
double embedding_copy_params(const TransformerSpec& m);
// With twins: the cluster's GPUs the world holds, in its rank order (World's placement), and the
// world's rank that stands for the cluster's GPU `gpu`.
std::vector<int> twin_gpus(const Config& config, const Twins& twins);
int twin_of(const Config& config, const Twins& twins, int gpu);

}  // namespace dtsim::hw
