"""dtsim.puzzles: the stores' mapping protocol, the notebook's ways of launching
ranks, and errors raised with the engine's messages."""

import asyncio as stdlib_asyncio

import pytest

from dtsim import _core
from dtsim.puzzles import (CollectiveMismatchError, DeadlockError, Dist, Model, PuzzleCheckError, PuzzleError,
                           WeightGrad, asyncio, draw, gather, run, sync)
from seed_solutions import SOLUTIONS, basic, ddp, pipeline


def test_stores_support_get_set_del_len_in_and_iteration():
    model = Model(layers=2, batches=2, rank=0, dist=Dist(1))
    weights, opt_states, activations, grad_activations, grad_weights = model.storage()
    assert model.activations is activations and len(activations) == 0
    activations[0] = model.get_activation([0, 1])
    activations[1, 0] = model.get_activation([0])
    assert 0 in activations and (1, 0) in activations and 1 not in activations and "x" not in activations
    assert len(activations) == 2
    assert list(activations) == [0, (1, 0)] and isinstance(activations, dict)
    assert activations[0].batches == frozenset({0, 1}) and activations[0].layer == 0
    assert activations.get(5) is None
    memory = model.memory()
    del activations[1, 0]
    assert model.memory() < memory and len(activations) == 1
    with pytest.raises(KeyError):
        activations[3]
    with pytest.raises(KeyError):
        del activations[1, 0]
    with pytest.raises(TypeError, match=r"activations\[4\]: expected a Activation, not Weight"):
        activations[4] = model.load_weights(0)[0]
    assert activations.pop(0).batches == frozenset({0, 1}) and len(activations) == 0 and model.memory() < memory
    activations.update({2: model.get_activation([1])})
    activations.clear()
    assert model.memory() == 0
    weights[0], opt_states[0] = model.load_weights(0)
    assert [k for k, _ in weights.items()] == [0] and weights[0].step == 0


def test_a_store_key_outside_32_bits_is_refused_and_nothing_is_stored():
    model = Model(layers=2, batches=1, rank=0, dist=Dist(1))
    weights = model.weights
    with pytest.raises(OverflowError, match=r"weights\[1099511627776\]: a key's ints must fit in 32 bits"):
        weights[2**40] = model.load_weights(0)[0]
    with pytest.raises(OverflowError, match=r"weights\[\(0, -4294967296\)\]"):
        weights[0, -2**32] = model.load_weights(0)[0]
    assert len(weights) == 0 and model.memory() == 0


def test_operations_check_their_arguments():
    model = Model(layers=2, batches=1, rank=0, dist=Dist(1))
    w, _ = model.load_weights(0)
    a = model.get_activation([0])
    with pytest.raises(TypeError, match=r"forward\(\): inp must be an Activation, not Weight"):
        model.forward(0, w, a)
    with pytest.raises(TypeError, match=r"forward\(\): layer must be an int, not float"):
        model.forward(0.0, a, w)
    with pytest.raises(TypeError, match=r"forward\(\) missing required argument 'weight'"):
        model.forward(0, a)
    with pytest.raises(TypeError, match=r"load_weights\(\) got an unexpected keyword argument 'shards'"):
        model.load_weights(0, shards=1)
    # A collective's value is checked when the operation is made, before anything is awaited.
    with pytest.raises(TypeError, match=r"allreduce\(\): v must be a WeightGrad, not Weight"):
        model.allreduce(w, 0)
    with pytest.raises(TypeError, match=r"allgather\(\): v must be a Weight, an OptState or a WeightGrad, not Activation"):
        model.allgather(a, 0)


def test_an_operation_awaited_twice_runs_twice():
    async def twice(model: Model):
        reduce = model.allreduce(model.fake_grad(0, [model.rank]), 0)
        first = await reduce
        second = await reduce
        assert first.batches == second.batches == frozenset({0, 1})

    result = run(twice, layers=1, batches=2, ranks=2)
    assert [r["op"] for r in result.trace if r["rank"] == 0] == ["allreduce", "allreduce"]


def test_store_reads_in_an_operation_fail_with_the_engines_message():
    model = Model(layers=2, batches=1, rank=0, dist=Dist(1))
    weights, _, activations, _, _ = model.storage()
    weights[0], _ = model.load_weights(0)
    activations[0] = model.get_activation([0])
    with pytest.raises(PuzzleError, match="rank 0"):
        model.forward(1, activations[0], weights[0])  # layer 1 is not the activation's layer


