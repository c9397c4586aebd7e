// Ground-truth files, the fits of `dtsim calibrate`, and the cluster config it writes.
#include "dtsim/hw/calibrate.hpp"

#include "dtsim/hw/collective_cost.hpp"
#include "dtsim/hw/units.hpp"
#include "hw/config/reading.hpp"
#include "kernels.hpp"
#include "layers.hpp"
#include "streams.hpp"
#include "tables.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <climits>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <span>
#include <stdexcept>
#include <string_view>
#include <type_traits>


namespace dtsim::hw::calib {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

using Value = json_reader::Value;

// The keys of each section of a data file, as calibration/data/*.json and the harness
// (calibration/host: sweep.cpp sweep_json, gemm_shapes.cpp gemm_json) write them. Every
// object may also have "source" and "note"; "description", "meta" (the harness's run:
// GPU, versions, command line) and the published files' "maintainer_statements", "also"
// and "column_sources" document a file and are not read.
constexpr std::string_view kCollectiveFileKeys[] = {"datasets", "description", "meta", "maintainer_statements"};
constexpr std::string_view kCollectiveSetKeys[] = {"id", "collective", "hardware", "algorithm", "rows",
                                                   "in_place", "wrong"};
constexpr std::string_view kHardwareKeys[] = {"gpu", "gpus_per_node", "nodes", "intra", "inter"};
constexpr std::string_view kCollectiveRowKeys[] = {"size_bytes", "count", "time_us", "algbw_GBps", "busbw_GBps"};
constexpr std::string_view kGemmFileKeys[] = {"description", "meta", "max_achievable", "<gpu>_<dtype>_by_shape"};
constexpr std::string_view kBestShapeRowKeys[] = {"gpu", "dtype", "tflops", "shape", "peak"};
constexpr std::string_view kByShapeKeys[] = {"gpu", "dtype", "columns", "rows", "gpu_overrides"};
constexpr std::string_view kGpuOverrideKeys[] = {"hbm_TBps", "power_limit_W"};
constexpr std::string_view kByShapeColumns[] = {"m", "n", "k", "tflops", "time_us", "name", "layout"};
constexpr std::string_view kMegatronFileKeys[] = {"columns", "rows", "description", "also", "column_sources", "meta"};
constexpr std::string_view kMegatronColumns[] = {"model",       "params_B",       "heads",
                                                 "hidden",      "layers",         "tp",
                                                 "pp",          "gpus",           "global_batch",
                                                 "micro_batch", "tflops_per_gpu", "percent_peak",
                                                 "layers_per_virtual_stage", "ddp"};
// The keys that tell the kind of a file.
constexpr std::string_view kKindKeys[] = {"datasets", "max_achievable", "columns",         "rows",
                                           "training_steps", "layers", "memory", "memory_bandwidth"};

const std::vector<std::string>& op_names() {
    static const std::vector<std::string> ops{"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce",
                                              "sendrecv"};
    return ops;
}

std::optional<Algorithm> algorithm_from(std::string s) {
    for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (s == "ring") return Algorithm::ring;
    if (s == "tree") return Algorithm::tree;
    if (s == "nvls") return Algorithm::nvls;
    if (s == "auto" || s == "default") return Algorithm::automatic;
    return std::nullopt;
}

std::string string_or(const Value& v, std::string_view key, const std::string& fallback) {
    const auto member = v.find(key);
    return member ? member->string() : fallback;
}

// A GPU's name ("H100 SXM 80GB"; `any_case`: "h100" too), whose family tells the cluster config
// that predicts its data: a name without one is an error (its data could be predicted by none).
std::string family_any_case(std::string name) {
    for (auto& ch : name) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    return gpu_family(name);
}

std::string read_gpu(const Value& v, bool any_case) {
    const std::string& name = v.string();
    if ((any_case ? family_any_case(name) : gpu_family(name)).empty())
        v.fail(fmt::format("cannot tell the GPU family of \"{}\" (expected a name such as \"H100 SXM 80GB\": capital "
                           "letters followed by two or more digits)",
                           json_reader::shorten(name)));
    return name;
}

void read_collectives(const Value& root, const std::string& file, GroundTruth& out) {
    root.keys(kCollectiveFileKeys);
    const Value sets = root["datasets"];
    for (std::size_t i = 0; i < sets.size(); ++i) {
        const Value d = sets.at(i);
        d.keys(kCollectiveSetKeys);
        CollectiveSet s;
        s.file = file;
        s.index = i;
        s.id = d["id"].string();
        s.source = d["source"].string();
        s.note = string_or(d, "note", "");
        if (const auto in_place = d.find("in_place")) (void)in_place->boolean();
        if (const auto wrong = d.find("wrong")) (void)wrong->integer(0);
        const Value hw = d["hardware"];
        hw.keys(kHardwareKeys);
        s.gpu = read_gpu(hw["gpu"], false);
        s.gpus_per_node = hw["gpus_per_node"].integer(1);
        s.nodes = hw["nodes"].integer(1);
        if (static_cast<long long>(s.gpus_per_node) * s.nodes > INT_MAX)
            hw["nodes"].fail(fmt::format("{} nodes x {} GPUs per node is more GPUs than dtsim counts (at most {})",
                                         s.nodes, s.gpus_per_node, INT_MAX));
        (void)string_or(hw, "intra", "");
        s.network = string_or(hw, "inter", "");
        s.op = d["collective"].string();
        if (std::find(op_names().begin(), op_names().end(), s.op) == op_names().end())
            d["collective"].fail(fmt::format("expected one of all_reduce, all_gather, reduce_scatter, broadcast, "
                                             "reduce, sendrecv, found \"{}\"",
                                             json_reader::shorten(s.op)));
        if (const auto algorithm = d.find("algorithm")) {
            const auto a = algorithm_from(algorithm->string());
            if (!a) algorithm->fail(fmt::format("expected ring, tree, nvls or auto, found \"{}\"",
                                                json_reader::shorten(algorithm->string())));
            s.algorithm = *a;
        } else if (const auto at = s.note.find("NCCL_ALGO="); at != std::string::npos) {
            std::string name;
            for (std::size_t k = at + 10; k < s.note.size() && std::isalnum(static_cast<unsigned char>(s.note[k])); ++k)
                name += s.note[k];
            const auto a = algorithm_from(name);
            if (!a) d["note"].fail(fmt::format("NCCL_ALGO={} is not an algorithm the model has (ring, tree, nvls)", name));
            s.algorithm = *a;
        }
        const Value rows = d["rows"];
        for (std::size_t r = 0; r < rows.size(); ++r) {
            const Value row = rows.at(r);
            row.keys(kCollectiveRowKeys);
            if (const auto v = row.find("count")) (void)v->real(ranges::count);
            for (const char* k : {"algbw_GBps", "busbw_GBps"})
                if (const auto v = row.find(k)) (void)v->real(ranges::measured_GBps);
            s.rows.push_back({row["size_bytes"].real(ranges::message_bytes), row["time_us"].real(ranges::time_us) * kMicro});
        }
        if (s.rows.empty()) rows.fail("expected at least one row");
        for (const auto& other : out.collectives)
            if (other.id == s.id) d["id"].fail(fmt::format("data set id \"{}\" appears twice (also in {})", s.id, other.file));
        out.collectives.push_back(std::move(s));
    }
}

// "1024x10240x5120" -> m, n, k.
std::array<double, 3> parse_shape(const Value& v) {
    const std::string s = v.string();
    std::array<double, 3> mnk{};
    std::size_t start = 0;
    for (int i = 0; i < 3; ++i) {
        const auto x = s.find('x', start);
        const std::string part = s.substr(start, x == std::string::npos ? std::string::npos : x - start);
        char* end = nullptr;
        const double value = std::strtod(part.c_str(), &end);
        if (part.empty() || end != part.c_str() + part.size() || !(value > 0) || (i < 2) == (x == std::string::npos))
            v.fail(fmt::format("expected a shape \"MxNxK\", found \"{}\"", json_reader::shorten(s)));
        if (!ranges::dimension.contains(value))
            v.fail(fmt::format("expected a shape \"MxNxK\" of dimensions in {}, found \"{}\"",
                               ranges::dimension.interval(), json_reader::shorten(s)));
        mnk[static_cast<std::size_t>(i)] = value;
        start = x + 1;
    }
    return mnk;
}

DType read_dtype(const Value& v) {
    const auto d = parse_dtype(v.string());
    if (!d) v.fail(fmt::format("expected one of fp32, tf32, bf16, fp16, fp8, found \"{}\"", json_reader::shorten(v.string())));
    return *d;
}

// Index of each column; each must be one of `known`, and the `required` ones there.
std::map<std::string, std::size_t> columns(const Value& cols, std::span<const std::string_view> known,
                                           const std::vector<std::string>& required) {
    std::map<std::string, std::size_t> at;
    for (std::size_t i = 0; i < cols.size(); ++i) {
        const Value c = cols.at(i);
        const std::string& name = c.string();
        if (std::find(known.begin(), known.end(), name) == known.end()) {
            const auto hint = json_reader::nearest(name, known);
            if (!hint.empty()) c.fail(fmt::format("unknown column \"{}\"; did you mean \"{}\"?", json_reader::shorten(name), hint));
            std::string list;
            for (auto k : known) list += fmt::format("{}{}", list.empty() ? "" : ", ", k);
            c.fail(fmt::format("unknown column \"{}\"; the columns are: {}", json_reader::shorten(name), list));
        }
        if (!at.emplace(name, i).second) c.fail(fmt::format("column \"{}\" appears twice", json_reader::shorten(name)));
    }
    for (const auto& r : required)
        if (!at.count(r)) cols.fail(fmt::format("missing column \"{}\"", r));
    return at;
}

bool by_shape_section(std::string_view key) { return key.size() > 9 && key.ends_with("_by_shape"); }

void read_gemm(const Value& root, const std::string& file, const std::string& stem, GroundTruth& out) {
    for (const auto& [key, sec] : root.members()) {
        if (key == "description" || key == "meta") continue;
        if (key != "max_achievable" && !by_shape_section(key)) root.unknown_key(key, kGemmFileKeys);
        GemmSet g;
        g.id = fmt::format("{}:{}", stem, key);
        g.file = file;
        if (key == "max_achievable") {
            sec.keys({"rows"});
            g.source = sec["source"].string();
            g.best_shape = true;
            const Value rows = sec["rows"];
            for (std::size_t i = 0; i < rows.size(); ++i) {
                const Value r = rows.at(i);
                r.keys(kBestShapeRowKeys);
                if (const auto peak = r.find("peak")) (void)peak->real(ranges::peak_tflops);
                const auto mnk = parse_shape(r["shape"]);
                g.rows.push_back({read_gpu(r["gpu"], true), read_dtype(r["dtype"]), mnk[0], mnk[1], mnk[2],
                                  r["tflops"].real(ranges::throughput_tflops)});
            }
        } else {
            // "<gpu>_<dtype>_by_shape" (dtsim-gemm also writes "gpu" and "dtype" in the section)
            sec.keys(kByShapeKeys);
            g.source = sec["source"].string();
            const auto b = key.rfind("_by_shape");
            const auto a = b == 0 ? std::string_view::npos : key.rfind('_', b - 1);
            if (a == std::string_view::npos || b <= a + 1)
                sec.fail("expected a section named max_achievable or <gpu>_<dtype>_by_shape");
            const std::string gpu = sec.has("gpu") ? read_gpu(sec["gpu"], true) : std::string(key.substr(0, a));
            if (!sec.has("gpu") && family_any_case(gpu).empty())
                sec.fail(fmt::format("cannot tell the GPU family of \"{}\" in the section name (expected a name such as "
                                     "h100_bf16_by_shape)",
                                     json_reader::shorten(gpu)));
            const std::string dt(key.substr(a + 1, b - a - 1));
            const auto d = sec.has("dtype") ? std::optional<DType>(read_dtype(sec["dtype"])) : parse_dtype(dt);
            if (!d) sec.fail(fmt::format("unknown dtype \"{}\" in the section name", json_reader::shorten(dt)));
            if (const auto o = sec.find("gpu_overrides")) {
                if (!o->is_object()) o->expected("an object of hbm_TBps and power_limit_W");
                o->keys(kGpuOverrideKeys);
                if (const auto bw = o->find("hbm_TBps")) g.hbm_TBps = bw->real(ranges::memory_TBps);
                if (const auto limit = o->find("power_limit_W")) {
                    g.power_limit_W = limit->real(ranges::power_W);
                    g.limit_path = limit->path();
                }
            }
            const auto at = columns(sec["columns"], kByShapeColumns, {"m", "n", "k", "tflops"});
            const Value rows = sec["rows"];
            for (std::size_t i = 0; i < rows.size(); ++i) {
                const Value r = rows.at(i);
                auto col = [&](const char* c, const Range& range) { return r.at(at.at(c)).real(range); };
                g.rows.push_back({gpu, *d, col("m", ranges::dimension), col("n", ranges::dimension),
                                  col("k", ranges::dimension), col("tflops", ranges::throughput_tflops)});
            }
        }
        if (g.rows.empty()) sec.fail("expected at least one row");
        out.gemms.push_back(std::move(g));
    }
}

void read_megatron(const Value& root, const std::string& file, const std::string& stem, GroundTruth& out) {
    root.keys(kMegatronFileKeys);
    MegatronSet m;
    m.id = stem;
    m.file = file;
    m.source = root["source"].string();
    const std::string desc = string_or(root, "description", "");
    m.gpu = gpu_family(desc).empty() ? "A100" : gpu_family(desc);
    const auto at = columns(root["columns"], kMegatronColumns,
                            {"heads", "hidden", "layers", "tp", "pp", "gpus", "global_batch", "micro_batch",
                             "tflops_per_gpu"});
    // "column_sources": where a column's figures come from, by column.
    if (const auto sources = root.find("column_sources")) {
        std::vector<std::string_view> names;
        for (const auto& [name, index] : at) names.push_back(name);
        for (const auto& [name, text] : sources->members())
            if (!at.count(std::string(name))) sources->unknown_key(name, names);
    }
    const Value rows = root["rows"];
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const Value r = rows.at(i);
        auto col = [&](const char* c) { return r.at(at.at(c)); };
        MegatronRow row;
        row.model = at.count("model") ? col("model").json().dump() : fmt::format("row {}", i);
        if (at.count("model") && col("model").json().is_string()) row.model = col("model").string();
        row.heads = col("heads").integer(1);
        row.hidden = col("hidden").integer(1);
        row.layers = col("layers").integer(1);
        row.tp = col("tp").integer(1);
        row.pp = col("pp").integer(1);
        row.gpus = col("gpus").integer(1);
        row.global_batch = col("global_batch").integer(1);
        row.micro_batch = col("micro_batch").integer(1);
        row.tflops_per_gpu = col("tflops_per_gpu").real(ranges::throughput_tflops);
        if (at.count("layers_per_virtual_stage") && !col("layers_per_virtual_stage").json().is_null())
            row.layers_per_virtual_stage = col("layers_per_virtual_stage").integer(1);
        if (at.count("ddp") && !col("ddp").json().is_null()) {
            row.ddp = col("ddp").string();
            if (row.ddp != "torch" && row.ddp != "local")
                col("ddp").fail(fmt::format("expected \"torch\" or \"local\" (Megatron's --DDP-impl), found \"{}\"",
                                            json_reader::shorten(row.ddp)));
        }
        const long long tp_pp = static_cast<long long>(row.tp) * row.pp;
        if (row.gpus % tp_pp != 0) r.fail(fmt::format("gpus {} is not a multiple of tp x pp = {}", row.gpus, tp_pp));
        m.rows.push_back(row);
    }
    out.megatron.push_back(std::move(m));
}

}  // namespace

