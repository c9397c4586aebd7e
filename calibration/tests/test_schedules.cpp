// The programs dtsim-puzzle-real runs are what the puzzles/ strategies do: equal to the seed's
// golden logs at the seed's sizes and to the puzzle world's run at other sizes, event by
// event (operation, layer, batches and the puzzle's memory), and free of deadlocks even
// where every send waits for its receive.
#include "host/cli.hpp"
#include "host/puzzle_model.hpp"
#include "host/schedule.hpp"

#include "dtsim/puzzle/registry.hpp"
#include "dtsim/puzzle/run.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <deque>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

using namespace dtsim;
using namespace dtsim::harness;

namespace {

ModelDims dims_of(int layers, int batches, int ranks) {
    ModelDims d;
    d.layers = layers;
    d.batches = batches;
    d.ranks = ranks;
    return d;
}

ModelDims canonical(const std::string& name) {
    const puzzle::PuzzleInfo* p = puzzle::find_puzzle(name);
    REQUIRE(p != nullptr);
    return dims_of(p->layers, p->batches, p->ranks);
}

// Sizes other than the seed's that each strategy runs at (the sizes puzzles/all.hpp gives each).
struct Size {
    std::string puzzle;
    int layers, batches, ranks;
};
const std::vector<Size>& other_sizes() {
    static const std::vector<Size> sizes = {
        {"basic", 1, 1, 1},      {"basic", 5, 9, 1},      {"basic", 8, 2, 1},         {"grad_accum", 5, 9, 1},
        {"grad_accum", 3, 2, 1}, {"ddp", 1, 1, 1},        {"ddp", 3, 6, 6},           {"ddp", 4, 8, 8},
        {"wsdp", 3, 6, 6},       {"wsdp", 5, 3, 3},       {"wsdp", 12, 8, 8},         {"fsdp", 3, 8, 8},
        {"fsdp", 4, 8, 8},       {"fsdp", 7, 5, 5},       {"pipeline", 16, 8, 8},     {"pipeline", 6, 3, 3},
        {"pipeline", 4, 4, 2},   {"gpipe", 16, 16, 8},    {"gpipe", 6, 5, 3},         {"gpipe", 4, 2, 2},
        {"pipeline_fsdp", 8, 4, 16}, {"pipeline_fsdp", 12, 4, 16},
    };
    return sizes;
}

std::vector<const Instr*> events_of(const RankProgram& p) {
    std::vector<const Instr*> out;
    for (const auto& i : p.instrs)
        if (!event_op(i.op).empty()) out.push_back(&i);
    return out;
}

std::vector<std::size_t> event_counts(const std::vector<RankProgram>& programs) {
    std::vector<std::size_t> out;
    for (const auto& p : programs) out.push_back(events_of(p).size());
    return out;
}

std::optional<nlohmann::json> golden(const std::string& puzzle) {
    const std::filesystem::path path = std::filesystem::path(DTSIM_GOLDEN_DIR) / (puzzle + ".json");
    std::ifstream f(path);
    if (!f) return std::nullopt;
    return nlohmann::json::parse(f);
}

std::vector<int> ids_of(const IdSet& s) {
    std::vector<int> out;
    s.for_each([&](std::int64_t id) { out.push_back(static_cast<int>(id)); });
    return out;
}

Instr op(Op o, int layer = -1, int peer = -1) {
    Instr i;
    i.op = o;
    i.layer = layer;
    i.peer = peer;
    return i;
}

// Each rank a coroutine of `body` with its own recording model, on one engine; the programs.
template <class Body>
std::vector<RankProgram> record(const ModelDims& d, Body body) {
    std::deque<harness::Model> models;
    Simulation sim(d.ranks);
    for (int r = 0; r < d.ranks; ++r) models.emplace_back(sim.gpu(r), d);
    sim.run([&](Gpu& g) { return body(models[static_cast<std::size_t>(g.rank())]); });
    std::vector<RankProgram> out;
    for (auto& m : models) out.push_back(m.finish());
    return out;
}

}  // namespace

