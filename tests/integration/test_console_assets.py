"""The console's files as local mode serves them: only its own, with a strict policy."""

from __future__ import annotations

import pytest

from dynacron.console.serve import console_response


@pytest.mark.parametrize("path", ["/console", "/console/", "/console/tasks/abc"])
def test_the_pages_answer_the_index_with_a_policy_that_runs_no_foreign_script(path: str) -> None:
    asset = console_response(path)
    assert asset is not None
    assert asset.status == 200
    assert asset.headers["Content-Type"] == "text/html; charset=utf-8"
    assert b"<!doctype html>" in asset.body.lower()
    policy = asset.headers["Content-Security-Policy"]
    assert "script-src 'self'" in policy
    assert "frame-ancestors 'none'" in policy
    assert asset.headers["X-Content-Type-Options"] == "nosniff"


@pytest.mark.parametrize(
    "path",
    [
        "/console/../serve.py",
        "/console/..%2fserve.py",
        "/console/static/../../serve.py",
        "/console/.hidden",
        "/console/missing.js",
    ],
)
def test_nothing_outside_the_static_files_is_served(path: str) -> None:
    asset = console_response(path)
    assert asset is not None
    assert asset.status == 404
    assert asset.body == b""


def test_an_absolute_path_under_the_console_is_a_page_not_a_file() -> None:
    asset = console_response("/console//etc/passwd")
    index = console_response("/console/")
    assert asset is not None
    assert index is not None
    assert asset.body == index.body


@pytest.mark.parametrize("path", ["/tasks", "/consoles", "/", "/docs"])
def test_other_paths_are_the_api_s(path: str) -> None:
    assert console_response(path) is None
