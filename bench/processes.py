"""Drive a dynacron from outside, as a user would: start it as a process, wait for
it, call its API. The benchmarks and the tests (through ``tests.support``) share
these; nothing in ``bench`` imports ``tests``."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

# The repository's root: every process starts there, as `make run` does.
ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    """A loopback port free now (nothing holds it for the caller: bind it soon)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until(predicate: Any, timeout: float, interval: float = 0.05) -> bool:
    """Poll ``predicate`` until it is true or ``timeout`` seconds have passed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


def _as_from_a_terminal() -> None:
    """In the child before it runs: Ctrl-C handled as a shell's foreground job gets
    it. A child inherits its parent's ignored and blocked signals, and a test
    process that started others (multiprocessing, browsers, the CDK's node) may
    carry either: then SIGINT never reached ``dynacron local``, and a test of
    Ctrl-C waited out its timeout."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


class Service:
    """A subprocess that prints a line containing its URL once it is ready."""

    def __init__(self, args: list[str], ready_marker: str, env: dict[str, str] | None = None):
        self.process = subprocess.Popen(
            [sys.executable, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=ROOT,
            env={**os.environ, **(env or {})},
            preexec_fn=_as_from_a_terminal,
        )
        self.output: list[str] = []
        self.ready_line = self._await(ready_marker)
        threading.Thread(target=self._drain, daemon=True).start()

    def _await(self, marker: str, timeout: float = 60) -> str:
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line and self.process.poll() is not None:
                break
            self.output.append(line)
            if marker in line:
                return line
        self.stop()
        raise RuntimeError(f"service did not start: {''.join(self.output)}")

    def _drain(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(line)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()


# One client for every call: creating an httpx client (and its TLS context) per
# request costs far more than the request itself.
_http = httpx.Client(timeout=10, trust_env=False)


def api_call(
    base_url: str, method: str, path: str, body: Any = None, **params: Any
) -> httpx.Response:
    return _http.request(
        method,
        f"{base_url}{path}",
        json=body,
        params={k: v for k, v in params.items() if v is not None},
    )
