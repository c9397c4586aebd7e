// The config reader takes strategy names and properties from the registry
// (sim/hw/strategies/registry.cpp), which also points at each strategy's
// coroutine. The config fuzz targets read configs and run no strategy: these
// stand in for the coroutines, so the targets need not compile the simulator.
#include "dtsim/hw/strategies.hpp"

#include <cstdlib>

namespace dtsim::hw {

Task<> ddp(Device&, const Job&) { std::abort(); }
Task<> fsdp(Device&, const Job&) { std::abort(); }
Task<> megatron(Device&, const Job&) { std::abort(); }
Task<> gpipe(Device&, const Job&) { std::abort(); }
Task<> one_f_one_b(Device&, const Job&) { std::abort(); }
Task<> scheduled_pipeline(Device&, const Job&) { std::abort(); }

}  // namespace dtsim::hw
