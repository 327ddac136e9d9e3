"""Tasks in bulk: JSON Lines of ``POST /tasks`` bodies, imported in batches, and exported.

An import sends each line's body with an idempotency key derived from the line
(``line_key``: its number, its bytes, and an optional prefix), so an import run
again, whole or after an interruption, replays what the first run created instead
of creating it twice, for as long as the API keeps keys (24 hours). A state file
(``ImportState``) records the last line below which every line was answered, so a
run resumed later than that, or simply sooner, does not even send those lines.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from dynacron.api.problems import describe_validation_errors
from dynacron.api.requests import TaskCreate
from dynacron.api.responses import BatchView, TaskView
from dynacron.client.api_client import ApiError, ApiUnreachable, Client
from dynacron.domain.errors import InvalidRequest
from dynacron.domain.tasks.specs import new_task

BATCH_SIZE = 100  # the most POST /tasks/batch takes
KEY_PREFIX = "import-"
# A refusal that a later run could turn into a task (the quota raised, a conflict
# gone) keeps the state file's mark below its line; a 422 never changes.
FINAL_REFUSAL = 422


@dataclass(frozen=True)
class Line:
    """One non-blank line of the input: its body, or why it is not one."""

    number: int
    raw: bytes
    body: dict[str, Any] | None = None
    problem: str | None = None


def parse_line(number: int, raw: bytes) -> Line | None:
    """Line ``number`` (from 1) as a body of ``POST /tasks``; None if blank."""
    text = raw.strip()
    if not text:
        return None
    try:
        body = json.loads(text)
    except ValueError as error:
        return Line(number, text, problem=f"not JSON: {error}")
    if not isinstance(body, dict):
        kind = type(body).__name__ if body is not None else "null"
        return Line(number, text, problem=f"not a JSON object (a body of POST /tasks) but {kind}")
    return Line(number, text, body=body)


def line_key(number: int, raw: bytes, prefix: str = "") -> str:
    """The idempotency key of line ``number`` whose bytes (blanks around it stripped)
    are ``raw``: the same line at the same place, in this file or a copy, is the
    same task. ``prefix`` (``--key-prefix``) makes a deliberate second import of the
    same file a different one."""
    digest = hashlib.sha256()
    for part in (prefix.encode(), str(number).encode(), raw.strip()):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return KEY_PREFIX + digest.hexdigest()[:48]


def validate_locally(body: dict[str, Any], now: datetime) -> str | None:
    """What the API would refuse in ``body`` without reading its store: the request
    model and the domain's task rules (``new_task``). Not checked here: the handler
    being registered, the deployment's shortest interval, the task an ``after``
    names, the payload's stored size and the quota."""
    try:
        spec = TaskCreate.model_validate(body).to_spec()
        new_task(spec, now, task_id="dry-run", tenant_id="dry-run")
    except ValidationError as invalid:
        errors = describe_validation_errors(invalid.errors())
        return "; ".join(f"{e['field']}: {e['message']}" for e in errors)
    except InvalidRequest as invalid:
        return str(invalid)
    return None


def create_body(task: TaskView) -> dict[str, Any] | None:
    """The ``POST /tasks`` body that registers ``task`` again with its current
    settings, defaults left out; None for a task whose schedule cannot be read.
    Not carried: its id, status (paused, completed), runs, versions and times."""
    kind = task.schedule.kind
    if kind == "unreadable":
        return None
    fields: dict[str, Any] = task.model_dump(
        include={
            "name",
            "timezone",
            "dst",
            "anchor",
            "start_at",
            "end_at",
            "jitter_seconds",
            "catchup",
            "catchup_window_seconds",
            "overlap",
            "handler_url",
            "handler",
            "target",
            "retry",
            "max_concurrency",
            "rate_limit",
            "payload",
            "tags",
        },
        mode="json",
    )
    fields[kind] = task.after if kind == "after" else task.schedule.expression
    # Its calendars (by name: the other tenant or deployment keeps its own), if any;
    # its skips are not carried (they are for occurrences of this deployment).
    if task.exclude_calendars or task.only_calendars:
        fields["exclude_calendars"] = task.exclude_calendars or None
        fields["only_calendars"] = task.only_calendars or None
        fields["on_excluded"] = task.on_excluded
    create = TaskCreate.model_validate(fields)
    body = create.model_dump(mode="json", exclude_none=True, exclude_defaults=True)
    # A nested policy at its defaults (dst, retry) dumps as {}: the same as none.
    return {name: value for name, value in body.items() if value != {}}


