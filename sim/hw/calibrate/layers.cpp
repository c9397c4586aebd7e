// The harness's transformer blocks on one GPU (include/dtsim/hw/calibrate.hpp, LayerSet): block
// times from calibration/pytorch/dtsim_layer.py and what a block keeps for its backward from
// dtsim_memory.py, each row with the one-GPU run config that holds its block. Validation only:
// nothing is fitted to them.
#include "layers.hpp"

#include "tables.hpp"

#include "hw/config/reading.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <string_view>

namespace dtsim::hw::calib {

namespace {

using Value = json_reader::Value;
using json = nlohmann::json;

constexpr std::string_view kLayerFileKeys[] = {"description", "meta", "layers", "output_layer"};
constexpr std::string_view kMemoryFileKeys[] = {"description", "meta", "memory", "saved_tensors", "errors"};
constexpr std::string_view kTimeColumns[] = {"name", "kind", "attention", "hidden", "heads", "kv_heads", "ffn",
                                             "seq",  "batch", "fwd_ms",   "fwd_bwd_ms"};
constexpr std::string_view kMemoryColumns[] = {"name", "policy", "hidden", "heads", "kv_heads",
                                               "ffn",  "seq",    "batch",  "saved_bytes"};
constexpr Range kBlockMilliseconds{"a block's time", "ms", 0, 1e7, true};
constexpr Range kSavedBytes{"a block's saved bytes", "bytes", 0, 1e15, true};  // full recompute keeps the input

// A row's block: its shape as a one-layer model and its batch, labelled "name seq S batch B".
LayerRow block_row(const Value& r, const std::map<std::string, std::size_t>& at, const std::string& kind) {
    const HarnessShape shape = harness_shape(r, at, kind);
    const int batch = r.at(at.at("batch")).integer(1);
    LayerRow row;
    row.path = r.path();
    row.model = harness_model(shape);
    row.training = {{"global_batch", batch}, {"micro_batch", batch}};
    row.label = fmt::format("{} seq {} batch {}", shape.name, shape.seq, batch);
    return row;
}

LayerSet layer_set(const Value& root, const std::string& file, const std::string& id) {
    LayerSet set;
    set.gpu = measured_gpu(root);
    set.id = id;
    set.file = file;
    set.source = root.has("source") ? root["source"].string() : "";
    return set;
}

void add_row(LayerSet& set, LayerRow row, const Value& r) {
    for (const auto& other : set.rows)
        if (other.label == row.label) r.fail(fmt::format("a second row of {} (also {})", row.label, other.path));
    set.rows.push_back(std::move(row));
}

// dtsim_layer.py's blocks: llama as torchtitan writes it but with SDPA's enable_gqa (the keys and
// values not repeated), gpt MPT's; recompute none; the SDPA backend the row names.
void read_times(const Value& root, const std::string& file, const std::string& stem, GroundTruth& out) {
    root.keys(kLayerFileKeys);
    LayerSet set = layer_set(root, file, stem + ":layers");
    const Value sec = root["layers"];
    sec.keys(kTableKeys);
    const auto at = table_columns(sec["columns"], kTimeColumns);
    const Value rows = sec["rows"];
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const Value r = table_row(rows, i, sec["columns"].size());
        const Value fwd = r.at(at.at("fwd_ms")), both = r.at(at.at("fwd_bwd_ms"));
        // A backend that refused a shape left both times null (the script says why on its standard error).
        if (fwd.json().is_null() && both.json().is_null()) {
            out.skipped.push_back(fmt::format("{}: {}: not timed (both times null: the backend refused the shape)",
                                              file, r.path()));
            continue;
        }
        const std::string kind = r.at(at.at("kind")).choice({"llama", "gpt"});
        const std::string attention = r.at(at.at("attention")).choice({"flash2", "cudnn"});
        LayerRow row = block_row(r, at, kind);
        row.label += " " + attention;
        row.strategy = {{"name", "ddp"},
                        {"dp", 1},
                        {"flash_attention", true},
                        {"attention_kernel", attention},
                        {"recompute", "none"},
                        {"repeat_kv", false}};
        row.forward_s = fwd.real(kBlockMilliseconds) / 1000;
        row.forward_backward_s = both.real(kBlockMilliseconds) / 1000;
        if (row.forward_backward_s <= row.forward_s)
            both.fail("expected the forward and backward to take longer than the forward alone");
        add_row(set, std::move(row), r);
    }
    if (set.rows.empty()) rows.fail("expected at least one row with its times");
    out.layers.push_back(std::move(set));
}

// dtsim_memory.py's blocks: a name starting "llama" is torchtitan's Llama 3 block, which repeats
// the keys and values before SDPA unless the name says enable_gqa; "mpt" MPT's. saved_bytes is
// what one block keeps, its output included (a stacked row's total divided by its blocks, as the
// script writes it), as layer_activation_bytes counts a layer's input.
void read_memory(const Value& root, const std::string& file, const std::string& stem, GroundTruth& out) {
    root.keys(kMemoryFileKeys);
    LayerSet set = layer_set(root, file, stem + ":memory");
    set.memory = true;
    const Value sec = root["memory"];
    sec.keys(kTableKeys);
    const auto at = table_columns(sec["columns"], kMemoryColumns);
    const Value rows = sec["rows"];
    if (rows.size() == 0) rows.fail("expected at least one row");
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const Value r = table_row(rows, i, sec["columns"].size());
        const Value name = r.at(at.at("name"));
        const std::string& n = name.string();
        const std::string kind = n.starts_with("llama") ? "llama" : n.starts_with("mpt") ? "gpt" : "";
        if (kind.empty())
            name.fail(fmt::format("expected a block name starting with \"llama\" (torchtitan's Llama 3 block) or \"mpt\" "
                                  "(MPT's), found \"{}\"",
                                  json_reader::shorten(n)));
        LayerRow row = block_row(r, at, kind);
        const std::string policy = r.at(at.at("policy")).choice({"none", "full", "op"});
        row.label += " recompute " + policy;
        row.strategy = {{"name", "ddp"},
                        {"dp", 1},
                        {"flash_attention", true},
                        {"recompute", harness_recompute(policy)},
                        {"repeat_kv", kind == "llama" && n.find("enable_gqa") == std::string::npos}};
        row.saved_bytes = r.at(at.at("saved_bytes")).real(kSavedBytes);
        add_row(set, std::move(row), r);
    }
    out.layers.push_back(std::move(set));
}

}  // namespace

