// Gradient accumulation: one batch at a time, weight grads summed (seed puzzle "grad_accum").
//
// One source for every world, as a template over the model it drives: the puzzle world and
// the simulated hardware run it with dtsim::puzzle::Model (grad_accum.cpp instantiates it,
// registry.hpp declares it), the ground-truth harness with the model that records what
// each rank does on a real GPU (calibration/host/puzzle_model.hpp); all.hpp lists it once
// for every world.
#pragma once

#include "dtsim/puzzle/model.hpp"

namespace dtsim::puzzle {

template <class Model>
Task<> grad_accum(Model& model) {
    // Storage on device.
    auto [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();

    // Load in the full weights
    for (int l = 0; l < model.LAYERS; ++l)
        tie(weights[l], opt_states[l]) = model.load_weights(l);

    for (int r = 0; r < model.BATCHES; ++r) {
        // Load the input layer activations
        activations[{0, r}] = model.get_activation({r});

        // Forward
        for (int l = 0; l < model.LAYERS; ++l)
            activations[{l + 1, r}] = model.forward(l, activations[{l, r}], weights[l]);

        // Backward
        grad_activations[{model.LAYERS, r}] = model.loss(activations[{model.LAYERS, r}]);
        del(activations[{model.LAYERS, r}]);

        for (int l = model.LAYERS - 1; l >= 0; --l) {
            tie(grad_weights[{l, r}], grad_activations[{l, r}]) =
                model.backward(l, activations[{l, r}], grad_activations[{l + 1, r}], weights[l]);
            if (r == 0)
                grad_weights[l] = grad_weights[{l, r}];
            else
                grad_weights[l] = grad_weights[l] + grad_weights[{l, r}];
            del(grad_activations[{l + 1, r}], activations[{l, r}], grad_weights[{l, r}]);
        }
        del(grad_activations[{0, r}]);
        model.require(len(grad_activations) == 0 && len(activations) == 0, "activations left after backward");
    }

    // Update
    for (int l = 0; l < model.LAYERS; ++l)
        tie(weights[l], opt_states[l]) = model.update(l, grad_weights[l], weights[l], opt_states[l]);

    for (int l = 0; l < model.LAYERS; ++l) model.set_final_weight(l, weights[l]);
    co_return;
}

}  // namespace dtsim::puzzle
