"""`dynacron try-handler`'s pieces: the signature check and its reasons, the secrets
read again after a rotation, the lines printed, the loopback rule."""

from __future__ import annotations

import json

from dynacron.cli.try_handler import (
    Answers,
    Secrets,
    SignatureCheck,
    check_signature,
    describe_delivery,
    loopback_host,
)
from dynacron.client.api_client import ApiUnreachable
from dynacron.domain.executions.signing import signature_header

BODY = b'{"task_id":"t","execution_id":"t_1","scheduled_at":"2026-01-01T00:00:00.000Z"}'
NOW = 1_800_000_000


def test_a_signature_under_a_given_secret_is_ok_and_anything_else_says_why_not() -> None:
    secrets = Secrets(["whsec_a"], fetch=None)
    good = signature_header(["whsec_a"], NOW, BODY)
    assert check_signature(good, BODY, secrets, NOW) == SignatureCheck(True, "signature ok")
    cases = {
        None: "no Dynacron-Signature header",
        "v1=abc": "a malformed Dynacron-Signature header",
        signature_header(["whsec_a"], NOW - 301, BODY): "signed 301 s ago",
        signature_header(["whsec_b"], NOW, BODY): "no signing secret of the tenant verifies it",
        good.replace(",v1=", ",v1=0"): "no signing secret of the tenant verifies it",
    }
    for header, reason in cases.items():
        check = check_signature(header, BODY, secrets, NOW)
        assert not check.ok
        assert check.text.startswith("BAD SIGNATURE: ")
        assert reason in check.text
    assert not check_signature(good, BODY + b" ", secrets, NOW).ok


def test_secrets_read_from_the_api_are_read_again_after_a_rotation() -> None:
    served = [["whsec_old"]]
    secrets = Secrets([], fetch=lambda: served[-1])
    assert secrets.current() == ["whsec_old"]
    served.append(["whsec_new", "whsec_old"])  # POST /tenant/signing-secrets/rotate
    rotated = signature_header(["whsec_new"], NOW, BODY)
    check = check_signature(rotated, BODY, secrets, NOW)
    assert check == SignatureCheck(True, "signature ok (with a rotated secret)")
    assert secrets.current() == ["whsec_new", "whsec_old"]


def test_without_a_secret_nor_an_api_the_delivery_is_answered_but_said_unchecked() -> None:
    def away() -> list[str]:
        raise ApiUnreachable("http://127.0.0.1:8080", "connection refused")

    secrets = Secrets([], fetch=away)
    check = check_signature(signature_header(["x"], NOW, BODY), BODY, secrets, NOW)
    assert check.ok
    assert check.text.startswith("signature NOT CHECKED: no signing secret (cannot reach")


def test_a_delivery_is_printed_field_by_field_as_one_line_each() -> None:
    body = json.dumps(
        {
            "task_id": "t\x1b[2J",
            "execution_id": "t_1",
            "scheduled_at": "2026-01-01T00:00:00.000Z",
            "attempt": 3,
            "payload": {"text": "grüße\nzwei Zeilen"},
        }
    ).encode()
    lines = describe_delivery("/hook", {}, body, SignatureCheck(True, "signature ok"), 500, "x")
    assert lines[0].endswith("  POST /hook  signature ok  -> answered 500 (x)")
    assert lines[1:] == [
        "  task        t [2J",  # the escape character is no terminal command
        "  execution   t_1",
        "  scheduled   2026-01-01T00:00:00.000Z",
        "  attempt     3",
        '  payload     {"text": "grüße\\nzwei Zeilen"}',
    ]
    odd = describe_delivery("/", {}, b"\xff<html>", SignatureCheck(False, "BAD"), 401, "")
    assert odd[1] == "  body        (not a dynacron delivery) \ufffd<html>"


def test_an_accepted_delivery_prints_the_call_that_completes_it() -> None:
    body = json.dumps(
        {"execution_id": "t_1", "callbacks": {"complete": "http://127.0.0.1:8080/c/t_1/complete"}}
    ).encode()
    headers = {"dynacron-callback-token": "tok"}
    lines = describe_delivery("/", headers, body, SignatureCheck(True, "ok"), 202, "--status")
    assert lines[-1] == (
        "  complete    curl -X POST http://127.0.0.1:8080/c/t_1/complete "
        "-H 'Dynacron-Callback-Token: tok' -H 'content-type: application/json' "
        """-d '{"status": "SUCCEEDED"}'"""
    )


def test_answers_follow_the_options() -> None:
    assert Answers().status_for_next() == (200, "")
    assert Answers(status=503).status_for_next() == (503, "--status")
    assert Answers(fail_rate=1.0).status_for_next() == (500, "--fail-rate")
    half = Answers(fail_rate=0.5)
    drawn = [half.status_for_next()[0] for _ in range(200)]
    assert 50 < drawn.count(500) < 150


def test_only_loopback_addresses_are_bound() -> None:
    assert loopback_host("127.0.0.1") == "127.0.0.1"
    assert loopback_host("127.0.0.2") == "127.0.0.2"
    assert loopback_host("::1") == "::1"
    assert loopback_host("localhost") == "127.0.0.1"
    for other in ("0.0.0.0", "::", "10.0.0.1", "example.com", ""):
        assert loopback_host(other) is None
