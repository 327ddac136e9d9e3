"""A failed handler answer in words a person can read.

A handler that is not one (a static file server, a proxy, a framework's default
error page) answers with an HTML page; quoted raw, its first 500 characters are
``<!DOCTYPE HTML><html lang="en"><head><meta charset="utf-8">`` and styles, in
the API, the CLI and the console alike. The summary names the status line and
the page's title (or first heading) instead: ``handler answered HTTP 501
Unsupported method ('POST'): an HTML page titled "Error response"``. Any other
body is quoted as before.

The summary is made where the answer is read (the delivery adapter), from the
whole body read (up to 64 KiB), not from the stored 500 characters, where the
title may already be cut off. It is text: every reader shows it as text.
"""

from __future__ import annotations

import contextlib
import re
import unicodedata
from html.parser import HTMLParser
from http import HTTPStatus

# The raw body is quoted up to this many characters when it is no HTML page.
QUOTED_BODY_LIMIT = 500
# A title or heading longer than this is cut: the error is one line in a table.
LABEL_LIMIT = 120
REASON_LIMIT = 100
_HTML_START = re.compile(r"\s*(?:<!--.*?-->\s*)*<(?:!doctype\s+html|html)\b", re.I | re.S)
_HEADINGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6"})


def failed_answer_error(status_code: int, reason: str, content_type: str, body: str) -> str:
    """The error of an attempt whose handler answered ``status_code`` with ``body``."""
    if not looks_like_html(content_type, body):
        return f"handler answered HTTP {status_code}: {body[:QUOTED_BODY_LIMIT]}"
    reason = readable(reason, REASON_LIMIT) or _standard_reason(status_code)
    status_line = f"{status_code} {reason}".strip()
    title, heading = page_labels(body)
    for kind, label in (("titled", title), ("headed", heading)):
        if label and not _says_nothing_more(label, status_line):
            return f'handler answered HTTP {status_line}: an HTML page {kind} "{label}"'
    return f"handler answered HTTP {status_line}: an HTML page"


def looks_like_html(content_type: str, body: str) -> bool:
    """An HTML page: said so by its Content-Type (with some markup in it), or
    starting as one whatever its Content-Type says."""
    if _HTML_START.match(body[:4096]):
        return True
    media_type = content_type.split(";", 1)[0].strip().lower()
    return media_type in ("text/html", "application/xhtml+xml") and "<" in body


def page_labels(body: str) -> tuple[str | None, str | None]:
    """The page's ``<title>`` and first heading, as plain one-line text (None if absent)."""
    parser = _Labels()
    # Hostile markup may trip the parser (an assertion in _markupbase): keep what it found.
    with contextlib.suppress(Exception):
        parser.feed(body)
        parser.close()
    return parser.label("title"), parser.label("heading")


def readable(text: str, limit: int = LABEL_LIMIT) -> str:
    """``text`` on one line: control and format characters (escapes, bidi overrides)
    dropped, white space collapsed, cut to ``limit`` characters."""
    kept = "".join(
        " " if unicodedata.category(c) in ("Cc", "Zl", "Zp") else c
        for c in text
        if unicodedata.category(c) not in ("Cf", "Cs", "Co")
    )
    line = " ".join(kept.split())
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


class _Labels(HTMLParser):
    """Collects the text of the first ``<title>`` and of the first ``<h1>``…``<h6>``."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self._texts: dict[str, list[str]] = {}
        self._open: str | None = None
        self._done: set[str] = set()
        self._in_code: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "style"):
            self._in_code = tag
        kind = "title" if tag == "title" else "heading" if tag in _HEADINGS else None
        if kind is not None and kind not in self._done and self._open is None:
            self._open = kind
            self._texts[kind] = []

    def handle_endtag(self, tag: str) -> None:
        if tag == self._in_code:
            self._in_code = None
        closes = tag == "title" if self._open == "title" else tag in _HEADINGS
        if self._open is not None and closes:
            self._done.add(self._open)
            self._open = None

    def handle_data(self, data: str) -> None:
        # Inside <script> or <style> the parser hands over code, not words.
        if self._open is not None and self._in_code is None:
            pieces = self._texts[self._open]
            if sum(map(len, pieces)) < 4 * LABEL_LIMIT:
                pieces.append(data)

    def label(self, kind: str) -> str | None:
        return readable("".join(self._texts.get(kind, []))) or None


def _standard_reason(status_code: int) -> str:
    try:
        return HTTPStatus(status_code).phrase
    except ValueError:
        return ""


def _says_nothing_more(label: str, status_line: str) -> bool:
    """A title that only repeats the status ("502 Bad Gateway", "Not Found", "Error")."""
    words = re.sub(r"\W+", "", label.casefold())
    return not words or words in re.sub(r"\W+", "", status_line.casefold())
