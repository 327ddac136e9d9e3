"""The tick: walk a shard's due index, then send and claim what is due.

What is due now is queried first, then the backlog from the shard's cursor, oldest
bucket first; each page is claimed by ``page_claimer``, or handed to a claim
invocation. Why, in docs/decisions/: 0001-claim-protocol.md (send, then claim),
0002-due-index-and-cursor.md, 0009-h-jitter-catch-up.md (misfires, on time first),
0014-tick-concurrency.md, 0021-setting-aside-poison-work.md and
0025-elastic-tick-capacity.md (pages handed out; 0051: the rest of a large find
too), 0037-clock-steps.md (a cursor ahead of the clock is rewound).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from dynacron.domain.clock import Clock
from dynacron.domain.coordination import transitions
from dynacron.domain.coordination.uptime import ShardHistory
from dynacron.domain.tasks import transitions as task_transitions
from dynacron.domain.tasks.claiming import replanned_after_step_back
from dynacron.domain.tasks.task import Task, due_bucket_key
from dynacron.ports import (
    CursorStore,
    DispatchQueue,
    DuePage,
    DuePageHandOut,
    ExecutionStore,
    TaskStore,
)
from dynacron.ports.faults import NO_FAULTS, Faults
from dynacron.ports.metrics import NO_METRICS, Metrics
from dynacron.services.clock_steps import ClockSteps
from dynacron.services.page_claimer import PageClaimer, TickReport
from dynacron.services.tick_settings import TickSettings

logger = logging.getLogger("dynacron")

# The newest buckets are queried on every tick even when a long backlog of old
# buckets is being walked; what is due now is queried before any of it.
ALWAYS_QUERIED_BUCKETS = 2
# At most this many dropped shards are adopted (a shard count is at most 100).
MAX_ADOPTED = 1000
MAX_OLD_BUCKETS_PER_TICK = 48


class Ticker:
    """Walks a shard's due index from its cursor (decision 0002), handing large pages out or
    claiming them with its ``PageClaimer``."""

    def __init__(
        self,
        *,
        tasks: TaskStore,
        executions: ExecutionStore,
        queue: DispatchQueue,
        cursors: CursorStore,
        settings: TickSettings,
        clock: Clock,
        faults: Faults = NO_FAULTS,
        metrics: Metrics | None = None,
        sleep: Callable[[float], None] = time.sleep,
        page_claims: DuePageHandOut | None = None,
        steps: ClockSteps | None = None,
    ) -> None:
        self._page_claims = page_claims
        self._steps = steps
        # Shards beyond the shard count with a cursor: found on the first tick.
        self._orphans: list[int] | None = None
        # Shard -> the steps back seen when its cursor was last checked for one.
        self._steps_back_checked: dict[int, int] = {}
        # Task id -> until when its hand-out is fresh. Kept by the Ticker, so a
        # looping tick (one Ticker, a tick a second) remembers across its ticks.
        self._handed_out: dict[str, datetime] = {}
        self._metrics = metrics or NO_METRICS
        self._tasks = tasks
        self._queue = queue
        self._cursors = cursors
        self._settings = settings
        self._clock = clock
        self._sharding = settings.sharding
        self._width = timedelta(seconds=settings.sharding.bucket_seconds)
        self._misfire_grace = timedelta(seconds=settings.misfire_grace_seconds)
        self._heartbeat = timedelta(seconds=settings.tick_heartbeat_seconds)
        self._pages = PageClaimer(
            tasks=tasks,
            executions=executions,
            queue=queue,
            settings=settings,
            clock=clock,
            faults=faults,
            metrics=self._metrics,
            sleep=sleep,
        )

    def tick(self) -> list[TickReport]:
        """Tick every shard once (local mode); deployed, each shard has its own tick."""
        return [self.tick_shard(shard) for shard in range(self._settings.sharding.shard_count)]

    def tick_shard(self, shard: int, deadline: datetime | None = None) -> TickReport:
        """One tick of ``shard``, and of the shards it adopted (``adopted``); with
        ``deadline``, no page is started after it."""
        report = self._tick_one(shard, deadline)
        for orphan in self.adopted(shard):
            report.absorb(self._tick_one(orphan, deadline))
        return report

    def adopted(self, shard: int) -> list[int]:
        """The shards beyond the shard count that ``shard`` ticks too (decision 0039).

        A store once ticked with more shards keeps the cursors of the shards a
        smaller count dropped, and tasks may still be filed there until their next
        occurrence (a claim files the next one under the present count). Shard
        ``s`` adopts every dropped shard ``o`` with ``o % shard_count == s``; they
        are found once per ``Ticker``, by the cursors just past the count.
        """
        if self._orphans is None:
            count = self._sharding.shard_count
            found: list[int] = []
            while len(found) < MAX_ADOPTED and self._cursors.get(count + len(found)) is not None:
                found.append(count + len(found))
            if found:
                logger.warning(
                    "ticking shards the shard count dropped",
                    extra={"shard_count": count, "dropped": len(found)},
                )
            self._orphans = found
        return [o for o in self._orphans if o % self._sharding.shard_count == shard]

    def _tick_one(self, shard: int, deadline: datetime | None) -> TickReport:
        if self._steps is not None:
            # Counted here, once a tick, whatever else looks at the clock.
            self._steps.observe()
        now = self._clock.now()
        cursor, history = self._read_cursor(shard, now)
        steps_back, stepped_back = self._stepped_back(shard)
        cursor = self._rewound(shard, cursor, now, stepped_back=bool(stepped_back))
        if stepped_back:
            self._replan(shard, now, stepped_back)
        # Handled once done: a tick that raised above handles the step next time.
        self._steps_back_checked[shard] = steps_back
        report = TickReport(shard=shard, claim_budget=self._claim_budget(), deadline=deadline)
        # What is due is what is due when the due index is queried: reading the cursor
        # and the queue's depth took two round trips (and, at 128 MB, their CPU), and
        # what fell due meanwhile would otherwise wait a whole interval for the next tick.
        now = max(now, self._clock.now())
        self._forget_stale_hand_outs(now)
        if report.claim_budget <= 0:
            # The workers have enough to do: what is due stays due for a later
            # tick, and runs late (the heartbeat above says the shard was up).
            self._metrics.dispatch_paced()
            return report
        cursor = cursor or self._sharding.bucket(
            now - timedelta(seconds=self._settings.initial_lookback_seconds)
        )
        # What is due now first, wherever it is filed...
        on_time_from = now - self._misfire_grace
        bucket = self._sharding.bucket(on_time_from)
        while (
            bucket <= self._sharding.bucket(now) and report.budget_left > 0 and not report.cut_short
        ):
            self._drain_bucket(bucket, shard, now, report, history, due_from=on_time_from)
            bucket += self._width
        # ...then the backlog, oldest bucket first, until tick_backlog_seconds after
        # the tick began (so that a long backlog cannot hold back the next tick's
        # on-time work), but always one round of it.
        report.backlog_until = now + timedelta(seconds=self._settings.tick_backlog_seconds)
        settled_before = now - timedelta(seconds=self._settings.cursor_grace_seconds)
        new_cursor = cursor
        for bucket in self._buckets_to_query(cursor, now):
            if report.budget_left <= 0 or report.cut_short:
                break
            drained = self._drain_bucket(bucket, shard, now, report, history)
            # The cursor only moves over a contiguous run of drained, settled
            # buckets starting at the cursor: never over one not yet queried.
            if drained and bucket == new_cursor and bucket + self._width <= settled_before:
                new_cursor = bucket + self._width
        if new_cursor > cursor:
            self._cursors.apply(shard, transitions.advance_cursor(new_cursor))
        report.cursor = new_cursor
        return report

    def claim_page(self, page: DuePage, deadline: datetime | None = None) -> TickReport:
        """Claim one page a tick handed out (the claim function's work): the page
        part of ``tick_shard``, with no lease, no cursor and no hand-outs of its own.

        The shard's history (for misfires) is read, never written: the looping
        tick that handed the page out keeps the heartbeat. Claims are conditional
        on the version read, so a page also being worked elsewhere costs at most
        duplicate messages with the same ``execution_id``.
        """
        now = self._clock.now()
        history = self._cursors.read(page.shard, self._heartbeat).history
        report = TickReport(
            shard=page.shard, claim_budget=self._settings.tick_max_claims, deadline=deadline
        )
        report.candidates = len(page.task_ids)
        self._pages.work_page(list(page.task_ids), now, history, report, due_from=None)
        return report

    def _read_cursor(self, shard: int, now: datetime) -> tuple[datetime | None, ShardHistory]:
        """The shard's cursor, and its tick history with this tick recorded in it."""
        cursor = self._cursors.read(shard, self._heartbeat)
        history = cursor.history
        if history.needs_heartbeat(now, self._misfire_grace):
            recorded = history.record(now, self._misfire_grace)
            # Refused: another tick of this shard recorded meanwhile; it counts as ours.
            self._cursors.apply(shard, transitions.record_tick(recorded, history))
            history = recorded
        return cursor.bucket, history

    def _stepped_back(self, shard: int) -> tuple[int, timedelta]:
        """The steps back seen so far, and how far the clock stepped back in those
        this shard's ticks have not handled yet."""
        if self._steps is None:
            return 0, timedelta(0)
        return self._steps.backward_since(self._steps_back_checked.get(shard, 0))

    def _replan(self, shard: int, now: datetime, stepped: timedelta) -> None:
        """After the clock stepped back by ``stepped``: what a fast clock planned up to
        that far ahead waits for its schedule's next occurrence instead
        (``replanned_after_step_back``, decision 0037). Read from the due index: one
        query a bucket, once a step."""
        until = now + stepped + timedelta(seconds=self._settings.cursor_grace_seconds)
        bucket = self._sharding.bucket(now)
        replanned = 0
        while bucket <= self._sharding.bucket(until):
            start_key = None
            while True:
                task_ids, start_key = self._tasks.due_task_ids(
                    due_bucket_key(bucket, shard),
                    until,
                    self._settings.tick_page_size,
                    start_key,
                    now,
                )
                tasks, _ = self._tasks.read_many(task_ids)
                for task in tasks:
                    replanned += self._replan_one(task, now)
                if start_key is None:
                    break
            bucket += self._width
        if replanned:
            logger.warning(
                "tasks planned ahead by a clock that stepped back were planned again",
                extra={"shard": shard, "tasks": replanned},
            )

    def _replan_one(self, task: Task, now: datetime) -> int:
        earlier = replanned_after_step_back(task, now)
        if earlier is None:
            return 0
        placement = self._sharding.place(task.task_id, earlier, now)
        assert placement is not None
        change = task_transitions.replan(task.version, earlier, placement.key, now)
        # Refused: the task changed meanwhile (claimed, edited); it stays as it is.
        return int(self._tasks.apply(task.task_id, change))

    def _rewound(
        self, shard: int, cursor: datetime | None, now: datetime, *, stepped_back: bool
    ) -> datetime | None:
        """The cursor, moved back if it is ahead of the clock (decision 0037).

        A cursor only ever passes buckets that ended ``cursor_grace`` before the
        clock of the tick that moved it; one ahead of that by this tick's clock
        means the clock stepped back (or this tick's runs slow): what is written
        now is filed in buckets behind it, and would never be found. It is moved
        back to where this clock would have it, so those buckets are walked (and
        the cursor moves on over them once drained, as ever). The persisted cursor
        tells even after a restart; a cursor in the present bucket (where a fresh
        store starts it) is moved back only after a step back was seen, which may
        have filed work in the bucket before.
        """
        if cursor is None:
            return None
        floor = self._sharding.bucket(now - timedelta(seconds=self._settings.cursor_grace_seconds))
        if cursor <= floor or (cursor <= self._sharding.bucket(now) and not stepped_back):
            return cursor
        logger.warning(
            "the shard's cursor is ahead of the clock; moving it back",
            extra={"shard": shard, "cursor": cursor.isoformat(), "to": floor.isoformat()},
        )
        # Refused: another tick moved it meanwhile; this tick walks from the floor anyway.
        self._cursors.apply(shard, transitions.rewind_cursor(floor, cursor))
        return floor

    def _claim_budget(self) -> int:
        """Never more in flight than ``max_queued_dispatches``: the rest waits, due."""
        depth = self._queue.depth()
        self._metrics.queue_depth(depth)
        room = self._settings.max_queued_dispatches - depth
        return max(0, min(self._settings.tick_max_claims, room))

    def _buckets_to_query(self, cursor: datetime, now: datetime) -> list[datetime]:
        current = self._sharding.bucket(now)
        # A cursor ahead of this tick's clock (another ticker's clock runs fast)
        # must not stop it from querying the present.
        start = min(cursor, current)
        count = int((current - start) / self._width) + 1
        buckets = [start + i * self._width for i in range(count)]
        if len(buckets) > MAX_OLD_BUCKETS_PER_TICK + ALWAYS_QUERIED_BUCKETS:
            buckets = buckets[:MAX_OLD_BUCKETS_PER_TICK] + buckets[-ALWAYS_QUERIED_BUCKETS:]
        return buckets

    def _drain_bucket(
        self,
        bucket: datetime,
        shard: int,
        now: datetime,
        report: TickReport,
        history: ShardHistory,
        due_from: datetime | None = None,
    ) -> bool:
        """Dispatch everything due in one bucket (from ``due_from`` on, if given);
        True if nothing due was left behind."""
        key = due_bucket_key(bucket, shard)
        report.buckets_queried += 1
        start_key = None
        drained = True
        while True:
            budget = report.budget_left
            if (
                budget <= 0
                or self._pages.past_deadline(report)
                or self._pages.backlog_time_spent(report, due_from)
            ):
                return False
            task_ids, start_key = self._tasks.due_task_ids(
                key, now, min(self._settings.tick_page_size, budget), start_key, due_from
            )
            report.candidates += len(task_ids)
            # Tasks a claim invocation was given moments ago are its own for now.
            page = [i for i in task_ids if not self._still_handed_out(i, now)]
            report.still_handed_out += len(task_ids) - len(page)
            drained &= len(page) == len(task_ids)
            if self._fanout_spent(page, report):
                # A large page past the cap waits a second for the next tick's
                # hand-outs: claiming it here at 128 MB would take seconds.
                return False
            if self._hand_out(shard, page, report, now):
                # Not claimed yet, as far as this tick knows: the cursor stays.
                drained = False
            else:
                page_drained, stopped = self._pages.work_page(page, now, history, report, due_from)
                if stopped:
                    return False
                drained &= page_drained
            if start_key is None:
                return drained

    def _fanout_spent(self, task_ids: list[str], report: TickReport) -> bool:
        return (
            self._page_claims is not None
            and len(task_ids) >= self._settings.tick_fanout_min_tasks
            and report.pages_handed_out >= self._settings.tick_fanout_max_pages
        )

    def _hand_out(self, shard: int, task_ids: list[str], report: TickReport, now: datetime) -> bool:
        """Give a large page to a claim invocation; False: the tick claims it itself.

        A page that could not be handed out (Lambda refused, throttled, was not
        reachable) is claimed by this tick, so nothing waits on a failed hand-out.
        """
        if self._page_claims is None or not self._large_enough(task_ids, report):
            return False
        try:
            self._page_claims.hand_out(DuePage(shard=shard, task_ids=tuple(task_ids)))
        except Exception:
            logger.warning(
                "could not hand a page to a claim invocation; claiming it here",
                extra={"shard": shard, "tasks": len(task_ids)},
                exc_info=True,
            )
            return False
        fresh_until = now + timedelta(seconds=self._settings.tick_fanout_fresh_seconds)
        for task_id in task_ids:
            self._handed_out[task_id] = fresh_until
        report.handed_out += len(task_ids)
        report.pages_handed_out += 1
        return True

    def _large_enough(self, task_ids: list[str], report: TickReport) -> bool:
        """Whether a page is worth a claim invocation: one of ``tick_fanout_min_tasks``
        or more, or any page after this tick handed one out (the rest of a large
        find), while the cap leaves room. Claiming even a few tasks here at 128 MB
        takes a good part of a tick interval and holds the shard's next tick back
        (decision 0051); a tick that finds only a few claims them itself."""
        if len(task_ids) >= self._settings.tick_fanout_min_tasks:
            return True
        handed_out = report.pages_handed_out
        return bool(task_ids) and 0 < handed_out < self._settings.tick_fanout_max_pages

    def _still_handed_out(self, task_id: str, now: datetime) -> bool:
        fresh_until = self._handed_out.get(task_id)
        return fresh_until is not None and now < fresh_until

    def _forget_stale_hand_outs(self, now: datetime) -> None:
        """Past its freshness a hand-out is forgotten: a task still due was not
        claimed by its invocation, and is found and handed out (or claimed) again."""
        if self._handed_out:
            self._handed_out = {i: t for i, t in self._handed_out.items() if now < t}
