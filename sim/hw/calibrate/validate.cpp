// `dtsim validate`: every ground-truth point through the simulator's own cost
// code: collective_cost / p2p_cost for nccl-tests rows, GpuSpec::gemm_seconds
// for GEMM shapes, and dtsim::hw::simulate() (what `dtsim run` calls) for
// Megatron-LM runs. No per-point factors: a point is predicted from the
// cluster config of its GPU family and nothing else.
#include "dtsim/hw/calibrate.hpp"

#include "dtsim/hw/collective_cost.hpp"
#include "dtsim/hw/run.hpp"
#include "dtsim/hw/strategies.hpp"
#include "dtsim/hw/transformer.hpp"
#include "dtsim/hw/units.hpp"
#include "tables.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <exception>
#include <filesystem>
#include <map>
#include <numeric>
#include <set>
#include <stdexcept>
#include <tuple>
#include <unordered_map>
#include <utility>

namespace dtsim::hw::calib {

namespace fs = std::filesystem;
using json = nlohmann::json;

double megatron_flops(double B, double s, double l, double h, double V) {
    return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
}

// The schedule of each SC21 run, from NVIDIA/Megatron-LM examples/sc21/run_table_1.sh
// (columns layers_per_virtual_stage and ddp of megatron_a100_sc21.json):
// interleaved 1F1B (Narayanan et al. 2021, section 2.2) where the script passes
// --num-layers-per-virtual-pipeline-stage, plain 1F1B for the other pp > 1 rows,
// no pipeline for pp = 1. Gradients: --DDP-impl local all-reduces them after the
// backward (train_step calls allreduce_gradients after forward_backward_func), torch
// DDP overlaps the all-reduce with the last microbatch's backward (Megatron runs the
// other microbatches under no_sync).
nlohmann::json megatron_strategy(const MegatronRow& row, const std::string& file) {
    const int dp = row.dp();
    // The backward's tensor-parallel all-reduces block: the runs (April 2021) predate Megatron-LM's
    // asynchronous all-reduce beside the weight-gradient GEMM (commit 16c9044, September 2021).
    json s = {{"name", "1f1b"}, {"tp", row.tp}, {"pp", row.pp}, {"dp", dp}, {"recompute", "full"},
              {"overlap", row.ddp == "torch"}, {"tp_async_backward", false}};
    if (row.layers_per_virtual_stage > 0 && row.pp > 1) {
        const int per_chunk = row.pp * row.layers_per_virtual_stage;
        auto fail = [&](const std::string& why) {
            throw ConfigError(file, fmt::format("$.rows (Megatron row {})", row.model),
                              fmt::format("interleaved 1F1B with {} layers per virtual stage: {}",
                                          row.layers_per_virtual_stage, why));
        };
        if (row.layers % per_chunk != 0)
            fail(fmt::format("{} layers are not a multiple of pp x layers per virtual stage = {}", row.layers, per_chunk));
        if (row.chunks() < 2) fail(fmt::format("{} layers over pp {} leave a single model chunk", row.layers, row.pp));
        // SC21-era Megatron (megatron/schedules.py, forward_backward_pipelining_with_interleaving)
        // asserts that the microbatches divide into groups of pp.
        if (row.microbatches() % row.pp != 0)
            fail(fmt::format("{} microbatches are not a multiple of pp = {}", row.microbatches(), row.pp));
        s["name"] = "interleaved";
        s["chunks"] = row.chunks();
        s["microbatch_group"] = row.pp;
    }
    return s;
}

std::string megatron_schedule_label(const MegatronRow& row) {
    if (row.pp == 1) return "no pipeline";
    if (row.chunks() > 1) return fmt::format("interleaved 1F1B v={}", row.chunks());
    return "1F1B";
}

nlohmann::json megatron_config(const MegatronRow& row, const nlohmann::json& cluster) {
    json d = json::object();
    d["name"] = fmt::format("megatron {} on {} GPUs", row.model, row.gpus);
    d["cluster"] = cluster.at("cluster");
    const int per_node = whole_size(d["cluster"], "gpus_per_node", 8);
    if (d["cluster"].is_object()) d["cluster"]["nodes"] = (row.gpus + per_node - 1) / per_node;
    // SC21: seq 2048, vocab 51200, fp16 mixed precision, GPT (GeLU MLP of 4h, tied embeddings).
    d["model"] = {{"name", row.model}, {"layers", row.layers}, {"hidden", row.hidden}, {"heads", row.heads},
                  {"seq", 2048},       {"vocab", 51200},       {"dtype", "fp16"},      {"mlp", "gelu"},
                  {"tied_embeddings", true}};
    d["training"] = {{"global_batch", row.global_batch}, {"micro_batch", row.micro_batch}};
    d["strategy"] = megatron_strategy(row);
    return d;
}

double predict_megatron(const MegatronRow& row, const nlohmann::json& cluster, const std::string& file) {
    const Config cfg = parse_config(megatron_config(row, cluster), fmt::format("{} (Megatron row {})", file, row.model));
    const RunResult r = simulate(cfg, {.keep_trace = false});
    const double flops = megatron_flops(row.global_batch, 2048, row.layers, row.hidden, 51200);
    return flops / row.gpus / r.report.step_time / kTera;
}

std::string megatron_row_id(const MegatronSet& set, const MegatronRow& row) { return set.id + ":" + row.model; }

namespace {
void median_max(std::vector<double> e, double& median, double& max, int& count, double& mean) {
    count = static_cast<int>(e.size());
    median = max = mean = 0;
    if (e.empty()) return;
    mean = std::accumulate(e.begin(), e.end(), 0.0) / static_cast<double>(e.size());
    max = *std::max_element(e.begin(), e.end());
    median = median_of(std::move(e));
}
}  // namespace

namespace {
// A point of memory (GiB, MiB), not of time or throughput.
bool is_memory_unit(const std::string& unit) { return unit == "GiB" || unit == "MiB"; }
}  // namespace

void summarize(ValidationSet& s) {
    std::vector<double> all, held;
    for (const auto& p : s.points)
        if (p.counted) {
            all.push_back(std::abs(p.error()));
            if (!p.in_sample) held.push_back(std::abs(p.error()));
        }
    median_max(all, s.median, s.max, s.counted, s.mean);
    median_max(held, s.held_median, s.held_max, s.held_counted, s.held_mean);
}

EndToEndSummary summarize_end_to_end(const std::vector<ValidationSet>& sets, bool memory) {
    return summarize_rows(sets, memory, {"end_to_end", "megatron"});
}

EndToEndSummary summarize_rows(const std::vector<ValidationSet>& sets, bool memory,
                               std::initializer_list<std::string_view> kinds) {
    EndToEndSummary out;
    std::vector<double> errors;
    double worst = -1;
    for (const auto& s : sets) {
        if (std::find(kinds.begin(), kinds.end(), s.kind) == kinds.end()) continue;
        bool any = false;
        for (const auto& p : s.points) {
            if (!p.counted || is_memory_unit(p.unit) != memory) continue;
            const double e = std::abs(p.error());
            errors.push_back(e);
            out.in_sample += p.in_sample;
            any = true;
            if (e > worst) worst = e, out.worst_row = s.id + ": " + p.label;
        }
        out.sets += any;
    }
    median_max(std::move(errors), out.median, out.worst, out.rows, out.mean);
    return out;
}

nlohmann::json to_json(const EndToEndSummary& s) {
    return {{"rows", s.rows},     {"sets", s.sets},   {"in_sample", s.in_sample}, {"mean", s.mean},
            {"median", s.median}, {"worst", s.worst}, {"worst_row", s.worst_row}};
}

namespace {

struct ClusterDoc {
    json doc;
    std::string file;
};

std::string size_label(double bytes) {
    if (bytes >= kGiB && std::fmod(bytes, kGiB) == 0) return fmt::format("{:.0f} GiB", bytes / kGiB);
    if (bytes >= kMiB && std::fmod(bytes, kMiB) == 0) return fmt::format("{:.0f} MiB", bytes / kMiB);
    if (bytes >= kKiB && std::fmod(bytes, kKiB) == 0) return fmt::format("{:.0f} KiB", bytes / kKiB);
    return fmt::format("{:.0f} B", bytes);
}

class Clusters {
public:
    Clusters(const std::vector<std::string>& files, std::string data_dir) : data_dir_(std::move(data_dir)) {
        for (const auto& f : files) {
            ClusterDoc d{read_cluster_file(f), f};
            const std::string fam = gpu_family(make_cluster(d.doc, f).gpu.name);
            if (fam.empty())
                throw ConfigError(f, "$.cluster.gpu.name", "cannot tell the GPU family (expected a name like H100-SXM)");
            const Cluster c = make_cluster(d.doc, f);
            given_.push_back({fam, c.inter_node.name, d});
            if (!by_family_.count(fam)) by_family_[fam] = std::move(d);
        }
    }
    // The cluster for the family of the GPU a measurement file names (get), or an error at the
    // file's GPU (`path`) naming the data set that cannot be predicted.
    const ClusterDoc& require(const std::string& gpu, const std::string& file, const std::string& id,
                              const std::string& path = "$.meta.gpu") {
        if (const ClusterDoc* cd = get(gpu_family(gpu))) return *cd;
        throw ConfigError(file, path,
                          fmt::format("no cluster config for GPU family \"{}\", so data set \"{}\" cannot be "
                                      "predicted; give one with --cluster",
                                      gpu_family(gpu), id));
    }
    // The cluster for a GPU family: given with --cluster, else the shipped one; null if none.
    // With a network (multi-node data), a given cluster whose inter_node link is of that kind
    // ("EFA", "InfiniBand") comes first.
    const ClusterDoc* get(const std::string& family, const std::string& network = "") {
        if (!network.empty())
            for (const auto& d : given_)
                if (d.family == family && network_kind(d.network) == network_kind(network)) return &d.doc;
        if (auto it = by_family_.find(family); it != by_family_.end()) return &it->second;
        const std::string f = shipped_cluster_for(data_dir_, family, network);
        if (f.empty()) return nullptr;
        if (!shipped_.count(f)) shipped_[f] = ClusterDoc{read_cluster_file(f), f};
        return &shipped_[f];
    }

