// The harness's transformer blocks on one GPU (include/dtsim/hw/calibrate.hpp, LayerSet): block
// times from calibration/pytorch/dtsim_layer.py and what a block keeps for its backward from
// dtsim_memory.py, each row with the one-GPU run config that holds its block. Validation only:
// nothing is fitted to them.
#include "layers.hpp"

#include "hw/config/reading.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <span>
#include <string_view>

namespace dtsim::hw::calib {

namespace {

using Value = json_reader::Value;
using json = nlohmann::json;

constexpr std::string_view kLayerFileKeys[] = {"description", "meta", "layers", "output_layer"};
constexpr std::string_view kMemoryFileKeys[] = {"description", "meta", "memory", "saved_tensors", "errors"};
constexpr std::string_view kSectionKeys[] = {"description", "columns", "rows"};
constexpr std::string_view kShapeColumns[] = {"name", "hidden", "heads", "kv_heads", "ffn", "seq", "batch"};
constexpr std::string_view kTimeColumns[] = {"kind", "attention", "fwd_ms", "fwd_bwd_ms"};
constexpr std::string_view kMemoryColumns[] = {"policy", "saved_bytes"};
constexpr Range kBlockMilliseconds{"a block's time", "ms", 0, 1e7, true};
constexpr Range kSavedBytes{"a block's saved bytes", "bytes", 0, 1e15, false};

std::map<std::string, std::size_t> column_index(const Value& cols, std::span<const std::string_view> want,
                                                std::span<const std::string_view> also) {
    std::map<std::string, std::size_t> at;
    for (std::size_t i = 0; i < cols.size(); ++i) at.emplace(cols.at(i).string(), i);
    for (auto list : {want, also})
        for (auto w : list)
            if (!at.count(std::string(w))) cols.fail(fmt::format("missing column \"{}\"", w));
    return at;
}

void check_keys(const Value& root, std::span<const std::string_view> allowed) {
    for (const auto& [key, v] : root.members())
        if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) root.unknown_key(key, allowed);
}

// The model and training sections of one block of the row's shape; the block's form (llama:
// torchtitan's Llama 3 block, SwiGLU; gpt: MPT's, GeLU 4h), bf16, no dropout.
void shape_of(LayerRow& row, const Value& r, const std::map<std::string, std::size_t>& at, const std::string& kind) {
    const auto col = [&](std::string_view name) { return r.at(at.at(std::string(name))); };
    const int batch = col("batch").integer(1);
    row.model = {{"name", col("name").string()},    {"layers", 1},
                 {"hidden", col("hidden").integer(1)}, {"heads", col("heads").integer(1)},
                 {"kv_heads", col("kv_heads").integer(1)}, {"ffn", col("ffn").integer(1)},
                 {"seq", col("seq").integer(1)},    {"vocab", 32000},
                 {"dropout", false},                {"dtype", "bf16"},
                 {"mlp", kind == "llama" ? "swiglu" : "gelu"}, {"tied_embeddings", kind != "llama"}};
    row.training = {{"global_batch", batch}, {"micro_batch", batch}};
    row.label = fmt::format("{} seq {} batch {}", row.model["name"].get<std::string>(), row.model["seq"].get<int>(), batch);
}

LayerSet layer_set(const Value& root, const std::string& file, const std::string& id) {
    LayerSet set;
    const Value gpu = root["meta"]["gpu"];
    set.gpu = gpu.string();
    if (gpu_family(set.gpu).empty())
        gpu.fail(fmt::format("cannot tell the GPU family of \"{}\" (expected a name such as \"NVIDIA H100 80GB HBM3\")",
                             json_reader::shorten(set.gpu)));
    set.id = id;
    set.file = file;
    set.source = root.has("source") ? root["source"].string() : "";
    return set;
}

// dtsim_layer.py's blocks: llama as torchtitan writes it but with SDPA's enable_gqa (the keys and
// values not repeated), gpt MPT's; recompute none; the SDPA backend the row names.
void read_times(const Value& root, const std::string& file, const std::string& stem, GroundTruth& out) {
    check_keys(root, kLayerFileKeys);
    LayerSet set = layer_set(root, file, stem + ":layers");
    const Value sec = root["layers"];
    sec.keys(kSectionKeys);
    const auto at = column_index(sec["columns"], kShapeColumns, kTimeColumns);
    const Value rows = sec["rows"];
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const Value r = rows.at(i);
        if (r.size() != sec["columns"].size()) r.fail(fmt::format("expected {} values, one per column", sec["columns"].size()));
        // A backend that refused a shape left its times null (the script says why on its standard error).
        if (r.at(at.at("fwd_ms")).json().is_null()) continue;
        LayerRow row;
        row.path = r.path();
        const std::string kind = r.at(at.at("kind")).choice({"llama", "gpt"});
        const std::string attention = r.at(at.at("attention")).choice({"flash2", "cudnn"});
        shape_of(row, r, at, kind);
        row.label += " " + attention;
        row.strategy = {{"name", "ddp"},           {"dp", 1},        {"flash_attention", true},
                        {"attention_kernel", attention}, {"recompute", "none"}, {"repeat_kv", false}};
        row.forward_s = r.at(at.at("fwd_ms")).real(kBlockMilliseconds) / 1000;
        row.forward_backward_s = r.at(at.at("fwd_bwd_ms")).real(kBlockMilliseconds) / 1000;
        if (row.forward_backward_s <= row.forward_s)
            r.at(at.at("fwd_bwd_ms")).fail("expected the forward and backward to take longer than the forward alone");
        set.rows.push_back(std::move(row));
    }
    if (set.rows.empty()) rows.fail("expected at least one row with its times");
    out.layers.push_back(std::move(set));
}

