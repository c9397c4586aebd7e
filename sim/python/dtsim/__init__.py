"""dtsim from Python: the puzzle world (dtsim.puzzles) on dtsim's C++ engine.

See docs/python.md.
"""

from . import puzzles  # noqa: F401

__all__ = ["puzzles"]
