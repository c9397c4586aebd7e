// FSDP combined with tensor parallelism (torchtitan's 2D): TP inside a node,
// FSDP over the same tp_rank of every data-parallel replica. Checked against
// hand computations: a layer's parameters on a rank are its TP share
// ((P - 2h) / tp + 2h: the two norms are replicated), FSDP all-gathers them in
// bf16 and reduce-scatters their gradients in fp32 (2 and 4 bytes each), and
// the model states are ZeRO-3's over the data-parallel group, (14 + G) bytes a
// parameter over dp, so about (14 + G) Psi / (tp x dp) for a model of Psi.
#include "dtsim/hw/job.hpp"
#include "dtsim/hw/run.hpp"
#include "fixtures.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <string>

using namespace dtsim;
using namespace dtsim::hw;
using json = nlohmann::json;
using namespace dtsim::hw::test;

namespace {

// The error a config gives, or "no error".
std::string error(const json& d) {
    try {
        parse_config(d, "t.json");
    } catch (const ConfigError& e) {
        return e.what();
    }
    return "no error";
}

constexpr int kHidden = 1024, kFfn = 4096, kLayers = 4, kSeq = 512;

// A GPT-style model without a vocabulary: every parameter is in a layer.
// Per layer: QKV 3h^2, projection h^2, MLP 2 h ffn, two norms 2h.
json model(int vocab = 0) {
    return {{"name", "small"}, {"layers", kLayers}, {"hidden", kHidden}, {"heads", 16}, {"kv_heads", 16},
            {"ffn", kFfn},     {"mlp", "gelu"},     {"seq", kSeq},       {"vocab", vocab}};
}

double layer_params() { return 4.0 * kHidden * kHidden + 2.0 * kHidden * kFfn + 2.0 * kHidden; }
// One rank's share of a layer under tp: the matrices split, the norms whole.
double layer_params_per_rank(int tp) { return (layer_params() - 2.0 * kHidden) / tp + 2.0 * kHidden; }

// dp x tp GPUs as `nodes` nodes of `per_node`.
json doc(int tp, int dp, int per_node, int microbatches = 1) {
    json cluster = realistic_cluster(tp * dp / per_node);
    cluster["gpus_per_node"] = per_node;
    return {{"cluster", cluster},
            {"model", model()},
            {"training", {{"global_batch", dp * microbatches}, {"micro_batch", 1}}},
            {"strategy", {{"name", "fsdp"}, {"dp", dp}, {"tp", tp}}}};
}

RunResult simulate_doc(const json& d) { return simulate(parse_config(d, "test.json"), {.keep_trace = true}); }

bool is_collective(std::string_view op) {
    return op == "all_reduce" || op == "all_gather" || op == "reduce_scatter";
}

// The compute a rank's compute stream executes, its blocking collectives left out.
double compute_seconds(const RankTrace& r) {
    double s = 0;
    for (const auto& e : r.events)
        if (e.stream == Stream::compute && !is_collective(e.op.name()) && e.op.name() != "recv") s += e.duration;
    return s;
}

}  // namespace

TEST_CASE("2D FSDP moves a layer's TP share: all-gathers of 2 bytes and reduce-scatters of 4 a parameter / tp") {
    for (int tp : {2, 4}) {
        const int dp = 16 / tp;
        CAPTURE(tp);
        const RunResult r = simulate_doc(doc(tp, dp, 8));
        const double share = layer_params_per_rank(tp);
        // e.g. tp 2: (4 x 1024^2 + 2 x 1024 x 4096 - 0) / 2 + 2048 = 6,293,504 parameters
        if (tp == 2) CHECK(share == 6293504);
        int gathers = 0, scatters = 0, tp_reduces = 0;
        for (const auto& e : r.trace.ranks[0].events) {
            const std::string op(e.op.name());
            if (op == "all_gather") {
                ++gathers;
                CHECK(e.stream == Stream::comm);  // FSDP's own stream, off the compute
                CHECK(e.bytes == doctest::Approx(2 * share));
            } else if (op == "reduce_scatter") {
                ++scatters;
                CHECK(e.stream == Stream::comm);
                CHECK(e.bytes == doctest::Approx(4 * share));  // fp32 gradients (reduce_dtype)
            } else if (op == "all_reduce") {
                // Megatron's TP all-reduce of a block's output, blocking the compute: b s h bf16.
                ++tp_reduces;
                CHECK(e.stream == Stream::compute);
                CHECK(e.bytes == doctest::Approx(2.0 * kSeq * kHidden));
            }
        }
        // FULL_SHARD: gathered for the forward and again for the backward, reduced once.
        CHECK(gathers == 2 * kLayers);
        CHECK(scatters == kLayers);
        // Attention and MLP, forward and backward (no recompute): 4 all-reduces a layer.
        CHECK(tp_reduces == 4 * kLayers);
    }
}