TEST_CASE("every puzzle's programs at the seed's sizes log the golden events, rank by rank, in order") {
    for (const auto& info : puzzle::puzzles()) {
        const std::string name(info.name);
        CAPTURE(name);
        const auto programs = build_programs(name, canonical(name));
        const auto g = golden(name);
        if (!g) {
            MESSAGE(name << ".json not found under " << DTSIM_GOLDEN_DIR << "; skipping");
            continue;
        }
        const auto& ranks = (*g)["events"];
        REQUIRE(ranks.size() == programs.size());
        for (std::size_t r = 0; r < programs.size(); ++r) {
            CAPTURE(r);
            const auto mine = events_of(programs[r]);
            const auto& theirs = ranks[r];
            REQUIRE(mine.size() == theirs.size());
            for (std::size_t k = 0; k < mine.size(); ++k) {
                CAPTURE(k);
                const Instr& i = *mine[k];
                const auto& e = theirs[k];
                CHECK(std::string(event_op(i.op)) == e["typ"].get<std::string>());
                const auto layer = event_layer(i);
                if (e["layer"].is_null())
                    CHECK_FALSE(layer.has_value());
                else
                    CHECK(layer == e["layer"].get<int>());
                CHECK(event_batches(i) == e["batches"].get<std::vector<int>>());
                // The puzzle's memory at the event: the program frees exactly what the seed frees.
                CHECK(i.puzzle_memory == e["memory"].get<double>());
            }
        }
    }
}

TEST_CASE("at other sizes the programs log the puzzle world's events: one strategy source, two worlds") {
    for (const auto& s : other_sizes()) {
        CAPTURE(s.puzzle);
        CAPTURE(s.layers);
        CAPTURE(s.batches);
        CAPTURE(s.ranks);
        const auto programs = build_programs(s.puzzle, dims_of(s.layers, s.batches, s.ranks));
        const puzzle::RunResult sim =
            puzzle::run_strategy(puzzle::find_puzzle(s.puzzle)->strategy, s.layers, s.batches, s.ranks);
        REQUIRE_FALSE(sim.check_error.has_value());
        REQUIRE(sim.trace.ranks.size() == programs.size());
        for (std::size_t r = 0; r < programs.size(); ++r) {
            CAPTURE(r);
            const auto mine = events_of(programs[r]);
            const auto& theirs = sim.trace.ranks[r].events;
            REQUIRE(mine.size() == theirs.size());
            for (std::size_t k = 0; k < mine.size(); ++k) {
                CAPTURE(k);
                const Instr& i = *mine[k];
                const Event& e = theirs[k];
                CHECK(event_op(i.op) == e.op.name());
                CHECK(event_layer(i).value_or(kNoLayer) == e.layer);
                CHECK(event_batches(i) == ids_of(e.batches));
                CHECK(i.puzzle_memory == e.memory);
            }
        }
    }
}

TEST_CASE("event counts per rank at the seed's sizes") {
    CHECK(event_counts(build_programs("basic", canonical("basic"))) == std::vector<std::size_t>{7});
    CHECK(event_counts(build_programs("grad_accum", canonical("grad_accum"))) == std::vector<std::size_t>{22});
    CHECK(event_counts(build_programs("ddp", canonical("ddp"))) == std::vector<std::size_t>(4, 9));
    CHECK(event_counts(build_programs("wsdp", canonical("wsdp"))) == std::vector<std::size_t>(4, 37));
    CHECK(event_counts(build_programs("fsdp", canonical("fsdp"))) == std::vector<std::size_t>(4, 37));
    CHECK(event_counts(build_programs("pipeline", canonical("pipeline"))) == std::vector<std::size_t>{8, 10, 10, 9});
    CHECK(event_counts(build_programs("gpipe", canonical("gpipe"))) == std::vector<std::size_t>{26, 34, 34, 30});
    std::vector<std::size_t> pf;
    for (int g = 0; g < 4; ++g) pf.insert(pf.end(), {20, 22, 22, 21});
    CHECK(event_counts(build_programs("pipeline_fsdp", canonical("pipeline_fsdp"))) == pf);
}