    // A cluster given with --cluster for this family (and network kind, where one is named), or null.
    const ClusterDoc* given(const std::string& family, const std::string& network) const {
        for (const auto& d : given_)
            if (d.family == family && (network.empty() || network_kind(d.network) == network_kind(network))) return &d.doc;
        return nullptr;
    }
    // A cluster file read once.
    const ClusterDoc& file(const std::string& path) {
        if (!shipped_.count(path)) shipped_[path] = ClusterDoc{read_cluster_file(path), path};
        return shipped_[path];
    }
    const std::string& data_dir() const { return data_dir_; }

private:
    struct Given {
        std::string family, network;
        ClusterDoc doc;
    };
    std::vector<Given> given_;
    std::map<std::string, ClusterDoc> by_family_;  // given with --cluster
    std::map<std::string, ClusterDoc> shipped_;    // configs/clusters, by file
    std::string data_dir_;
};

std::string join(const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
}

std::string key_of(const std::string& op, Algorithm a) {
    return a == Algorithm::automatic ? op : op + "@" + std::string(algorithm_name(a));
}

// Removes the curves that could stand for `op` at `level` (see find_fit).
void drop_fits(json& cluster_doc, const char* level, const std::string& op) {
    json& links = cluster_doc["cluster"]["links"];
    if (!links.contains(level) || !links[level].contains("fits")) return;
    json& fits = links[level]["fits"];
    std::vector<std::string> gone;
    for (const auto& [k, v] : fits.items()) {
        const std::string base = k.substr(0, k.find('@'));
        const bool pair = (op == "all_gather" || op == "reduce_scatter") &&
                          (base == "all_gather" || base == "reduce_scatter");
        if (base == op || pair) gone.push_back(k);
    }
    for (const auto& k : gone) fits.erase(k);
}

// The first line of the cluster's "source" list that names data set `id` as where a figure was read
// by hand, or "". The lines calibrate writes for its curves ("...: dtsim calibrate on <sets>") are
// not such lines: a curve lists its own data sets, and validate --holdout drops it.
std::string source_naming(const json& cluster_doc, const std::string& id) {
    const auto c = cluster_doc.find("cluster");
    if (c == cluster_doc.end() || !c->is_object()) return "";
    const auto lines = c->find("source");
    if (lines == c->end() || !lines->is_array()) return "";
    for (const auto& line : *lines) {
        if (!line.is_string()) continue;
        const std::string text = line.get<std::string>();
        if (text.find(": dtsim calibrate on ") != std::string::npos) continue;
        // A character that may be part of an id.
        const auto in_id = [&](std::size_t i) {
            const char ch = text[i];
            return std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == ':';
        };
        for (auto at = text.find(id); at != std::string::npos; at = text.find(id, at + 1)) {
            const std::size_t end = at + id.size();
            // The whole id, not a part of a longer one ("...-allreduce" in "...-allreduce-b").
            if ((at == 0 || !in_id(at - 1)) && (end == text.size() || !in_id(end))) return text;
        }
    }
    return "";
}

ValidationSet collective_set(const CollectiveSet& s, const GroundTruth& data, Clusters& clusters,
                             const ValidateOptions& o) {
    ValidationSet v;
    v.id = s.id;
    v.kind = "collective";
    v.source = s.source;
    v.file = s.file;
    const std::string fam = gpu_family(s.gpu);
    const ClusterDoc* cd = clusters.get(fam, s.nodes > 1 ? s.network : "");
    if (!cd)
        throw ConfigError(s.file, fmt::format("$.datasets[{}].hardware.gpu", s.index),
                          fmt::format("no cluster config for GPU family \"{}\", so data set \"{}\" cannot be predicted; "
                                      "give one with --cluster",
                                      fam, s.id));
    json doc = cd->doc;
    v.cluster = cd->file;
    const char* level = s.nodes > 1 ? "inter_node" : "intra_node";
    if (o.holdout) {
        std::vector<std::pair<double, double>> pts;
        std::vector<std::string> ids;
        double smallest = 0;
        auto compatible = [&](const CollectiveSet& other) {
            return other.id != s.id && gpu_family(other.gpu) == fam && other.op == s.op &&
                   other.algorithm == s.algorithm && other.nodes == s.nodes && other.gpus_per_node == s.gpus_per_node;
        };
        // Data of the same network where there is some; else of any network (the label says which).
        const bool same_network = std::any_of(data.collectives.begin(), data.collectives.end(), [&](const auto& other) {
            return compatible(other) && network_kind(other.network) == network_kind(s.network);
        });
        for (const auto& other : data.collectives) {
            if (!compatible(other) || (same_network && network_kind(other.network) != network_kind(s.network)))
                continue;
            ids.push_back(other.id + (network_kind(other.network) != network_kind(s.network)
                                          ? fmt::format(" ({})", network_kind(other.network))
                                          : ""));
            const double f = op_bus_factor(other.op, other.ranks());
            for (const auto& r : other.rows)
                if (r.bytes >= o.calibrate_min_bytes) {
                    pts.push_back({f * r.bytes, r.seconds});
                    smallest = smallest == 0 ? r.bytes : std::min(smallest, r.bytes);
                }
        }
        drop_fits(doc, level, s.op);
        if (pts.size() >= 2) {
            json arr = json::array();
            for (const auto& l : fit_lines(pts, o.max_lines)) arr.push_back({l.latency / kMicro, l.bus_bandwidth / kGB});
            doc["cluster"]["links"][level]["fits"][key_of(s.op, s.algorithm)] = {
                {"ranks", s.ranks()}, {"nodes", s.nodes}, {"per_node", s.gpus_per_node}, {"min_bytes", smallest},
                {"lines", arr}, {"datasets", ids}};
            v.fit = fmt::format("held out: curve fitted to {} only", join(ids));
        } else {
            v.fit = "held out from the curves: no other data set of this kind; NCCL's model on the config's links "
                    "(their sources say which measurements they were read from)";
        }
    }
    const Cluster c = make_cluster(doc, cd->file, s.nodes, s.gpus_per_node);
    std::vector<int> members(static_cast<std::size_t>(s.ranks()));
    std::iota(members.begin(), members.end(), 0);
    const GroupShape g = GroupShape::of(c, members);
    if (!o.holdout) {
        const CollectiveFit* f =
            s.op == "sendrecv" ? nullptr : find_fit(c, s.op, g, s.algorithm == Algorithm::automatic ? c.algorithm : s.algorithm);
        if (s.op == "sendrecv") {
            const Link& l = s.nodes > 1 ? c.inter_node : c.intra_node;
            for (const auto& x : l.fits)
                if (x.op == "sendrecv") f = &x;
        }
        if (f && std::find(f->datasets.begin(), f->datasets.end(), s.id) != f->datasets.end())
            v.fit = fmt::format("in-sample: curve fitted to {}", join(f->datasets));
        else if (f)
            v.fit = fmt::format("held out: curve fitted to {}", join(f->datasets));
        else
            v.fit = "no curve for this group shape: NCCL's model on the config's links (their sources say which "
                    "measurements they were read from)";
    }
    // No curve of another set prices it, but a link figure was read from this one.
    if (v.fit.rfind("held out: curve", 0) != 0 && v.fit.rfind("in-sample", 0) != 0)
        if (const std::string read = source_naming(doc, s.id); !read.empty())
            v.fit = fmt::format("in-sample: NCCL's model on the config's links, \"{}\" read from this set",
                                read.substr(0, read.find(':')));
    v.note = fmt::format("{} {} GPUs ({} node{}), {}", s.op, s.ranks(), s.nodes, s.nodes > 1 ? "s" : "",
                         s.algorithm == Algorithm::automatic ? "NCCL's algorithm choice"
                                                             : "NCCL_ALGO=" + std::string(algorithm_name(s.algorithm)));
    for (const auto& r : s.rows) {
        double t = 0;
        if (s.op == "sendrecv") {
            t = p2p_cost(c, r.bytes, s.nodes == 1).seconds;
        } else {
            Collective coll = Collective::all_reduce;
            for (auto x : {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter, Collective::broadcast,
                           Collective::reduce})
                if (collective_name(x) == s.op) coll = x;
            t = collective_cost(c, coll, r.bytes, g, s.algorithm).seconds;
        }
        v.points.push_back({size_label(r.bytes), r.bytes, r.seconds / kMicro, t / kMicro, "us", r.bytes >= o.min_bytes,
                            v.fit.rfind("in-sample", 0) == 0});
    }
    return v;
}

ValidationSet gemm_set(const GemmSet& s, Clusters& clusters, const ValidateOptions& o) {
    ValidationSet v;
    v.id = s.id;
    v.kind = "gemm";
    v.source = s.source;
    v.file = s.file;
    std::vector<std::string> used, fits;
    std::set<std::string> unpredicted;  // why rows were not predicted
    bool in_sample = false, power_in_sample = false;
    for (std::size_t i = 0; i < s.rows.size(); ++i) {
        const GemmPoint& p = s.rows[i];
        std::string up = p.gpu;
        for (auto& ch : up) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
        const std::string fam = gpu_family(up);
        const ClusterDoc* cd = clusters.get(fam);
        const std::string label = fmt::format("{:.0f}x{:.0f}x{:.0f} {} {}", p.m, p.n, p.k, p.gpu, dtype_name(p.dtype));
        if (!cd) {
            unpredicted.insert(fmt::format("no cluster config for GPU family \"{}\" (give one with --cluster)", fam));
            continue;
        }
        GpuSpec gpu = make_cluster(cd->doc, cd->file).gpu;
        if (s.hbm_TBps > 0) gpu.memory_bandwidth = s.hbm_TBps * kTera;
        if (s.power_limit_W > 0) {
            if (!(gpu.tdp_watts > 0) || s.power_limit_W > gpu.tdp_watts)
                throw ConfigError(s.file, s.limit_path,
                                  fmt::format("a power limit of {:g} W needs a part of at least that TDP, but {} gives "
                                              "{} (its $.cluster.gpu.tdp_W)",
                                              s.power_limit_W, cd->file,
                                              gpu.tdp_watts > 0 ? fmt::format("{:g} W", gpu.tdp_watts) : "none"));
            gpu.power_limit_watts = s.power_limit_W;
        }
        if (gpu.peak_flops[static_cast<std::size_t>(p.dtype)] <= 0) {
            unpredicted.insert(fmt::format("{} gives no {} peak", cd->file, dtype_name(p.dtype)));
            continue;
        }
        if (std::find(used.begin(), used.end(), cd->file) == used.end()) used.push_back(cd->file);
        const bool power_fit = s.power_limit_W > 0 && std::find(gpu.power_datasets.begin(), gpu.power_datasets.end(),
                                                                s.id) != gpu.power_datasets.end();
        power_in_sample |= power_fit;
        in_sample |= power_fit ||
                     std::find(gpu.gemm.datasets.begin(), gpu.gemm.datasets.end(), s.id) != gpu.gemm.datasets.end();
        if (o.holdout && !s.best_shape) {
            // Leave one out: the power law refitted to the table's other shapes (on the curve fitted
            // at the TDP) where it was fitted to the table, else the GEMM curve.
            std::vector<GemmPoint> rest;
            for (std::size_t j = 0; j < s.rows.size(); ++j)
                if (j != i && same_family(s.rows[j].gpu, fam)) rest.push_back(s.rows[j]);
            if (power_fit)
                gpu.power_exponent = rest.empty() ? 0 : fit_power_exponent(gpu, rest).exponent;
            else if (rest.size() >= 2)
                gpu.gemm = fit_gemm(gpu, rest).model;
        }
        const double t = gpu.gemm_seconds(p.m, p.n, p.k, p.dtype);
        v.points.push_back({label, 2 * p.m * p.n * p.k, p.tflops, 2 * p.m * p.n * p.k / t / kTera, "TFLOP/s", true});
    }
    if (v.points.empty())
        throw ConfigError(s.file, "$." + s.id.substr(s.id.find(':') + 1),
                          fmt::format("none of the {} rows of data set \"{}\" can be predicted: {}", s.rows.size(), s.id,
                                      join(std::vector<std::string>(unpredicted.begin(), unpredicted.end()))));
    v.cluster = join(used) + (s.hbm_TBps > 0 || s.power_limit_W > 0 ? " with the section's gpu_overrides" : "");
    const bool leave_one_out = o.holdout && !s.best_shape;
    for (auto& p : v.points) p.in_sample = in_sample && !leave_one_out;
    if (leave_one_out && power_in_sample)
        v.fit = "held out: each shape predicted with the power law fitted to the other shapes of the table (leave one "
                "out)";
    else if (leave_one_out)
        v.fit = "held out: each shape predicted from a fit to the other shapes of the table (leave one out)";
    else if (power_in_sample)
        v.fit = "in-sample: the tensor clock's power law was fitted to this table";
    else if (s.best_shape)
        v.fit = in_sample ? "in-sample: these rows set the efficiency ceilings" : "held out";
    else
        v.fit = in_sample ? "in-sample: the shape curve was fitted to this table" : "held out";
    v.note = "GpuSpec::gemm_seconds (roofline with overhead)";
    return v;
}

ValidationSet megatron_set(const MegatronSet& s, Clusters& clusters) {
    ValidationSet v;
    v.id = s.id;
    v.kind = "megatron";
    v.source = s.source;
    v.file = s.file;
    const ClusterDoc* cd = clusters.get(s.gpu);
    if (!cd)
        throw ConfigError(s.file, "$.description",
                          fmt::format("no cluster config for GPU family \"{}\", so data set \"{}\" cannot be predicted; "
                                      "give one with --cluster",
                                      s.gpu, s.id));
    v.cluster = cd->file;
    const Cluster c = make_cluster(cd->doc, cd->file);
    std::vector<std::string> fitted;
    for (const Link* l : {&c.intra_node, &c.inter_node})
        for (const auto& f : l->fits)
            for (const auto& d : f.datasets)
                if (std::find(fitted.begin(), fitted.end(), d) == fitted.end()) fitted.push_back(d);
    for (const auto& d : c.gpu.gemm.datasets)
        if (std::find(fitted.begin(), fitted.end(), d) == fitted.end() && d.rfind(s.id + ":", 0) != 0)
            fitted.push_back(d);
    v.fit = fitted.empty() ? "held out: the config's parameters (see its sources)"
                           : fmt::format("held out: parameters fitted to {}", join(fitted));
    v.note = "dtsim::hw::simulate, each row's schedule as run_table_1.sh ran it (interleaved 1F1B with v chunks, "
             "plain 1F1B, or no pipeline for pp 1), recompute full, fp16, seq 2048, vocab 51200, gradients "
             "all-reduced after the backward (DDP local) or overlapping it (torch DDP, pp 1); TFLOP/s = Megatron's "
             "96 B s l h^2 (1 + s/6h + V/16lh) / (GPUs x step time)";
    std::vector<std::string> fitted_rows;
    for (const auto& row : s.rows) {
        const double predicted = predict_megatron(row, cd->doc, cd->file);
        const auto& ds = c.gpu.gemm.datasets;
        const bool in = std::find(ds.begin(), ds.end(), megatron_row_id(s, row)) != ds.end();
        if (in) fitted_rows.push_back(row.model);
        v.points.push_back({fmt::format("{} tp{} pp{} {} GPUs, {}{}", row.model, row.tp, row.pp, row.gpus,
                                        megatron_schedule_label(row), in ? " (fitted)" : ""),
                            static_cast<double>(row.gpus), row.tflops_per_gpu, predicted, "TFLOP/s", true, in});
    }
    if (!fitted_rows.empty())
        v.fit = fmt::format("rows {} in-sample (the {} GEMM ceiling was fitted to them), the others held out; "
                            "parameters fitted to {}",
                            join(fitted_rows), "fp16", join(fitted));
    return v;
}

// The cluster an end-to-end set runs on: a --cluster of the GPU family and network of the one it
// names, else the shipped one it names (configs/clusters/<name>.json).
const ClusterDoc& end_to_end_cluster(const EndToEndSet& s, Clusters& clusters) {
    if (s.harness()) return clusters.require(s.gpu, s.file, s.id);
    const fs::path shipped =
        clusters.data_dir().empty() ? fs::path() : fs::path(clusters.data_dir()) / "configs" / "clusters" / (s.cluster + ".json");
    if (!shipped.empty() && fs::is_regular_file(shipped)) {
        const ClusterDoc& named = clusters.file(shipped.string());
        const Cluster c = make_cluster(named.doc, named.file);
        const ClusterDoc* g = clusters.given(gpu_family(c.gpu.name), c.inter_node.name);
        return g ? *g : named;
    }
    std::string upper = s.cluster;
    for (auto& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    if (const ClusterDoc* g = clusters.given(gpu_family(upper), "")) return *g;
    throw ConfigError(s.file, fmt::format("$.sets[{}].cluster", s.index),
                      fmt::format("no shipped cluster \"{}\"{}, so data set \"{}\" cannot be predicted; give one of its GPU "
                                  "family with --cluster",
                                  s.cluster, shipped.empty() ? std::string(" (dtsim's data folder was not found)")
                                                             : fmt::format(" ({} is not a file)", shipped.string()),
                                  s.id));
}

// The end-to-end rows' predictions, made ahead (several at once) and read in the sets' order: each
// row's prediction, or what predicting it threw, thrown again where the row is read.
struct Predicted {
    EndToEndPrediction prediction;
    std::exception_ptr failure;
};
using Predictions = std::unordered_map<const EndToEndRow*, Predicted>;

Predictions predict_rows(const std::vector<EndToEndSet>& sets, Clusters& clusters, int jobs) {
    std::vector<std::pair<const EndToEndSet*, const EndToEndRow*>> rows;
    std::vector<const json*> docs;
    for (const auto& s : sets) {
        const ClusterDoc* cd = nullptr;
        try {
            cd = &end_to_end_cluster(s, clusters);
        } catch (...) {
            continue;  // end_to_end_sets throws it again, in its turn
        }
        for (const auto& r : s.rows) {
            if (!r.expressible()) continue;
            rows.emplace_back(&s, &r);
            docs.push_back(&cd->doc);
        }
    }
    std::vector<Predicted> out(rows.size());
    run_each(rows.size(), jobs, [&](std::size_t i) {
        try {
            out[i].prediction = predict_end_to_end(*rows[i].first, *rows[i].second, *docs[i]);
        } catch (...) {
            out[i].failure = std::current_exception();
        }
    });
    Predictions by_row;
    for (std::size_t i = 0; i < rows.size(); ++i) by_row.emplace(rows[i].second, std::move(out[i]));
    return by_row;
}

// An end-to-end set: its expressible rows run by dtsim::hw::simulate, measured against predicted
// in the unit of the measurement; the rows with a measured peak memory again as "<id>:memory".
// Nothing is fitted to these rows; a cluster parameter fitted to the set (or to one of its rows,
// "<id>:<row>") would make the point in-sample.
std::vector<ValidationSet> end_to_end_sets(const EndToEndSet& s, Clusters& clusters, const Predictions& predicted) {
    const ClusterDoc& cd = end_to_end_cluster(s, clusters);
    const Cluster c = make_cluster(cd.doc, cd.file);
    std::vector<std::string> fitted;
    for (const Link* l : {&c.intra_node, &c.inter_node})
        for (const auto& f : l->fits)
            for (const auto& d : f.datasets)
                if (std::find(fitted.begin(), fitted.end(), d) == fitted.end()) fitted.push_back(d);
    for (const auto* sets : {&c.gpu.gemm.datasets, &c.gpu.attention.datasets, &c.gpu.power_datasets,
                             &c.gpu.stream_datasets, &c.gpu.eager_kernels.datasets})
        for (const auto& d : *sets)
            if (std::find(fitted.begin(), fitted.end(), d) == fitted.end()) fitted.push_back(d);
    auto in_sample = [&](const EndToEndRow& r) {
        return std::find(fitted.begin(), fitted.end(), s.id) != fitted.end() ||
               std::find(fitted.begin(), fitted.end(), s.id + ":" + r.id) != fitted.end();
    };
    ValidationSet v;
    v.id = s.id;
    v.kind = s.harness() ? "step" : "end_to_end";
    v.source = s.source;
    v.file = s.file;
    v.cluster = cd.file + (s.cluster_overrides.empty() ? "" : " with the set's cluster_overrides");
    ValidationSet mem = v;
    mem.id = s.id + ":memory";
    bool any_in_sample = false;
    for (const auto& r : s.rows) {
        if (!r.expressible()) {
            v.skipped.push_back(fmt::format("{}: not expressible yet: {}", r.id, r.not_expressible));
            continue;
        }
        const auto found = predicted.find(&r);
        if (found == predicted.end()) throw std::logic_error("validate: a row was not predicted ahead");
        if (found->second.failure) std::rethrow_exception(found->second.failure);
        const EndToEndPrediction& p = found->second.prediction;
        const bool in = in_sample(r);
        any_in_sample |= in;
        const std::string label = fmt::format("{} [{}]{}", r.id, p.layout, p.out_of_memory ? " (dtsim: out of memory)" : "");
        // A one-GPU step lasts a fraction of a second: in milliseconds.
        const double scale = s.harness() ? 1e3 : 1;
        v.points.push_back({label, static_cast<double>(r.gpus), scale * p.measured, scale * p.predicted,
                            s.harness() ? "ms" : p.unit, true, in});
        if (p.out_of_memory) ++v.out_of_memory;
        if (r.measured.peak_memory_GiB)
            mem.points.push_back({label, static_cast<double>(r.gpus), *r.measured.peak_memory_GiB, p.memory_GiB, "GiB", true, in});
    }
    v.fit = mem.fit = any_in_sample ? "in-sample: cluster parameters were fitted to rows of this set"
                                    : "held out: validation only";
    const std::string params = fitted.empty() ? "the cluster's parameters are from its sources"
                                              : fmt::format("the cluster's parameters were fitted to {}", join(fitted));
    v.note = fmt::format("{}each row run as a dtsim config (dtsim::hw::simulate) on {}; measured as {}; {}",
                         s.harness() ? s.note + " (calibration/pytorch/dtsim_step.py); " : "", v.cluster,
                         v.points.empty() ? std::string("-") : v.points.front().unit, params);
    if (!v.skipped.empty())
        v.note += fmt::format("; {} of {} rows skipped, not expressible yet (listed with the reasons after the table)",
                              v.skipped.size(), s.rows.size());
    mem.note = s.harness()
                   ? fmt::format("the peak memory as dtsim::hw::simulate reports it, against PyTorch's "
                                 "max_memory_allocated over the timed steps; {}",
                                 params)
                   : fmt::format("the peak memory of the worst GPU as dtsim::hw::simulate reports it, against the "
                                 "published peak (the data file's note says what the publisher measured: allocated "
                                 "or reserved); {}",
                                 params);
    std::vector<ValidationSet> out;
    if (!v.points.empty()) out.push_back(std::move(v));
    if (!mem.points.empty()) out.push_back(std::move(mem));
    return out;
}

}  // namespace

double speed_error(const std::string& unit, double measured, double predicted) {
    if (!(measured > 0) || !(predicted > 0)) return 0;
    const bool time = unit == "s" || unit == "ms" || unit == "us";
    return time ? measured / predicted - 1 : predicted / measured - 1;
}

std::string mean_direction(const ValidationSet& s) {
    const bool memory = std::any_of(s.points.begin(), s.points.end(), [](const ValidationPoint& p) {
        return p.counted && is_memory_unit(p.unit);
    });
    double sum = 0;
    int n = 0;
    for (const ValidationPoint& p : s.points)
        if (p.counted) sum += memory ? p.error() : speed_error(p.unit, p.measured, p.predicted), ++n;
    if (n == 0) return {};
    const double mean = sum / n;
    return fmt::format("{:.1f} % {}", 100 * std::abs(mean),
                       memory ? (mean >= 0 ? "over" : "under") : (mean >= 0 ? "fast" : "slow"));
}

namespace {

// A set's heading: what it is, where it came from and the cluster it ran on.
ValidationSet heading(const std::string& id, const std::string& kind, const std::string& source,
                      const std::string& file, const std::string& cluster) {
    ValidationSet v;
    std::tie(v.id, v.kind, v.source, v.file, v.cluster) = std::tie(id, kind, source, file, cluster);
    return v;
}

// The harness's blocks on one GPU: each row's block priced as dtsim prices a layer of the run that
// holds it (make_workload's LayerWork: forward, forward and backward; layer_activation_bytes: what
// it keeps), on the cluster of the file's GPU family. Nothing is fitted to them.
ValidationSet layer_set(const LayerSet& s, Clusters& clusters) {
    const ClusterDoc& cd = clusters.require(s.gpu, s.file, s.id);
    ValidationSet v = heading(s.id, "layer", s.source, s.file, cd.file);
    v.fit = "held out: validation only";
    v.note = s.memory ? fmt::format("what one block keeps for its backward on one {} (calibration/pytorch/dtsim_memory.py: "
                                    "memory_allocated after its forward less before, its output included) against "
                                    "layer_activation_bytes of that block as a one-GPU ddp run holds it",
                                    s.gpu)
                      : fmt::format("one block timed on one {} (calibration/pytorch/dtsim_layer.py: its forward with "
                                    "autograd, and forward then backward) against dtsim's layer of a one-GPU ddp run of it "
                                    "(make_workload: the attention and MLP blocks, their memory-bound work included)",
                                    s.gpu);
    json cluster = cd.doc.contains("cluster") ? cd.doc.at("cluster") : json::object();
    cluster["nodes"] = 1;
    cluster["gpus_per_node"] = 1;
    for (const LayerRow& r : s.rows) {
        const json doc = {{"name", r.label}, {"cluster", cluster}, {"model", r.model}, {"training", r.training},
                          {"strategy", r.strategy}};
        try {
            const Config c = parse_config(doc, r.label);
            const LayerSplit split = layer_split(c);
            if (s.memory) {
                v.points.push_back({r.label, 1, r.saved_bytes / kMiB, layer_activation_bytes(c.model.spec, split) / kMiB,
                                    "MiB", true, false});
                continue;
            }
            const LayerWork L = make_workload(c.model.spec, split, c.cluster.gpu).layer;
            const double forward = L.attention_forward.seconds + L.mlp_forward.seconds;
            const double backward = L.attention_backward.seconds + L.mlp_backward.seconds;
            v.points.push_back({r.label + " forward", 1, 1e3 * r.forward_s, 1e3 * forward, "ms", true, false});
            v.points.push_back({r.label + " forward+backward", 1, 1e3 * r.forward_backward_s, 1e3 * (forward + backward),
                                "ms", true, false});
        } catch (const ConfigError& e) {
            throw ConfigError(s.file, r.path, fmt::format("the block \"{}\" as a run config: {}", r.label, e.what()));
        }
    }
    return v;
}

// A bandwidth set: each row of arrays of kStreamMinArrayBytes or more against the rate dtsim prices
// memory-bound kernels at on its GPU's cluster (HBM x stream_fraction); smaller arrays are shown,
// not counted (they read partly from L2).
ValidationSet stream_set(const StreamSet& s, Clusters& clusters) {
    const ClusterDoc& cd = clusters.require(s.gpu, s.file, s.id, "$.memory_bandwidth.gpu");
    const GpuSpec gpu = make_cluster(cd.doc, cd.file).gpu;
    ValidationSet v = heading(s.id, "stream", s.source, s.file, cd.file);
    const bool fitted =
        std::find(gpu.stream_datasets.begin(), gpu.stream_datasets.end(), s.id) != gpu.stream_datasets.end();
    v.fit = fitted ? "in-sample: stream_fraction was fitted to this set" : "held out";
    const double rate_gbps = gpu.memory_bandwidth * gpu.stream_fraction / 1e9;  // what memory_seconds prices at
    v.note = fmt::format("STREAM's copy and triad on one {} against memory-bound kernels' rate on {}: {:.1f} GB/s "
                         "(HBM x stream_fraction {:g}); arrays under {:.0f} MiB shown, not counted",
                         s.gpu, fs::path(cd.file).filename().string(), rate_gbps, gpu.stream_fraction,
                         kStreamMinArrayBytes / (1 << 20));
    for (const StreamPoint& p : s.rows)
        v.points.push_back({fmt::format("{} {}", p.kernel, size_label(p.array_bytes)), p.array_bytes, p.gbps, rate_gbps,
                            "GB/s", p.array_bytes >= kStreamMinArrayBytes, fitted});
    return v;
}

// A kernel file's memory-bound kernels, each row's forward and backward timed alone against
// memory_seconds of the bytes eager_kernel_bytes gives it on its GPU's cluster: the timed kinds at
// the cluster's gpu.eager_kernels (in-sample where they were fitted to this set), the streaming
// kinds (residual adds, GeLU, SwiGLU) at their counted passes, never fitted. With `holdout`, a
// timed row of a set the table was fitted to is priced by its kind's medians over the set's other
// rows (leave one out).
ValidationSet eager_set(const EagerKernelSet& s, Clusters& clusters, bool holdout) {
    const ClusterDoc& cd = clusters.require(s.gpu, s.file, s.id, "$.meta.gpu");
    const GpuSpec gpu = make_cluster(cd.doc, cd.file).gpu;
    ValidationSet v = heading(s.id, "eager", s.source, s.file, cd.file);
    const auto& fitted_to = gpu.eager_kernels.datasets;
    const bool fitted = std::find(fitted_to.begin(), fitted_to.end(), s.id) != fitted_to.end();
    const bool leave_one_out = holdout && fitted;
    v.fit = leave_one_out ? "held out: each timed row (norms, dropout, rotary, loss, Adam) priced by the medians of the "
                            "other rows of its kind (leave one out); residual adds, GeLU and SwiGLU by their counts"
            : fitted      ? "in-sample where timed: gpu.eager_kernels (norms, dropout, rotary, loss, Adam) was fitted to "
                            "this set; residual adds, GeLU and SwiGLU by their counts, held out"
                          : "held out";
    v.note = fmt::format("eager kernels timed alone on one {} against their bytes at {}'s streaming rate, {:.1f} GB/s: "
                         "norms, dropout, rotary, loss and Adam at its gpu.eager_kernels, residual adds, GeLU and "
                         "SwiGLU at their counted passes (eager_kernel_bytes); a small tensor's backward, several operators, "
                         "runs at eager PyTorch's launch rate (the file's launch section), not at the bandwidth",
                         s.gpu, fs::path(cd.file).filename().string(), 1e-9 / gpu.memory_seconds(1.0));
    for (std::size_t i = 0; i < s.rows.size(); ++i) {
        const EagerKernelPoint& p = s.rows[i];
        EagerKernelBytes table = gpu.eager_kernels;
        if (leave_one_out && timed_kind(p.kind)) {
            EagerKernelSet others = s;
            others.rows.erase(others.rows.begin() + static_cast<std::ptrdiff_t>(i));
            table = fit_eager_kernels({&others}, 1 / gpu.memory_seconds(1.0), gpu.eager_kernels);
        }
        const PassBytes b = eager_kernel_bytes(p.kind, table, 2);
        const bool in_sample = fitted && timed_kind(p.kind) && !leave_one_out;
        const char* forward = p.kind == EagerKernel::adam ? " step" : " forward";
        v.points.push_back({p.label + forward, p.elements, 1e6 * p.forward_s,
                            1e6 * gpu.memory_seconds(b.forward * p.elements), "us", true, in_sample});
        if (p.backward_s)
            v.points.push_back({p.label + " backward", p.elements, 1e6 * *p.backward_s,
                                1e6 * gpu.memory_seconds(b.backward * p.elements), "us", true, in_sample});
    }
    return v;
}

}  // namespace

std::vector<ValidationSet> validate(const GroundTruth& data, const ValidateOptions& o) {
    Clusters clusters(o.clusters, o.data_dir);
    std::vector<ValidationSet> out;
    for (const auto& s : data.collectives) out.push_back(collective_set(s, data, clusters, o));
    for (const auto& s : data.gemms) out.push_back(gemm_set(s, clusters, o));
    for (const auto& s : data.megatron) out.push_back(megatron_set(s, clusters));
    const Predictions predicted = predict_rows(data.end_to_end, clusters, o.jobs);
    for (const auto& s : data.end_to_end)
        for (auto& v : end_to_end_sets(s, clusters, predicted)) out.push_back(std::move(v));
    for (const auto& s : data.kernels) {
        const ClusterDoc& cd = clusters.require(s.gpu, s.file, s.id);
        out.push_back(validate_attention(s, make_cluster(cd.doc, cd.file).gpu, cd.file, o.holdout));
    }
    for (const auto& s : data.layers) out.push_back(layer_set(s, clusters));
    for (const auto& s : data.streams) out.push_back(stream_set(s, clusters));
    for (const auto& s : data.eager) out.push_back(eager_set(s, clusters, o.holdout));
    for (auto& s : out) summarize(s);
    // End to end: the mean |error| with the fit, where `dtsim validate --summary` shows it, and which
    // way dtsim errs on average (mean_direction).
    // A published run ran: dtsim's out-of-memory verdict on one is a wrong answer to "does it fit?".
    for (auto& s : out) {
        if ((s.kind == "end_to_end" || s.kind == "step" || s.kind == "layer") && s.counted > 0)
            s.fit += fmt::format("; mean |error| {:.1f} %, dtsim {} on average", 100 * s.mean, mean_direction(s));
        if (s.out_of_memory > 0)
            s.fit += fmt::format("; {} of {} runs predicted out of memory", s.out_of_memory, s.points.size());
    }
    return out;
}

namespace {

// A run's traits as `published_evidence` compares them: one value each, and its words.
struct Trait {
    std::string value, words;
};

std::vector<Trait> evidence_traits(const Config& c) {
    const StrategyConfig& s = c.strategy;
    const bool pytorch = pytorch_parallelism(s);
    std::vector<Trait> t;
    t.push_back({gpu_family(c.cluster.gpu.name), gpu_family(c.cluster.gpu.name)});
    t.push_back({pytorch ? "pytorch" : "megatron", pytorch ? "PyTorch's own parallelism" : "Megatron-LM's (or DeepSpeed's) code"});
    t.push_back(s.tp > 1 ? Trait{"tp", "tensor parallel"} : Trait{"no tp", "no tensor parallelism"});
    t.push_back(s.tp > 1 && s.tp_comm_overlap ? Trait{"overlap", "its communication overlapped"}
                                              : Trait{"no overlap", s.tp > 1 ? "its communication not overlapped" : ""});
    t.push_back(s.pp > 1 ? Trait{"pp", "pipelined"} : Trait{"no pp", "no pipeline"});
    t.push_back(s.cp > 1 ? Trait{"cp", "context parallel"} : Trait{"no cp", "no context parallelism"});
    const std::string rc{recompute_name(s.recompute)};  // Megatron's selective and per-op keep different tensors
    t.push_back({rc, fmt::format("recompute {}", rc)});
    t.push_back(s.fp8 != Fp8::none ? Trait{"fp8", "fp8 linears"} : Trait{"bf16", "no fp8"});
    t.push_back(s.compile ? Trait{"compiled", "compiled blocks"} : Trait{"eager", "not compiled"});
    return t;
}

// The traits let go first when too few rows share them all, by index in evidence_traits: compile,
// fp8, recompute, context, pipeline, the overlap, tensor parallelism (never the GPU or framework).
constexpr std::size_t kRelaxOrder[] = {8, 7, 6, 5, 4, 3, 2};

}  // namespace

std::vector<Evidence> published_evidence(const std::vector<Config>& runs, const std::string& data_dir, int jobs,
                                         std::size_t min_rows) {
    const GroundTruth data = load_ground_truth(shipped_data_files(data_dir));
    Clusters clusters({}, data_dir);
    struct Candidate {
        const EndToEndSet* set;
        const EndToEndRow* row;
        const ClusterDoc* cluster;
        std::vector<Trait> traits;
    };
    std::vector<Candidate> all;
    for (const auto& s : data.end_to_end) {
        if (s.harness()) continue;  // published runs only
        const ClusterDoc& cd = end_to_end_cluster(s, clusters);
        for (const auto& r : s.rows)
            if (r.expressible()) all.push_back({&s, &r, &cd, evidence_traits(parse_end_to_end_row(s, r, cd.doc))});
    }
    // Each run's rows (indices into `all`) and its description; every row any run needs is then
    // predicted once.
    std::vector<Evidence> out(runs.size());
    std::vector<std::vector<std::size_t>> picked(runs.size());
    std::vector<std::size_t> needed;
    std::vector<bool> need(all.size(), false);
    for (std::size_t k = 0; k < runs.size(); ++k) {
        const std::vector<Trait> mine = evidence_traits(runs[k]);
        // Let go of traits until enough rows share the rest (the GPU and framework always).
        std::vector<bool> used(mine.size(), true);
        auto matching = [&] {
            std::vector<std::size_t> rows;
            for (std::size_t j = 0; j < all.size(); ++j) {
                const auto& t = all[j].traits;
                bool same = t[0].value == mine[0].value && t[1].value == mine[1].value;
                for (std::size_t i = 2; i < mine.size() && same; ++i) same = !used[i] || t[i].value == mine[i].value;
                if (same) rows.push_back(j);
            }
            return rows;
        };
        std::vector<std::size_t> rows = matching();
        for (std::size_t i : kRelaxOrder) {
            if (rows.size() >= min_rows) break;
            used[i] = false;
            rows = matching();
        }
        // Described by what the rows found share with the run, and what some of them do not; with
        // none, by the GPU and framework no published run has.
        Evidence& e = out[k];
        for (std::size_t i = 0; i < (rows.empty() ? 2 : mine.size()); ++i) {
            if (mine[i].words.empty()) continue;
            const bool shared = std::all_of(rows.begin(), rows.end(),
                                            [&](std::size_t j) { return all[j].traits[i].value == mine[i].value; });
            (shared ? e.traits : e.relaxed).push_back(mine[i].words);
        }
        for (std::size_t j : rows)
            if (!need[j]) need[j] = true, needed.push_back(j);
        picked[k] = std::move(rows);
    }
    std::vector<EndToEndPrediction> predicted(all.size());
    run_each(needed.size(), jobs, [&](std::size_t i) {
        const Candidate& c = all[needed[i]];
        predicted[needed[i]] = predict_end_to_end(*c.set, *c.row, c.cluster->doc);
    });
    for (std::size_t k = 0; k < runs.size(); ++k) {
        Evidence& e = out[k];
        std::vector<double> errors;
        for (std::size_t j : picked[k]) {
            const EndToEndPrediction& p = predicted[j];
            const double err = speed_error(p.unit, p.measured, p.predicted);
            e.rows.push_back({all[j].set->id, all[j].row->id, p.layout, err, p.out_of_memory});
            errors.push_back(err);
        }
        if (!errors.empty()) {
            std::sort(errors.begin(), errors.end());
            const std::size_t n = errors.size();
            e.median = n % 2 ? errors[n / 2] : (errors[n / 2 - 1] + errors[n / 2]) / 2;
            e.low = errors.front();
            e.high = errors.back();
        }
    }
    return out;
}

Evidence published_evidence(const Config& run, const std::string& data_dir, int jobs, std::size_t min_rows) {
    return published_evidence(std::vector<Config>{run}, data_dir, jobs, min_rows).front();
}

json to_json(const Evidence& e) {
    json rows = json::array();
    for (const auto& r : e.rows)
        rows.push_back({{"set", r.set}, {"row", r.row}, {"layout", r.layout}, {"error", r.error},
                        {"out_of_memory", r.out_of_memory}});
    const auto stat = [&](double v) { return e.rows.empty() ? json(nullptr) : json(v); };
    return {{"traits", e.traits}, {"relaxed", e.relaxed}, {"rows", rows}, {"median_error", stat(e.median)},
            {"min_error", stat(e.low)}, {"max_error", stat(e.high)}};
}

json to_json(const std::vector<ValidationSet>& sets) {
    json arr = json::array();
    for (const auto& s : sets) {
        json pts = json::array();
        for (const auto& p : s.points)
            pts.push_back({{"label", p.label}, {"measured", p.measured}, {"predicted", p.predicted}, {"unit", p.unit},
                           {"error", p.error()}, {"counted", p.counted}, {"in_sample", p.in_sample}});
        arr.push_back({{"id", s.id}, {"kind", s.kind}, {"source", s.source}, {"file", s.file}, {"cluster", s.cluster},
                       {"fit", s.fit}, {"note", s.note}, {"counted", s.counted}, {"median_abs_error", s.median},
                       {"max_abs_error", s.max}, {"held_out_counted", s.held_counted},
                       {"held_out_median_abs_error", s.held_median}, {"held_out_max_abs_error", s.held_max},
                       {"mean_abs_error", s.mean}, {"held_out_mean_abs_error", s.held_mean}, {"skipped", s.skipped},
                       {"out_of_memory", s.out_of_memory},
                       {"points", pts}});
    }
    return arr;
}

}  // namespace dtsim::hw::calib