HarnessShape harness_shape(const Value& r, const std::map<std::string, std::size_t>& at, const std::string& kind) {
    const auto col = [&](std::string_view name) { return r.at(at.at(std::string(name))); };
    HarnessShape shape;
    shape.name = col("name").string();
    shape.kind = kind;
    shape.hidden = col("hidden").integer(1);
    shape.heads = col("heads").integer(1);
    shape.kv_heads = col("kv_heads").integer(1);
    shape.ffn = col("ffn").integer(1);
    shape.seq = col("seq").integer(1);
    if (at.count("layers")) shape.layers = col("layers").integer(1);
    shape.vocab = at.count("vocab") ? col("vocab").integer(1) : 32000;
    return shape;
}

nlohmann::json harness_model(const HarnessShape& s) {
    return {{"name", s.name},         {"layers", s.layers}, {"hidden", s.hidden}, {"heads", s.heads},
            {"kv_heads", s.kv_heads}, {"ffn", s.ffn},       {"seq", s.seq},       {"vocab", s.vocab},
            {"dropout", false},       {"dtype", "bf16"},    {"mlp", s.kind == "llama" ? "swiglu" : "gelu"},
            {"tied_embeddings", s.kind != "llama"}};
}

std::string harness_recompute(const std::string& policy) { return policy == "op" ? "selective_op" : policy; }

bool is_layer_file(const nlohmann::json& j) {
    return j.is_object() && (j.contains("layers") || j.contains("memory"));
}

void read_layers(const Value& root, const std::string& file, const std::string& stem, GroundTruth& out) {
    if (root.has("layers")) read_times(root, file, stem, out);
    else read_memory(root, file, stem, out);
}

}  // namespace dtsim::hw::calib
