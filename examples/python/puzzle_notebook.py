"""The puzzle notebook's steps on dtsim's engine, one cell after another.

Run from a build tree (PYTHONPATH=build/python /usr/bin/python3 examples/python/puzzle_notebook.py)
or after `cmake --install`. In Jupyter each `# %%` block is a cell; there the
`sync(cell())` wrappers are not needed: write `out = await asyncio.gather(...)`
directly, and a RunResult or a draw() shows its timeline inline.
"""

# %%
from dtsim.puzzles import Dist, Model, asyncio, draw, run, sync

# %% A strategy of one's own: data parallelism that all-reduces each layer's
# gradient as soon as its backward is done, written as the seed's ddp is.
async def ddp_overlap(model: Model) -> Model:
    weights, opt_states, activations, grad_activations, grad_weights = model.storage()
    activations[0] = model.get_activation([model.rank])
    for l in range(model.LAYERS):
        weights[l], opt_states[l] = model.load_weights(l)
    for l in range(model.LAYERS):
        activations[l + 1] = model.forward(l, activations[l], weights[l])
    grad_activations[model.LAYERS] = model.loss(activations[model.LAYERS])
    for l in range(model.LAYERS - 1, -1, -1):
        grad_weights[l], grad_activations[l] = model.backward(l, activations[l], grad_activations[l + 1], weights[l])
        del grad_activations[l + 1], activations[l]
        grad_weights[l] = await model.allreduce(grad_weights[l], l)
        weights[l], opt_states[l] = model.update(l, grad_weights[l], weights[l], opt_states[l])
    for l in range(model.LAYERS):
        model.set_final_weight(l, weights[l])
    return model


# %% The notebook's launch: one Model per rank on one Dist, all ranks gathered.
async def cell():
    ranks = 4
    dist = Dist(ranks)
    out = await asyncio.gather(*[
        ddp_overlap(Model(layers=2, batches=ranks, rank=i, dist=dist))
        for i in range(ranks)])
    Model.check(out)
    draw(out).save("ddp_overlap.svg")


sync(cell())

# %% The same through run(): the verdict, the trace as records, the timeline.
result = run(ddp_overlap, layers=2, batches=4, ranks=4)
print(result)
print(result.trace[:2])
result.timeline().save("ddp_overlap_run.svg")

# %% With pandas, where it is installed: one row per event.
try:
    import pandas as pd
    print(pd.DataFrame(result.trace).groupby("op")["duration"].sum())
except ImportError:
    pass
