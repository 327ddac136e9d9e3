"""A hostile tenant at the edge: what it sends is bounded and parsed strictly, and a
refused request leaves nothing behind (issue 12, findings 1 and 8).

Each test names the finding it reproduces. Registration goes through the real API
handler on in-process moto; the domain checks run as the tick and the worker run them.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from dynacron.adapters.delivery.connections import check_handler_url
from dynacron.domain.clock import SettableClock
from dynacron.domain.errors import InvalidRequest
from dynacron.domain.executions.signing import signature_header, verify
from dynacron.domain.instants import compact_instant, format_instant, parse_instant
from dynacron.domain.schedules.expressions import (
    MAX_DURATION_SECONDS,
    CronSchedule,
    FixedDelaySchedule,
    OneTimeSchedule,
    RateSchedule,
    Window,
    check_computable,
    parse_cron,
    parse_rate,
)
from dynacron.domain.schedules.forecast import MAX_PER_TASK, forecast
from dynacron.domain.tasks.task import Task, TaskStatus
from dynacron.domain.tasks.urls import UrlPolicy
from dynacron.entry.composition import Dynacron
from dynacron.entry.settings import Settings
from tests.integration.api_client import call

HOOK = "http://127.0.0.1:9/hook"
END_OF_TIME = datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)


def register(system: Dynacron, **fields: Any) -> tuple[int, Any]:
    return call(system, "POST", "/tasks", {"handler_url": HOOK, **fields})


def refused_on(status: int, body: Any) -> str:
    """The one field a 422 problem names."""
    assert status == 422, body
    assert body["type"] == "about:blank"
    assert body["status"] == 422
    [error] = body["errors"]
    return str(error["field"])


def stored_tasks(system: Dynacron) -> list[Any]:
    status, page = call(system, "GET", "/tasks")
    assert status == 200, page
    return list(page["items"])


def in_ten_seconds(clock: SettableClock) -> str:
    return format_instant(clock.now() + timedelta(seconds=10))


# -- finding 1: durations without an upper bound ---------------------------------


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"rate": "3000000 days"}, "rate"),
        ({"rate": "367 days"}, "rate"),
        ({"rate": "99999999999999999999999 seconds"}, "rate"),
        ({"fixed_delay": "3000000 days"}, "fixed_delay"),
        ({"fixed_delay": "9000 hours"}, "fixed_delay"),
    ],
)
def test_a_duration_past_a_year_is_refused_naming_its_field_and_nothing_is_stored(
    system: Dynacron, clock: SettableClock, fields: dict[str, str], field: str
) -> None:
    """Finding 1: ``"rate": "3000000 days"`` was accepted and overflowed in
    ``next_after`` when it fell due, stopping every task in its shard."""
    extra = {"anchor": in_ten_seconds(clock)} if "rate" in fields else {}
    assert refused_on(*register(system, **fields, **extra)) == field
    assert stored_tasks(system) == []


def test_the_longest_duration_allowed_is_accepted(system: Dynacron) -> None:
    """Finding 1: the bound is 366 days, and it is a bound, not a refusal of long rates."""
    status, task = register(system, rate="366 days")
    assert status == 201, task
    status, task = register(system, fixed_delay="8784 hours")
    assert status == 201, task
    assert MAX_DURATION_SECONDS == 366 * 86400


def test_patch_to_a_poison_rate_is_refused_and_the_task_is_untouched(system: Dynacron) -> None:
    """Finding 1: PATCH recomputes the schedule through the same bounds."""
    status, task = register(system, rate="5 minutes")
    assert status == 201, task
    path = f"/tasks/{task['task_id']}"
    assert refused_on(*call(system, "PATCH", path, {"rate": "3000000 days"})) == "rate"
    assert refused_on(*call(system, "PATCH", path, {"start_at": "0999-01-01T00:00:00Z"})) == (
        "start_at"
    )
    status, after = call(system, "GET", path)
    assert status == 200
    assert after == task


# -- finding 1: instants outside a supported range, stored unpadded ----------------


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"rate": "1 hour", "start_at": "0999-01-01T00:00:00Z"}, "start_at"),
        ({"rate": "1 hour", "anchor": "0999-01-01T00:00:00Z"}, "anchor"),
        ({"rate": "1 hour", "anchor": "0001-01-01T00:00:00+01:00"}, "anchor"),
        ({"cron": "0 * * * *", "end_at": "9999-12-31T23:59:59Z"}, "end_at"),
        ({"cron": "0 * * * *", "start_at": "1969-12-31T23:59:59Z"}, "start_at"),
        ({"at": "3000-01-01T00:00:00Z"}, "at"),
        ({"at": "9999-12-31T23:59:59.999999-05:00"}, "at"),
    ],
)
def test_an_instant_outside_1970_to_2999_is_refused_naming_its_field(
    system: Dynacron, fields: dict[str, str], field: str
) -> None:
    """Finding 1: ``start_at: "0999-01-01T00:00:00Z"`` was stored as ``999-01-01T…``
    and the item could never be read back, so every tick of its shard failed."""
    assert refused_on(*register(system, **fields)) == field
    assert stored_tasks(system) == []


def test_backfill_and_preview_instants_are_bounded_too(system: Dynacron) -> None:
    """Finding 1: every instant the API accepts is range-checked, not only a task's."""
    status, task = register(system, rate="1 hour")
    assert status == 201, task
    path = f"/tasks/{task['task_id']}"
    body = {"from": "0001-01-01T00:00:00Z", "to": "2026-11-30T00:00:00Z"}
    assert refused_on(*call(system, "POST", f"{path}/backfill", body)) == "from"
    status, problem = call(system, "GET", f"{path}/next", after="9999-12-31T00:00:00Z")
    assert refused_on(status, problem) == "after"


