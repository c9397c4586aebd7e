// Pipeline parallelism: each rank owns LAYERS / RANKS consecutive layers and
// passes the full batch on (seed puzzle "pipeline").
//
// One source for every world, as a template over the model it drives: the puzzle world and
// the simulated hardware run it with dtsim::puzzle::Model (pipeline.cpp instantiates it,
// registry.hpp declares it), the ground-truth harness with the model that records what
// each rank does on a real GPU (calibration/host/puzzle_model.hpp); all.hpp lists it once
// for every world.
#pragma once

#include "dtsim/puzzle/model.hpp"

#include <vector>

namespace dtsim::puzzle {

template <class Model>
Task<> pipeline(Model& model) {
    auto [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
    const int per_rank = model.LAYERS / model.RANKS;
    std::vector<int> my_layers;
    for (int l = 0; l < per_rank; ++l) my_layers.push_back(l + model.rank * per_rank);
    // my_layers[i] as the seed's Python reads it (-1: the last), where a rank without layers fails.
    auto layer_at = [&](int i) {
        model.require(!my_layers.empty(), "no layer for this rank: LAYERS / RANKS is 0");
        return i < 0 ? my_layers.back() : my_layers[static_cast<std::size_t>(i)];
    };
    for (int l : my_layers) tie(weights[l], opt_states[l]) = model.load_weights(l);

    if (model.rank == 0)
        activations[0] = model.get_activation(range(model.BATCHES));
    else
        activations[layer_at(0)] = co_await model.receive();

    // Forward
    for (int l : my_layers) activations[l + 1] = model.forward(l, activations[l], weights[l]);

    // Backward
    if (model.rank == model.RANKS - 1) {
        grad_activations[model.LAYERS] = model.loss(activations[model.LAYERS]);
    } else {
        const int l = layer_at(-1);  // Python's l, left by the forward loop
        co_await model.pass_to(model.rank + 1, activations[l + 1]);
        grad_activations[l + 1] = co_await model.receive();
    }

    // reversed(my_layers), as a loop: clang before 15 cannot compile libstdc++ 12's views::reverse
    for (auto it = my_layers.rbegin(); it != my_layers.rend(); ++it) {
        const int l = *it;
        tie(grad_weights[l], grad_activations[l]) =
            model.backward(l, activations[l], grad_activations[l + 1], model.weights[l]);
        del(model.grad_activations[l + 1], model.activations[l]);
    }

    if (model.rank != 0) co_await model.pass_to(model.rank - 1, grad_activations[layer_at(0)]);  // l, left by the loop

    // Update
    for (int k : my_layers) tie(weights[k], opt_states[k]) = model.update(k, grad_weights[k], weights[k], opt_states[k]);

    for (int k : my_layers) model.set_final_weight(k, weights[k]);
}

}  // namespace dtsim::puzzle
