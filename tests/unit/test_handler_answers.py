"""A failed handler answer in words: an HTML page summarised by its status line and
title (or first heading), any other body quoted as before."""

from __future__ import annotations

import time
from http.server import BaseHTTPRequestHandler

import pytest

from dynacron.adapters.delivery.answers import (
    LABEL_LIMIT,
    QUOTED_BODY_LIMIT,
    failed_answer_error,
    looks_like_html,
    page_labels,
)

# What `python3 -m http.server` answers a POST: its own error page.
HTTP_SERVER_PAGE = BaseHTTPRequestHandler.error_message_format % {
    "code": 501,
    "message": "Unsupported method ('POST')",
    "explain": "Server does not support this operation",
}


def test_the_standard_librarys_error_page_is_its_status_line_and_title() -> None:
    error = failed_answer_error(
        501, "Unsupported method ('POST')", "text/html;charset=utf-8", HTTP_SERVER_PAGE
    )
    assert error == (
        "handler answered HTTP 501 Unsupported method ('POST'): "
        'an HTML page titled "Error response"'
    )


def test_a_title_that_repeats_the_status_is_left_out_and_the_heading_is_tried() -> None:
    nginx = (
        "<html><head><title>502 Bad Gateway</title></head><body>"
        "<center><h1>502 Bad Gateway</h1></center><hr><center>nginx</center></body></html>"
    )
    assert failed_answer_error(502, "Bad Gateway", "text/html", nginx) == (
        "handler answered HTTP 502 Bad Gateway: an HTML page"
    )
    framework = "<html><title>Error</title><h1>Database is down</h1><p>details</p></html>"
    assert failed_answer_error(500, "Internal Server Error", "text/html", framework) == (
        'handler answered HTTP 500 Internal Server Error: an HTML page headed "Database is down"'
    )


def test_a_page_without_a_title_is_named_by_its_first_heading() -> None:
    page = "<!DOCTYPE html><body><p>intro</p><h2>Maintenance &amp; upgrades</h2><h1>later</h1>"
    assert page_labels(page) == (None, "Maintenance & upgrades")
    assert failed_answer_error(503, "Service Unavailable", "", page) == (
        "handler answered HTTP 503 Service Unavailable: "
        'an HTML page headed "Maintenance & upgrades"'
    )


def test_a_page_with_neither_title_nor_heading_is_named_as_a_page() -> None:
    page = "<html><body><p>Something went wrong</p></body></html>"
    assert failed_answer_error(500, "", "text/html", page) == (
        "handler answered HTTP 500 Internal Server Error: an HTML page"
    )


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("application/json", '{"error": "boom"}'),
        ("text/plain", "boom <b>not a page</b>"),
        ("text/html", "no markup at all"),
        ("", ""),
    ],
)
def test_any_other_body_is_quoted_as_before(content_type: str, body: str) -> None:
    assert not looks_like_html(content_type, body)
    assert failed_answer_error(500, "Internal Server Error", content_type, body) == (
        f"handler answered HTTP 500: {body}"
    )


def test_a_page_is_recognised_by_its_start_whatever_its_content_type() -> None:
    assert looks_like_html("text/plain", "\n  <!-- generated --><!doctype HTML><p>x")
    assert looks_like_html("", "<html lang=en>")
    assert looks_like_html("application/xhtml+xml; charset=utf-8", "<p>x</p>")


def test_a_long_body_is_quoted_up_to_its_limit_and_a_huge_page_is_summarised_quickly() -> None:
    quoted = failed_answer_error(500, "x", "text/plain", "y" * 100_000)
    assert quoted == f"handler answered HTTP 500: {'y' * QUOTED_BODY_LIMIT}"
    # The title after 60 KiB of styles: a quote of the first 500 characters would miss it.
    huge = "<html><head><style>" + "a{b:c}" * 10_000 + "</style><title>Late title</title>"
    started = time.perf_counter()
    assert failed_answer_error(500, "x", "text/html", huge).endswith('titled "Late title"')
    endless = "<html><title>" + "word " * 50_000
    summary = failed_answer_error(500, "x", "text/html", endless)
    assert time.perf_counter() - started < 2
    title = summary.split('titled "', 1)[1].rstrip('"')
    assert len(title) <= LABEL_LIMIT
    assert title.endswith("…")


def test_hostile_markup_becomes_one_line_of_plain_text() -> None:
    page = (
        "<html><head><script>document.title = '<title>fake</title>'</script>"
        "<style>title{}</style>"
        "<title>\x1b[31mred\x1b[0m \u202eevil\u202c\r\nnext line <b>bold</b> &lt;img&gt;</title>"
    )
    error = failed_answer_error(500, "Internal\x00Server\x7fError\u2028", "text/html", page)
    assert error == (
        "handler answered HTTP 500 Internal Server Error: "
        'an HTML page titled "[31mred [0m evil next line bold <img>"'
    )
    assert all(c.isprintable() for c in error)


def test_broken_markup_never_raises() -> None:
    broken = ["<html><![if x<title>t", "<html><title>unclosed", "<html></title></h1>", "<html><"]
    for page in broken:
        error = failed_answer_error(500, "Internal Server Error", "text/html", page)
        assert error.startswith("handler answered HTTP 500 Internal Server Error: an HTML page")
