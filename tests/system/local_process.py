"""`dynacron local` as a process of its own on one data directory: started, killed,
interrupted and started again, as a person (or a power cut) would."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from tests.support import Service, api_call, free_port


class LocalMode:
    """`dynacron local` on one data directory, started again after each stop."""

    def __init__(self, data_dir: Path, *options: str) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.options = options
        self.service: Service | None = None

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Service:
        args = ["local", "--port", str(self.port), "--shards", "2", "--data-dir"]
        self.service = Service(
            ["-m", "dynacron.cli.main", *args, str(self.data_dir), *self.options], "is running"
        )
        return self.service

    def kill(self) -> None:
        """SIGKILL: no cleanup, nothing flushed that was not committed."""
        assert self.service is not None
        os.kill(self.service.process.pid, signal.SIGKILL)
        self.service.process.wait(timeout=10)

    def interrupt(self) -> None:
        """Ctrl-C, as a person stops it."""
        assert self.service is not None
        self.service.process.send_signal(signal.SIGINT)
        assert self.service.process.wait(timeout=20) == 0

    def stop(self) -> None:
        if self.service is not None:
            self.service.stop()


def register(api: str, body: dict[str, Any]) -> dict[str, Any]:
    response = api_call(api, "POST", "/tasks", body)
    assert response.status_code == 201, response.text
    return response.json()


def executions(api: str, task_id: str) -> list[dict[str, Any]]:
    response = api_call(api, "GET", f"/tasks/{task_id}/executions", limit=100)
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items
