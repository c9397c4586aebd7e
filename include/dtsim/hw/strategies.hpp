// The strategies of the hardware world, free coroutines over a GPU and its job:
//   ddp       data parallelism with PyTorch's bucketed gradient all-reduce overlapping the backward
//   fsdp      ZeRO-3: per-layer parameter all-gather (prefetching the next layer) and gradient reduce-scatter
//   megatron  Megatron-LM tensor parallelism (x data parallelism), gradient accumulation over microbatches
//   gpipe     pipeline: all forwards, then all backwards (x tensor x data parallelism)
//   1f1b      pipeline: PipeDream-Flush / Megatron's one-forward-one-backward schedule
//   interleaved, zbh1, bfs, dualpipev, schedule
//             a dtsim::sched pipeline schedule (generated, or read from a file) x tensor x data parallelism
// and `puzzle`, which runs one of the eight puzzle strategies on HardwareCosts.
#pragma once

#include "dtsim/hw/device.hpp"
#include "dtsim/hw/job.hpp"

#include <span>
#include <string>
#include <string_view>

namespace dtsim::hw {

using HwStrategy = Task<> (*)(Device&, const Job&);

Task<> ddp(Device& gpu, const Job& job);
Task<> fsdp(Device& gpu, const Job& job);
Task<> megatron(Device& gpu, const Job& job);
Task<> gpipe(Device& gpu, const Job& job);
Task<> one_f_one_b(Device& gpu, const Job& job);
// Runs job.plan's schedule.
Task<> scheduled_pipeline(Device& gpu, const Job& job);

struct StrategyInfo {
    std::string name;
    HwStrategy run;
    std::string title;
};
std::span<const StrategyInfo> hw_strategies();
const StrategyInfo* find_hw_strategy(std::string_view name);

}  // namespace dtsim::hw
