"""Elastic tick capacity (decision 0025): a looping tick hands large pages of due
tasks to claim invocations, and nothing is lost when one fails or never runs.

moto's Lambda needs Docker to run code, so the Lambda client is a stand-in at the
port's edge: it decodes the ``Invoke`` the real adapter (``LambdaDuePageHandOut``)
makes and runs ``Dynacron.claim`` in-process with that event, as the deployed claim
function would (a second ``Dynacron``, its own Ticker, the same moto tables).
The adapter's request itself is checked against botocore's Stubber.
"""

from __future__ import annotations

import dataclasses
import io
import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from dynacron.adapters.aws.due_page_hand_out import ClaimNotQueued, LambdaDuePageHandOut
from dynacron.adapters.aws.task_items import task_to_item
from dynacron.adapters.due_page_events import InvalidClaimEvent, page_from_event
from dynacron.domain.clock import SettableClock
from dynacron.domain.schedules.expressions import OneTimeSchedule
from dynacron.domain.tasks.task import Task, TaskStatus, due_bucket_key
from dynacron.entry.composition import Dynacron
from dynacron.entry.settings import LOOPBACK_NETWORKS, Settings
from dynacron.local.aws import REGION, provision
from dynacron.ports import DuePage
from dynacron.ports.faults import Boundary
from tests.conftest import sleep_moving
from tests.support import FakeLambdaContext

CLAIM_FUNCTION = "arn:aws:lambda:us-east-1:123456789012:function:dynacron-claim"
# The stack is provisioned (the shard's cursor at 12:00), a burst falls due at 12:10,
# and the tick runs at 13:30: the burst's bucket is settled, so the cursor could
# pass it once it is drained.
PROVISIONED = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
DUE = datetime(2026, 11, 30, 12, 10, tzinfo=UTC)
TICK_AT = datetime(2026, 11, 30, 13, 30, tzinfo=UTC)
# Pages of 10 (not 100) keep moto quick; a page of 5 or more is handed out.
PAGE = 10
FANOUT_MIN_TASKS = 5


class LambdaStandIn:
    """A Lambda client's ``invoke`` for asynchronous invocations: each event is
    decoded and run by ``claimer.claim`` at once (``run``), queued and never run
    (``run=False``), or refused as a throttled Invoke (``refuse``)."""

    def __init__(self, claimer: Dynacron) -> None:
        self.claimer = claimer
        self.events: list[dict[str, Any]] = []
        self.run = True
        self.refuse = False

    def invoke(self, *, FunctionName: str, InvocationType: str, Payload: bytes) -> dict[str, Any]:
        assert (FunctionName, InvocationType) == (CLAIM_FUNCTION, "Event")
        if self.refuse:
            raise ClientError(
                {"Error": {"Code": "TooManyRequestsException", "Message": "Rate exceeded"}},
                "Invoke",
            )
        event = json.loads(Payload)
        self.events.append(event)
        if self.run:
            self.claimer.claim(event, FakeLambdaContext("claim-" + uuid.uuid4().hex[:8]))
        return {"StatusCode": 202, "Payload": io.BytesIO(b"")}


@dataclasses.dataclass
class Elastic:
    tick: Dynacron
    claimer: Dynacron
    lambda_: LambdaStandIn
    clock: SettableClock
    aws: tuple[Any, Any]

    @property
    def settings(self) -> Settings:
        return self.tick.settings


def make_elastic(aws: tuple[Any, Any], **tick_settings: Any) -> Elastic:
    """A looping tick's Dynacron whose claim function is a ``LambdaStandIn``;
    ``tick_settings`` replace the tick's settings."""
    dynamodb, sqs = aws
    clock = SettableClock(PROVISIONED)
    settings = provision(
        dynamodb,
        sqs,
        clock=clock,
        shard_count=1,
        delivery_allow_networks=LOOPBACK_NETWORKS,
        tick_page_size=PAGE,
        tick_fanout_min_tasks=FANOUT_MIN_TASKS,
    )
    clock.set(TICK_AT)
    claimer = Dynacron(settings, dynamodb=dynamodb, sqs=sqs, clock=clock)
    stand_in = LambdaStandIn(claimer)
    tick = Dynacron(
        dataclasses.replace(settings, claim_function=CLAIM_FUNCTION, **tick_settings),
        dynamodb=dynamodb,
        sqs=sqs,
        clock=clock,
        page_claims=LambdaDuePageHandOut(stand_in, CLAIM_FUNCTION),
        # The looping tick waits by moving the clock
        sleep=sleep_moving(clock),
    )
    return Elastic(tick, claimer, stand_in, clock, aws)


