// Cluster and model documents shared by the hardware-world tests.
#pragma once

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

}  // namespace dtsim::hw::test