std::string gpu_family(const std::string& name) {
    for (std::size_t i = 0; i < name.size(); ++i) {
        std::size_t j = i;
        while (j < name.size() && std::isupper(static_cast<unsigned char>(name[j]))) ++j;
        if (j == i) continue;
        std::size_t k = j;
        while (k < name.size() && std::isdigit(static_cast<unsigned char>(name[k]))) ++k;
        if (k - j >= 2) return name.substr(i, k - i);
        i = j > i ? j - 1 : i;
    }
    return "";
}

std::string network_kind(const std::string& inter) {
    if (inter.find("EFA") != std::string::npos) return "EFA";
    if (inter.find("RoCE") != std::string::npos) return "RoCE";
    if (inter.find("IB") != std::string::npos || inter.find("InfiniBand") != std::string::npos) return "InfiniBand";
    return inter;
}

bool same_family(const std::string& gpu, const std::string& family) {
    std::string up = gpu;
    for (auto& ch : up) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    return !family.empty() && gpu_family(up) == family;
}

double op_bus_factor(const std::string& op, int ranks) {
    if (op == "sendrecv") return 1;
    for (auto c : {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter, Collective::broadcast,
                   Collective::reduce})
        if (collective_name(c) == op) return bus_factor(c, ranks);
    throw std::invalid_argument(fmt::format("unknown operation \"{}\"", op));
}

