"""The console's files as HTTP answers, with the headers that keep a page safe.

The pages show what tenants wrote (names, tags, errors, handler answers), so the
policy allows scripts and styles from this origin only: a string that slipped into
markup could not run. The API the pages call is the same origin's.
"""

from __future__ import annotations

import mimetypes
from dataclasses import dataclass
from importlib.resources import files
from pathlib import PurePosixPath

PREFIX = "/console"
_STATIC = files("dynacron.console") / "static"

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'self'; "
        "frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


@dataclass(frozen=True)
class Asset:
    status: int
    headers: dict[str, str]
    body: bytes


def is_console_path(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")


def console_response(path: str) -> Asset | None:
    """The answer for a GET of ``path``, or None if it is not the console's.

    ``/console`` and ``/console/`` (and any path under it that names no file: the
    pages route in the browser) answer ``index.html``; a file under ``static/`` is
    answered as itself. Nothing outside ``static/`` is ever read.
    """
    if not is_console_path(path):
        return None
    relative = PurePosixPath(path[len(PREFIX) :].lstrip("/"))
    if any(part in ("..", "") or part.startswith(".") for part in relative.parts):
        return _not_found()
    candidate = _STATIC.joinpath(*relative.parts) if relative.parts else None
    if candidate is None or not candidate.is_file():
        if relative.suffix:  # a file that is not there: an asset, not a page
            return _not_found()
        candidate, relative = _STATIC / "index.html", PurePosixPath("index.html")
    content_type = mimetypes.guess_type(relative.name)[0] or "application/octet-stream"
    if content_type.startswith("text/") or content_type == "application/javascript":
        content_type += "; charset=utf-8"
    return Asset(200, {"Content-Type": content_type, **SECURITY_HEADERS}, candidate.read_bytes())


def _not_found() -> Asset:
    return Asset(404, {"Content-Type": "text/plain; charset=utf-8", **SECURITY_HEADERS}, b"")
