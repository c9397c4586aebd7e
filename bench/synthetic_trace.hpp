// Made-up traces of any size for the render benchmark and tests: every rank runs
// a few microbatches forward and backward through the layers (shifted by its
// pipeline stage), all-reduces each layer's gradients and updates the weights.
#pragma once

#include "dtsim/trace.hpp"

namespace dtsim::render::detail {

struct SyntheticSpec {
    int ranks = 8;
    int layers = 12;
    int microbatches = 3;
    int steps = 1;         // training steps, one after another
    bool hardware = true;  // seconds and bytes, all-reduces on the comm stream; else puzzle steps
};

// About steps * (microbatches * (2 * layers + 1) + 2 * layers) events per rank;
// summarised, deterministic.
Trace synthetic_trace(const SyntheticSpec& spec);

}  // namespace dtsim::render::detail