namespace {
// Calls f on every set of `data`: collectives, GEMM tables, Megatron rows, end-to-end sets, kernel
// files, layers, bandwidth sweeps, timed eager kernels.
template <class F>
void for_each_set(const GroundTruth& data, F&& f) {
    const auto each = [&](const auto& sets) {
        for (const auto& s : sets) f(s);
    };
    each(data.collectives);
    each(data.gemms);
    each(data.megatron);
    each(data.end_to_end);
    each(data.kernels);
    each(data.layers);
    each(data.streams);
    each(data.eager);
}
}  // namespace

std::vector<std::string> data_set_ids(const GroundTruth& data) {
    std::vector<std::string> ids;
    for_each_set(data, [&](const auto& s) { ids.push_back(s.id); });
    return ids;
}

GroundTruth load_ground_truth(const std::vector<std::string>& files) {
    GroundTruth out;
    for (const auto& file : files) {
        const json_reader::Document doc = json_reader::Document::load(file, config_dialect());
        const Value root = doc.root();
        const json& j = doc.json();
        const std::string stem = fs::path(file).stem().string();
        bool by_shape = j.contains("max_achievable");
        for (const auto& [k, v] : j.items()) by_shape |= by_shape_section(k);
        if (j.contains("sets")) {
            read_end_to_end(j, file, out.end_to_end, out.skipped);  // end_to_end.cpp
        } else if (j.contains("training_steps")) {
            read_harness_steps(j, file, stem, out.end_to_end, out.skipped);
        } else if (is_kernel_file(j)) {
            read_kernels(root, file, stem, out);
        } else if (is_layer_file(j)) {
            read_layers(root, file, stem, out);  // layers.cpp
        } else if (is_stream_file(j)) {
            read_streams(root, file, stem, out);  // streams.cpp
        } else if (j.contains("datasets")) {
            read_collectives(root, file, out);
        } else if (by_shape) {
            read_gemm(root, file, stem, out);
        } else if (j.contains("columns") && j.contains("rows")) {
            read_megatron(root, file, stem, out);
        } else {
            // A key a letter or two from one that tells the kind is a typo, not another kind of file.
            for (const auto& [k, v] : root.members())
                if (!json_reader::nearest(k, kKindKeys).empty()) root.unknown_key(k, kKindKeys);
            out.skipped.push_back(fmt::format("{}: no collective \"datasets\", GEMM sections, Megatron \"rows\", \"training_steps\", \"layers\", \"memory\" or \"memory_bandwidth\"; "
                                                  "not ground truth the simulator predicts",
                                                  file));
        }
    }
    // Every set's id names it in validate's output and in --only and --exclude: one set each, across
    // kinds and files (two files of one stem in different folders would otherwise share theirs), an
    // end-to-end or step set's memory set "<id>:memory" included.
    std::map<std::string, std::string> seen;  // id -> file
    const auto once = [&](const std::string& id, const std::string& file) {
        const auto [it, fresh] = seen.emplace(id, file);
        if (!fresh)
            throw ConfigError(file, "$", fmt::format("data set id \"{}\" appears twice (also in {})",
                                                     json_reader::shorten(id), it->second));
    };
    for_each_set(out, [&](const auto& s) {
        once(s.id, s.file);
        if constexpr (std::is_same_v<std::decay_t<decltype(s)>, EndToEndSet>)
            if (std::any_of(s.rows.begin(), s.rows.end(), [](const EndToEndRow& r) { return r.measured.peak_memory_GiB; }))
                once(s.id + ":memory", s.file);
    });
    return out;
}

std::vector<std::string> shipped_data_files(const std::string& data_dir) {
    std::vector<std::string> files;
    const fs::path dir = fs::path(data_dir) / "calibration" / "data";
    if (!fs::is_directory(dir)) throw ConfigError(dir.string(), "$", "the shipped data directory is missing");
    for (const auto& e : fs::directory_iterator(dir))
        if (e.path().extension() == ".json") files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    return files;
}

std::string shipped_cluster_for(const std::string& data_dir, const std::string& family, const std::string& network) {
    if (data_dir.empty()) return "";
    const fs::path dir = fs::path(data_dir) / "configs" / "clusters";
    const std::string kind = network_kind(network);
    if (family == "H100" && kind == "EFA") return (dir / "p5-h100-efa.json").string();
    if (family == "H100" && kind == "RoCE") return (dir / "h100-roce.json").string();
    if (family == "H100") return (dir / "dgx-h100.json").string();
    if (family == "H200" && kind == "RoCE") return (dir / "h200-roce.json").string();
    if (family == "H200") return (dir / "dgx-h200.json").string();
    if (family == "A100") return (dir / "selene-a100.json").string();
    if (family == "B200") return (dir / "dgx-b200.json").string();
    if (family == "GB200") return (dir / "gb200-nvl72.json").string();
    return "";
}

// ------------------------------------------------------------------- fitting

namespace {

// Weighted least squares of t = a + b x minimizing sum ((a + b x) / t - 1)^2, a >= 0, b > 0.
FitLine fit_one(const std::vector<std::pair<double, double>>& pts, std::size_t from, std::size_t to) {
    double s00 = 0, s01 = 0, s11 = 0, r0 = 0, r1 = 0;
    for (std::size_t i = from; i < to; ++i) {
        const double u0 = 1 / pts[i].second, u1 = pts[i].first / pts[i].second;
        s00 += u0 * u0, s01 += u0 * u1, s11 += u1 * u1, r0 += u0, r1 += u1;
    }
    const double det = s00 * s11 - s01 * s01;
    double a = 0, b = 0;
    if (std::abs(det) > 1e-12 * s00 * s11) {
        a = (r0 * s11 - r1 * s01) / det;
        b = (s00 * r1 - s01 * r0) / det;
    }
    if (!(a >= 0) || !(b > 0)) {
        a = 0;
        b = r1 / s11;  // through the origin
    }
    if (!(b > 0)) b = 1e-30;
    return FitLine{a, 1 / b};
}

double envelope_at(const std::vector<FitLine>& lines, double x) {
    double best = std::numeric_limits<double>::infinity();
    for (const auto& l : lines) best = std::min(best, l.latency + x / l.bus_bandwidth);
    return best;
}

double sq_error(const std::vector<FitLine>& lines, const std::vector<std::pair<double, double>>& pts) {
    double e = 0;
    for (const auto& [x, t] : pts) {
        const double r = envelope_at(lines, x) / t - 1;
        e += r * r;
    }
    return e;
}

}  // namespace

std::vector<FitLine> fit_lines(std::vector<std::pair<double, double>> pts, int max_lines) {
    if (pts.size() < 2) throw std::invalid_argument("fitting a curve needs at least 2 points");
    std::sort(pts.begin(), pts.end());
    const std::size_t n = pts.size();
    std::vector<FitLine> best;
    double best_err = std::numeric_limits<double>::infinity();
    for (int k = 1; k <= std::max(1, max_lines); ++k) {
        std::vector<FitLine> best_k;
        double err_k = std::numeric_limits<double>::infinity();
        // Cuts c_1 < ... < c_{k-1}; every run at least 2 points.
        std::vector<std::size_t> cuts(static_cast<std::size_t>(k - 1));
        auto search = [&](auto&& self, std::size_t depth, std::size_t from) -> void {
            if (depth == cuts.size()) {
                if (n - from < 2) return;
                std::vector<FitLine> lines;
                std::size_t prev = 0;
                for (std::size_t c : cuts) lines.push_back(fit_one(pts, prev, c)), prev = c;
                lines.push_back(fit_one(pts, prev, n));
                const double e = sq_error(lines, pts);
                if (e < err_k) err_k = e, best_k = std::move(lines);
                return;
            }
            for (std::size_t c = from + 2; c + 2 <= n; ++c) {
                cuts[depth] = c;
                self(self, depth + 1, c);
            }
        };
        search(search, 0, 0);
        if (best_k.empty()) break;
        if (best.empty() || (err_k < 0.75 * best_err && best_err > 1e-9)) best = std::move(best_k), best_err = err_k;
    }
    // Drop lines the envelope never uses at any point, order by bandwidth.
    std::vector<FitLine> used;
    for (const auto& l : best)
        for (const auto& [x, t] : pts)
            if (l.latency + x / l.bus_bandwidth <= envelope_at(best, x)) {
                used.push_back(l);
                break;
            }
    std::sort(used.begin(), used.end(), [](const FitLine& a, const FitLine& b) { return a.bus_bandwidth < b.bus_bandwidth; });
    return used;
}

