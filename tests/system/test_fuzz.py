"""schemathesis against local mode: no 5xx, no response that breaks the OpenAPI document.

Local mode runs in this process, delivering to loopback only, and every socket
this process opens is audited: the run fails if anything, even a DNS lookup,
would leave the machine.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.generation.modes import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from dynacron.local.runtime import LocalOptions, LocalRuntime

pytestmark = [pytest.mark.system, pytest.mark.slow]

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
# Per operation, for each of valid and invalid inputs: bounds the run to about a minute.
EXAMPLES = 100
LOCAL_NAMES = {"localhost", "127.0.0.1", "::1", "ip6-localhost"}


class SocketAudit:
    """Wraps ``socket.connect`` and ``getaddrinfo``: off-machine attempts are refused and kept."""

    def __init__(self) -> None:
        self.refused: list[str] = []
        self.connections = 0

    def connect(self, original: Any) -> Any:
        audit = self

        def connect(sock: socket.socket, address: Any) -> Any:
            if sock.family in (socket.AF_INET, socket.AF_INET6):
                host = str(address[0]).split("%")[0]
                if not ipaddress.ip_address(host).is_loopback:
                    audit.refused.append(f"connect {address}")
                    raise ConnectionRefusedError("audit: only loopback in tests")
                audit.connections += 1
            return original(sock, address)

        return connect

    def getaddrinfo(self, original: Any) -> Any:
        audit = self

        def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
            name = host.decode() if isinstance(host, bytes) else str(host)
            if host is not None and name not in LOCAL_NAMES:
                try:
                    ipaddress.ip_address(name)
                except ValueError:
                    audit.refused.append(f"resolve {name}")
                    raise socket.gaierror("audit: no DNS in tests") from None
            return original(host, *args, **kwargs)

        return getaddrinfo


@pytest.fixture(scope="module")
def audit() -> Iterator[SocketAudit]:
    audit = SocketAudit()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket.socket, "connect", audit.connect(socket.socket.connect))
        patch.setattr(socket, "getaddrinfo", audit.getaddrinfo(socket.getaddrinfo))
        yield audit


@pytest.fixture(scope="module")
def api(audit: SocketAudit) -> Iterator[str]:
    runtime = LocalRuntime(LocalOptions(port=0, shards=2, workers=2)).start()
    yield runtime.api_url
    runtime.stop()


def fuzz(strategy: Any) -> int:
    """Run ``EXAMPLES`` cases of ``strategy``; returns how many ran."""
    ran = 0

    @given(case=strategy)
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def run(case: Any) -> None:
        nonlocal ran
        ran += 1
        case.call_and_validate(checks=CHECKS)

    run()
    return ran


def test_the_api_survives_fuzzing_without_5xx_or_schema_violations(
    api: str, audit: SocketAudit, capsys: pytest.CaptureFixture[str]
) -> None:
    schema = schemathesis.openapi.from_url(f"{api}/openapi.json")
    cases: dict[str, int] = {}
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 8  # every documented route is fuzzed
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            label = f"{operation.method.upper()} {operation.path} ({mode.value})"
            try:
                cases[label] = fuzz(operation.as_strategy(mode))
            except Unsatisfiable:
                # No parameters and no body (GET /tenant): there is nothing to make invalid.
                assert mode is GenerationMode.NEGATIVE, label
                cases[label] = 0
    total = sum(cases.values())
    with capsys.disabled():
        print(f"\nschemathesis: {total} cases over {len(cases)} operations, 0 failures")
        for label, count in sorted(cases.items()):
            print(f"  {count:5d}  {label}")
    assert total >= len(operations) * 10
    # Nothing left the machine, and the audit did see the traffic it lets through.
    assert audit.refused == []
    assert audit.connections > total
