// Fully sharded data parallel: weights all-gathered per layer, grads
// scatter-reduced (seed puzzle "fsdp").
//
// One source for every world, as a template over the model it drives: the puzzle world and
// the simulated hardware run it with dtsim::puzzle::Model (fsdp.cpp instantiates it,
// registry.hpp declares it), the ground-truth harness with the model that records what
// each rank does on a real GPU (calibration/host/puzzle_model.hpp); all.hpp lists it once
// for every world.
#pragma once

#include "dtsim/puzzle/model.hpp"

namespace dtsim::puzzle {

template <class Model>
Task<> fsdp(Model& model) {
    // Storage on device.
    auto [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();

    // Load all the activations
    model.activations[0] = model.get_activation({model.rank});

    // Load a shard of the weights for every layer.
    for (int l = 0; l < model.LAYERS; ++l)
        tie(weights[l], opt_states[l]) = model.load_weights(l, model.rank, model.RANKS);

    // Forward
    for (int l = 0; l < model.LAYERS; ++l) {
        weights[{l, 0}] = co_await model.allgather(weights[l], l);
        activations[l + 1] = model.forward(l, activations[l], weights[{l, 0}]);
        del(weights[{l, 0}]);
    }

    // Backward
    grad_activations[model.LAYERS] = model.loss(activations[model.LAYERS]);
    del(activations[model.LAYERS]);

    for (int l = model.LAYERS - 1; l >= 0; --l) {
        weights[{l, 0}] = co_await model.allgather(weights[l], l);
        tie(grad_weights[l], grad_activations[l]) =
            model.backward(l, activations[l], grad_activations[l + 1], weights[{l, 0}]);
        grad_weights[l] = co_await model.scatterreduce(grad_weights[l], l);
        del(grad_activations[l + 1], activations[l], weights[{l, 0}]);
    }

    // Update
    for (int l = 0; l < model.LAYERS; ++l)
        tie(weights[l], opt_states[l]) = model.update(l, grad_weights[l], weights[l], opt_states[l]);

    for (int l = 0; l < model.LAYERS; ++l) model.set_final_weight(l, weights[l]);
}

}  // namespace dtsim::puzzle
