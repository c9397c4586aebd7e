"""The hardware world from Python: ``dtsim.run``, ``dtsim.compare`` and ``dtsim.plan`` (docs/python.md).

Each runs the ``dtsim`` command this package was built or installed with
(``dtsim run CONFIG --json``, ``dtsim compare A B ... --json``, ``dtsim plan CONFIG --json``) and returns its
report as Python objects: the same dicts as ``--json`` prints. In Jupyter a
single run shows as its timeline, a comparison as its chart and a plan as its Pareto chart.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from typing import Any, Dict, Iterable, List, Optional, Sequence, Union

Config = Union[str, "os.PathLike[str]", Dict[str, Any]]

__all__ = ["run", "compare", "plan", "schedule", "Report", "Reports", "Plan", "ScheduleReport", "DtsimError",
           "executable"]


class DtsimError(RuntimeError):
    """The dtsim command failed: ``status`` is its exit status (2: a bad config or argument), the message its own."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


def executable() -> str:
    """The dtsim command: $DTSIM_EXECUTABLE, else the one this package was built or installed with, else PATH's."""
    path = os.environ.get("DTSIM_EXECUTABLE")
    if path:
        return path
    try:
        from ._paths import DTSIM_EXECUTABLE
        if os.path.exists(DTSIM_EXECUTABLE):
            return DTSIM_EXECUTABLE
    except ImportError:
        pass
    found = shutil.which("dtsim")
    if not found:
        raise DtsimError("the dtsim command was not found (set DTSIM_EXECUTABLE to its path)", 2)
    return found


def _flat(report: Dict[str, Any]) -> Dict[str, Any]:
    """A report's layout and figures as one flat dict (a table's row): name, strategy, gpus, the ``layout``
    object's fields (model, cluster, gpu, seq, dp, tp, pp, ...), the batch, step time, MFU, tokens/s, the time
    split (``compute_s``, ``exposed_comm_s``, ``idle_s``), peak memory, capacity, ``fits`` and ``tight``."""
    memory = report.get("memory") or {}
    split = report.get("time_split_s") or {}
    row: Dict[str, Any] = {"name": report.get("name"), "strategy": report.get("strategy"), "gpus": report.get("gpus")}
    row.update(report.get("layout") or {})
    for key in ("global_batch", "micro_batch", "microbatches", "step_time_s", "mfu", "hfu", "tokens_per_s",
                "tflops_per_gpu"):
        row[key] = report.get(key)
    row["compute_s"] = split.get("compute")
    row["exposed_comm_s"] = split.get("exposed_comm")
    row["idle_s"] = split.get("idle")
    row["peak_bytes"] = (memory.get("peak") or {}).get("bytes")
    row["capacity_bytes"] = memory.get("capacity_bytes")
    row["fits"] = memory.get("oom") is None
    row["tight"] = memory.get("tight")
    if "correct" in report:
        row["correct"] = report["correct"]
    return row


class Report(dict):
    """One run's report (``dtsim run --json``); ``svg`` is its timeline where drawn (shown inline by Jupyter)."""

    svg: Optional[str] = None

    def _repr_svg_(self) -> Optional[str]:
        return self.svg

    def row(self) -> Dict[str, Any]:
        """The layout and figures as one flat dict (see ``Reports.rows``)."""
        return _flat(self)


class Reports(list):
    """Several runs' reports (a sweep's rows, or ``dtsim compare --json``); ``svg`` is the comparison chart where drawn."""

    svg: Optional[str] = None

    def _repr_svg_(self) -> Optional[str]:
        return self.svg

    def rows(self) -> List[Dict[str, Any]]:
        """One flat dict per run, for a table (``pandas.DataFrame(reports.rows())``): a sweep's settings as
        given ("strategy.tp": "2", ...) first, then the layout and figures (name, strategy, gpus, dp, tp, pp, ...,
        step_time_s, mfu, tokens_per_s, compute_s, exposed_comm_s, idle_s, peak_bytes, fits); a sweep's run
        that failed gives its settings and ``error``."""
        out = []
        for item in self:
            if "set" in item:  # a sweep's row
                row = dict(item["set"])
                if "report" in item:
                    row.update(_flat(item["report"]))
                else:
                    row["error"] = item.get("error")
                out.append(row)
            else:
                out.append(_flat(item))
        return out


