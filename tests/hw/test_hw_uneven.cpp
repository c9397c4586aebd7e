// Uneven pipeline stages (strategy.stage_layers, Megatron-LM's first_stage_layers /
// last_stage_layers): 1F1B with unequal stage times against the dependency chain of its
// per-rank order and, with the slowest stage last, a closed form; each rank's compute in
// proportion to its layers; Megatron's shorthand (Llama 3 405B's 126 layers over 16
// stages, the first and last one layer fewer); interleaved, looped, zero-bubble,
// DualPipeV and schedule-file pipelines with uneven virtual stages; recompute_num_layers
// counted from each uneven chunk's first layer; config errors.
#include "dtsim/hw/job.hpp"
#include "dtsim/hw/plan.hpp"
#include "dtsim/hw/run.hpp"
#include "dtsim/hw/workload.hpp"
#include "dtsim/hw/world.hpp"
#include "pipeline_fixtures.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

using namespace dtsim;
using namespace dtsim::hw;
using json = nlohmann::json;
using namespace dtsim::hw::test;

namespace {


// Forward and backward seconds of one layer for one microbatch.
std::pair<double, double> layer_times(const json& doc) {
    const Config c = parse_config(doc, "test.json");
    const Workload w = make_workload(c.model.spec, layer_split(c), c.cluster.gpu);
    return {w.layer.attention_forward.seconds + w.layer.mlp_forward.seconds,
            w.layer.attention_backward.seconds + w.layer.mlp_backward.seconds};
}

// 1F1B's step with stage s taking F[s] forward and B[s] backward per microbatch and free
// transfers: each rank runs its order (p - s - 1 warm-up forwards, then one forward and one
// backward, then the remaining backwards), an action starting when its rank is free and its
// input has arrived (the forward of the stage before, the backward of the stage after).
double one_f_one_b(const std::vector<double>& F, const std::vector<double>& B, int m) {
    const int p = static_cast<int>(F.size());
    std::vector<std::vector<std::pair<bool, int>>> order(static_cast<std::size_t>(p));  // (backward, microbatch)
    for (int s = 0; s < p; ++s) {
        auto& o = order[static_cast<std::size_t>(s)];
        const int warmup = std::min(p - s - 1, m);
        for (int i = 0; i < warmup; ++i) o.emplace_back(false, i);
        for (int k = 0; k < m - warmup; ++k) {
            o.emplace_back(false, warmup + k);
            o.emplace_back(true, k);
        }
        for (int k = m - warmup; k < m; ++k) o.emplace_back(true, k);
    }
    std::map<std::tuple<bool, int, int>, double> done;  // (backward, stage, microbatch) -> end
    std::vector<double> free(static_cast<std::size_t>(p), 0);
    std::vector<std::size_t> next(static_cast<std::size_t>(p), 0);
    for (bool progress = true; progress;) {
        progress = false;
        for (int s = 0; s < p; ++s) {
            const auto k = static_cast<std::size_t>(s);
            if (next[k] == order[k].size()) continue;
            const auto [backward, i] = order[k][next[k]];
            double ready = 0;
            if (!backward && s > 0) {
                const auto it = done.find({false, s - 1, i});
                if (it == done.end()) continue;
                ready = it->second;
            } else if (backward) {
                const auto it = done.find(s + 1 < p ? std::tuple{true, s + 1, i} : std::tuple{false, s, i});
                if (it == done.end()) continue;
                ready = it->second;
            }
            free[k] = std::max(free[k], ready) + (backward ? B[k] : F[k]);
            done[{backward, s, i}] = free[k];
            ++next[k];
            progress = true;
        }
    }
    return *std::max_element(free.begin(), free.end());
}

// The layers whose recompute runs on `rank` for microbatch 0.
std::vector<int> recomputed(const json& doc, int rank) {
    const RunResult r = run(doc, true);
    std::vector<int> layers;
    for (const auto& e : r.trace.ranks[static_cast<std::size_t>(rank)].events)
        if (e.op.name() == std::string_view("recompute") && e.batches.contains(0) &&
            std::find(layers.begin(), layers.end(), e.layer) == layers.end())
            layers.push_back(e.layer);
    std::sort(layers.begin(), layers.end());
    return layers;
}

}  // namespace

