"""Lambda entry point: the logic lives in the dynacron layer."""

from dynacron.entry.functions import completions as handler

__all__ = ["handler"]
