"""dynacron: a serverless, distributed task scheduler for AWS."""

__version__ = "0.1.0"
