"""``dynacron.Client``: the HTTP API from Python, with the API's own typed models.

Talks to local mode (``http://127.0.0.1:8080``) by default; give a deployed API's
URL and ``SigV4Auth()`` to sign requests with the caller's AWS credentials, or
an ``api_key`` where the deployment maps keys to tenants.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Generator, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, TypeVar
from urllib.parse import quote, urlsplit

import httpx
from pydantic import BaseModel

from dynacron.api.identity import API_KEY_HEADER
from dynacron.api.requests import (
    BackfillRequest,
    RevertRequest,
    SchedulePreviewRequest,
    TaskCreate,
    TaskPatch,
)
from dynacron.api.responses import (
    BackfillView,
    BatchView,
    CalendarList,
    CalendarView,
    ChangePage,
    ExecutionPage,
    ExecutionView,
    ForecastView,
    OccurrencesView,
    Problem,
    SchedulePreviewView,
    TaskPage,
    TaskView,
    TenantView,
)
from dynacron.domain.coordination.create_keys import BATCH_KEY_FIELD
from dynacron.domain.coordination.create_keys import HEADER as CREATE_KEY_HEADER

LOCAL_URL = "http://127.0.0.1:8080"
# A create that got no answer is sent again, with its key, this many times in all.
CREATE_ATTEMPTS = 3
CREATE_BACKOFF_SECONDS = 0.5
# A batch answered with one of these as a whole is sent again, as one with no answer.
RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504})
M = TypeVar("M", bound=BaseModel)


class ApiError(Exception):
    """The API answered with an error: ``problem`` is its RFC 9457 body."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(f"{problem.status} {problem.title}: {problem.detail}")
        self.problem = problem

    @property
    def status(self) -> int:
        return self.problem.status


class ApiUnreachable(Exception):
    """No answer at all: nothing listens at the URL, or the network failed."""

    def __init__(self, url: str, reason: str) -> None:
        hint = (
            "is dynacron local running? start it with `make run` (or `dynacron local`)"
            if urlsplit(url).hostname in ("127.0.0.1", "localhost", "::1")
            else "check the URL and your network"
        )
        super().__init__(f"cannot reach {url} ({reason}); {hint}")


class SigV4Auth(httpx.Auth):
    """Signs each request for API Gateway's IAM auth with the default AWS credentials."""

    requires_request_body = True

    def __init__(self, region: str | None = None) -> None:
        import boto3

        session = boto3.Session()
        credentials = session.get_credentials()
        if credentials is None:
            raise ApiUnreachable("AWS", "no AWS credentials found; configure them first")
        self._credentials = credentials
        self._region = region or session.region_name or "us-east-1"

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        from botocore.auth import SigV4Auth as BotocoreSigV4
        from botocore.awsrequest import AWSRequest

        signed = AWSRequest(
            method=request.method,
            url=str(request.url),
            data=request.content,
            headers={"Content-Type": request.headers.get("Content-Type", "application/json")},
        )
        BotocoreSigV4(
            self._credentials.get_frozen_credentials(), "execute-api", self._region
        ).add_auth(signed)
        request.headers.update(dict(signed.headers.items()))
        yield request