TEST_CASE("2D FSDP holds 12 (fp32 gradients: 16) bytes a parameter over tp x dp, as zero_model_states") {
    for (int tp : {2, 4})
        for (const char* grad : {"fp32", "bf16"}) {
            const int dp = 16 / tp;
            const double G = std::string(grad) == "fp32" ? 4 : 2;
            CAPTURE(tp);
            CAPTURE(grad);
            json d = doc(tp, dp, 8);
            d["strategy"]["grad_dtype"] = grad;
            const RunResult r = simulate_doc(d);
            const double psi_rank = kLayers * layer_params_per_rank(tp);  // this rank's parameters before ZeRO
            const double psi = kLayers * layer_params();                   // the model's
            // The first event is layer 0's all-gather, its unsharded bf16 weights (this rank's TP share) allocated.
            const auto& first = r.trace.ranks[0].events.front();
            REQUIRE(first.op.name() == std::string_view("all_gather"));
            CHECK(first.memory - 2 * layer_params_per_rank(tp) == doctest::Approx(12 * psi_rank / dp));
            bool stepped = false;
            for (const auto& e : r.trace.ranks[0].events)
                if (e.op.name() == std::string_view("optimizer")) {
                    stepped = true;
                    CHECK(e.memory == doctest::Approx((12 + G) * psi_rank / dp));
                    // ... which is (12 + G) Psi / (tp x dp) but for the replicated norms (under 0.1 %).
                    CHECK(e.memory == doctest::Approx((12 + G) * psi / (tp * dp)).epsilon(1e-3));
                    CHECK(e.memory > (12 + G) * psi / (tp * dp));
                }
            CHECK(stepped);
        }
}

TEST_CASE("fsdp with tp = 1 has no tensor-parallel collective and the data-parallel group of every rank") {
    const RunResult r = simulate_doc(doc(1, 16, 8));
    std::map<std::string, int> n;
    for (const auto& e : r.trace.ranks[0].events) n[std::string(e.op.name())] += 1;
    CHECK(n["all_reduce"] == 0);
    CHECK(n["all_gather"] == 2 * kLayers);
    CHECK(n["reduce_scatter"] == kLayers);
    for (const auto& e : r.trace.ranks[0].events)
        if (e.op.name() == std::string_view("all_gather")) CHECK(e.bytes == doctest::Approx(2 * layer_params()));
}

TEST_CASE("2D FSDP runs to the end for tp in {2, 4} x dp in {2, 4}, no faster than its compute") {
    for (int tp : {2, 4})
        for (int dp : {2, 4})
            for (int variant = 0; variant < 4; ++variant) {
                // 0: TP all-reduces; 1: sequence parallel; 2: sequence parallel with tp_comm_overlap
                // (AsyncTP); 3: sequence parallel, 2 microbatches, a vocabulary, full recompute.
                CAPTURE(tp);
                CAPTURE(dp);
                CAPTURE(variant);
                json d = doc(tp, dp, tp, variant == 3 ? 2 : 1);  // a node per TP group: FSDP across nodes
                if (variant >= 1) d["strategy"]["sequence_parallel"] = true;
                if (variant == 2) d["strategy"]["tp_comm_overlap"] = true;
                if (variant == 3) {
                    d["model"]["vocab"] = 32000;
                    d["strategy"]["recompute"] = "full";
                }
                const RunResult r = simulate_doc(d);
                REQUIRE(r.trace.ranks.size() == static_cast<std::size_t>(tp * dp));
                double most = 0;
                std::size_t gathers = 0;
                for (const auto& rank : r.trace.ranks) {
                    const double c = compute_seconds(rank);
                    CHECK(c > 0);
                    most = std::max(most, c);
                    std::size_t g = 0;
                    // FSDP's all-gathers (AsyncTP's TP all-gathers, of b s h bf16, run on a comm stream too).
                    for (const auto& e : rank.events)
                        if (e.op.name() == std::string_view("all_gather") && e.stream == Stream::comm &&
                            e.bytes != 2.0 * kSeq * kHidden)
                            ++g;
                    if (rank.rank == 0) gathers = g;
                    CHECK(g == gathers);  // every rank joined every FSDP all-gather of its group
                }
                // Two per layer and microbatch, and the root unit (the embeddings) once.
                CHECK(gathers == static_cast<std::size_t>(2 * kLayers * (variant == 3 ? 2 : 1) + (variant == 3 ? 1 : 0)));
                CHECK(r.report.step_time >= most);
                // Communication costs time somewhere: the step is longer than the compute alone.
                CHECK(r.report.step_time > most);
            }
}