TEST_CASE("every buffer a program creates is released once, and nothing stays live") {
    std::vector<Size> sizes = other_sizes();
    for (const auto& info : puzzle::puzzles()) sizes.push_back({info.name, info.layers, info.batches, info.ranks});
    for (const auto& s : sizes) {
        CAPTURE(s.puzzle);
        CAPTURE(s.layers);
        CAPTURE(s.ranks);
        for (const auto& p : build_programs(s.puzzle, dims_of(s.layers, s.batches, s.ranks))) {
            std::vector<int> created(p.buffers.size(), 0), released(p.buffers.size(), 0);
            std::int64_t live = 0;
            for (const auto& i : p.instrs) {
                CHECK(i.live_bytes == live);
                for (int b : i.outs) {
                    ++created[static_cast<std::size_t>(b)];
                    live += p.buffers[static_cast<std::size_t>(b)].elems * 4;
                }
                if (i.op == Op::release) {
                    ++released[static_cast<std::size_t>(i.ins[0])];
                    live -= p.buffers[static_cast<std::size_t>(i.ins[0])].elems * 4;
                }
                for (int b : i.ins) CHECK(created[static_cast<std::size_t>(b)] == 1);  // read only while alive
                if (i.op != Op::release)
                    for (int b : i.ins) CHECK(released[static_cast<std::size_t>(b)] == 0);
            }
            CHECK(live == 0);
            for (std::size_t b = 0; b < p.buffers.size(); ++b) {
                CHECK(created[b] == 1);
                CHECK(released[b] == 1);
            }
        }
    }
}

TEST_CASE("a receive gets the sender's value: the passes pair up by construction") {
    const auto programs = build_programs("gpipe", canonical("gpipe"));
    int pairs = 0;
    for (const auto& p : programs)
        for (const auto& i : p.instrs) {
            if (i.op != Op::recv) continue;
            REQUIRE(i.message.has_value());
            // Forward activations come from the previous stage, gradients from the next.
            CHECK(i.peer == (i.message->kind == BufferKind::activation ? p.rank - 1 : p.rank + 1));
            CHECK(i.message->batches.size() == 1);
            CHECK(i.message->elems == p.buffers.at(static_cast<std::size_t>(i.outs.at(0))).elems);
            ++pairs;
        }
    CHECK(pairs == 2 * 3 * 4);  // 3 stage boundaries, both ways, 4 batches
}

TEST_CASE("sharded updates read their own shard of the gradient") {
    const auto wsdp = build_programs("wsdp", canonical("wsdp"));
    const auto fsdp = build_programs("fsdp", canonical("fsdp"));
    const std::int64_t shard = 512 * 512 / 4;
    for (int r = 0; r < 4; ++r) {
        for (const auto& i : wsdp[static_cast<std::size_t>(r)].instrs)
            if (i.op == Op::update) {
                CHECK(i.shard == r);
                CHECK(i.shards == 4);
                CHECK(i.grad_offset == r * shard);  // the all-reduced gradient is complete
            }
        for (const auto& i : fsdp[static_cast<std::size_t>(r)].instrs)
            if (i.op == Op::update) CHECK(i.grad_offset == 0);  // reduce-scatter left only this shard
    }
}

TEST_CASE("the real buffers have the real sizes: fp32, Adam's two moments, shards of the padded weight") {
    const auto p = build_programs("fsdp", canonical("fsdp")).at(1);
    const auto& first = p.instrs.front();
    REQUIRE(first.op == Op::get_activation);
    CHECK(p.buffers[static_cast<std::size_t>(first.outs[0])].elems == 256 * 512);
    const auto& load = p.instrs[1];
    REQUIRE(load.op == Op::load_weights);
    CHECK(p.buffers[static_cast<std::size_t>(load.outs[0])].elems == 512 * 512 / 4);
    CHECK(p.buffers[static_cast<std::size_t>(load.outs[1])].elems == 2 * 512 * 512 / 4);
    ModelDims odd = canonical("fsdp");
    odd.hidden = 5;  // 25 elements over 4 ranks: padded to 28
    odd.tokens = 3;
    CHECK(odd.full_weight_elems() == 28);
    CHECK_NOTHROW(build_programs("fsdp", odd));
}

