// Pipeline parallelism: each rank owns LAYERS / RANKS consecutive layers and
// passes the full batch on (seed puzzle "pipeline").
#include "dtsim/puzzle/registry.hpp"

#include <ranges>
#include <vector>

namespace dtsim::puzzle {

Task<> pipeline(Model& model) {
    auto [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
    const int per_rank = model.LAYERS / model.RANKS;
    std::vector<int> my_layers;
    for (int l = 0; l < per_rank; ++l) my_layers.push_back(l + model.rank * per_rank);
    model.require(!my_layers.empty(), "no layer for this rank: LAYERS / RANKS is 0");
    for (int l : my_layers) tie(weights[l], opt_states[l]) = model.load_weights(l);

    if (model.rank == 0)
        activations[0] = model.get_activation(range(model.BATCHES));
    else
        activations[my_layers[0]] = co_await model.receive();

    // Forward
    for (int l : my_layers) activations[l + 1] = model.forward(l, activations[l], weights[l]);

    // Backward
    int l = my_layers.back();
    if (model.rank == model.RANKS - 1) {
        grad_activations[model.LAYERS] = model.loss(activations[model.LAYERS]);
    } else {
        co_await model.pass_to(model.rank + 1, activations[l + 1]);
        grad_activations[l + 1] = co_await model.receive();
    }

    for (int k : my_layers | std::views::reverse) {
        l = k;
        tie(grad_weights[l], grad_activations[l]) =
            model.backward(l, activations[l], grad_activations[l + 1], model.weights[l]);
        del(model.grad_activations[l + 1], model.activations[l]);
    }

    if (model.rank != 0) co_await model.pass_to(model.rank - 1, grad_activations[l]);

    // Update
    for (int k : my_layers) tie(weights[k], opt_states[k]) = model.update(k, grad_weights[k], weights[k], opt_states[k]);

    for (int k : my_layers) model.set_final_weight(k, weights[k]);
}

}  // namespace dtsim::puzzle