TEST_CASE("2D FSDP with sequence parallelism: the TP all-gathers block the compute, FSDP's run beside it") {
    json d = doc(4, 4, 4);
    d["strategy"]["sequence_parallel"] = true;
    const RunResult r = simulate_doc(d);
    int tp_gathers = 0, fsdp_gathers = 0;
    for (const auto& e : r.trace.ranks[0].events) {
        if (e.op.name() != std::string_view("all_gather")) continue;
        if (e.stream == Stream::compute) {
            ++tp_gathers;
            CHECK(e.bytes == doctest::Approx(2.0 * kSeq * kHidden));
        } else {
            ++fsdp_gathers;
            CHECK(e.bytes == doctest::Approx(2 * layer_params_per_rank(4)));
        }
    }
    CHECK(tp_gathers == 4 * kLayers);  // before attention and MLP, forward and backward
    CHECK(fsdp_gathers == 2 * kLayers);
    // AsyncTP (tp_comm_overlap): the same TP collectives off the compute stream, running while
    // the block's GEMM chunks compute (on GEMMs this small the chunking may cost more than it hides).
    d["strategy"]["tp_comm_overlap"] = true;
    const RunResult overlapped = simulate_doc(d);
    const auto& events = overlapped.trace.ranks[0].events;
    int on_compute = 0, tp_collectives = 0, beside_compute = 0;
    for (const auto& e : events) {
        if (!is_collective(e.op.name())) continue;
        if (e.stream == Stream::compute) ++on_compute;
        if (e.stream != Stream::comm || e.bytes != 2.0 * kSeq * kHidden) continue;
        ++tp_collectives;
        const bool overlaps = std::any_of(events.begin(), events.end(), [&](const Event& c) {
            return c.stream == Stream::compute && c.start < e.end() && c.end() > e.start;
        });
        if (overlaps) ++beside_compute;
    }
    CHECK(on_compute == 0);
    CHECK(tp_collectives == 8 * kLayers);  // an all-gather and a reduce-scatter a block, forward and backward
    CHECK(beside_compute == tp_collectives);
}

TEST_CASE("2D FSDP with hybrid sharding shards over the node's data-parallel ranks") {
    // 2 nodes of 8, tp 2: a node holds 4 data-parallel ranks, the shard group; 2 replicas.
    json d = doc(2, 8, 8);
    d["strategy"]["sharding"] = "hybrid";
    const RunResult r = simulate_doc(d);
    const double psi_rank = kLayers * layer_params_per_rank(2);
    const auto& first = r.trace.ranks[0].events.front();
    REQUIRE(first.op.name() == std::string_view("all_gather"));
    CHECK(first.memory - 2 * layer_params_per_rank(2) == doctest::Approx(12 * psi_rank / 4));
    // Each fp32 gradient shard (1/4 of the layer's TP share) all-reduced across the 2 nodes, beside the TP ones.
    double across = 0;
    for (const auto& e : r.trace.ranks[0].events)
        if (e.op.name() == std::string_view("all_reduce") && e.stream == Stream::comm) across += e.bytes;
    CHECK(across == doctest::Approx(4 * psi_rank / 4));
}