TEST_CASE("sizes a strategy cannot run on GPUs are refused with the constraint") {
    auto d = canonical("ddp");
    d.batches = 8;
    CHECK_THROWS_WITH_AS(build_programs("ddp", d),
                         doctest::Contains("rank r takes batch r, so batches must equal ranks"), ArgError);
    d = canonical("pipeline");
    d.layers = 6;
    CHECK_THROWS_WITH_AS(build_programs("pipeline", d), doctest::Contains("layers must be a multiple of ranks"),
                         ArgError);
    d = canonical("pipeline_fsdp");
    d.ranks = 8;
    CHECK_THROWS_WITH_AS(build_programs("pipeline_fsdp", d), doctest::Contains("batches must equal ranks / 4"),
                         ArgError);
    d = dims_of(8, 8, 32);
    CHECK_THROWS_WITH_AS(build_programs("pipeline_fsdp", d), doctest::Contains("only at 16 ranks"), ArgError);
    d = canonical("basic");
    d.ranks = 2;
    CHECK_THROWS_WITH_AS(build_programs("basic", d), doctest::Contains("it runs on one GPU: ranks must be 1"),
                         ArgError);
    CHECK_THROWS_WITH_AS(build_programs("gpippe", canonical("gpipe")),
                         doctest::Contains("unknown puzzle 'gpippe'; the puzzles are: basic, grad_accum"), ArgError);
}

TEST_CASE("check_programs finds mismatched collectives, unpaired messages and deadlocks") {
    const ModelDims d = dims_of(1, 2, 2);
    RankProgram a{0, {{BufferKind::weight, 4}}, {}};
    RankProgram b{1, {{BufferKind::weight, 4}}, {}};
    auto with_buffer = [](Instr i) {
        i.ins = {0};
        return i;
    };
    a.instrs = {with_buffer(op(Op::allreduce, 0))};
    b.instrs = {with_buffer(op(Op::allreduce, 1))};
    CHECK_THROWS_WITH_AS(check_programs({a, b}, d), doctest::Contains("collective #0"), ScheduleError);

    Wire m{BufferKind::activation, 0, IdSet{0}, IdSet{}, 1, 0, 4};
    Instr send = op(Op::send, -1, 1);
    send.message = m;
    a.instrs = {send};
    b.instrs = {};
    CHECK_THROWS_WITH_AS(check_programs({a, b}, d), doctest::Contains("rank 0 sends 1 messages to rank 1"),
                         ScheduleError);

    // Both ranks send first: fine for the puzzle's one-slot mailboxes, a hang for NCCL.
    Instr send0 = op(Op::send, -1, 1), send1 = op(Op::send, -1, 0), recv0 = op(Op::recv, -1, 1),
          recv1 = op(Op::recv, -1, 0);
    send0.message = send1.message = recv0.message = recv1.message = m;
    a.instrs = {send0, recv0};
    b.instrs = {send1, recv1};
    CHECK_THROWS_WITH_AS(check_programs({a, b}, d), doctest::Contains("deadlocks"), ScheduleError);
    b.instrs = {recv1, send1};
    // Pairs up and completes, but no final weights: the puzzle's correctness check fails.
    CHECK_THROWS_WITH_AS(check_programs({a, b}, d), doctest::Contains("no rank sets a final weight for layer 0"),
                         ScheduleError);
}

