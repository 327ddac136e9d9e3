"""Fixtures of the integration tier beyond tests/conftest.py's."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from dynacron.domain.clock import SettableClock
from dynacron.entry.composition import Dynacron
from dynacron.entry.settings import Settings

Build = Callable[..., Dynacron]


@pytest.fixture(params=["dynamodb", "sqlite"])
def build(request: pytest.FixtureRequest, clock: SettableClock) -> Build:
    """Builds a system on either store; keyword arguments are settings."""
    if request.param == "sqlite":
        embedded: Build = request.getfixturevalue("embedded")
        return embedded
    aws: tuple[Any, Any] = request.getfixturevalue("aws")
    settings: Settings = request.getfixturevalue("settings")

    def on_moto(**overrides: Any) -> Dynacron:
        dynamodb, sqs = aws
        changed = dataclasses.replace(settings, **overrides)
        return Dynacron(changed, dynamodb=dynamodb, sqs=sqs, clock=clock)

    return on_moto
