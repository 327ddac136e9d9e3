"""Lambda entry point: the logic lives in the dynacron layer."""

from dynacron.app import claim as handler

__all__ = ["handler"]
