"""Successful answers other than a plain 200: a route returns a response model for
200, and one of these for 201 and 202 (the problem answers are ``api/errors.py``'s)."""

from __future__ import annotations

from typing import TypeVar

from aws_lambda_powertools.event_handler import Response
from pydantic import BaseModel

View = TypeVar("View", bound=BaseModel)


def answered(view: View, headers: dict[str, str] | None = None) -> Response[View]:
    """200 with ``headers``: ``view`` as a route that returns it answers, and more."""
    return Response(200, body=view, content_type="application/json", headers=headers)


def created(view: View, headers: dict[str, str] | None = None) -> Response[View]:
    """201: the resource ``view`` shows was made (or, replayed, had been)."""
    return Response(201, body=view, content_type="application/json", headers=headers)


def accepted(view: View) -> Response[View]:
    """202: the work ``view`` shows was started, not finished."""
    return Response(status_code=202, body=view, content_type="application/json")