TEST_CASE("1F1B with uneven stages [1, 3, 3, 1]: each rank's compute follows its layers, the step its slowest stages") {
    const int p = 4;
    for (int m : {4, 8, 12}) {
        CAPTURE(m);
        json doc = pipeline("1f1b", p, m, 8);
        doc["strategy"]["stage_layers"] = {1, 3, 3, 1};
        const auto [f, b] = layer_times(doc);
        REQUIRE(b == doctest::Approx(2 * f));
        const std::vector<int> layers{1, 3, 3, 1};
        std::vector<double> F, B;
        for (int n : layers) {
            F.push_back(n * f);
            B.push_back(n * b);
        }
        const RunReport r = run(doc).report;
        for (int s = 0; s < p; ++s) {
            CAPTURE(s);
            const auto k = static_cast<std::size_t>(s);
            const double busy = m * (F[k] + B[k]);
            CHECK(r.rank_splits[k].compute == doctest::Approx(busy).epsilon(1e-6));
            // Its bubble: the rest of the step.
            CHECK(r.rank_splits[k].idle == doctest::Approx(r.step_time - busy).epsilon(1e-6));
        }
        CHECK(r.split.comm / r.step_time < 1e-6);
        CHECK(r.step_time == doctest::Approx(one_f_one_b(F, B, m)).epsilon(1e-6));
        // By hand (B = 2F here): stage 2, the slowest stage nearest the end, works without a gap
        // from the arrival of microbatch 0 (after F0 + F1) to its last backward (its forward
        // inputs come as fast as it works, stage 3's gradients faster), which then goes back
        // through stages 1 and 0.
        const double by_hand = (F[0] + B[0]) + (F[1] + B[1]) + m * (F[2] + B[2]);
        CHECK(r.step_time == doctest::Approx(by_hand).epsilon(1e-6));
        // The even split of the same 8 layers is faster: (m + p - 1) x 2 (f + b).
        doc["strategy"].erase("stage_layers");
        const RunReport even = run(doc).report;
        CHECK(even.step_time == doctest::Approx((m + p - 1) * 2 * (f + b)).epsilon(1e-6));
        CHECK(even.step_time < r.step_time);
    }
}

TEST_CASE("1F1B and GPipe with the slowest stage last: sum of the stages before it, forward and back, plus m x its own") {
    // The last stage gets microbatch i no later than it finishes i - 1 (its upstream stages are
    // faster), so it works without a gap from its first forward to its last backward, and the
    // gradient then goes back through the others: T = sum_{s<p-1} (F_s + B_s) + m (F_l + B_l).
    const std::vector<int> layers{1, 2, 1, 4};
    for (const char* name : {"1f1b", "gpipe"})
        for (int m : {3, 8}) {
            CAPTURE(name);
            CAPTURE(m);
            json doc = pipeline(name, 4, m, 8);
            doc["strategy"]["stage_layers"] = layers;
            const auto [f, b] = layer_times(doc);
            const RunReport r = run(doc).report;
            double before = 0;
            for (int s = 0; s < 3; ++s) before += layers[static_cast<std::size_t>(s)] * (f + b);
            // (GPipe: the last stage runs its m forwards, then its m backwards, back to back.)
            CHECK(r.step_time == doctest::Approx(before + m * 4 * (f + b)).epsilon(1e-6));
        }
}

