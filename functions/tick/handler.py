"""Lambda entry point: the logic lives in the dynacron layer."""

from dynacron.entry.functions import tick as handler

__all__ = ["handler"]
