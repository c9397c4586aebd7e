// Reading the harness's transformer-block files (calibration/pytorch/dtsim_layer.py's "layers",
// dtsim_memory.py's "memory"), private to dtsim::hw.
#pragma once

#include "dtsim/hw/calibrate.hpp"
#include "json/reader.hpp"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <map>
#include <string>

namespace dtsim::hw::calib {

// A file with a "layers" section (block times) or a "memory" section (what a block keeps).
bool is_layer_file(const nlohmann::json& j);
// Its rows become a LayerSet; its other sections (the output layer, saved tensors) are
// documentation. A timed row whose two times are null (a backend that refused the shape) is left
// out with a line in out.skipped. Throws ConfigError naming the file and the JSON path.
void read_layers(const json_reader::Value& root, const std::string& file, const std::string& stem, GroundTruth& out);

// The model section of a run config for the harness's block forms: "llama" (torchtitan's Llama 3:
// SwiGLU, untied output) or "gpt" (MPT's: GeLU, tied output), bf16, no dropout.
struct HarnessShape {
    std::string name, kind;
    int layers = 1, hidden = 0, heads = 0, kv_heads = 0, ffn = 0, seq = 0, vocab = 0;
};
// A table row's shape: name, hidden, heads, kv_heads, ffn and seq, and layers and vocab where the
// table has them (else one layer and a vocabulary of 32,000: a block has no embedding, and the
// config reader wants one).
HarnessShape harness_shape(const json_reader::Value& row, const std::map<std::string, std::size_t>& columns,
                           const std::string& kind);
nlohmann::json harness_model(const HarnessShape& shape);
// The harness's recompute policies as strategy.recompute: none, full, op (torchtitan's per-op
// selective policy) -> selective_op.
std::string harness_recompute(const std::string& policy);

}  // namespace dtsim::hw::calib
