// Runs two puzzle strategies at their canonical (small) sizes through the
// installed library: each must be correct and within 5 % of the seed's target;
// and asks the hardware world the size of a bf16.
#include <dtsim/hw/gpu.hpp>
#include <dtsim/puzzle/registry.hpp>
#include <dtsim/puzzle/run.hpp>

#include <cstdio>

int main() {
    using namespace dtsim::puzzle;
    int failures = 0;
    for (const char* name : {"ddp", "fsdp"}) {
        const PuzzleInfo* info = find_puzzle(name);
        if (info == nullptr) {
            std::printf("%s: not in the registry\n", name);
            return 1;
        }
        const RunResult r = run_strategy(info->strategy, info->layers, info->batches, info->ranks, puzzle_costs());
        const double steps = r.trace.summary.timesteps;
        const bool correct = r.trace.summary.correct.value_or(false) && !r.check_error;
        const bool ok = correct && r.events > 0 && steps > 0 && steps <= info->target_steps * 1.05;
        std::printf("%s (layers %d, batches %d, ranks %d): timesteps %g (target %g), %zu events, correct %s%s\n",
                    name, info->layers, info->batches, info->ranks, steps, info->target_steps, r.events,
                    correct ? "yes" : "no", ok ? "" : "  FAILED");
        if (r.check_error) std::printf("  %s\n", r.check_error->c_str());
        failures += ok ? 0 : 1;
    }
    if (!dtsim::hw::parse_dtype("bf16") || dtsim::hw::bytes_per_element(dtsim::hw::DType::bf16) != 2) {
        std::printf("dtsim::hw: bf16 is not 2 bytes  FAILED\n");
        ++failures;
    }
    return failures == 0 ? 0 : 1;
}
