"""Claiming one page of due tasks, the looping tick's and the claim function's one
code path: re-read the page, send what runs, claim each sent task on its version
(concurrently), claim again a task still due, set aside a task that makes any of it
raise. Why, in docs/decisions/: 0001-claim-protocol.md, 0009-h-jitter-catch-up.md,
0014-tick-concurrency.md and 0021-setting-aside-poison-work.md.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TypeVar

from dynacron.domain.clock import Clock
from dynacron.domain.conditions import Transition
from dynacron.domain.coordination.uptime import ShardHistory
from dynacron.domain.executions import transitions
from dynacron.domain.executions.execution import Dispatch
from dynacron.domain.instants import format_instant
from dynacron.domain.tasks import transitions as task_transitions
from dynacron.domain.tasks.claiming import Claim, advanced, claim_occurrence
from dynacron.domain.tasks.task import SKIPPED_CATCHUP, Task, execution_id_for
from dynacron.ports import (
    DispatchQueue,
    ExecutionStore,
    StoreUnavailable,
    TaskStore,
    Throttled,
    UnreadableTask,
    reason_of,
)
from dynacron.ports.faults import NO_FAULTS, Boundary, Faults
from dynacron.ports.messages import SEND_BATCH_LIMIT
from dynacron.ports.metrics import NO_METRICS, Metrics
from dynacron.services import task_changes
from dynacron.services.tick_settings import TickSettings

T = TypeVar("T")
R = TypeVar("R")
logger = logging.getLogger("dynacron")
# The store throttling a burst of claims: wait 50 ms, 100 ms, ... (at most 2 s) and retry.
THROTTLE_RETRIES = 8
THROTTLE_FIRST_SLEEP = 0.05
THROTTLE_MAX_SLEEP = 2.0


@dataclass
class TickReport:
    """What one tick of a shard, or one claimed page, did: counts, the cursor, lateness."""

    shard: int
    buckets_queried: int = 0
    candidates: int = 0
    sent: int = 0
    claimed: int = 0
    # Claims that ran nothing: every due occurrence was missed and skipped.
    rescheduled: int = 0
    lost_races: int = 0
    # Tasks that made the tick raise, marked ERROR and left out of the due index.
    set_aside: int = 0
    cursor: datetime | None = None
    lateness_seconds: list[float] = field(default_factory=list)
    # Claims this tick may make: the configured cap, less whatever the queue
    # already holds beyond its bound (dispatch pacing).
    claim_budget: int = 0
    # Tasks handed to claim invocations (each page counts against the claim
    # budget as if claimed), in how many pages; and due tasks passed over because
    # a claim invocation had them handed out moments ago.
    handed_out: int = 0
    pages_handed_out: int = 0
    still_handed_out: int = 0
    # The tick stops starting new pages at this instant (the looping tick's lease
    # must outlast the tick); whatever is left stays due for the next tick.
    deadline: datetime | None = None
    cut_short: bool = False
    # Claims of tasks that had had ``tick_max_claims_per_task`` this tick: due, left for later.
    held_back: int = 0
    # run_all claims that passed over missed occurrences (outside the window or
    # beyond ``catchup_max_runs``); each leaves one SKIPPED execution saying so.
    catchup_cut: int = 0
    claims_by_task: dict[str, int] = field(default_factory=dict, repr=False)
    # The backlog pass stops at this instant (of the tick's clock), after its first round.
    backlog_until: datetime | None = None
    backlog_rounds: int = 0

    def absorb(self, other: TickReport) -> None:
        """Count what a tick of another shard did as this tick's (an adopted shard's,
        ticked with it); this report keeps its own shard, cursor and budget."""
        for name in (
            "buckets_queried", "candidates", "sent", "claimed", "rescheduled",
            "lost_races", "set_aside", "handed_out", "pages_handed_out",
            "still_handed_out", "held_back", "catchup_cut", "backlog_rounds",
        ):  # fmt: skip
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.lateness_seconds += other.lateness_seconds
        self.cut_short = self.cut_short or other.cut_short

    @property
    def claim_writes(self) -> int:
        """Claims that moved a task on, whether or not they ran anything: the budget's unit."""
        return self.claimed + self.rescheduled

    @property
    def budget_left(self) -> int:
        """Claims this tick may still make or hand out."""
        return self.claim_budget - self.claim_writes - self.handed_out


