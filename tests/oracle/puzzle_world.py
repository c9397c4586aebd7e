"""An independent implementation of the puzzle world, written from
docs/puzzle-semantics.md (the rules of the reference puzzle library).

Python 3 standard library only.  It is the oracle that dtsim's puzzle cost
model is checked against (see compare.py), so it is kept deliberately plain:

- values carry frozensets of shards and batches;
- a Model (one per rank) owns five dict stores; its memory is the sum of the
  sizes of the values currently held in them, computed exactly (fractions) so
  that ties between equal memory figures are exact ties;
- every timed operation appends one Event (op, layer, start, length,
  memory-before-the-result-is-stored, batches) and then advances the rank's
  clock by `clock += length` in binary floating point, as the reference does;
- collectives are matched by call order over all ranks; mailboxes are FIFO
  with room for one message; all ranks run as asyncio tasks (asyncio.gather),
  synchronised with asyncio.Event, never with sleeps.  A run in which every
  unfinished rank waits forever is reported as a deadlock (the reference
  library would hang there).
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Optional, Sequence, Tuple

HIDDEN = 512
LENGTH = 256
WEIGHT_SIZE = HIDDEN * HIDDEN  # a full layer weight, optimizer state or weight grad
BATCH_SIZE = HIDDEN * LENGTH  # one batch of an activation or activation grad

# Lengths of the timed operations, in steps.
COST_LOSS = 0
COST_UPDATE = 0.5
COST_COLLECTIVE = 0.3
COST_PASS = 0.2


class PuzzleCheckError(AssertionError):
    """A failed check of an operation (names rank, op and layer)."""


class DeadlockError(RuntimeError):
    """Every rank that has not finished waits on something that never comes."""


class RankError(Exception):
    """An exception raised on one rank, tagged with that rank."""

    def __init__(self, rank: int, error: BaseException):
        self.rank = rank
        self.error = error
        if isinstance(error, (PuzzleCheckError, DeadlockError)):
            text = str(error)
        else:
            text = f"rank {rank}: {type(error).__name__}: {error}"
        super().__init__(text)


def _ids(values: Iterable[int]) -> FrozenSet[int]:
    return frozenset(int(v) for v in values)


def _shard_fraction(shards: FrozenSet[int], total: int) -> Fraction:
    return Fraction(len(shards), total)


# ---------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Weight:
    layer: int
    step: int
    shards: FrozenSet[int] = frozenset({0})
    total: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "shards", _ids(self.shards))

    def is_complete(self) -> bool:
        return len(self.shards) == self.total

    def combine(self, other: "Weight") -> "Weight":
        return Weight(self.layer, self.step, self.shards | other.shards, self.total)

    def size(self) -> Fraction:
        return _shard_fraction(self.shards, self.total) * WEIGHT_SIZE


@dataclass(frozen=True)
class OptState:
    layer: int
    step: int
    shards: FrozenSet[int] = frozenset({0})
    total: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "shards", _ids(self.shards))

    def is_complete(self) -> bool:
        return len(self.shards) == self.total

    def combine(self, other: "OptState") -> "OptState":
        return OptState(self.layer, self.step, self.shards | other.shards, self.total)

    def size(self) -> Fraction:
        return _shard_fraction(self.shards, self.total) * WEIGHT_SIZE


@dataclass(frozen=True)
class Activation:
    """The input of `layer` (layer 0: the model input; layer LAYERS: the output)."""

    layer: int
    batches: FrozenSet[int]

    def __post_init__(self) -> None:
        object.__setattr__(self, "batches", _ids(self.batches))

    def size(self) -> Fraction:
        return Fraction(len(self.batches) * BATCH_SIZE)


@dataclass(frozen=True)
class ActivationGrad:
    """The gradient consumed by backward(layer)."""

    layer: int
    batches: FrozenSet[int]

    def __post_init__(self) -> None:
        object.__setattr__(self, "batches", _ids(self.batches))

    def size(self) -> Fraction:
        return Fraction(len(self.batches) * BATCH_SIZE)


@dataclass(frozen=True)
class WeightGrad:
    layer: int
    batches: FrozenSet[int]
    shards: FrozenSet[int] = frozenset({0})
    total: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "batches", _ids(self.batches))
        object.__setattr__(self, "shards", _ids(self.shards))

    def is_complete(self) -> bool:
        return len(self.shards) == self.total

    def __add__(self, other: "WeightGrad") -> "WeightGrad":
        if not isinstance(other, WeightGrad):
            return NotImplemented
        if self.layer != other.layer:
            raise AssertionError(f"cannot add weight grads of layers {self.layer} and {other.layer}")
        if self.shards != other.shards:
            raise AssertionError(
                f"cannot add weight grads with shards {sorted(self.shards)} and {sorted(other.shards)}")
        return WeightGrad(self.layer, self.batches | other.batches, self.shards, self.total)

    def combine(self, other: "WeightGrad") -> "WeightGrad":
        return WeightGrad(self.layer, self.batches, self.shards | other.shards, self.total)

    def shard(self, shard: int, total: int) -> "WeightGrad":
        if not self.is_complete():
            raise AssertionError(
                f"cannot shard an incomplete weight grad (shards {sorted(self.shards)} of {self.total})")
        if not shard < total:
            raise AssertionError(f"shard {shard} out of {total}")
        return WeightGrad(self.layer, self.batches, frozenset({shard}), total)

    def size(self) -> Fraction:
        return _shard_fraction(self.shards, self.total) * WEIGHT_SIZE


# ---------------------------------------------------------------------------
# Events
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    op: str
    layer: Optional[int]
    start: float
    length: float
    memory: Fraction
    batches: Tuple[int, ...] = ()


# ---------------------------------------------------------------------------
# Communication: collectives matched by call order, FIFO mailboxes of one.
# ---------------------------------------------------------------------------


class _Waiter:
    __slots__ = ("event", "woken", "rank", "what")

    def __init__(self, rank: int, what: str):
        self.event = asyncio.Event()
        self.woken = False
        self.rank = rank
        self.what = what


class _Round:
    """The k-th collective of every rank."""

    def __init__(self, kind: str, ranks: int):
        self.kind = kind
        self.values: List[Any] = [None] * ranks
        self.clocks: List[float] = [0] * ranks
        self.arrived = 0
        self.waiters: List[_Waiter] = []
        self.result: Any = None
        self.error: Optional[str] = None
        self.clock: float = 0


class _Mailbox:
    CAPACITY = 1

    def __init__(self) -> None:
        self.items: deque = deque()
        self.putters: deque = deque()
        self.getters: deque = deque()


class Dist:
    """What the ranks share: collective rounds and mailboxes."""

    def __init__(self, ranks: int):
        if ranks < 1:
            raise ValueError("ranks must be at least 1")
        self.ranks = ranks
        self._rounds: Dict[int, _Round] = {}
        self._calls = [0] * ranks
        self._mailboxes = [_Mailbox() for _ in range(ranks)]
        # Deadlock accounting: ranks neither finished nor waiting.
        self._active = ranks
        self._waiting: List[_Waiter] = []
        self._deadlock: Optional[str] = None

    # -- waiting -----------------------------------------------------------
    async def _wait(self, waiter: _Waiter) -> None:
        self._active -= 1
        self._waiting.append(waiter)
        self._check_deadlock()
        await waiter.event.wait()
        if self._deadlock is not None:
            raise DeadlockError(self._deadlock)

    def _wake(self, waiter: _Waiter) -> None:
        if waiter.woken:
            return
        waiter.woken = True
        self._waiting.remove(waiter)
        self._active += 1
        waiter.event.set()

    def _check_deadlock(self) -> None:
        if self._active == 0 and self._waiting and self._deadlock is None:
            parts = ", ".join(f"rank {w.rank} waits in {w.what}" for w in sorted(self._waiting, key=lambda w: w.rank))
            self._deadlock = f"deadlock: {parts}"
            for w in list(self._waiting):
                w.woken = True
                w.event.set()
            self._waiting.clear()

    def rank_finished(self) -> None:
        self._active -= 1
        self._check_deadlock()

    # -- collectives -------------------------------------------------------
    async def collective(self, rank: int, kind: str, value: Any, clock: float) -> Tuple[Any, float]:
        k = self._calls[rank]
        self._calls[rank] += 1
        rnd = self._rounds.get(k)
        if rnd is None:
            rnd = self._rounds[k] = _Round(kind, self.ranks)
        if rnd.kind != kind:
            raise AssertionError(f"rank {rank}: collective #{k} is {kind} here but {rnd.kind} on another rank")
        rnd.values[rank] = value
        rnd.clocks[rank] = clock
        rnd.arrived += 1
        if rnd.arrived == self.ranks:
            del self._rounds[k]
            rnd.clock = max(rnd.clocks)
            try:
                acc = rnd.values[0]
                for v in rnd.values[1:]:
                    if kind == "allgather":
                        if type(v) is not type(acc):
                            raise AssertionError(
                                f"allgather of {type(acc).__name__} and {type(v).__name__}")
                        acc = acc.combine(v)
                    else:
                        acc = acc + v
                rnd.result = acc
            except Exception as e:  # the reduction itself failed
                rnd.error = f"{type(e).__name__}: {e}"
            for w in rnd.waiters:
                self._wake(w)
        else:
            w = _Waiter(rank, f"{kind} #{k}")
            rnd.waiters.append(w)
            await self._wait(w)
        if rnd.error is not None:
            raise AssertionError(rnd.error)
        return rnd.result, rnd.clock

    # -- point to point ------------------------------------------------------
    async def send(self, rank: int, dst: int, message: Any) -> None:
        box = self._mailboxes[dst]  # list indexing, as the reference's queue list
        while len(box.items) >= _Mailbox.CAPACITY:
            w = _Waiter(rank, f"pass_to({dst})")
            box.putters.append(w)
            await self._wait(w)
        box.items.append(message)
        if box.getters:
            self._wake(box.getters.popleft())

    async def receive(self, rank: int) -> Any:
        box = self._mailboxes[rank]
        while not box.items:
            w = _Waiter(rank, "receive()")
            box.getters.append(w)
            await self._wait(w)
        message = box.items.popleft()
        if box.putters:
            self._wake(box.putters.popleft())
        return message


# ---------------------------------------------------------------------------
# The model of one rank
# ---------------------------------------------------------------------------


class Model:
    def __init__(self, layers: int = 2, batches: int = 1, rank: int = 0, dist: Optional[Dist] = None):
        if dist is None:
            dist = Dist(1)
        self.rank = rank
        self.dist = dist
        self.RANKS = dist.ranks
        self.LAYERS = layers
        self.BATCHES = batches
        self.clock: float = 0
        self.log: List[Event] = []
        self.final_weights: Dict[int, Weight] = {}
        self.weights: Dict[Any, Weight] = {}
        self.opt_states: Dict[Any, OptState] = {}
        self.activations: Dict[Any, Activation] = {}
        self.grad_activations: Dict[Any, ActivationGrad] = {}
        self.grad_weights: Dict[Any, WeightGrad] = {}

    # -- stores and memory -----------------------------------------------------
    def storage(self):
        return self.weights, self.opt_states, self.activations, self.grad_activations, self.grad_weights

    def memory(self) -> Fraction:
        total = Fraction(0)
        for store in self.storage():
            for value in store.values():
                total += value.size()
        return total

    # -- helpers -------------------------------------------------------------
    def _fail(self, op: str, layer: Optional[int], message: str) -> None:
        where = f" (layer {layer})" if layer is not None else ""
        raise PuzzleCheckError(f"rank {self.rank}: {op}{where}: {message}")

    def _check(self, ok: bool, op: str, layer: Optional[int], message: str) -> None:
        if not ok:
            self._fail(op, layer, message)

    def _event(self, op: str, layer: Optional[int], length: float, batches: Iterable[int] = ()) -> None:
        self.log.append(Event(op, layer, self.clock, length, self.memory(), tuple(sorted(batches))))
        self.clock += length

    # -- untimed -------------------------------------------------------------
    def load_weights(self, layer: int, shard: int = 0, total: int = 1) -> Tuple[Weight, OptState]:
        return Weight(layer, 0, frozenset({shard}), total), OptState(layer, 0, frozenset({shard}), total)

    def get_activation(self, batches: Iterable[int]) -> Activation:
        return Activation(0, frozenset(batches))

    def fake_grad(self, layer: int, batches: Iterable[int]) -> WeightGrad:
        # Not described in puzzle-semantics.md: a full (unsharded) weight grad for
        # the given batches; pipeline_fsdp's empty_grad uses it with no batches.
        return WeightGrad(layer, frozenset(batches))

    def set_final_weight(self, layer: int, weight: Weight) -> None:
        self.final_weights[layer] = weight

    # -- compute ---------------------------------------------------------------
    def forward(self, layer: int, act: Activation, weight: Weight) -> Activation:
        op = "forward"
        self._check(weight.is_complete(), op, layer,
                    f"weight is not complete (shards {sorted(weight.shards)} of {weight.total})")
        self._check(weight.layer == layer, op, layer, f"weight is for layer {weight.layer}")
        self._check(act.layer == layer, op, layer, f"activation is for layer {act.layer}")
        self._event(op, layer, len(act.batches), act.batches)
        return Activation(layer + 1, act.batches)

    def backward(self, layer: int, act: Activation, grad: ActivationGrad,
                 weight: Weight) -> Tuple[WeightGrad, ActivationGrad]:
        op = "backward"
        self._check(weight.is_complete(), op, layer,
                    f"weight is not complete (shards {sorted(weight.shards)} of {weight.total})")
        self._check(weight.layer == layer, op, layer, f"weight is for layer {weight.layer}")
        self._check(act.layer == layer, op, layer, f"activation is for layer {act.layer}")
        self._check(act.batches == grad.batches, op, layer,
                    f"activation batches {sorted(act.batches)} != activation grad batches {sorted(grad.batches)}")
        self._check(grad.layer == layer, op, layer, f"activation grad is for layer {grad.layer}")
        self._event(op, layer, len(act.batches), act.batches)
        return WeightGrad(layer, act.batches), ActivationGrad(layer - 1, act.batches)

    def loss(self, act: Activation) -> ActivationGrad:
        op = "loss"
        self._check(act.layer == self.LAYERS, op, self.LAYERS,
                    f"activation is for layer {act.layer}, not the output {self.LAYERS}")
        self._event(op, self.LAYERS, COST_LOSS)
        return ActivationGrad(self.LAYERS - 1, act.batches)

    def update(self, layer: int, weight_grad: WeightGrad, weight: Weight,
               opt_state: OptState) -> Tuple[Weight, OptState]:
        op = "update"
        self._check(weight.layer == layer, op, layer, f"weight is for layer {weight.layer}")
        self._check(weight_grad.layer == layer, op, layer, f"weight grad is for layer {weight_grad.layer}")
        self._check(opt_state.layer == layer, op, layer, f"optimizer state is for layer {opt_state.layer}")
        # "covers every batch 0..BATCHES-1": the reference compares the batch set
        # with range(BATCHES) for equality, so extra batch ids fail as well.
        self._check(weight_grad.batches == frozenset(range(self.BATCHES)), op, layer,
                    f"weight grad has batches {sorted(weight_grad.batches)}, not exactly 0..{self.BATCHES - 1}")
        if weight_grad.total > 1:
            self._check(weight.shards <= weight_grad.shards, op, layer,
                        f"weight shards {sorted(weight.shards)} not within the grad's {sorted(weight_grad.shards)}")
            self._check(opt_state.shards <= weight_grad.shards, op, layer,
                        f"optimizer shards {sorted(opt_state.shards)} not within the grad's "
                        f"{sorted(weight_grad.shards)}")
        self._check(weight.step == opt_state.step, op, layer,
                    f"weight at step {weight.step}, optimizer state at step {opt_state.step}")
        self._event(op, None, COST_UPDATE)
        return (Weight(layer, weight.step + 1, weight.shards, weight.total),
                OptState(layer, opt_state.step + 1, opt_state.shards, opt_state.total))

    # -- communication ---------------------------------------------------------
    async def allreduce(self, value: Any, layer: int) -> Any:
        result, self.clock = await self.dist.collective(self.rank, "allreduce", value, self.clock)
        self._event("allreduce", layer, COST_COLLECTIVE)
        return result

    async def allgather(self, value: Any, layer: int) -> Any:
        result, self.clock = await self.dist.collective(self.rank, "allgather", value, self.clock)
        self._event("allgather", layer, COST_COLLECTIVE)
        return result

    async def scatterreduce(self, value: Any, layer: int) -> Any:
        total, self.clock = await self.dist.collective(self.rank, "scatterreduce", value, self.clock)
        try:
            result = total.shard(self.rank, self.RANKS)
        except AssertionError as e:
            self._fail("scatterreduce", layer, str(e))
        self._event("scatterreduce", layer, COST_COLLECTIVE)
        return result

    async def pass_to(self, dst: int, value: Any) -> None:
        self._event("pass", None, COST_PASS)
        await self.dist.send(self.rank, dst, (value, self.clock))

    async def receive(self) -> Any:
        value, sent_clock = await self.dist.receive(self.rank)
        self.clock = max(self.clock, sent_clock)
        self._event("pass", None, COST_PASS)
        return value

    # -- the final check -------------------------------------------------------
    @staticmethod
    def check(models: Sequence["Model"]) -> None:
        """Every layer: the final weights set for it have step 1 and together are complete."""
        for layer in range(models[0].LAYERS):
            combined: Optional[Weight] = None
            for m in models:
                if layer in m.final_weights:
                    w = m.final_weights[layer]
                    if w.step != 1:
                        raise PuzzleCheckError(f"check: rank {m.rank}: final weight of layer {layer} is at step {w.step}")
                    combined = w if combined is None else combined.combine(w)
            if combined is None:
                raise PuzzleCheckError(f"check: no final weight for layer {layer}")
            if not combined.is_complete():
                raise PuzzleCheckError(
                    f"check: final weight of layer {layer} is not complete "
                    f"(shards {sorted(combined.shards)} of {combined.total})")


# ---------------------------------------------------------------------------
# Running a solution and summarising it
# ---------------------------------------------------------------------------


@dataclass
class Outcome:
    status: str  # "ok", "check_failed" or "error"
    message: str
    models: List[Model]


async def _run_rank(dist: Dist, rank: int, coro) -> Any:
    try:
        return await coro
    except Exception as e:
        raise RankError(rank, e) from e
    finally:
        dist.rank_finished()


def run_solution(fn: Callable, layers: int, batches: int, ranks: int, is_async: bool) -> Outcome:
    """Runs fn on every rank as the seed does; never raises for the seed's errors."""
    models: List[Model] = []
    try:
        if is_async:
            async def main():
                dist = Dist(ranks)
                ms = [Model(layers=layers, batches=batches, rank=i, dist=dist) for i in range(ranks)]
                models.extend(ms)
                return await asyncio.gather(*[_run_rank(dist, i, fn(m)) for i, m in enumerate(ms)])
            asyncio.run(main())
        else:
            # A synchronous solution (basic, grad_accum) runs by itself on each rank.
            dist = Dist(ranks)
            for i in range(ranks):
                m = Model(layers=layers, batches=batches, rank=i, dist=dist)
                models.append(m)
                try:
                    fn(m)
                except Exception as e:
                    raise RankError(i, e) from e
    except RankError as e:
        return Outcome("error", str(e), models)
    except RecursionError as e:  # pragma: no cover
        return Outcome("error", f"RecursionError: {e}", models)
    try:
        Model.check(models)
    except PuzzleCheckError as e:
        return Outcome("check_failed", str(e), models)
    return Outcome("ok", "", models)


