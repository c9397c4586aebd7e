// dtsim's engine and traces in one include: Task, Gpu, Communicator,
// Simulation, the errors a run ends with, the trace and its JSON form.
// Strategy authors of the puzzle world include "dtsim/puzzle.hpp"; the
// hardware world's API is under "dtsim/hw/", the renderer's in "dtsim/render.hpp".
#pragma once

#include "dtsim/communicator.hpp"
#include "dtsim/errors.hpp"
#include "dtsim/gpu.hpp"
#include "dtsim/id_set.hpp"
#include "dtsim/simulation.hpp"
#include "dtsim/task.hpp"
#include "dtsim/trace.hpp"
#include "dtsim/trace_io.hpp"
