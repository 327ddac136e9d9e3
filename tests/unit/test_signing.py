from __future__ import annotations

from dynacron.domain.executions.signing import signature_header, verify

BODY = b'{"task_id":"t"}'


def test_a_signature_verifies_under_its_secret_only_while_fresh() -> None:
    header = signature_header(["s1"], 1_000, BODY)
    assert header.startswith("t=1000,v1=")
    assert verify(header, "s1", BODY, now=1_000)
    assert verify(header, "s1", BODY, now=1_299)
    assert not verify(header, "s1", BODY, now=1_301)  # a replay, too late
    assert not verify(header, "s2", BODY, now=1_000)
    assert not verify(header, "s1", BODY + b" ", now=1_000)
    assert not verify(header.replace("t=1000", "t=1001"), "s1", BODY, now=1_000)


def test_during_a_rotation_both_secrets_verify() -> None:
    header = signature_header(["new", "old"], 50, BODY)
    assert verify(header, "new", BODY, now=50)
    assert verify(header, "old", BODY, now=50)
    assert header.count("v1=") == 2


def test_malformed_headers_never_verify() -> None:
    for header in ("", "v1=abc", "t=x,v1=abc", "t=1,t=1,v1=abc"):
        assert not verify(header, "s", BODY, now=1)
