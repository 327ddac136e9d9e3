"""What the tick reads of the settings: its ``Ticker`` and ``PageClaimer`` are given
this, not the whole of ``Settings`` (``Settings.tick_settings`` builds it; what each
knob means is said there)."""

from __future__ import annotations

from dataclasses import dataclass

from dynacron.domain.tasks.task import Sharding


@dataclass(frozen=True, kw_only=True)
class TickSettings:
    """The settings the tick reads, by their names in ``Settings``."""

    sharding: Sharding
    misfire_grace_seconds: int
    tick_heartbeat_seconds: int
    initial_lookback_seconds: int
    cursor_grace_seconds: int
    tick_page_size: int
    tick_max_claims: int
    tick_max_claims_per_task: int
    tick_backlog_seconds: float
    tick_concurrency: int
    catchup_max_runs: int
    max_queued_dispatches: int
    tick_fanout_min_tasks: int
    tick_fanout_max_pages: int
    tick_fanout_fresh_seconds: float
