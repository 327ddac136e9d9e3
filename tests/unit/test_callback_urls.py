"""The callback routes' paths: one definition for deliveries, routes and the gateway."""

from __future__ import annotations

import pytest

from dynacron.definitions.callbacks import callback_gateway_paths, callback_urls, is_callback_path

EXECUTION_ID = "5f0c9d2e_20261130T120000.000Z"


def test_a_delivery_names_absolute_urls_under_callbacks() -> None:
    assert callback_urls("https://abc.execute-api.eu-west-1.amazonaws.com/prod/", EXECUTION_ID) == {
        "heartbeat": f"https://abc.execute-api.eu-west-1.amazonaws.com/prod/callbacks/{EXECUTION_ID}/heartbeat",
        "complete": f"https://abc.execute-api.eu-west-1.amazonaws.com/prod/callbacks/{EXECUTION_ID}/complete",
    }
    # An id is one path segment, whatever it holds
    assert callback_urls("http://127.0.0.1:8080", "a/b c")["complete"] == (
        "http://127.0.0.1:8080/callbacks/a%2Fb%20c/complete"
    )


def test_every_url_a_delivery_names_is_a_callback_path_and_a_gateway_method() -> None:
    paths = [
        url.removeprefix("http://127.0.0.1:8080")
        for url in callback_urls("http://127.0.0.1:8080", EXECUTION_ID).values()
    ]
    assert all(is_callback_path(path) for path in paths)
    templates = sorted(p.replace("{execution_id}", EXECUTION_ID) for p in callback_gateway_paths())
    assert templates == sorted(paths)


@pytest.mark.parametrize(
    "path",
    [
        "/callbacks/x/heartbeat/",
        "/callbacks/x/y/heartbeat",
        "/callbacks//heartbeat",
        "/callbacks/x/renew",
        "/callbacks/x",
        "/executions/x/heartbeat",
        "/tasks/callbacks/x/complete",
        "/callbacks/x/complete/../../tasks",
    ],
)
def test_nothing_else_skips_the_caller_s_identity(path: str) -> None:
    assert not is_callback_path(path)
