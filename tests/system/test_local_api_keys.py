"""Local mode's API keys from a file and from DYNACRON_API_KEYS, not only argv, where
every user of the machine reads them in `ps` (issue 23). A key file others may
read is refused, as the data directory is."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.support import ROOT, Service, free_port

pytestmark = pytest.mark.system

TASK = {"rate": "1 hour", "handler_url": "http://127.0.0.1:9/hook"}


def local_mode(data_dir: Path, port: int, *options: str) -> list[str]:
    command = ["-m", "dynacron.cli.main", "local", "--only", "api", "--port", str(port)]
    return [*command, "--data-dir", str(data_dir), *options]


def test_keys_from_a_file_and_the_environment_open_the_api_and_stay_off_the_command_line(
    tmp_path: Path,
) -> None:
    key_file = tmp_path / "keys"
    key_file.write_text("# the operators\nk-from-file=ops\n\n  k-bare  \n")
    key_file.chmod(0o600)
    port = free_port()
    service = Service(
        local_mode(tmp_path / "data", port, "--api-key-file", str(key_file)),
        "is running",
        env={"DYNACRON_API_KEYS": "k-from-env=dev"},
    )
    try:
        api = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=api, trust_env=False, timeout=10) as client:
            # Without a key, or with an unknown one: refused
            assert client.get("/tasks").status_code == 401
            assert client.get("/tasks", headers={"x-api-key": "k-guess"}).status_code == 401
            # Each key is its tenant's
            for key in ("k-from-file", "k-bare", "k-from-env"):
                created = client.post("/tasks", json=TASK, headers={"x-api-key": key})
                assert created.status_code == 201, (key, created.text)
            tenants = {
                key: client.get("/tenant", headers={"x-api-key": key}).json()["tenant_id"]
                for key in ("k-from-file", "k-from-env")
            }
        assert tenants == {"k-from-file": "ops", "k-from-env": "dev"}
        assert "dev, key-" in service.ready_line + "".join(service.output)
        # And no key is on the command line, where `ps` shows it to every user
        command_line = Path(f"/proc/{service.process.pid}/cmdline").read_bytes()
        assert b"k-from" not in command_line
        assert b"k-bare" not in command_line
    finally:
        service.stop()


def run_local(*arguments: str) -> tuple[int, str]:
    """`dynacron local` that is expected to stop at once: its status and output."""
    result = subprocess.run(
        [sys.executable, *arguments], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    output = result.stdout + result.stderr
    assert "Traceback" not in output, output
    return result.returncode, output


def test_a_key_file_others_may_read_is_refused(tmp_path: Path) -> None:
    key_file = tmp_path / "keys"
    key_file.write_text("k-1=ops\n")
    key_file.chmod(0o644)
    code, output = run_local(
        *local_mode(tmp_path / "data", free_port(), "--api-key-file", str(key_file))
    )
    assert code == 2
    assert f"chmod 600 {key_file}" in output


def test_a_missing_key_file_says_so(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-keys"
    code, output = run_local(
        *local_mode(tmp_path / "data", free_port(), "--api-key-file", str(missing))
    )
    assert code == 2
    assert f"{missing} is not a file" in output
