#include "dtsim/hw/puzzle_costs.hpp"

#include "dtsim/hw/collective_cost.hpp"
#include "dtsim/hw/transformer.hpp"

#include <numeric>

namespace dtsim::hw {

namespace {
double value(puzzle::Size s) { return static_cast<double>(s.num) / static_cast<double>(s.den); }
}  // namespace

HardwareCosts::HardwareCosts(Cluster cluster, int ranks, int hidden, int seq, DType dtype)
    : cluster_(std::move(cluster)), ranks_(ranks), hidden_(hidden), seq_(seq), dtype_(dtype) {
    std::vector<int> members(static_cast<std::size_t>(ranks));
    std::iota(members.begin(), members.end(), 0);
    world_ = GroupShape::of(cluster_, members);
}

double HardwareCosts::forward_flops_per_batch() const {
    return 2.0 * static_cast<double>(seq_) * static_cast<double>(hidden_) * static_cast<double>(hidden_);
}

double HardwareCosts::forward(int, const IdSet& batches) const {
    const double h = static_cast<double>(hidden_);
    return cluster_.gpu.gemm_seconds(static_cast<double>(batches.size() * seq_), h, h, dtype_);
}

double HardwareCosts::backward(int layer, const IdSet& batches) const { return 2 * forward(layer, batches); }

double HardwareCosts::loss(const IdSet& batches) const {
    return cluster_.gpu.memory_seconds(2.0 * static_cast<double>(activation(batches.size()).num));
}

double HardwareCosts::update(int, std::int64_t shards, int total) const {
    const double params = static_cast<double>(hidden_ * hidden_) * static_cast<double>(shards) / total;
    return cluster_.gpu.memory_seconds(params * adam_bytes_per_param(cluster_.gpu.eager_kernels, 2));
}

double HardwareCosts::collective(OpCode op, int, puzzle::Size size, int ranks) const {
    GroupShape g = world_;
    if (ranks != ranks_) {
        std::vector<int> members(static_cast<std::size_t>(ranks));
        std::iota(members.begin(), members.end(), 0);
        g = GroupShape::of(cluster_, members);
    }
    double bytes = value(size);
    Collective c = Collective::all_reduce;
    if (op == dtsim::ops::allgather) {
        c = Collective::all_gather;
        bytes *= ranks;  // nccl-tests counts the gathered array
    } else if (op == dtsim::ops::scatterreduce) {
        c = Collective::reduce_scatter;
    }
    return collective_cost(cluster_, c, bytes, g).seconds;
}

double HardwareCosts::pass(puzzle::Size size) const {
    return p2p_cost(cluster_, value(size), ranks_ <= cluster_.gpus_per_node).seconds;
}

puzzle::Size HardwareCosts::weight(std::int64_t shards, int total) const {
    return {shards * hidden_ * hidden_ * 2, total};
}
puzzle::Size HardwareCosts::opt_state(std::int64_t shards, int total) const {
    return {shards * hidden_ * hidden_ * 12, total};
}
puzzle::Size HardwareCosts::weight_grad(std::int64_t shards, int total) const { return weight(shards, total); }
puzzle::Size HardwareCosts::activation(std::int64_t batches) const {
    return {batches * seq_ * hidden_ * static_cast<std::int64_t>(bytes_per_element(dtype_)), 1};
}
puzzle::Size HardwareCosts::activation_grad(std::int64_t batches) const { return activation(batches); }

}  // namespace dtsim::hw