def test_the_notebooks_await_asyncio_gather_form_runs_on_the_engine(capsys):
    ranks = 4

    async def cell():
        # As the seed's notebook cell, with `from dtsim.puzzles import asyncio`.
        dist = Dist(ranks)
        out = await asyncio.gather(*[
            ddp(Model(layers=2, batches=ranks, rank=i, dist=dist))
            for i in range(ranks)])
        return out

    out = sync(cell())
    assert [m.rank for m in out] == [0, 1, 2, 3]
    Model.check(out)
    draw(out)
    printed = capsys.readouterr().out
    assert printed.startswith("Correct!\nTimesteps: 5.1 \nMaximum Memory: 1835008.0 at GPU: 0 time: 4.0")


def test_gather_can_be_called_without_await():
    dist = Dist(4)
    out = gather(*[pipeline(Model(layers=8, batches=4, rank=i, dist=dist)) for i in range(4)])
    assert len(out) == 4
    assert draw(out)._repr_svg_().lstrip().startswith("<?xml")


def test_synchronous_solution_runs_as_in_the_notebook():
    out = basic(Model(layers=2, batches=4, rank=0, dist=Dist(1)))
    assert sorted(out.final_weights) == [0, 1] and out.final_weights[0].step == 1
    Model.check([out])


def test_passing_python_objects_between_ranks(capsys):
    async def talk(model: Model) -> None:  # the seed's example
        if model.rank == 0:
            await model.pass_to(1, "extra cheese")
            val = await model.receive()
            print(val)
        else:
            val = await model.receive()
            print(val)
            val = await model.pass_to(0, "pizza")

    dist = Dist(2)
    result = gather(*[talk(Model(layers=1, batches=1, rank=i, dist=dist)) for i in range(2)])
    assert result == [None, None]
    assert capsys.readouterr().out == "extra cheese\npizza\n"


def test_allreduce_of_a_value_not_in_a_store():
    ranks = 4
    weight_grads = [WeightGrad(0, 1, {i}, ranks) for i in range(ranks)]  # the notebook's form

    async def myfunc(model: Model) -> WeightGrad:
        return await model.allreduce(weight_grads[model.rank], 0)

    dist = Dist(ranks)
    out = gather(*[myfunc(Model(layers=1, batches=1, rank=i, dist=dist)) for i in range(ranks)])
    assert all(g.batches == frozenset(range(ranks)) for g in out)


def test_deadlock_is_the_engines_diagnosis():
    async def wait_forever(model: Model):
        await model.receive()

    dist = Dist(2)
    with pytest.raises(DeadlockError, match="deadlock") as e:
        gather(*[wait_forever(Model(layers=1, batches=1, rank=i, dist=dist)) for i in range(2)])
    assert "rank 0" in str(e.value) and "rank 1" in str(e.value)


def test_mismatched_collectives_raise_the_engines_error():
    async def mismatched(model: Model):
        g = model.fake_grad(model.rank, [0])
        await model.allreduce(g, model.rank)

    dist = Dist(2)
    with pytest.raises(CollectiveMismatchError, match="layer"):
        gather(*[mismatched(Model(layers=2, batches=1, rank=i, dist=dist)) for i in range(2)])


def test_a_failing_seed_size_raises_the_same_message_as_the_cpp_port():
    # ddp on 3 ranks with 4 batches: update finds the batch 3 missing (dtsim puzzle ddp --ranks 3 fails too).
    with pytest.raises(PuzzleError) as py_error:
        run(SOLUTIONS["ddp"][0], layers=2, batches=4, ranks=3, name="ddp")
    with pytest.raises(PuzzleError) as cpp_error:
        _core.run_builtin("ddp", 2, 4, 3)
    assert str(py_error.value) == str(cpp_error.value)


def test_an_exception_in_a_rank_reaches_the_caller_as_raised():
    async def divide(model: Model):
        if model.rank == 1:
            return 1 // 0
        await model.receive()

    dist = Dist(2)
    with pytest.raises(ZeroDivisionError):
        gather(*[divide(Model(layers=1, batches=1, rank=i, dist=dist)) for i in range(2)])


def test_awaiting_an_asyncio_awaitable_is_a_clear_error():
    async def sleepy(model: Model):
        await stdlib_asyncio.sleep(0)

    dist = Dist(1)
    with pytest.raises(PuzzleError, match="not a dtsim operation"):
        gather(sleepy(Model(layers=1, batches=1, rank=0, dist=dist)))