class Plan(dict):
    """A search's result (``dtsim plan --json``): counts, the top layouts with their reports; ``svg`` is the Pareto chart."""

    svg: Optional[str] = None

    def _repr_svg_(self) -> Optional[str]:
        return self.svg

    def rows(self) -> List[Dict[str, Any]]:
        """One flat dict per layout of ``top``, best first: its rank, the settings the search made
        ("strategy.tp": 2, ...), then its layout and figures as ``Reports.rows`` gives them."""
        return [{"rank": r["rank"], **r["set"], **_flat(r["report"])} for r in self.get("top", [])]


class ScheduleReport(dict):
    """A pipeline schedule's run (``dtsim schedule --json``): makespan, bubbles, memory, the published formulas'
    figures and ``against`` rows; ``svg`` is its timeline where drawn."""

    svg: Optional[str] = None

    def _repr_svg_(self) -> Optional[str]:
        return self.svg


def _config_path(config: Config, tmp: str, index: int) -> str:
    if isinstance(config, dict):
        # A dict is written out; its includes, where relative, are taken from the current directory.
        doc = dict(config)
        inc = doc.get("include")
        if isinstance(inc, str):
            doc["include"] = os.path.abspath(inc)
        elif isinstance(inc, list):
            doc["include"] = [os.path.abspath(i) if isinstance(i, str) else i for i in inc]
        path = os.path.join(tmp, f"config{index}.json")
        with open(path, "w") as f:
            json.dump(doc, f)
        return path
    return os.fspath(config)


def _settings(set: Union[str, Iterable[str], None]) -> List[str]:
    if set is None:
        return []
    items = [set] if isinstance(set, str) else list(set)
    args: List[str] = []
    for s in items:
        args += ["--set", s]
    return args


def _call(args: Sequence[str]) -> Any:
    proc = subprocess.run([executable(), *args], capture_output=True, text=True)
    # 0: ran; 1: a run failed its check or broke a rule; 3: out of memory. The report says which.
    if proc.returncode in (0, 1, 3) and proc.stdout.strip():
        try:
            return json.loads(proc.stdout)
        except json.JSONDecodeError:
            pass
    message = proc.stderr.strip() or proc.stdout.strip() or f"dtsim exited with status {proc.returncode}"
    raise DtsimError(message, proc.returncode)


def _call_drawn(args: List[str], tmp: str, draw: bool, wrap):
    """Runs the command, asking for its chart as SVG where `draw`; the output wrapped, its ``svg`` set."""
    svg_path = os.path.join(tmp, "chart.svg")
    if draw:
        args = [*args, "--svg", svg_path]
    out = wrap(_call(args))
    if os.path.exists(svg_path):
        with open(svg_path) as f:
            out.svg = f.read()
    return out


def run(config: Config, set: Union[str, Iterable[str], None] = None, timeline: bool = True,
        jobs: Optional[int] = None, evidence: bool = False) -> Union[Report, Reports]:
    """``dtsim run CONFIG --json`` with ``--set`` overrides ("path=value"; "path=v1,v2" sweeps).

    ``config`` is a path or a dict (a config document). One run gives a Report
    (with its timeline as ``svg`` when ``timeline``); a sweep gives Reports, one
    dict per combination: ``{"set": {...}, "report": {...}}`` (or ``"error"``).
    ``evidence`` (a single run) adds ``evidence``: the published runs most like this one and
    dtsim's error on them (``--evidence``).
    """
    with tempfile.TemporaryDirectory(prefix="dtsim-") as tmp:
        args = ["run", _config_path(config, tmp, 0), "--json", *_settings(set)]
        if jobs is not None:
            args += ["--jobs", str(jobs)]
        if evidence:
            args.append("--evidence")
        sweep = any("," in s for s in ([set] if isinstance(set, str) else list(set or [])))
        svg_path = os.path.join(tmp, "timeline.svg")
        if timeline and not sweep:
            args += ["--svg", svg_path]
        out = _call(args)
        if isinstance(out, list):
            return Reports(out)
        report = Report(out)
        if os.path.exists(svg_path):
            with open(svg_path) as f:
                report.svg = f.read()
        return report


def compare(configs: Sequence[Config], set: Union[str, Iterable[str], None] = None, chart: bool = True,
            jobs: Optional[int] = None) -> Reports:
    """``dtsim compare A B ... --json``: one report per config, in order, with the comparison chart as ``svg``."""
    with tempfile.TemporaryDirectory(prefix="dtsim-") as tmp:
        args = ["compare", *[_config_path(c, tmp, i) for i, c in enumerate(configs)], "--json", *_settings(set)]
        if jobs is not None:
            args += ["--jobs", str(jobs)]
        return _call_drawn(args, tmp, chart, Reports)