@pytest.fixture
def elastic(aws: tuple[Any, Any]) -> Elastic:
    return make_elastic(aws)


def put_due_tasks(
    elastic: Elastic, count: int, due: datetime = DUE, filed_at: datetime = DUE
) -> list[str]:
    """``count`` one-time tasks due at ``due``, filed as the API would at ``filed_at``."""
    dynamodb, _ = elastic.aws
    settings = elastic.settings
    ids = []
    for start in range(0, count, 25):
        items = []
        for _ in range(min(25, count - start)):
            task = Task(
                task_id=uuid.uuid4().hex,
                name="burst",
                schedule=OneTimeSchedule(at=due),
                handler_url="http://127.0.0.1:9/",
                payload={},
                status=TaskStatus.ACTIVE,
                next_run_at=due,
                created_at=due,
                updated_at=due,
            )
            placement = settings.sharding.place(task.task_id, due, filed_at)
            items.append({"PutRequest": {"Item": task_to_item(task, placement)}})
            ids.append(task.task_id)
        dynamodb.batch_write_item(RequestItems={settings.tasks_table: items})
    return ids


def still_due(elastic: Elastic) -> list[str]:
    """Task ids due in the due index, in the buckets the tests file tasks in."""
    sharding, now = elastic.settings.sharding, elastic.clock.now()
    ids: list[str] = []
    for bucket in sorted({sharding.bucket(DUE), sharding.bucket(now)}):
        start_key = None
        while True:
            page, start_key = elastic.tick.tasks.due_task_ids(
                due_bucket_key(bucket, 0), now, 100, start_key
            )
            ids += page
            if start_key is None:
                break
    return ids


def sent_execution_ids(elastic: Elastic) -> list[str]:
    """Every message on the dispatch queue (received and left there), by execution id."""
    _, sqs = elastic.aws
    ids: list[str] = []
    while batch := sqs.receive_message(
        QueueUrl=elastic.settings.dispatch_queue_url,
        MaxNumberOfMessages=10,
        VisibilityTimeout=600,
    ).get("Messages", []):
        ids += [json.loads(m["Body"])["execution_id"] for m in batch]
    return ids


def tick(elastic: Elastic) -> Any:
    return elastic.tick.ticker.tick_shard(0)


def test_a_burst_of_several_pages_is_claimed_in_full_by_claim_invocations(
    elastic: Elastic,
) -> None:
    # Given 35 tasks due at once in one shard: four pages of the due index
    ids = put_due_tasks(elastic, 35)

    # When the looping tick ticks once
    report = tick(elastic)

    # Then it handed out every page (10, 10, 10, 5) and claimed none itself
    assert [len(e["task_ids"]) for e in elastic.lambda_.events] == [10, 10, 10, 5]
    assert all(e["shard"] == 0 for e in elastic.lambda_.events)
    assert (report.handed_out, report.pages_handed_out, report.claimed) == (35, 4, 0)
    # ...and the claim invocations claimed each task once and sent each execution once
    assert still_due(elastic) == []
    sent = sent_execution_ids(elastic)
    assert len(sent) == len(set(sent)) == 35
    for task_id in ids[:5]:
        task = elastic.tick.tasks.get(task_id)
        assert task is not None
        assert task.status is TaskStatus.COMPLETED