namespace {
// The RMS of log(predicted / measured TFLOP/s) of GEMM points on `g`.
double gemm_rms_log(const GpuSpec& g, const std::vector<GemmPoint>& points) {
    double e = 0;
    for (const auto& p : points) {
        const double r = std::log(2 * p.m * p.n * p.k / g.gemm_seconds(p.m, p.n, p.k, p.dtype) / kTera / p.tflops);
        e += r * r;
    }
    return std::sqrt(e / static_cast<double>(points.size()));
}
}  // namespace

PowerFitResult fit_power_exponent(const GpuSpec& gpu, const std::vector<GemmPoint>& points) {
    if (points.empty()) throw std::invalid_argument("fitting the power exponent needs at least 1 shape");
    if (!(gpu.tdp_watts > 0) || !(gpu.power_limit_watts > 0) || gpu.power_limit_watts >= gpu.tdp_watts)
        throw std::invalid_argument("fitting the power exponent needs GEMMs measured at a power limit below the TDP");
    GpuSpec g = gpu;
    auto rms = [&](double k) {
        g.power_exponent = k;
        return gemm_rms_log(g, points);
    };
    // A grid over (0, 4], then halving steps around the best: one parameter, a smooth error.
    PowerFitResult best{0.001, rms(0.001)};
    for (int i = 2; i <= 4000; ++i)
        if (const double e = rms(0.001 * i); e < best.rms_log) best = {0.001 * i, e};
    for (double step = 0.0005; step > 1e-7; step /= 2)
        for (const double k : {best.exponent - step, best.exponent + step})
            if (k > 0 && k <= 4)
                if (const double e = rms(k); e < best.rms_log) best = {k, e};
    return best;
}

GemmFitResult fit_gemm(const GpuSpec& gpu, const std::vector<GemmPoint>& points) {
    if (points.size() < 2) throw std::invalid_argument("fitting the GEMM model needs at least 2 shapes");
    GpuSpec g = gpu;
    auto err = [&](double overhead, double fraction) {
        g.gemm.overhead_s = overhead;
        g.gemm.bandwidth_fraction = fraction;
        double e = 0;
        for (const auto& p : points) {
            const double predicted = 2 * p.m * p.n * p.k / g.gemm_seconds(p.m, p.n, p.k, p.dtype) / kTera;
            const double r = std::log(predicted / p.tflops);
            e += r * r;
        }
        return e;
    };
    // bandwidth_fraction is fitted only where at least two shapes are clearly memory-bound: their
    // arithmetic intensity (FLOPs per byte) below half the ridge point of the starting parameters.
    // A table of large shapes cannot tell it (one near the ridge would bend it to absorb the
    // overhead of small GEMMs: 0.15 from Triton's A100 table, whose smallest shape, 512^3, sits at
    // the ridge). (It prices a GEMM's memory-bound side only: element-wise kernels run at the
    // GPU's stream_fraction, GpuSpec::memory_seconds.)
    int below = 0;
    for (const auto& p : points) {
        const double intensity = 2 * p.m * p.n * p.k / ((p.m * p.k + p.k * p.n + p.m * p.n) * bytes_per_element(p.dtype));
        const double ridge =
            gpu.peak(p.dtype) * gpu.gemm.efficiency(p.dtype) / (gpu.memory_bandwidth * gpu.gemm.bandwidth_fraction);
        if (intensity < ridge / 2) ++below;
    }
    const bool memory_bound = below >= 2;
    // A grid, then coordinate refinement: two parameters, a smooth error.
    double bo = gpu.gemm.overhead_s, bf = gpu.gemm.bandwidth_fraction, be = err(bo, bf);
    for (int i = 0; i <= 100; ++i)
        for (int j = 1; j <= 100; ++j) {
            const double o = i * 0.5e-6, f = memory_bound ? j * 0.01 : gpu.gemm.bandwidth_fraction;
            const double e = err(o, f);
            if (e < be) be = e, bo = o, bf = f;
        }
    double so = 0.25e-6, sf = 0.005;
    for (int it = 0; it < 200 && (so > 1e-12 || sf > 1e-7); ++it) {
        bool moved = false;
        for (auto [d_o, df] : {std::pair{so, 0.0}, {-so, 0.0}, {0.0, memory_bound ? sf : 0.0}, {0.0, memory_bound ? -sf : 0.0}}) {
            const double o = bo + d_o, f = bf + df;
            if (o < 0 || f <= 0 || f > 1) continue;
            const double e = err(o, f);
            if (e < be) be = e, bo = o, bf = f, moved = true;
        }
        if (!moved) so /= 2, sf /= 2;
    }
    GemmFitResult r;
    r.model = gpu.gemm;
    r.model.overhead_s = bo;
    r.model.bandwidth_fraction = bf;
    r.rms_log = std::sqrt(be / static_cast<double>(points.size()));
    return r;
}

// ------------------------------------------------------------------ calibrate

json read_cluster_file(const std::string& path) {
    const json_reader::Document doc = json_reader::Document::load(path, config_dialect());
    const Value root = doc.root();
    if (const auto include = root.find("include"))
        include->fail("a cluster config for calibration cannot include other files");
    (void)root["cluster"];
    return doc.json();
}

int whole_size(const json& cluster, const char* key, int fallback) {
    if (!cluster.is_object()) return fallback;
    const auto it = cluster.find(key);
    if (it == cluster.end() || !it->is_number()) return fallback;
    const double v = it->get<double>();
    return v >= 1 && v <= INT_MAX && std::floor(v) == v ? static_cast<int>(v) : fallback;
}

Cluster make_cluster(const json& doc, const std::string& file, int nodes, int gpus_per_node) {
    json d = json::object();
    d["cluster"] = doc.at("cluster");  // read_cluster_file checked it is there
    if (d["cluster"].is_object()) {
        if (nodes > 0) d["cluster"]["nodes"] = nodes;
        if (gpus_per_node > 0) d["cluster"]["gpus_per_node"] = gpus_per_node;
    }
    // A placeholder workload: only the cluster is wanted, read by the same code as `dtsim run`, which
    // names a bad size (so a size that is not a whole number counts as 1 here).
    const long long gpus = static_cast<long long>(whole_size(d["cluster"], "nodes", 1)) *
                           whole_size(d["cluster"], "gpus_per_node", 1);
    d["model"] = {{"name", "none"}, {"layers", 1}, {"hidden", 64}, {"heads", 1}, {"seq", 1}, {"vocab", 0}};
    d["training"] = {{"global_batch", std::clamp<long long>(gpus, 1, INT_MAX)}};
    d["strategy"] = {{"name", "ddp"}};
    return parse_config(d, file).cluster;
}

