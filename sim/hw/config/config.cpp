#include "dtsim/hw/config.hpp"

#include "dtsim/hw/strategies.hpp"
#include "dtsim/puzzle/registry.hpp"
#include "hw/config/reading.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <filesystem>
#include <map>
#include <span>
#include <stdexcept>
#include <string_view>

namespace dtsim::hw {

namespace fs = std::filesystem;
using json = nlohmann::json;

ConfigError::ConfigError(std::string file_, std::string path_, const std::string& message)
    : std::runtime_error(path_.empty() ? fmt::format("{}: {}", file_, message)
                                       : fmt::format("{}: {}: {}", file_, path_, message)),
      file(std::move(file_)),
      path(std::move(path_)) {}

const json_reader::Dialect& config_dialect() {
    static const json_reader::Dialect dialect{
        .raise = [](const std::string& file, const std::string& path, const std::string& message) {
            throw ConfigError(file, path, message);
        }};
    return dialect;
}

int Config::microbatches() const {
    if (strategy.microbatches > 0) return strategy.microbatches;
    return training.global_batch / (training.micro_batch * strategy.dp);
}

std::string recompute_text(const StrategyConfig& s) {
    std::string text{recompute_name(s.recompute)};
    if (s.recompute == Recompute::none) return text;
    if (s.recompute_every > 1) {
        const int k = s.recompute_every;
        const bool teen = k % 100 >= 11 && k % 100 <= 13;
        const char* suffix = teen ? "th" : k % 10 == 1 ? "st" : k % 10 == 2 ? "nd" : k % 10 == 3 ? "rd" : "th";
        return fmt::format("{} every {}{} layer", text, k, suffix);
    }
    if (s.recompute_num_layers > 0)
        return fmt::format("{}, the first {} layer{} of each chunk", text, s.recompute_num_layers,
                           s.recompute_num_layers == 1 ? "" : "s");
    return text;
}

LayerSplit layer_split(const Config& c) {
    const StrategyConfig& s = c.strategy;
    const StrategyInfo* info = find_hw_strategy(s.name);
    // PyTorch's strategies keep PyTorch's loss with tp > 1 as well. torchtitan turns loss_parallel
    // on whenever TP is (apply_tp(..., loss_parallel=not parallelism.disable_loss_parallel) in
    // torchtitan/models/llama3/infra/parallelize.py): the output layer keeps its logits sharded
    // over the vocabulary (ColwiseParallel, output_layouts=Shard(-1)) and the loss runs on the
    // local shard, but upcast to an fp32 copy first with its fp32 log-probabilities kept for the
    // backward (torchtitan/components/loss.py, cross_entropy_loss: pred.to_local().float() into
    // _LossParallelCrossEntropy). That is the pytorch per-logit pattern of loss_bytes_per_logit on V / tp
    // logits (both patterns are priced per GPU on V / tp), not Megatron-LM's in-place softmax.
    const CrossEntropy loss =
        s.cross_entropy.value_or(info && info->pytorch ? CrossEntropy::pytorch : CrossEntropy::megatron);
    // Megatron-LM tells Transformer Engine which microbatch is the first of a step
    // (is_first_microbatch), so its fp8 weight copies are made once a step; PyTorch's own data
    // parallelism (Composer, llm-foundry) does not.
    const bool weight_cache = s.fp8 == Fp8::te && !(info && info->pytorch);
    LayerSplit split{c.training.micro_batch, s.tp,         s.sequence_parallel, s.recompute, s.flash_attention,
                     s.attention_kernel,     s.grad_dtype, loss,                 s.fp8,       weight_cache};
    split.cp = s.cp;
    split.compiled = s.compile;
    split.repeat_kv = s.repeat_kv;
    split.composed_norm = s.composed_norm;
    // A SwiGLU model (the Llama form) rotates its queries and keys: in PyTorch's modules as torchtitan
    // does, in Megatron-Core's with Transformer Engine's kernel.
    const bool rotates = c.model.spec.mlp == Mlp::swiglu;
    const bool pytorch_code = pytorch_modules(s);
    split.rope = s.rope_kernel.value_or(!rotates       ? RopeKernel::none
                                        : pytorch_code ? RopeKernel::complex
                                                       : RopeKernel::fused);
    split.elementwise =
        s.elementwise_kernels.value_or(pytorch_code ? ElementwiseKernels::eager : ElementwiseKernels::fused);
    // Megatron-Core's context parallelism over a ring is Transformer Engine's (every strategy but
    // PyTorch's own modules); PyTorch's own modules run PyTorch's (torchtitan's), by either method.
    split.te_context_parallel = s.cp > 1 && s.cp_comm == ContextComm::ring && !pytorch_code;
    split.pytorch_context_parallel = pytorch_context_parallel(s);
    split.cp_gather = s.cp_comm == ContextComm::allgather;
    split.userbuffers = te_userbuffers(s);
    if (split.userbuffers) split.ub = s.tp_overlap;
    split.optimizer_dtype = s.optimizer_dtype;
    split.apex_optimizer = s.distributed_optimizer == "apex";
    split.recompute_every = s.recompute_every;
    split.recompute_num_layers = s.recompute_num_layers;
    split.recompute_early_stop = recompute_early_stop(s);
    const std::vector<int> chunks = stage_layers_of(c, model_chunks(c));
    int start = 0;
    for (int n : chunks) {
        split.chunk_starts.push_back(start);
        start += n;
    }
    return split;
}

namespace {
// Model chunks (virtual stages) on each pipeline rank: the schedule's own count, the config's
// "chunks" where the strategy takes them, 1 otherwise.
int chunks_per_rank(const StrategyInfo& info, const StrategyConfig& s) {
    return info.fixed_chunks > 0 ? info.fixed_chunks : info.chunks ? s.chunks : 1;
}
}  // namespace

int model_chunks(const Config& c) {
    const StrategyConfig& s = c.strategy;
    const StrategyInfo* info = find_hw_strategy(s.name);
    if (!info || info->pipeline == PipelineKind::none) return 1;
    if (!s.stage_layers.empty()) return static_cast<int>(s.stage_layers.size());
    const int per_rank = chunks_per_rank(*info, s);
    return static_cast<int>(std::clamp(static_cast<long long>(s.pp) * per_rank, 1LL, static_cast<long long>(INT_MAX)));
}

bool uneven_stages(const StrategyConfig& s) {
    return !s.stage_layers.empty() || s.first_stage_layers > 0 || s.last_stage_layers > 0 || s.account_for_embedding ||
           s.account_for_loss;
}

std::vector<int> stage_layers_of(const Config& c, int stages) {
    const StrategyConfig& s = c.strategy;
    const int layers = c.model.spec.layers;
    stages = std::max(1, stages);
    const std::vector<int> even(static_cast<std::size_t>(stages), layers / stages);
    if (!s.stage_layers.empty()) return static_cast<int>(s.stage_layers.size()) == stages ? s.stage_layers : even;
    if (s.account_for_embedding || s.account_for_loss) {
        // Megatron-LM's --account-for-embedding-in-pipeline-split and --account-for-loss-in-pipeline-
        // split (megatron/core/transformer/transformer_block.py, get_num_layers_to_build): the edges
        // count as layers of the first and last model chunk.
        const int e = s.account_for_embedding ? 1 : 0, l = s.account_for_loss ? 1 : 0;
        const long long total = static_cast<long long>(layers) + e + l;
        if (total % stages != 0) return even;  // (load_config says why)
        std::vector<int> out(static_cast<std::size_t>(stages), static_cast<int>(total / stages));
        out.front() -= e;
        out.back() -= l;
        return out;
    }
    if (s.first_stage_layers <= 0 && s.last_stage_layers <= 0) return even;
    // Megatron-LM's uneven pipeline (megatron/core/transformer/transformer_block.py,
    // get_num_layers_to_build; transformer_layer.py, get_transformer_layer_offset): the first
    // (last) pipeline rank holds the given layers, the middle ranks the rest in equal shares,
    // and with virtual pipelining each rank's layers split evenly over its chunks, chunk c of
    // rank r being model chunk c x pp + r.
    const int pp = s.pp;
    if (pp < 2 || stages % pp != 0) return even;
    const int v = stages / pp;
    const bool first = s.first_stage_layers > 0, last = s.last_stage_layers > 0;
    const int middle = pp - (first ? 1 : 0) - (last ? 1 : 0);
    const int rest = layers - s.first_stage_layers - s.last_stage_layers;
    std::vector<int> rank(static_cast<std::size_t>(pp), middle > 0 ? rest / middle : 0);
    if (first) rank.front() = s.first_stage_layers;
    if (last) rank.back() = s.last_stage_layers;
    std::vector<int> out(static_cast<std::size_t>(stages));
    for (int k = 0; k < stages; ++k) out[static_cast<std::size_t>(k)] = rank[static_cast<std::size_t>(k % pp)] / v;
    return out;
}

namespace {

using Node = json_reader::Value;

std::string display(const fs::path& p) { return p.lexically_normal().generic_string(); }

// The names a config's strategy may have, from the registry, in its order.
std::span<const std::string_view> strategy_names() {
    static const std::vector<std::string_view> names = [] {
        std::vector<std::string_view> out;
        for (const auto& s : hw_strategies()) out.push_back(s.name);
        return out;
    }();
    return names;
}

// The puzzle strategies' names (strategy "puzzle"), from the puzzle registry, in its order.
std::span<const std::string_view> puzzle_names() {
    static const std::vector<std::string_view> names = [] {
        std::vector<std::string_view> out;
        for (const auto& p : puzzle::puzzles()) out.push_back(p.name);
        return out;
    }();
    return names;
}

const StrategyInfo& strategy_info(const std::string& name) {
    const StrategyInfo* s = find_hw_strategy(name);
    if (!s) throw std::logic_error(fmt::format("strategy \"{}\" passed the config's check but is not registered", name));
    return *s;
}

// ------------------------------------------------------ one from_json per struct

// An array of strings; `array` and `item` say what was expected of it and of each; `nonempty`: no "".
std::vector<std::string> read_strings(const Node& n, std::string_view array, std::string_view item,
                                      bool nonempty = false) {
    if (!n.is_array()) n.expected(array);
    std::vector<std::string> out;
    for (std::size_t i = 0; i < n.size(); ++i) {
        const Node s = n.at(i);
        if (!s.json().is_string() || (nonempty && s.string().empty())) s.expected(item);
        out.push_back(s.string());
    }
    return out;
}

// "datasets": ["id", ...], the measurements a fit came from.
std::vector<std::string> read_datasets(const Node& n) {
    return read_strings(n, "an array of data set ids", "a data set id (a string)");
}

void from_json(const Node& n, GemmModel& g) {
    n.keys({"max_efficiency", "overhead_us", "bandwidth_fraction", "efficiency_by_dtype", "datasets"});
    if (n.has("max_efficiency")) g.max_efficiency = n["max_efficiency"].fraction();
    if (n.has("overhead_us")) g.overhead_s = n["overhead_us"].real(ranges::latency_us) * kMicro;
    if (n.has("bandwidth_fraction")) g.bandwidth_fraction = n["bandwidth_fraction"].fraction();
    if (n.has("efficiency_by_dtype")) {
        const Node e = n["efficiency_by_dtype"];
        e.keys({"fp32", "tf32", "bf16", "fp16", "fp8"});
        for (const auto& [k, v] : e.members())
            g.dtype_efficiency[static_cast<std::size_t>(*parse_dtype(k))] = v.fraction();
    }
    if (n.has("datasets")) g.datasets = read_datasets(n["datasets"]);
}

// "attention": {"flash2": [{"head_dim": 128, "min_tiles": n1, "forward": {"efficiency": e, "half_seq": s0, "half_tiles": n0},
//                            "backward": {...}}, ...], "cudnn": [...], "flash1": [...], "datasets": [...]}
void from_json(const Node& n, AttentionModel& a) {
    n.keys({"flash2", "cudnn", "flash1", "datasets"});
    for (const auto& [name, list] : n.members()) {
        if (name == "datasets") {
            a.datasets = read_datasets(list);
            continue;
        }
        if (!list.is_array() || list.size() == 0) list.expected("a non-empty array of curves by head dimension");
        std::vector<AttentionKernel>& out = a.backends[std::string(name)];
        for (std::size_t i = 0; i < list.size(); ++i) {
            const Node k = list.at(i);
            k.keys({"head_dim", "forward", "backward", "from_sums", "min_tiles"});
            AttentionKernel kernel;
            kernel.head_dim = static_cast<int>(k["head_dim"].integer(1));
            if (k.has("from_sums")) kernel.from_sums = k["from_sums"].boolean();
            if (k.has("min_tiles")) kernel.min_tiles = k["min_tiles"].real(ranges::count);
            for (const auto& [dir, curve] : {std::pair{"forward", &kernel.forward}, {"backward", &kernel.backward}}) {
                const Node c = k[dir];
                c.keys({"efficiency", "half_seq", "half_tiles"});
                curve->efficiency = c["efficiency"].fraction();
                curve->half_seq = c["half_seq"].real(ranges::tokens);
                if (c.has("half_tiles")) curve->half_tiles = c["half_tiles"].real(ranges::count);
            }
            out.push_back(kernel);
        }
    }
}

void from_json(const Node& n, GpuSpec& g) {
    n.keys({"name", "peak_tflops", "hbm_GiB", "hbm_TBps", "stream_fraction", "stream_datasets", "eager_kernels", "tdp_W",
            "power_limit_W", "power_clock", "sms", "collectives_take_sms", "gemm", "attention"});
    g.name = n.has("name") ? n["name"].string() : "gpu";
    const Node peaks = n["peak_tflops"];
    peaks.keys({"fp32", "tf32", "bf16", "fp16", "fp8"});
    for (const auto& [k, v] : peaks.members())
        g.peak_flops[static_cast<std::size_t>(*parse_dtype(k))] = v.real(ranges::peak_tflops) * kTera;
    g.memory_bytes = n["hbm_GiB"].real(ranges::memory_GiB) * kGiB;
    g.memory_bandwidth = n["hbm_TBps"].real(ranges::memory_TBps) * kTera;
    g.stream_fraction = n.has("stream_fraction") ? n["stream_fraction"].fraction() : kStreamFraction;
    g.stream_datasets = n.has("stream_datasets") ? read_datasets(n["stream_datasets"]) : std::vector<std::string>{};
    g.eager_kernels = EagerKernelBytes{};
    if (n.has("eager_kernels")) {
        // {"norm": {"forward": b, "backward": b}, "dropout", "rope", "loss": the same, "adam": factor,
        //  "datasets": [...]}: any kind left out keeps the H100's figures.
        const Node ek = n["eager_kernels"];
        if (!ek.is_object()) ek.expected("an object of timed kernel bytes (norm, dropout, rope, loss, adam) and datasets");
        std::vector<std::string_view> keys;
        for (const EagerKernel kind : kTimedKernels) keys.push_back(timed_key(kind));
        keys.push_back("datasets");
        ek.keys(keys);
        for (const EagerKernel kind : kTimedKernels) {
            const std::string key(timed_key(kind));
            if (!ek.has(key)) continue;
            const Node p = ek[key];
            if (kind == EagerKernel::adam) {
                set_timed_figures(g.eager_kernels, kind, {p.real(ranges::kernel_factor), 0});
                continue;
            }
            if (!p.is_object()) p.expected("an object of forward and backward bytes an element");
            p.keys({"forward", "backward"});
            set_timed_figures(g.eager_kernels, kind,
                              {p["forward"].real(ranges::kernel_bytes), p["backward"].real(ranges::kernel_bytes)});
        }
        if (ek.has("datasets")) g.eager_kernels.datasets = read_datasets(ek["datasets"]);
    }
    g.tdp_watts = n.has("tdp_W") ? n["tdp_W"].real(ranges::power_W) : 0;
    g.power_limit_watts = 0;
    if (n.has("power_limit_W")) {
        const Node limit = n["power_limit_W"];
        g.power_limit_watts = limit.real(ranges::power_W);
        if (g.tdp_watts == 0)
            limit.fail("a power limit needs the part's TDP: give $.cluster.gpu.tdp_W (the datasheet's maximum board "
                       "power) too");
        if (g.power_limit_watts > g.tdp_watts)
            limit.fail(fmt::format("{:g} W is above the part's TDP of {:g} W (tdp_W): a power limit can only lower the "
                                   "board power",
                                   g.power_limit_watts, g.tdp_watts));
    }
    g.power_exponent = 0;
    g.power_datasets.clear();
    if (n.has("power_clock")) {
        // {"exponent": k, "datasets": [...]}: tensor clock ~ power^k, fitted by dtsim calibrate.
        const Node pc = n["power_clock"];
        if (!pc.is_object()) pc.expected("an object of exponent and datasets");
        pc.keys({"exponent", "datasets"});
        g.power_exponent = pc["exponent"].real(ranges::power_exponent);
        if (pc.has("datasets")) g.power_datasets = read_datasets(pc["datasets"]);
    }
    g.sms = n.has("sms") ? n["sms"].integer(1) : 0;
    g.collectives_take_sms = n.has("collectives_take_sms") ? n["collectives_take_sms"].boolean() : true;
    if (n.has("gemm")) from_json(n["gemm"], g.gemm);
    if (n.has("attention")) from_json(n["attention"], g.attention);
}


// One measured curve, under the key "<op>" (NCCL's own algorithm choice) or
// "<op>@<algorithm>" (NCCL_ALGO forced), see CollectiveFit:
//   {"ranks": 16, "nodes": 2, "per_node": 8, "min_bytes": 65536,
//    "lines": [[latency_us, bus_bandwidth_GBps], ...], "datasets": [...]}
void from_json(const Node& n, const std::string& key, CollectiveFit& f) {
    n.keys({"ranks", "nodes", "per_node", "min_bytes", "lines", "datasets"});
    const auto at = key.find('@');
    f.op = key.substr(0, at);
    static const std::vector<std::string> ops{"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce",
                                              "sendrecv"};
    if (std::find(ops.begin(), ops.end(), f.op) == ops.end())
        n.fail(fmt::format("unknown operation \"{}\"; expected all_reduce, all_gather, reduce_scatter, broadcast, "
                           "reduce or sendrecv, optionally followed by @ring, @tree or @nvls",
                           json_reader::shorten(f.op)));
    f.algorithm = Algorithm::automatic;
    if (at != std::string::npos) {
        const std::string a = key.substr(at + 1);
        if (a == "ring") f.algorithm = Algorithm::ring;
        else if (a == "tree") f.algorithm = Algorithm::tree;
        else if (a == "nvls") f.algorithm = Algorithm::nvls;
        else if (a != "auto") n.fail(fmt::format("unknown algorithm \"{}\"; expected ring, tree, nvls or auto", json_reader::shorten(a)));
    }
    f.ranks = n["ranks"].integer(1);
    f.nodes = n.has("nodes") ? n["nodes"].integer(1) : 1;
    f.per_node = n.has("per_node") ? n["per_node"].integer(1) : f.ranks / f.nodes;
    f.min_bytes = n.has("min_bytes") ? n["min_bytes"].real(ranges::bytes) : 0;
    const Node lines = n["lines"];
    if (!lines.is_array() || lines.json().empty())
        lines.expected("a non-empty array of [latency_us, bus_bandwidth_GBps] pairs");
    for (std::size_t i = 0; i < lines.size(); ++i) {
        const Node line = lines.at(i);
        const json& p = line.json();
        if (!p.is_array() || p.size() != 2 || !p[0].is_number() || !p[1].is_number() || p[0].get<double>() < 0 ||
            !(p[1].get<double>() > 0))
            line.fail(fmt::format("expected [latency_us >= 0, bus_bandwidth_GBps > 0], found {}", p.dump()));
        const double latency = line.at(0).real(ranges::latency_us), bandwidth = line.at(1).real(ranges::bandwidth_GBps);
        f.lines.push_back(FitLine{latency * kMicro, bandwidth * kGB});
    }
    if (n.has("datasets")) f.datasets = read_datasets(n["datasets"]);
}

void from_json(const Node& n, Link& l) {
    n.keys({"name", "bandwidth_GBps", "p2p_bandwidth_GBps", "hop_latency_us", "nvls_bandwidth_GBps", "fits"});
    l.name = n.has("name") ? n["name"].string() : "";
    l.bandwidth = n["bandwidth_GBps"].real(ranges::bandwidth_GBps) * kGB;
    l.p2p_bandwidth = n.has("p2p_bandwidth_GBps") ? n["p2p_bandwidth_GBps"].real(ranges::bandwidth_GBps) * kGB : l.bandwidth;
    l.hop_latency = n["hop_latency_us"].real(ranges::latency_us) * kMicro;
    l.nvls_bandwidth = 0;  // 0: no NVLS
    if (const auto nvls = n.find("nvls_bandwidth_GBps")) {
        const double v = nvls->real(ranges::measured_GBps);
        if (v != 0) (void)nvls->real(ranges::bandwidth_GBps);
        l.nvls_bandwidth = v * kGB;
    }
    l.fits.clear();
    if (n.has("fits")) {
        const Node fits = n["fits"];
        if (!fits.is_object()) fits.expected("an object of measured curves by operation");
        for (const auto& [k, v] : fits.members()) {
            CollectiveFit f;
            from_json(v, std::string(k), f);
            l.fits.push_back(std::move(f));
        }
    }
}

Algorithm read_algorithm(const Node& n) {
    const std::string a = n.choice({"auto", "ring", "tree", "nvls"});
    if (a == "ring") return Algorithm::ring;
    if (a == "tree") return Algorithm::tree;
    if (a == "nvls") return Algorithm::nvls;
    return Algorithm::automatic;
}

void from_json(const Node& n, Cluster& c) {
    n.keys({"name", "gpu", "gpus_per_node", "nodes", "links", "collective_base_latency_us", "algorithm", "storage",
            "caveats"});
    c.name = n.has("name") ? n["name"].string() : "cluster";
    from_json(n["gpu"], c.gpu);
    c.gpus_per_node = n["gpus_per_node"].integer(1);
    c.nodes = n["nodes"].integer(1);
    if (static_cast<long long>(c.gpus_per_node) * c.nodes > INT_MAX)
        n["nodes"].fail(fmt::format("{} nodes x {} GPUs per node is more GPUs than dtsim counts (at most {})", c.nodes,
                                    c.gpus_per_node, INT_MAX));
    const Node links = n["links"];
    links.keys({"intra_node", "inter_node"});
    from_json(links["intra_node"], c.intra_node);
    if (links.has("inter_node")) {
        from_json(links["inter_node"], c.inter_node);
    } else {
        if (c.nodes > 1) links.fail("missing key \"inter_node\" (the cluster has more than one node)");
        c.inter_node = c.intra_node;
    }
    c.base_latency = n.has("collective_base_latency_us") ? n["collective_base_latency_us"].real(ranges::latency_us) * kMicro : 0;
    c.algorithm = n.has("algorithm") ? read_algorithm(n["algorithm"]) : Algorithm::automatic;
    if (n.has("caveats"))
        c.caveats = read_strings(n["caveats"], "an array of sentences (strings)", "a sentence (a non-empty string)", true);
    if (n.has("storage")) {
        // Checkpoint storage: aggregate write and read bandwidth, and each node's own link to it.
        const Node st = n["storage"];
        st.keys({"write_GBps", "read_GBps", "per_node_GBps"});
        c.storage.write_bandwidth = st["write_GBps"].real(ranges::bandwidth_GBps) * kGB;
        c.storage.read_bandwidth = st.has("read_GBps") ? st["read_GBps"].real(ranges::bandwidth_GBps) * kGB : c.storage.write_bandwidth;
        c.storage.node_bandwidth = st["per_node_GBps"].real(ranges::bandwidth_GBps) * kGB;
    }
}

void from_json(const Node& n, ModelConfig& m) {
    const std::string kind = n.has("kind") ? n["kind"].choice({"transformer", "puzzle"}) : "transformer";
    m.kind = kind;
    TransformerSpec& s = m.spec;
    if (kind == "puzzle") {
        // The puzzle model: LAYERS layers of hidden x hidden weights, batches of seq tokens.
        n.keys({"name", "kind", "layers", "hidden", "seq", "dtype"});
        s.name = n.has("name") ? n["name"].string() : "puzzle";
        s.layers = n["layers"].integer(1);
        s.hidden = n.has("hidden") ? n["hidden"].integer(1) : 512;
        s.seq = n.has("seq") ? n["seq"].integer(1) : 256;
        s.heads = s.kv_heads = 1;
        s.ffn = s.hidden;
        s.vocab = 0;
    } else {
        n.keys({"name", "kind", "layers", "hidden", "heads", "kv_heads", "ffn", "seq", "vocab", "dtype", "mlp",
                "tied_embeddings", "dropout"});
        s.name = n.has("name") ? n["name"].string() : "model";
        s.layers = n["layers"].integer(1);
        s.hidden = n["hidden"].integer(1);
        s.heads = n["heads"].integer(1);
        s.kv_heads = n.has("kv_heads") ? n["kv_heads"].integer(1) : s.heads;
        if (!n.has("ffn") && s.hidden > INT_MAX / 4)
            n["hidden"].fail(fmt::format("hidden {}: the default ffn, 4 x hidden, is more than {}; give \"ffn\"",
                                         s.hidden, INT_MAX));
        s.ffn = n.has("ffn") ? n["ffn"].integer(1) : 4 * s.hidden;
        s.seq = n["seq"].integer(1);
        s.vocab = n["vocab"].integer(0);
        s.mlp = n.has("mlp") && n["mlp"].choice({"gelu", "swiglu"}) == "swiglu" ? Mlp::swiglu : Mlp::gelu;
        s.tied_embeddings = n.has("tied_embeddings") ? n["tied_embeddings"].boolean() : true;
        if (n.has("dropout")) s.dropout = n["dropout"].boolean();
        if (s.hidden % s.heads != 0)
            n["hidden"].fail(fmt::format("hidden {} is not divisible by heads {}", s.hidden, s.heads));
        if (s.heads % s.kv_heads != 0)
            n["kv_heads"].fail(fmt::format("heads {} is not divisible by kv_heads {}", s.heads, s.kv_heads));
    }
    if (n.has("dtype")) s.dtype = *parse_dtype(n["dtype"].choice({"fp32", "tf32", "bf16", "fp16", "fp8"}));
}

void from_json(const Node& n, TrainingConfig& t) {
    n.keys({"global_batch", "micro_batch"});
    t.global_batch = n["global_batch"].integer(1);
    t.micro_batch = n.has("micro_batch") ? n["micro_batch"].integer(1) : 1;
}

// A flag of a ub_tp_comm_overlap_cfg: true or false, or 1 or 0 as NeMo's YAML gives them.
bool ub_flag(const Node& n) {
    if (n.json().is_number_integer() && (n.json() == 0 || n.json() == 1)) return n.json() == 1;
    if (!n.json().is_boolean()) n.expected("true or false (or 1 or 0)");
    return n.boolean();
}

// One overlap of a ub_tp_comm_overlap_cfg as Transformer Engine configures it.
struct UbEntry {
    std::string method;
    int num_sm = 0;
    bool margin = false, use_ce = true;
    [[nodiscard]] UbSms sms() const {
        const bool copy_engines = method == "ring_exchange" && use_ce;
        return UbSms{margin || copy_engines ? 0 : num_sm, margin ? num_sm : 0};
    }
};

// Transformer Engine's defaults for layer `i`, by its own method (get_default_config from TE 1.9;
// te2: from 2.0).
UbEntry ub_default(std::size_t i, bool te2) {
    const std::size_t role = i % kUbRoles;
    const std::string method = role >= 3 ? "bulk" : role == 1 ? "pipeline" : "ring_exchange";
    const bool ring = method == "ring_exchange";
    return UbEntry{method, ring ? 1 : 16, te2 && !ring, true};
}

// Transformer Engine's userbuffers overlaps from a ub_tp_comm_overlap_cfg (Megatron-LM's
// --tp-comm-overlap-cfg, NeMo's ub_tp_comm_overlap_cfg): per linear its method, num_sm,
// set_sm_margin and use_ce, the rest TE's defaults; "defaults" says whose ("te2" when not given).
UbConfig ub_config(const Node& n) {
    if (!n.is_object()) n.expected("an object of userbuffers overlaps by linear (qkv_fprop, ..., fc2_fprop)");
    std::vector<std::string_view> allowed(kUbLayerNames.begin(), kUbLayerNames.end());
    allowed.emplace_back("defaults");
    n.keys(allowed);
    const bool te2 = !n.has("defaults") || n["defaults"].choice({"te1", "te2"}) == "te2";
    UbConfig out{};
    for (std::size_t i = 0; i < kUbLayers; ++i) {
        UbEntry u = ub_default(i, te2);
        if (n.has(kUbLayerNames[i])) {
            const Node e = n[kUbLayerNames[i]];
            if (!e.is_object()) e.expected("an object: method, num_sm, set_sm_margin, use_ce, ...");
            e.keys({"method", "num_sm", "set_sm_margin", "use_ce", "cga_size", "num_splits", "aggregate", "atomic_gemm",
                    "fp8_buf", "is_reduce_scatter", "comm_priority", "gemm_priority",
                    "pipeline_rs_overlap_first_gemm"});
            // TE takes a given method's entry from the defaults of the layer's own method
            // (get_default_config, then update): only the method changes.
            if (e.has("method")) {
                const bool bulk_layer = u.method == "bulk", scatter = u.method == "pipeline";
                u.method = e["method"].choice({"bulk", "pipeline", "ring_exchange"});
                if (bulk_layer != (u.method == "bulk"))
                    e["method"].fail(
                        bulk_layer ? fmt::format("{} is a bulk overlap: dtsim models no other method for it",
                                                 kUbLayerNames[i])
                                   : fmt::format("\"bulk\" is for the first linears' backward GEMMs (qkv_dgrad, "
                                                 "qkv_wgrad, fc1_dgrad, fc1_wgrad), not {}",
                                                 kUbLayerNames[i]));
                if (u.method == "pipeline" && !scatter)
                    e["method"].fail(fmt::format("{} all-gathers: Transformer Engine pipelines only reduce-scatters "
                                                 "(proj_fprop, fc2_fprop); give \"ring_exchange\"",
                                                 kUbLayerNames[i]));
            }
            if (e.has("num_sm")) u.num_sm = e["num_sm"].integer(1);
            if (e.has("set_sm_margin")) u.margin = ub_flag(e["set_sm_margin"]);
            if (e.has("use_ce")) u.use_ce = ub_flag(e["use_ce"]);
            // Read for their form only: they change nothing dtsim prices (docs/configs.md).
            for (const char* k :
                 {"aggregate", "atomic_gemm", "fp8_buf", "is_reduce_scatter", "pipeline_rs_overlap_first_gemm"})
                if (e.has(k)) (void)ub_flag(e[k]);
            for (const char* k : {"cga_size", "num_splits"})
                if (e.has(k)) (void)e[k].integer(1);
            for (const char* k : {"comm_priority", "gemm_priority"})  // CUDA stream priorities: 0 or less
                if (e.has(k)) (void)e[k].integer();
        }
        out[i] = u.sms();
    }
    return out;
}

void from_json(const Node& n, StrategyConfig& s) {
    n.keys({"name", "dp", "tp", "pp", "cp", "cp_comm", "microbatches", "zero_stage", "bucket_MiB", "first_bucket_MiB", "overlap",
            "prefetch", "recompute", "sequence_parallel", "flash_attention", "attention_kernel", "algorithm", "puzzle",
            "chunks", "microbatch_group", "schedule_file", "sharding", "fsdp_impl", "grad_dtype", "optimizer_dtype", "distributed_optimizer", "overlap_param_gather", "cross_entropy", "tp_comm_overlap", "tp_comm_overlap_cfg", "tp_async_backward", "recompute_early_stop", "compile", "repeat_kv", "norm_kernel", "rope_kernel", "elementwise_kernels", "fp8", "recompute_every", "recompute_num_layers",
            "stage_layers", "first_stage_layers", "last_stage_layers", "account_for_embedding", "account_for_loss"});
    s.name = n["name"].choice(strategy_names());
    if (n.has("dp")) s.dp = n["dp"].integer(1);
    if (n.has("tp")) s.tp = n["tp"].integer(1);
    if (n.has("pp")) s.pp = n["pp"].integer(1);
    if (n.has("cp")) s.cp = n["cp"].integer(1);
    if (n.has("cp_comm"))
        s.cp_comm = n["cp_comm"].choice({"ring", "allgather"}) == "allgather" ? ContextComm::allgather : ContextComm::ring;
    if (n.has("microbatches")) s.microbatches = n["microbatches"].integer(1);
    if (n.has("zero_stage")) {
        s.zero_stage = n["zero_stage"].integer(0);
        if (s.zero_stage > 3) n["zero_stage"].expected("0, 1, 2 or 3");
    }
    if (n.has("bucket_MiB")) s.bucket_bytes = n["bucket_MiB"].real(ranges::bucket_MiB) * kMiB;
    if (n.has("first_bucket_MiB")) s.first_bucket_bytes = n["first_bucket_MiB"].real(ranges::bucket_MiB) * kMiB;
    if (n.has("overlap")) s.overlap = n["overlap"].boolean();
    if (n.has("prefetch")) s.prefetch = n["prefetch"].boolean();
    if (n.has("cross_entropy")) {
        const std::string ce = n["cross_entropy"].choice({"pytorch", "megatron", "fused"});
        s.cross_entropy = ce == "megatron" ? CrossEntropy::megatron
                          : ce == "fused"  ? CrossEntropy::fused
                                           : CrossEntropy::pytorch;
    }
    if (n.has("overlap_param_gather")) s.overlap_param_gather = n["overlap_param_gather"].boolean();
    if (n.has("recompute")) {
        const std::string r = n["recompute"].choice({"none", "selective", "selective_op", "full"});
        s.recompute = r == "full"           ? Recompute::full
                      : r == "selective"    ? Recompute::selective
                      : r == "selective_op" ? Recompute::selective_op
                                            : Recompute::none;
    }
    if (n.has("recompute_every")) s.recompute_every = n["recompute_every"].integer(1);
    if (n.has("recompute_num_layers")) s.recompute_num_layers = n["recompute_num_layers"].integer(1);
    if (n.has("sequence_parallel")) s.sequence_parallel = n["sequence_parallel"].boolean();
    if (n.has("tp_comm_overlap")) s.tp_comm_overlap = n["tp_comm_overlap"].boolean();
    if (n.has("tp_comm_overlap_cfg")) {
        s.tp_overlap = ub_config(n["tp_comm_overlap_cfg"]);
        s.tp_overlap_given = true;
    }
    if (n.has("tp_async_backward")) s.tp_async_backward = n["tp_async_backward"].boolean();
    if (n.has("recompute_early_stop")) s.recompute_early_stop = n["recompute_early_stop"].boolean();
    if (n.has("compile")) s.compile = n["compile"].boolean();
    if (n.has("repeat_kv")) s.repeat_kv = n["repeat_kv"].boolean();
    if (n.has("norm_kernel")) s.composed_norm = n["norm_kernel"].choice({"fused", "composed"}) == "composed";
    if (n.has("elementwise_kernels"))
        s.elementwise_kernels = n["elementwise_kernels"].choice({"eager", "fused"}) == "eager"
                                    ? ElementwiseKernels::eager
                                    : ElementwiseKernels::fused;
    if (n.has("rope_kernel")) {
        const std::string r = n["rope_kernel"].choice({"complex", "fused", "none"});
        s.rope_kernel = r == "complex" ? RopeKernel::complex : r == "fused" ? RopeKernel::fused : RopeKernel::none;
    }
    if (n.has("flash_attention")) s.flash_attention = n["flash_attention"].boolean();
    if (n.has("attention_kernel")) s.attention_kernel = n["attention_kernel"].choice({"flash2", "cudnn", "flash1"});
    if (n.has("fp8")) {
        const std::string f = n["fp8"].choice({"none", "te", "torchao"});
        s.fp8 = f == "te" ? Fp8::te : f == "torchao" ? Fp8::torchao : Fp8::none;
    }
    if (n.has("grad_dtype")) s.grad_dtype = *parse_dtype(n["grad_dtype"].choice({"fp32", "bf16", "fp16"}));
    if (n.has("optimizer_dtype"))
        s.optimizer_dtype = *parse_dtype(n["optimizer_dtype"].choice({"fp32", "bf16", "fp16"}));
    if (n.has("distributed_optimizer")) s.distributed_optimizer = n["distributed_optimizer"].choice({"megatron", "apex"});
    if (n.has("algorithm")) s.algorithm = read_algorithm(n["algorithm"]);
    if (n.has("puzzle")) s.puzzle = n["puzzle"].choice(puzzle_names());
    if (n.has("chunks")) s.chunks = n["chunks"].integer(1);
    if (n.has("microbatch_group")) s.microbatch_group = n["microbatch_group"].integer(1);
    if (n.has("stage_layers")) {
        const Node list = n["stage_layers"];
        if (!list.is_array() || list.size() == 0)
            list.expected("a list of the layers of each pipeline stage in model order (integers >= 1; the first "
                          "and last may be 0)");
        // The first and last stage may hold no layers: only the embedding, or only the output
        // layer and the loss (Llama 3's pipeline, Dubey et al. 2024, section 3.3.2; Megatron-LM's
        // --pipeline-model-parallel-layout with a stage of "E" or "L" alone).
        for (std::size_t i = 0; i < list.size(); ++i) {
            const Node entry = list.at(i);
            const int held = entry.integer(0);
            if (held == 0 && i != 0 && i + 1 != list.size())
                entry.fail("a stage between the first and the last holds at least one layer (only the first may "
                           "hold just the embedding, the last just the output layer and the loss)");
            s.stage_layers.push_back(held);
        }
    }
    if (n.has("first_stage_layers")) s.first_stage_layers = n["first_stage_layers"].integer(1);
    if (n.has("last_stage_layers")) s.last_stage_layers = n["last_stage_layers"].integer(1);
    if (n.has("account_for_embedding")) s.account_for_embedding = n["account_for_embedding"].boolean();
    if (n.has("account_for_loss")) s.account_for_loss = n["account_for_loss"].boolean();
    if (n.has("sharding")) s.sharding = n["sharding"].choice({"full", "grad_op", "hybrid"});
    if (n.has("fsdp_impl")) s.fsdp_impl = n["fsdp_impl"].choice({"fsdp2", "fsdp1", "megatron"});
    if (n.has("schedule_file")) {
        const Node f = n["schedule_file"];
        const std::string name = f.string();
        const std::string origin = f.file();
        // Relative to the file that names it; a --set value is relative to the working directory.
        const fs::path base = origin.rfind("--set", 0) == 0 ? fs::path() : fs::path(origin).parent_path();
        const fs::path path = fs::path(name).is_absolute() ? fs::path(name) : base / name;
        std::error_code ec;  // a path that cannot be looked at (a name too long) is not found either
        if (!fs::exists(path, ec))
            f.fail(fmt::format("schedule file \"{}\" not found (looked for {})", json_reader::shorten(name),
                               json_reader::shorten(display(path), 256)));
        s.schedule_file = display(path);
    }
}

// strategy.stage_layers, or Megatron-LM's first_stage_layers / last_stage_layers, against the
// model and the pipeline (transformer_config.py's checks of num_layers_in_first_pipeline_stage
// and num_layers_in_last_pipeline_stage, with the remainder named).
void check_uneven_stages(const Node& st, const Config& c, const StrategyInfo& info) {
    const StrategyConfig& s = c.strategy;
    const int layers = c.model.spec.layers;
    static constexpr const char* kAccounts[] = {"account_for_embedding", "account_for_loss"};
    for (const char* key : {"stage_layers", "first_stage_layers", "last_stage_layers", kAccounts[0], kAccounts[1]})
        if (st.has(key) && info.pipeline == PipelineKind::none)
            st[key].fail(fmt::format("splits a pipeline's layers over its stages, but strategy \"{}\" has no "
                                     "pipeline; use \"1f1b\", \"interleaved\" or another pipeline",
                                     s.name));
    const int per_rank = chunks_per_rank(info, s);
    const long long stages = static_cast<long long>(s.pp) * per_rank;
    const std::string chunks_text =
        per_rank > 1 ? fmt::format("pp x chunks = {} x {}", s.pp, per_rank) : fmt::format("pp = {}", s.pp);
    if (s.account_for_embedding || s.account_for_loss) {
        const Node at = st[s.account_for_embedding ? kAccounts[0] : kAccounts[1]];
        for (const char* key : {"stage_layers", "first_stage_layers", "last_stage_layers"})
            if (st.has(key))
                st[key].fail(fmt::format("give either \"{}\" or the split that counts the embedding and the loss "
                                         "as layers, not both",
                                         key));
        // A schedule file's stages are known once the file is read, after the per-chunk checks that
        // need them (recompute_num_layers): the file's own split, stage_layers, says it instead.
        if (info.schedule_file)
            at.fail("counts the edges over the pipeline's model chunks, but a schedule file places its stages "
                    "itself: give \"stage_layers\" (the layers of every stage in model order)");
        const int e = s.account_for_embedding ? 1 : 0, l = s.account_for_loss ? 1 : 0;
        const long long total = static_cast<long long>(layers) + e + l;
        if (total % stages != 0)
            at.fail(fmt::format("{} layers{}{} = {} cannot be split evenly into {}{} pipeline stages ({} % {} = {})",
                                layers, e ? " + the embedding" : "", l ? " + the loss" : "", total, chunks_text,
                                per_rank > 1 ? fmt::format(" = {}", stages) : "", total, stages, total % stages));
        return;
    }
    if (!s.stage_layers.empty()) {
        const Node list = st["stage_layers"];
        for (const char* key : {"first_stage_layers", "last_stage_layers"})
            if (st.has(key))
                st[key].fail("give either \"stage_layers\" (the layers of every stage) or Megatron-LM's "
                             "\"first_stage_layers\" / \"last_stage_layers\", not both");
        const int given = static_cast<int>(s.stage_layers.size());
        // A schedule file's stage count is checked once the file is read (make_plan).
        if (!info.schedule_file && given != stages)
            list.fail(fmt::format("expected {} entries, one per pipeline stage in model order ({}), found {}",
                                  stages, chunks_text, given));
        long long sum = 0;
        for (int n : s.stage_layers) sum += n;
        if (sum != layers)
            list.fail(fmt::format("the stages hold {} layers in all, but the model has {}", sum, layers));
        return;
    }
    const bool first = s.first_stage_layers > 0, last = s.last_stage_layers > 0;
    const Node at = last ? st["last_stage_layers"] : st["first_stage_layers"];
    if (info.fixed_chunks > 0 || info.schedule_file)
        at.fail(fmt::format("Megatron-LM's uneven split gives the first and last pipeline rank their layers, each "
                            "rank's chunks r, pp + r, ...; strategy \"{}\" places its stages otherwise: give "
                            "\"stage_layers\" (the layers of every stage in model order)",
                            s.name));
    if (s.pp < 2) at.fail(fmt::format("needs a pipeline of at least two stages, found pp = {}", s.pp));
    const auto per_chunk = [&](const char* key, int n, const char* which) {
        if (n % per_rank != 0)
            st[key].fail(fmt::format("{} layers on the {} pipeline rank cannot be split evenly over its {} chunks "
                                     "({} % {} = {})",
                                     n, which, per_rank, n, per_rank, n % per_rank));
    };
    if (first) per_chunk("first_stage_layers", s.first_stage_layers, "first");
    if (last) per_chunk("last_stage_layers", s.last_stage_layers, "last");
    const int middle = s.pp - (first ? 1 : 0) - (last ? 1 : 0);
    const long long rest = static_cast<long long>(layers) - s.first_stage_layers - s.last_stage_layers;
    const std::string left = first && last ? fmt::format("{} - {} - {} = {}", layers, s.first_stage_layers,
                                                         s.last_stage_layers, rest)
                                           : fmt::format("{} - {} = {}", layers, first ? s.first_stage_layers
                                                                                       : s.last_stage_layers,
                                                         rest);
    if (rest < 0)
        at.fail(fmt::format("takes more layers than the model's {}: {} left for the other stages", layers, left));
    if (middle == 0) {
        if (rest != 0)
            at.fail(fmt::format("with pp = 2 the first and last stage hold every layer, but they hold {} + {} of "
                                "the model's {} ({} left over)",
                                s.first_stage_layers, s.last_stage_layers, layers, rest));
        return;
    }
    const std::string others = fmt::format("{} other pipeline stage{}", middle, middle == 1 ? "" : "s");
    const long long needed = static_cast<long long>(middle) * per_rank;
    if (rest < needed)
        at.fail(fmt::format("leaves {} layers for the {}, which need at least {} (one a chunk)", left, others,
                            needed));
    if (rest % middle != 0)
        at.fail(fmt::format("leaves {} layers for the {}, which cannot share them evenly ({} % {} = {})", left,
                            others, rest, middle, rest % middle));
    if ((rest / middle) % per_rank != 0)
        at.fail(fmt::format("leaves {} layers for the {}: {} each, which cannot be split evenly over {} chunks "
                            "({} % {} = {})",
                            left, others, rest / middle, per_rank, rest / middle, per_rank,
                            (rest / middle) % per_rank));
}

// Sizes that must agree across sections, explained.
// Whether a value came from a --set (itself or a section above it), not from a file.
bool from_command_line(const Node& n) { return n.file().rfind("--set", 0) == 0; }

void validate(const Node& root, Config& c) {
    const Node st = root["strategy"];
    const StrategyConfig& s = c.strategy;
    const TransformerSpec& m = c.model.spec;
    if (!(c.cluster.gpu.peak_flops[static_cast<std::size_t>(m.dtype)] > 0)) {
        const Node model = root["model"];
        (model.has("dtype") ? model["dtype"] : model)
            .fail(fmt::format("the model computes in {} but the GPU {} has no peak for it in "
                              "$.cluster.gpu.peak_tflops; give \"{}\" there or choose another dtype",
                              dtype_name(m.dtype), c.cluster.gpu.name, dtype_name(m.dtype)));
    }
    if (s.fp8 != Fp8::none) {
        if (m.dtype == DType::fp8)
            st["fp8"].fail(fmt::format("float8 linears (\"{}\") run the linears in fp8 and the rest in the model's "
                                       "dtype, which is fp8 already; give the model \"dtype\": \"bf16\"",
                                       fp8_name(s.fp8)));
        if (!(c.cluster.gpu.peak_flops[static_cast<std::size_t>(DType::fp8)] > 0))
            st["fp8"].fail(fmt::format("float8 linears need fp8 GEMMs, but the GPU {} has no fp8 peak in "
                                       "$.cluster.gpu.peak_tflops (Hopper and later have them)",
                                       c.cluster.gpu.name));
    }
    const int gpus = c.cluster.gpus();
    auto where = [&](const char* key) { return st.has(key) ? st[key] : st; };
    // Point at whichever size was overridden on the command line, if one was.
    const char* culprit = "dp";
    for (const char* k : {"tp", "pp", "cp", "dp"})
        if (st.has(k) && from_command_line(st[k])) {
            culprit = k;
            break;
        }
    const std::string machine = fmt::format("the cluster {} has {} GPUs ({} node{} x {} GPUs per node)", c.cluster.name,
                                            gpus, c.cluster.nodes, c.cluster.nodes == 1 ? "" : "s",
                                            c.cluster.gpus_per_node);
    // 64-bit products: each size is an int, and tp x pp x dp may overflow one.
    const long long model_parallel = static_cast<long long>(s.tp) * s.pp * s.cp;
    if (model_parallel > gpus || model_parallel * s.dp != gpus) {
        // The sizes as the config gives them: cp only where it is used.
        const std::string names = s.cp > 1 ? "tp x cp x pp" : "tp x pp";
        const std::string sizes = s.cp > 1 ? fmt::format("{} x {} x {}", s.tp, s.cp, s.pp) : fmt::format("{} x {}", s.tp, s.pp);
        if (!st.has("dp"))
            where(culprit).fail(fmt::format("{} = {} = {} does not divide the GPU count: {}; data "
                                            "parallelism takes the GPUs left over when dp is not given",
                                            names, sizes, model_parallel, machine));
        const std::string product = model_parallel <= INT_MAX ? std::to_string(model_parallel * s.dp)
                                                              : fmt::format("{} x {}", model_parallel, s.dp);
        where(culprit).fail(fmt::format("{} x dp = {} x {} = {}, but {}; the product must equal the GPU count", names,
                                        sizes, s.dp, product, machine));
    }
    const StrategyInfo& info = strategy_info(s.name);
    const auto knob = [&](const char* key, bool wanted) {
        if (st.has(key) && !wanted)
            st[key].fail(fmt::format("strategy \"{}\" does not take \"{}\"", s.name, key));
    };
    if (s.tp_comm_overlap && !(s.sequence_parallel && s.tp > 1))
        st["tp_comm_overlap"].fail(fmt::format("overlaps the sequence-parallel all-gathers and reduce-scatters with "
                                               "the GEMMs (Megatron-LM's --tp-comm-overlap): it needs \"tp\" > 1 "
                                               "and \"sequence_parallel\": true (tp is {}, sequence_parallel {})",
                                               s.tp, s.sequence_parallel));
    // The SMs userbuffers take, given or TE's defaults, must leave the GEMMs some; without the GPU's
    // count, those an entry gives explicitly are refused (TE's defaults then take none). A
    // configuration that runs no userbuffers is accepted unused: it describes the software, and
    // the planner tries layouts without the overlap; dtsim run says so.
    if (te_userbuffers(s)) {
        const int sms = c.cluster.gpu.sms;
        const bool given = st.has("tp_comm_overlap_cfg");
        for (std::size_t i = 0; i < kUbLayers; ++i) {
            const int n = std::max(s.tp_overlap[i].held, s.tp_overlap[i].margin);
            const char* name = kUbLayerNames[i];
            if (n == 0 || (sms > 0 && n < sms)) continue;
            if (sms == 0) {
                if (!given || !st["tp_comm_overlap_cfg"].has(name)) continue;
                const Node e = st["tp_comm_overlap_cfg"][name];
                for (const char* k : {"num_sm", "set_sm_margin", "use_ce"})
                    if (e.has(k))
                        e[k].fail(fmt::format("{} SMs taken from the GEMMs need the GPU's SM count: give "
                                              "$.cluster.gpu.sms",
                                              n));
                continue;
            }
            const std::string what = fmt::format("{} takes {} SMs from the GEMMs, which leaves none of the GPU's {} "
                                                 "(cluster.gpu.sms)",
                                                 name, n, sms);
            if (!given) st["tp_comm_overlap"].fail(what + ": Transformer Engine 2's default");
            const Node cfg = st["tp_comm_overlap_cfg"];
            if (!cfg.has(name)) cfg.fail(what + ": Transformer Engine's default");
            (cfg[name].has("num_sm") ? cfg[name]["num_sm"] : cfg[name]).fail(what);
        }
    }
    if (s.distributed_optimizer == "apex" && (s.zero_stage < 1 || s.zero_stage > 2 || (info.pytorch)))
        st["distributed_optimizer"].fail(fmt::format(
            "\"apex\" is NeMo's distributed Adam (ZeRO stage 1 or 2 under Megatron's strategies); this strategy "
            "runs {}", info.pytorch ? fmt::format("PyTorch's own optimizer (\"{}\")", s.name)
                                    : fmt::format("ZeRO stage {}", s.zero_stage)));
    if (s.overlap_param_gather && (s.zero_stage < 1 || s.zero_stage > 2 || s.name == "fsdp"))
        st["overlap_param_gather"].fail(fmt::format(
            "overlaps the distributed optimizer's weight all-gather (ZeRO stage 1 or 2) with the forward; "
            "this strategy runs {}", s.name == "fsdp" ? "FSDP, which gathers each layer itself (see \"prefetch\")"
                                                     : fmt::format("ZeRO stage {}", s.zero_stage)));
    for (const char* key : {"recompute_every", "recompute_num_layers"})
        if (st.has(key) && s.recompute == Recompute::none)
            st[key].fail(fmt::format("chooses the layers \"recompute\" applies to, but recompute is \"none\""));
    if (st.has("recompute_every") && st.has("recompute_num_layers"))
        st["recompute_num_layers"].fail("give one of \"recompute_every\" (every k-th layer, torchtitan) and "
                                        "\"recompute_num_layers\" (the first n of each stage, Megatron-LM), not both");
    const bool uneven = uneven_stages(s);
    if (uneven) check_uneven_stages(st, c, info);
    if (s.recompute_num_layers > 0) {
        // (Layers that do not split evenly into chunks are reported below.)
        const int chunks = model_chunks(c);
        if (uneven || m.layers % chunks == 0) {
            const std::vector<int> split = stage_layers_of(c, chunks);
            const int largest = *std::max_element(split.begin(), split.end());
            if (s.recompute_num_layers > largest)
                st["recompute_num_layers"].fail(
                    uneven ? fmt::format("the first {} layers of each model chunk, but the largest chunk has {}",
                                         s.recompute_num_layers, largest)
                           : fmt::format("the first {} layers of each model chunk, but a chunk has {} ({} layers "
                                         "over pp x chunks)",
                                         s.recompute_num_layers, largest, m.layers));
        }
    }
    if (s.cp > 1) {
        if (!info.context_parallel)
            st["cp"].fail(fmt::format("strategy \"{}\" does not split sequences (cp must be 1, found {}); "
                                      "\"megatron\", \"fsdp\" and the pipelines do", s.name, s.cp));
        if (!s.flash_attention)
            st["cp"].fail("context parallelism runs the attention as a fused kernel on each ring step "
                          "(Transformer Engine's and torchtitan's do): it needs \"flash_attention\": true");
        if (m.seq % (2 * s.cp) != 0)
            st["cp"].fail(fmt::format("splits each sequence into 2 x cp = {} chunks (two a rank, for a balanced "
                                      "causal mask), but seq {} is not a multiple of {}",
                                      2 * s.cp, m.seq, 2 * s.cp));
        if (s.sharding == "hybrid")
            st["cp"].fail("hybrid sharding shards inside a node over the data-parallel ranks; it does not "
                          "combine with context parallelism here");
    }
    if (s.recompute == Recompute::selective_op && !s.flash_attention)
        st["recompute"].fail("\"selective_op\" (torchtitan's per-op policy) keeps the fused attention's output: "
                             "it needs \"flash_attention\": true");
    knob("chunks", info.chunks);
    knob("microbatch_group", info.microbatch_group);
    knob("schedule_file", info.schedule_file);
    knob("sharding", info.sharding);
    knob("fsdp_impl", info.sharding);
    if (info.schedule_file && !st.has("schedule_file"))
        st.fail("missing key \"schedule_file\" (the schedule to run, PyTorch action notation or CSV)");
    if (!uneven && (info.chunks || info.fixed_chunks > 0)) {
        const int v = chunks_per_rank(info, s);
        if (m.layers % (s.pp * v) != 0)
            where(info.fixed_chunks > 0 ? "pp" : "chunks")
                .fail(fmt::format("{} layers cannot be split evenly into pp x chunks = {} x {} = {} pipeline stages "
                                  "({} % {} = {})",
                                  m.layers, s.pp, v, s.pp * v, m.layers, s.pp * v, m.layers % (s.pp * v)));
    }
    if (!uneven && m.layers % s.pp != 0)
        where("pp").fail(fmt::format("{} layers cannot be split evenly into {} pipeline stages ({} % {} = {})",
                                     m.layers, s.pp, m.layers, s.pp, m.layers % s.pp));
    const bool puzzle_model = c.model.kind == "puzzle";
    if (puzzle_model != info.puzzle)
        st["name"].fail(puzzle_model ? fmt::format("the puzzle model runs only with strategy \"puzzle\", found \"{}\"", s.name)
                                     : "strategy \"puzzle\" needs a model of kind \"puzzle\"");
    if (info.puzzle) {
        if (s.tp != 1 || s.pp != 1)
            where("tp").fail("puzzle strategies place their own layers: set dp to the GPU count and leave tp and pp at 1");
        if (!st.has("puzzle")) st.fail("missing key \"puzzle\" (which puzzle strategy to run)");
        return;
    }
    if (s.tp > 1) {
        if (m.heads % s.tp != 0)
            where("tp").fail(fmt::format("{} attention heads cannot be split over tp = {}", m.heads, s.tp));
        if (m.ffn % s.tp != 0)
            where("tp").fail(fmt::format("ffn {} cannot be split over tp = {}", m.ffn, s.tp));
        if (m.kv_heads % s.tp != 0 && s.tp % m.kv_heads != 0)
            where("tp").fail(fmt::format("{} kv heads cannot be split over (or replicated across) tp = {}",
                                         m.kv_heads, s.tp));
    }
    // HYBRID_SHARD with TP (torchtitan's HSDP x TP): the shard group is the node's data-parallel
    // ranks, the GPUs of a node over tp (make_jobs); it takes whole tensor-parallel groups per node
    // and at least two of them, or nothing would be sharded.
    if (s.sharding == "hybrid" && s.tp > 1 && c.cluster.gpus_per_node % s.tp != 0)
        st["sharding"].fail(fmt::format("hybrid sharding shards over the data-parallel ranks of one node, but tp = {} "
                                        "does not divide the node's {} GPUs; choose a tp that does, or \"full\"",
                                        s.tp, c.cluster.gpus_per_node));
    if (s.sharding == "hybrid" && s.tp > 1 && s.dp > 1 && c.cluster.gpus_per_node == s.tp)
        st["sharding"].fail(fmt::format("hybrid sharding shards over the data-parallel ranks of one node, but tp = {} "
                                        "fills the node's {} GPUs: each shard group would be a single rank and nothing "
                                        "sharded; use \"full\" to shard over the nodes, or a smaller tp",
                                        s.tp, c.cluster.gpus_per_node));
    TrainingConfig& t = c.training;
    const Node tr = root["training"];
    const long long per_microbatch = static_cast<long long>(t.micro_batch) * s.dp;
    // The microbatches given on the command line and the global batch not: the global batch follows
    // them (a sweep of strategy.microbatches alone), whatever the file says it is.
    const bool batch_pinned = from_command_line(tr["global_batch"]);
    if (s.microbatches > 0 && from_command_line(st["microbatches"]) && !batch_pinned) {
        if (per_microbatch > INT_MAX / s.microbatches)
            st["microbatches"].fail(fmt::format("the global batch would follow the microbatches: microbatches x "
                                                "micro_batch x dp = {} x {} x {} sequences, more than dtsim counts "
                                                "(at most {})",
                                                s.microbatches, t.micro_batch, s.dp, INT_MAX));
        t.global_batch = static_cast<int>(s.microbatches * per_microbatch);
    }
    if (t.global_batch % per_microbatch != 0)
        tr["global_batch"].fail(fmt::format(
            "global batch {} is not a multiple of micro_batch x dp = {} x {} = {}", t.global_batch, t.micro_batch,
            s.dp, per_microbatch));
    const int derived = static_cast<int>(t.global_batch / per_microbatch);
    if (s.microbatches > 0 && s.microbatches != derived)
        st["microbatches"].fail(fmt::format("{} microbatches disagree with the training section: global_batch / "
                                            "(micro_batch x dp) = {} / ({} x {}) = {}{}",
                                            s.microbatches, t.global_batch, t.micro_batch, s.dp, derived,
                                            batch_pinned && from_command_line(st["microbatches"])
                                                ? fmt::format(" (the global batch given by {}; without it the "
                                                              "global batch follows the microbatches)",
                                                              tr["global_batch"].file())
                                                : ""));
    if (!info.tensor_parallel && info.pipeline == PipelineKind::none && (s.tp != 1 || s.pp != 1))
        where("tp").fail(fmt::format("strategy \"{}\" is pure data parallelism: tp and pp must be 1 (found tp {}, pp "
                                     "{}); use \"megatron\" or a pipeline (\"1f1b\", \"interleaved\", ...) to combine them",
                                     s.name, s.tp, s.pp));
    if (info.pipeline == PipelineKind::none && s.pp != 1)
        where("pp").fail(fmt::format("strategy \"{}\" has no pipeline: pp must be 1, found {}; use \"gpipe\" or "
                                     "\"1f1b\"",
                                     s.name, s.pp));
    if (info.min_zero_stage == info.max_zero_stage) {
        if (st.has("zero_stage") && s.zero_stage != info.min_zero_stage)
            st["zero_stage"].fail(fmt::format("strategy \"{}\" is ZeRO stage {}, found {}", s.name, info.min_zero_stage,
                                              s.zero_stage));
    } else if (s.zero_stage > info.max_zero_stage && !(s.zero_stage == 3 && info.zero3)) {
        if (info.zero3)
            st["zero_stage"].fail(fmt::format("strategy \"{}\" supports ZeRO stages 0, 1 (distributed optimizer) and "
                                              "3 (FSDP inside the pipeline stages), found {}",
                                              s.name, s.zero_stage));
        if (info.max_zero_stage == 2)
            st["zero_stage"].fail(fmt::format("strategy \"{}\" runs ZeRO stages 0, 1 and 2, found {}; use \"fsdp\" "
                                              "for stage 3",
                                              s.name, s.zero_stage));
        st["zero_stage"].fail(fmt::format("strategy \"{}\" supports ZeRO stages 0 and 1 (distributed optimizer), "
                                          "found {}",
                                          s.name, s.zero_stage));
    }
    if (s.sequence_parallel && s.tp == 1) st["sequence_parallel"].fail("sequence parallelism needs tp > 1");
}

// "stragglers": checked against the run's GPU count.
void read_stragglers(const Node& n, Config& c) {
    n.keys({"slowdown", "slow_memory_bound", "jitter"});
    Stragglers& st = c.stragglers;
    const int gpus = c.gpus();
    if (c.strategy.name == "puzzle") {
        // Named at its first value, which knows the file (or --set) it came from.
        Node first = n;
        while (first.is_object() && !first.json().empty()) first = first[first.json().begin().key()];
        first.fail("puzzle strategies run on the puzzle's own cost model; stragglers apply to the transformer strategies");
    }
    if (n.has("slowdown")) {
        const Node sd = n["slowdown"];
        if (!sd.is_object()) sd.expected("an object of ranks to factors, as {\"3\": 1.5, \"8-15\": 1.1}");
        std::map<int, std::string> named_by;
        for (const auto& [k, f] : sd.members()) {
            // "3" or "8-15"
            int lo = -1, hi = -1;
            const auto dash = k.find('-');
            auto number = [](std::string_view t) {
                if (t.empty() || t.size() > 9 || !std::all_of(t.begin(), t.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
                    return -1;
                return std::stoi(std::string(t));
            };
            lo = number(k.substr(0, dash));
            hi = dash == std::string::npos ? lo : number(k.substr(dash + 1));
            if (lo < 0 || hi < lo)
                f.fail(fmt::format("expected a rank or a range of ranks as the key (\"3\", \"8-15\"), found \"{}\"",
                                   json_reader::shorten(k)));
            if (hi >= gpus)
                f.fail(fmt::format("rank {} is not in this run's {} GPUs (ranks 0 to {})", hi, gpus, gpus - 1));
            const double factor = f.real(ranges::slowdown);
            for (int r = lo; r <= hi; ++r) {
                if (auto it = named_by.find(r); it != named_by.end())
                    f.fail(fmt::format("rank {} is already slowed by \"{}\"", r, it->second));
                named_by[r] = std::string(k);
                if (factor != 1) st.slowdown[r] = factor;  // 1: not a straggler (a sweep's baseline)
            }
        }
    }
    if (n.has("slow_memory_bound")) st.slow_memory_bound = n["slow_memory_bound"].boolean();
    if (n.has("jitter")) {
        const Node j = n["jitter"];
        j.keys({"distribution", "cv", "sigma", "seed"});
        const std::string d = j["distribution"].choice({"lognormal", "normal", "uniform"});
        Jitter& jt = st.jitter;
        jt.distribution = d == "lognormal" ? JitterDistribution::lognormal
                          : d == "normal"  ? JitterDistribution::normal
                                           : JitterDistribution::uniform;
        if (j.has("sigma")) {
            if (d != "lognormal") j["sigma"].fail(fmt::format("\"sigma\" is the lognormal's; give \"{}\" jitter a \"cv\"", d));
            if (j.has("cv")) j["sigma"].fail("give \"cv\" or \"sigma\", not both");
            jt.sigma = j["sigma"].real(ranges::jitter_sigma);
            jt.cv = Jitter::lognormal_cv(jt.sigma);
        } else {
            if (!j.has("cv")) j.fail(d == "lognormal" ? "missing key \"cv\" (or \"sigma\")" : "missing key \"cv\"");
            jt.cv = j["cv"].real(ranges::jitter_cv);
            jt.sigma = Jitter::lognormal_sigma(jt.cv);
            if (d == "normal" && jt.cv > 0.25)
                j["cv"].fail(fmt::format("expected a cv <= 0.25 for normal jitter (a duration must stay positive), found "
                                         "{}; use \"lognormal\"",
                                         jt.cv));
            if (d == "uniform" && jt.cv >= 1 / std::sqrt(3.0))
                j["cv"].fail(fmt::format("expected a cv < 1/sqrt(3) = 0.577 for uniform jitter (a duration must stay "
                                         "positive), found {}",
                                         jt.cv));
        }
        jt.seed = j.has("seed") ? static_cast<std::uint64_t>(j["seed"].integer(0)) : 0;
    }
}

void from_json(const Node& n, Config& c) {
    n.keys({"name", "cluster", "model", "training", "strategy", "stragglers"});
    from_json(n["cluster"], c.cluster);
    from_json(n["model"], c.model);
    from_json(n["training"], c.training);
    from_json(n["strategy"], c.strategy);
    // A strategy that runs one ZeRO stage runs it whatever "zero_stage" says (validate rejects another).
    if (const StrategyInfo& info = strategy_info(c.strategy.name); info.min_zero_stage == info.max_zero_stage)
        if (!n["strategy"].has("zero_stage")) c.strategy.zero_stage = info.min_zero_stage;
    // Without dp, data parallelism takes the GPUs the other dimensions leave.
    if (!n["strategy"].has("dp")) {
        const long long model_parallel = static_cast<long long>(c.strategy.tp) * c.strategy.pp * c.strategy.cp;
        c.strategy.dp = c.cluster.gpus() % model_parallel == 0 ? static_cast<int>(c.cluster.gpus() / model_parallel) : 0;
    }
    c.name = n.has("name") ? n["name"].string()
                           : fmt::format("{} / {} / {}", c.model.spec.name, c.cluster.name, c.strategy.name);
    validate(n, c);
    if (n.has("stragglers")) read_stragglers(n["stragglers"], c);
}

Config finish(json_reader::Document& doc, const std::string& file, const std::vector<Override>& overrides) {
    for (const auto& o : overrides) doc.set(o.path, o.value);
    Config c;
    c.file = file;
    from_json(doc.root(), c);
    c.json = doc.json();
    // The global batch as run, where it follows the microbatches (validate).
    if (c.json["training"]["global_batch"] != c.training.global_batch)
        c.json["training"]["global_batch"] = c.training.global_batch;
    return c;
}

// A sweep's values: a JSON array or object is one value; otherwise commas separate them.
std::vector<std::string> split_values(const std::string& v) {
    if (!v.empty() && (v.front() == '[' || v.front() == '{')) return {v};
    std::vector<std::string> out;
    std::size_t start = 0;
    for (;;) {
        const auto comma = v.find(',', start);
        out.push_back(v.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    return out;
}

// "path=value" at its first '='.
Override split_setting(const std::string& text) {
    const auto eq = text.find('=');
    if (eq == std::string::npos || eq == 0)
        throw ConfigError("--set " + text, "", "expected path=value (for example strategy.tp=4 or strategy.tp=1,2,4)");
    return Override{text.substr(0, eq), text.substr(eq + 1)};
}

}  // namespace

Setting parse_setting(const std::string& text) {
    Override o = split_setting(text);
    return Setting{std::move(o.path), split_values(o.value)};
}

std::vector<Setting> parse_settings(const std::vector<std::string>& texts) {
    std::vector<Setting> out;
    for (const auto& t : texts) out.push_back(parse_setting(t));
    return out;
}

std::vector<std::vector<Override>> combinations(const std::vector<Setting>& settings) {
    std::vector<std::vector<Override>> out{{}};
    for (const auto& s : settings) {
        std::vector<std::vector<Override>> next;
        for (const auto& prefix : out)
            for (const auto& v : s.values) {
                auto o = prefix;
                o.push_back({s.path, v});
                next.push_back(std::move(o));
            }
        out = std::move(next);
    }
    return out;
}

Override parse_override(const std::string& text) { return split_setting(text); }

Config load_config(const std::string& path, const std::vector<Override>& overrides) {
    json_reader::Document doc = json_reader::Document::load(path, config_dialect(), /*includes=*/true);
    return finish(doc, display(path), overrides);
}

nlohmann::json read_config_document(const std::string& path) {
    return json_reader::Document::load(path, config_dialect(), /*includes=*/true).json();
}

Config parse_config(const nlohmann::json& document, const std::string& file, const std::vector<Override>& overrides) {
    json_reader::Document doc(document, file, config_dialect());
    if (const auto include = doc.root().find("include")) include->fail("includes need a file: use load_config");
    return finish(doc, file, overrides);
}

UbConfig ub_defaults(bool te2) {
    UbConfig out{};
    for (std::size_t i = 0; i < kUbLayers; ++i) out[i] = ub_default(i, te2).sms();
    return out;
}

}  // namespace dtsim::hw
