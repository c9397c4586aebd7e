// The bounds dtsim plan prunes with (plan.hpp, memory_lower_bound and step_time_lower_bound),
// in the parts enumerate_layouts computes one at a time so that it can reject a layout at the first
// that rules it out.
#pragma once

#include "dtsim/hw/plan.hpp"
#include "dtsim/hw/workload.hpp"
#include "dtsim/sched/schedule.hpp"

#include <optional>
#include <vector>

namespace dtsim::hw::plan_bounds {

// How plan sizes a run: no trace, no straggler baseline (estimate_run_size).
inline constexpr RunOptions kEstimate{.keep_trace = false, .straggler_baseline = false};

// The model states of the rank holding the most parameters that it keeps all step.
double model_states_bound(const Config& c, const RunSize& size);
// What that rank allocates beyond its model states, at least: at its first backward, or the most it
// holds through a pipeline schedule's actions; with a schedule, also what the rank of the last
// stage allocates beyond the most states (plan_bounds.cpp).
// `size`: estimate_run_size's, as model_states_bound takes it.
double activations_bound(const Config& c, const Workload& w, const sched::Schedule* schedule, const RunSize& size);
// What a layer keeps from its forward to its backward, and what its recompute allocates before its
// backward releases, at the less of the two kinds of layer.
double kept_bytes(const Workload& w);
double redo_bytes(const Workload& w);
// The most pipeline rank `r` holds through its actions of `schedule` (plan_bounds.cpp): `split`, the
// layers of each stage; `kept` and `redo` a layer's; `logits`, the model's edges where it holds the
// last stage.
double most_held(const sched::Schedule& schedule, std::size_t r, const std::vector<int>& split, double kept,
                 double redo, const EdgeWork* logits);
// The two summed, less one part in 10^9 (rounding).
double memory_bound(double states, double activations);
// The least step time: the compute of the rank holding the output layer (plan.hpp).
// `output_rank`: the pipeline rank that holds the output layer where the config does not say (a
// schedule file's owner of its last stage); -1 takes the looped or V-shaped placement's.
// `schedule`: the pipeline schedule it runs (generated or a file), whose fill and drain then count
// (schedule_ends).
double step_time_bound(const Config& c, const Workload& w, int output_rank = -1,
                       const sched::Schedule* schedule = nullptr);
// The least time of each pass of a pipeline schedule's action on one layer.
struct ActionSeconds {
    double forward = 0, backward = 0, input = 0, weight = 0;  // F, B, I, W
};
// Each pipeline rank's end through `schedule`'s actions, each at `per_layer` a layer of its stage
// and the model's edges on the first and last stage (plan_bounds.cpp); empty where the actions
// cannot run one after another so.
std::vector<double> schedule_ends(const Config& c, const Workload& w, const sched::Schedule& schedule,
                                  const ActionSeconds& per_layer);
// The schedule a generated-pipeline strategy runs (as make_plan generates it), or none; throws
// std::invalid_argument where the generator does not take the sizes.
std::optional<sched::Schedule> generated_schedule(const Config& c);
// The order the built-in 1F1B and GPipe pipelines run their actions in (GPipe's backwards from the
// last microbatch to the first), for the bounds to walk; none for other strategies.
std::optional<sched::Schedule> builtin_schedule(const Config& c);

}  // namespace dtsim::hw::plan_bounds
