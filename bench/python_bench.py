#!/usr/bin/env python3
"""The seed's ddp and fsdp, written in Python (tests/python/seed_solutions.py), on
dtsim's engine at 1,024 ranks, against the C++ ports of the same solutions in
the same process: CPU seconds per run (best of --repeat; this process's CPU time,
which other work on a shared machine disturbs less than the wall clock), events,
and what a Python strategy adds per operation.

    PYTHONPATH=build/python /usr/bin/python3 bench/python_bench.py [--ranks 1024] [--layers 32]

Both sides keep every event (a trace); neither writes it out.
"""

import argparse
import os
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))

from dtsim import _core  # noqa: E402
from dtsim.puzzles import run  # noqa: E402
from seed_solutions import SOLUTIONS  # noqa: E402


def best(fn, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.process_time()
        out = fn()
        times.append(time.process_time() - t0)
    return min(times), out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=1024)
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--puzzles", default="ddp,fsdp")
    a = p.parse_args()
    print(f"ranks {a.ranks}, layers {a.layers}, batches {a.ranks}; CPU seconds, best of {a.repeat}")
    print(f"{'puzzle':<8} {'python s':>9} {'c++ s':>8} {'events':>9} {'ratio':>6} {'python us/op':>13} "
          f"{'c++ us/op':>10} {'overhead us/op':>15}")
    for name in a.puzzles.split(","):
        fn = SOLUTIONS[name][0]
        t_py, result = best(lambda: run(fn, layers=a.layers, batches=a.ranks, ranks=a.ranks, name=name), a.repeat)
        if not result.correct:
            sys.exit(f"{name}: the Python run failed its check: {result.check_error}")
        events = sum(1 for _ in result.trace)
        t_cpp, cpp_events = best(lambda: _core.run_builtin_events(name, a.layers, a.ranks, a.ranks), a.repeat)
        if cpp_events != events:
            sys.exit(f"{name}: {events} events in Python, {cpp_events} in C++")
        print(f"{name:<8} {t_py:>9.3f} {t_cpp:>8.3f} {events:>9} {t_py / t_cpp:>6.1f} {t_py / events * 1e6:>13.2f} "
              f"{t_cpp / events * 1e6:>10.3f} {(t_py - t_cpp) / events * 1e6:>15.2f}")


if __name__ == "__main__":
    main()