@pytest.mark.parametrize(
    "instant",
    [
        datetime(1, 1, 1, tzinfo=UTC),
        datetime(999, 1, 1, 0, 0, 0, 123456, tzinfo=UTC),
        datetime(2026, 11, 30, 3, 4, 5, tzinfo=UTC),
        END_OF_TIME,
    ],
)
def test_every_instant_is_written_in_one_fixed_width_form_and_reads_back(
    instant: datetime,
) -> None:
    """Finding 1: ``strftime("%Y")`` does not pad a year below 1000 on Linux."""
    text = format_instant(instant)
    assert len(text) == len("2026-11-30T03:04:05.000Z")
    assert len(compact_instant(instant)) == len("20261130T030405.000Z")
    assert parse_instant(text) == instant.replace(microsecond=instant.microsecond // 1000 * 1000)


def test_a_stored_instant_that_is_not_fixed_width_is_a_domain_error() -> None:
    """Finding 1: what the old formatter wrote is refused as a domain error, so the
    store's reader can set the item aside instead of failing on a bare ValueError."""
    with pytest.raises(InvalidRequest):
        parse_instant("999-01-01T00:00:00.000Z")


# -- finding 1: next_after never raises ----------------------------------------------


@pytest.mark.parametrize(
    "schedule",
    [
        RateSchedule(every_seconds=3_000_000 * 86400, anchor=datetime(2026, 1, 1, tzinfo=UTC)),
        RateSchedule(every_seconds=366 * 86400, anchor=datetime(9999, 6, 1, tzinfo=UTC)),
        FixedDelaySchedule(delay_seconds=3_000_000 * 86400),
        CronSchedule("0 0 29 2 *", timezone="Pacific/Kiritimati"),
        CronSchedule("* * * * *", timezone="America/New_York"),
        OneTimeSchedule(at=datetime(1, 1, 1, tzinfo=UTC)),
        RateSchedule(
            every_seconds=60,
            anchor=datetime(2026, 1, 1, tzinfo=UTC),
            window=Window(start_at=END_OF_TIME),
        ),
    ],
    ids=["rate-huge", "rate-near-end", "delay-huge", "cron-leap", "cron-ny", "at-min", "window"],
)
def test_next_after_answers_none_at_the_end_of_time_instead_of_raising(schedule: Any) -> None:
    """Finding 1: a schedule written straight into the table (bypassing the API)
    made ``next_after`` raise OverflowError inside the tick; now it has no next
    occurrence, and the tick can complete or set the task aside."""
    for instant in (
        datetime(2026, 11, 30, tzinfo=UTC),
        datetime(9999, 12, 30, tzinfo=UTC),
        END_OF_TIME,
    ):
        following = schedule.next_after(instant)
        assert following is None or following > instant
    assert schedule.next_after(END_OF_TIME) is None


def test_a_schedule_at_the_edge_of_the_range_is_accepted_and_its_occurrences_computed(
    system: Dynacron,
) -> None:
    """Finding 1: registration computes the next occurrences as the tick will; the
    bounds leave every one of them computable and readable back."""
    # The last anchor allowed, with a rate whose second occurrence is past 2999:
    # still within what storage writes in fixed width.
    status, task = register(system, rate="366 days", anchor="2999-12-31T00:00:00Z")
    assert status == 201, task
    status, upcoming = call(system, "GET", f"/tasks/{task['task_id']}/next", count=3)
    assert status == 200, upcoming
    assert upcoming["occurrences"] == [
        "2999-12-31T00:00:00.000Z",
        "3001-01-01T00:00:00.000Z",
        "3002-01-02T00:00:00.000Z",
    ]


@pytest.mark.parametrize(
    "schedule",
    [
        RateSchedule(every_seconds=366 * 86400, anchor=datetime(9999, 6, 1, tzinfo=UTC)),
        CronSchedule("0 0 1 1 *", window=Window(start_at=datetime(9999, 6, 1, tzinfo=UTC))),
    ],
    ids=["rate", "cron"],
)
def test_a_schedule_whose_next_occurrence_cannot_be_computed_is_refused_naming_it(
    schedule: Any,
) -> None:
    """Finding 1: the check registration and PATCH run refuses a recurring schedule
    that runs out of occurrences (past the end of time), naming its kind's field."""
    with pytest.raises(InvalidRequest) as refused:
        check_computable(schedule, datetime(2026, 11, 30, tzinfo=UTC))
    assert refused.value.field == schedule.kind
    # With an end, running out is what the owner asked for.
    bounded = dataclasses.replace(
        schedule, window=dataclasses.replace(schedule.window, end_at=END_OF_TIME)
    )
    check_computable(bounded, datetime(2026, 11, 30, tzinfo=UTC))


# -- finding 8: parsers read ASCII digits and ASCII whitespace only ---------------------


@pytest.mark.parametrize(
    "cron",
    [
        "² * * * *",  # a superscript two: int() refused it, a 500
        "\u0665 * * * *",  # an Arabic-Indic five: read silently as minute 5
        "5\u00a0* * * * *",  # a no-break space: split as a field separator
        "5\u2003*\u2003*\u2003*\u2003*",  # em spaces: five fields to str.split()
        "0 0 \uff11 * *",  # a fullwidth one
    ],
)
def test_a_cron_with_non_ascii_digits_or_spaces_is_a_422_on_cron(
    system: Dynacron, cron: str
) -> None:
    """Finding 8: ``² * * * *`` crashed with a bare ValueError (500), an
    Arabic-Indic five was read as minute 5 and Unicode spaces split the fields."""
    assert refused_on(*register(system, cron=cron)) == "cron"
    assert stored_tasks(system) == []


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"rate": "\u0665 minutes"}, "rate"),
        ({"rate": "5\u2003minutes"}, "rate"),
        ({"rate": "5 \u017feconds"}, "rate"),  # a long s: IGNORECASE took it for 's'
        ({"fixed_delay": "\uff15 minutes"}, "fixed_delay"),
        ({"at": "\uff12\uff10\uff12\uff17-01-01T00:00:00Z"}, "at"),
        ({"rate": "1 hour", "anchor": "2027-01-01T00:00:00\u00a0Z"}, "anchor"),
    ],
)
def test_durations_and_instants_with_non_ascii_characters_are_a_422_naming_the_field(
    system: Dynacron, fields: dict[str, str], field: str
) -> None:
    """Finding 8: every parser, not only cron's."""
    assert refused_on(*register(system, **fields)) == field


