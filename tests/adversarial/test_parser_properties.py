"""Every parser at the edge, fed any text: a value, or the domain's own validation
error, never anything else (issue 12, finding 8 and "Must have": parsers).

The strategies mix what a hostile or careless caller sends: ASCII digits next to
digits of other scripts (superscripts, Arabic-Indic, fullwidth), Unicode spaces
next to ASCII ones, very long numbers, and fragments of valid syntax.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dynacron.adapters.delivery.connections import check_handler_url
from dynacron.domain.clock import SettableClock
from dynacron.domain.errors import InvalidRequest
from dynacron.domain.executions.signing import parse_timestamp, verify
from dynacron.domain.instants import EARLIEST, LATEST, format_instant, parse_instant
from dynacron.domain.schedules.cron import compile_cron
from dynacron.domain.schedules.expressions import (
    MAX_DURATION_SECONDS,
    CronSchedule,
    RateSchedule,
    Window,
    load_zone,
    parse_cron,
    parse_duration,
    parse_local_instant,
    upcoming,
)
from dynacron.domain.tasks.urls import UrlPolicy
from dynacron.entry.composition import Dynacron
from tests.integration.api_client import call

NON_ASCII_DIGITS = "²³¹\u0660\u0665\u06f5\u0966\u096b\uff10\uff15\U0001d7d8\u2155\u2164"
UNICODE_SPACES = "\u00a0\u1680\u2000\u2003\u2009\u200b\u202f\u205f\u3000\u0085\u2028\x1c\x1f"
ASCII_SPACES = " \t\n\r\x0b\x0c"
CRON_SYNTAX = "0123456789*/,-?LW#H() "
T = TypeVar("T")
# Values each schedule field accepts (on 2026-11-30, the tests' clock), among the hostile ones.
VALID = {
    "cron": ["0 9 * * MON-FRI", "H * * * *", "@daily", "0 0 L * *", "0 30 9 * * 1#2"],
    "rate": ["5 minutes", "1 second", "366 days", " 2 HOURS "],
    "fixed_delay": ["30 seconds", "1 day", "8784 hours"],
    "at": ["2026-12-01T09:00:00Z", "2999-12-31T23:59:59.999Z", "2027-03-28T02:30:00"],
    "start_at": ["2026-12-01T00:00:00Z", "2999-01-01T00:00:00+14:00"],
    "anchor": ["2026-12-01T00:07:00Z", "1970-01-01T00:00:00Z"],
    "timezone": ["Europe/Berlin", "Asia/Kathmandu", "UTC"],
}
ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Pacific/Kiritimati"]

PROPERTY = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)

LONG_S, KELVIN = "\u017f", "\u212a"  # IGNORECASE without re.ASCII takes them for s and k
hostile_characters = st.sampled_from(
    [
        *(NON_ASCII_DIGITS + UNICODE_SPACES + ASCII_SPACES + CRON_SYNTAX),
        *("MON", "JAN", "L-", "@daily", "@", "\x00", "\u00e9", LONG_S, KELVIN),
    ]
)
hostile_text = st.one_of(
    st.text(max_size=60),
    st.lists(hostile_characters, max_size=30).map("".join),
    st.integers(min_value=0).map(str) | st.just("9" * 5000),
)


def _cron_like() -> st.SearchStrategy[str]:
    field = st.lists(hostile_characters, min_size=1, max_size=6).map("".join)
    separator = st.sampled_from([" ", "  ", "\t", *UNICODE_SPACES])
    return st.lists(st.tuples(field, separator), min_size=4, max_size=7).map(
        lambda parts: "".join(f + s for f, s in parts)
    )


def _duration_like() -> st.SearchStrategy[str]:
    number = st.one_of(
        st.integers(min_value=0, max_value=10**30).map(str),
        st.lists(st.sampled_from(list("0123456789" + NON_ASCII_DIGITS)), min_size=1).map("".join),
    )
    unit = st.sampled_from(
        ["second", "seconds", "MINUTES", "hour", "days", f"{LONG_S}econds", f"day{LONG_S}", "weeks"]
    )
    space = st.sampled_from([" ", "\t", "  ", *UNICODE_SPACES])
    return st.tuples(space | st.just(""), number, space, unit, space | st.just("")).map("".join)


def _instant_like() -> st.SearchStrategy[str]:
    digit = st.sampled_from(list("0123456789" + NON_ASCII_DIGITS))
    year = st.one_of(
        st.integers(min_value=0, max_value=99999).map(lambda y: f"{y:04d}"),
        st.lists(digit, min_size=4, max_size=4).map("".join),
    )
    rest = st.sampled_from(
        ["-01-01T00:00:00Z", "-12-31T23:59:59.999999+14:00", "-06-15T12:00:00-12:00", "-03-08"]
    )
    return st.tuples(year, rest).map("".join)


def _url_like() -> st.SearchStrategy[str]:
    host = st.one_of(
        st.sampled_from(
            [
                "127.0.0.1",
                "[::1]",
                "[64:ff9b::a00:1]",
                "[::ffff:127.0.0.1]",
                "[",
                "[fe80::1%25eth0]",
                "localhost",
                "xn--nxasmq6b",
                "ex\u00e4mple",
                "127.0.0.1:99999",
                "127.0.0.1:\u0661",
                "user:pass@127.0.0.1",
            ]
        ),
        st.text(max_size=20),
    )
    scheme = st.sampled_from(["http://", "https://", "ftp://", "", "http:/", "HTTP://"])
    path = st.text(max_size=20)
    return st.tuples(scheme, host, path).map("".join)


def attempt(parse: Callable[[], T]) -> T | InvalidRequest:
    """What ``parse`` returns, or the domain's validation error it raised; any other
    exception propagates and fails the property."""
    try:
        return parse()
    except InvalidRequest as error:
        return error


@PROPERTY
@given(text=hostile_text | _cron_like())
def test_cron_parses_or_raises_invalid_schedule(text: str) -> None:
    """Finding 8: ``² * * * *`` raised a bare ValueError; an Arabic-Indic five read as 5."""
    spec = attempt(lambda: compile_cron(text, seed="task-1"))
    if isinstance(spec, InvalidRequest):
        assert spec.field == "cron"
        return
    assert text.isascii()
    # What parsed can be followed, from any instant, without raising.
    schedule = parse_cron(text, seed="task-1")
    assert spec.fires()
    for instant in (datetime(2026, 11, 30, tzinfo=UTC), datetime(9999, 12, 31, tzinfo=UTC)):
        upcoming(schedule, instant, 2)


@PROPERTY
@given(text=hostile_text | _duration_like(), field=st.sampled_from(["rate", "fixed_delay"]))
def test_a_duration_parses_within_bounds_or_raises_invalid_schedule(text: str, field: str) -> None:
    """Finding 1 and 8: no upper bound, and Unicode digits and spaces got through."""
    seconds = attempt(lambda: parse_duration(field, text))
    if isinstance(seconds, InvalidRequest):
        assert seconds.field == field
        return
    assert text.isascii()
    assert 1 <= seconds <= MAX_DURATION_SECONDS


@PROPERTY
@given(text=hostile_text | _instant_like(), zone=st.sampled_from(ZONES))
def test_an_instant_parses_within_range_or_raises_invalid_schedule(text: str, zone: str) -> None:
    """Finding 1 and 8: years outside the range were stored unreadable."""
    instant = attempt(lambda: parse_local_instant("start_at", text, zone))
    if isinstance(instant, InvalidRequest):
        assert instant.field == "start_at"
        return
    assert text.isascii()
    assert EARLIEST <= instant <= LATEST
    assert parse_instant(format_instant(instant)) == instant


@PROPERTY
@given(text=hostile_text | _instant_like())
def test_a_stored_instant_parses_or_raises_invalid_request(text: str) -> None:
    """Finding 1: reading a stored instant never fails with anything but the domain's error."""
    instant = attempt(lambda: parse_instant(text))
    assert isinstance(instant, InvalidRequest) or instant.tzinfo is not None


