"""Lambda entry point: the logic lives in the dynacron layer."""

from dynacron.app import undelivered as handler

__all__ = ["handler"]
