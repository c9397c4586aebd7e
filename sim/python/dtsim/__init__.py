"""dtsim from Python (docs/python.md): the puzzle world on dtsim's C++ engine
(dtsim.puzzles), and the hardware world's runs, comparisons and plans (dtsim.run,
dtsim.compare, dtsim.plan), whose reports are the dicts their ``--json`` prints."""

from . import puzzles  # noqa: F401
from .runs import DtsimError, Plan, Report, Reports, compare, plan, run  # noqa: F401

__all__ = ["puzzles", "run", "compare", "plan", "Report", "Reports", "Plan", "DtsimError"]
