"""Lambda entry point: the logic lives in the dynacron layer."""

from dynacron.entry.composition import reaper as handler

__all__ = ["handler"]
