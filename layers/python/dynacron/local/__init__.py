"""The one-machine runtime: embedded AWS (moto), the API over HTTP, tick and worker loops.

Only this package knows moto; nothing here ships in the Lambda layer.
"""