@PROPERTY
@given(instant=st.datetimes(timezones=st.just(UTC)))
def test_every_instant_formats_to_one_fixed_width_and_reads_back(instant: datetime) -> None:
    """Finding 1: years below 1000 were written without their leading zeros."""
    text = format_instant(instant)
    assert len(text) == 24
    assert parse_instant(text) == instant.replace(microsecond=instant.microsecond // 1000 * 1000)


@PROPERTY
@given(
    every_seconds=st.integers(min_value=1, max_value=10**12),
    anchor=st.datetimes(timezones=st.just(UTC)),
    instant=st.datetimes(timezones=st.just(UTC)),
    start=st.none() | st.datetimes(timezones=st.just(UTC)),
)
def test_a_rate_never_raises_whatever_its_numbers(
    every_seconds: int, anchor: datetime, instant: datetime, start: datetime | None
) -> None:
    """Finding 1: ``next_after`` overflowed inside the tick; at the end of time it is None."""
    schedule = RateSchedule(every_seconds, anchor, Window(start_at=start))
    following = schedule.next_after(instant)
    assert following is None or following > instant


@PROPERTY
@given(
    expression=st.sampled_from(["* * * * *", "0 0 29 2 *", "59 23 31 12 *", "0 0 * * 5L"]),
    zone=st.sampled_from(ZONES),
    instant=st.datetimes(
        min_value=datetime(1, 1, 2),  # noqa: DTZ001 -- hypothesis bounds are naive
        max_value=datetime(9999, 12, 30),  # noqa: DTZ001
        timezones=st.just(UTC),
    ),
)
def test_a_cron_never_raises_at_any_instant(expression: str, zone: str, instant: datetime) -> None:
    """Finding 1: a search past the year 9999 raised ValueError; now it ends."""
    following = CronSchedule(expression, timezone=zone).next_after(instant)
    assert following is None or following > instant


@PROPERTY
@given(header=hostile_text | st.tuples(st.just("t="), hostile_text).map("".join))
def test_a_signature_header_verifies_or_not_and_never_raises(header: str) -> None:
    """Finding 8: ``Dynacron-Signature: t=²`` raised a bare ValueError."""
    assert verify(header, "whsec_test", b"{}", now=1_700_000_000) in (True, False)
    timestamp = parse_timestamp(header)
    assert timestamp is None or timestamp >= 0


@PROPERTY
@given(url=hostile_text | _url_like(), public=st.booleans())
def test_a_handler_url_is_allowed_or_refused_as_invalid_request(url: str, public: bool) -> None:
    """Finding 8: ``http://[`` made ``urlsplit`` raise a bare ValueError."""
    policy = UrlPolicy() if public else UrlPolicy(("127.0.0.0/8", "::1/128"))
    # The resolver is injected: a name "resolves" to loopback, no query leaves.
    refused = attempt(lambda: check_handler_url(policy, lambda host, port: ["127.0.0.1"], url))
    if isinstance(refused, InvalidRequest):
        assert refused.field == "handler_url"
        return
    assert url.isascii()
    if public:  # loopback is refused by name and by number: only a public literal passes
        address = policy.literal_address(policy.check_url(url)[0])
        assert address is not None
        assert policy.allows(address)


@PROPERTY
@given(name=hostile_text | st.sampled_from(["Europe", "America/", "posixrules", "Etc/GMT+5"]))
def test_a_time_zone_loads_or_raises_invalid_schedule(name: str) -> None:
    """Found on the way: a directory of the zone database ('Europe') raised
    IsADirectoryError, a 500."""
    zone = attempt(lambda: load_zone(name))
    assert isinstance(zone, InvalidRequest) or zone.key == name


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(kind=st.sampled_from(sorted(VALID)), data=st.data())
def test_registration_answers_201_or_a_422_naming_the_field_never_a_500(
    system: Dynacron, clock: SettableClock, kind: str, data: st.DataObject
) -> None:
    """Finding 1 and 8 end to end: whatever text a schedule field carries, the API
    stores a task or refuses it naming that field; nothing else."""
    text = data.draw(
        st.sampled_from(VALID[kind])
        | hostile_text
        | _cron_like()
        | _duration_like()
        | _instant_like()
    )
    clock.advance(timedelta(seconds=5))  # clear of the tenant's request rate
    body: dict[str, str] = {"handler_url": "http://127.0.0.1:9/hook"}
    if kind in ("start_at", "anchor", "timezone"):
        body["rate"] = "1 hour"
    body[kind] = text
    status, answer = call(system, "POST", "/tasks", body)
    assert status in (201, 422), answer
    if status == 422:
        assert {e["field"] for e in answer["errors"]} == {kind}, answer


def test_the_strategies_reach_both_outcomes() -> None:
    """The properties above are not vacuous: each parser accepts some inputs."""
    assert compile_cron("H * * * *", seed="t").fires()
    assert parse_duration("rate", " 366 days ") == MAX_DURATION_SECONDS
    assert parse_local_instant("at", "2999-12-31T23:59:59.999Z") == LATEST
    assert parse_timestamp("t=1700000000,v1=ab") == 1_700_000_000
    check_handler_url(UrlPolicy(("127.0.0.0/8",)), lambda h, p: ["127.0.0.1"], "http://localhost/")
    assert timedelta(days=365 * 1000) < LATEST - EARLIEST
