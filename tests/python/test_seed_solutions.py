"""The seed's eight solutions (pasted verbatim in tests/oracle/seed_solutions.py) on dtsim's engine:
each completes, passes the final check, gives the same trace file byte for byte
as the C++ port (dtsim puzzle NAME --trace), and the same events as the
reference library's golden log (tests/data/golden)."""

import json
import pathlib

import pytest

from dtsim import _core
from dtsim.puzzles import run
from seed_solutions import SOLUTIONS

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "data" / "golden"
TIME_TOL = 1e-6  # the golden logs' times are rounded (tests/oracle/compare.py uses the same)
MEM_REL_TOL = 1e-9


@pytest.mark.parametrize("name", list(SOLUTIONS))
def test_seed_solution_trace_is_the_cpp_ports_byte_for_byte(name):
    fn, _, (layers, batches, ranks) = SOLUTIONS[name]
    result = run(fn, layers=layers, batches=batches, ranks=ranks, name=name)
    assert result.correct, result.check_error
    assert result.trace_json() == _core.run_builtin(name, layers, batches, ranks)


@pytest.mark.parametrize("name", list(SOLUTIONS))
def test_seed_solution_matches_the_golden_log(name):
    golden = json.loads((GOLDEN / f"{name}.json").read_text())
    fn = SOLUTIONS[name][0]
    result = run(fn, layers=golden["layers"], batches=golden["batches"], ranks=golden["ranks"], name=name)
    records = result.trace
    assert len({r["rank"] for r in records}) == golden["ranks"]
    for rank, expected in enumerate(golden["events"]):
        mine = [r for r in records if r["rank"] == rank]
        assert len(mine) == len(expected), f"rank {rank}: {len(mine)} events, golden {len(expected)}"
        for i, (a, b) in enumerate(zip(mine, expected)):
            where = f"rank {rank} event #{i}: {a} vs golden {b}"
            assert a["op"] == b["typ"], where
            assert a["layer"] == b["layer"], where
            assert a["batches"] == b["batches"], where
            assert abs(a["start"] - b["time"]) <= TIME_TOL, where
            assert abs(a["duration"] - b["length"]) <= TIME_TOL, where
            assert abs(a["memory"] - b["memory"]) <= MEM_REL_TOL * max(abs(b["memory"]), 1.0), where
    assert abs(result.timesteps - golden["timesteps"]) <= TIME_TOL
    assert result.max_memory == pytest.approx(golden["max_memory"], rel=MEM_REL_TOL)
    assert result.max_memory_rank == golden["max_memory_rank"]
    assert abs(result.max_memory_time - golden["max_memory_time"]) <= TIME_TOL


@pytest.mark.parametrize("name,layers,batches,ranks", [
    ("ddp", 3, 5, 5), ("wsdp", 2, 3, 3), ("fsdp", 8, 2, 2), ("pipeline", 6, 3, 3),
    ("gpipe", 9, 2, 3), ("pipeline_fsdp", 8, 4, 16), ("grad_accum", 3, 2, 2), ("basic", 1, 1, 3),
])
def test_seed_solution_at_other_sizes_is_the_cpp_ports(name, layers, batches, ranks):
    result = run(SOLUTIONS[name][0], layers=layers, batches=batches, ranks=ranks, name=name)
    assert result.trace_json() == _core.run_builtin(name, layers, batches, ranks)