TEST_CASE("hybrid sharding is in effect where the data-parallel ranks make whole nodes, two or more") {
    const auto config = [](int tp, int dp, int per_node, const char* sharding) {
        json d = doc(tp, dp, per_node);
        d["strategy"]["sharding"] = sharding;
        return parse_config(d, "t.json");
    };
    // The shard group: a node's data-parallel ranks.
    CHECK(hybrid_shard_ranks(config(2, 8, 8, "hybrid")) == 4);
    CHECK(hybrid_shard_ranks(config(1, 16, 8, "hybrid")) == 8);
    CHECK(hybrid_shard_ranks(config(1, 32, 8, "hybrid")) == 8);
    // One node is a single shard group: full sharding. Other shardings have none.
    CHECK(hybrid_shard_ranks(config(1, 8, 8, "hybrid")) == 0);
    CHECK(hybrid_shard_ranks(config(2, 4, 8, "hybrid")) == 0);
    CHECK(hybrid_shard_ranks(config(1, 16, 8, "full")) == 0);
    CHECK(hybrid_shard_ranks(config(1, 16, 8, "grad_op")) == 0);
    // Run as full sharding, its events are estimated as full sharding's (the run's size check),
    // and where in effect, with the replicas' all-reduce beside.
    const RunOptions o{.keep_trace = false};
    CHECK(estimate_run_size(config(1, 8, 8, "hybrid"), o).events == estimate_run_size(config(1, 8, 8, "full"), o).events);
    CHECK(estimate_run_size(config(1, 16, 8, "hybrid"), o).events >
          estimate_run_size(config(1, 16, 8, "full"), o).events);
}

TEST_CASE("2D FSDP configs: what cannot run is refused with the key and the reason") {
    // Accepted, ZeRO-3, PyTorch's loss by default (torchtitan's loss_parallel keeps an fp32 copy).
    const Config ok = parse_config(doc(4, 4, 8), "t.json");
    CHECK(ok.strategy.zero_stage == 3);
    CHECK(layer_split(ok).cross_entropy == CrossEntropy::pytorch);
    CHECK(layer_split(ok).tp == 4);
    // 16 heads over tp 32 (one node of 32): not divisible.
    json heads = doc(32, 1, 32);
    CHECK(error(heads) == "t.json: $.strategy.tp: 16 attention heads cannot be split over tp = 32");
    // FSDP is no pipeline.
    json pp = doc(2, 4, 8);
    pp["strategy"]["pp"] = 2;
    pp["strategy"]["dp"] = 2;
    CHECK(error(pp).find("$.strategy.pp: strategy \"fsdp\" has no pipeline: pp must be 1, found 2") !=
          std::string::npos);
    // Hybrid sharding with a TP group filling the node: nothing left to shard inside it.
    json full_node = doc(8, 2, 8);
    full_node["strategy"]["sharding"] = "hybrid";
    CHECK(error(full_node) ==
          "t.json: $.strategy.sharding: hybrid sharding shards over the data-parallel ranks of one node, but tp = 8 "
          "fills the node's 8 GPUs: each shard group would be a single rank and nothing sharded; use \"full\" to "
          "shard over the nodes, or a smaller tp");
    // ... or one that does not divide the node.
    json uneven = doc(4, 3, 6);
    uneven["strategy"]["sharding"] = "hybrid";
    CHECK(error(uneven) ==
          "t.json: $.strategy.sharding: hybrid sharding shards over the data-parallel ranks of one node, but tp = 4 "
          "does not divide the node's 6 GPUs; choose a tp that does, or \"full\"");
    // ddp stays pure data parallelism.
    json ddp = doc(2, 8, 8);
    ddp["strategy"]["name"] = "ddp";
    CHECK(error(ddp).find("strategy \"ddp\" is pure data parallelism") != std::string::npos);
}

// ---------------------------------------------------------------- 3D: FSDP inside pipeline stages

namespace {

// 1F1B over pp x tp x dp on nodes of tp GPUs, ZeRO stage `stage`, 4 microbatches.
json pipeline_doc(const char* name, int tp, int pp, int dp, int stage) {
    json d = doc(tp, dp * pp, tp, 4);
    d["cluster"] = realistic_cluster(dp * pp);
    d["cluster"]["gpus_per_node"] = tp;
    d["strategy"] = {{"name", name}, {"dp", dp}, {"tp", tp}, {"pp", pp}, {"zero_stage", stage}};
    d["training"]["global_batch"] = dp * 4;
    return d;
}

}  // namespace