TEST_CASE("Megatron-LM's first/last stage layers: Llama 3 405B's 126 layers over 16 stages") {
    // Dubey et al. 2024 (The Llama 3 Herd of Models, section 3.3.2): the first and the last
    // stage hold one layer fewer, 7 + 14 x 8 + 7 = 126.
    json doc = pipeline("1f1b", 16, 16, 126);
    doc["strategy"]["first_stage_layers"] = 7;
    doc["strategy"]["last_stage_layers"] = 7;
    const Config c = parse_config(doc, "test.json");
    std::vector<int> expected(16, 8);
    expected.front() = expected.back() = 7;
    CHECK(stage_layers_of(c, 16) == expected);
    CHECK(model_chunks(c) == 16);
    // The jobs' layers follow: stage s starts after the layers of the stages before it.
    World world(c.cluster, c.gpus());
    const Workload work = make_workload(c.model.spec, layer_split(c), c.cluster.gpu);
    const std::vector<Job> jobs = make_jobs(world, c, work);
    REQUIRE(jobs.size() == 16);
    int first = 0;
    for (std::size_t s = 0; s < 16; ++s) {
        CHECK(jobs[s].first_layer == first);
        CHECK(jobs[s].layers == expected[s]);
        first += expected[s];
    }
    // Each rank computes in proportion: 7 to 8.
    const RunReport r = run(doc).report;
    CHECK(r.rank_splits[0].compute / r.rank_splits[1].compute == doctest::Approx(7.0 / 8).epsilon(1e-9));
    CHECK(r.rank_splits[15].compute / r.rank_splits[8].compute == doctest::Approx(7.0 / 8).epsilon(1e-9));

    // Only one of them: the others share the rest.
    doc["strategy"].erase("first_stage_layers");
    doc["strategy"]["last_stage_layers"] = 6;  // 120 over 15
    std::vector<int> last(16, 8);
    last.back() = 6;
    CHECK(stage_layers_of(parse_config(doc, "test.json"), 16) == last);

    // With virtual stages, each rank's layers split evenly over its chunks, chunk c of rank r
    // being model chunk c x pp + r (Megatron-LM's get_transformer_layer_offset).
    json inter = pipeline("interleaved", 4, 8, 20);
    inter["strategy"]["chunks"] = 2;
    inter["strategy"]["first_stage_layers"] = 4;
    inter["strategy"]["last_stage_layers"] = 4;  // the middle ranks 6 each
    const Config ci = parse_config(inter, "test.json");
    CHECK(stage_layers_of(ci, 8) == std::vector<int>{2, 3, 3, 2, 2, 3, 3, 2});
    CHECK(layer_split(ci).chunk_starts == std::vector<int>{0, 2, 5, 8, 10, 12, 15, 18});
    const RunReport ri = run(inter).report;
    CHECK(ri.rank_splits[0].compute / ri.rank_splits[1].compute == doctest::Approx(4.0 / 6).epsilon(1e-9));
}