// dtsim_memory.py's blocks: a name starting "llama" is torchtitan's Llama 3 block, which repeats
// the keys and values before SDPA unless the name says enable_gqa; "mpt" MPT's. saved_bytes is
// one block's (a stacked row's total over its blocks), its output included, as
// layer_activation_bytes counts a layer's input.
void read_memory(const Value& root, const std::string& file, const std::string& stem, GroundTruth& out) {
    check_keys(root, kMemoryFileKeys);
    LayerSet set = layer_set(root, file, stem + ":memory");
    set.memory = true;
    const Value sec = root["memory"];
    sec.keys(kSectionKeys);
    const auto at = column_index(sec["columns"], kShapeColumns, kMemoryColumns);
    const Value rows = sec["rows"];
    if (rows.size() == 0) rows.fail("expected at least one row");
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const Value r = rows.at(i);
        if (r.size() != sec["columns"].size()) r.fail(fmt::format("expected {} values, one per column", sec["columns"].size()));
        const Value name = r.at(at.at("name"));
        const std::string& n = name.string();
        const std::string kind = n.starts_with("llama") ? "llama" : n.starts_with("mpt") ? "gpt" : "";
        if (kind.empty())
            name.fail(fmt::format("expected a block name starting with \"llama\" (torchtitan's Llama 3 block) or \"mpt\" "
                                  "(MPT's), found \"{}\"",
                                  json_reader::shorten(n)));
        LayerRow row;
        row.path = r.path();
        shape_of(row, r, at, kind);
        const std::string policy = r.at(at.at("policy")).choice({"none", "full", "op"});
        row.label += " recompute " + policy;
        row.strategy = {{"name", "ddp"},
                        {"dp", 1},
                        {"flash_attention", true},
                        {"recompute", policy == "op" ? "selective_op" : policy},
                        {"repeat_kv", kind == "llama" && n.find("enable_gqa") == std::string::npos}};
        row.saved_bytes = r.at(at.at("saved_bytes")).real(kSavedBytes);
        set.rows.push_back(std::move(row));
    }
    out.layers.push_back(std::move(set));
}

}  // namespace

bool is_layer_file(const nlohmann::json& j) {
    return j.is_object() && (j.contains("layers") || j.contains("memory"));
}

void read_layers(const Value& root, const std::string& file, const std::string& stem, GroundTruth& out) {
    if (root.has("layers")) read_times(root, file, stem, out);
    else read_memory(root, file, stem, out);
}

}  // namespace dtsim::hw::calib
