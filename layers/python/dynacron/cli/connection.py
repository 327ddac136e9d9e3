"""What every API command shares: where the API is, how to call it, how to show its answers."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated, Any
from urllib.parse import urlsplit

import typer
from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

from dynacron.client.api_client import LOCAL_URL, ApiError, ApiUnreachable, Client, SigV4Auth
from dynacron.domain.instants import format_instant

console = Console(stderr=True, highlight=False)
out = Console(highlight=False)

UrlOption = Annotated[
    str,
    typer.Option(
        "--url",
        envvar="DYNACRON_URL",
        help="The API; a non-loopback URL is signed with your AWS credentials (SigV4)",
    ),
]
ApiKeyOption = Annotated[
    str | None,
    typer.Option("--api-key", envvar="DYNACRON_API_KEY", help="An API key, instead of SigV4"),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON, for scripts")]
LimitOption = Annotated[int, typer.Option(min=1, max=100, help="Items per page")]
TokenOption = Annotated[str | None, typer.Option(help="next_token of the previous page")]
TagOption = Annotated[
    list[str] | None,
    typer.Option(
        "--tag",
        help="A tag, key=value or key:value; repeat it for several",
        show_default=False,
    ),
]
TagFilterOption = Annotated[
    list[str] | None,
    typer.Option(
        "--tag",
        help="Only tasks with this tag: key=value, key:value, or key (any value); "
        "repeat it for tasks with every one",
        show_default=False,
    ),
]


def split_tag(text: str) -> tuple[str, str | None]:
    """``key=value`` or ``key:value`` (at the first of either: no key holds one) as
    its key and value; a bare ``key`` has no value."""
    cut = min((i for i in (text.find("="), text.find(":")) if i >= 0), default=-1)
    return (text, None) if cut < 0 else (text[:cut], text[cut + 1 :])


def tags_of(texts: Sequence[str]) -> dict[str, str]:
    """``--tag`` options as a task's tags; a tag without a value is a usage error."""
    tags: dict[str, str] = {}
    for text in texts:
        key, value = split_tag(text)
        if value is None:
            console.print(f"[red]error:[/red] --tag {text!r}: give key=value (or key:value)")
            raise typer.Exit(2)
        tags[key] = value
    return tags


@dataclass(frozen=True)
class Target:
    url: str
    api_key: str | None
    as_json: bool

    def client(self) -> Client:
        loopback = urlsplit(self.url).hostname in ("127.0.0.1", "localhost", "::1")
        auth = None if loopback or self.api_key else SigV4Auth()
        return Client(self.url, api_key=self.api_key, auth=auth)


@contextmanager
def api(target: Target) -> Iterator[Client]:
    """A client whose errors become one readable line and exit code 1."""
    try:
        with target.client() as client:
            yield client
    except ApiUnreachable as error:
        console.print(f"[red]error:[/red] {error}", soft_wrap=True)
        raise typer.Exit(1) from None
    except ApiError as error:
        console.print(f"[red]error:[/red] {error}", soft_wrap=True)
        for field in error.problem.errors or []:
            console.print(f"  {field.get('field')}: {field.get('message')}", soft_wrap=True)
        hint = _HINTS.get(error.status)
        if hint:
            console.print(f"  {hint}", soft_wrap=True)
        raise typer.Exit(1) from None


_HINTS = {
    401: "the API does not know who you are: pass --api-key, or AWS credentials for SigV4",
    403: "API Gateway refused the signature: check your AWS credentials and region",
    404: "list your tasks with `dynacron tasks list`",
    429: "slow down: wait a moment and retry",
}


def show(target: Target, value: BaseModel, table: Callable[[Any], Table] | None = None) -> None:
    if target.as_json or table is None:
        out.print_json(value.model_dump_json())
    else:
        out.print(table(value))


def answer(
    ctx: typer.Context, call: Callable[[Client], BaseModel], table: Callable[[Any], Table]
) -> None:
    """Make one API call for the command's target, and show what it answered."""
    target = target_of(ctx)
    with api(target) as client:
        show(target, call(client), table)


def delete(ctx: typer.Context, call: Callable[[Client], None], name: str) -> None:
    """Make one API call that deletes ``name`` for the command's target, and say that
    it did (``{"deleted": name}`` with --json)."""
    target = target_of(ctx)
    with api(target) as client:
        call(client)
    if target.as_json:
        out.print_json(json.dumps({"deleted": name}))
    else:
        out.print(f"deleted {name}")


_AGO = re.compile(r"(\d+)\s*([smhdw])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def instant_option(value: str | None, now: datetime) -> str | None:
    """``1h``, ``30m``, ``2d`` ago, as an instant; anything else is sent as given
    (ISO 8601 with an offset, which the API checks)."""
    if value is None:
        return None
    ago = _AGO.fullmatch(value.strip())
    if ago is None:
        return value
    return format_instant(now - timedelta(**{_UNITS[ago[2]]: int(ago[1])}))


def target_of(ctx: typer.Context) -> Target:
    assert isinstance(ctx.obj, Target)
    return ctx.obj


def connect(ctx: typer.Context, url: str, api_key: str | None, as_json: bool) -> None:
    ctx.obj = Target(url, api_key, as_json)


def add_connection_options(group: typer.Typer) -> None:
    """Give ``group`` the options naming the API (--url, --api-key, --json)."""

    @group.callback()
    def _options(
        ctx: typer.Context,
        url: UrlOption = LOCAL_URL,
        api_key: ApiKeyOption = None,
        as_json: JsonOption = False,
    ) -> None:
        connect(ctx, url, api_key, as_json)
