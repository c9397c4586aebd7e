"""The LLM training puzzles' world on dtsim's engine (docs/python.md).

``Model``, ``Dist``, the value types and the five stores follow the reference
puzzle library's Python API, so that a solution written for it runs unchanged:
``async def ddp(model)`` with ``await model.allreduce(...)``, ``del
activations[l]``, ``model.storage()``. Each rank's coroutine is stepped by the
engine: awaiting a collective, a pass or a receive parks the rank in the
engine as a C++ strategy's ``co_await`` does. No asyncio event loop runs.

Launching the ranks: ``gather(*coroutines)`` runs them on their Dist's engine
and returns their results in order. Its result can also be awaited, so both
``out = gather(...)`` and ``out = await gather(...)`` (in a Jupyter cell or any
coroutine) work; ``from dtsim.puzzles import asyncio`` gives a stand-in whose
``asyncio.gather`` is this one, for the notebook's
``out = await asyncio.gather(*[...])`` as written. The standard library's
``asyncio.gather`` does not work: its event loop cannot await the engine's
operations.
"""

from __future__ import annotations

import inspect
import types
from typing import Any, Callable, Dict, List, Optional, Sequence

from . import _core

Weight = _core.Weight
OptState = _core.OptState
Activation = _core.Activation
ActivationGrad = _core.ActivationGrad
WeightGrad = _core.WeightGrad
Dist = _core.Dist
ScheduleError = _core.ScheduleError
PuzzleError = _core.PuzzleError
DeadlockError = _core.DeadlockError
CollectiveMismatchError = _core.CollectiveMismatchError

__all__ = [
    "Model", "Dist", "Weight", "OptState", "Activation", "ActivationGrad", "WeightGrad",
    "Store", "gather", "sync", "asyncio", "run", "RunResult", "draw", "draw_group", "Timeline",
    "ScheduleError", "PuzzleError", "DeadlockError", "CollectiveMismatchError", "PuzzleCheckError",
]


class PuzzleCheckError(AssertionError):
    """Model.check failed: the final weights are missing, stale or incomplete (the engine's message)."""


class Store(_core.Store):
    """One of a model's five stores: a dict whose contents are the GPU's memory.

    Reads are a dict's own (a missing key raises KeyError, as in the
    reference). Storing and deleting (``store[key] = value``, ``del
    store[key]``, done by the extension) also store and free in the engine's
    store of the same name at once: the memory an operation records is the
    rank's memory then, exactly as a C++ strategy's store keeps it. The
    dict's other ways of changing its contents go through those two.
    """

    __slots__ = ()

    def pop(self, key, *default):
        if key not in self and default:
            return default[0]
        value = self[key]
        del self[key]
        return value

    def popitem(self):
        key = next(reversed(self.keys()))
        return key, self.pop(key)

    def setdefault(self, key, default=None):
        if key not in self:
            self[key] = default
        return self[key]

    def update(self, *args, **kwargs):
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def clear(self):
        for key in list(self):
            del self[key]

    def __ior__(self, other):
        self.update(other)
        return self

    def copy(self):
        return dict(self)


class Model(_core.Model):
    """One rank's GPU in the puzzle world, on ``dist`` (a ``Dist``; a one-rank Dist when left out).

    The stores are ``weights``, ``opt_states``, ``activations``,
    ``grad_activations`` and ``grad_weights`` (``storage()`` returns them in
    that order); the sizes are ``LAYERS``, ``BATCHES`` and ``RANKS``.
    """

    # The reference's order of arguments (rank, dist, layers, batches), so positional calls mean the same.
    def __init__(self, rank: int = 0, dist: Optional[Dist] = None, layers: int = 2, batches: int = 1):
        if dist is None:
            dist = Dist(1)
        super().__init__(layers, batches, rank, dist)
        self.dist = dist
        # Plain attributes (a strategy reads them in every loop), set from the engine's model.
        self.rank, self.RANKS, self.LAYERS, self.BATCHES = self._rank, self._RANKS, self._LAYERS, self._BATCHES
        self.weights = Store(self, 0)
        self.opt_states = Store(self, 1)
        self.activations = Store(self, 2)
        self.grad_activations = Store(self, 3)
        self.grad_weights = Store(self, 4)

    def storage(self):
        return self.weights, self.opt_states, self.activations, self.grad_activations, self.grad_weights

    @staticmethod
    def check(models: Sequence["Model"]) -> None:
        """The reference's final check: prints ``Correct!``, or raises PuzzleCheckError with the engine's message."""
        error = _core.check_models(list(models))
        if error is not None:
            raise PuzzleCheckError(error)
        print("Correct!")

    def __repr__(self) -> str:
        return f"Model(layers={self.LAYERS}, batches={self.BATCHES}, rank={self.rank}, ranks={self.RANKS})"


