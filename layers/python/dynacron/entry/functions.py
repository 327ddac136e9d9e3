"""The Lambda entry points: ``functions/<name>/handler.py`` imports one of these.

Each builds the deployed ``Dynacron`` on its process's first invocation (settings
from the environment, AWS clients from the role) and hands the event to it.
"""

from __future__ import annotations

import functools
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext

from dynacron.entry.composition import Dynacron

logger = Logger(service="dynacron")


@functools.cache
def _deployed() -> Dynacron:
    # Built on the first invocation, then reused by warm invocations.
    return Dynacron.from_environment()


@logger.inject_lambda_context
def api(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return _deployed().api(event, context)


@logger.inject_lambda_context
def tick(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return _deployed().tick(event, context)


@logger.inject_lambda_context
def claim(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return _deployed().claim(event, context)


@logger.inject_lambda_context
def worker(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return _deployed().worker(event, context)


@logger.inject_lambda_context
def reaper(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return _deployed().reaper(event, context)


@logger.inject_lambda_context
def completions(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return _deployed().completions(event, context)


@logger.inject_lambda_context
def undelivered(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return _deployed().undelivered(event, context)
