#include "dtsim/hw/job.hpp"
#include "dtsim/hw/strategies.hpp"
#include "dtsim/hw/world.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <stdexcept>
#include <string>

namespace dtsim::hw {

double Job::params() const {
    const double layers_params = layers * work->layer.params;
    double edges = 0;
    if (embedding_here) edges += work->edge.embedding_params;
    if (logits_here && separate_output) edges += work->edge.embedding_params;
    return layers_params + edges;
}

int Job::zero_ranks() const {
    const Group* g = zero_group();
    return g ? g->size() : 1;
}

void PipelinePlan::split(const std::vector<int>& stage_layers) {
    first_layer.clear();
    layers = stage_layers;
    int next = 0;
    for (int n : stage_layers) {
        first_layer.push_back(next);
        next += n;
    }
}

int Job::rank_of_stage(int s) const {
    return ((plan->owner[static_cast<std::size_t>(s)] * simulated_dp + simulated_dp_rank) * cp + cp_rank) * simulated_tp +
           tp_rank;
}

int gpu_of(const StrategyConfig& s, int stage, int dp_rank, int cp_rank, int tp_rank) {
    return ((stage * s.dp + dp_rank) * s.cp + cp_rank) * s.tp + tp_rank;
}

int replica_of(const StrategyConfig& s, int gpu) { return gpu / (s.cp * s.tp) % s.dp; }

int hybrid_shard_ranks(const Config& config) {
    const StrategyConfig& s = config.strategy;
    if (s.name != "fsdp" || s.sharding != "hybrid") return 0;
    const int per_node = std::max(1, std::min(s.dp, config.cluster.gpus_per_node / s.tp));
    return s.dp > per_node && s.dp % per_node == 0 ? per_node : 0;
}

double embedding_copy_params(const TransformerSpec& m) {
    return m.tied_embeddings ? m.embedding_params() : m.embedding_params() / 2;
}

Twins Twins::whole(int dp, int tp) {
    Twins all{std::vector<int>(static_cast<std::size_t>(dp)), tp, 0};
    for (int d = 0; d < dp; ++d) all.replicas[static_cast<std::size_t>(d)] = d;
    return all;
}

int Twins::place(int d) const {
    const auto at = std::lower_bound(replicas.begin(), replicas.end(), d);
    return at != replicas.end() && *at == d ? static_cast<int>(at - replicas.begin()) : -1;
}

std::vector<int> twin_gpus(const Config& config, const Twins& twins) {
    const StrategyConfig& s = config.strategy;
    std::vector<int> gpus;
    for (int stage = 0; stage < s.pp; ++stage)
        for (int d : twins.replicas)
            for (int c = 0; c < s.cp; ++c)
                for (int t = 0; t < twins.tp; ++t) gpus.push_back(gpu_of(s, stage, d, c, t));
    return gpus;
}

int twin_of(const Config& config, const Twins& twins, int gpu) {
    const StrategyConfig& s = config.strategy;
    const int stage = gpu / (s.dp * s.cp * s.tp), d = replica_of(s, gpu), c = gpu / s.tp % s.cp;
    const int t = twins.tp == s.tp ? gpu % s.tp : 0;
    const int i = twins.place(d) >= 0 ? twins.place(d) : static_cast<int>(twins.stand_in);
    return ((stage * static_cast<int>(twins.replicas.size()) + i) * s.cp + c) * twins.tp + t;
}

std::vector<Job> make_jobs(World& world, const Config& config, const Workload& work, const PipelinePlan* plan,
                           const Twins* twins) {
    const int dp = config.strategy.dp, tp = config.strategy.tp, pp = config.strategy.pp, cp = config.strategy.cp;
    // Hybrid sharding in effect: the ranks of a node's shard group (0: none, full sharding).
    const int per_node = hybrid_shard_ranks(config);
    // The replicas simulated (every one without twins) and how many tensor-parallel ranks of each.
    const Twins simulated = twins ? *twins : Twins::whole(dp, tp);
    const std::vector<int>& replicas = simulated.replicas;
    const int sim_dp = static_cast<int>(replicas.size()), sim_tp = simulated.tp;
    if (sim_dp < 1 || sim_dp > dp || std::adjacent_find(replicas.begin(), replicas.end(), std::greater_equal<>()) !=
                                         replicas.end() || replicas.front() < 0 ||
        replicas.back() >= dp || (sim_tp != 1 && sim_tp != tp) || simulated.stand_in >= replicas.size())
        throw std::logic_error("make_jobs: twins outside the grid");
    // Megatron-LM's order with context parallelism: tp innermost, then cp, dp, pp; the world's
    // ranks (rank_of, over the simulated replicas' places i) and the cluster's GPUs (gpu_of) alike.
    auto rank_of = [&](int stage, int i, int c, int t) { return ((stage * sim_dp + i) * cp + c) * sim_tp + t; };
    auto gpu_at = [&](int stage, int d, int c, int t) { return gpu_of(config.strategy, stage, d, c, t); };
    std::vector<Job> jobs(static_cast<std::size_t>(sim_dp * cp * sim_tp * pp));
    // The layers of each pipeline rank: its stage, or its stages of the plan.
    std::vector<int> first_of(static_cast<std::size_t>(pp), 0), count_of(static_cast<std::size_t>(pp), 0);
    if (plan) {
        for (int s = plan->stages - 1; s >= 0; --s) {
            const auto k = static_cast<std::size_t>(s);
            const auto r = static_cast<std::size_t>(plan->owner[k]);
            first_of[r] = plan->first_layer[k];
            count_of[r] += plan->layers[k];
        }
    } else {
        const std::vector<int> split = stage_layers_of(config, pp);
        for (int s = 1; s < pp; ++s)
            first_of[static_cast<std::size_t>(s)] =
                first_of[static_cast<std::size_t>(s - 1)] + split[static_cast<std::size_t>(s - 1)];
        count_of = split;
    }
    // Which pipeline ranks hold the model's edges.
    const int embedding_rank = plan ? plan->owner.front() : 0;
    const int logits_rank = plan ? plan->owner.back() : pp - 1;
    const bool separate_output = !work.model.tied_embeddings || embedding_rank != logits_rank;
    const bool async_backward = tp_async_backward(config.strategy);
    const bool weight_gathers = weight_pass_gathers_input(config.strategy);
    for (int s = 0; s < pp; ++s)
        for (int d = 0; d < sim_dp; ++d)
            for (int c = 0; c < cp; ++c)
            for (int t = 0; t < sim_tp; ++t) {
                Job& j = jobs[static_cast<std::size_t>(rank_of(s, d, c, t))];
                j.simulated_dp_rank = d;
                j.config = &config;
                j.work = &work;
                j.dp = dp;
                j.simulated_dp = sim_dp;
                j.simulated_tp = sim_tp;
                j.cp = cp;
                j.tp = tp;
                j.pp = pp;
                j.microbatches = config.microbatches();
                j.dp_rank = replicas[static_cast<std::size_t>(d)];
                j.tp_rank = t;
                j.cp_rank = c;
                j.cp_next = rank_of(s, d, (c + 1) % cp, t);
                j.cp_prev = rank_of(s, d, (c + cp - 1) % cp, t);
                j.stage = s;
                j.prev = s > 0 ? rank_of(s - 1, d, c, t) : -1;
                j.next = s + 1 < pp ? rank_of(s + 1, d, c, t) : -1;
                j.first_layer = first_of[static_cast<std::size_t>(s)];
                j.layers = count_of[static_cast<std::size_t>(s)];
                j.embedding_here = s == embedding_rank;
                j.logits_here = s == logits_rank;
                j.separate_output = separate_output;
                j.plan = plan;
                j.tp_async_backward = async_backward;
                j.weight_pass_gathers = weight_gathers;
            }
    // Group names say cp only where there is context parallelism.
    const auto cp_name = [&](int c) { return cp > 1 ? fmt::format(", cp {}", c) : std::string(); };
    if (tp > 1)
        for (int s = 0; s < pp; ++s)
            for (int d = 0; d < sim_dp; ++d)
                for (int c = 0; c < cp; ++c) {
                    std::vector<int> members, whole;
                    const int replica = replicas[static_cast<std::size_t>(d)];
                    for (int t = 0; t < tp; ++t) {
                        if (t < sim_tp) members.push_back(rank_of(s, d, c, t));
                        if (sim_tp < tp) whole.push_back(gpu_at(s, replica, c, t));
                    }
                    Group& g = world.group(members, fmt::format("tp[stage {}, dp {}{}]", s, replica, cp_name(c)),
                                           std::move(whole));
                    for (int r : members) jobs[static_cast<std::size_t>(r)].tp_group = &g;
                }
    // Gradients and sharded states span the context-parallel ranks too (Megatron-LM's data-parallel
    // group with context parallelism; torchtitan's FSDP over dp x cp): every one of them holds the
    // whole weights and computes gradients from its part of each sequence.
    if (dp * cp > 1)
        for (int s = 0; s < pp; ++s)
            for (int t = 0; t < sim_tp; ++t) {
                std::vector<int> members, whole;
                for (int d = 0; d < dp; ++d)
                    for (int c = 0; c < cp; ++c) {
                        if (simulated.place(d) >= 0) members.push_back(rank_of(s, simulated.place(d), c, t));
                        if (sim_dp < dp) whole.push_back(gpu_at(s, d, c, t));
                    }
                Group& g = world.group(members, fmt::format("{}[stage {}, tp {}]", cp > 1 ? "dp x cp" : "dp", s, t),
                                       std::move(whole));
                for (int r : members) jobs[static_cast<std::size_t>(r)].dp_group = &g;
            }
    if (cp > 1)
        for (int s = 0; s < pp; ++s)
            for (int d = 0; d < sim_dp; ++d)
                for (int t = 0; t < sim_tp; ++t) {
                    std::vector<int> members;
                    for (int c = 0; c < cp; ++c) members.push_back(rank_of(s, d, c, t));
                    Group& g = world.group(
                        members, fmt::format("cp[stage {}, dp {}, tp {}]", s, replicas[static_cast<std::size_t>(d)], t));
                    for (int r : members) jobs[static_cast<std::size_t>(r)].cp_group = &g;
                }
    // HYBRID_SHARD: the data-parallel ranks of one node shard the model states;
    // the same shard position across nodes forms a replica group.
    if (per_node > 0)
        for (int s = 0; s < pp; ++s)
            for (int t = 0; t < sim_tp; ++t) {
                // A group of the replicas `of` (every one, in order) with its simulated members.
                const auto hybrid_group = [&](const std::vector<int>& of, const std::string& name, Group* Job::*slot) {
                    std::vector<int> members, whole;
                    for (int d : of) {
                        if (simulated.place(d) >= 0) members.push_back(rank_of(s, simulated.place(d), 0, t));
                        if (sim_dp < dp) whole.push_back(gpu_at(s, d, 0, t));
                    }
                    if (members.empty()) return;
                    Group& g = world.group(members, name, std::move(whole));
                    for (int r : members) jobs[static_cast<std::size_t>(r)].*slot = &g;
                };
                for (int node = 0; node < dp / per_node; ++node) {
                    std::vector<int> of;
                    for (int i = 0; i < per_node; ++i) of.push_back(node * per_node + i);
                    hybrid_group(of, fmt::format("shard[stage {}, tp {}, node {}]", s, t, node), &Job::shard_group);
                }
                for (int i = 0; i < per_node; ++i) {
                    std::vector<int> of;
                    for (int node = 0; node < dp / per_node; ++node) of.push_back(node * per_node + i);
                    hybrid_group(of, fmt::format("replica[stage {}, tp {}, shard {}]", s, t, i), &Job::replica_group);
                }
            }
    if (pp > 1 && work.model.tied_embeddings && work.model.vocab > 0 && embedding_rank != logits_rank)
        for (int d = 0; d < sim_dp; ++d)
            for (int c = 0; c < cp; ++c)
            for (int t = 0; t < sim_tp; ++t) {
                const int first = rank_of(embedding_rank, d, c, t), last = rank_of(logits_rank, d, c, t);
                Group& g = world.group({first, last}, fmt::format("embedding[dp {}{}, tp {}]",
                                                                  replicas[static_cast<std::size_t>(d)], cp_name(c), t));
                jobs[static_cast<std::size_t>(first)].embedding_group = &g;
                jobs[static_cast<std::size_t>(last)].embedding_group = &g;
            }
    return jobs;
}

}  // namespace dtsim::hw
