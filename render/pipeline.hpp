// The pipeline view's boxes: a rank's compute stream read as passes, one box per
// forward, backward, input-gradient (I), weight-gradient (W) or recompute pass of a
// microbatch through one of the rank's model chunks, as the figures of the Megatron-LM
// interleaved-1F1B and zero-bubble papers draw them; and the rank's idle time.
#pragma once

#include "dtsim/trace.hpp"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dtsim::render::detail {

enum class PassKind : std::uint8_t { forward, backward, input_grad, weight_grad, recompute, overlap, other };
inline constexpr std::size_t kPassKinds = 7;

struct Interval {
    double start = 0, end = 0;
};

struct Pass {
    PassKind kind = PassKind::other;
    double start = 0, end = 0;
    IdSet batches;   // the microbatch (empty for other work)
    int chunk = -1;  // which of the rank's model chunks, in layer order (-1: none)
    std::vector<Interval> recompute;  // recomputation inside a backward pass (selective recompute)
    // An overlapped F&B pair (kind overlap): its F from start to `split` (microbatch `batches`, chunk
    // `chunk`), its B from `split` to end.
    double split = 0;
    IdSet backward_batches;
    int backward_chunk = -1;
};

struct RankPasses {
    std::vector<Pass> passes;   // in time order
    std::vector<Interval> idle;  // gaps of the compute stream in [0, makespan]
    double idle_time = 0;
    int chunks = 1;
};

// The passes of one rank: consecutive compute-stream events of one microbatch, one
// direction and one chunk make a pass; events without a microbatch between two events of
// the same pass (tensor-parallel collectives) belong to it, the others are `other` work.
// `layer_is_stage`: the trace's layers are pipeline stages (dtsim schedule), so each
// distinct layer is a chunk; otherwise a chunk is a run of consecutive layers, cut also
// where a stage starts (`stage_starts`: the first layer of each stage, sorted; may be empty).
// `overlapped`: the indices (sorted) of the rank's events that are the F of an overlapped F&B pair,
// whose B is the rank's next pass event. With stage_starts, a rank's chunks are the stages it holds,
// a stage without layers among them (the embedding's is the first stage, the output layer's and the
// loss's the last).
RankPasses rank_passes(const RankTrace& rank, double makespan, bool layer_is_stage,
                       const std::vector<std::int32_t>& stage_starts = {},
                       const std::vector<std::size_t>& overlapped = {});

// The overlapped F&B pairs of the trace's meta "overlapped" ([rank, event] of each pair's F, written
// by dtsim schedule): the F's event indices of the rank, sorted.
std::vector<std::size_t> overlapped_forwards(const Trace& trace, int rank);

// The first layer of each pipeline stage from the trace's meta grid.stage_layers (the layers
// of each stage, in order); empty when the trace does not say.
std::vector<std::int32_t> stage_starts(const Trace& trace);

// The kind of pass an operation belongs to; `other` for work outside the passes.
PassKind pass_kind(OpCode op);

}  // namespace dtsim::render::detail