TEST_CASE("3D: ZeRO-3 inside 1F1B stages gathers each layer once a step and reduce-scatters its gradients once") {
    for (int tp : {1, 2}) {
        const int pp = 2, dp = 2;
        CAPTURE(tp);
        const RunResult r = simulate_doc(pipeline_doc("1f1b", tp, pp, dp, 3));
        const double share = layer_params_per_rank(tp);
        const double psi_rank = (kLayers / pp) * share;  // stage 0's layers, no vocabulary
        int gathers = 0;
        double scattered = 0;
        for (const auto& e : r.trace.ranks[0].events) {
            const std::string op(e.op.name());
            if (op == "all_gather" && e.stream == Stream::comm) {
                ++gathers;
                CHECK(e.bytes == doctest::Approx(2 * share));
            }
            if (op == "reduce_scatter" && e.stream == Stream::comm) scattered += e.bytes;
        }
        // torchtitan with PP does not reshard after the forward: one gather a layer for all 4 microbatches.
        CHECK(gathers == kLayers / pp);
        CHECK(scattered == doctest::Approx(4 * psi_rank));  // fp32 gradients, once
        // Model states sharded over dp, without gradients between steps (FSDP2's): 12 bytes a parameter / dp,
        // plus, while the step runs, the gathered bf16 weights (2) and the accumulated unsharded fp32
        // gradients (4), freed after the step.
        const auto& first = r.trace.ranks[0].events.front();
        REQUIRE(first.op.name() == std::string_view("all_gather"));
        CHECK(first.memory - 2 * share == doctest::Approx(12 * psi_rank / dp));  // layer 0's weights gathering
        bool stepped = false;
        for (const auto& e : r.trace.ranks[0].events)
            if (e.op.name() == std::string_view("optimizer")) {
                stepped = true;
                CHECK(e.memory == doctest::Approx(12 * psi_rank / dp + (2 + 4) * psi_rank));
            }
        CHECK(stepped);
    }
}

TEST_CASE("3D: ZeRO-3 in a pipeline moves what ZeRO-1 with overlap_param_gather moves, and holds less between steps") {
    const RunResult three = simulate_doc(pipeline_doc("1f1b", 2, 2, 2, 3));
    json d = pipeline_doc("1f1b", 2, 2, 2, 1);
    d["strategy"]["overlap_param_gather"] = true;
    const RunResult one = simulate_doc(d);
    auto bytes = [](const RunResult& r, const char* op) {
        double b = 0;
        for (const auto& e : r.trace.ranks[0].events)
            if (e.op.name() == op && e.stream == Stream::comm) b += e.bytes;
        return b;
    };
    CHECK(bytes(three, "all_gather") == doctest::Approx(bytes(one, "all_gather")));
    CHECK(bytes(three, "reduce_scatter") == doctest::Approx(bytes(one, "reduce_scatter")));
    // Before the step: 14/dp bytes a parameter against ZeRO-1's 6 + 12/dp.
    CHECK(three.trace.ranks[0].events.front().memory < one.trace.ranks[0].events.front().memory);
}

TEST_CASE("3D: ZeRO-3 runs in every pipeline schedule for tp and dp of 2, no faster than its compute") {
    for (const char* name : {"gpipe", "1f1b", "interleaved", "zbh1"}) {
        CAPTURE(name);
        json d = pipeline_doc(name, 2, 2, 2, 3);
        d["model"]["vocab"] = 32000;
        d["strategy"]["sequence_parallel"] = true;
        const RunResult r = simulate_doc(d);
        double most = 0;
        for (const auto& rank : r.trace.ranks) most = std::max(most, compute_seconds(rank));
        CHECK(most > 0);
        CHECK(r.report.step_time > most);
        // Nothing is gathered after the optimizer step: the next step's forward gathers its layers.
        for (const auto& rank : r.trace.ranks) {
            REQUIRE_FALSE(rank.events.empty());
            CHECK(rank.events.back().op.name() == std::string_view("optimizer"));
        }
    }
}

TEST_CASE("3D configs: pipelines take ZeRO stages 0, 1 and 3, not 2; megatron not 3") {
    CHECK(error(pipeline_doc("1f1b", 2, 2, 2, 3)) == "no error");
    CHECK(error(pipeline_doc("1f1b", 2, 2, 2, 2)) ==
          "t.json: $.strategy.zero_stage: strategy \"1f1b\" supports ZeRO stages 0, 1 (distributed optimizer) and 3 "
          "(FSDP inside the pipeline stages), found 2");
    json m = doc(2, 4, 8);
    m["strategy"] = {{"name", "megatron"}, {"tp", 2}, {"dp", 4}, {"zero_stage", 3}};
    CHECK(error(m) == "t.json: $.strategy.zero_stage: strategy \"megatron\" supports ZeRO stages 0 and 1 (distributed "
                      "optimizer), found 3");
    json overlap = pipeline_doc("1f1b", 2, 2, 2, 3);
    overlap["strategy"]["overlap_param_gather"] = true;
    CHECK(error(overlap).find("$.strategy.overlap_param_gather") != std::string::npos);
}