def test_below_the_threshold_the_tick_claims_itself_and_past_the_cap_it_waits(
    aws: tuple[Any, Any],
) -> None:
    elastic = make_elastic(aws, tick_fanout_max_pages=2)
    put_due_tasks(elastic, 4)
    # A page under the threshold (5) is claimed by the tick itself
    small = tick(elastic)
    assert (small.pages_handed_out, small.claimed) == (0, 4)

    put_due_tasks(elastic, 34, filed_at=elastic.clock.now())
    elastic.clock.advance(timedelta(seconds=1))
    first = tick(elastic)
    # Two pages handed out (the cap); the third, large, waits for the next tick
    assert (first.pages_handed_out, first.handed_out, first.claimed) == (2, 20, 0)
    assert len(still_due(elastic)) == 14
    elastic.clock.advance(timedelta(seconds=1))
    second = tick(elastic)
    # ...which hands it out, and the last page (4) after it too (the cap has room)
    assert (second.pages_handed_out, second.handed_out, second.claimed) == (2, 14, 0)
    assert still_due(elastic) == []
    assert len(set(sent_execution_ids(elastic))) == 38


def test_the_rest_of_a_large_find_is_handed_out_too_not_claimed_by_the_tick(
    aws: tuple[Any, Any],
) -> None:
    # Given 23 tasks due at once: two full pages and the rest (3), under the threshold
    elastic = make_elastic(aws, tick_fanout_max_pages=3)
    put_due_tasks(elastic, 23)
    # When the looping tick ticks once
    report = tick(elastic)
    # Then the rest goes to a claim invocation as well: claiming it itself would hold
    # the shard's next tick back
    assert [len(e["task_ids"]) for e in elastic.lambda_.events] == [10, 10, 3]
    assert (report.pages_handed_out, report.handed_out, report.claimed) == (3, 23, 0)
    assert still_due(elastic) == []
    # And with the cap reached, a small page after it is claimed by the tick itself
    put_due_tasks(elastic, 33, filed_at=elastic.clock.now())
    elastic.clock.advance(timedelta(seconds=1))
    capped = tick(elastic)
    assert (capped.pages_handed_out, capped.handed_out) == (3, 30)
    assert capped.claimed == 3
    assert still_due(elastic) == []
    assert len(set(sent_execution_ids(elastic))) == 56


def test_the_deployed_looping_tick_hands_a_burst_out_and_reports_it(elastic: Elastic) -> None:
    # Given a burst of three pages, and a looping tick invocation with 20 s left
    # (it stops 15 s before Lambda would stop it: five ticks)
    put_due_tasks(elastic, 25)

    ended = elastic.tick.tick({"shard": 0, "loop": True}, FakeLambdaContext("loop", 20_000))

    assert ended["ticks"] >= 4
    assert (ended["handed_out"], ended["claimed"]) == (25, 0)
    assert [len(e["task_ids"]) for e in elastic.lambda_.events] == [10, 10, 5]
    assert still_due(elastic) == []


def test_a_page_whose_invocation_is_refused_is_claimed_by_the_tick(elastic: Elastic) -> None:
    put_due_tasks(elastic, 15)
    elastic.lambda_.refuse = True

    report = tick(elastic)

    # Lambda refused the Invoke (throttled): the tick claimed both pages itself
    assert (report.handed_out, report.claimed) == (0, 15)
    assert still_due(elastic) == []


