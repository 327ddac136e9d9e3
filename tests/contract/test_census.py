"""The schedule census (decision 0046) over every store: each write of a task that
changes what the census counts changes it in the same transaction, a fire changes
nothing, and a refused write leaves it as it was."""

from __future__ import annotations

import dataclasses
import threading
from collections import Counter
from datetime import timedelta

from dynacron.domain.errors import InvalidRequest, LimitExceeded
from dynacron.domain.schedules.expressions import CronSchedule, RateSchedule
from dynacron.domain.schedules.signatures import signature_of
from dynacron.domain.tasks import transitions
from dynacron.domain.tasks.claiming import claim_occurrence
from dynacron.domain.tasks.task import Task, TaskStatus
from dynacron.ports import AdapterSet, TaskStore
from tests.contract import task_changes
from tests.contract.builders import ROOMY, START, a_task, placement_of

DAILY = CronSchedule(expression="0 3 * * *", timezone="Europe/Berlin")
HOURLY = CronSchedule(expression="0 * * * *")


def census(tasks: TaskStore, tenant_id: str = "acme") -> dict[str, int]:
    """The tenant's census as signature text to tasks, every page and shard summed."""
    totals: Counter[str] = Counter()
    token = None
    while True:
        page = tasks.census_page(tenant_id, 2, token)
        for entry in page.items:
            totals[entry.signature.text] += entry.tasks
        token = page.next_token
        if token is None:
            return {text: n for text, n in totals.items() if n}


def cron_task(task_id: str, schedule: CronSchedule = DAILY, **fields: object) -> Task:
    return a_task(
        task_id,
        tenant_id="acme",
        schedule=schedule,
        due=schedule.next_after(START),
        **fields,  # type: ignore[arg-type]
    )


def text_of(task: Task) -> str:
    signature = signature_of(task)
    assert signature is not None
    return signature.text


def create(tasks: TaskStore, task: Task) -> Task:
    tasks.create_within_quota(task, placement_of(task), ROOMY, "secret")
    return task


def test_creates_single_and_batched_count_tasks_per_signature(adapters: AdapterSet) -> None:
    tasks = adapters.tasks
    # Given tasks on two schedules, one created alone and the rest in a batch
    first = create(tasks, cron_task("daily-0"))
    batch = [cron_task(f"daily-{n}") for n in range(1, 130)] + [
        cron_task(f"hourly-{n}", HOURLY) for n in range(20)
    ]
    outcomes = tasks.create_many_within_quota(
        [(task, placement_of(task)) for task in batch], ROOMY, "secret"
    )
    # Then the census counts each schedule's tasks, across chunks and shards
    assert outcomes == [None] * len(batch)
    assert census(tasks) == {text_of(first): 130, text_of(batch[-1]): 20}
    assert census(tasks, "other") == {}


def test_a_refused_create_leaves_the_census_unchanged(adapters: AdapterSet) -> None:
    tasks = adapters.tasks
    create(tasks, cron_task("daily-0"))
    before = census(tasks)
    # When the id is taken, and when the quota is full
    try:
        create(tasks, cron_task("daily-0", HOURLY))
        raise AssertionError("an id taken was stored")
    except InvalidRequest:
        pass
    try:
        tasks.create_within_quota(cron_task("daily-1", HOURLY), None, 1, "secret")
        raise AssertionError("a task over quota was stored")
    except LimitExceeded:
        pass
    outcomes = tasks.create_many_within_quota(
        [(cron_task(f"over-{n}", HOURLY), None) for n in range(3)], 1, "secret"
    )
    # Then nothing refused was counted
    assert all(isinstance(outcome, LimitExceeded) for outcome in outcomes)
    assert census(tasks) == before