namespace {

std::string algorithm_key(const std::string& op, Algorithm a) {
    return a == Algorithm::automatic ? op : op + "@" + std::string(algorithm_name(a));
}

bool wanted(const std::string& id, const CalibrateOptions& o) {
    if (!o.only.empty() && std::find(o.only.begin(), o.only.end(), id) == o.only.end()) return false;
    return std::find(o.exclude.begin(), o.exclude.end(), id) == o.exclude.end();
}

std::string fmt_lines(const std::vector<FitLine>& lines) {
    std::string s;
    for (const auto& l : lines)
        s += fmt::format("{}{:.1f} us + x / {:.1f} GB/s", s.empty() ? "" : ", ", l.latency / kMicro, l.bus_bandwidth / kGB);
    return s;
}

// A parameter this run fitted (its key in the cluster config) and the data sets it rests on. Its
// line in the written cluster's "source" list takes the place of the base's line about it.
struct Refit {
    std::string key;
    std::vector<std::string> datasets;
};

// A line of a cluster's "source" list is about a parameter when it starts with the parameter's key
// followed by a colon or a space ("gpu.stream_fraction 0.8635: ...", "gpu.gemm (how it was fitted):
// ..."); "links.inter_node.fits.all_reduce" is not about "links.inter_node.fits.all_reduce@ring".
bool about_refit(std::string_view line, const Refit& r) {
    return line.starts_with(r.key) && line.size() > r.key.size() &&
           (line[r.key.size()] == ':' || line[r.key.size()] == ' ');
}

// Collectives: one curve per (level, operation, algorithm) from the data sets of this GPU
// family, written to the cluster's links (cl) with a line of the log each.
void fit_collective_curves(json& cl, const std::string& base_file, const std::string& family, const GroundTruth& data,
                           const CalibrateOptions& o, CalibrateResult& out, std::vector<Refit>& refits) {
    struct Group {
        std::vector<const CollectiveSet*> sets;
    };
    std::map<std::tuple<int, std::string, int>, Group> groups;
    for (const auto& s : data.collectives) {
        if (gpu_family(s.gpu) != family || !wanted(s.id, o)) continue;
        groups[{s.nodes > 1 ? 1 : 0, s.op, static_cast<int>(s.algorithm)}].sets.push_back(&s);
    }
    for (const auto& [key, g] : groups) {
        const auto& [level, op, alg] = key;
        const CollectiveSet& first = *g.sets.front();
        for (const auto* s : g.sets)
            if (s->nodes != first.nodes || s->gpus_per_node != first.gpus_per_node ||
                network_kind(s->network) != network_kind(first.network))
                throw ConfigError(s->file, fmt::format("$.datasets[{}].hardware", s->index),
                                  fmt::format("data sets \"{}\" ({} x {} GPUs, network \"{}\") and \"{}\" ({} x {}, "
                                              "network \"{}\") would fit the same {} curve; choose with --only or "
                                              "--exclude",
                                              first.id, first.nodes, first.gpus_per_node, first.network, s->id,
                                              s->nodes, s->gpus_per_node, s->network, algorithm_key(op, Algorithm(alg))));
        std::vector<std::pair<double, double>> pts;
        std::vector<std::string> ids;
        double smallest = 0;
        for (const auto* s : g.sets) {
            ids.push_back(s->id);
            for (const auto& r : s->rows)
                if (r.bytes >= o.min_bytes && (smallest == 0 || r.bytes < smallest)) smallest = r.bytes;
            const double f = op_bus_factor(op, s->ranks());
            for (const auto& r : s->rows)
                if (r.bytes >= o.min_bytes) pts.push_back({f * r.bytes, r.seconds});
        }
        if (pts.size() < 2) {
            out.log.push_back(fmt::format("skipped {} ({}): fewer than 2 rows of {} bytes or more", algorithm_key(op, Algorithm(alg)),
                                          fmt::join(ids, ", "), o.min_bytes));
            continue;
        }
        const auto lines = fit_lines(pts, o.max_lines);
        json arr = json::array();
        for (const auto& l : lines)
            arr.push_back({std::round(l.latency / kMicro * 1000) / 1000, std::round(l.bus_bandwidth / kGB * 1000) / 1000});
        const char* level_name = level ? "inter_node" : "intra_node";
        json fit = {{"ranks", first.ranks()}, {"nodes", first.nodes}, {"per_node", first.gpus_per_node},
                    {"min_bytes", smallest}, {"lines", arr}, {"datasets", ids}};
        std::vector<std::string> srcs;
        for (const auto* s : g.sets) srcs.push_back(s->source);
        fit["source"] = fmt::format("dtsim calibrate: lower envelope of [latency_us, bus_bandwidth_GBps] lines fitted to "
                                    "{} ({} rows >= {} bytes); {}",
                                    fmt::join(ids, ", "), pts.size(), o.min_bytes, fmt::join(srcs, "; "));
        if (level == 1 && !cl["links"].contains("inter_node"))
            throw ConfigError(base_file, "$.cluster.links", "multi-node data but the cluster has no inter_node link");
        cl["links"][level_name]["fits"][algorithm_key(op, Algorithm(alg))] = fit;
        ++out.fitted;
        out.log.push_back(fmt::format("{} {}: {} on {} x {} GPUs from {} ({} rows)", level_name,
                                      algorithm_key(op, Algorithm(alg)), fmt_lines(lines), first.nodes,
                                      first.gpus_per_node, fmt::join(ids, ", "), pts.size()));
        refits.push_back({fmt::format("links.{}.fits.{}", level_name, algorithm_key(op, Algorithm(alg))), ids});
    }
}

// GEMM: the efficiency ceiling per dtype from best-shape rows, the shape curve (overhead,
// bandwidth fraction) from by-shape tables, written to the cluster's gpu.gemm (gm); returns the
// data sets used.
std::vector<std::string> fit_gemm_model(json& gm, GpuSpec gpu, const std::string& family, const GroundTruth& data,
                                        const CalibrateOptions& o, CalibrateResult& out) {
    std::vector<std::string> gemm_ids;
    std::map<DType, std::pair<double, std::string>> ceiling;
    std::vector<GemmPoint> shapes;
    std::vector<std::string> shape_ids;
    for (const auto& s : data.gemms) {
        if (!wanted(s.id, o)) continue;
        // Measured on a part unlike the config's (gpu_overrides: other memory, a power limit): not
        // the curve's (a power limit's table fits the power law, fit_power_clock).
        if (s.hbm_TBps > 0 || s.power_limit_W > 0) continue;
        bool used = false;
        for (const auto& p : s.rows) {
            if (!same_family(p.gpu, family)) continue;
            if (gpu.peak_flops[static_cast<std::size_t>(p.dtype)] <= 0) continue;
            used = true;
            if (s.best_shape) {
                const double e = p.tflops * kTera / gpu.peak(p.dtype);
                auto& best = ceiling[p.dtype];
                if (e > best.first) best = {e, s.id};
            } else {
                shapes.push_back(p);
            }
        }
        if (used) (s.best_shape ? gemm_ids : shape_ids).push_back(s.id);
    }
    if (!ceiling.empty()) {
        // The dtype the shape curve is measured in (else bf16, else any) sets max_efficiency; the others get their own.
        DType main = shapes.empty() ? (ceiling.count(DType::bf16) ? DType::bf16 : ceiling.begin()->first) : shapes.front().dtype;
        if (!ceiling.count(main)) main = ceiling.begin()->first;
        gpu.gemm.max_efficiency = std::min(1.0, ceiling[main].first);
        gm["max_efficiency"] = std::round(gpu.gemm.max_efficiency * 10000) / 10000;
        json by = json::object();
        for (const auto& [d, e] : ceiling) {
            if (d == main) continue;
            gpu.gemm.dtype_efficiency[static_cast<std::size_t>(d)] = std::min(1.0, e.first);
            by[std::string(dtype_name(d))] = std::round(std::min(1.0, e.first) * 10000) / 10000;
        }
        if (!by.empty()) gm["efficiency_by_dtype"] = by;
        ++out.fitted;
        std::string list;
        for (const auto& [d, e] : ceiling) list += fmt::format("{}{} {:.4f}", list.empty() ? "" : ", ", dtype_name(d), e.first);
        out.log.push_back(fmt::format("gemm efficiency ceiling (best shape / peak): {} from {}", list, fmt::join(gemm_ids, ", ")));
    }
    // Types measured by shape but with no best-shape row: their ceiling is fitted to the shapes
    // too (a table of GEMMs run back to back, as a training step runs them, at the GPU's
    // sustained clocks), the main type's with the curve, the others' on it.
    {
        std::map<DType, std::vector<GemmPoint>> open;
        for (const auto& p : shapes)
            if (!ceiling.count(p.dtype)) open[p.dtype].push_back(p);
        const DType main = shapes.empty() ? DType::bf16 : shapes.front().dtype;
        if (open.count(main) && open[main].size() >= 3) {
            double best_e = 0, best = 0;
            GemmModel best_model = gpu.gemm;
            for (int i = 0; i <= 140; ++i) {
                GpuSpec g = gpu;
                g.gemm.max_efficiency = 0.30 + 0.005 * i;
                g.gemm.dtype_efficiency[static_cast<std::size_t>(main)] = 0;
                g.gemm = fit_gemm(g, open[main]).model;
                const double err = gemm_rms_log(g, open[main]);
                if (i == 0 || err < best) best = err, best_e = g.gemm.max_efficiency, best_model = g.gemm;
            }
            gpu.gemm = best_model;
            gm["max_efficiency"] = std::round(best_e * 10000) / 10000;
            // The main type's ceiling is max_efficiency now: an override of the base config's goes.
            if (gm.contains("efficiency_by_dtype") && gm["efficiency_by_dtype"].is_object()) {
                gm["efficiency_by_dtype"].erase(std::string(dtype_name(main)));
                if (gm["efficiency_by_dtype"].empty()) gm.erase("efficiency_by_dtype");
            }
            // Every GEMM parameter is fitted afresh: an earlier calibration's data sets no longer apply.
            gm.erase("datasets");
            ++out.fitted;
            out.log.push_back(fmt::format("gemm efficiency ceiling {} {:.4f}: fitted with the shape curve to {} shapes "
                                          "(no best-shape row; RMS of log error {:.1f} %)",
                                          dtype_name(main), best_e, open[main].size(), 100 * best));
        }
        json by = gm.contains("efficiency_by_dtype") && gm["efficiency_by_dtype"].is_object() ? gm["efficiency_by_dtype"]
                                                                                               : json::object();
        for (const auto& [d, pts] : open) {
            if (d == main || pts.size() < 2) continue;
            double best_e = 0, best = 0;
            for (int i = 0; i <= 280; ++i) {
                GpuSpec g = gpu;
                g.gemm.dtype_efficiency[static_cast<std::size_t>(d)] = 0.30 + 0.0025 * i;
                const double err = gemm_rms_log(g, pts);
                if (i == 0 || err < best) best = err, best_e = 0.30 + 0.0025 * i;
            }
            gpu.gemm.dtype_efficiency[static_cast<std::size_t>(d)] = best_e;
            by[std::string(dtype_name(d))] = std::round(best_e * 10000) / 10000;
            ++out.fitted;
            out.log.push_back(fmt::format("gemm efficiency ceiling {} {:.4f}: fitted on the curve to {} shapes (RMS of "
                                          "log error {:.1f} %)",
                                          dtype_name(d), best_e, pts.size(), 100 * best));
        }
        if (!by.empty()) gm["efficiency_by_dtype"] = by;
    }
    if (shapes.size() >= 2) {
        const auto fit = fit_gemm(gpu, shapes);
        gpu.gemm = fit.model;
        gm["overhead_us"] = std::round(fit.model.overhead_s / kMicro * 1000) / 1000;
        gm["bandwidth_fraction"] = std::round(fit.model.bandwidth_fraction * 10000) / 10000;
        ++out.fitted;
        out.log.push_back(fmt::format("gemm shape curve: overhead {:.3f} us, bandwidth_fraction {:.4f} from {} ({} shapes, "
                                      "RMS of log error {:.1f} %)",
                                      fit.model.overhead_s / kMicro, fit.model.bandwidth_fraction, fmt::join(shape_ids, ", "),
                                      shapes.size(), 100 * fit.rms_log));
    }
    std::vector<std::string> all = gemm_ids;
    all.insert(all.end(), shape_ids.begin(), shape_ids.end());
    return all;
}

// The tensor clock's power law (gpu.power_clock) from GEMM tables measured on this family at a
// power limit below its TDP (a section's gpu_overrides), on the GEMM curve fitted at the TDP.
void fit_power_clock(json& gpu_doc, const GpuSpec& gpu, const std::string& family, const GroundTruth& data,
                     const CalibrateOptions& o, CalibrateResult& out, std::vector<Refit>& refits) {
    std::vector<GemmPoint> points;
    std::vector<std::string> ids;
    GpuSpec limited = gpu;
    for (const auto& s : data.gemms) {
        if (!wanted(s.id, o) || !(s.power_limit_W > 0) || s.best_shape) continue;
        std::vector<GemmPoint> mine;
        for (const auto& p : s.rows)
            if (same_family(p.gpu, family) && gpu.peak_flops[static_cast<std::size_t>(p.dtype)] > 0) mine.push_back(p);
        if (mine.empty()) continue;
        if (!(gpu.tdp_watts > 0) || s.power_limit_W >= gpu.tdp_watts) {
            out.log.push_back(fmt::format("skipped {}: measured at {:g} W, not below the base's TDP ({})", s.id,
                                          s.power_limit_W,
                                          gpu.tdp_watts > 0 ? fmt::format("{:g} W", gpu.tdp_watts) : "none given"));
            continue;
        }
        if (!ids.empty() && (s.power_limit_W != limited.power_limit_watts || s.hbm_TBps * kTera != limited.memory_bandwidth))
            throw std::invalid_argument(fmt::format("the power exponent is fitted to one part at one limit, but {} and {} "
                                                    "differ in their gpu_overrides",
                                                    ids.front(), s.id));
        limited.power_limit_watts = s.power_limit_W;
        if (s.hbm_TBps > 0) limited.memory_bandwidth = s.hbm_TBps * kTera;
        points.insert(points.end(), mine.begin(), mine.end());
        ids.push_back(s.id);
    }
    if (points.empty()) return;
    const PowerFitResult fit = fit_power_exponent(limited, points);
    limited.power_exponent = std::round(fit.exponent * 10000) / 10000;  // as written
    gpu_doc["power_clock"] = {{"exponent", limited.power_exponent}, {"datasets", ids}};
    ++out.fitted;
    out.log.push_back(fmt::format("power clock: tensor clock ~ power^{:.4f} (the datasheets give {:.4f}), x{:.3f} at {:g} "
                                  "W of {:g}, from {} ({} shapes, RMS of log error {:.1f} %)",
                                  fit.exponent, power_clock_exponent(), limited.tensor_clock_scale(),
                                  limited.power_limit_watts, limited.tdp_watts, fmt::join(ids, ", "), points.size(),
                                  100 * fit.rms_log));
    refits.push_back({"gpu.power_clock", ids});
}

// gpu.stream_fraction from the bandwidth sets measured on this family (dtsim-membw): the median
// of their rows with arrays of kStreamMinArrayBytes or more, all the sets' rows pooled, over the
// base's HBM bandwidth.
void fit_stream(json& gpu_doc, const GpuSpec& gpu, const std::string& base_file, const std::string& family,
                const GroundTruth& data, const CalibrateOptions& o, CalibrateResult& out, std::vector<Refit>& refits) {
    StreamSet all;
    std::vector<std::string> ids, files;
    std::set<std::string> gpus;
    for (const auto& s : data.streams) {
        if (!wanted(s.id, o) || !same_family(s.gpu, family)) continue;
        all.rows.insert(all.rows.end(), s.rows.begin(), s.rows.end());
        ids.push_back(s.id);
        files.push_back(s.file);
        gpus.insert(s.gpu);
    }
    if (ids.empty()) return;
    const double fraction = stream_fraction(all, gpu.memory_bandwidth);
    if (!(fraction > 0)) {
        out.log.push_back(fmt::format("skipped {}: no row with arrays of {:.0f} MiB or more", fmt::join(ids, ", "),
                                      kStreamMinArrayBytes / (1 << 20)));
        return;
    }
    const double median_gbps = fraction * gpu.memory_bandwidth / 1e9;
    const double rounded = std::round(fraction * 10000) / 10000;  // as written
    if (rounded > 1 || !(rounded > 0))
        throw ConfigError(base_file, "$.cluster.gpu.hbm_TBps",
                          fmt::format("{} ({}, measured on {}) reach a median of {:.5g} GB/s, {:.5g} of this HBM "
                                      "bandwidth ({:g} TB/s): a fraction must be in (0, 1]; is hbm_TBps the "
                                      "measured part's?",
                                      fmt::join(ids, ", "), fmt::join(files, ", "), fmt::join(gpus, ", "), median_gbps,
                                      fraction, gpu.memory_bandwidth / kTera));
    gpu_doc["stream_fraction"] = rounded;
    gpu_doc["stream_datasets"] = ids;
    ++out.fitted;
    std::size_t counted = 0;
    for (const auto& p : all.rows) counted += p.array_bytes >= kStreamMinArrayBytes;
    out.log.push_back(fmt::format("stream fraction: {:.4f} of {:g} TB/s (median {:.1f} GB/s), from {} {} with arrays "
                                  "of {:.0f} MiB or more of {} ({})",
                                  rounded, gpu.memory_bandwidth / kTera, median_gbps, counted,
                                  counted == 1 ? "row" : "rows", kStreamMinArrayBytes / (1 << 20), fmt::join(ids, ", "),
                                  fmt::join(gpus, ", ")));
    refits.push_back({"gpu.stream_fraction", ids});
}

// gpu.eager_kernels from the memory-bound kernels timed on this family (kernel files' element-wise,
// cross-entropy and fused-optimizer rows): each timed kind's median bytes at the streaming rate of
// `gpu` (the fraction fitted in this run, or the base's). A kind without rows keeps the base's
// figure, and the base's sets stay named beside the new ones. A table the base gives is bytes at
// the base's rate: where this run refitted the fraction, what it keeps moves to the new rate (the
// same time at another rate is other bytes).
void fit_eager(json& gpu_doc, const GpuSpec& base, const GpuSpec& gpu, const std::string& family,
               const GroundTruth& data, const CalibrateOptions& o, CalibrateResult& out, std::vector<Refit>& refits) {
    std::vector<const EagerKernelSet*> sets;
    std::vector<std::string> ids;
    std::set<std::string> gpus;
    std::set<EagerKernel> fitted_kinds;
    std::size_t rows = 0;
    for (const auto& s : data.eager) {
        if (!wanted(s.id, o) || !same_family(s.gpu, family)) continue;
        std::size_t timed = 0;
        for (const auto& p : s.rows)
            if (timed_kind(p.kind)) {
                ++timed;
                fitted_kinds.insert(p.kind);
            }
        if (timed == 0) continue;
        rows += timed;
        sets.push_back(&s);
        ids.push_back(s.id);
        gpus.insert(s.gpu);
    }
    const double rate = 1 / gpu.memory_seconds(1.0), moved = rate * base.memory_seconds(1.0);
    EagerKernelBytes start = base.eager_kernels;
    const bool rescaled = gpu_doc.contains("eager_kernels") && std::abs(moved - 1) > 1e-12;
    if (rescaled)
        for (const EagerKernel kind : kTimedKernels) {
            const PassBytes p = timed_figures(start, kind);
            set_timed_figures(start, kind, {p.forward * moved, p.backward * moved});
        }
    // As written: each figure to 0.01 (those fitted here are so already).
    const auto write = [&](const EagerKernelBytes& k, const std::vector<std::string>& datasets) {
        json table = json::object();
        const auto r = [](double v) { return std::round(v * 100) / 100; };
        for (const EagerKernel kind : kTimedKernels) {
            const PassBytes p = timed_figures(k, kind);
            table[std::string(timed_key(kind))] = kind == EagerKernel::adam
                                                      ? json(r(p.forward))
                                                      : json{{"forward", r(p.forward)}, {"backward", r(p.backward)}};
        }
        table["datasets"] = datasets;
        gpu_doc["eager_kernels"] = table;
    };
    if (sets.empty()) {
        if (rescaled) {
            write(start, base.eager_kernels.datasets);
            out.log.push_back(fmt::format("eager kernels: the base's table moved to the streaming rate fitted here, "
                                          "{:.1f} GB/s (x{:.4f})",
                                          rate / 1e9, moved));
            // Its figures changed: the base's line about them (the rate they were at) no longer holds.
            refits.push_back({"gpu.eager_kernels", base.eager_kernels.datasets});
        }
        return;
    }
    const EagerKernelBytes k = fit_eager_kernels(sets, rate, start);
    std::vector<std::string> datasets = ids, kept;
    for (const EagerKernel kind : kTimedKernels)
        if (!fitted_kinds.contains(kind)) kept.emplace_back(timed_key(kind));
    if (!kept.empty())  // the kinds kept are still the base's sets'
        for (const auto& d : base.eager_kernels.datasets)
            if (std::find(datasets.begin(), datasets.end(), d) == datasets.end()) datasets.push_back(d);
    write(k, datasets);
    ++out.fitted;
    out.log.push_back(fmt::format(
        "eager kernels: bytes an element at {:.1f} GB/s, norm {:g} / {:g}, dropout {:g} / {:g}, rotary {:g} / {:g}, "
        "loss {:g} / {:g} a logit, Adam {:g} x its count; from {} timed {} of {} ({}){}",
        rate / 1e9, k.norm.forward, k.norm.backward, k.dropout.forward, k.dropout.backward, k.rope.forward, k.rope.backward,
        k.loss.forward, k.loss.backward, k.adam, rows, rows == 1 ? "row" : "rows", fmt::join(ids, ", "),
        fmt::join(gpus, ", "),
        kept.empty() ? std::string()
                     : fmt::format("; kept from the base{}: {}", rescaled ? " (moved to this rate)" : "",
                                   fmt::join(kept, ", "))));
    refits.push_back({"gpu.eager_kernels", datasets});
}

// Megatron rows: the fp16 GEMM ceiling (the SC21 runs are fp16) fitted end to end so that the
// median error of the named rows is zero, written to gm; returns the rows' ids.
std::vector<std::string> fit_megatron_ceiling(json& gm, const json& cluster, const std::string& base_file,
                                              const std::string& family, const GroundTruth& data,
                                              const CalibrateOptions& o, CalibrateResult& out) {
    std::vector<std::pair<const MegatronSet*, const MegatronRow*>> rows;
    std::vector<std::string> names;
    for (const auto& set : data.megatron) {
        if (set.gpu != family || !wanted(set.id, o)) continue;
        for (const auto& row : set.rows) {
            names.push_back(row.model);
            if (std::find(o.megatron_rows.begin(), o.megatron_rows.end(), row.model) != o.megatron_rows.end())
                rows.push_back({&set, &row});
        }
    }
    for (const auto& want : o.megatron_rows)
        if (std::none_of(rows.begin(), rows.end(), [&](const auto& r) { return r.second->model == want; }))
            throw std::invalid_argument(fmt::format("no Megatron row \"{}\" of {} in the data; the rows are: {}", want,
                                                    family, names.empty() ? std::string("(none)") : fmt::format("{}", fmt::join(names, ", "))));
    json doc = cluster;
    auto median_error = [&](double e) {
        doc["cluster"]["gpu"]["gemm"]["efficiency_by_dtype"]["fp16"] = e;
        std::vector<double> errs;
        for (const auto& [set, row] : rows) errs.push_back(predict_megatron(*row, doc, base_file) / row->tflops_per_gpu - 1);
        return median_of(std::move(errs));
    };
    // Throughput rises with the ceiling: bisect for a median error of zero.
    double lo = 0.2, hi = 1.0;
    if (median_error(hi) <= 0) lo = hi;
    else if (median_error(lo) >= 0) hi = lo;
    for (int i = 0; i < 30 && hi - lo > 1e-5; ++i) {
        const double mid = (lo + hi) / 2;
        (median_error(mid) > 0 ? hi : lo) = mid;
    }
    const double e = std::round((lo + hi) / 2 * 10000) / 10000;
    gm["efficiency_by_dtype"]["fp16"] = e;
    ++out.fitted;
    std::vector<std::string> ids;
    for (const auto& [set, row] : rows) ids.push_back(megatron_row_id(*set, *row));
    out.log.push_back(fmt::format("gemm fp16 efficiency ceiling {:.4f}: fitted end to end so that the median error "
                                  "of Megatron rows {} is zero (the other rows stay held out)",
                                  e, fmt::join(ids, ", ")));
    return ids;
}

}  // namespace

