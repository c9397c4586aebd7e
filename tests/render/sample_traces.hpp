// Traces built in code for the renderer tests.
#pragma once

#include "dtsim/trace.hpp"

#include <utility>
#include <vector>

namespace dtsim::render::testing {

inline Event make_event(OpCode op, std::int32_t layer, double start, double duration, double memory,
                        IdSet batches = {}, Stream stream = Stream::compute) {
    Event e;
    e.op = op;
    e.layer = layer;
    e.start = start;
    e.duration = duration;
    e.memory = memory;
    e.batches = std::move(batches);
    e.stream = stream;
    return e;
}

// A hardware-world trace (seconds, bytes) of ranks 0, 1, ... holding these events each, summarized.
inline Trace seconds_trace(std::vector<std::vector<Event>> ranks) {
    Trace t;
    t.time_unit = "s";
    t.memory_unit = "byte";
    t.ranks.resize(ranks.size());
    for (std::size_t r = 0; r < ranks.size(); ++r) {
        t.ranks[r].rank = static_cast<int>(r);
        t.ranks[r].events = std::move(ranks[r]);
    }
    summarize(t);
    return t;
}

// The ddp puzzle as the reference library ran it (tests/data/golden/ddp.json): 2 layers,
// 4 batches, 4 ranks; rank r works on batch r.
inline Trace ddp_trace() {
    Trace t;
    t.meta = {{"puzzle", "ddp"}, {"layers", 2}, {"batches", 4}, {"ranks", 4}};
    for (int r = 0; r < 4; ++r) {
        RankTrace rt;
        rt.rank = r;
        const auto b = IdSet::single(r);
        rt.events = {
            make_event(ops::forward, 0, 0, 1, 1179648, b),
            make_event(ops::forward, 1, 1, 1, 1310720, b),
            make_event(ops::loss, 2, 2, 0, 1441792),
            make_event(ops::backward, 1, 2, 1, 1572864, b),
            make_event(ops::backward, 0, 3, 1, 1703936, b),
            make_event(ops::allreduce, 0, 4, 0.3, 1835008),
            make_event(ops::update, kNoLayer, 4.3, 0.5, 1835008),
            make_event(ops::allreduce, 1, 4.8, 0.3, 1835008),
            make_event(ops::update, kNoLayer, 5.1, 0.5, 1835008),
        };
        t.ranks.push_back(std::move(rt));
    }
    summarize(t);
    t.summary.correct = true;
    return t;
}

// A hardware-world trace: seconds and bytes, all-reduces on the comm stream
// overlapping the backward pass, a known capacity. Rank 1 peaks higher.
inline Trace hardware_trace() {
    Trace t;
    t.time_unit = "s";
    t.memory_unit = "byte";
    t.meta = {{"config", "two-gpu-test"}, {"layers", 2}, {"ranks", 2}};
    t.memory_capacity = 16.0 * (1 << 30);
    const double gib = 1 << 30;
    const auto all_reduce = OpCode::of("all_reduce");
    for (int r = 0; r < 2; ++r) {
        RankTrace rt;
        rt.rank = r;
        const double extra = r * 2 * gib;
        const auto b = IdSet::range(2 * r, 2 * r + 2);
        rt.events = {
            make_event(ops::forward, 0, 0, 2e-3, 4 * gib + extra, b),
            make_event(ops::forward, 1, 2e-3, 2e-3, 6 * gib + extra, b),
            make_event(ops::backward, 1, 4e-3, 4e-3, 8 * gib + extra, b),
            make_event(all_reduce, 1, 8e-3, 3e-3, 7 * gib + extra, {}, Stream::comm),
            make_event(ops::backward, 0, 8e-3, 4e-3, 7 * gib + extra, b),
            make_event(all_reduce, 0, 12e-3, 3e-3, 5 * gib + extra, {}, Stream::comm),
            make_event(OpCode::of("optimizer"), kNoLayer, 15e-3, 1e-3, 5 * gib + extra),
        };
        rt.events[3].bytes = 512.0 * (1 << 20);
        rt.events[5].bytes = 512.0 * (1 << 20);
        rt.events[0].flops = 3e12;
        t.ranks.push_back(std::move(rt));
    }
    summarize(t);
    return t;
}

// GPipe on 2 pipeline ranks, 2 microbatches, as `dtsim schedule` writes it (layer = stage,
// costs T_F = 1, T_B = 2): every forward, then the backwards. Each rank is busy 6 of the 9
// steps, so the bubble is 1/3 on both.
inline Trace gpipe_trace() {
    Trace t;
    t.meta = {{"name", "pipeline schedule gpipe"}, {"ranks", 2}, {"stages", 2}, {"microbatches", 2},
              {"generator", "gpipe"}};
    const auto mb = [](int m) { return IdSet::single(m); };
    RankTrace r0, r1;
    r0.rank = 0;
    r1.rank = 1;
    r0.events = {make_event(ops::forward, 0, 0, 1, 0, mb(0)), make_event(ops::forward, 0, 1, 1, 1, mb(1)),
                 make_event(ops::backward, 0, 5, 2, 2, mb(1)), make_event(ops::backward, 0, 7, 2, 1, mb(0))};
    r1.events = {make_event(ops::forward, 1, 1, 1, 0, mb(0)), make_event(ops::forward, 1, 2, 1, 1, mb(1)),
                 make_event(ops::backward, 1, 3, 2, 2, mb(1)), make_event(ops::backward, 1, 5, 2, 1, mb(0))};
    t.ranks = {std::move(r0), std::move(r1)};
    summarize(t);
    t.summary.correct = true;
    return t;
}

// A hardware-world pipeline: grid tp 2 x pp 2 (ranks 0-1 stage 0, ranks 2-3 stage 1), two
// layers per stage, one microbatch; tensor-parallel collectives (no microbatch) between the
// layers of a pass; selective recompute before each layer's input backward, the weight
// backward (ZB W) after, the optimizer last. Seconds and bytes.
inline Trace hardware_pipeline_trace() {
    Trace t;
    t.time_unit = "s";
    t.memory_unit = "byte";
    t.meta = {{"config", "pp-test"}, {"name", "pp-test"}, {"note", "a short note"},
              {"strategy", {{"name", "zbh1"}, {"tp", 2}, {"pp", 2}}}, {"grid", {{"tp", 2}, {"cp", 1}, {"dp", 1}, {"pp", 2}}}};
    const auto mb = IdSet::single(0);
    const auto ag = OpCode::of("all_gather"), rc = OpCode::of("recompute"), bi = OpCode::of("backward_input"),
               bw = OpCode::of("backward_weight"), opt = OpCode::of("optimizer");
    for (int r = 0; r < 4; ++r) {
        RankTrace rt;
        rt.rank = r;
        const int stage = r / 2;
        const std::int32_t l0 = 2 * stage;
        const double f0 = stage == 0 ? 0 : 4;  // stage 1 starts when stage 0's forward is done
        rt.events = {
            make_event(ops::forward, l0, f0, 1, 0, mb),
            make_event(ag, l0 + 1, f0 + 1, 1, 0),
            make_event(ops::forward, l0 + 1, f0 + 2, 1, 0, mb),
        };
        const double b0 = stage == 1 ? 7 : 14;
        rt.events.push_back(make_event(rc, l0 + 1, b0, 1, 0, mb));
        rt.events.push_back(make_event(bi, l0 + 1, b0 + 1, 1, 0, mb));
        rt.events.push_back(make_event(rc, l0, b0 + 2, 1, 0, mb));
        rt.events.push_back(make_event(bi, l0, b0 + 3, 1, 0, mb));
        rt.events.push_back(make_event(bw, l0 + 1, b0 + 4, 1, 0, mb));
        rt.events.push_back(make_event(bw, l0, b0 + 5, 1, 0, mb));
        rt.events.push_back(make_event(opt, kNoLayer, 20, 1, 0));
        t.ranks.push_back(std::move(rt));
    }
    summarize(t);
    return t;
}

}  // namespace dtsim::render::testing