def test_check_raises_with_the_engines_message():
    model = Model(layers=2, batches=1, rank=0, dist=Dist(1))
    model.set_final_weight(0, model.load_weights(0)[0])
    with pytest.raises(PuzzleCheckError, match="step 0, expected step 1"):
        Model.check([model])


def test_a_dist_runs_once():
    async def nothing(model: Model):
        return model.rank

    dist = Dist(1)
    assert gather(nothing(Model(layers=1, batches=1, rank=0, dist=dist))) == [0]
    with pytest.raises(ValueError, match="already"):
        Model(layers=1, batches=1, rank=0, dist=dist)


def test_run_gives_verdict_records_and_a_deterministic_svg():
    result = run(ddp)
    assert result.correct and result.check_error is None
    assert (result.layers, result.batches, result.ranks) == (2, 4, 4)
    assert result.targets == {"steps": 5.0, "memory": 1800000.0}
    assert result.timesteps == pytest.approx(5.1) and result.max_memory == 1835008.0
    first = result.trace[0]
    assert first == {"rank": 0, "op": "forward", "layer": 0, "start": 0.0, "duration": 1.0,
                     "memory": 1179648.0, "batches": [0]}
    assert result._repr_svg_() == run(ddp)._repr_svg_()
    assert "<svg" in result._repr_svg_()


def test_run_of_a_strategy_that_is_not_a_seed_puzzle_needs_sizes():
    async def mine(model: Model):
        return model

    with pytest.raises(ValueError, match="layers, batches and ranks are needed"):
        run(mine)
    result = run(mine, layers=1, batches=1, ranks=2)
    assert not result.correct and "no rank set a final weight" in result.check_error
    assert result.targets is None


def test_awaiting_another_ranks_operation_is_an_error():
    dist = Dist(2)
    models = [Model(layers=1, batches=1, rank=i, dist=dist) for i in range(2)]

    async def borrow(model: Model):
        await models[1 - model.rank].receive()

    with pytest.raises(PuzzleError, match="awaited an operation of rank 1's model"):
        gather(*[borrow(m) for m in models])


def test_model_takes_the_reference_s_argument_names_and_order():
    # Model(rank, dist, layers, batches) positionally, as the reference library orders them.
    dist = Dist(1)
    model = Model(0, dist, 3, 2)
    assert (model.rank, model.LAYERS, model.BATCHES, model.RANKS) == (0, 3, 2, 1)
    w, o = model.load_weights(layer=0, shard=0, total=1)
    a = model.get_activation(batches=[0, 1])
    out = model.forward(layer=0, inp=a, weight=w)
    assert out.layer == 1
    g = model.fake_grad(layer=0, batches=[0, 1])
    w2, o2 = model.update(layer=0, weight_grad=g, weight=w, opt_state=o, shard=0)
    assert (w2.step, o2.step) == (1, 1)
    model.set_final_weight(layer=0, weight=w2)
    assert model.final_weights[0].step == 1


def test_weight_grad_takes_the_reference_s_form_and_dtsim_s():
    g = WeightGrad(0, 1, batches={1}, total_batches=4, shards={1}, total=4)
    assert (g.layer, g.batches, g.shards, g.total) == (0, frozenset({1}), frozenset({1}), 4)
    assert WeightGrad(0, 1, {2}, 4).batches == frozenset({2}) and WeightGrad(0, 1, {2}, 4).total == 1
    h = WeightGrad(0, {1}, {0}, 1)  # dtsim's form: layer, batches, shards, total
    assert (h.layer, h.batches, h.shards, h.total) == (0, frozenset({1}), frozenset({0}), 1)


def test_draw_group_fills_the_shards_each_layer_holds():
    from dtsim.puzzles import draw_group
    models = run(SOLUTIONS["fsdp"][0], layers=6, batches=4, ranks=4).models
    weights = models[1].final_weights
    picture = draw_group(weights)
    svg = picture._repr_svg_()
    # fsdp: each rank keeps its shard of every layer (1 of 4), one filled rect a layer.
    assert svg.count("fill-opacity") == len(weights) == 6
    assert svg.count("<rect") == 12 and "layer 5" in svg
    whole = draw_group({0: Model(layers=1).load_weights(0)[0]})._repr_svg_()
    assert 'width="240"' in whole