namespace {

// The fused-attention curves (AttentionModel) of the family's kernel sets, per backend and
// head dimension; a base's curves for backends the data does not cover are kept.
void fit_attention_model(json& gpu_doc, const GpuSpec& gpu, const std::string& family, const GroundTruth& data,
                         const CalibrateOptions& o, CalibrateResult& out, std::vector<Refit>& refits) {
    std::vector<AttentionPoint> points;
    std::vector<std::string> ids, forwards;
    for (const auto& s : data.kernels) {
        if (!wanted(s.id, o) || !same_family(s.gpu, family)) continue;
        if (!s.held_out.empty()) {
            out.log.push_back(fmt::format("skipped attention ({}): its file holds it out ({}); it checks the curves, "
                                          "none is fitted to it",
                                          s.id, s.held_out));
            continue;
        }
        const auto before = points.size();
        for (const AttentionPoint& p : s.attention)
            if (!p.check_only) points.push_back(p);  // a forward alone checks a curve (fit_attention)
        (points.size() > before ? ids : forwards).push_back(s.id);
    }
    if (!forwards.empty())
        out.log.push_back(fmt::format("skipped attention ({}): forwards timed alone check the curves, none is fitted "
                                      "to them",
                                      fmt::join(forwards, ", ")));
    if (points.empty()) return;
    const DType d = gpu.peak_flops[static_cast<std::size_t>(DType::bf16)] > 0 ? DType::bf16 : DType::fp16;
    AttentionModel m = fit_attention(points, gpu.peak(d));
    if (m.backends.empty()) {
        out.log.push_back(fmt::format("skipped attention ({}): no backend has two shapes of one head dimension",
                                      fmt::join(ids, ", ")));
        return;
    }
    // A base's curve fitted to passes measured apart is not replaced by one fitted to sums only.
    std::vector<std::string> kept;
    for (auto& [backend, kernels] : m.backends)
        for (auto& k : kernels) {
            const AttentionKernel* b = gpu.attention.find(backend, k.head_dim);
            if (k.from_sums && b && b->head_dim == k.head_dim && !b->from_sums) {
                k = *b;
                kept.push_back(fmt::format("{} head dim {}", backend, k.head_dim));
            }
        }
    m.datasets = ids;
    json doc = attention_json(m);
    if (gpu_doc.contains("attention") && gpu_doc["attention"].is_object())
        for (const auto& [k, v] : gpu_doc["attention"].items())
            if (k != "datasets" && !doc.contains(k)) doc[k] = v;
    if (doc.contains("datasets") && gpu_doc.contains("attention") && gpu_doc["attention"].contains("datasets"))
        for (const auto& id : gpu_doc["attention"]["datasets"])  // the data of the base's kept curves
            if (std::find(doc["datasets"].begin(), doc["datasets"].end(), id) == doc["datasets"].end())
                doc["datasets"].push_back(id);
    gpu_doc["attention"] = doc;
    ++out.fitted;
    for (const auto& [backend, kernels] : m.backends)
        for (const auto& k : kernels) {
            const std::string name = fmt::format("{} head dim {}", backend, k.head_dim);
            if (std::find(kept.begin(), kept.end(), name) != kept.end()) {
                out.log.push_back(fmt::format("attention {}: kept as the base has it, fitted to passes measured apart, "
                                              "not to the data's sums",
                                              name));
                continue;
            }
            // The fit's own error on the points it was fitted to, as the log's evidence.
            std::vector<double> errs;
            GpuSpec g = gpu;
            g.attention = m;
            for (const auto& p : points) {
                if (p.backend != backend || static_cast<int>(p.head_dim) != k.head_dim || p.combined != k.from_sums) continue;
                for (const AttentionPass pass : attention_passes(p))
                    errs.push_back(std::abs(*attention_predicted_seconds(g, p, pass, d) / attention_measured_seconds(p, pass) - 1));
            }
            std::sort(errs.begin(), errs.end());
            auto tiles = [](const AttentionCurve& c) {
                if (!(c.half_tiles > 0)) return std::string();
                return fmt::format(" and {:.0f} tiles{}", c.half_tiles,
                                   c.half_tiles >= kMaxAttentionHalfTiles ? " (the end of the grid searched)" : "");
            };
            out.log.push_back(fmt::format(
                "attention {}: forward efficiency {:.4f} half at {:.0f} tokens{}, backward {:.4f} at {:.0f}{}{} "
                "({} points; |error| median {:.1f} %, max {:.1f} %)",
                name, k.forward.efficiency, k.forward.half_seq, tiles(k.forward), k.backward.efficiency,
                k.backward.half_seq, tiles(k.backward),
                k.from_sums ? " (one curve, fitted to forward + backward sums)" : "", errs.size(),
                errs.empty() ? 0.0 : 100 * errs[errs.size() / 2], errs.empty() ? 0.0 : 100 * errs.back()));
        }
    refits.push_back({"gpu.attention", doc.value("datasets", std::vector<std::string>{})});
}

}  // namespace

