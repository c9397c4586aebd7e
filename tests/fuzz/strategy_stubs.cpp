// The config reader takes strategy names and properties from the registry
// (sim/hw/strategies/registry.cpp), which also points at each strategy's
// coroutine. The config fuzz targets read configs and run no strategy: these
// stand in for the coroutines, so the targets need not compile the simulator.
#include "dtsim/hw/strategies.hpp"
#include "dtsim/puzzle/registry.hpp"

#include <cstdlib>
#include <vector>

namespace dtsim::hw {

Task<> ddp(Device&, const Job&) { std::abort(); }
Task<> fsdp(Device&, const Job&) { std::abort(); }
Task<> megatron(Device&, const Job&) { std::abort(); }
Task<> gpipe(Device&, const Job&) { std::abort(); }
Task<> one_f_one_b(Device&, const Job&) { std::abort(); }
Task<> scheduled_pipeline(Device&, const Job&) { std::abort(); }

}  // namespace dtsim::hw

// The puzzle registry (puzzles/registry.cpp) instantiates the eight strategies; the config reader
// needs only their names (strategy.puzzle), in puzzles/all.hpp's order.
namespace dtsim::puzzle {

std::span<const PuzzleInfo> puzzles() {
    static const std::vector<PuzzleInfo> list = [] {
        std::vector<PuzzleInfo> v;
        for (const char* name : {"basic", "grad_accum", "ddp", "wsdp", "fsdp", "pipeline", "gpipe", "pipeline_fsdp"}) {
            PuzzleInfo p{};
            p.name = name;
            v.push_back(p);
        }
        return v;
    }();
    return list;
}

}  // namespace dtsim::puzzle