class Client:
    """One method per API operation; errors raise ``ApiError`` or ``ApiUnreachable``."""

    def __init__(
        self,
        base_url: str = LOCAL_URL,
        *,
        api_key: str | None = None,
        auth: httpx.Auth | None = None,
        timeout: float = 10.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.base_url,
            auth=auth,
            timeout=timeout,
            headers={API_KEY_HEADER: api_key} if api_key else {},
            transport=transport,
            trust_env=False,
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # tasks
    def create_task(
        self, task: TaskCreate | None = None, *, idempotency_key: str | None = None, **fields: Any
    ) -> TaskView:
        """Register a task. Safe to retry: the request carries an ``Idempotency-Key``
        (``idempotency_key``, else a fresh one), and a request that got no answer
        (the connection failed or timed out) is sent again with the same key, up to
        ``CREATE_ATTEMPTS`` times: the API returns the task the first one made."""
        body = (task or TaskCreate(**fields)).model_dump(exclude_none=True, exclude_unset=True)
        headers = {CREATE_KEY_HEADER: idempotency_key or uuid.uuid4().hex}
        attempt = 1
        while True:
            try:
                return self._call(TaskView, "POST", "/tasks", json=body, headers=headers)
            except ApiUnreachable:
                if attempt >= CREATE_ATTEMPTS:
                    raise
            time.sleep(CREATE_BACKOFF_SECONDS * attempt)
            attempt += 1

    def create_tasks(
        self,
        bodies: Sequence[TaskCreate | Mapping[str, Any]],
        *,
        keys: Sequence[str] | None = None,
        minimal: bool = False,
    ) -> BatchView:
        """Register up to ``MAX_BATCH`` tasks in one request (``POST /tasks/batch``): each
        answered by its index (``created``, ``replayed`` or ``refused`` with its
        problem), never raised; ``minimal``: each task shown by its id and status only
        (``Prefer: return=minimal``). Safe to retry, as ``create_task``: each item
        carries an idempotency key (``keys[i]``, else its own ``idempotency_key`` field,
        else a fresh one), and a batch that got no answer, or a 429 or 5xx, is sent
        again with the same keys (backing off: 0.5 s, then 1 s)."""
        if keys is not None and len(keys) != len(bodies):
            raise ValueError(f"{len(keys)} keys for {len(bodies)} tasks")
        items = []
        for index, body in enumerate(bodies):
            item = (
                body.model_dump(exclude_none=True, exclude_unset=True)
                if isinstance(body, TaskCreate)
                else dict(body)
            )
            if keys is not None:
                item[BATCH_KEY_FIELD] = keys[index]
            item.setdefault(BATCH_KEY_FIELD, uuid.uuid4().hex)
            items.append(item)
        headers = {"Prefer": "return=minimal"} if minimal else None
        attempt = 1
        while True:
            try:
                return self._call(
                    BatchView, "POST", "/tasks/batch", json={"tasks": items}, headers=headers
                )
            except ApiUnreachable:
                if attempt >= CREATE_ATTEMPTS:
                    raise
            except ApiError as error:
                # Throttled, or failed part way: what it stored is under its keys.
                if error.status not in RETRIED_STATUSES or attempt >= CREATE_ATTEMPTS:
                    raise
            time.sleep(CREATE_BACKOFF_SECONDS * 2 ** (attempt - 1))
            attempt += 1

    def list_tasks(
        self,
        limit: int = 50,
        next_token: str | None = None,
        *,
        tag: str | Sequence[str] | None = None,
        tags: Mapping[str, str | None] | None = None,
        name_prefix: str | None = None,
        sort: Literal["created_at", "name", "next_run_at"] | None = None,
        order: Literal["asc", "desc"] | None = None,
        status: str | None = None,
        kind: str | None = None,
    ) -> TaskPage:
        """One page of the caller's tasks, oldest first. ``tag`` (``"key:value"`` or
        ``"key"``, one or several) and ``tags`` (``{key: value}``, ``None`` for any
        value) keep the tasks that match every filter given; a filtered page may
        hold fewer than ``limit`` tasks, so follow ``next_token`` (or ``iter_tasks``).
        ``name_prefix`` keeps the tasks whose name starts with it (case-insensitive),
        in name order; ``sort``, ``order``, ``status`` and ``kind`` are ``GET /tasks``'s
        (the API refuses, 422, a combination its store does not offer)."""
        params = [*_page(limit, next_token).items(), *(("tag", f) for f in _filters(tag, tags))]
        listing = {
            "name_prefix": name_prefix,
            "sort": sort,
            "order": order,
            "status": status,
            "kind": kind,
        }
        params += [(name, value) for name, value in listing.items() if value is not None]
        return self._call(TaskPage, "GET", "/tasks", params=params)

    def iter_tasks(
        self,
        *,
        tag: str | Sequence[str] | None = None,
        tags: Mapping[str, str | None] | None = None,
        name_prefix: str | None = None,
        sort: Literal["created_at", "name", "next_run_at"] | None = None,
    ) -> Iterator[TaskView]:
        """Every task of the caller's tenant (matching the filters, as ``list_tasks``),
        page after page."""
        token: str | None = None
        while True:
            page = self.list_tasks(
                100, token, tag=tag, tags=tags, name_prefix=name_prefix, sort=sort
            )
            yield from page.items
            if not (token := page.next_token):
                return

    def get_task(self, task_id: str) -> TaskView:
        return self._call(TaskView, "GET", f"/tasks/{task_id}")

    def patch_task(self, task_id: str, patch: TaskPatch | None = None, **fields: Any) -> TaskView:
        """Change the fields given; pass ``version`` to refuse a stale change (409)."""
        body = (patch or TaskPatch(**fields)).model_dump(exclude_unset=True)
        return self._call(TaskView, "PATCH", f"/tasks/{task_id}", json=body)

    def delete_task(self, task_id: str) -> None:
        self._send("DELETE", f"/tasks/{task_id}")

    def pause_task(self, task_id: str, note: str | None = None) -> TaskView:
        body = {"note": note} if note is not None else {}
        return self._call(TaskView, "POST", f"/tasks/{task_id}/pause", json=body)

    def resume_task(self, task_id: str) -> TaskView:
        return self._call(TaskView, "POST", f"/tasks/{task_id}/resume", json={})

    def trigger_task(self, task_id: str) -> ExecutionView:
        return self._call(ExecutionView, "POST", f"/tasks/{task_id}/trigger", json={})

    def backfill_task(self, task_id: str, start: str, end: str) -> BackfillView:
        """Run each occurrence in ``[start, end]`` that was never run or asked for."""
        body = BackfillRequest(from_=start, to=end).model_dump(by_alias=True)
        return self._call(BackfillView, "POST", f"/tasks/{task_id}/backfill", json=body)

    def list_changes(
        self, task_id: str, limit: int = 50, next_token: str | None = None
    ) -> ChangePage:
        """Who changed the task, when, and each field before and after, newest first;
        kept after the task is deleted, until the history retention."""
        params = _page(limit, next_token)
        return self._call(ChangePage, "GET", f"/tasks/{task_id}/changes", params=params)

    def revert_change(self, task_id: str, change_id: str, version: int | None = None) -> TaskView:
        """Restore a change's fields before, as a PATCH would, if the task is still at
        ``version`` (409 if not; None: its version as read now)."""
        if version is None:
            version = self.get_task(task_id).version
        body = RevertRequest(change_id=change_id, version=version).model_dump()
        return self._call(TaskView, "POST", f"/tasks/{task_id}/revert", json=body)

    def forecast(self, hours: int = 24) -> ForecastView:
        """How many executions start in each minute of the next ``hours``."""
        return self._call(ForecastView, "GET", "/forecast", params={"hours": hours})

    def next_occurrences(self, task_id: str, count: int = 10) -> OccurrencesView:
        return self._call(OccurrencesView, "GET", f"/tasks/{task_id}/next", params={"count": count})

    def preview_schedule(self, count: int = 10, **schedule: Any) -> SchedulePreviewView:
        """The occurrences a task registered now with ``schedule`` (the schedule fields
        of ``create_task``: ``cron="0 9 * * *", timezone="Europe/Berlin"``) would
        have, checked as registering checks them; nothing is stored."""
        body = SchedulePreviewRequest(count=count, **schedule).model_dump(exclude_none=True)
        return self._call(SchedulePreviewView, "POST", "/schedules/preview", json=body)

    # executions and dead letters
    def get_execution(self, execution_id: str) -> ExecutionView:
        return self._call(ExecutionView, "GET", f"/executions/{execution_id}")

    def list_executions(
        self,
        task_id: str | None = None,
        limit: int = 50,
        next_token: str | None = None,
        *,
        status: str | None = None,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
    ) -> ExecutionPage:
        """A task's executions, newest first; without ``task_id``, the executions an
        operator looks for across the tenant's tasks (``GET /executions``: FAILED,
        QUEUED for a retry, RUNNING a retry or a long job), filtered by ``status`` and
        by when they were listed (``since``/``until``, inclusive; an aware datetime
        or ISO 8601 text with an offset). A page may hold fewer than ``limit`` and
        still have a ``next_token``."""
        params = _page(limit, next_token)
        if task_id is not None:
            if status is not None or since is not None or until is not None:
                raise ValueError(
                    "a task's history takes no status, since or until: "
                    "leave task_id out to list across tasks"
                )
            return self._call(ExecutionPage, "GET", f"/tasks/{task_id}/executions", params=params)
        filters = {"status": status, "since": _instant(since), "until": _instant(until)}
        params |= {name: value for name, value in filters.items() if value is not None}
        return self._call(ExecutionPage, "GET", "/executions", params=params)

    def iter_executions(
        self,
        *,
        status: str | None = None,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
    ) -> Iterator[ExecutionView]:
        """Every execution ``list_executions`` lists across tasks, page after page."""
        token: str | None = None
        while True:
            page = self.list_executions(None, 100, token, status=status, since=since, until=until)
            yield from page.items
            if not (token := page.next_token):
                return

    def list_dead_letters(self, limit: int = 50, next_token: str | None = None) -> ExecutionPage:
        return self._call(ExecutionPage, "GET", "/dead-letters", params=_page(limit, next_token))

    def redrive(self, execution_id: str) -> ExecutionView:
        return self._call(ExecutionView, "POST", f"/dead-letters/{execution_id}/redrive", json={})

    # the caller's tenant
    def skip_occurrences(self, task_id: str, body: dict[str, Any]) -> TaskView:
        """``POST /tasks/{task_id}/skip`` with ``body`` (occurrences, until or at; note)."""
        return self._call(TaskView, "POST", f"/tasks/{task_id}/skip", json=body)

    def remove_skips(self, task_id: str, at: str | None = None) -> TaskView:
        params = {"at": at} if at is not None else {}
        return self._call(TaskView, "DELETE", f"/tasks/{task_id}/skips", params=params)

    def put_calendar(self, name: str, timezone: str, dates: list[Any]) -> CalendarView:
        body = {"timezone": timezone, "dates": dates}
        return self._call(CalendarView, "PUT", f"/calendars/{quote(name, safe='')}", json=body)

    def get_calendar(self, name: str) -> CalendarView:
        return self._call(CalendarView, "GET", f"/calendars/{quote(name, safe='')}")

    def list_calendars(self) -> CalendarList:
        return self._call(CalendarList, "GET", "/calendars")

    def delete_calendar(self, name: str) -> None:
        self._send("DELETE", f"/calendars/{quote(name, safe='')}")

    def tenant(self) -> TenantView:
        return self._call(TenantView, "GET", "/tenant")

    def rotate_signing_secret(self) -> TenantView:
        return self._call(TenantView, "POST", "/tenant/signing-secrets/rotate", json={})

    def _call(self, model: type[M], method: str, path: str, **kwargs: Any) -> M:
        return model.model_validate(self._send(method, path, **kwargs).json())

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as error:
            raise ApiUnreachable(self.base_url, str(error) or type(error).__name__) from None
        if response.is_error:
            raise ApiError(_problem_of(response))
        return response


def _filters(tag: str | Sequence[str] | None, tags: Mapping[str, str | None] | None) -> list[str]:
    """``?tag=`` values: the raw filters given, then a mapping's (``key:value``, or
    ``key`` for None)."""
    raw = [tag] if isinstance(tag, str) else list(tag or [])
    return raw + [key if value is None else f"{key}:{value}" for key, value in (tags or {}).items()]


def _instant(value: datetime | str | None) -> str | None:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("a naive datetime is ambiguous: pass an aware one (UTC, say)")
        return value.isoformat()
    return value


def _page(limit: int, next_token: str | None) -> dict[str, Any]:
    return {"limit": limit} | ({"next_token": next_token} if next_token else {})


def _problem_of(response: httpx.Response) -> Problem:
    try:
        return Problem.model_validate(response.json())
    except ValueError:
        # Not ours (a proxy, or API Gateway refusing a signature): keep what it said.
        return Problem(
            title=response.reason_phrase or "Error",
            status=response.status_code,
            detail=response.text[:500] or "no details",
        )