# ---------------------------------------------------------------- launching


class Gathered(list):
    """The results of ``gather``, in order; awaiting it gives itself at once."""

    def __await__(self):
        return self
        yield  # a generator: awaiting never suspends


def _model_of(coro) -> Model:
    frame = getattr(coro, "cr_frame", None)
    if frame is None:
        raise TypeError(f"gather: {coro!r} is not a coroutine that has not started "
                        "(call the async function and pass what it returns, once)")
    for value in frame.f_locals.values():
        if isinstance(value, Model):
            return value
    raise TypeError(f"gather: {coro.__qualname__}() has no Model argument, so its rank is unknown "
                    "(pass the rank's Model as an argument of the coroutine function)")


def gather(*coros) -> Gathered:
    """Runs each coroutine on the rank of its Model argument, all on their (one) Dist's engine.

    Returns their results in the order given. Raises what a coroutine raised,
    or the engine's error (DeadlockError, CollectiveMismatchError, PuzzleError)
    with the engine's message. A Dist runs once.
    """
    if not coros:
        return Gathered()
    models = [_model_of(c) for c in coros]
    dist = models[0].dist
    for m in models:
        if m.dist is not dist:
            for c in coros:
                c.close()
            raise ValueError("gather: every coroutine's Model must be on the same Dist")
    try:
        return Gathered(dist._run([(m, c) for m, c in zip(models, coros)]))
    finally:
        for c in coros:  # a failed run leaves coroutines suspended: close them now, quietly
            if c.cr_frame is not None:
                c.close()


def sync(coro):
    """Runs a coroutine that awaits only ``gather`` (a notebook cell as ``async def``) to its end."""
    try:
        yielded = coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError(f"sync: the coroutine awaited {yielded!r}, which needs an event loop; "
                       "only dtsim's gather can be awaited outside a rank")


# `from dtsim.puzzles import asyncio`: the notebook's `await asyncio.gather(...)` on the engine.
asyncio = types.SimpleNamespace(gather=gather)


# ---------------------------------------------------------------- pictures


class Timeline:
    """A run's timeline as SVG (shown inline by Jupyter)."""

    def __init__(self, svg: str):
        self.svg = svg

    def _repr_svg_(self) -> str:
        return self.svg

    def save(self, path: str) -> None:
        with open(path, "w") as f:
            f.write(self.svg)


def _meta(name: Optional[str], models: Sequence[Model]) -> Dict[str, Any]:
    m = models[0]
    meta: Dict[str, Any] = {"layers": m.LAYERS, "batches": m.BATCHES, "ranks": m.RANKS}
    if name:
        meta["puzzle"] = name
    return meta


def draw(models: Sequence[Model], ranks: str = "", width: int = 0) -> Timeline:
    """Prints the run's timesteps and maximum memory as the reference's draw does, and returns its timeline."""
    models = list(models)
    dist = models[0].dist
    meta = _meta(None, models)
    s = dist._summary(meta)
    print(f"Timesteps: {s['timesteps']} \nMaximum Memory: {s['max_memory']} at GPU: {s['max_memory_rank']} "
          f"time: {s['max_memory_time']}")
    return Timeline(dist._trace_svg(meta, ranks, width))


