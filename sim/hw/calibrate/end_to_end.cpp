// End-to-end ground truth (include/dtsim/hw/end_to_end.hpp): the reader of
// calibration/data/end_to_end_*.json, the run config each row stands for, and its
// prediction by dtsim::hw::simulate. Validation only: nothing here is fitted.
#include "dtsim/hw/end_to_end.hpp"

#include "dtsim/hw/calibrate.hpp"
#include "dtsim/hw/units.hpp"
#include "hw/config/reading.hpp"
#include "layers.hpp"
#include "tables.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cctype>
#include <climits>
#include <exception>
#include <stdexcept>
#include <string_view>

namespace dtsim::hw::calib {

using json = nlohmann::json;

namespace {

using Value = json_reader::Value;

constexpr std::string_view kFileKeys[] = {"description", "sets"};
constexpr std::string_view kSetKeys[] = {"id", "cluster", "cluster_overrides", "defaults", "rows"};
constexpr std::string_view kDefaultsKeys[] = {"model", "training", "strategy"};
constexpr std::string_view kRowKeys[] = {"id", "gpus", "model", "training", "strategy", "measured", "not_expressible"};
constexpr std::string_view kMeasuredKeys[] = {"tokens_per_s_per_gpu", "step_time_s", "tflops_per_gpu", "mfu",
                                              "flops",                "peak_tflops", "peak_memory_GiB"};
constexpr std::string_view kMetricKeys[] = {"tokens_per_s_per_gpu", "step_time_s", "tflops_per_gpu", "mfu"};
constexpr std::string_view kFlopCounts[] = {"megatron", "megatron_sc21", "palm", "unstated"};

constexpr Range kTokensPerSecond{"a throughput", "tokens/s", 0, 1e12, true};
constexpr Range kStepSeconds{"a step time", "s", 0, 1e7, true};  // up to about four months

// A shipped cluster's name: a file stem of configs/clusters, no path.
bool plain_name(const std::string& s) {
    if (s.empty() || s.size() > 200 || !std::isalnum(static_cast<unsigned char>(s.front()))) return false;
    for (char c : s)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') return false;
    return true;
}

json object_or_empty(const Value& parent, std::string_view key) {
    const auto v = parent.find(key);
    if (!v) return json::object();
    if (!v->is_object()) v->expected("an object");
    return v->json();
}

EndToEndMeasured read_measured(const Value& m, bool expressible) {
    m.keys(kMeasuredKeys);
    EndToEndMeasured out;
    std::vector<std::string_view> given;
    for (auto k : kMetricKeys)
        if (m.has(k)) given.push_back(k);
    if (given.size() != 1)
        m.fail(given.empty() ? std::string("expected one of tokens_per_s_per_gpu, step_time_s, tflops_per_gpu, mfu")
                             : fmt::format("expected one measured throughput, found {} ({})", given.size(),
                                           fmt::join(given, ", ")));
    const std::string_view k = given.front();
    const Value v = m[k];
    if (k == "tokens_per_s_per_gpu") {
        out.metric = EndToEndMetric::tokens_per_s_per_gpu;
        out.value = v.real(kTokensPerSecond);
    } else if (k == "step_time_s") {
        out.metric = EndToEndMetric::step_time_s;
        out.value = v.real(kStepSeconds);
    } else if (k == "tflops_per_gpu") {
        out.metric = EndToEndMetric::tflops_per_gpu;
        out.value = v.real(ranges::throughput_tflops);
    } else {
        out.metric = EndToEndMetric::mfu;
        out.value = v.fraction();
    }
    const bool counted = out.metric == EndToEndMetric::tflops_per_gpu || out.metric == EndToEndMetric::mfu;
    if (const auto f = m.find("flops")) {
        if (!counted) f->fail(fmt::format("\"flops\" goes with tflops_per_gpu or mfu, not {}", k));
        const std::string c = f->choice(kFlopCounts);
        out.flops = c == "megatron"        ? FlopCount::megatron
                    : c == "megatron_sc21" ? FlopCount::megatron_sc21
                    : c == "palm"          ? FlopCount::palm
                                           : FlopCount::unstated;
        if (out.flops == FlopCount::unstated && expressible)
            f->fail("a row dtsim runs needs the publisher's FLOP count to compare its TFLOP/s or MFU (\"megatron\", "
                    "\"megatron_sc21\" or \"palm\"); \"unstated\" is for rows with not_expressible");
    } else if (counted) {
        m.fail(fmt::format("{} needs \"flops\": how the publisher counted a step's FLOPs (\"megatron\", \"megatron_sc21\", "
                           "\"palm\" or \"unstated\")",
                           k));
    }
    if (const auto p = m.find("peak_tflops")) {
        if (out.metric != EndToEndMetric::mfu) p->fail("\"peak_tflops\" goes with mfu only");
        out.peak_tflops = p->real(ranges::peak_tflops);
    } else if (out.metric == EndToEndMetric::mfu) {
        m.fail("mfu needs \"peak_tflops\": the peak per GPU the publisher divided by");
    }
    if (const auto mem = m.find("peak_memory_GiB")) out.peak_memory_GiB = mem->real(ranges::memory_GiB);
    return out;
}

// Objects merge key by key; anything else replaces (as a config's includes merge).
void merge_into(json& into, const json& from) {
    if (!into.is_object() || !from.is_object()) {
        into = from;
        return;
    }
    for (auto it = from.begin(); it != from.end(); ++it) {
        if (into.contains(it.key())) merge_into(into[it.key()], it.value());
        else into[it.key()] = it.value();
    }
}

std::string row_path(const EndToEndSet& set, const EndToEndRow& row) {
    if (set.harness()) return fmt::format("$.training_steps.rows[{}]", row.index);
    return fmt::format("$.sets[{}].rows[{}]", set.index, row.index);
}

// The label a row's config is parsed under; errors from it are put back on the data file.
std::string config_label(const EndToEndSet& set, const EndToEndRow& row) {
    return fmt::format("{} (set \"{}\", row \"{}\")", set.file, set.id, row.id);
}

// The first key of a JSON path's tail (".tp.x" -> "tp", "[0]" -> "").
std::string first_key(std::string_view rest) {
    if (rest.empty() || rest.front() != '.') return "";
    rest.remove_prefix(1);
    const auto end = rest.find_first_of(".[");
    return std::string(rest.substr(0, end));
}

// Where in the data file a config path ("$.strategy.tp") of a row's config came from.
std::string data_path(const EndToEndSet& set, const EndToEndRow& row, const std::string& config_path) {
    const std::string r = row_path(set, row);
    if (config_path.rfind("$.", 0) != 0) return r;
    // A step row's config is made from the row, but for its cluster, the GPU family's.
    if (set.harness()) return config_path.rfind("$.cluster", 0) == 0 ? std::string("$.meta.gpu") : r;
    const std::string_view p = std::string_view(config_path).substr(2);
    const auto cut = p.find_first_of(".[");
    const std::string section(p.substr(0, cut));
    const std::string_view rest = cut == std::string_view::npos ? std::string_view() : p.substr(cut);
    const std::string key = first_key(rest);
    if (section == "model" || section == "training" || section == "strategy") {
        const json& own = section == "model" ? row.model : section == "training" ? row.training : row.strategy;
        if (!key.empty() && own.contains(key)) return fmt::format("{}.{}{}", r, section, rest);
        if (!key.empty() && set.defaults.contains(section) && set.defaults[section].contains(key))
            return fmt::format("$.sets[{}].defaults.{}{}", set.index, section, rest);
        return own.empty() ? r : fmt::format("{}.{}", r, section);
    }
    if (section == "cluster") {
        if (key == "nodes" || key == "gpus_per_node") return r + ".gpus";
        json::json_pointer ptr;
        std::string k;
        bool in_overrides = !rest.empty();
        for (std::size_t i = 1; i <= rest.size() && in_overrides; ++i) {
            if (i == rest.size() || rest[i] == '.' || rest[i] == '[') {
                if (!k.empty()) {
                    ptr /= k;
                    in_overrides = set.cluster_overrides.contains(ptr);
                }
                k.clear();
                if (i < rest.size() && rest[i] == '[') break;  // an array: the override holds it whole
            } else {
                k += rest[i];
            }
        }
        if (in_overrides) return fmt::format("$.sets[{}].cluster_overrides{}", set.index, rest);
        return fmt::format("$.sets[{}].cluster", set.index);
    }
    return r;
}

[[noreturn]] void rethrow_on_row(const EndToEndSet& set, const EndToEndRow& row, const ConfigError& e) {
    const std::string label = config_label(set, row);
    std::string message = e.what();
    const std::string prefix = e.path.empty() ? label + ": " : label + ": " + e.path + ": ";
    if (e.file == label && message.rfind(prefix, 0) == 0) {
        message.erase(0, prefix.size());
        throw ConfigError(set.file, data_path(set, row, e.path),
                          fmt::format("{} (row \"{}\" of set \"{}\" as a run config{})", message, row.id, set.id,
                                      e.path.empty() ? "" : ": " + e.path));
    }
    throw ConfigError(set.file, set.harness() ? std::string("$.meta.gpu") : fmt::format("$.sets[{}].cluster", set.index),
                      fmt::format("row \"{}\" of set \"{}\": {}", row.id, set.id, message));
}

}  // namespace

void read_end_to_end(const json& root_json, const std::string& file, std::vector<EndToEndSet>& out,
                     std::vector<std::string>& skipped) {
    const json_reader::Document doc(root_json, file, config_dialect());
    const Value root = doc.root();
    root.keys(kFileKeys);
    if (const auto d = root.find("description")) (void)d->string();
    const Value sets = root["sets"];
    if (sets.size() == 0) sets.fail("expected at least one set");
    for (std::size_t i = 0; i < sets.size(); ++i) {
        const Value sv = sets.at(i);
        sv.keys(kSetKeys);
        EndToEndSet s;
        s.file = file;
        s.index = i;
        s.id = sv["id"].string();
        if (s.id.empty()) sv["id"].fail("expected a non-empty id");
        for (const auto& other : out)
            if (other.id == s.id)
                sv["id"].fail(fmt::format("data set id \"{}\" appears twice (also in {})", json_reader::shorten(s.id), other.file));
        s.source = sv["source"].string();
        if (const auto n = sv.find("note")) s.note = n->string();
        s.cluster = sv["cluster"].string();
        if (!plain_name(s.cluster))
            sv["cluster"].fail(fmt::format("expected the name of a shipped cluster (a file of configs/clusters without "
                                           "\".json\", such as \"dgx-h100\"), found \"{}\"",
                                           json_reader::shorten(s.cluster)));
        s.cluster_overrides = object_or_empty(sv, "cluster_overrides");
        if (s.cluster_overrides.contains("nodes"))
            sv["cluster_overrides"]["nodes"].fail("each row's \"gpus\" sets the nodes");
        // gpus_per_node: the NVLink segment the set's jobs were given (end_to_end_config).
        if (s.cluster_overrides.contains("gpus_per_node")) (void)sv["cluster_overrides"]["gpus_per_node"].integer(1);
        if (const auto d = sv.find("defaults")) {
            d->keys(kDefaultsKeys);
            for (auto k : kDefaultsKeys) {
                const json sec = object_or_empty(*d, k);
                if (!sec.empty()) s.defaults[std::string(k)] = sec;
            }
        }
        const Value rows = sv["rows"];
        if (rows.size() == 0) rows.fail("expected at least one row");
        for (std::size_t j = 0; j < rows.size(); ++j) {
            const Value rv = rows.at(j);
            rv.keys(kRowKeys);
            EndToEndRow r;
            r.index = j;
            r.id = rv["id"].string();
            if (r.id.empty()) rv["id"].fail("expected a non-empty id");
            for (const auto& other : s.rows)
                if (other.id == r.id)
                    rv["id"].fail(fmt::format("row id \"{}\" appears twice in set \"{}\"", json_reader::shorten(r.id), s.id));
            if (const auto n = rv.find("note")) r.note = n->string();
            r.gpus = rv["gpus"].integer(1);
            r.model = object_or_empty(rv, "model");
            r.training = object_or_empty(rv, "training");
            r.strategy = object_or_empty(rv, "strategy");
            if (const auto ne = rv.find("not_expressible")) {
                r.not_expressible = ne->string();
                if (r.not_expressible.empty()) ne->fail("expected why dtsim cannot run the row yet (leave the key out if it can)");
            }
            r.measured = read_measured(rv["measured"], r.expressible());
            if (!r.expressible())
                skipped.push_back(fmt::format("{}: set {}, row \"{}\": not expressible yet: {}", file, s.id, r.id,
                                              r.not_expressible));
            s.rows.push_back(std::move(r));
        }
        out.push_back(std::move(s));
    }
}

namespace {

constexpr std::string_view kStepFileKeys[] = {"description", "meta", "training_steps", "kernels", "top_kernels",
                                              "details"};
constexpr std::string_view kStepColumns[] = {"name",  "kind",  "hidden", "heads",     "kv_heads",        "ffn",
                                             "layers", "vocab", "seq",    "batch",     "recompute",       "step_ms",
                                             "max_allocated_GiB"};
constexpr Range kStepMilliseconds{"a step time", "ms", 0, 1e10, true};

}  // namespace

void read_harness_steps(const json& root_json, const std::string& file, const std::string& stem,
                        std::vector<EndToEndSet>& out, std::vector<std::string>& skipped) {
    const json_reader::Document doc(root_json, file, config_dialect());
    const Value root = doc.root();
    root.keys(kStepFileKeys);
    EndToEndSet s;
    s.file = file;
    s.id = stem;
    s.source = root.has("source") ? root["source"].string() : "";
    s.gpu = measured_gpu(root);
    s.note = fmt::format("one-GPU steps timed on an {} with this repository's harness", s.gpu);
    const Value sec = root["training_steps"];
    sec.keys(kTableKeys);
    const Value cols = sec["columns"], rows = sec["rows"];
    const auto at = table_columns(cols, kStepColumns);
    if (rows.size() == 0) rows.fail("expected at least one row");
    for (std::size_t j = 0; j < rows.size(); ++j) {
        const Value r = table_row(rows, j, cols.size());
        const auto col = [&](std::string_view name) { return r.at(at.at(std::string(name))); };
        // A case the script could not run (out of memory, say) has neither figure; its details say why.
        if (col("step_ms").json().is_null() && col("max_allocated_GiB").json().is_null()) {
            skipped.push_back(fmt::format("{}: {}: not measured (no step time nor peak: the case failed, its "
                                          "\"details\" entry says why)",
                                          file, r.path()));
            continue;
        }
        const HarnessShape shape = harness_shape(r, at, col("kind").choice({"llama", "gpt"}));
        const int batch = col("batch").integer(1);
        const std::string recompute = col("recompute").choice({"none", "full", "op"});
        const bool compiled = at.count("compile") && col("compile").boolean();
        EndToEndRow row;
        row.index = j;
        row.model = harness_model(shape);
        row.training = {{"global_batch", batch}, {"micro_batch", batch}};
        row.strategy = {{"name", "ddp"},
                        {"dp", 1},
                        {"flash_attention", true},
                        {"grad_dtype", "fp32"},
                        {"recompute", harness_recompute(recompute)},
                        {"compile", compiled},
                        {"repeat_kv", shape.kind == "llama"}};
        row.id = fmt::format("{} seq {} batch {} recompute {}{}", shape.name, shape.seq, batch, recompute,
                             compiled ? " compiled" : "");
        for (const auto& other : s.rows)
            if (other.id == row.id) r.fail(fmt::format("a second row of {}", row.id));
        row.measured.metric = EndToEndMetric::step_time_s;
        row.measured.value = col("step_ms").real(kStepMilliseconds) / 1000;
        row.measured.peak_memory_GiB = col("max_allocated_GiB").real(ranges::memory_GiB);
        s.rows.push_back(std::move(row));
    }
    if (s.rows.empty()) rows.fail("expected at least one measured step");
    out.push_back(std::move(s));
}

json end_to_end_config(const EndToEndSet& set, const EndToEndRow& row, const json& cluster_doc) {
    json d = json::object();
    d["name"] = fmt::format("{}: {}", set.id, row.id);
    json cluster = cluster_doc.is_object() && cluster_doc.contains("cluster") ? cluster_doc.at("cluster") : json::object();
    const int domain = cluster.is_object() ? whole_size(cluster, "gpus_per_node", 8) : 0;
    merge_into(cluster, set.cluster_overrides);
    if (cluster.is_object()) {
        const int per_node = whole_size(cluster, "gpus_per_node", 8);
        // A set's own gpus_per_node says its jobs ran on segments of the cluster's NVLink domain (a
        // 72-GPU rack used as 64-GPU segments); a segment larger than the domain does not exist.
        if (domain > 0 && per_node > domain)
            throw ConfigError(set.file, fmt::format("$.sets[{}].cluster_overrides.gpus_per_node", set.index),
                              fmt::format("a job's NVLink segment of {} GPUs is larger than the cluster's nodes of {}",
                                          per_node, domain));
        if (per_node > 0 && row.gpus < per_node) {
            cluster["gpus_per_node"] = row.gpus;
            cluster["nodes"] = 1;
        } else if (per_node > 0) {
            // Not a whole number of nodes: parse_end_to_end_row names the mismatch at the row's gpus (or a
            // check of the run config that fails before it, such as the global batch over the dp it gives).
            cluster["nodes"] = row.gpus % per_node == 0 ? row.gpus / per_node : row.gpus / per_node + 1;
        }
    }
    d["cluster"] = cluster;
    for (const char* section : {"model", "training", "strategy"}) {
        json sec = set.defaults.contains(section) ? set.defaults.at(section) : json::object();
        merge_into(sec, section == std::string_view("model")      ? row.model
                        : section == std::string_view("training") ? row.training
                                                                  : row.strategy);
        d[section] = sec;
    }
    return d;
}

Config parse_end_to_end_row(const EndToEndSet& set, const EndToEndRow& row, const json& cluster_doc) {
    const json d = end_to_end_config(set, row, cluster_doc);
    Config c;
    try {
        c = parse_config(d, config_label(set, row));
    } catch (const ConfigError& e) {
        rethrow_on_row(set, row, e);
    }
    if (c.gpus() != row.gpus)
        throw ConfigError(set.file, row_path(set, row) + ".gpus",
                          fmt::format("the row runs on {} GPUs but its strategy uses tp x pp x {}dp = {} x {} x {}{} = {} "
                                      "(the cluster has {} GPUs per node)",
                                      row.gpus, c.strategy.cp > 1 ? "cp x " : "", c.strategy.tp, c.strategy.pp,
                                      c.strategy.cp > 1 ? fmt::format("{} x ", c.strategy.cp) : "", c.strategy.dp,
                                      c.gpus(), c.cluster.gpus_per_node));
    return c;
}

double megatron_core_flops(const TransformerSpec& m, double batch) {
    const double s = m.seq, l = m.layers, h = m.hidden;
    const double gated = m.mlp == Mlp::swiglu ? 1.5 : 1.0;
    const double attention = 1 + static_cast<double>(m.kv_heads) / m.heads + s / h;  // query projection = h
    return 12 * batch * s * l * h * h * (attention + m.ffn / h * gated + m.vocab / (2 * l * h));
}

double palm_flops(const TransformerSpec& m, double batch) {
    const double input_embedding = static_cast<double>(m.vocab) * m.hidden;
    const double per_token = 6 * (m.total_params() - input_embedding) + 12.0 * m.layers * m.hidden * m.seq;
    return per_token * batch * m.seq;
}

double counted_flops(FlopCount count, const Config& c) {
    const TransformerSpec& m = c.model.spec;
    switch (count) {
        case FlopCount::megatron: return megatron_core_flops(m, c.training.global_batch);
        case FlopCount::megatron_sc21:
            return megatron_flops(c.training.global_batch, m.seq, m.layers, m.hidden, m.vocab);
        case FlopCount::palm: return palm_flops(m, c.training.global_batch);
        case FlopCount::none:
        case FlopCount::unstated: return 0;
    }
    return 0;
}

std::string end_to_end_unit(EndToEndMetric m) {
    switch (m) {
        case EndToEndMetric::tokens_per_s_per_gpu: return "tokens/s/GPU";
        case EndToEndMetric::step_time_s: return "s";
        case EndToEndMetric::tflops_per_gpu: return "TFLOP/s";
        case EndToEndMetric::mfu: return "% MFU";
    }
    return "";
}

EndToEndPrediction predict_end_to_end(const EndToEndSet& set, const EndToEndRow& row, const json& cluster_doc) {
    if (!row.expressible())
        throw std::invalid_argument(fmt::format("{}: set {}, row \"{}\" is not expressible yet: {}", set.file, set.id, row.id,
                                                row.not_expressible));
    const Config c = parse_end_to_end_row(set, row, cluster_doc);
    RunResult r;
    try {
        r = simulate(c, {.keep_trace = false, .straggler_baseline = false});
    } catch (const ConfigError& e) {
        rethrow_on_row(set, row, e);
    } catch (const std::exception& e) {
        throw std::runtime_error(fmt::format("{}: {}: set {}, row \"{}\": the simulation failed: {}", set.file,
                                             row_path(set, row), set.id, row.id, e.what()));
    }
    EndToEndPrediction p;
    p.report = r.report;
    const EndToEndMeasured& m = row.measured;
    p.unit = end_to_end_unit(m.metric);
    p.measured = m.metric == EndToEndMetric::mfu ? 100 * m.value : m.value;
    const double step = r.report.step_time;
    const double gpus = c.gpus();
    switch (m.metric) {
        case EndToEndMetric::tokens_per_s_per_gpu:
            p.predicted = static_cast<double>(c.training.global_batch) * c.model.spec.seq / step / gpus;
            break;
        case EndToEndMetric::step_time_s: p.predicted = step; break;
        case EndToEndMetric::tflops_per_gpu: p.predicted = counted_flops(m.flops, c) / gpus / step / kTera; break;
        case EndToEndMetric::mfu:
            p.predicted = 100 * counted_flops(m.flops, c) / gpus / step / (m.peak_tflops * kTera);
            break;
    }
    p.layout = c.strategy.name;
    if (c.strategy.tp > 1) p.layout += fmt::format(" tp{}", c.strategy.tp);
    if (c.strategy.pp > 1) p.layout += fmt::format(" pp{}", c.strategy.pp);
    if (c.strategy.cp > 1) p.layout += fmt::format(" cp{}", c.strategy.cp);
    if (c.strategy.chunks > 1) p.layout += fmt::format(" v{}", c.strategy.chunks);
    p.layout += fmt::format(" dp{}", c.strategy.dp);
    if (c.strategy.name == "fsdp" && c.strategy.sharding != "full") p.layout += ", " + c.strategy.sharding;
    if (c.strategy.recompute != Recompute::none)
        p.layout += fmt::format(", recompute {}", recompute_text(c.strategy));
    if (c.strategy.fp8 != Fp8::none) p.layout += fmt::format(", fp8 {}", fp8_name(c.strategy.fp8));
    if (c.strategy.compile) p.layout += ", compiled";
    if (c.strategy.repeat_kv && c.model.spec.kv_heads < c.model.spec.heads) p.layout += ", repeat_kv";
    if (c.strategy.composed_norm && !c.strategy.compile) p.layout += ", composed norm";
    if (c.cluster.gpu.tensor_clock_scale() < 1) p.layout += fmt::format(", {:g} W", c.cluster.gpu.power_limit_watts);
    p.memory_GiB = r.report.peak.bytes / kGiB;
    p.out_of_memory = r.report.oom.has_value();
    return p;
}

}  // namespace dtsim::hw::calib