@pytest.mark.parametrize("zone", ["Europe", "America", "Europe/Be\u0155lin", "A" * 64])
def test_a_time_zone_that_names_no_zone_is_a_422_on_timezone(system: Dynacron, zone: str) -> None:
    """Found on the way (finding 8's class): ``"timezone": "Europe"`` names a directory
    of the zone database, and ``ZoneInfo`` raised IsADirectoryError: a 500."""
    assert refused_on(*register(system, cron="0 9 * * *", timezone=zone)) == "timezone"


def test_a_payload_nested_past_32_levels_is_a_422_on_payload(
    system: Dynacron, clock: SettableClock
) -> None:
    """Found on the way (a bound on what a caller sends): a payload nested 900 deep
    was accepted, stored, and then failed to serialise in the response (500)."""
    for depth, status in ((31, 201), (32, 422), (900, 422)):
        clock.advance(timedelta(seconds=5))  # clear of the tenant's request rate
        nested = '{"a":' * depth + "{}" + "}" * depth
        raw = f'{{"handler_url": "{HOOK}", "rate": "1 hour", "payload": {nested}}}'
        got, body = call(system, "POST", "/tasks", raw=raw)
        assert got == status, body
        if status == 422:
            assert refused_on(got, body) == "payload"
    assert len(stored_tasks(system)) == 1


