"""Schedule signatures and the census forecast (decision 0046): what two tasks share,
what a write changes, and the forecast's budgets."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from dynacron.domain.schedules.cron import compile_cron, resolve_hashes
from dynacron.domain.schedules.expressions import (
    AfterSchedule,
    CronSchedule,
    FixedDelaySchedule,
    OneTimeSchedule,
    RateSchedule,
    Window,
)
from dynacron.domain.schedules.forecast import census_forecast
from dynacron.domain.schedules.signatures import (
    CensusChange,
    census_change,
    counted_signature,
    minutes_of,
    signature_of,
)
from dynacron.domain.tasks.task import Task, TaskStatus

NOW = datetime(2026, 11, 30, 23, 0, 30, tzinfo=UTC)


def task(task_id: str, schedule: object, **fields: object) -> Task:
    values: dict[str, object] = {"status": TaskStatus.ACTIVE, **fields}
    return Task(
        task_id=task_id,
        name=task_id,
        schedule=schedule,  # type: ignore[arg-type]
        handler_url="http://127.0.0.1:9/hook",
        payload={},
        next_run_at=NOW,
        created_at=NOW,
        updated_at=NOW,
        **values,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    "expression",
    ["H H * * *", "H/15 * * * *", "H(0-29) H(9-17) * * 1-5", "0 0 H * *", "H H H H H", "5 H * * *"],
)
def test_h_resolved_names_the_same_times_without_a_seed(expression: str) -> None:
    for seed in (f"task-{n}" for n in range(50)):
        resolved = resolve_hashes(expression, seed)
        assert resolved is not None
        assert "H" not in resolved
        assert compile_cron(resolved) == compile_cron(expression, seed)


def test_h_beside_l_keeps_its_seed() -> None:
    assert resolve_hashes("0 0 H,L * *", "task-1") is None
    mixed = signature_of(task("t", CronSchedule(expression="0 0 H,L * *", seed="t")))
    assert mixed is not None
    assert mixed.fields["seed"] == "t"


def test_tasks_whose_h_falls_alike_share_a_signature() -> None:
    signatures = {
        signature_of(task(f"t{n}", CronSchedule(expression="H/30 * * * *", seed=f"t{n}")))
        for n in range(200)
    }
    # H/30 in minutes: 30 offsets, so 30 signatures for 200 tasks
    assert len(signatures) == 30


def test_what_decides_the_times_tells_signatures_apart() -> None:
    base = task("t", CronSchedule(expression="0 3 * * *", timezone="Europe/Berlin"))
    same = dataclasses.replace(base, task_id="u", name="other", payload={"x": 1})
    assert signature_of(base) == signature_of(same)
    for other in (
        dataclasses.replace(base, schedule=CronSchedule(expression="0 3 * * *")),
        dataclasses.replace(base, jitter_seconds=60),
        dataclasses.replace(
            base,
            schedule=CronSchedule(
                expression="0 3 * * *",
                timezone="Europe/Berlin",
                window=Window(end_at=NOW + timedelta(days=3)),
            ),
        ),
    ):
        assert signature_of(other) != signature_of(base)


def test_kinds_without_a_time_of_their_own_or_not_counted_have_none() -> None:
    assert signature_of(task("a", AfterSchedule(upstream_task_id="b"))) is None
    paused = task("p", CronSchedule(expression="0 * * * *"), status=TaskStatus.PAUSED)
    assert counted_signature(paused) is None
    assert counted_signature(dataclasses.replace(paused, status=TaskStatus.ERROR)) is None
    completed = dataclasses.replace(paused, status=TaskStatus.COMPLETED)
    assert counted_signature(completed) == signature_of(completed)
    broken = task("b", CronSchedule(expression="\u00b2 * * * *"))
    assert signature_of(broken) is None


def test_a_one_time_signature_ends_after_its_minute() -> None:
    at = NOW + timedelta(hours=2, seconds=17)
    signature = signature_of(task("o", OneTimeSchedule(at=at)))
    assert signature is not None
    assert signature.ends_at == at.replace(second=0) + timedelta(minutes=1)


def test_a_write_changes_the_census_only_when_the_signature_moves() -> None:
    hourly = task("t", CronSchedule(expression="0 * * * *"))
    key = counted_signature(hourly).key  # type: ignore[union-attr]
    assert census_change(key, dataclasses.replace(hourly, version=2)).empty
    assert census_change(key, None) == CensusChange(removed=key)
    paused = dataclasses.replace(hourly, status=TaskStatus.PAUSED)
    assert census_change(key, paused) == CensusChange(removed=key)
    added = census_change(None, hourly)
    assert added.removed is None
    assert added.added == counted_signature(hourly)


def test_minutes_of_a_jittered_start_share_it_whole() -> None:
    occurrence = datetime(2026, 12, 1, 0, 0, 40, 500_000, tzinfo=UTC)
    shares = list(minutes_of(occurrence, 900, occurrence))
    assert sum(share for _, share in shares) == pytest.approx(1.0)
    # 0:00:40.5 + 0..19 s stay in minute 0; + 20..79 s in minute 1
    assert shares[0] == (occurrence.replace(second=0, microsecond=0), 20 / 901)
    assert shares[1][1] == 60 / 901


def test_the_census_forecast_multiplies_each_signature_once() -> None:
    daily = signature_of(task("d", CronSchedule(expression="0 0 * * *")))
    rate = signature_of(task("r", RateSchedule(every_seconds=3600, anchor=NOW)))
    delay = signature_of(task("f", FixedDelaySchedule(delay_seconds=120)))
    assert daily is not None
    assert rate is not None
    assert delay is not None
    result = census_forecast([(daily, 1_000_000), (rate, 10), (delay, 4)], NOW, 120, 10_000)
    midnight = datetime(2026, 12, 1, tzinfo=UTC)
    assert result.complete
    assert result.tasks == 1_000_014
    # the million at midnight, with the rate's 10 (its phase floored to the minute)
    # and the fixed delays' 2 a minute
    assert result.per_minute[midnight] == 1_000_000 + 10 + 2
    assert result.per_minute[midnight + timedelta(minutes=1)] == 2


def test_a_budget_run_out_leaves_out_the_smallest_herds_and_says_how_many() -> None:
    every_minute = signature_of(task("m", CronSchedule(expression="* * * * *")))
    hourly = signature_of(task("h", CronSchedule(expression="0 * * * *")))
    assert every_minute is not None
    assert hourly is not None
    # Given 50 budgeted occurrences: the larger herd (every minute) uses them up
    result = census_forecast([(hourly, 3), (every_minute, 500)], NOW, 24 * 60, 50)
    assert not result.complete
    assert result.tasks == 503
    assert result.not_counted == 503
    assert sum(result.per_minute.values()) == 50 * 500