def test_two_creates_at_once_count_two(adapters: AdapterSet) -> None:
    tasks = adapters.tasks
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def make(task_id: str) -> None:
        barrier.wait()
        try:
            create(tasks, cron_task(task_id))
        except BaseException as error:  # recorded and raised below, never swallowed
            errors.append(error)

    threads = [threading.Thread(target=make, args=(f"racer-{n}",)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert census(tasks) == {text_of(cron_task("x")): 2}


def test_pause_resume_change_and_delete_move_the_count(adapters: AdapterSet) -> None:
    tasks = adapters.tasks
    task = create(tasks, cron_task("job"))
    create(tasks, cron_task("other"))
    daily, hourly = text_of(task), text_of(cron_task("x", HOURLY))
    # When it is paused, it leaves the census
    paused = dataclasses.replace(task, status=TaskStatus.PAUSED, version=2)
    assert task_changes.replace(tasks, paused, None, expected_version=1)
    assert census(tasks) == {daily: 1}
    # Resumed, it is back
    resumed = dataclasses.replace(paused, status=TaskStatus.ACTIVE, version=3)
    assert task_changes.replace(tasks, resumed, placement_of(resumed), expected_version=2)
    assert census(tasks) == {daily: 2}
    # A change of schedule moves it; a refused one (an old version) moves nothing
    moved = dataclasses.replace(resumed, schedule=HOURLY, version=4)
    assert not task_changes.replace(tasks, moved, placement_of(moved), expected_version=2)
    assert census(tasks) == {daily: 2}
    assert task_changes.replace(tasks, moved, placement_of(moved), expected_version=3)
    assert census(tasks) == {daily: 1, hourly: 1}
    # A change of anything else moves nothing
    renamed = dataclasses.replace(moved, name="renamed", version=5)
    assert task_changes.replace(tasks, renamed, placement_of(renamed), expected_version=4)
    assert census(tasks) == {daily: 1, hourly: 1}
    # Deleted, it is gone; a delete of another tenant's task changes nothing
    assert not tasks.delete_owned("other-tenant", "job")
    assert tasks.delete_owned("acme", "job")
    assert census(tasks) == {daily: 1}


def test_a_set_aside_takes_the_task_out(adapters: AdapterSet) -> None:
    tasks = adapters.tasks
    task = create(tasks, cron_task("job"))
    # When the system sets it aside (ERROR)
    assert tasks.apply("job", transitions.set_aside(1, "it raised", START))
    assert census(tasks) == {}
    # A PATCH that makes it ACTIVE again counts it again
    back = dataclasses.replace(task, version=3)
    assert task_changes.replace(tasks, back, placement_of(back), expected_version=2)
    assert census(tasks) == {text_of(task): 1}


def test_a_fire_changes_no_count(adapters: AdapterSet) -> None:
    tasks = adapters.tasks
    # Given a recurring task and a one-time task
    recurring = create(tasks, cron_task("recurring", HOURLY))
    once = create(tasks, a_task("once", tenant_id="acme", due=START + timedelta(minutes=5)))
    before = census(tasks)
    # When each fires (the one-time task completes)
    for task in (recurring, once):
        now = task.next_run_at
        assert now is not None
        claim = claim_occurrence(task, now)
        assert claim is not None
        next_placement = placement_of(task, now) if claim.next_run_at else None
        assert task_changes.claim(tasks, claim, next_placement, now)
    completed = tasks.get("once")
    assert completed is not None
    assert completed.status is TaskStatus.COMPLETED
    # Then the census is as it was
    assert census(tasks) == before


def test_the_backfill_counts_no_task_twice_and_no_paused_one(adapters: AdapterSet) -> None:
    tasks = adapters.tasks
    # Given a task counted, and one paused (not counted)
    create(tasks, cron_task("counted"))
    create(tasks, dataclasses.replace(cron_task("paused"), status=TaskStatus.PAUSED))
    assert census(tasks) == {text_of(cron_task("x")): 1}
    # When the backfill runs twice, page by page
    counted: list[str] = []
    for _ in range(2):
        token = None
        while True:
            page = tasks.count_uncounted("acme", 1, token)
            counted += page.items
            token = page.next_token
            if token is None:
                break
    # Then it counted nothing: both were stored with the census
    assert counted == []
    assert census(tasks) == {text_of(cron_task("x")): 1}


def test_a_rate_signature_keeps_the_phase_to_the_minute_only() -> None:
    every_hour = RateSchedule(every_seconds=3600, anchor=START + timedelta(seconds=17))
    same_minute = RateSchedule(every_seconds=3600, anchor=START + timedelta(hours=5, seconds=42))
    other_minute = RateSchedule(every_seconds=3600, anchor=START + timedelta(minutes=1))
    texts = {text_of(a_task(str(n), schedule=s)) for n, s in enumerate((every_hour, same_minute))}
    assert len(texts) == 1
    assert text_of(a_task("o", schedule=other_minute)) not in texts


def test_a_read_from_now_on_leaves_out_signatures_that_ended(adapters: AdapterSet) -> None:
    tasks = adapters.tasks
    # Given a one-time task of 12:05 and a recurring one
    once = create(tasks, a_task("once", tenant_id="acme", due=START + timedelta(minutes=5)))
    create(tasks, cron_task("daily"))
    page = tasks.census_page("acme", 10, None, ending_after=START + timedelta(minutes=5))
    assert {entry.signature.text for entry in page.items} == {
        text_of(once),
        text_of(cron_task("x")),
    }
    # When read from after its minute: only the recurring one is left
    later = START + timedelta(minutes=7)
    entries, token = [], None
    while True:
        page = tasks.census_page("acme", 10, token, ending_after=later)
        entries += page.items
        token = page.next_token
        if token is None:
            break
    assert [entry.signature.text for entry in entries] == [text_of(cron_task("x"))]


def test_a_set_aside_that_cannot_be_written_in_a_page_leaves_the_census(
    adapters: AdapterSet,
) -> None:
    tasks = adapters.tasks
    task = create(tasks, cron_task("job"))
    # Given a page whose one set-aside cannot be written (a value no store keeps)
    aside = transitions.set_aside(1, "it raised", START)
    unwritable = dataclasses.replace(aside, sets={**aside.sets, "unwritable": object()})
    # When the page is carried out
    answers = tasks.apply_each([("job", unwritable)])
    # Then that change is answered with its error, and neither the task nor the census moved
    assert isinstance(answers[0], Exception)
    stored = tasks.get("job")
    assert stored is not None
    assert stored.status is TaskStatus.ACTIVE
    assert census(tasks) == {text_of(task): 1}
