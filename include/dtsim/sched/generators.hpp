// The published pipeline schedules, each a pure function of the pipeline size
// p (ranks), the number of microbatches m and, where it applies, the number of
// model chunks v per rank. They return compute-only schedules (lower() adds the
// communication actions). Stage placement:
//  - one chunk per rank (GPipe, 1F1B, ZB-H1): rank r runs stage r;
//  - looped (interleaved 1F1B, looped BFS; Megatron's model-chunk placement):
//    rank r runs stages r, r+p, ..., r+(v-1)p;
//  - V-shaped (DualPipeV): rank r runs stages r and 2p-1-r.
// Every generator throws std::invalid_argument naming the bad parameter.
#pragma once

#include "dtsim/sched/schedule.hpp"

#include <span>
#include <string>
#include <string_view>

namespace dtsim::sched {

// GPipe (Huang et al. 2019): all forwards, then all backwards in microbatch order
// (PyTorch's ScheduleGPipe).
Schedule gpipe(int p, int m);

// 1F1B / PipeDream-flush (Narayanan et al. 2021; Megatron's non-interleaved
// schedule, PyTorch's Schedule1F1B): rank r runs min(p-1-r, m) warm-up forwards,
// then alternates one forward and one backward, then the remaining backwards.
Schedule one_f_one_b(int p, int m);

// Interleaved 1F1B with v chunks per rank, in Megatron-LM's order
// (forward_backward_pipelining_with_interleaving with
// microbatch_group_size_per_vp_stage = g, default p): the forwards of rank r visit
// (microbatch, chunk) in groups of g microbatches, chunk by chunk
// (get_schedule_table); the k-th backward takes the k-th entry of the same table
// with the chunk reversed (v-1-c). Rank r runs min(2(p-1-r) + (v-1)g, v*m)
// warm-up forwards, then one forward and one backward at a time, then the
// remaining backwards. Megatron-LM requires p <= g <= m and a last group of 0 or
// at least p microbatches (m mod g = 0 or >= p; with the default g = p, m a
// multiple of p), raising an error otherwise; so does this, quoting its rule
// (such orders idle more than the formula, and some, e.g. p=4, m=5, v=3, have a
// dependency cycle no execution can break).
Schedule interleaved_1f1b(int p, int m, int v, int g = 0);

// ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", handcrafted
// schedule 1): 1F1B's warm-up, the backward split into I and W, and rank r
// delays its W passes by r microbatches (after its k-th I it runs the W of
// microbatch k-r, the last r W passes at the end), so that rank p-1 fills the
// cool-down bubbles with its W passes while no rank holds more than p
// microbatches' activations (1F1B's peak). The same order as PyTorch's
// ScheduleInterleavedZeroBubble with one stage per rank.
Schedule zb_h1(int p, int m);

// Looped breadth-first pipeline (Lamy-Poirier 2022, "Breadth-First Pipeline
// Parallelism"; PyTorch's ScheduleLoopedBFS): rank r runs the forwards of all m
// microbatches on its first chunk, then its second, ...; then the backwards,
// chunks in reverse and microbatches in reverse (PyTorch's order).
Schedule looped_bfs(int p, int m, int v);

// DualPipeV (DeepSeek, deepseek-ai/DualPipe dualpipev.py): the V-shaped two-chunk
// schedule, rank r running stages r (phase 0) and 2p-1-r (phase 1), in the eight
// steps of DualPipeV.step() (nF0, nF0F1, nB1W1F1, nF0B1F1B0, nB1F1B0, nB1B0,
// nWB0, nW). Each _forward_backward_chunk is an overlapped pair, an F with
// overlap_next and then a full B (PyTorch's ScheduleDualPipeV writes it
// `(F;B)OVERLAP_F_B`): in step 4 (F0&B1, F1&B0; but the last rank's first F0 and
// B1 are not overlapped) and step 5 (B1, F1&B0). The zero-bubble backward chunks
// are I with their W taken from a FIFO queue, as WeightGradStore does. Requires
// m >= 2p.
Schedule dualpipev(int p, int m);

struct GeneratorInfo {
    std::string name;     // what `dtsim schedule --generate` takes
    std::string title;    // one line, with the reference
    bool takes_chunks;    // uses v (interleaved, bfs); dualpipev has v = 2 fixed
};
std::span<const GeneratorInfo> generators();

struct GenerateParams {
    int p = 0;      // pipeline ranks
    int m = 0;      // microbatches
    int v = 1;      // chunks per rank (interleaved, bfs; dualpipev takes 1 or 2, meaning its fixed 2)
    int group = 0;  // interleaved: microbatch group size g (0 = p)
};
// By name ("gpipe", "1f1b", "interleaved", "zbh1", "bfs", "dualpipev"; also
// "interleaved-1f1b", "zb-h1", "looped-bfs"). Throws std::invalid_argument for an
// unknown name (listing the known ones) or bad parameters.
Schedule generate(std::string_view name, const GenerateParams& params);
// The canonical name for `name` or an alias, or "" when unknown.
std::string canonical_generator(std::string_view name);

}  // namespace dtsim::sched