TEST_CASE("a strategy that sends before it receives on both sides runs on the engine, and check_programs refuses it") {
    // The engine's mailboxes hold one message, so both sends complete; NCCL's may wait for the receive.
    const auto programs = record(dims_of(1, 2, 2), [](harness::Model& model) -> Task<> {
        auto [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
        activations[0] = model.get_activation({model.rank});
        co_await model.pass_to(1 - model.rank, activations[0]);
        activations[1] = co_await model.receive();
    });
    CHECK(programs[0].instrs.back().op == Op::release);
    CHECK_THROWS_WITH_AS(check_programs(programs, dims_of(1, 2, 2)),
                         doctest::Contains("the schedule deadlocks when sends wait for their receives"), ScheduleError);
}

TEST_CASE("ranks whose collectives differ fail on the engine, naming the rank and the round") {
    auto other_layers = [](harness::Model& model) -> Task<> {
        auto [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
        grad_weights[0] = model.fake_grad(0, {model.rank});
        grad_weights[0] = co_await model.allreduce(grad_weights[0], model.rank);
    };
    CHECK_THROWS_AS(record(dims_of(2, 2, 2), other_layers), CollectiveMismatchError);
    auto other_values = [](harness::Model& model) -> Task<> {
        auto [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
        tie(weights[0], opt_states[0]) = model.load_weights(0, model.rank, 2);
        weights[1] = co_await model.allgather(model.rank == 0 ? weights[0] : opt_states[0], 0);
    };
    CHECK_THROWS_WITH_AS(record(dims_of(2, 2, 2), other_values),
                         doctest::Contains("rank 1: allgather (layer 0): gives 262144 elements of optimizer state"),
                         ScheduleError);
}

TEST_CASE("a strategy that breaks a puzzle rule fails, naming rank, operation and layer") {
    const ModelDims d = dims_of(2, 2, 2);
    Simulation sim(2);
    {
        harness::Model model(sim.gpu(1), d);
        auto [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
        tie(weights[0], opt_states[0]) = model.load_weights(0, 1, 2);
        activations[0] = model.get_activation({1});
        CHECK_THROWS_WITH_AS(model.forward(0, activations[0], weights[0]),
                             doctest::Contains("rank 1: forward (layer 0): needs the complete weight"), PuzzleError);
        CHECK_THROWS_WITH_AS((void)static_cast<const harness::Value&>(activations[1]),
                             doctest::Contains("activations[1] is not stored"), PuzzleError);
        CHECK_THROWS_WITH_AS(tie(weights[1], opt_states[1]) = model.load_weights(1, 0, 3),
                             doctest::Contains("a real run splits into 1 or RANKS (2)"), PuzzleError);
    }
    {
        harness::Model model(sim.gpu(0), d);
        auto [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
        tie(weights[0], opt_states[0]) = model.load_weights(0);
        activations[0] = model.get_activation({0});
        activations[1] = model.forward(0, activations[0], weights[0]);
        tie(weights[1], opt_states[1]) = model.load_weights(1);
        activations[2] = model.forward(1, activations[1], weights[1]);
        grad_activations[2] = model.loss(activations[2]);
        tie(grad_weights[1], grad_activations[1]) = model.backward(1, activations[1], grad_activations[2], weights[1]);
        // Only batch 0 of 2: the update must refuse.
        CHECK_THROWS_WITH_AS(model.update(1, grad_weights[1], weights[1], opt_states[1]),
                             doctest::Contains("rank 0: update (layer 1): the weight grad covers batches"),
                             PuzzleError);
        CHECK_THROWS_WITH_AS(del(activations[7]), doctest::Contains("activations[7] is not stored"), PuzzleError);
        // `a + b` adds in a's buffer: not while another entry holds that buffer too.
        grad_weights[Key(1, 0)] = grad_weights[1];
        CHECK_THROWS_WITH_AS(grad_weights[1] = grad_weights[1] + grad_weights[Key(1, 0)],
                             doctest::Contains("held by another store entry"), PuzzleError);
        CHECK(len(grad_weights) == 2);
    }
}
