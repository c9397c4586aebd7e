// A strategy of your own, built against the installed dtsim (find_package(dtsim)):
// data parallelism that all-reduces each layer's weight gradient and updates that
// layer as soon as its backward has produced it, where the seed's ddp first runs
// the whole backward. It runs at the ddp puzzle's size beside the seed's ddp,
// both are checked, and its timeline is drawn.
//
//   example_strategy [TIMELINE.svg]
#include <dtsim/puzzle.hpp>
#include <dtsim/render.hpp>

#include <cstdio>
#include <exception>

using dtsim::Task;
using namespace dtsim::puzzle;

Task<> ddp_eager(Model& model) {
    auto [weights, opt_states, activations, grad_activations, grad_weights] = model.storage();
    activations[0] = model.get_activation({model.rank});
    for (int l = 0; l < model.LAYERS; ++l)
        tie(weights[l], opt_states[l]) = model.load_weights(l);
    for (int l = 0; l < model.LAYERS; ++l)
        activations[l + 1] = model.forward(l, activations[l], weights[l]);
    grad_activations[model.LAYERS] = model.loss(activations[model.LAYERS]);
    for (int l = model.LAYERS - 1; l >= 0; --l) {
        tie(grad_weights[l], grad_activations[l]) =
            model.backward(l, activations[l], grad_activations[l + 1], weights[l]);
        del(grad_activations[l + 1], activations[l]);
        grad_weights[l] = co_await model.allreduce(grad_weights[l], l);
        tie(weights[l], opt_states[l]) = model.update(l, grad_weights[l], weights[l], opt_states[l]);
        model.set_final_weight(l, weights[l]);
    }
}

void report(const char* name, const RunResult& r) {
    const auto& s = r.trace.summary;
    std::printf("%-10s correct %-3s  timesteps %.10g  max memory %.10g (rank %d at %.10g)  %zu events\n", name,
                s.correct.value_or(false) ? "yes" : "no", s.timesteps, s.max_memory, s.max_memory_rank,
                s.max_memory_time, r.events);
    if (r.check_error) std::printf("  %s\n", r.check_error->c_str());
}

int main(int argc, char** argv) {
    try {
        const PuzzleInfo& seed = *find_puzzle("ddp");
        std::printf("layers %d, batches %d, ranks %d\n", seed.layers, seed.batches, seed.ranks);
        const RunResult mine = run_strategy(ddp_eager, seed.layers, seed.batches, seed.ranks);
        const RunResult theirs = run_strategy(seed.strategy, seed.layers, seed.batches, seed.ranks);
        report("ddp_eager", mine);
        report("seed ddp", theirs);
        if (argc > 1) dtsim::render::write_image(mine.trace, argv[1]);
        return mine.trace.summary.correct.value_or(false) ? 0 : 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "example_strategy: %s\n", e.what());
        return 1;
    }
}
