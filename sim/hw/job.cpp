#include "dtsim/hw/job.hpp"
#include "dtsim/hw/world.hpp"

#include <fmt/format.h>

namespace dtsim::hw {

double Job::params() const {
    const double layers_params = layers * work->layer.params;
    double edges = 0;
    if (first_stage()) edges += work->edge.embedding_params;
    if (last_stage() && (pp > 1 || !work->model.tied_embeddings)) edges += work->edge.embedding_params;
    return layers_params + edges;
}

std::vector<Job> make_jobs(World& world, const Config& config, const Workload& work) {
    const int dp = config.strategy.dp, tp = config.strategy.tp, pp = config.strategy.pp;
    auto rank_of = [&](int stage, int d, int t) { return (stage * dp + d) * tp + t; };
    std::vector<Job> jobs(static_cast<std::size_t>(dp * tp * pp));
    const int per_stage = work.model.layers / pp;
    for (int s = 0; s < pp; ++s)
        for (int d = 0; d < dp; ++d)
            for (int t = 0; t < tp; ++t) {
                Job& j = jobs[static_cast<std::size_t>(rank_of(s, d, t))];
                j.config = &config;
                j.work = &work;
                j.dp = dp;
                j.tp = tp;
                j.pp = pp;
                j.microbatches = config.microbatches();
                j.dp_rank = d;
                j.tp_rank = t;
                j.stage = s;
                j.prev = s > 0 ? rank_of(s - 1, d, t) : -1;
                j.next = s + 1 < pp ? rank_of(s + 1, d, t) : -1;
                j.first_layer = s * per_stage;
                j.layers = per_stage;
            }
    if (tp > 1)
        for (int s = 0; s < pp; ++s)
            for (int d = 0; d < dp; ++d) {
                std::vector<int> members;
                for (int t = 0; t < tp; ++t) members.push_back(rank_of(s, d, t));
                Group& g = world.group(members, fmt::format("tp[stage {}, dp {}]", s, d));
                for (int r : members) jobs[static_cast<std::size_t>(r)].tp_group = &g;
            }
    if (dp > 1)
        for (int s = 0; s < pp; ++s)
            for (int t = 0; t < tp; ++t) {
                std::vector<int> members;
                for (int d = 0; d < dp; ++d) members.push_back(rank_of(s, d, t));
                Group& g = world.group(members, fmt::format("dp[stage {}, tp {}]", s, t));
                for (int r : members) jobs[static_cast<std::size_t>(r)].dp_group = &g;
            }
    if (pp > 1 && work.model.tied_embeddings && work.model.vocab > 0)
        for (int d = 0; d < dp; ++d)
            for (int t = 0; t < tp; ++t) {
                const int first = rank_of(0, d, t), last = rank_of(pp - 1, d, t);
                Group& g = world.group({first, last}, fmt::format("embedding[dp {}, tp {}]", d, t));
                jobs[static_cast<std::size_t>(first)].embedding_group = &g;
                jobs[static_cast<std::size_t>(last)].embedding_group = &g;
            }
    return jobs;
}

}  // namespace dtsim::hw
