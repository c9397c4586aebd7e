// The published figures of each generator's schedule, to print beside what the
// executor measures and to test it against.
//
// Bubble. A rank's bubble is its idle time, makespan - busy, with the makespan the
// end of the last event of any rank (time starts at 0); its bubble fraction is
// idle / makespan. For GPipe and 1F1B, (p-1)/(m+p-1) is exactly this fraction
// (every rank idles (p-1)(T_F+T_B) of (m+p-1)(T_F+T_B)); the papers' other form,
// (p-1)/m, is the same idle time over the ideal time m(T_F+T_B) instead.
//
// Exactness. With p2p = 0 the executor reproduces each formula exactly under its
// `conditions` (checked by tests/sched): GPipe, 1F1B always; interleaved when
// every microbatch group holds at least p microbatches (m mod g = 0 or >= p; with
// the default g = p: m a multiple of p; Megatron-LM's rule, so the generator
// rejects other sizes); ZB-H1 when m >= p and T_W <= min(T_F,
// T_I); looped BFS when m >= p; DualPipeV (m >= 2p) when T_I = T_F, T_B = T_I +
// T_W, T_W <= T_F and T_B <= T_F&B <= T_F + T_B (see predict()).
//
// DualPipeV. DeepSeek's README gives (PP/2-1)(F&B+B-3W) for PP stages on PP/2
// devices: with p = PP/2 ranks, (p-1)(T_F&B + T_B - 3T_W), where T_F&B is the
// time of an overlapped forward and backward (OVERLAP_F_B, Costs::forward_backward).
// Under the conditions above it is the bubble of ranks p-2 and p-1, the largest;
// rank r < p-2 runs p-2-r more overlapped pairs than they do (dualpipev.py's step
// 4 and 5 counts: 2m-3p+r+1 pairs on rank r < p-1, 2m-2p-1 on rank p-1) and idles
// (p-2-r)(T_F+T_B-T_F&B) less: the executor's per-rank figure, `idle` below. With
// no gain (T_F&B = T_F + T_B) every rank idles (p-1)(T_F+2T_B-3T_W).
#pragma once

#include "dtsim/sched/executor.hpp"
#include "dtsim/sched/generators.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dtsim::sched {

struct Prediction {
    std::string reference;            // the paper or code the figures come from
    std::string bubble_time_formula;  // per rank, in steps: "(p-1)(T_F+T_B)"
    double bubble_time = 0;
    std::string fraction_formula;     // "(p-1)/(m+p-1)"
    double bubble_fraction = 0;       // every rank's (the formulas are the same for all ranks); DualPipeV:
                                      // all ranks' idle / (ranks x makespan)
    double busy = 0;                  // each rank's compute time (DualPipeV: rank p-1's)
    double makespan = 0;              // busy + bubble_time
    std::vector<double> idle;         // per rank: bubble_time for all ranks but DualPipeV's r < p-2
    std::string peak_formula;         // peak in-flight (stage, microbatch) activations of rank r
    std::vector<int> peak_in_flight;  // per rank
    // Interleaved only: Narayanan et al.'s activation-memory penalty relative to
    // 1F1B, 1 + (p-1)/(p v). The measured figure is rank 0's peak in-flight count
    // divided by memory_scale = v p (a chunk's activations are 1/v of a rank's
    // layers; 1F1B holds p microbatches on rank 0).
    std::string memory_formula;
    double memory_ratio = 0;
    double memory_scale = 0;
    std::string conditions;           // when the formulas are exact in this world
    bool exact_expected = false;      // the conditions hold for these parameters and costs
};

// The figures for generator `name` (canonical or alias) at these parameters and
// costs; nullopt for an unknown name. Throws std::invalid_argument for parameters
// the generator rejects.
std::optional<Prediction> predict(std::string_view name, const GenerateParams& params, const Costs& costs);

}  // namespace dtsim::sched