Space = Union[Dict[str, Union[Sequence[Any], Any]], Iterable[str], None]


def _space(space: Space) -> List[str]:
    if space is None:
        return []
    if isinstance(space, dict):
        items = []
        for knob, values in space.items():
            vals = values if isinstance(values, (list, tuple)) else [values]
            items.append(f"{knob}=" + ",".join(str(v).lower() if isinstance(v, bool) else str(v) for v in vals))
    else:
        items = [space] if isinstance(space, str) else list(space)
    args: List[str] = []
    for s in items:
        args += ["--space", s]
    return args


def plan(config: Config, space: Space = None, gpus: Optional[int] = None, set: Union[str, Iterable[str], None] = None,
         top: int = 5, time_budget: Optional[float] = None, chart: bool = True, jobs: Optional[int] = None,
         headroom: Optional[float] = None, evidence: bool = False) -> Plan:
    """``dtsim plan CONFIG --json``: the fastest layouts that fit (docs/planning.md).

    ``space`` restricts the knobs searched: a dict such as ``{"tp": [1, 2], "strategy": ["fsdp", "1f1b"]}`` or
    strings "knob=v1,v2"; ``set`` overrides fields that are not searched; ``headroom`` is the GiB per GPU each
    layout must leave free (``--headroom``). The result is the dict ``--json`` prints (``counts``, ``top``: each
    layout's ``set``, bounds and full report), with the Pareto chart as ``svg``. ``evidence`` adds to each
    top layout its published runs' errors and ``step_time_if_erred_s`` (``--evidence``).
    """
    with tempfile.TemporaryDirectory(prefix="dtsim-") as tmp:
        args = ["plan", _config_path(config, tmp, 0), "--json", "--top", str(top), *_space(space), *_settings(set)]
        if gpus is not None:
            args += ["--gpus", str(gpus)]
        if time_budget is not None:
            args += ["--time-budget", str(time_budget)]
        if headroom is not None:
            args += ["--headroom", str(headroom)]
        if jobs is not None:
            args += ["--jobs", str(jobs)]
        if evidence:
            args.append("--evidence")
        return _call_drawn(args, tmp, chart, Plan)


_SCHEDULE_COSTS = ("forward", "backward", "backward_input", "backward_weight", "forward_backward", "p2p", "activation")


def schedule(file: Union[str, "os.PathLike[str]", None] = None, generate: Optional[str] = None,
             stages: Optional[int] = None, microbatches: Optional[int] = None, chunks: Optional[int] = None,
             group: Optional[int] = None, against: Union[str, Iterable[str], None] = None,
             costs: Optional[Dict[str, float]] = None, timeline: bool = True) -> ScheduleReport:
    """``dtsim schedule FILE --json`` or ``dtsim schedule --generate NAME --stages P --microbatches M --json``
    (docs/schedules.md): the schedule run in steps, its bubbles and memory beside the published formulas.

    ``against`` names built-in schedules to run beside it with the same work per rank ("all", or a list such as
    ``["1f1b", "zbh1"]``); ``costs`` sets the costs in steps and the activation per stage (keys forward,
    backward, backward_input, backward_weight, forward_backward, p2p, activation). A schedule that deadlocks
    raises DtsimError (status 1) with the wait cycle.
    """
    args: List[str] = ["schedule"]
    if file is not None:
        args.append(os.fspath(file))
    if generate is not None:
        args += ["--generate", generate]
    for option, value in (("--stages", stages), ("--microbatches", microbatches), ("--chunks", chunks),
                          ("--group", group)):
        if value is not None:
            args += [option, str(value)]
    if against is not None:
        args += ["--against", against if isinstance(against, str) else ",".join(against)]
    for key, value in (costs or {}).items():
        if key not in _SCHEDULE_COSTS:
            raise DtsimError(f"schedule: unknown cost {key!r}; the costs are: {', '.join(_SCHEDULE_COSTS)}", 2)
        args += ["--" + key.replace("_", "-"), str(value)]
    args.append("--json")
    with tempfile.TemporaryDirectory(prefix="dtsim-") as tmp:
        return _call_drawn(args, tmp, timeline, ScheduleReport)