def test_a_page_whose_invocation_never_runs_is_found_again_and_not_handed_out_while_fresh(
    elastic: Elastic,
) -> None:
    # Given a burst in an old, settled bucket, and claim invocations that never run
    put_due_tasks(elastic, 25)
    elastic.lambda_.run = False
    first = tick(elastic)
    assert first.pages_handed_out == 3
    # Then the cursor does not pass the bucket whose pages are out, unclaimed
    bucket = elastic.settings.sharding.bucket(DUE)
    assert first.cursor is not None
    assert first.cursor <= bucket
    assert len(still_due(elastic)) == 25

    # When the tick runs again while the hand-outs are fresh: nothing is handed
    # out again, nothing claimed twice, and the cursor still waits
    for _ in range(int(elastic.settings.tick_fanout_fresh_seconds) - 1):
        elastic.clock.advance(timedelta(seconds=1))
        again = tick(elastic)
        assert (again.pages_handed_out, again.claimed, again.still_handed_out) == (0, 0, 25)
        assert again.cursor is not None
        assert again.cursor <= bucket
    assert len(elastic.lambda_.events) == 3

    # When the hand-outs are stale, the tasks still due are handed out again, and
    # this time the invocations run: everything is claimed, each task once
    elastic.clock.advance(timedelta(seconds=2))
    elastic.lambda_.run = True
    later = tick(elastic)
    assert later.pages_handed_out == 3
    assert len(elastic.lambda_.events) == 6
    assert still_due(elastic) == []
    assert len(set(sent_execution_ids(elastic))) == 25
    # ...and the next tick moves the cursor past the drained bucket
    elastic.clock.advance(timedelta(seconds=1))
    passed = tick(elastic).cursor
    assert passed is not None
    assert passed > bucket


def test_two_claimers_of_the_same_page_claim_each_task_once(elastic: Elastic) -> None:
    # Given a page of 10 due tasks and two claim invocations of it, the second
    # running in full between the first's sends and its claims (its worst moment)
    ids = put_due_tasks(elastic, 10)
    event = {"shard": 0, "task_ids": ids}
    dynamodb, sqs = elastic.aws
    second = Dynacron(elastic.settings, dynamodb=dynamodb, sqs=sqs, clock=elastic.clock)
    results: list[dict[str, Any]] = []

    class SecondClaimerRuns:
        def reached(self, boundary: Boundary) -> None:
            if boundary is Boundary.TICK_SENT_NOT_CLAIMED and not results:
                results.append(second.claim(event, FakeLambdaContext("second")))

    first_claimer = Dynacron(
        elastic.settings,
        dynamodb=dynamodb,
        sqs=sqs,
        clock=elastic.clock,
        faults=SecondClaimerRuns(),
    )

    # When both claim it
    first = first_claimer.claim(event, FakeLambdaContext("first"))

    # Then each task was claimed exactly once: the second won every claim, the
    # first lost every race after sending duplicates with the same execution ids
    assert results[0]["claimed"] == 10
    assert (first["claimed"], first["lost_races"]) == (0, 10)
    sent = sent_execution_ids(elastic)
    assert len(sent) == 20
    assert len(set(sent)) == 10
    assert still_due(elastic) == []


def test_a_poison_task_in_a_handed_out_page_is_set_aside_and_the_rest_claimed(
    elastic: Elastic,
) -> None:
    ids = put_due_tasks(elastic, 8)
    dynamodb, _ = elastic.aws
    poison = ids[3]
    dynamodb.update_item(
        TableName=elastic.settings.tasks_table,
        Key={"task_id": {"S": poison}},
        UpdateExpression="SET #schedule = :lunar",
        ExpressionAttributeNames={"#schedule": "schedule"},
        ExpressionAttributeValues={":lunar": {"M": {"kind": {"S": "lunar"}}}},
    )

    report = tick(elastic)

    assert report.pages_handed_out == 1
    assert still_due(elastic) == []
    assert len(set(sent_execution_ids(elastic))) == 7
    item = dynamodb.get_item(TableName=elastic.settings.tasks_table, Key={"task_id": {"S": poison}})
    assert item["Item"]["status"]["S"] == TaskStatus.ERROR.value


def test_a_claim_of_tasks_no_longer_due_sends_nothing(elastic: Elastic) -> None:
    # A late (retried, throttled) invocation of a page the tick claimed meanwhile
    ids = put_due_tasks(elastic, 6)
    elastic.lambda_.run = False
    tick(elastic)
    (event,) = elastic.lambda_.events
    elastic.claimer.claim(event, FakeLambdaContext("on-time"))
    assert len(sent_execution_ids(elastic)) == 6

    late = elastic.claimer.claim(event, FakeLambdaContext("late"))

    assert (late["claimed"], late["lost_races"]) == (0, 0)
    # Nothing new on the queue (the first 6 were received and are invisible)
    assert sent_execution_ids(elastic) == []
    assert still_due(elastic) == []
    assert len(ids) == 6