def draw_group(group) -> Timeline:
    """The layers' weights a group of values covers, as the reference's draw_group shows them
    (``draw_group(out.final_weights)``): a bar per layer, the last layer on top, each value
    filling the shards it holds (``shards`` of ``total``), coloured by layer from green to red.
    Takes the values of a dict (final weights) or a sequence; Weight, OptState or WeightGrad."""
    values = list(group.values()) if isinstance(group, dict) else list(group)
    layers = max((v.layer for v in values), default=-1) + 1
    bar_w, bar_h, gap, left, top = 240.0, 18.0, 6.0, 60.0, 10.0
    height = top * 2 + layers * (bar_h + gap)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + bar_w + 20:g}" height="{height:g}" '
             f'font-family="DejaVu Sans, sans-serif" font-size="12">']

    def colour(layer: int) -> str:
        # From green to red over the layers (the reference's Color("green").range_to("red")).
        f = layer / max(1, layers - 1) if layers > 1 else 0.0
        return f"rgb({round(255 * f)},{round(128 * (1 - f))},0)"

    for row in range(layers):
        layer = layers - 1 - row
        y = top + row * (bar_h + gap)
        parts.append(f'<text x="{left - 8:g}" y="{y + 13:g}" text-anchor="end">layer {layer}</text>')
        parts.append(f'<rect x="{left:g}" y="{y:g}" width="{bar_w:g}" height="{bar_h:g}" fill="none" stroke="black"/>')
        for v in values:
            if v.layer != layer:
                continue
            total = getattr(v, "total", 1) or 1
            for shard in sorted(getattr(v, "shards", frozenset({0}))):
                x = left + bar_w * shard / total
                parts.append(f'<rect x="{x:g}" y="{y:g}" width="{bar_w / total:g}" height="{bar_h:g}" '
                             f'fill="{colour(layer)}" fill-opacity="0.8" stroke="white"/>')
    parts.append("</svg>")
    return Timeline("\n".join(parts))


# ---------------------------------------------------------------- run


class RunResult:
    """A strategy's run: the verdict (``correct``, ``check_error``, ``timesteps``,
    ``max_memory``, ``targets``), the trace (``trace``: a list of records,
    ``trace_json()``: the trace file's text) and the timeline (``_repr_svg_``)."""

    def __init__(self, name: str, dist: Dist, models: List[Model]):
        self.name = name
        self.layers, self.batches, self.ranks = models[0].LAYERS, models[0].BATCHES, models[0].RANKS
        self._dist = dist
        self._meta = _meta(name, models)
        self.models = models
        self.check_error: Optional[str] = _core.check_models(models)
        s = dist._summary(self._meta)
        self.correct: bool = self.check_error is None
        self.timesteps: float = s["timesteps"]
        self.makespan: float = s["makespan"]
        self.max_memory: float = s["max_memory"]
        self.max_memory_rank: int = s["max_memory_rank"]
        self.max_memory_time: float = s["max_memory_time"]
        info = _core.builtin_puzzles().get(name)
        # The seed's targets for the puzzle of this name (its rounded figures), None for another strategy.
        self.targets: Optional[Dict[str, float]] = (
            {"steps": info["target_steps"], "memory": info["target_memory"]} if info else None)

    @property
    def trace(self) -> List[Dict[str, Any]]:
        """Every event as a record: rank, op, layer, start, duration, memory, batches (pandas-ready)."""
        return self._dist._trace_records(self._meta)

    def trace_json(self) -> str:
        """The trace as ``dtsim puzzle NAME --trace`` writes it (docs/trace-format.md)."""
        return self._dist._trace_json(self._meta)

    def timeline(self, ranks: str = "", width: int = 0) -> Timeline:
        return Timeline(self._dist._trace_svg(self._meta, ranks, width))

    def _repr_svg_(self) -> str:
        return self.timeline().svg

    def __repr__(self) -> str:
        verdict = "correct" if self.correct else f"incorrect ({self.check_error})"
        return (f"RunResult({self.name}: {verdict}; timesteps {self.timesteps}, max memory {self.max_memory} "
                f"at GPU {self.max_memory_rank} time {self.max_memory_time}; targets {self.targets})")


def run(strategy: Callable, layers: Optional[int] = None, batches: Optional[int] = None,
        ranks: Optional[int] = None, name: Optional[str] = None) -> RunResult:
    """Runs ``strategy`` (a function or an ``async def`` taking a Model) on every rank.

    Sizes left out are the seed's for the puzzle named ``name`` (default: the
    function's name). A synchronous strategy runs by itself on each rank, as
    the reference runs basic and grad_accum.
    """
    name = name or getattr(strategy, "__name__", "strategy")
    info = _core.builtin_puzzles().get(name)
    if info is None and None in (layers, batches, ranks):
        raise ValueError(f"run: '{name}' is not one of the seed's puzzles, so layers, batches and ranks are needed")
    layers = info["layers"] if layers is None else layers
    batches = info["batches"] if batches is None else batches
    ranks = info["ranks"] if ranks is None else ranks
    dist = Dist(ranks)
    models = [Model(layers=layers, batches=batches, rank=i, dist=dist) for i in range(ranks)]
    if inspect.iscoroutinefunction(strategy):
        gather(*[strategy(m) for m in models])
    else:
        for m in models:
            strategy(m)
    return RunResult(name, dist, models)