TEST_CASE("Megatron-LM's account_for_embedding / account_for_loss: the edges count as layers of the split") {
    // Llama 3 405B's layout: 126 layers and the two edges over 16 x 8 virtual stages, one a chunk, the
    // first only the embedding, the last only the output layer (Dubey et al. 2024, section 3.3.2).
    const auto both_edges = [](int pp, int microbatches, int layers) {
        json d = pipeline("interleaved", pp, microbatches, layers);
        d["strategy"]["chunks"] = 8;
        d["strategy"]["account_for_embedding"] = true;
        d["strategy"]["account_for_loss"] = true;
        return d;
    };
    std::vector<int> llama(128, 1);
    llama.front() = llama.back() = 0;
    CHECK(stage_layers_of(parse_config(both_edges(16, 16, 126), "test.json"), 128) == llama);
    // Megatron-Bridge's 405B proxy: 62 layers + 2 over 4 x 8, two a chunk, one fewer at each end.
    json proxy = both_edges(4, 8, 62);
    std::vector<int> two(32, 2);
    two.front() = two.back() = 1;
    CHECK(stage_layers_of(parse_config(proxy, "test.json"), 32) == two);
    // One edge alone: 7 layers and the loss over 2 stages, 4 and 3.
    json loss = pipeline("1f1b", 2, 4, 7);
    loss["strategy"]["account_for_loss"] = true;
    CHECK(stage_layers_of(parse_config(loss, "test.json"), 2) == std::vector<int>{4, 3});
    // The same run as the split written out.
    json written = proxy;
    written["strategy"].erase("account_for_embedding");
    written["strategy"].erase("account_for_loss");
    written["strategy"]["stage_layers"] = two;
    CHECK(run(proxy).report.step_time == run(written).report.step_time);
    // What does not split, and what cannot go with it.
    proxy["strategy"]["chunks"] = 3;
    CHECK(config_error(proxy) == "test.json: $.strategy.account_for_embedding: 62 layers + the embedding + the loss = "
                                 "64 cannot be split evenly into pp x chunks = 4 x 3 = 12 pipeline stages (64 % 12 = 4)");
    loss["strategy"]["first_stage_layers"] = 4;
    CHECK(config_error(loss) == "test.json: $.strategy.first_stage_layers: give either \"first_stage_layers\" or the "
                                "split that counts the embedding and the loss as layers, not both");
    json ddp = pipeline("ddp", 1, 4, 8);
    ddp["strategy"]["account_for_loss"] = true;
    CHECK(config_error(ddp) == "test.json: $.strategy.account_for_loss: splits a pipeline's layers over its stages, but "
                               "strategy \"ddp\" has no pipeline; use \"1f1b\", \"interleaved\" or another pipeline");
    // Without chunks the stages are the pipeline's ranks.
    json one = pipeline("1f1b", 4, 8, 16);
    one["strategy"]["account_for_loss"] = true;
    CHECK(config_error(one) == "test.json: $.strategy.account_for_loss: 16 layers + the loss = 17 cannot be split "
                               "evenly into pp = 4 pipeline stages (17 % 4 = 1)");
    // A schedule file places its stages itself: its split is written out.
    json file = pipeline("schedule", 4, 8, 16);
    file["strategy"]["schedule_file"] = std::string(DTSIM_CONFIGS) + "/schedules/zbh1_p4_m8.txt";
    file["strategy"]["account_for_embedding"] = true;
    CHECK(config_error(file) == "test.json: $.strategy.account_for_embedding: counts the edges over the pipeline's "
                                "model chunks, but a schedule file places its stages itself: give \"stage_layers\" "
                                "(the layers of every stage in model order)");
}

