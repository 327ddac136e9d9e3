"""dynacron: a serverless, distributed task scheduler for AWS."""

from dynacron.handlers import ExecutionContext, PermanentFailure, handler

__version__ = "0.1.0"
__all__ = ["ExecutionContext", "PermanentFailure", "__version__", "handler"]
