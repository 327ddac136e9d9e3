"""A hostile tenant's ``Retry-After`` and failures against a host others use: finding 5.

``Retry-After`` was honoured whatever it said, a huge one overflowed a date before
the outcome was written, and the pause (like the breaker and the rate bucket) was
kept per host for every tenant: one tenant could stop a shared host for all. Now
the value is parsed safely and capped, and host state is kept per tenant and host
(decision 0020).
"""

from __future__ import annotations

import dataclasses
import string
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from dynacron.adapters.aws.limits import DynamoLimitStore
from dynacron.api.requests import RateLimitModel, TaskCreate
from dynacron.domain.clock import SettableClock
from dynacron.domain.coordination.limits import host_scope, parse_retry_after
from dynacron.domain.executions.execution import Dispatch, ExecutionStatus
from dynacron.domain.tasks.task import execution_id_for
from dynacron.entry.composition import Dynacron
from dynacron.services.outcomes import Outcome
from tests.integration.api_client import ALICE
from tests.support import Delivery, Sink

BOB = "arn:aws:iam::000000000000:user/bob"
NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)


def one_time(system: Dynacron, clock: SettableClock, tenant: str, url: str, **fields: Any) -> str:
    at = (clock.now() + timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return system.task_service.register(
        tenant, TaskCreate(at=at, handler_url=url, **fields).to_spec()
    ).task_id


def first_attempt(system: Dynacron, task_id: str) -> Outcome:
    """Run the first attempt of ``task_id``'s one occurrence, due by now."""
    task = system.tasks.get(task_id)
    assert task is not None
    assert task.next_run_at is not None
    scheduled = task.next_run_at
    dispatch = Dispatch(execution_id_for(task_id, scheduled), task_id, scheduled, tenant_id=None)
    return system.runner.run(dispatch)


def answering(by_path: dict[str, tuple[int, dict[str, str]]]) -> Any:
    def answer(delivery: Delivery) -> tuple[int, dict[str, str]]:
        return by_path.get(delivery.path, (200, {}))

    return answer


def test_a_huge_retry_after_is_capped_and_the_outcome_written(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock, sink: Sink
) -> None:
    """Finding 5: a Retry-After too big for a date overflowed before the outcome was
    written: the attempt's worker raised, and the message came back again and again."""
    sink.answer = answering({"/a": (429, {"Retry-After": "9" * 40})})
    task_id = one_time(system, clock, ALICE, f"{sink.url}/a", retry={"max_delay_seconds": 600})
    clock.advance(timedelta(seconds=1))
    # When the handler asks to be left alone for longer than dates go
    outcome = first_attempt(system, task_id)
    # Then the failure is recorded and the retry waits the task's longest delay
    assert outcome is Outcome.RETRY_SCHEDULED
    (execution,) = system.executions.list_for_task(task_id, 10, None).items
    assert execution.status is ExecutionStatus.QUEUED
    assert execution.next_attempt_at == clock.now() + timedelta(seconds=600)
    # And the host is paused for this tenant no longer than that either
    paused = DynamoLimitStore(aws[0], system.settings.coordination_table).host(
        host_scope(ALICE, sink.url)
    )
    assert paused.paused_until == clock.now() + timedelta(seconds=600)


def test_the_global_cap_bounds_a_task_that_allows_long_delays(
    aws: tuple[Any, Any], settings: Any, clock: SettableClock, sink: Sink
) -> None:
    """Finding 5: a task whose retries may wait a day is still paused at most
    ``max_retry_after_seconds``."""
    capped = dataclasses.replace(settings, max_retry_after_seconds=120)
    system = Dynacron(capped, dynamodb=aws[0], sqs=aws[1], clock=clock)
    sink.answer = answering({"/a": (429, {"Retry-After": "999999999"})})
    task_id = one_time(system, clock, ALICE, f"{sink.url}/a", retry={"max_delay_seconds": 86400})
    clock.advance(timedelta(seconds=1))
    assert first_attempt(system, task_id) is Outcome.RETRY_SCHEDULED
    (execution,) = system.executions.list_for_task(task_id, 10, None).items
    assert execution.next_attempt_at == clock.now() + timedelta(seconds=120)
    paused = DynamoLimitStore(aws[0], capped.coordination_table).host(host_scope(ALICE, sink.url))
    assert paused.paused_until == clock.now() + timedelta(seconds=120)


def test_one_tenants_retry_after_does_not_pause_a_shared_host_for_another(
    system: Dynacron, clock: SettableClock, sink: Sink
) -> None:
    """Finding 5: a tenant who made a shared host (a chat webhook) answer 429 with
    Retry-After: 999999999 paused that host for every tenant."""
    sink.answer = answering({"/a": (429, {"Retry-After": "999999999"})})
    a_first = one_time(system, clock, ALICE, f"{sink.url}/a")
    a_second = one_time(system, clock, ALICE, f"{sink.url}/a-too")
    b_task = one_time(system, clock, BOB, f"{sink.url}/b")
    clock.advance(timedelta(seconds=1))
    assert first_attempt(system, a_first) is Outcome.RETRY_SCHEDULED
    # Then tenant A waits for the host it made answer 429...
    assert first_attempt(system, a_second) is Outcome.WAITING
    # ...and tenant B, on the same host, is called at once
    assert first_attempt(system, b_task) is Outcome.SUCCEEDED
    assert [d.path for d in sink.snapshot()] == ["/a", "/b"]


def test_one_tenants_failures_do_not_open_the_breaker_for_another(
    system: Dynacron, clock: SettableClock, sink: Sink
) -> None:
    """Finding 5 (breakers): five 503s from tenant A's handler opened the host's
    breaker for every tenant calling that host."""
    sink.answer = answering({"/a": (503, {})})
    threshold = system.settings.breaker_failure_threshold
    a_tasks = [one_time(system, clock, ALICE, f"{sink.url}/a") for _ in range(threshold + 1)]
    b_task = one_time(system, clock, BOB, f"{sink.url}/b")
    clock.advance(timedelta(seconds=1))
    assert {first_attempt(system, t) for t in a_tasks[:threshold]} == {Outcome.RETRY_SCHEDULED}
    assert first_attempt(system, a_tasks[-1]) is Outcome.WAITING  # A's breaker is open
    assert first_attempt(system, b_task) is Outcome.SUCCEEDED


def test_one_tenants_rate_limit_does_not_hold_back_another(
    system: Dynacron, clock: SettableClock, sink: Sink
) -> None:
    """Finding 5 (the same class): a tenant whose task names a rate of one call per
    100 s on a shared host pushed that host's bucket 100 s ahead for everyone."""
    slow = RateLimitModel(per_second=0.01, burst=1)
    a_tasks = [one_time(system, clock, ALICE, sink.url, rate_limit=slow) for _ in range(2)]
    b_task = one_time(
        system, clock, BOB, sink.url, rate_limit=RateLimitModel(per_second=10, burst=1)
    )
    clock.advance(timedelta(seconds=1))
    assert first_attempt(system, a_tasks[0]) is Outcome.SUCCEEDED
    assert first_attempt(system, a_tasks[1]) is Outcome.WAITING
    assert first_attempt(system, b_task) is Outcome.SUCCEEDED


def test_a_queued_attempt_that_waits_keeps_its_pickup_lease(
    system: Dynacron, clock: SettableClock, sink: Sink
) -> None:
    """Finding 5: a worker that waited (here on a paused host) did not extend the
    queued attempt's pickup lease, so the reaper sent the execution again every few
    minutes for as long as the wait lasted."""
    failing_once: list[str] = []

    def answer(delivery: Delivery) -> tuple[int, dict[str, str]]:
        if delivery.path == "/y" and not failing_once:
            failing_once.append("y")
            return 500, {}
        if delivery.path == "/x":
            return 429, {"Retry-After": "3000"}
        return 200, {}

    sink.answer = answer
    retry = {"base_delay_seconds": 1, "max_delay_seconds": 3600}
    y_task = one_time(system, clock, ALICE, f"{sink.url}/y", retry=retry)
    x_task = one_time(system, clock, ALICE, f"{sink.url}/x", retry=retry)
    clock.advance(timedelta(seconds=1))
    # Given Y's second attempt queued, and then the host paused for 3000 s by X
    assert first_attempt(system, y_task) is Outcome.RETRY_SCHEDULED
    (queued,) = system.executions.list_for_task(y_task, 10, None).items
    assert queued.next_attempt_at is not None
    assert first_attempt(system, x_task) is Outcome.RETRY_SCHEDULED
    # When Y's second attempt arrives and must wait for the pause
    clock.set(max(queued.next_attempt_at, clock.now()))
    second = Dispatch(
        queued.execution_id, y_task, queued.scheduled_at, 2, not_before=queued.next_attempt_at
    )
    assert system.runner.run(second) is Outcome.WAITING
    # Then its pickup lease runs from the wait's end, so the reaper leaves it alone
    waiting = system.executions.get(queued.execution_id)
    assert waiting is not None
    assert waiting.status is ExecutionStatus.QUEUED
    assert waiting.next_attempt_at is not None
    assert waiting.next_attempt_at >= clock.now() + timedelta(seconds=2990)
    assert waiting.lease_until == system.settings.lease_terms.pickup_deadline(
        waiting.next_attempt_at
    )
    clock.advance(timedelta(seconds=system.settings.pickup_grace_seconds + 60))
    assert system.lease_reaper.reap().reaped == 0


ASCII_TEXT = st.text(alphabet=string.printable, max_size=60)
HTTP_DATES = st.builds(
    lambda day, month, year, clock, zone: f"{day}, 30 {month} {year} {clock} {zone}",
    st.sampled_from(["Mon", "Tue", "Sun", "Xyz", ""]),
    st.sampled_from(["Nov", "Feb", "Foo"]),
    st.integers(min_value=-10, max_value=200_000).map(str),
    st.from_regex(r"[0-9]{1,3}:[0-9]{1,3}:[0-9]{1,3}", fullmatch=True),
    st.sampled_from(["GMT", "UTC", "+2359", "-2359", "+9999", "", "Z"]),
)
# ASCII digits, and digits and spaces Python's isdigit() and int() take that HTTP does not:
# superscripts, Arabic-Indic, Devanagari, Extended Arabic-Indic, mathematical bold.
DIGITS = st.text(
    alphabet="0123456789\u00b2\u00b3\u0665\u0966\u06f9\U0001d7d7 \t\u00a0\u2003",
    min_size=1,
    max_size=5000,
)


@given(
    value=st.one_of(st.text(max_size=80), ASCII_TEXT, HTTP_DATES, DIGITS),
    now=st.datetimes(timezones=st.just(UTC)),
    cap=st.integers(min_value=-5, max_value=10**9),
)
def test_any_retry_after_text_is_a_bounded_wait_or_none(
    value: str, now: datetime, cap: int
) -> None:
    """Finding 5 and 8: ``Retry-After: ²`` raised ValueError; huge values had no bound."""
    wait = parse_retry_after(value, now, cap)
    assert wait is None or 0 <= wait <= max(cap, 0)


def test_retry_after_forms() -> None:
    cap = 3600
    assert parse_retry_after("30", NOW, cap) == 30
    assert parse_retry_after(" 30\t", NOW, cap) == 30
    assert parse_retry_after("999999999", NOW, cap) == cap
    assert parse_retry_after("Mon, 30 Nov 2026 12:02:00 GMT", NOW, cap) == 120
    assert parse_retry_after("Mon Nov 30 12:02:00 2026", NOW, cap) == 120  # asctime: GMT
    assert parse_retry_after("Mon, 30 Nov 2026 11:00:00 GMT", NOW, cap) == 0  # past
    for nonsense in ("\u00b2", "\u0665", "3\u00a0", "-5", "1.5", "soon", ""):
        assert parse_retry_after(nonsense, NOW, cap) is None
