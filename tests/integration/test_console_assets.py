"""The console's files as local mode serves them: only its own, with a strict policy."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dynacron.console.proxy import API_RESOURCES
from dynacron.console.serve import console_response
from dynacron.definitions.callbacks import CALLBACKS_RESOURCE
from dynacron.entry.composition import Dynacron
from tests.integration.api_client import call


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


STATIC = Path(__file__).resolve().parents[2] / "layers/python/dynacron/console/static"
# What would turn tenant text into markup or code: the console builds every element
# with DOM calls and text nodes (decision 0030), and the policy forbids the rest.
UNSAFE = re.compile(
    r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|"
    r"setAttribute\(\s*['\"]on|\bon[a-z]+\s*=\s*['\"]|style\s*=\s*['\"]"
)


def console_files() -> list[Path]:
    return sorted(p for p in STATIC.rglob("*") if p.is_file())


@pytest.mark.parametrize("path", console_files(), ids=lambda p: str(p.relative_to(STATIC)))
def test_no_console_file_turns_text_into_markup_or_code(path: Path) -> None:
    found = UNSAFE.findall(path.read_text())
    assert not found, f"{path.name}: {found}"


@pytest.mark.parametrize(
    ("name", "content_type"),
    [
        ("app.js", "javascript; charset=utf-8"),
        ("pages/tasks.js", "javascript; charset=utf-8"),
        ("styles.css", "text/css; charset=utf-8"),
        ("favicon.svg", "image/svg+xml"),
    ],
)
def test_each_asset_is_served_as_what_it_is(name: str, content_type: str) -> None:
    asset = console_response(f"/console/{name}")
    assert asset is not None
    assert asset.status == 200
    assert asset.headers["Content-Type"].endswith(content_type)
    assert asset.body == (STATIC / name).read_bytes()


def test_every_module_the_pages_import_is_served() -> None:
    """An import of a missing file would fail only in a browser: check them here."""
    for path in console_files():
        if path.suffix != ".js":
            continue
        for target in re.findall(r'^import .* from "(\.{1,2}/[^"]+)";$', path.read_text(), re.M):
            imported = (path.parent / target).resolve()
            relative = imported.relative_to(STATIC.resolve()).as_posix()
            asset = console_response(f"/console/{relative}")
            assert asset is not None, (path.name, target)
            assert asset.status == 200, (path.name, target)
    index = (STATIC / "index.html").read_text()
    for target in re.findall(r'(?:src|href)="(/console/[^"]+)"', index):
        asset = console_response(target)
        assert asset is not None, target
        assert asset.status == 200, target


def test_the_signing_proxy_forwards_every_resource_the_api_documents(system: Dynacron) -> None:
    """A route added to the API without its resource in the proxy's list would work
    in local mode and answer 404 behind `dynacron console --url`."""
    _, document = call(system, "GET", "/openapi.json")
    resources = {path.split("/")[1] for path in document["paths"]}
    assert resources - {CALLBACKS_RESOURCE} <= API_RESOURCES
