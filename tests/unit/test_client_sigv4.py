"""SigV4 signing of the client, against a loopback stand-in (no AWS, no network)."""

from __future__ import annotations

import httpx
import pytest

from dynacron.client.api_client import ApiError, Client, SigV4Auth


def test_requests_are_signed_for_api_gateway(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    seen: list[httpx.Request] = []

    def api(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(
            404,
            json={"title": "Not found", "status": 404, "detail": "task 'x' does not exist"},
        )

    client = Client(
        "http://127.0.0.1:1", auth=SigV4Auth(region="eu-west-1"), transport=httpx.MockTransport(api)
    )
    with pytest.raises(ApiError) as missing:
        client.get_task("x")
    assert missing.value.status == 404
    (request,) = seen
    authorization = request.headers["Authorization"]
    assert authorization.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert "/eu-west-1/execute-api/aws4_request" in authorization
    assert request.headers["X-Amz-Date"]