def export_lines(client: Client) -> Iterator[str]:
    """Every task of the caller's tenant as a JSON line (``create_body``), in the
    order the API lists them; a task whose schedule cannot be read is left out."""
    for task in client.iter_tasks():
        body = create_body(task)
        if body is not None:
            yield json.dumps(body, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class Batch:
    """Lines ``first``..``last`` of the input: the bodies among them, and the digest
    of every line from the first of the input through ``last``."""

    index: int
    first: int
    last: int
    lines: list[Line]
    digest_through_last: str

    @property
    def bodies(self) -> list[Line]:
        return [line for line in self.lines if line.body is not None]


@dataclass
class ImportReport:
    created: int = 0
    replayed: int = 0
    skipped: int = 0
    # (line number, why), in line order once ``sorted``
    refused: list[tuple[int, str]] = field(default_factory=list)
    # lines of a batch that got no answer: (first, last, why)
    unanswered: list[tuple[int, int, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.refused and not self.unanswered


def destination_of(url: str, api_key: str | None) -> str:
    """An import's destination as a state file keeps it: the API's address, and a
    digest of its API key (never the key)."""
    if api_key is None:
        return url.rstrip("/")
    return f"{url.rstrip('/')} key:{hashlib.sha256(api_key.encode()).hexdigest()[:16]}"


class ImportState:
    """``--state FILE``: the last line below which every line was answered for good,
    with the digest of the input up to it, so that a resumed run skips them unsent
    and refuses an input that is not the one the state was written for."""

    def __init__(self, path: Path, key_prefix: str, destination: str = "") -> None:
        self.path = path
        self.key_prefix = key_prefix
        # Where the lines went (the API's address, and a digest of the API key if
        # any): lines skipped for another deployment or tenant would be lost there.
        self.destination = destination
        self.through_line = 0
        self.digest = hashlib.sha256().hexdigest()
        if path.exists():
            saved = json.loads(path.read_text())
            if saved.get("key_prefix") != key_prefix:
                raise ValueError(
                    f"{path} was written with --key-prefix {saved.get('key_prefix')!r}: "
                    "give the same, or another state file"
                )
            if saved.get("destination", "") != destination:
                raise ValueError(
                    f"{path} was written for another API or API key "
                    f"({saved.get('destination', '')!r}): use another state file"
                )
            self.through_line = int(saved["through_line"])
            self.digest = str(saved["digest"])

    def save(self, through_line: int, digest: str) -> None:
        self.through_line, self.digest = through_line, digest
        saved = {
            "key_prefix": self.key_prefix,
            "destination": self.destination,
            "through_line": through_line,
            "digest": digest,
        }
        scratch = self.path.with_name(self.path.name + ".partial")
        scratch.write_text(json.dumps(saved))
        os.replace(scratch, self.path)


class Importer:
    """Sends the lines in batches of up to ``BATCH_SIZE``, ``concurrency`` at once,
    each body with its ``line_key``; a batch that got no answer, or a 429 or 5xx, is
    retried by the client (``Client.create_tasks``). ``progress(n)`` is called, from
    the calling thread, with the count of lines each batch covered (blank ones too)."""

    def __init__(
        self,
        client: Client | None,
        *,
        concurrency: int = 4,
        key_prefix: str = "",
        state: ImportState | None = None,
        progress: Callable[[int], None] = lambda n: None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._client = client
        self._concurrency = concurrency
        self._key_prefix = key_prefix
        self._state = state
        self._progress = progress
        self._now = now

    def run(self, raw_lines: Iterable[bytes]) -> ImportReport:
        """Import (``client`` given) or only check (``client`` None, ``validate_locally``)."""
        report = ImportReport()
        batches = self._batches(raw_lines, report)
        if self._client is None:
            for batch in batches:
                self._check(batch, report)
            return report
        finished: dict[int, bool] = {}
        mark = {"next": 0}
        digests: dict[int, tuple[int, str]] = {}
        with ThreadPoolExecutor(self._concurrency, thread_name_prefix="import") as pool:
            running: dict[Future[BatchView | None], Batch] = {}
            for batch in batches:
                if self._state is not None:
                    digests[batch.index] = (batch.last, batch.digest_through_last)
                running[pool.submit(self._send, batch)] = batch
                if len(running) >= 2 * self._concurrency:
                    self._settle(running, report, finished, mark, digests, FIRST_COMPLETED)
            while running:
                self._settle(running, report, finished, mark, digests, FIRST_COMPLETED)
        report.refused.sort()
        return report

    def _batches(self, raw_lines: Iterable[bytes], report: ImportReport) -> Iterator[Batch]:
        skip_through = self._state.through_line if self._state else 0
        digest = hashlib.sha256()
        lines: list[Line] = []
        bodies = 0
        first = skip_through + 1
        index = 0
        number = 0
        for number, raw in enumerate(raw_lines, start=1):
            digest.update(raw)
            if number <= skip_through:
                if number == skip_through:
                    assert self._state is not None
                    if digest.hexdigest() != self._state.digest:
                        raise ValueError(
                            f"the state file {self._state.path} was written for another "
                            f"input: its first {skip_through} lines differ"
                        )
                if raw.strip():
                    report.skipped += 1
                continue
            line = parse_line(number, raw)
            if line is None:
                continue
            lines.append(line)
            bodies += line.body is not None
            if bodies == BATCH_SIZE:
                yield Batch(index, first, number, lines, digest.copy().hexdigest())
                index, first, lines, bodies = index + 1, number + 1, [], 0
        if number < skip_through:
            raise ValueError(
                f"the state file says {skip_through} lines were imported; the input has {number}"
            )
        if lines or number >= first:
            yield Batch(index, first, max(number, first), lines, digest.hexdigest())

    def _check(self, batch: Batch, report: ImportReport) -> None:
        now = self._now()
        for line in batch.lines:
            why = line.problem or (
                validate_locally(line.body, now) if line.body is not None else None
            )
            if why is not None:
                report.refused.append((line.number, why))
        self._progress(batch.last - batch.first + 1)

    def _send(self, batch: Batch) -> BatchView | None:
        assert self._client is not None
        sent = batch.bodies
        if not sent:
            return None
        keys = [line_key(line.number, line.raw, self._key_prefix) for line in sent]
        # Only each item's outcome is counted: the tasks' ids and status will do.
        bodies = [line.body or {} for line in sent]
        return self._client.create_tasks(bodies, keys=keys, minimal=True)

    def _settle(
        self,
        running: dict[Future[BatchView | None], Batch],
        report: ImportReport,
        finished: dict[int, bool],
        mark: dict[str, int],
        digests: dict[int, tuple[int, str]],
        when: str,
    ) -> None:
        done, _ = wait(running, return_when=when)
        for future in done:
            batch = running.pop(future)
            answered_for_good = self._record(batch, future, report)
            if self._state is not None:
                finished[batch.index] = answered_for_good
            self._progress(batch.last - batch.first + 1)
        if self._state is None:
            return
        # The mark moves over batches answered for good, in order, and stops at the
        # first that was not: a resumed run sends it (and all after it) again.
        moved = None
        while finished.get(mark["next"]):
            moved = digests.pop(mark["next"])
            finished.pop(mark["next"])
            mark["next"] += 1
        if moved is not None:
            self._state.save(*moved)

    def _record(self, batch: Batch, future: Future[BatchView | None], report: ImportReport) -> bool:
        """Count one batch's answers; whether every line of it is answered for good."""
        final = True
        for line in batch.lines:
            if line.problem is not None:
                report.refused.append((line.number, line.problem))
        sent = batch.bodies
        try:
            answer = future.result()
        except (ApiError, ApiUnreachable) as error:
            if sent:
                report.unanswered.append((sent[0].number, sent[-1].number, str(error)))
            return False
        if answer is None:
            return True
        for item in answer.items:
            line = sent[item.index]
            if item.outcome == "created":
                report.created += 1
            elif item.outcome == "replayed":
                report.replayed += 1
            else:
                problem = item.problem
                report.refused.append((line.number, _problem_text(problem)))
                final = final and item.status == FINAL_REFUSAL
        return final


def _problem_text(problem: Any) -> str:
    if problem is None:
        return "refused"
    fields = "; ".join(f"{e.get('field')}: {e.get('message')}" for e in problem.errors or [])
    return fields or f"{problem.detail}"