class PageClaimer:
    """Reads, sends and claims pages of due tasks for a ``Ticker`` or a claim invocation."""

    def __init__(
        self,
        *,
        tasks: TaskStore,
        executions: ExecutionStore,
        queue: DispatchQueue,
        settings: TickSettings,
        clock: Clock,
        faults: Faults = NO_FAULTS,
        metrics: Metrics | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._metrics = metrics or NO_METRICS
        self._sleep = sleep
        self._tasks = tasks
        self._executions = executions
        self._queue = queue
        self._settings = settings
        self._clock = clock
        self._faults = faults
        self._sharding = settings.sharding
        self._misfire_grace = timedelta(seconds=settings.misfire_grace_seconds)
        # Created once and kept: a warm Lambda reuses its threads between ticks.
        self._pool = (
            ThreadPoolExecutor(settings.tick_concurrency, thread_name_prefix="dynacron-tick")
            if settings.tick_concurrency > 1
            else None
        )

    def work_page(
        self,
        task_ids: list[str],
        now: datetime,
        history: ShardHistory,
        report: TickReport,
        due_from: datetime | None,
    ) -> tuple[bool, bool]:
        """Read, send and claim one page of due tasks (decision 0001): the looping tick's
        and the claim function's one code path.

        Returns (whether nothing due was left behind, whether the tick must stop:
        its deadline or the backlog's time came).
        """
        # A task that had its share of this tick is not even read again.
        open_ids = [i for i in task_ids if self._has_share(i, report)]
        drained = len(open_ids) == len(task_ids)
        tasks: list[Task] = []
        if open_ids:
            tasks, unreadable = self._tasks.read_many(open_ids)
            for item in unreadable:
                self._set_aside(item, None, now, report)
        while claims := self._claims_of(tasks, now, history, report):
            if self.past_deadline(report) or self.backlog_time_spent(report, due_from):
                return False, True
            budget = report.budget_left
            if len(claims) > budget:
                claims, drained = claims[:budget], False
            won, all_sent = self._dispatch(claims, now, report)
            drained &= all_sent
            if due_from is None:
                report.backlog_rounds += 1
            for claim in won:
                task_id = claim.task.task_id
                report.claims_by_task[task_id] = report.claims_by_task.get(task_id, 0) + 1
            # A task still due after its claim (run_all catching up, or
            # on-time occurrences queued behind a late one) is claimed
            # again now, from the state just written, up to its share.
            tasks = []
            for claim in won:
                if not self._has_share(claim.task.task_id, report):
                    if claim.next_run_at is not None and claim.next_run_at <= now:
                        report.held_back += 1
                        drained = False
                    continue
                tasks.append(advanced(claim.task, claim, now))
        return drained, False

    def past_deadline(self, report: TickReport) -> bool:
        """Whether the tick's deadline came (by the tick's clock): then it is ``cut_short``."""
        if report.deadline is None or self._clock.now() < report.deadline:
            return False
        report.cut_short = True
        return True

    def backlog_time_spent(self, report: TickReport, due_from: datetime | None) -> bool:
        """Whether the backlog pass has had its time (by the tick's clock), after its
        first round of claims."""
        if due_from is not None or report.backlog_until is None or not report.backlog_rounds:
            return False
        return self._clock.now() >= report.backlog_until

    def _has_share(self, task_id: str, report: TickReport) -> bool:
        """Whether ``task_id`` may be claimed again in this tick (``tick_max_claims_per_task``)."""
        return report.claims_by_task.get(task_id, 0) < self._settings.tick_max_claims_per_task

    def _claims_of(
        self, tasks: list[Task], now: datetime, history: ShardHistory, report: TickReport
    ) -> list[Claim]:
        claims: list[Claim] = []
        for task in tasks:
            try:
                claim = claim_occurrence(
                    task,
                    now,
                    self._misfire_grace,
                    history=history,
                    catchup_max_runs=self._settings.catchup_max_runs,
                )
            except StoreUnavailable:
                raise
            except Exception as error:
                self._set_aside(task, error, now, report)
                continue
            if claim is not None:
                claims.append(claim)
        return claims

    def _set_aside(
        self,
        task: Task | UnreadableTask,
        error: Exception | None,
        now: datetime,
        report: TickReport,
    ) -> None:
        """Mark a task that made the tick raise (``error``, or it cannot be read) ERROR,
        so it never stops the shard again."""
        if isinstance(task, UnreadableTask):
            reason = task.reason
        else:
            reason = "claiming it raised" + (f" {reason_of(error)}" if error else "")
        logger.warning(
            "task set aside",
            extra={"task_id": task.task_id, "reason": reason},
            exc_info=error,
        )
        if task_changes.set_aside(self._tasks, task, reason, now):
            report.set_aside += 1
            self._metrics.task_set_aside()

    def _dispatch(
        self, claims: list[Claim], now: datetime, report: TickReport
    ) -> tuple[list[Claim], bool]:
        """Send what runs, then claim it; returns the claims won and whether all was sent.

        A claim that runs nothing (its missed occurrences are skipped) is only
        claimed. A run the queue did not accept is not claimed, so it stays due.
        """
        runs: dict[str, Dispatch] = {}
        ready: list[Claim] = []
        for claim in claims:
            try:
                dispatch = claim.dispatch(now)
            except StoreUnavailable:
                raise
            except Exception as error:
                self._set_aside(claim.task, error, now, report)
                continue
            ready.append(claim)
            if dispatch is not None:
                runs[dispatch.execution_id] = dispatch
        queued = list(runs.values())
        # From a pool, batches of what one request sends (SQS: 10); without one, the
        # page in one call (SQLite: one transaction; the SQS adapter splits it).
        batches = (
            [queued[i : i + SEND_BATCH_LIMIT] for i in range(0, len(queued), SEND_BATCH_LIMIT)]
            if self._pool is not None
            else [queued]
            if queued
            else []
        )
        accepted = self._concurrently(self._queue.send, batches)
        sent = {dispatch.execution_id for batch in accepted for dispatch in batch}
        report.sent += len(sent)
        self._faults.reached(Boundary.TICK_SENT_NOT_CLAIMED)
        # A run the queue did not accept is not claimed: it stays due.
        to_claim = [c for c in ready if c.execution_id is None or c.execution_id in sent]

        # Each claim's change is made here, on this thread; the store carries the
        # page's out in one call (per thread of the pool, if there is one): on SQLite
        # one transaction for the page (decision 0043).
        changes: list[tuple[Claim, tuple[str, Transition]]] = []
        for claim in to_claim:
            try:
                placement = self._sharding.place(claim.task.task_id, claim.next_run_at, now)
                change = task_transitions.claim(claim, placement.key if placement else None, now)
            except StoreUnavailable:
                raise
            except Exception as error:
                self._set_aside(claim.task, error, now, report)
                continue
            changes.append((claim, (claim.task.task_id, change)))
        answers = self._claim_all([change for _, change in changes])
        won: list[Claim] = []
        for (claim, _), claimed in zip(changes, answers, strict=True):
            if isinstance(claimed, Exception):
                self._set_aside(claim.task, claimed, now, report)
                continue
            if not claimed:
                report.lost_races += 1
                continue
            self._record_overlap_skip(claim, now)
            self._record_catchup_cut(claim, now)
            self._faults.reached(Boundary.TICK_CLAIMED_ONE)
            won.append(claim)
            if claim.catchup_cut:
                report.catchup_cut += 1
            if claim.scheduled_at is None:
                report.rescheduled += 1
            else:
                report.claimed += 1
                report.lateness_seconds.append((now - claim.scheduled_at).total_seconds())
        return won, len(sent) == len(runs)

    def _claim_all(self, changes: list[tuple[str, Transition]]) -> list[bool | Exception]:
        """The conditional claims (``transitions.claim``) of a page, in one store call
        per thread of the pool (one call without a pool); the claims the store
        throttled are asked again, with backoff.

        Still throttled after the last try raises: the tick ends, the task stays due
        (its message, already sent, is a duplicate the worker drops) and the next
        tick claims it.
        """
        answers: list[bool | Exception] = [False] * len(changes)
        pending = list(range(len(changes)))
        for attempt in range(THROTTLE_RETRIES):
            chunks = self._chunks([changes[i] for i in pending])
            got = [a for chunk in self._concurrently(self._tasks.apply_each, chunks) for a in chunk]
            throttled: list[Throttled] = []
            still: list[int] = []
            for index, answer in zip(pending, got, strict=True):
                answers[index] = answer
                if isinstance(answer, Throttled):
                    throttled.append(answer)
                    still.append(index)
            if not throttled:
                return answers
            if attempt == THROTTLE_RETRIES - 1:
                raise throttled[0]
            self._sleep(min(THROTTLE_MAX_SLEEP, THROTTLE_FIRST_SLEEP * 2**attempt))
            pending = still
        raise AssertionError("unreachable")

    def _chunks(self, items: list[T]) -> list[list[T]]:
        """``items`` in order, in one chunk per thread of the pool (one without a pool)."""
        if not items:
            return []
        parts = 1 if self._pool is None else min(len(items), self._settings.tick_concurrency)
        size = -(-len(items) // parts)
        return [items[i : i + size] for i in range(0, len(items), size)]

    def _concurrently(self, call: Callable[[T], R], items: list[T]) -> list[R]:
        """``call`` on every item, from the pool when there is one; results in order.

        The first exception is raised and calls not yet started are cancelled,
        as a sequential loop would stop. Sends precede claims, so a tick that
        fails part way leaves duplicates at worst, never a loss.
        """
        if self._pool is None or len(items) < 2:
            return [call(item) for item in items]
        return list(self._pool.map(call, items))

    def _record_overlap_skip(self, claim: Claim, now: datetime) -> None:
        """An occurrence the overlap policy or a skip passed over leaves a SKIPPED
        execution saying why.

        Written after the claim, so only the tick that won records it; a crash in
        between loses the record, never an occurrence that should have run.
        """
        if claim.recorded_skip is None:
            return
        occurrence, reason = claim.recorded_skip
        execution_id = execution_id_for(claim.task.task_id, occurrence)
        skipped = transitions.record_skipped(
            claim.task,
            execution_id,
            occurrence,
            reason,
            now,
            keeping=self._executions.keeping(execution_id),
        )
        self._executions.apply(execution_id, skipped)

    def _record_catchup_cut(self, claim: Claim, now: datetime) -> None:
        """Missed occurrences run_all passed over leave one SKIPPED execution saying so,
        under the first of them (their owner asked for every one)."""
        if not claim.catchup_cut or claim.skipped_since is None:
            return
        kept = claim.scheduled_at or claim.next_run_at
        reason = SKIPPED_CATCHUP.format(
            kept=format_instant(kept) if kept is not None else "the schedule ended",
            limit=self._settings.catchup_max_runs,
        )
        execution_id = execution_id_for(claim.task.task_id, claim.skipped_since)
        skipped = transitions.record_skipped(
            claim.task,
            execution_id,
            claim.skipped_since,
            reason,
            now,
            keeping=self._executions.keeping(execution_id),
        )
        self._executions.apply(execution_id, skipped)
