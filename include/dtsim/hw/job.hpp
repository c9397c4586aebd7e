// What a hardware-world strategy is given for its rank: the configuration,
// the priced workload, this rank's place in the dp x tp x pp grid and the
// groups it communicates over.
//
// Ranks follow Megatron-LM's order (tensor-parallel innermost, then data,
// then pipeline: rank = (stage * dp + dp_rank) * tp + tp_rank), so a
// tensor-parallel group of up to gpus_per_node ranks sits inside one node.
#pragma once

#include "dtsim/hw/config.hpp"
#include "dtsim/hw/group.hpp"
#include "dtsim/hw/workload.hpp"

namespace dtsim::hw {

struct Job {
    const Config* config = nullptr;
    const Workload* work = nullptr;
    int dp = 1, tp = 1, pp = 1;
    int microbatches = 1;
    int dp_rank = 0, tp_rank = 0, stage = 0;
    Group* dp_group = nullptr;         // same stage and tp_rank, every dp_rank (null when dp = 1)
    Group* tp_group = nullptr;         // same stage and dp_rank (null when tp = 1)
    Group* embedding_group = nullptr;  // first and last stage of this pipeline (tied embeddings, pp > 1)
    int prev = -1, next = -1;          // neighbouring stages of this pipeline, -1 at the ends
    int first_layer = 0, layers = 0;   // this stage's layers

    [[nodiscard]] const StrategyConfig& strategy() const { return config->strategy; }
    [[nodiscard]] bool first_stage() const { return stage == 0; }
    [[nodiscard]] bool last_stage() const { return stage == pp - 1; }
    // Parameters this GPU holds before ZeRO: its layers and its share of the embeddings.
    [[nodiscard]] double params() const;
};

class World;
// The grid's groups on `world` and every rank's job.
std::vector<Job> make_jobs(World& world, const Config& config, const Workload& work);

}  // namespace dtsim::hw
