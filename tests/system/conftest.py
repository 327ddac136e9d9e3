"""Fixtures of the system tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.system.local_process import LocalMode


@pytest.fixture
def local(tmp_path: Path) -> Iterator[LocalMode]:
    mode = LocalMode(tmp_path / "data")
    yield mode
    mode.stop()