CalibrateResult calibrate(const json& base, const std::string& base_file, const GroundTruth& data,
                          const CalibrateOptions& o) {
    CalibrateResult out;
    out.cluster = base;
    json& cl = out.cluster["cluster"];
    const Cluster c = make_cluster(base, base_file);
    // The fits are of the part at its TDP; a base with a limit would have it applied to the fitted
    // efficiencies and then again to every prediction.
    if (c.gpu.tensor_clock_scale() < 1)
        throw ConfigError(base_file, "$.cluster.gpu.power_limit_W",
                          "calibrate fits the part as measured at its TDP; remove the power limit from the base "
                          "and give it where the limited part runs (a run's config, a data set's overrides)");
    const std::string family = gpu_family(c.gpu.name);
    if (family.empty())
        throw ConfigError(base_file, "$.cluster.gpu.name",
                          fmt::format("cannot tell the GPU family of \"{}\" (expected a name like H100-SXM)", c.gpu.name));
    std::vector<Refit> refits;
    fit_collective_curves(cl, base_file, family, data, o, out, refits);

    json& gm = cl["gpu"]["gemm"];
    const int fitted_before_gemm = out.fitted;
    std::vector<std::string> all = fit_gemm_model(gm, c.gpu, family, data, o, out);
    if (!o.megatron_rows.empty()) {
        const auto rows = fit_megatron_ceiling(gm, out.cluster, base_file, family, data, o, out);
        all.insert(all.end(), rows.begin(), rows.end());
    }
    const bool fitted_gemm = out.fitted > fitted_before_gemm;
    // Parameters an earlier calibration fitted and this one left alone keep their data sets.
    if (gm.contains("datasets") && gm["datasets"].is_array())
        for (const auto& d : gm["datasets"])
            if (d.is_string() && std::find(all.begin(), all.end(), d.get<std::string>()) == all.end())
                all.push_back(d.get<std::string>());
    if (!all.empty()) gm["datasets"] = all;
    if (fitted_gemm) refits.push_back({"gpu.gemm", all});
    fit_power_clock(cl["gpu"], make_cluster(out.cluster, base_file).gpu, family, data, o, out, refits);
    fit_attention_model(cl["gpu"], c.gpu, family, data, o, out, refits);
    fit_stream(cl["gpu"], c.gpu, base_file, family, data, o, out, refits);
    fit_eager(cl["gpu"], c.gpu, make_cluster(out.cluster, base_file).gpu, family, data, o, out, refits);
    if (out.fitted == 0) {
        // Nothing fitted: the written cluster would be the base, unchanged. Say why.
        std::vector<std::string> used;
        for (const auto& s : data.collectives)
            if (wanted(s.id, o)) used.push_back(fmt::format("{} ({})", s.id, gpu_family(s.gpu)));
        for (const auto& s : data.gemms)
            if (wanted(s.id, o)) {
                std::set<std::string> families;
                for (const auto& p : s.rows) families.insert(family_any_case(p.gpu));
                used.push_back(fmt::format("{} ({})", s.id, fmt::join(families, ", ")));
            }
        for (const auto& s : data.megatron)
            if (wanted(s.id, o)) used.push_back(fmt::format("{} ({})", s.id, s.gpu));
        for (const auto& s : data.streams)
            if (wanted(s.id, o)) used.push_back(fmt::format("{} ({})", s.id, gpu_family(s.gpu)));
        for (const auto& s : data.eager)
            if (wanted(s.id, o)) used.push_back(fmt::format("{} ({})", s.id, gpu_family(s.gpu)));
        std::vector<std::string> skipped;
        for (const auto& line : out.log)
            if (line.rfind("skipped ", 0) == 0) skipped.push_back(line);
        throw std::invalid_argument(
            skipped.empty()
                ? fmt::format("nothing to fit: no data set is of the GPU family of {} ({}); the data sets used: {}",
                              base_file, family, used.empty() ? std::string("none") : fmt::format("{}", fmt::join(used, ", ")))
                : fmt::format("nothing was fitted to {}: {}", base_file, fmt::join(skipped, "; ")));
    }
    // The base's lines but those about a parameter fitted here (about_refit), then one line for each.
    std::vector<std::string> sources;
    if (cl.contains("source") && cl["source"].is_array())
        for (const auto& s : cl["source"]) {
            const std::string text = s.is_string() ? s.get<std::string>() : s.dump();
            if (std::none_of(refits.begin(), refits.end(), [&](const Refit& r) { return about_refit(text, r); }))
                sources.push_back(text);
        }
    for (const Refit& r : refits)
        sources.push_back(fmt::format("{}: dtsim calibrate on {}", r.key, fmt::join(r.datasets, ", ")));
    cl["source"] = sources;
    // The result must load as it is.
    (void)make_cluster(out.cluster, base_file + " (calibrated)");
    return out;
}

}  // namespace dtsim::hw::calib