def test_a_claim_event_that_is_not_a_page_is_refused_by_name() -> None:
    assert page_from_event({"shard": 2, "task_ids": ["a", "b"]}) == DuePage(2, ("a", "b"))
    for event in (
        {"task_ids": ["a"]},
        {"shard": "0", "task_ids": ["a"]},
        {"shard": 0, "task_ids": "a"},
        {"shard": 0, "task_ids": [""]},
        {"shard": 0, "task_ids": ["a"] * 1001},
    ):
        with pytest.raises(InvalidClaimEvent):
            page_from_event(event)


# The AWS adapter's request, against botocore's own model of Lambda


@pytest.fixture
def lambda_client() -> Iterator[tuple[Any, Stubber]]:
    client = boto3.client(
        "lambda", region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="t"
    )
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


def test_the_adapter_invokes_the_claim_function_asynchronously(
    lambda_client: tuple[Any, Stubber],
) -> None:
    client, stubber = lambda_client
    page = DuePage(shard=3, task_ids=("t1", "t2"))
    stubber.add_response(
        "invoke",
        {"StatusCode": 202},
        {
            "FunctionName": CLAIM_FUNCTION,
            "InvocationType": "Event",
            "Payload": json.dumps({"shard": 3, "task_ids": ["t1", "t2"]}).encode(),
        },
    )
    LambdaDuePageHandOut(client, CLAIM_FUNCTION).hand_out(page)


def test_the_adapter_raises_when_lambda_does_not_queue_the_event(
    lambda_client: tuple[Any, Stubber],
) -> None:
    client, stubber = lambda_client
    claims = LambdaDuePageHandOut(client, CLAIM_FUNCTION)
    stubber.add_client_error("invoke", "TooManyRequestsException", http_status_code=429)
    with pytest.raises(ClientError):
        claims.hand_out(DuePage(0, ("t1",)))
    stubber.add_response("invoke", {"StatusCode": 200})
    with pytest.raises(ClaimNotQueued):
        claims.hand_out(DuePage(0, ("t1",)))


def test_the_deployed_tick_hands_out_through_lambda_only_when_given_a_claim_function(
    aws: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    dynamodb, sqs = aws
    settings = provision(dynamodb, sqs, clock=SettableClock(PROVISIONED))
    for name, value in settings.to_env().items():
        monkeypatch.setenv(name, value)
    assert Dynacron.from_environment().ticker._page_claims is None
    monkeypatch.setenv("DYNACRON_CLAIM_FUNCTION", CLAIM_FUNCTION)
    claims = Dynacron.from_environment().ticker._page_claims
    assert isinstance(claims, LambdaDuePageHandOut)


def test_the_thin_claim_handler_claims_a_page_from_the_environment(
    aws: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``functions/claim/handler.py`` as Lambda runs it: settings from the environment,
    the real clock, an event as the looping tick sends it."""
    import importlib.util

    from dynacron.domain.clock import SystemClock
    from dynacron.entry import functions
    from dynacron.local.gateway import LocalContext
    from tests.support import ROOT

    elastic = make_elastic(aws)
    now = SystemClock().now()
    # The claim function's environment: the tick's, without a claim function of its own
    for name, value in elastic.claimer.settings.to_env().items():
        monkeypatch.setenv(name, value)
    functions._deployed.cache_clear()
    spec = importlib.util.spec_from_file_location(
        "handler_claim", ROOT / "functions" / "claim" / "handler.py"
    )
    assert spec
    assert spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    ids = put_due_tasks(elastic, 7, due=now - timedelta(seconds=2), filed_at=now)

    result = module.handler({"shard": 0, "task_ids": ids}, LocalContext("dynacron-claim"))

    assert result["claimed"] == 7
    assert len(set(sent_execution_ids(elastic))) == 7
    with pytest.raises(InvalidClaimEvent):
        module.handler({"shard": 0}, LocalContext("dynacron-claim"))
    functions._deployed.cache_clear()
