#!/usr/bin/env python3
"""Parity of dtsim's puzzle world with the oracle (puzzle_world.py running the
seed's solutions), beyond the eight canonical sizes.

    compare.py --dtsim PATH_TO_DTSIM [--golden DIR] [--grid quick|full] [--stride K]
               [--only NAME[,NAME...]] [--jobs N] [--verbose]

(a) With --golden: the oracle against the reference library's golden event
    logs at the canonical sizes, event for event (this validates the oracle).
(b) For every size in the grid: `dtsim puzzle NAME --layers L --batches B
    --ranks R --trace TMP` and the oracle must agree on the outcome (ok,
    final check failed, or error) and, where a trace exists, on every event
    (op, layer, start and duration within 1e-9, memory within 1e-9 relative,
    batches) and on the summary.

One line per case, then `N passed, M failed`; exit status 1 on any failure.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # keep the source tree clean (no __pycache__)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

if not __debug__:  # the seed code relies on assert statements
    sys.exit("compare.py: do not run with python -O (the seed's asserts would be skipped)")

from oracle import run as oracle_run  # noqa: E402
from seed_solutions import SOLUTIONS  # noqa: E402

TIME_TOL = 1e-9
MEM_REL_TOL = 1e-9
GOLDEN_TIME_TOL = 1e-6  # golden times are rounded to 6 decimals
DTSIM_TIMEOUT_S = 120


# ---------------------------------------------------------------------------
# Grids of sizes: (layers, batches, ranks) per puzzle
# ---------------------------------------------------------------------------


def _dedupe(sizes):
    seen, out = set(), []
    for s in sizes:
        if min(s[:2]) >= 0 and s[2] >= 1 and s not in seen:
            seen.add(s)
            out.append(s)
    return out


def grid(kind: str):
    full = kind == "full"
    cases = []

    # basic, grad_accum: one rank (the seed's way), plus a few multi-rank runs
    # where each rank runs the whole synchronous solution by itself.
    for name in ("basic", "grad_accum"):
        sizes = [(L, B, 1) for L in range(1, 6 if not full else 9) for B in range(1, 7 if not full else 10)]
        sizes += [(2, 4, 2), (3, 2, 3)] if not full else [(L, B, R) for L in (1, 2, 3) for B in (1, 4) for R in (2, 3, 5)]
        cases += [(name, s) for s in _dedupe(sizes)]

    # ddp, wsdp, fsdp: batches == ranks is the seed's set-up; other batch counts
    # make the update's batch check fail (or pass vacuously); many layer counts.
    for name in ("ddp", "wsdp", "fsdp"):
        ranks = range(1, 7) if not full else range(1, 10)
        layers = (1, 2, 3) if name == "ddp" else (1, 2, 6)
        if full:
            layers = range(1, 9)
        sizes = []
        for R in ranks:
            batches = {R, R + 1, max(1, R - 1), 1} if not full else {1, 2, R - 1, R, R + 1, 2 * R, 7}
            for L in layers:
                for B in sorted(batches):
                    sizes.append((L, B, R))
        cases += [(name, s) for s in _dedupe(sizes)]

    # pipeline, gpipe: layers R, 2R, 3R and non-multiples (incl. fewer than ranks).
    for name in ("pipeline", "gpipe"):
        sizes = []
        for R in range(1, 6 if not full else 9):
            layer_set = {R, 2 * R, 3 * R, R + 1, max(1, R - 1), 1, 2 * R + 1}
            if full:
                layer_set |= set(range(1, 3 * R + 3))
            batch_set = {1, 3, R} if not full else set(range(1, 7)) | {R, 2 * R}
            for L in sorted(layer_set):
                for B in sorted(batch_set):
                    sizes.append((L, B, R))
        cases += [(name, s) for s in _dedupe(sizes)]

    # pipeline_fsdp: ranks in groups of four (and not); the seed feeds batch
    # rank // 4 from every rank 0 mod 4, so batches = ranks // 4 is its set-up.
    sizes = []
    # It completes only where 4 * (layers // (ranks // 4)) == layers (e.g. ranks
    # 12..15 with layers 4 or 8, ranks 16..19 with layers a multiple of 4).
    rank_set = (4, 8, 12, 16, 5, 3) if not full else tuple(range(1, 21)) + (24, 32)
    for R in rank_set:
        layer_set = list(range(1, 9)) + ([12, 16] if R == 16 else [])
        if full:
            layer_set = range(1, 17 if 12 <= R <= 19 else 13)
        batch_set = {max(1, R // 4), 4} if not full else {1, 2, 3, 4, max(1, R // 4), R // 4 + 1}
        for L in layer_set:
            for B in sorted(batch_set):
                sizes.append((L, B, R))
    cases += [("pipeline_fsdp", s) for s in _dedupe(sizes)]

    # Sizes the seed's code accepts too: no layers (a model of only its loss), no
    # batches (forwards and backwards of no time), both; and in the pipelines, ranks
    # left without a layer, which fail where the seed's code reads my_layers[0].
    for name in ("basic", "grad_accum", "ddp", "wsdp", "fsdp", "pipeline", "gpipe", "pipeline_fsdp"):
        rank_set = (4, 8) if name == "pipeline_fsdp" else (1, 2, 4)
        sizes = [(L, B, R) for R in rank_set for L in (0, 1, 2) for B in (0, 1, 4) if L == 0 or B == 0]
        cases += [(name, s) for s in _dedupe(sizes)]
    return cases


# ---------------------------------------------------------------------------
# Comparison helpers
# ---------------------------------------------------------------------------


def _close_time(a, b, tol=TIME_TOL) -> bool:
    return abs(float(a) - float(b)) <= tol


def _close_mem(a, b) -> bool:
    a, b = float(a), float(b)
    return abs(a - b) <= MEM_REL_TOL * max(abs(a), abs(b), 1.0)


def _ev_str(e) -> str:
    return json.dumps(e, separators=(",", ":"))


def compare_events(mine_ranks, their_ranks, time_tol, their_keys, who):
    """First difference between two per-rank event lists, or None.

    mine_ranks / their_ranks: lists (per rank) of dicts with the trace's keys;
    their_keys maps trace keys to the other side's keys (for the golden files).
    """
    if len(mine_ranks) != len(their_ranks):
        return f"{len(mine_ranks)} ranks in the oracle, {len(their_ranks)} in {who}"
    k_op, k_start, k_dur = their_keys["op"], their_keys["start"], their_keys["duration"]
    for r, (mine, theirs) in enumerate(zip(mine_ranks, their_ranks)):
        for i in range(max(len(mine), len(theirs))):
            if i >= len(mine) or i >= len(theirs):
                extra = theirs[i] if i < len(theirs) else mine[i]
                side = who if i < len(theirs) else "the oracle"
                return (f"rank {r}: {len(mine)} events in the oracle, {len(theirs)} in {who}; "
                        f"first extra event #{i} in {side}: {_ev_str(extra)}")
            a, b = mine[i], theirs[i]
            problems = []
            if a["op"] != b.get(k_op):
                problems.append("op")
            if a.get("layer") != b.get("layer"):
                problems.append("layer")
            if not _close_time(a["start"], b.get(k_start, float("nan")), time_tol):
                problems.append("start")
            if not _close_time(a["duration"], b.get(k_dur, float("nan")), TIME_TOL):
                problems.append("duration")
            if not _close_mem(a["memory"], b.get("memory", float("nan"))):
                problems.append("memory")
            if list(a.get("batches", [])) != list(b.get("batches", [])):
                problems.append("batches")
            if problems:
                return (f"rank {r} event #{i} differs in {', '.join(problems)}: "
                        f"oracle {_ev_str(a)} vs {who} {_ev_str(b)}")
    return None


def compare_summary(mine, theirs, time_tol, who, keys=("timesteps", "makespan", "max_memory",
                                                       "max_memory_rank", "max_memory_time", "correct")):
    diffs = []
    for k in keys:
        a, b = mine.get(k), theirs.get(k)
        if k in ("timesteps", "makespan", "max_memory_time"):
            ok = b is not None and _close_time(a, b, time_tol)
        elif k == "max_memory":
            ok = b is not None and _close_mem(a, b)
        else:
            ok = a == b
        if not ok:
            diffs.append(f"{k}: oracle {a!r} vs {who} {b!r}")
    return "; ".join(diffs) or None


# ---------------------------------------------------------------------------
# (a) the oracle against the golden files
# ---------------------------------------------------------------------------


def check_golden(name: str, golden_dir: str):
    path = os.path.join(golden_dir, f"{name}.json")
    with open(path) as f:
        g = json.load(f)
    outcome, trace = oracle_run(name, g["layers"], g["batches"], g["ranks"])
    if outcome.status != "ok":
        return False, f"oracle: {outcome.status}: {outcome.message}"
    mine = [r["events"] for r in trace["ranks"]]
    theirs = g["events"]
    # The oracle lists batches only for forward/backward; golden has [] elsewhere.
    diff = compare_events(mine, theirs, GOLDEN_TIME_TOL,
                          {"op": "typ", "start": "time", "duration": "length"}, "golden")
    if diff:
        return False, diff
    gs = dict(g, correct=True)
    diff = compare_summary(trace["summary"], gs, GOLDEN_TIME_TOL, "golden",
                           keys=("timesteps", "max_memory", "max_memory_rank", "max_memory_time", "correct"))
    if diff:
        return False, diff
    s = trace["summary"]
    return True, f"{sum(len(e) for e in mine)} events; timesteps {s['timesteps']}, max memory {s['max_memory']}"


# ---------------------------------------------------------------------------
# (b) dtsim against the oracle
# ---------------------------------------------------------------------------


def run_dtsim(dtsim: str, name: str, L: int, B: int, R: int, tmpdir: str):
    out = os.path.join(tmpdir, f"{name}_L{L}_B{B}_R{R}.json")
    cmd = [dtsim, "puzzle", name, "--layers", str(L), "--batches", str(B), "--ranks", str(R), "--trace", out]
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=DTSIM_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return "dtsim-timeout", None, f"no answer in {DTSIM_TIMEOUT_S} s"
    stderr = p.stderr.strip().splitlines()
    first_err = stderr[0] if stderr else ""
    trace = None
    if os.path.exists(out):
        try:
            with open(out) as f:
                trace = json.load(f)
        except ValueError as e:
            return "dtsim-bad-trace", None, f"unreadable trace: {e}"
        os.unlink(out)
    if p.returncode == 0:
        if trace is None:
            return "dtsim-no-trace", None, "exit 0 but no trace written"
        if trace.get("summary", {}).get("correct") is not True:
            return "dtsim-inconsistent", trace, "exit 0 but summary.correct is not true"
        return "ok", trace, ""
    if p.returncode == 1:
        if trace is not None and "error" in trace.get("meta", {}):
            # A run that failed writes what it did up to the failure, its error in meta.
            if trace.get("summary", {}).get("correct") is not False:
                return "dtsim-inconsistent", trace, f"a failed run's trace whose summary.correct is not false; {first_err}"
            return "error", None, first_err
        if trace is not None and trace.get("summary", {}).get("correct") is False:
            return "check_failed", trace, first_err
        if trace is not None:
            return "dtsim-inconsistent", trace, f"exit 1 with a trace whose summary.correct is not false; {first_err}"
        return "error", None, first_err
    return f"dtsim-exit-{p.returncode}", trace, first_err or p.stdout.strip()[:200]


def compare_case(dtsim: str, name: str, size, tmpdir: str):
    L, B, R = size
    outcome, o_trace = oracle_run(name, L, B, R)
    d_status, d_trace, d_msg = run_dtsim(dtsim, name, L, B, R, tmpdir)
    label = f"{name} layers={L} batches={B} ranks={R}"
    if outcome.status != d_status:
        o_desc = outcome.status + (f" ({outcome.message})" if outcome.message else "")
        d_desc = d_status + (f" ({d_msg})" if d_msg else "")
        return False, label, f"outcome differs: oracle {o_desc}; dtsim {d_desc}"
    if outcome.status == "error":
        return True, label, f"both fail: oracle '{outcome.message}'; dtsim '{d_msg}'"
    meta = d_trace.get("meta", {})
    want_meta = {"puzzle": name, "layers": L, "batches": B, "ranks": R}
    bad_meta = {k: meta.get(k) for k in want_meta if meta.get(k) != want_meta[k]}
    if bad_meta:
        return False, label, f"dtsim trace meta {bad_meta} (expected {want_meta})"
    hdr = {k: d_trace.get(k) for k in ("format", "version", "time_unit", "memory_unit")}
    if hdr != {"format": "dtsim-trace", "version": 1, "time_unit": "step", "memory_unit": "unit"}:
        return False, label, f"dtsim trace header {hdr}"
    d_ranks = d_trace.get("ranks", [])
    rank_ids = [r.get("rank") for r in d_ranks]
    if rank_ids != list(range(R)):
        return False, label, f"dtsim trace ranks {rank_ids[:20]} (expected 0..{R - 1} in order)"
    diff = compare_events([r["events"] for r in o_trace["ranks"]], [r.get("events", []) for r in d_ranks],
                          TIME_TOL, {"op": "op", "start": "start", "duration": "duration"}, "dtsim")
    if diff:
        return False, label, diff
    diff = compare_summary(o_trace["summary"], d_trace.get("summary", {}), TIME_TOL, "dtsim")
    if diff:
        return False, label, f"summary differs: {diff}"
    s = o_trace["summary"]
    what = "ok" if outcome.status == "ok" else "both fail the final check"
    n = sum(len(r["events"]) for r in o_trace["ranks"])
    return True, label, (f"{what}: {n} events identical; timesteps {s['timesteps']}, "
                         f"max memory {s['max_memory']} at rank {s['max_memory_rank']} time {s['max_memory_time']}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtsim", required=True, help="the dtsim executable")
    ap.add_argument("--golden", help="folder of golden NAME.json files (checks the oracle itself)")
    ap.add_argument("--grid", choices=("quick", "full"), default="quick")
    ap.add_argument("--stride", type=int, default=1,
                    help="compare every K-th size of the grid only (the sanitizer build, where each dtsim start is slow)")
    ap.add_argument("--only", help="comma-separated puzzle names")
    ap.add_argument("--jobs", type=int, default=max(2, os.cpu_count() or 2))
    ap.add_argument("--quiet", action="store_true", help="print only failures and the totals")
    a = ap.parse_args(argv)

    names = list(SOLUTIONS)
    if a.only:
        names = [n.strip() for n in a.only.split(",") if n.strip()]
        unknown = [n for n in names if n not in SOLUTIONS]
        if unknown:
            ap.error(f"unknown puzzle(s): {', '.join(unknown)}")
    if not (os.path.isfile(a.dtsim) and os.access(a.dtsim, os.X_OK)):
        ap.error(f"not an executable: {a.dtsim}")

    passed = failed = 0
    t0 = time.monotonic()

    def report(ok: bool, label: str, detail: str) -> None:
        nonlocal passed, failed
        if ok:
            passed += 1
        else:
            failed += 1
        if not ok or not a.quiet:
            print(f"{'PASS' if ok else 'FAIL'} {label}: {detail}", flush=True)

    if a.golden:
        for name in names:
            try:
                ok, detail = check_golden(name, a.golden)
            except (OSError, ValueError, KeyError) as e:
                ok, detail = False, f"cannot read golden file: {e}"
            report(ok, f"golden {name}", detail)

    if a.stride < 1:
        ap.error(f"--stride: expected a whole number >= 1, found {a.stride}")
    cases = [(n, s) for (n, s) in grid(a.grid) if n in names][::a.stride]
    with tempfile.TemporaryDirectory(prefix="dtsim_oracle_") as tmpdir:
        with cf.ThreadPoolExecutor(max_workers=a.jobs) as pool:
            futures = [pool.submit(compare_case, a.dtsim, n, s, tmpdir) for (n, s) in cases]
            for fut in futures:  # in grid order
                try:
                    ok, label, detail = fut.result()
                except Exception as e:  # a bug in this script or an unreadable trace
                    ok, label, detail = False, "internal", f"{type(e).__name__}: {e}"
                report(ok, label, detail)

    every = f", one size in {a.stride}" if a.stride > 1 else ""
    print(f"({a.grid} grid{every}: {len(cases)} sizes, {time.monotonic() - t0:.1f} s)", flush=True)
    print(f"{passed} passed, {failed} failed", flush=True)
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
