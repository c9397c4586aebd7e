// The puzzle world's model priced on real hardware, so that the eight puzzle
// strategies run unchanged in seconds and bytes: a layer is a hidden x hidden
// weight (512 x 512 in the puzzles), a batch is seq tokens (256) of
// activations, and
//   forward   one GEMM (batches x seq) x hidden x hidden on the GPU's GEMM model
//   backward  two such GEMMs (input and weight gradients)
//   loss      memory-bound pass over the batches' activations
//   update    Adam over the layer's shard, adam_bytes_per_param(2) bytes per parameter (28 x the
//             GPU's timed factor for the fused step, cluster.gpu.eager_kernels.adam)
//   sizes     weights and weight grads 2 bytes per parameter, optimizer state 12,
//             activations and their grads 2 bytes per element
//   allreduce / scatterreduce  ring/tree/NVLS cost of the value over all ranks;
//   allgather of a 1/n shard   the cost of gathering the whole (n x shard) array;
//   pass      send/recv of the value (inside a node when all ranks fit in one).
#pragma once

#include "dtsim/hw/topology.hpp"
#include "dtsim/puzzle/cost_model.hpp"

namespace dtsim::hw {

class HardwareCosts final : public puzzle::CostModel {
public:
    HardwareCosts(Cluster cluster, int ranks, int hidden = 512, int seq = 256, DType dtype = DType::bf16);

    [[nodiscard]] std::string time_unit() const override { return "s"; }
    [[nodiscard]] std::string memory_unit() const override { return "byte"; }
    [[nodiscard]] double forward(int layer, const IdSet& batches) const override;
    [[nodiscard]] double backward(int layer, const IdSet& batches) const override;
    [[nodiscard]] double loss(const IdSet& batches) const override;
    [[nodiscard]] double update(int layer, std::int64_t shards, int total) const override;
    [[nodiscard]] double collective(OpCode op, int layer, puzzle::Size size, int ranks) const override;
    [[nodiscard]] double pass(puzzle::Size size) const override;
    [[nodiscard]] puzzle::Size weight(std::int64_t shards, int total) const override;
    [[nodiscard]] puzzle::Size opt_state(std::int64_t shards, int total) const override;
    [[nodiscard]] puzzle::Size weight_grad(std::int64_t shards, int total) const override;
    [[nodiscard]] puzzle::Size activation(std::int64_t batches) const override;
    [[nodiscard]] puzzle::Size activation_grad(std::int64_t batches) const override;

    [[nodiscard]] const Cluster& cluster() const { return cluster_; }
    // FLOPs of one forward of one layer for one batch: 2 seq hidden^2.
    [[nodiscard]] double forward_flops_per_batch() const;

private:
    Cluster cluster_;
    int ranks_;
    GroupShape world_;  // ranks 0..ranks-1 placed on the cluster
    std::int64_t hidden_, seq_;
    DType dtype_;
};

}  // namespace dtsim::hw
