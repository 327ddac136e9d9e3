"""Lambda entry point: the logic lives in the dynacron layer."""

from dynacron.entry.composition import undelivered as handler

__all__ = ["handler"]
