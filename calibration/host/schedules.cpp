// The seed's eight solutions (shared/seeds/004_94ce8425d4ed4051.txt), ported line for
// line: the same loops, the same store names, the same deletions, in the same order.
// Where the Python writes `x, y = f()` the port writes `tie(x, y) = f()`; where it
// writes `await model.receive()` the port names the sender and what arrives (the
// reference takes the oldest message; in these schedules there is only ever one sender).
#include "host/puzzle_model.hpp"

namespace dtsim::calib::puzzle {

void basic(Model& model) {
    // Storage on device.
    auto [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();

    // Load in the full weights
    for (int l = 0; l < model.LAYERS; ++l) tie(weights[l], opt_states[l]) = model.load_weights(l);

    // Load the input layer activations
    activations[0] = model.get_activation(range(model.BATCHES));

    // Forward
    for (int l = 0; l < model.LAYERS; ++l) activations[l + 1] = model.forward(l, activations[l], weights[l]);

    // Backward
    grad_activations[model.LAYERS] = model.loss(activations[model.LAYERS]);
    model.del(activations[model.LAYERS]);

    for (int l = model.LAYERS - 1; l >= 0; --l) {
        tie(grad_weights[l], grad_activations[l]) =
            model.backward(l, activations[l], grad_activations[l + 1], weights[l]);
        model.del(grad_activations[l + 1], activations[l]);
    }
    model.del(grad_activations[0]);
    model.check(grad_activations.empty() && activations.empty(), "len(grad_activations) == 0 and len(activations) == 0");

    // Update
    for (int l = 0; l < model.LAYERS; ++l)
        tie(weights[l], opt_states[l]) = model.update(l, grad_weights[l], weights[l], opt_states[l]);

    for (int l = 0; l < model.LAYERS; ++l) model.set_final_weight(l, weights[l]);
}

void grad_accum(Model& model) {
    auto [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();

    // Load in the full weights
    for (int l = 0; l < model.LAYERS; ++l) tie(weights[l], opt_states[l]) = model.load_weights(l);

    for (int r = 0; r < model.BATCHES; ++r) {
        // Load the input layer activations
        activations[{0, r}] = model.get_activation({r});

        // Forward
        for (int l = 0; l < model.LAYERS; ++l)
            activations[{l + 1, r}] = model.forward(l, activations[{l, r}], weights[l]);

        // Backward
        grad_activations[{model.LAYERS, r}] = model.loss(activations[{model.LAYERS, r}]);
        model.del(activations[{model.LAYERS, r}]);

        for (int l = model.LAYERS - 1; l >= 0; --l) {
            tie(grad_weights[{l, r}], grad_activations[{l, r}]) =
                model.backward(l, activations[{l, r}], grad_activations[{l + 1, r}], weights[l]);
            if (r == 0)
                grad_weights[l] = grad_weights[{l, r}];
            else
                grad_weights[l] = model.add(grad_weights[l], grad_weights[{l, r}]);
            model.del(grad_activations[{l + 1, r}], activations[{l, r}], grad_weights[{l, r}]);
        }
        model.del(grad_activations[{0, r}]);
        model.check(grad_activations.empty() && activations.empty(),
                    "len(grad_activations) == 0 and len(activations) == 0");
    }

    // Update
    for (int l = 0; l < model.LAYERS; ++l)
        tie(weights[l], opt_states[l]) = model.update(l, grad_weights[l], weights[l], opt_states[l]);

    for (int l = 0; l < model.LAYERS; ++l) model.set_final_weight(l, weights[l]);
}

void ddp(Model& model) {
    auto [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
    // Load all the activations
    model.activations[0] = model.get_activation({model.rank});

    // Load in the full weights
    for (int l = 0; l < model.LAYERS; ++l) tie(weights[l], opt_states[l]) = model.load_weights(l);

    // Forward
    for (int l = 0; l < model.LAYERS; ++l) activations[l + 1] = model.forward(l, activations[l], weights[l]);

    // Backward
    grad_activations[model.LAYERS] = model.loss(activations[model.LAYERS]);

    for (int l = model.LAYERS - 1; l >= 0; --l) {
        tie(grad_weights[l], grad_activations[l]) =
            model.backward(l, activations[l], grad_activations[l + 1], weights[l]);
        model.del(grad_activations[l + 1], activations[l]);
    }

    // Update
    for (int l = 0; l < model.LAYERS; ++l) {
        grad_weights[l] = model.allreduce(grad_weights[l], l);
        tie(weights[l], opt_states[l]) = model.update(l, grad_weights[l], weights[l], opt_states[l]);
    }

    for (int l = 0; l < model.LAYERS; ++l) model.set_final_weight(l, weights[l]);
}

void wsdp(Model& model) {
    auto [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();

    // Load all the activations
    model.activations[0] = model.get_activation({model.rank});

    // Load a shard of the weights for every layer.
    for (int l = 0; l < model.LAYERS; ++l)
        tie(weights[l], opt_states[l]) = model.load_weights(l, model.rank, model.RANKS);

    // Forward
    for (int l = 0; l < model.LAYERS; ++l) {
        weights[{l, 0}] = model.allgather(weights[l], l);
        activations[l + 1] = model.forward(l, activations[l], weights[{l, 0}]);
        model.del(weights[{l, 0}]);
    }

    // Backward
    grad_activations[model.LAYERS] = model.loss(activations[model.LAYERS]);

    for (int l = model.LAYERS - 1; l >= 0; --l) {
        weights[{l, 0}] = model.allgather(weights[l], l);
        tie(grad_weights[l], grad_activations[l]) =
            model.backward(l, activations[l], grad_activations[l + 1], weights[{l, 0}]);
        model.del(grad_activations[l + 1], activations[l], weights[{l, 0}]);
    }

    // Update
    for (int l = 0; l < model.LAYERS; ++l) {
        grad_weights[l] = model.allreduce(grad_weights[l], l);
        tie(weights[l], opt_states[l]) = model.update(l, grad_weights[l], weights[l], opt_states[l]);
    }

    for (int l = 0; l < model.LAYERS; ++l) model.set_final_weight(l, weights[l]);
}

void fsdp(Model& model) {
    auto [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();

    // Load all the activations
    model.activations[0] = model.get_activation({model.rank});

    // Load a shard of the weights for every layer.
    for (int l = 0; l < model.LAYERS; ++l)
        tie(weights[l], opt_states[l]) = model.load_weights(l, model.rank, model.RANKS);

    // Forward
    for (int l = 0; l < model.LAYERS; ++l) {
        weights[{l, 0}] = model.allgather(weights[l], l);
        activations[l + 1] = model.forward(l, activations[l], weights[{l, 0}]);
        model.del(weights[{l, 0}]);
    }

    // Backward
    grad_activations[model.LAYERS] = model.loss(activations[model.LAYERS]);
    model.del(activations[model.LAYERS]);

    for (int l = model.LAYERS - 1; l >= 0; --l) {
        weights[{l, 0}] = model.allgather(weights[l], l);
        tie(grad_weights[l], grad_activations[l]) =
            model.backward(l, activations[l], grad_activations[l + 1], weights[{l, 0}]);
        grad_weights[l] = model.scatterreduce(grad_weights[l], l);
        model.del(grad_activations[l + 1], activations[l], weights[{l, 0}]);
    }

    // Update
    for (int l = 0; l < model.LAYERS; ++l)
        tie(weights[l], opt_states[l]) = model.update(l, grad_weights[l], weights[l], opt_states[l]);

    for (int l = 0; l < model.LAYERS; ++l) model.set_final_weight(l, weights[l]);
}

void pipeline(Model& model) {
    auto [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
    const int per_rank = model.LAYERS / model.RANKS;
    std::vector<int> my_layers;
    for (int l = 0; l < per_rank; ++l) my_layers.push_back(l + model.rank * per_rank);
    for (int l : my_layers) tie(weights[l], opt_states[l]) = model.load_weights(l);

    if (model.rank == 0)
        activations[0] = model.get_activation(range(model.BATCHES));
    else
        activations[my_layers[0]] = model.receive_activation(model.rank - 1, my_layers[0], range(model.BATCHES));

    // Forward
    int l = my_layers.back();  // Python's loop variable outlives its loop
    for (int layer : my_layers) activations[layer + 1] = model.forward(layer, activations[layer], weights[layer]);

    // Backward
    if (model.rank == model.RANKS - 1) {
        grad_activations[model.LAYERS] = model.loss(activations[model.LAYERS]);
    } else {
        model.pass_to(model.rank + 1, activations[l + 1]);
        grad_activations[l + 1] = model.receive_grad(model.rank + 1, l, range(model.BATCHES));
    }

    for (auto it = my_layers.rbegin(); it != my_layers.rend(); ++it) {
        l = *it;
        tie(grad_weights[l], grad_activations[l]) =
            model.backward(l, activations[l], grad_activations[l + 1], model.weights[l]);
        model.del(model.grad_activations[l + 1], model.activations[l]);
    }

    if (model.rank != 0) model.pass_to(model.rank - 1, grad_activations[l]);

    // Update
    for (int layer : my_layers)
        tie(weights[layer], opt_states[layer]) =
            model.update(layer, grad_weights[layer], weights[layer], opt_states[layer]);

    for (int layer : my_layers) model.set_final_weight(layer, weights[layer]);
}

void gpipe(Model& model) {
    auto [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
    const int per_rank = model.LAYERS / model.RANKS;
    std::vector<int> my_layers;
    for (int l = 0; l < per_rank; ++l) my_layers.push_back(l + model.rank * per_rank);
    for (int l : my_layers) tie(weights[l], opt_states[l]) = model.load_weights(l);

    for (int mb = 0; mb < model.BATCHES; ++mb) {
        // Forward
        if (model.rank == 0)
            activations[{0, mb}] = model.get_activation({mb});
        else
            activations[{my_layers[0], mb}] = model.receive_activation(model.rank - 1, my_layers[0], {mb});

        for (int l : my_layers) activations[{l + 1, mb}] = model.forward(l, activations[{l, mb}], weights[l]);
        const int l = my_layers.back();
        if (model.rank != model.RANKS - 1) model.pass_to(model.rank + 1, activations[{l + 1, mb}]);
    }

    for (int mb = 0; mb < model.BATCHES; ++mb) {
        // Backward
        if (model.rank == model.RANKS - 1)
            grad_activations[{model.LAYERS, mb}] = model.loss(activations[{model.LAYERS, mb}]);
        else
            grad_activations[{my_layers.back() + 1, mb}] = model.receive_grad(model.rank + 1, my_layers.back(), {mb});

        for (auto it = my_layers.rbegin(); it != my_layers.rend(); ++it) {
            const int l = *it;
            tie(grad_weights[{l, mb}], grad_activations[{l, mb}]) =
                model.backward(l, activations[{l, mb}], grad_activations[{l + 1, mb}], weights[l]);
            model.del(grad_activations[{l + 1, mb}], activations[{l, mb}]);
        }

        const int l = my_layers.front();  // the backward loop ends on the first layer
        if (model.rank != 0) model.pass_to(model.rank - 1, grad_activations[{l, mb}]);
    }

    // Update
    for (auto it = my_layers.rbegin(); it != my_layers.rend(); ++it) {
        const int l = *it;
        for (int mb = 0; mb < model.BATCHES; ++mb) {
            if (mb != 0)
                grad_weights[l] = model.add(grad_weights[l], grad_weights[{l, mb}]);
            else
                grad_weights[l] = grad_weights[{l, 0}];
            model.del(grad_weights[{l, mb}]);
        }
        tie(weights[l], opt_states[l]) = model.update(l, grad_weights[l], weights[l], opt_states[l]);
    }

    for (int l : my_layers) model.set_final_weight(l, weights[l]);
}

void pipeline_fsdp(Model& model) {
    auto [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
    // The seed writes LAYERS // (RANKS // 4), which is LAYERS / 4 at its size (16 ranks);
    // 4 pipeline stages of 4 consecutive ranks, data parallel across the RANKS / 4 groups.
    constexpr int stages = 4;
    const int per_rank = model.LAYERS / stages;
    std::vector<int> my_layers;
    for (int l = 0; l < per_rank; ++l) my_layers.push_back(l + (model.rank % stages) * per_rank);
    for (int l = 0; l < model.LAYERS; ++l)
        tie(weights[{l, 0}], opt_states[{l, 0}]) = model.load_weights(l, model.rank, model.RANKS);
    const auto empty_grad = [&](int l) { return model.fake_grad(l, {}); };

    // Forward
    for (int l = 0; l < model.LAYERS; ++l) {
        if (l == my_layers.front()) {
            if (model.rank % stages == 0)
                activations[0] = model.get_activation({model.rank / stages});
            else
                activations[l] = model.receive_activation(model.rank - 1, l, {model.rank / stages});
        }

        weights[l] = model.allgather(weights[{l, 0}], l);
        if (contains(my_layers, l)) activations[l + 1] = model.forward(l, activations[l], weights[l]);
        model.del(weights[l]);
        if (l == my_layers.back()) {
            if (model.rank % stages == stages - 1)
                grad_activations[model.LAYERS] = model.loss(activations[model.LAYERS]);
            else
                model.pass_to(model.rank + 1, activations[l + 1]);
        }
    }

    // Backward
    for (int l = model.LAYERS - 1; l >= 0; --l) {
        if (l == my_layers.back()) {
            if (model.rank % stages != stages - 1)
                grad_activations[l + 1] = model.receive_grad(model.rank + 1, l, {model.rank / stages});
        }

        weights[l] = model.allgather(weights[{l, 0}], l);
        if (contains(my_layers, l)) {
            tie(grad_weights[l], grad_activations[l]) =
                model.backward(l, activations[l], grad_activations[l + 1], model.weights[l]);
            model.del(grad_activations[l + 1], activations[l]);
            grad_weights[l] = model.scatterreduce(grad_weights[l], l);
        } else {
            grad_weights[l] = model.scatterreduce(empty_grad(l), l);
        }
        model.del(weights[l]);

        if (model.rank % stages != 0 && l == my_layers.front()) model.pass_to(model.rank - 1, grad_activations[l]);
    }
    for (int l = 0; l < model.LAYERS; ++l)
        tie(weights[l], opt_states[l]) = model.update(l, grad_weights[l], weights[{l, 0}], opt_states[{l, 0}]);

    for (int l = 0; l < model.LAYERS; ++l) model.set_final_weight(l, weights[l]);
}

}  // namespace dtsim::calib::puzzle