def test_a_signature_header_with_a_non_ascii_timestamp_does_not_verify() -> None:
    """Finding 8: ``Dynacron-Signature: t=²`` raised a bare ValueError in ``verify``,
    and a non-ASCII ``v1`` made ``hmac.compare_digest`` raise TypeError."""
    body = b'{"task_id": "t"}'
    good = signature_header(["whsec_x"], 1_700_000_000, body)
    assert verify(good, "whsec_x", body, now=1_700_000_000)
    for header in ("t=²", "t=\u0661\u0667,v1=00", "t=1700000000,v1=\u00e9", f"t={'9' * 5000}"):
        assert verify(header, "whsec_x", body, now=1_700_000_000) is False


def test_a_handler_url_that_is_not_ascii_or_not_a_url_is_a_422(system: Dynacron) -> None:
    """Finding 8: ``http://[::1`` made ``urlsplit`` raise a bare ValueError."""
    for url in ("http://[::1", "http://127.0.0.1:9/h\u00e9", "http://127.0.0.1:9/a b"):
        status, problem = call(system, "POST", "/tasks", {"rate": "1 hour", "handler_url": url})
        assert refused_on(status, problem) == "handler_url"


# -- finding 8: IPv6 translation and tunnelling ranges -------------------------------


TRANSLATED = [
    "64:ff9b::a00:1",  # NAT64 of 10.0.0.1
    "64:ff9b::808:808",  # NAT64 of a public address: still a way through a gateway
    "64:ff9b:1::a9fe:a9fe",  # local-use NAT64 of 169.254.169.254
    "2002:a9fe:a9fe::1",  # 6to4 of 169.254.169.254
    "2001:0:4136:e378:8000:63bf:3fff:fdd2",  # Teredo
    "::a9fe:a9fe",  # IPv4-compatible 169.254.169.254
    "::ffff:a9fe:a9fe",  # IPv4-mapped 169.254.169.254
    "::ffff:0:a00:1",  # IPv4-translated 10.0.0.1
    "fec0::1",  # site-local
]


@pytest.mark.parametrize("address", TRANSLATED)
def test_ipv6_translation_and_tunnelling_addresses_are_not_public(address: str) -> None:
    """Finding 8: NAT64, 6to4, Teredo and IPv4-compatible addresses passed the
    SSRF guard as public (Python's ``is_global`` says True for several)."""
    policy = UrlPolicy()
    assert not policy.allows(ipaddress.ip_address(address))
    with pytest.raises(InvalidRequest) as literal:
        check_handler_url(policy, _no_dns, f"http://[{address}]/hook")
    assert literal.value.field == "handler_url"

    # The same through a name: the resolver (injected; no DNS query leaves the
    # machine) answers with the translated address.
    with pytest.raises(InvalidRequest) as named:
        check_handler_url(policy, lambda host, port: [address], "https://hooks.invalid/x")
    assert named.value.field == "handler_url"


def test_ordinary_public_addresses_stay_allowed() -> None:
    """Finding 8: the refusal is of the ranges, not of IPv6."""
    policy = UrlPolicy()
    for address in ("2606:4700:4700::1111", "2a00:1450:4001::1", "8.8.8.8"):
        assert policy.allows(ipaddress.ip_address(address))


def _no_dns(host: str, port: int) -> list[str]:
    raise AssertionError(f"a literal address needs no lookup, yet {host!r} was resolved")


# -- finding 8: the forecast's work is bounded -------------------------------------