TEST_CASE("schedule-driven pipelines with uneven virtual stages run to the end, each rank on its own layers") {
    struct Case {
        json strategy;
        std::vector<int> rank_layers;  // the layers each pipeline rank holds
    };
    const std::vector<Case> cases{
        {{{"name", "interleaved"}, {"pp", 4}, {"chunks", 2}, {"stage_layers", {1, 2, 2, 2, 2, 2, 2, 3}}}, {3, 4, 4, 5}},
        {{{"name", "interleaved"}, {"pp", 4}, {"chunks", 2}, {"microbatch_group", 8},
          {"stage_layers", {3, 1, 1, 2, 2, 1, 1, 5}}},
         {5, 2, 2, 7}},
        {{{"name", "bfs"}, {"pp", 4}, {"chunks", 2}, {"stage_layers", {1, 2, 2, 2, 2, 2, 2, 3}}}, {3, 4, 4, 5}},
        {{{"name", "zbh1"}, {"pp", 4}, {"stage_layers", {3, 5, 5, 3}}}, {3, 5, 5, 3}},
        // DualPipeV's V: rank r holds stages r and 2p - 1 - r.
        {{{"name", "dualpipev"}, {"pp", 4}, {"stage_layers", {1, 2, 2, 2, 2, 2, 2, 3}}}, {4, 4, 4, 4}},
        {{{"name", "dualpipev"}, {"pp", 4}, {"stage_layers", {1, 1, 1, 1, 3, 3, 3, 3}}}, {4, 4, 4, 4}},
        {{{"name", "schedule"}, {"pp", 4}, {"schedule_file", std::string(DTSIM_CONFIGS) + "/schedules/zbh1_p4_m8.txt"},
          {"stage_layers", {2, 6, 6, 2}}},
         {2, 6, 6, 2}},
        {{{"name", "interleaved"}, {"pp", 4}, {"chunks", 2}, {"dp", 2}, {"zero_stage", 3},
          {"stage_layers", {1, 2, 2, 2, 2, 2, 2, 3}}},
         {3, 4, 4, 5}},
        // Llama 3's pipeline: the first model chunk only the embedding, the last only the output layer.
        {{{"name", "interleaved"}, {"pp", 4}, {"chunks", 2}, {"stage_layers", {0, 3, 2, 3, 2, 3, 3, 0}}}, {2, 6, 5, 3}},
        {{{"name", "interleaved"}, {"pp", 4}, {"chunks", 2}, {"dp", 2}, {"zero_stage", 3},
          {"stage_layers", {0, 3, 2, 3, 2, 3, 3, 0}}},
         {2, 6, 5, 3}},
        {{{"name", "1f1b"}, {"pp", 4}, {"stage_layers", {0, 8, 8, 0}}}, {0, 8, 8, 0}},
        {{{"name", "dualpipev"}, {"pp", 4}, {"stage_layers", {0, 2, 2, 2, 2, 2, 2, 4}}}, {4, 4, 4, 4}},
    };
    for (const auto& k : cases) {
        CAPTURE(k.strategy.dump());
        const int dp = k.strategy.value("dp", 1);
        json doc = pipeline("x", 4, 8 * dp, 16);
        doc["cluster"] = ideal_cluster(1, 4 * dp);
        doc["strategy"] = k.strategy;
        const auto [f, b] = layer_times(doc);
        const RunResult r = run(doc, true);
        REQUIRE(r.report.step_time > 0);
        for (std::size_t stage = 0; stage < 4; ++stage) {
            CAPTURE(stage);
            const std::size_t rank = stage * static_cast<std::size_t>(dp);  // data-parallel rank 0 of the stage
            // 8 microbatches of each layer held, forward and backward (ZB-H1 splits the backward in two).
            CHECK(r.report.rank_splits[rank].compute ==
                  doctest::Approx(8 * k.rank_layers[stage] * (f + b)).epsilon(1e-6));
            if (dp > 1) {  // ZeRO-3 gathers each of the rank's layers once a step
                std::vector<int> gathered;
                for (const auto& e : r.trace.ranks[rank].events)
                    if (e.op.name() == std::string_view("all_gather") && e.layer >= 0) gathered.push_back(e.layer);
                CHECK(static_cast<int>(gathered.size()) == k.rank_layers[stage]);
            }
        }
        // Transfers of a stage without layers are labelled with none; no event names a layer the model lacks.
        int unknown_layers = 0;
        for (const auto& rank : r.trace.ranks)
            for (const auto& e : rank.events) unknown_layers += e.layer != kNoLayer && (e.layer < 0 || e.layer >= 16);
        CHECK(unknown_layers == 0);
        // Same input, same result.
        CHECK(run(doc).report.step_time == r.report.step_time);
    }
}

TEST_CASE("recompute_num_layers counts from the first layer of each uneven chunk") {
    LayerSplit split;
    split.recompute = Recompute::full;
    split.recompute_num_layers = 2;
    split.chunk_starts = {0, 1, 4, 6};  // chunks of 1, 3, 2 and 2 layers
    std::vector<int> chosen;
    for (int l = 0; l < 8; ++l)
        if (split.recomputes(l)) chosen.push_back(l);
    CHECK(chosen == std::vector<int>{0, 1, 2, 4, 5, 6, 7});

    json doc = pipeline("1f1b", 2, 2, 8);
    doc["strategy"] = {{"name", "1f1b"}, {"pp", 2}, {"recompute", "full"}, {"recompute_num_layers", 2},
                       {"stage_layers", {3, 5}}};
    CHECK(recomputed(doc, 0) == std::vector<int>{0, 1});
    CHECK(recomputed(doc, 1) == std::vector<int>{3, 4});
    // Interleaved, chunks [1, 3, 2, 2] from layers 0, 1, 4, 6: rank 0 holds chunks 0 and 2, rank 1 chunks 1 and 3.
    doc["strategy"] = {{"name", "interleaved"}, {"pp", 2},           {"chunks", 2},
                       {"recompute", "full"},   {"recompute_num_layers", 2}, {"stage_layers", {1, 3, 2, 2}}};
    CHECK(recomputed(doc, 0) == std::vector<int>{0, 4, 5});
    CHECK(recomputed(doc, 1) == std::vector<int>{1, 2, 6, 7});
    // Up to the largest chunk: the smaller ones recompute every layer.
    doc["strategy"]["recompute_num_layers"] = 3;
    CHECK(recomputed(doc, 0) == std::vector<int>{0, 4, 5});
    CHECK(recomputed(doc, 1) == std::vector<int>{1, 2, 3, 6, 7});
    doc["strategy"]["recompute_num_layers"] = 4;
    CHECK(config_error(doc) == "test.json: $.strategy.recompute_num_layers: the first 4 layers of each model chunk, "
                               "but the largest chunk has 3");
}

