#include "synthetic_trace.hpp"

#include <algorithm>
#include <cstdint>

namespace dtsim::render::detail {
namespace {

// A fixed pseudo-random number in [0, 1) for (a, b).
double jitter(std::uint64_t a, std::uint64_t b) {
    std::uint64_t x = a * 0x9E3779B97F4A7C15ULL ^ (b + 0x632BE59BD9B4E019ULL);
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ULL;
    x ^= x >> 29;
    return static_cast<double>(x >> 11) / static_cast<double>(1ULL << 53);
}

}  // namespace

Trace synthetic_trace(const SyntheticSpec& spec) {
    Trace t;
    const bool hw = spec.hardware;
    t.time_unit = hw ? "s" : "step";
    t.memory_unit = hw ? "byte" : "unit";
    t.meta = {{"config", "synthetic"},
              {"layers", spec.layers},
              {"microbatches", spec.microbatches},
              {"ranks", spec.ranks}};
    const double unit = hw ? 1e-3 : 1.0;                          // one forward
    const double weights = hw ? 512.0 * (1 << 20) : 65536.0;      // per layer
    const double activation = hw ? 768.0 * (1 << 20) : 131072.0;  // per layer and microbatch
    if (hw) t.memory_capacity = 24.0 * (1 << 30);
    const OpCode allreduce = hw ? OpCode::of("all_reduce") : ops::allreduce;
    t.ranks.resize(static_cast<std::size_t>(std::max(spec.ranks, 0)));
    for (int r = 0; r < spec.ranks; ++r) {
        auto& rank = t.ranks[static_cast<std::size_t>(r)];
        rank.rank = r;
        const auto ur = static_cast<std::uint64_t>(r);
        std::uint64_t n = 0;
        double clock = (r % 4) * unit;  // pipeline-like skew between neighbours
        double memory = spec.layers * weights;
        const double act = activation * (1 + 0.05 * (r % 7));
        auto add = [&](OpCode op, std::int32_t layer, Stream stream, double start, double duration,
                       IdSet batches) {
            Event e;
            e.op = op;
            e.layer = layer;
            e.stream = stream;
            e.start = start;
            e.duration = duration;
            e.memory = memory;
            e.batches = std::move(batches);
            if (hw && op_kind(op) == OpKind::compute) e.flops = 2e12 * duration / unit;
            if (hw && op == allreduce) e.bytes = weights;
            rank.events.push_back(std::move(e));
        };
        for (int step = 0; step < spec.steps; ++step) {
            double comm_free = clock;
            std::vector<double> reduced(static_cast<std::size_t>(spec.layers), clock);
            for (int mb = 0; mb < spec.microbatches; ++mb) {
                const auto batch = IdSet::single(static_cast<std::int64_t>(r) * spec.microbatches + mb);
                for (int l = 0; l < spec.layers; ++l) {
                    const double d = unit * (0.9 + 0.2 * jitter(ur, n++));
                    add(ops::forward, l, Stream::compute, clock, d, batch);
                    clock += d;
                    memory += act;
                }
                add(ops::loss, spec.layers, Stream::compute, clock, 0, {});
                for (int l = spec.layers - 1; l >= 0; --l) {
                    const double d = 2 * unit * (0.9 + 0.2 * jitter(ur, n++));
                    add(ops::backward, l, Stream::compute, clock, d, batch);
                    clock += d;
                    memory -= act;
                    if (mb + 1 == spec.microbatches) {
                        const double rd = 0.3 * unit;
                        if (hw) {  // overlaps the remaining backward passes
                            const double start = std::max(comm_free, clock);
                            add(allreduce, l, Stream::comm, start, rd, {});
                            comm_free = reduced[static_cast<std::size_t>(l)] = start + rd;
                        } else {
                            add(allreduce, l, Stream::compute, clock, rd, {});
                            clock += rd;
                        }
                    }
                }
            }
            for (int l = 0; l < spec.layers; ++l) {
                clock = std::max(clock, reduced[static_cast<std::size_t>(l)]);
                add(ops::update, l, Stream::compute, clock, 0.5 * unit, {});
                clock += 0.5 * unit;
            }
        }
    }
    summarize(t);
    t.summary.correct = true;
    return t;
}

}  // namespace dtsim::render::detail
