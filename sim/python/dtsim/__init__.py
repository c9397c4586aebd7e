"""dtsim from Python (docs/python.md): the puzzle world on dtsim's C++ engine
(dtsim.puzzles), the hardware world's runs, comparisons and plans (dtsim.run,
dtsim.compare, dtsim.plan), and pipeline schedules in steps (dtsim.schedule), whose reports are
the dicts their ``--json`` prints."""

from . import puzzles  # noqa: F401
from .runs import DtsimError, Plan, Report, Reports, ScheduleReport, compare, plan, run, schedule  # noqa: F401

__all__ = ["puzzles", "run", "compare", "plan", "schedule", "Report", "Reports", "Plan", "ScheduleReport",
           "DtsimError"]