@dataclasses.dataclass(frozen=True)
class CountingRate:
    """A rate schedule that counts how often the forecast asks it for an occurrence."""

    inner: RateSchedule
    calls: list[int]
    kind: str = "rate"

    @property
    def window(self) -> Window:
        return self.inner.window

    def next_after(self, instant: datetime) -> datetime | None:
        self.calls.append(1)
        return self.inner.next_after(instant)


def _task(task_id: str, schedule: Any, next_run_at: datetime, now: datetime) -> Task:
    return Task(
        task_id=task_id,
        name=task_id,
        schedule=schedule,
        handler_url=HOOK,
        payload={},
        status=TaskStatus.ACTIVE,
        next_run_at=next_run_at,
        created_at=now,
        updated_at=now,
    )


def test_a_per_second_task_counts_at_most_its_share_and_says_incomplete() -> None:
    """Finding 8: ``GET /forecast`` counted up to 1 M occurrences (30-40 s, past the
    API's 29 s); one per-second task alone was 86,400 of them."""
    now = datetime(2026, 11, 30, 12, tzinfo=UTC)
    every_second = parse_rate("1 second", anchor=now)
    result = forecast([_task("s", every_second, now, now)], now, 24 * 60, 1_000_000)
    assert not result.complete
    assert sum(result.per_minute.values()) == MAX_PER_TASK


def test_the_budget_counts_every_occurrence_computed_not_only_those_counted() -> None:
    """Finding 8: occurrences were computed 64 at a time, so 20,000 daily tasks
    cost 1.28 M occurrences for 20,000 counted."""
    now = datetime(2026, 11, 30, 12, tzinfo=UTC)
    calls: list[int] = []
    daily = CountingRate(parse_rate("1 day", anchor=now + timedelta(minutes=5)), calls)
    tasks = [_task(f"d{i}", daily, now + timedelta(minutes=5), now) for i in range(500)]
    result = forecast(tasks, now, 60, 1_000_000)
    assert result.complete
    assert sum(result.per_minute.values()) == 500
    # One occurrence in the hour each, and one more asked to see it is past the end.
    assert len(calls) == 500


def test_the_default_forecast_budget_fits_the_api_timeout() -> None:
    """Finding 8: the default budget was 1,000,000 occurrences, 50-100 µs each for a
    per-second cron on a whole vCPU (see docs/limits.md): far past a 29 s timeout."""
    assert Settings.forecast_max_occurrences <= 30_000


def test_a_cron_with_seconds_is_bounded_by_the_forecast_budget() -> None:
    """Finding 8: the total budget holds across tasks, each under its own cap."""
    now = datetime(2026, 11, 30, 12, tzinfo=UTC)
    cron = parse_cron("* * * * * *")
    first = cron.next_after(now)
    assert first is not None
    tasks = [_task(f"c{i}", cron, first, now) for i in range(5)]
    result = forecast(tasks, now, 60, 5000)
    assert not result.complete
    assert sum(result.per_minute.values()) == 5000


def test_patch_of_a_task_stored_before_the_bounds_is_a_422_naming_the_stored_field(
    system: Dynacron, aws: tuple[Any, Any], clock: SettableClock
) -> None:
    """Found on the way: PATCH validates the stored fields overlaid with the patch; a
    stored value over today's bounds (a payload nested 40 deep, written before the
    bound) raised a bare pydantic ValidationError inside the service: a 500."""
    status, task = register(system, rate="1 hour")
    assert status == 201, task
    dynamodb, _ = aws
    deep = '{"a":' * 40 + "{}" + "}" * 40
    dynamodb.update_item(
        TableName=system.settings.tasks_table,
        Key={"task_id": {"S": task["task_id"]}},
        UpdateExpression="SET payload = :p",
        ExpressionAttributeValues={":p": {"S": deep}},
    )
    path = f"/tasks/{task['task_id']}"
    assert refused_on(*call(system, "PATCH", path, {"name": "renamed"})) == "payload"
    # The patch that replaces the value goes through.
    clock.advance(timedelta(seconds=5))
    status, patched = call(system, "PATCH", path, {"name": "renamed", "payload": {"ok": 1}})
    assert status == 200, patched
    assert patched["payload"] == {"ok": 1}
