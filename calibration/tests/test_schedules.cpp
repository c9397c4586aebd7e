#include "host/puzzle_model.hpp"
#include "host/schedule.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>

using namespace dtsim::calib;

namespace {

ModelDims canonical(const std::string& puzzle) {
    const auto& p = puzzle_info(puzzle);
    ModelDims d;
    d.layers = p.layers;
    d.batches = p.batches;
    d.ranks = p.ranks;
    return d;
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

Instr op(Op o, int layer = -1, int peer = -1) {
    Instr i;
    i.op = o;
    i.layer = layer;
    i.peer = peer;
    return i;
}

}  // namespace

TEST_CASE("every puzzle's schedule at the seed's sizes logs the golden events, rank by rank, in order") {
    for (const auto& info : puzzles()) {
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
                // The puzzle's memory at the event: the schedule frees exactly what the seed frees.
                CHECK(i.puzzle_memory == e["memory"].get<double>());
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

TEST_CASE("every buffer a schedule creates is released once, and nothing stays live") {
    for (const auto& info : puzzles()) {
        const std::string name(info.name);
        CAPTURE(name);
        for (const auto& p : build_programs(name, canonical(name))) {
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
    const auto p = build_rank_program("fsdp", canonical("fsdp"), 1);
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

TEST_CASE("other sizes than the seed's build and pass the cross-rank checks") {
    auto d = canonical("gpipe");
    d.layers = 16;
    d.ranks = 8;
    d.batches = 8;
    CHECK(event_counts(build_programs("gpipe", d)).size() == 8);
    d = canonical("pipeline_fsdp");
    d.ranks = 32;
    d.batches = 8;
    d.layers = 8;
    CHECK_NOTHROW(build_programs("pipeline_fsdp", d));
    d = canonical("fsdp");
    d.ranks = d.batches = 8;
    d.layers = 3;
    CHECK_NOTHROW(build_programs("fsdp", d));
    d = canonical("ddp");
    d.ranks = d.batches = 2;
    CHECK_NOTHROW(build_programs("ddp", d));
    d = canonical("basic");
    d.layers = 8;
    d.batches = 2;
    CHECK(event_counts(build_programs("basic", d)) == std::vector<std::size_t>{8 + 1 + 8 + 8});
}

TEST_CASE("sizes a seed solution cannot run are refused with the constraint") {
    auto d = canonical("ddp");
    d.batches = 8;
    CHECK_THROWS_WITH_AS(build_programs("ddp", d), doctest::Contains("--batches must equal --ranks"), ScheduleError);
    d = canonical("pipeline");
    d.layers = 6;
    CHECK_THROWS_WITH_AS(build_programs("pipeline", d), doctest::Contains("multiple of --ranks"), ScheduleError);
    d = canonical("pipeline_fsdp");
    d.ranks = 8;
    CHECK_THROWS_WITH_AS(build_programs("pipeline_fsdp", d), doctest::Contains("--batches must equal --ranks / 4"),
                         ScheduleError);
    d = canonical("basic");
    d.ranks = 2;
    CHECK_THROWS_WITH_AS(build_programs("basic", d), doctest::Contains("--ranks 1"), ScheduleError);
    CHECK_THROWS_WITH_AS(puzzle_info("gpippe"), doctest::Contains("did you mean gpipe?"), ScheduleError);
}

TEST_CASE("check_programs finds mismatched collectives, unpaired messages and deadlocks") {
    ModelDims d;
    d.layers = 1;
    d.batches = 2;
    d.ranks = 2;
    RankProgram a{0, {{BufferKind::weight, 4}}, {}};
    RankProgram b{1, {{BufferKind::weight, 4}}, {}};
    auto with_buffer = [](Instr i) {
        i.ins = {0};
        return i;
    };
    a.instrs = {with_buffer(op(Op::allreduce, 0))};
    b.instrs = {with_buffer(op(Op::allreduce, 1))};
    CHECK_THROWS_WITH_AS(check_programs({a, b}, d), doctest::Contains("collective #0"), ScheduleError);

    Message m{BufferKind::activation, 0, {0}, 4};
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

TEST_CASE("a schedule that breaks a puzzle rule fails while building, naming rank, operation and layer") {
    using namespace dtsim::calib::puzzle;
    ModelDims d;
    d.layers = 2;
    d.batches = 2;
    d.ranks = 2;
    {
        Model model(d, 1);
        auto [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
        tie(weights[0], opt_states[0]) = model.load_weights(0, 1, 2);
        activations[0] = model.get_activation({1});
        CHECK_THROWS_WITH_AS(model.forward(0, activations[0], weights[0]),
                             doctest::Contains("rank 1: forward layer 0: needs the complete weight"), ScheduleError);
        CHECK_THROWS_WITH_AS((void)static_cast<const Value&>(activations[1]),
                             doctest::Contains("activations[1] is not stored"), ScheduleError);
    }
    {
        Model model(d, 0);
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
                             doctest::Contains("rank 0: update layer 1: the weight grad covers batches [0], not all 2"),
                             ScheduleError);
        CHECK_THROWS_WITH_AS(model.del(activations[7]), doctest::Contains("activations[7] is not stored"), ScheduleError);
    }
    CHECK_THROWS_WITH_AS(build_rank_program("ddp", canonical("ddp"), 4), doctest::Contains("rank 4 outside 0..3"),
                         ScheduleError);
}
