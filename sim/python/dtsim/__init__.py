"""dtsim from Python (docs/python.md): the puzzle world on dtsim's C++ engine
(dtsim.puzzles), and the hardware world's runs and comparisons (dtsim.run,
dtsim.compare), whose reports are the dicts ``dtsim run --json`` prints."""

from . import puzzles  # noqa: F401
from .runs import DtsimError, Report, Reports, compare, run  # noqa: F401

__all__ = ["puzzles", "run", "compare", "Report", "Reports", "DtsimError"]
