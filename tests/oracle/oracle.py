#!/usr/bin/env python3
"""Runs one seed puzzle solution in the oracle's puzzle world and writes a
dtsim-format trace (trace-format.md).

    oracle.py NAME [--layers L] [--batches B] [--ranks R] [--out FILE]

Exit status: 0 when the run completed and the final check passed; 1 when
the seed code raised (or deadlocked) at these sizes -- the error is printed
and no trace is written -- or when the final check failed (the trace is
written with summary.correct = false); 2 for usage errors.  Sizes left out
are the puzzle's canonical ones.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.dont_write_bytecode = True  # keep the source tree clean (no __pycache__)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

if not __debug__:  # the seed code relies on assert statements
    sys.exit("oracle.py: do not run with python -O (the seed's asserts would be skipped)")

from puzzle_world import run_solution, to_trace  # noqa: E402
from seed_solutions import SOLUTIONS  # noqa: E402


def run(name: str, layers: int, batches: int, ranks: int):
    """(outcome, trace or None) for one puzzle at the given sizes."""
    fn, is_async, _ = SOLUTIONS[name]
    outcome = run_solution(fn, layers, batches, ranks, is_async)
    trace = None if outcome.status == "error" else to_trace(name, layers, batches, ranks, outcome)
    return outcome, trace


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="Run a seed puzzle solution in the oracle's puzzle world.")
    p.add_argument("name", help="puzzle: " + ", ".join(SOLUTIONS))
    p.add_argument("--layers", type=int)
    p.add_argument("--batches", type=int)
    p.add_argument("--ranks", type=int)
    p.add_argument("--out", help="write the trace JSON here (default: stdout)")
    a = p.parse_args(argv)
    if a.name not in SOLUTIONS:
        p.error(f"unknown puzzle '{a.name}'; the puzzles are: {', '.join(SOLUTIONS)}")
    layers, batches, ranks = SOLUTIONS[a.name][2]
    layers = a.layers if a.layers is not None else layers
    batches = a.batches if a.batches is not None else batches
    ranks = a.ranks if a.ranks is not None else ranks
    if min(layers, batches, ranks) < 1:
        p.error("layers, batches and ranks must be at least 1")

    outcome, trace = run(a.name, layers, batches, ranks)
    if trace is not None:
        text = json.dumps(trace, indent=1) + "\n"
        if a.out:
            with open(a.out, "w") as f:
                f.write(text)
        else:
            sys.stdout.write(text)
    if outcome.status == "error":
        print(f"oracle: error: {outcome.message}", file=sys.stderr)
        return 1
    if outcome.status == "check_failed":
        print(f"oracle: final check failed: {outcome.message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