def _num(x):
    """A number for JSON: integral values as int, others as float."""
    f = float(x)
    if f.is_integer() and abs(f) < 2 ** 53:
        return int(f)
    return f


def summarize(models: Sequence[Model], correct: bool) -> Dict[str, Any]:
    timesteps = 0.0
    makespan = 0.0
    max_mem: Optional[Fraction] = None
    max_rank = 0
    max_time = 0.0
    for m in models:
        if m.log:
            timesteps = max(timesteps, m.log[-1].start)
        for e in m.log:
            makespan = max(makespan, e.start + e.length)
            if max_mem is None or e.memory > max_mem:
                max_mem, max_rank, max_time = e.memory, m.rank, e.start
    return {
        "timesteps": _num(timesteps),
        "makespan": _num(makespan),
        "max_memory": _num(max_mem if max_mem is not None else 0),
        "max_memory_rank": max_rank,
        "max_memory_time": _num(max_time),
        "correct": correct,
    }


def to_trace(name: str, layers: int, batches: int, ranks: int, outcome: Outcome) -> Dict[str, Any]:
    ranks_out = []
    for m in outcome.models:
        events = []
        for e in m.log:
            d: Dict[str, Any] = {"op": e.op, "layer": e.layer, "start": _num(e.start),
                                 "duration": _num(e.length), "memory": _num(e.memory)}
            if e.op in ("forward", "backward"):
                d["batches"] = list(e.batches)
            events.append(d)
        ranks_out.append({"rank": m.rank, "events": events})
    return {
        "format": "dtsim-trace",
        "version": 1,
        "time_unit": "step",
        "memory_unit": "unit",
        "meta": {"puzzle": name, "layers": layers, "batches": batches, "ranks": ranks},
        "summary": summarize(outcome.models, outcome.status == "ok"),
        "ranks": ranks_out,
    }