TEST_CASE("recompute_num_layers with a schedule file of more stages than ranks needs the file's split written out") {
    // DualPipeV's file: 8 stages on 4 ranks. Split into 4 chunks before the file is read, the first
    // layers of each chunk would be counted from the wrong layers.
    json doc = pipeline("schedule", 4, 8, 16);
    doc["strategy"] = {{"name", "schedule"},
                       {"pp", 4},
                       {"schedule_file", std::string(DTSIM_CONFIGS) + "/schedules/dualpipev_p4_m8.txt"},
                       {"recompute", "full"},
                       {"recompute_num_layers", 1}};
    CHECK(config_error(doc) == "test.json: $.strategy.recompute_num_layers: counts the first layers of each model "
                               "chunk, but the schedule's 8 stages are not the pp = 4 chunks the layers were split "
                               "into before it was read: give \"stage_layers\" (8 entries, the layers of every "
                               "stage) with it");
    doc["strategy"]["stage_layers"] = {2, 2, 2, 2, 2, 2, 2, 2};
    // Rank 0 holds stages 0 and 7 (layers 0-1 and 14-15): their first layers recompute.
    CHECK(recomputed(doc, 0) == std::vector<int>{0, 14});
}

TEST_CASE("plan's bounds hold with uneven stages: the step and the peak never fall below them") {
    // Every pipeline strategy plan searches, with the first or last stage lighter or heavier, the
    // states sharded or not, with tensor parallelism, on H100-like nodes with a vocabulary (the
    // embedding on rank 0, the logits on the output layer's rank).
    struct Case {
        std::string name;
        int chunks;
        json uneven;  // the strategy keys that make the stages uneven
    };
    const std::vector<Case> cases{
        {"1f1b", 1, {{"first_stage_layers", 1}}},
        {"1f1b", 1, {{"first_stage_layers", 6}, {"last_stage_layers", 2}}},
        {"1f1b", 1, {{"stage_layers", {5, 3, 3, 5}}}},
        {"gpipe", 1, {{"last_stage_layers", 1}}},
        {"interleaved", 2, {{"first_stage_layers", 2}, {"last_stage_layers", 2}}},
        {"interleaved", 2, {{"stage_layers", {1, 2, 2, 2, 2, 2, 2, 3}}}},
        {"bfs", 2, {{"last_stage_layers", 10}}},
        {"zbh1", 1, {{"first_stage_layers", 3}, {"last_stage_layers", 3}}},
        {"dualpipev", 1, {{"stage_layers", {1, 2, 2, 2, 2, 2, 2, 3}}}},
        {"1f1b", 1, {{"stage_layers", {0, 8, 8, 0}}}},
        {"interleaved", 2, {{"stage_layers", {0, 3, 2, 3, 2, 3, 3, 0}}}},
        {"zbh1", 1, {{"stage_layers", {0, 8, 8, 0}}}},
        {"bfs", 2, {{"stage_layers", {0, 3, 2, 3, 2, 3, 3, 0}}}},
        {"dualpipev", 1, {{"stage_layers", {0, 2, 2, 2, 2, 2, 2, 4}}}},
    };
    for (const auto& k : cases)
        for (int zero : {0, 1, 3})
            for (int tp : {1, 2})
            for (bool tied : {true, false}) {  // untied: the last rank's optimizer step may overlap the drain
                json doc = pipeline(k.name, 4, 8, 16);
                doc["cluster"] = realistic_cluster(2);
                doc["model"] = small_model(16, 32000);
                doc["model"]["tied_embeddings"] = tied;
                doc["strategy"]["tp"] = tp;
                doc["strategy"]["dp"] = 4 / tp;
                doc["strategy"]["zero_stage"] = zero;
                doc["training"]["global_batch"] = 8 * (4 / tp);
                if (k.chunks > 1) doc["strategy"]["chunks"] = k.chunks;
                for (const auto& [key, value] : k.uneven.items()) doc["strategy"][key] = value;
                CAPTURE(doc["strategy"].dump());
                const Config c = parse_config(doc, "test.json");
                const RunReport r = simulate(c).report;
                REQUIRE(r.step_time > 0);
                CHECK(step_time_lower_bound(c) <= r.step_time);
                CHECK(step_time_lower_bound(c) > 0.5 * r.step_time);  // a bound that prunes
                CHECK(memory_lower_bound(c) <= r.peak.bytes);
            }
}

