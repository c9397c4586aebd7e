// Cluster and model documents shared by the hardware-world tests.
#pragma once

#include "dtsim/hw/topology.hpp"
#include "dtsim/hw/units.hpp"

#include <nlohmann/json.hpp>

namespace dtsim::hw::test {

using json = nlohmann::json;

// A cluster whose point-to-point transfers and memory-bound work are free, so
// that pipeline stages take exactly their GEMM time.
inline json ideal_cluster(int nodes, int gpus_per_node) {
    return {{"name", "ideal"},
            {"gpu", {{"name", "gpu"}, {"peak_tflops", {{"bf16", 1000}}}, {"hbm_GiB", 80}, {"hbm_TBps", 1e9}}},
            {"gpus_per_node", gpus_per_node},
            {"nodes", nodes},
            {"links",
             {{"intra_node", {{"bandwidth_GBps", 1e12}, {"hop_latency_us", 0}}},
              {"inter_node", {{"bandwidth_GBps", 1e12}, {"hop_latency_us", 0}}}}}};
}

// DGX H100-like nodes (the figures of configs/clusters/dgx-h100.json before calibration).
inline json realistic_cluster(int nodes) {
    return {{"name", "h100"},
            {"gpu", {{"name", "H100"}, {"peak_tflops", {{"bf16", 989.4}}}, {"hbm_GiB", 80}, {"hbm_TBps", 3.35}}},
            {"gpus_per_node", 8},
            {"nodes", nodes},
            {"links",
             {{"intra_node", {{"bandwidth_GBps", 370}, {"p2p_bandwidth_GBps", 292}, {"hop_latency_us", 4.8}}},
              {"inter_node", {{"bandwidth_GBps", 48}, {"hop_latency_us", 5}}}}},
            {"collective_base_latency_us", 20}};
}

inline json small_model(int layers, int vocab = 0) {
    return {{"name", "small"}, {"layers", layers}, {"hidden", 2048}, {"heads", 16}, {"seq", 1024}, {"vocab", vocab}};
}

// A small cluster as a struct, for tests that build a World directly: 4 GPUs
// per node, NVLink 200 GB/s bus (100 GB/s point to point), InfiniBand 25 GB/s.
inline Cluster small_cluster(int nodes = 2) {
    Cluster c;
    c.name = "test";
    c.gpu.name = "gpu";
    c.gpu.peak_flops[static_cast<std::size_t>(DType::bf16)] = 1e15;
    c.gpu.memory_bytes = 10 * kGiB;
    c.gpu.memory_bandwidth = 2e12;
    c.gpus_per_node = 4;
    c.nodes = nodes;
    c.intra_node = Link{"nvlink", 200e9, 100e9, 2e-6, 0};
    c.inter_node = Link{"ib", 25e9, 25e9, 5e-6, 0};
    c.base_latency = 10e-6;
    c.algorithm = Algorithm::ring;
    return c;
}

}  // namespace dtsim::hw::test
