"""The eight solutions of the puzzle seed, as the oracle's tests hold them
(tests/oracle/seed_solutions.py: each pasted verbatim from the seed's code block that
defines it), run on dtsim's engine: that file's code, with its one import line taking
the names the seed code uses (Model, WeightGrad) from dtsim.puzzles instead of the
oracle's puzzle world. One copy of the seed's code serves both."""

from pathlib import Path

_SOURCE = Path(__file__).resolve().parent.parent / "oracle" / "seed_solutions.py"
_ORACLE_IMPORT = "from puzzle_world import Model, WeightGrad"
_text = _SOURCE.read_text()
if _text.count(_ORACLE_IMPORT) != 1:
    raise ImportError(f"{_SOURCE}: expected one line '{_ORACLE_IMPORT}'")
exec(compile(_text.replace(_ORACLE_IMPORT, "from dtsim.puzzles import Model, WeightGrad"), str(_SOURCE), "exec"))