TEST_CASE("uneven stages: config errors say what was expected and what was found") {
    json doc = pipeline("1f1b", 4, 4, 8);
    auto with = [&](json strategy) {
        json d = doc;
        for (auto& [k, v] : strategy.items()) d["strategy"][k] = v;
        return config_error(d);
    };
    CHECK(with({{"stage_layers", {2, 2, 4}}}) ==
          "test.json: $.strategy.stage_layers: expected 4 entries, one per pipeline stage in model order (pp = 4), "
          "found 3");
    CHECK(with({{"stage_layers", {2, 2, 2, 3}}}) ==
          "test.json: $.strategy.stage_layers: the stages hold 9 layers in all, but the model has 8");
    CHECK(with({{"stage_layers", {2, 0, 3, 3}}}) ==
          "test.json: $.strategy.stage_layers[1]: a stage between the first and the last holds at least one layer "
          "(only the first may hold just the embedding, the last just the output layer and the loss)");
    CHECK(with({{"stage_layers", {-1, 3, 3, 3}}}).find("test.json: $.strategy.stage_layers[0]: ") == 0);
    CHECK(run([&] {
              json d = doc;
              d["strategy"]["stage_layers"] = {0, 4, 4, 0};
              return d;
          }())
              .report.step_time > 0);
    CHECK(with({{"stage_layers", json::array()}}).find("test.json: $.strategy.stage_layers: expected a list") == 0);
    CHECK(with({{"stage_layers", 8}}).find("test.json: $.strategy.stage_layers: expected a list") == 0);
    CHECK(with({{"stage_layers", {2, 2, 2, 2}}, {"first_stage_layers", 2}}) ==
          "test.json: $.strategy.first_stage_layers: give either \"stage_layers\" (the layers of every stage) or "
          "Megatron-LM's \"first_stage_layers\" / \"last_stage_layers\", not both");
    CHECK(with({{"first_stage_layers", 3}}) ==
          "test.json: $.strategy.first_stage_layers: leaves 8 - 3 = 5 layers for the 3 other pipeline stages, which "
          "cannot share them evenly (5 % 3 = 2)");
    CHECK(with({{"first_stage_layers", 3}, {"last_stage_layers", 2}}) ==
          "test.json: $.strategy.last_stage_layers: leaves 8 - 3 - 2 = 3 layers for the 2 other pipeline stages, "
          "which cannot share them evenly (3 % 2 = 1)");
    CHECK(with({{"first_stage_layers", 4}, {"last_stage_layers", 3}}) ==
          "test.json: $.strategy.last_stage_layers: leaves 8 - 4 - 3 = 1 layers for the 2 other pipeline stages, "
          "which need at least 2 (one a chunk)");
    CHECK(with({{"first_stage_layers", 9}}) ==
          "test.json: $.strategy.first_stage_layers: takes more layers than the model's 8: 8 - 9 = -1 left for the "
          "other stages");
    CHECK(with({{"first_stage_layers", 0}}).find("test.json: $.strategy.first_stage_layers: ") == 0);
    // pp = 2: the two stages are the whole pipeline.
    json two = pipeline("1f1b", 2, 2, 8);
    two["strategy"]["first_stage_layers"] = 3;
    two["strategy"]["last_stage_layers"] = 4;
    CHECK(config_error(two) == "test.json: $.strategy.last_stage_layers: with pp = 2 the first and last stage hold "
                               "every layer, but they hold 3 + 4 of the model's 8 (1 left over)");
    two["strategy"]["last_stage_layers"] = 5;
    CHECK(run(two).report.step_time > 0);
    // Chunks: each rank's share must split over them.
    json inter = pipeline("interleaved", 4, 8, 16);
    inter["strategy"]["chunks"] = 2;
    inter["strategy"]["first_stage_layers"] = 3;
    CHECK(config_error(inter) == "test.json: $.strategy.first_stage_layers: 3 layers on the first pipeline rank "
                                 "cannot be split evenly over its 2 chunks (3 % 2 = 1)");
    inter["strategy"]["first_stage_layers"] = 4;
    inter["strategy"]["last_stage_layers"] = 6;
    CHECK(config_error(inter) == "test.json: $.strategy.last_stage_layers: leaves 16 - 4 - 6 = 6 layers for the 2 "
                                 "other pipeline stages: 3 each, which cannot be split evenly over 2 chunks (3 % 2 = 1)");
    inter["strategy"].erase("first_stage_layers");
    inter["strategy"].erase("last_stage_layers");
    inter["strategy"]["stage_layers"] = {4, 4, 4, 4};
    CHECK(config_error(inter) == "test.json: $.strategy.stage_layers: expected 8 entries, one per pipeline stage in "
                                 "model order (pp x chunks = 4 x 2), found 4");
    // DualPipeV and schedule files place their stages otherwise: the full list.
    json v = pipeline("dualpipev", 4, 8, 16);
    v["strategy"]["first_stage_layers"] = 2;
    CHECK(config_error(v).find("test.json: $.strategy.first_stage_layers: Megatron-LM's uneven split gives the first "
                               "and last pipeline rank their layers") == 0);
    json file = pipeline("schedule", 4, 8, 16);
    file["strategy"]["schedule_file"] = std::string(DTSIM_CONFIGS) + "/schedules/zbh1_p4_m8.txt";
    file["strategy"]["stage_layers"] = {2, 2, 2, 2, 2, 2, 2, 2};
    CHECK(config_error(file) == "test.json: $.strategy.stage_layers: expected 4 entries, one per stage of the "
                                "schedule in model order, found 8");
    // Strategies without a pipeline take none of them.
    json ddp = pipeline("ddp", 1, 4, 8);
    ddp["strategy"]["stage_layers"] = {8};
    CHECK(config_error(ddp) == "test.json: $.strategy.stage_layers: splits a pipeline's layers over its stages, but "
                               "strategy \"ddp\" has no pipeline; use \"1f1b\", \"interleaved\" or another pipeline");
    json one = pipeline("1f1b", 1, 4, 8);
    one["strategy"]["last_stage_layers"] = 8;
    CHECK(config_error(one) == "test.json: $.strategy.last_stage_layers: needs a pipeline of at least two stages, "
                               "found pp = 1");
    // Without the keys, the even split's messages stay as they were.
    json odd = pipeline("1f1b", 4, 4, 10);
    CHECK(config_error(odd) == "test.json: $.strategy.pp: 10 layers cannot be split evenly into 4 pipeline stages "
                               "(10 % 4 = 2)");
    odd["strategy"]["stage_layers"] = {2, 3, 3, 2};
    CHECK(run(odd).report.step_time > 0);
}
