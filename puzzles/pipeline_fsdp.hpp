// Pipeline + FSDP: four pipeline stages, each layer's weights sharded over all
// ranks (seed puzzle "pipeline_fsdp").
//
// One source for every world, as a template over the model it drives: the puzzle world and
// the simulated hardware run it with dtsim::puzzle::Model (pipeline_fsdp.cpp instantiates it,
// registry.hpp declares it), the ground-truth harness with the model that records what
// each rank does on a real GPU (calibration/host/puzzle_model.hpp); all.hpp lists it once
// for every world.
#pragma once

#include "dtsim/puzzle/model.hpp"

#include <algorithm>
#include <vector>

namespace dtsim::puzzle {

template <class Model>
Task<> pipeline_fsdp(Model& model) {
    auto [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
    model.require(model.RANKS / 4 > 0, "needs at least 4 ranks: RANKS / 4 is 0 (ZeroDivisionError)");
    const int per_rank = model.LAYERS / (model.RANKS / 4);
    std::vector<int> my_layers;
    for (int l = 0; l < per_rank; ++l) my_layers.push_back(l + ((model.rank % 4) * per_rank));
    // my_layers[i] as the seed's Python reads it (-1: the last), where a rank without layers fails.
    auto layer_at = [&](int i) {
        model.require(!my_layers.empty(), "no layer for this rank: LAYERS / (RANKS / 4) is 0");
        return i < 0 ? my_layers.back() : my_layers[static_cast<std::size_t>(i)];
    };
    for (int l = 0; l < model.LAYERS; ++l)
        tie(weights[{l, 0}], opt_states[{l, 0}]) = model.load_weights(l, model.rank, model.RANKS);
    auto empty_grad = [&](int l) { return model.fake_grad(l, {}); };
    auto in_my_layers = [&](int l) { return std::find(my_layers.begin(), my_layers.end(), l) != my_layers.end(); };

    // Forward
    for (int l = 0; l < model.LAYERS; ++l) {
        if (l == layer_at(0)) {
            if (model.rank % 4 == 0)
                activations[0] = model.get_activation({model.rank / 4});
            else
                activations[l] = co_await model.receive();
        }

        weights[l] = co_await model.allgather(weights[{l, 0}], l);
        if (in_my_layers(l)) activations[l + 1] = model.forward(l, activations[l], weights[l]);
        del(weights[l]);
        if (l == layer_at(-1)) {
            if (model.rank % 4 == 3)
                grad_activations[model.LAYERS] = model.loss(activations[model.LAYERS]);
            else
                co_await model.pass_to(model.rank + 1, activations[l + 1]);
        }
    }

    // Backward
    for (int l = model.LAYERS - 1; l >= 0; --l) {
        if (l == layer_at(-1)) {
            if (model.rank % 4 != 3) grad_activations[l + 1] = co_await model.receive();
        }

        weights[l] = co_await model.allgather(weights[{l, 0}], l);
        if (in_my_layers(l)) {
            tie(grad_weights[l], grad_activations[l]) =
                model.backward(l, activations[l], grad_activations[l + 1], model.weights[l]);
            del(grad_activations[l + 1], activations[l]);
            grad_weights[l] = co_await model.scatterreduce(grad_weights[l], l);
        } else {
            grad_weights[l] = co_await model.scatterreduce(empty_grad(l), l);
        }
        del(weights[l]);

        if (model.rank % 4 != 0 && l == layer_at(0)) co_await model.pass_to(model.rank - 1, grad_activations[l]);
    }
    for (int l = 0; l < model.LAYERS; ++l)
        tie(weights[l], opt_states[l]) = model.update(l, grad_weights[l], weights[{l, 0}], opt_states[{l, 0}]);

    for (int l = 0; l < model.LAYERS; ++l) model.set_final_weight(l, weights[l]);
}

}  // namespace dtsim::puzzle
