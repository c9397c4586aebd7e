// GPipe: the pipeline run one batch at a time, all forwards then all
// backwards (seed puzzle "gpipe").
//
// One source for every world, as a template over the model it drives: the puzzle world and
// the simulated hardware run it with dtsim::puzzle::Model (gpipe.cpp instantiates it,
// registry.hpp declares it), the ground-truth harness with the model that records what
// each rank does on a real GPU (calibration/host/puzzle_model.hpp); all.hpp lists it once
// for every world.
#pragma once

#include "dtsim/puzzle/model.hpp"

#include <vector>

namespace dtsim::puzzle {

template <class Model>
Task<> gpipe(Model& model) {
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

    for (int mb = 0; mb < model.BATCHES; ++mb) {
        // Forward
        if (model.rank == 0)
            activations[{0, mb}] = model.get_activation({mb});
        else
            activations[{layer_at(0), mb}] = co_await model.receive();

        for (int l : my_layers) activations[{l + 1, mb}] = model.forward(l, activations[{l, mb}], weights[l]);
        if (model.rank != model.RANKS - 1)  // l, left by the loop
            co_await model.pass_to(model.rank + 1, activations[{layer_at(-1) + 1, mb}]);
    }

    for (int mb = 0; mb < model.BATCHES; ++mb) {
        // Backward
        if (model.rank == model.RANKS - 1)
            grad_activations[{model.LAYERS, mb}] = model.loss(activations[{model.LAYERS, mb}]);
        else
            grad_activations[{layer_at(-1) + 1, mb}] = co_await model.receive();

        // reversed(my_layers), as a loop: clang before 15 cannot compile libstdc++ 12's views::reverse
        for (auto it = my_layers.rbegin(); it != my_layers.rend(); ++it) {
            const int l = *it;
            tie(grad_weights[{l, mb}], grad_activations[{l, mb}]) =
                model.backward(l, activations[{l, mb}], grad_activations[{l + 1, mb}], weights[l]);
            del(grad_activations[{l + 1, mb}], activations[{l, mb}]);
        }
        if (model.rank != 0) co_await model.pass_to(model.rank - 1, grad_activations[{layer_at(0), mb}]);  // l, left by the loop
    }

    // Update
    // reversed(my_layers), as a loop: clang before 15 cannot compile libstdc++ 12's views::reverse
    for (auto it = my_layers.rbegin(); it != my_layers.rend(); ++it) {
        const int l = *it;
        for (int mb = 0; mb < model.BATCHES; ++mb) {
            if (mb != 0)
                grad_weights[l] = grad_weights[l] + grad_weights[{l, mb}];
            else
                grad_weights[l] = grad_weights[{l, 0}];
            del(grad_weights[{l, mb}]);
        }
        tie(weights[l], opt_states[l]) = model.update(l, grad_weights[l], weights[l], opt_states[l]);
    }

    for (int l : my_layers) model.set_final_weight(l, weights[l]);
}

}  // namespace dtsim::puzzle
