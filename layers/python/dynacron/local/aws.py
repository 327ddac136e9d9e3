"""An embedded AWS for local mode: moto's server, with DynamoDB requests made atomic.

moto's DynamoDB backend takes no lock, so two conditional writes racing from
different threads can both succeed, which AWS never allows. Every DynamoDB
request is serialised here; SQS and the rest stay concurrent so that long polls
do not block the store.
"""

from __future__ import annotations

import argparse
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError
from werkzeug.serving import BaseWSGIServer, make_server

from dynacron.adapters.aws.cursors import DynamoCursorStore
from dynacron.definitions.resources import (
    COORDINATION,
    DEAD_LETTER_QUEUE,
    DISPATCH_QUEUE,
    EXECUTIONS,
    TABLES,
    TASKS,
    UNDELIVERED_QUEUE,
    QueueDefinition,
    create_table_request,
)
from dynacron.domain.clock import Clock, SystemClock
from dynacron.domain.coordination import transitions
from dynacron.entry.settings import Settings

if TYPE_CHECKING:
    from types_boto3_dynamodb.client import DynamoDBClient
    from types_boto3_sqs.client import SQSClient
    from types_boto3_sqs.literals import QueueAttributeNameType

REGION = "us-east-1"
LOCAL_CREDENTIALS = {"aws_access_key_id": "local", "aws_secret_access_key": "local"}
WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class AtomicDynamoDB:
    """WSGI middleware: one DynamoDB request at a time, as if each were atomic."""

    def __init__(self, app: WsgiApp) -> None:
        self._app = app
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        if not environ.get("HTTP_X_AMZ_TARGET", "").startswith("DynamoDB_"):
            return self._app(environ, start_response)
        with self._lock:
            # Materialise the body while holding the lock: the write happens
            # during the call, but a streamed response must not escape it.
            return list(self._app(environ, start_response))


def speed_up_moto_sqs() -> None:
    """Keep moto's SQS fast when a queue holds thousands of messages.

    moto recomputes every queue attribute, counting visible, delayed and
    in-flight messages through datetime arithmetic, on every SendMessage: a
    burst of n executions costs O(n^2). Here the per-message checks use the
    epoch clock directly, and the three counts, which AWS itself documents as
    approximate, are cached for 100 ms. Pinned to the moto version in pyproject.
    """
    from moto.sqs.models import Message, Queue

    if getattr(Queue, "_dynacron_patched", False):
        return

    def visible(message: Any) -> bool:
        return bool(time.time() * 1000 > message.visible_at)

    def delayed(message: Any) -> bool:
        return bool(time.time() * 1000 < message.delayed_until)

    Message.visible = property(visible)  # type: ignore[method-assign,assignment]
    Message.delayed = property(delayed)  # type: ignore[method-assign,assignment]

    for name in _SQS_COUNTS:
        setattr(Queue, name, property(_cached_for(0.1, name, getattr(Queue, name).fget)))
    Queue._dynacron_patched = True  # type: ignore[attr-defined]


_SQS_COUNTS = (
    "approximate_number_of_messages",
    "approximate_number_of_messages_delayed",
    "approximate_number_of_messages_not_visible",
)


@contextmanager
def moto_sqs_sped_up() -> Iterator[None]:
    """``speed_up_moto_sqs`` while the block runs, and moto as it was after it.

    For a test in a process that runs others: counts cached for 100 ms would
    tell a later test that reads a queue's counts at once about a moment before.
    """
    from moto.sqs.models import Message, Queue

    saved: list[tuple[type, str, Any]] = [
        (Message, name, vars(Message)[name]) for name in ("visible", "delayed")
    ]
    saved += [(Queue, name, vars(Queue)[name]) for name in _SQS_COUNTS]
    was_patched = getattr(Queue, "_dynacron_patched", False)
    speed_up_moto_sqs()
    try:
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)
        Queue._dynacron_patched = was_patched  # type: ignore[attr-defined]


def serialise_in_process_dynamodb() -> None:
    """One DynamoDB request at a time through in-process moto (``mock_aws``), as
    ``AtomicDynamoDB`` does for the embedded server: the tick's claims and a
    worker's records run at once, and two conditional writes racing through moto
    could both succeed, which DynamoDB never allows. SQS stays concurrent (a long
    poll waits inside moto). Pinned to the moto version in pyproject.
    """
    from moto.core.botocore_stubber import BotocoreStubber

    if getattr(BotocoreStubber, "_dynacron_serialised", False):
        return
    process = BotocoreStubber.process_request
    lock = threading.RLock()

    def process_request(stubber: Any, request: Any) -> Any:
        target = request.headers.get("X-Amz-Target") or b""  # bytes, as botocore sends it
        if not (target if isinstance(target, bytes) else target.encode()).startswith(b"DynamoDB_"):
            return process(stubber, request)
        with lock:
            return process(stubber, request)

    BotocoreStubber.process_request = process_request  # type: ignore[method-assign,assignment]
    BotocoreStubber._dynacron_serialised = True  # type: ignore[attr-defined]


def speed_up_moto_transactions() -> None:
    """Make a moto TransactWriteItems cost what its items cost, not what its tables hold.

    moto backs up each table a transaction names with a deep copy, to restore it
    if the transaction is cancelled: registering a task (a transaction with its
    tenant's record) slowed down as the tables grew. Here the tables are not
    copied; the items the transaction names are saved and put back instead.
    Pinned to the moto version in pyproject.
    """
    import copy

    from moto.dynamodb import models
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.models.table import Table

    if getattr(DynamoDBBackend, "_dynacron_patched", False):
        return

    class TablesByReference:
        """``copy`` for moto's DynamoDB backend, except that a table is not copied."""

        def __getattr__(self, name: str) -> Any:
            return getattr(copy, name)

        @staticmethod
        def deepcopy(value: Any, memo: Any = None) -> Any:
            return value if isinstance(value, Table) else copy.deepcopy(value, memo)

    transact = DynamoDBBackend.transact_write_items

    def transact_write_items(backend: Any, transact_items: list[dict[str, Any]]) -> None:
        saved = [_saved_item(backend, entry) for entry in transact_items]
        try:
            transact(backend, transact_items)
        except Exception:
            for table_name, key, attributes in filter(None, saved):
                if attributes is None:
                    backend.delete_item(table_name, key)
                else:
                    backend.put_item(table_name, attributes)
            raise

    models.copy = TablesByReference()  # type: ignore[attr-defined,assignment]
    DynamoDBBackend.transact_write_items = transact_write_items  # type: ignore[method-assign,assignment]
    DynamoDBBackend._dynacron_patched = True  # type: ignore[attr-defined]


def _saved_item(backend: Any, entry: dict[str, Any]) -> tuple[str, Any, Any] | None:
    """(table, key, attributes as they are now, or None if absent) of one transaction item."""
    import copy

    _, operation = next(iter(entry.items()))
    table_name = operation.get("TableName")
    if table_name not in backend.tables:
        return None
    table = backend.tables[table_name]
    if "Key" in operation:
        key = operation["Key"]
    else:
        names = [n for n in (table.hash_key_attr, table.range_key_attr) if n]
        key = {n: operation["Item"][n] for n in names if n in operation.get("Item", {})}
    try:
        current = backend.get_item(table_name, key)
    except Exception:
        return None  # an invalid key: the transaction fails before writing anything
    attributes = copy.deepcopy(current.to_json()["Attributes"]) if current else None
    return table_name, key, attributes


def _cached_for(seconds: float, name: str, compute: Callable[[Any], int]) -> Callable[[Any], int]:
    def cached(queue: Any) -> int:
        cache = queue.__dict__.setdefault("_dynacron_counts", {})
        now = time.monotonic()
        hit = cache.get(name)
        if hit is None or now - hit[0] > seconds:
            hit = cache[name] = (now, compute(queue))
        return int(hit[1])

    return cached


def _dispatcher_remembering_backends() -> type[Any]:
    """moto's dispatcher, remembering which backend serves which host.

    moto looks the backend up on every request, listing its own package
    directory and matching hundreds of URL patterns: some 15 % of its time per
    DynamoDB request in local mode. The answer for a host never changes.
    """
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication

    class RememberingDispatcher(DomainDispatcherApplication):
        def get_backend_for_host(self, host: str | None) -> Any:
            known: dict[str | None, Any] = self.__dict__.setdefault("_dynacron_backends", {})
            if host not in known:
                known[host] = super().get_backend_for_host(host)
            return known[host]

    return RememberingDispatcher


def _quiet_request_handler() -> type[Any]:
    """moto's request handler without the access log, keeping connections alive."""
    from moto.moto_server.werkzeug_app import MotoRequestHandler

    class QuietRequestHandler(MotoRequestHandler):
        protocol_version = "HTTP/1.1"  # keep connections alive between calls
        disable_nagle_algorithm = True  # see local.gateway: no delayed-ACK stalls

        def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
            pass  # one line per AWS call is noise, and costly at burst rates

    return QuietRequestHandler


def run_state_machines() -> dict[str, bool]:
    """Make moto's Step Functions run state machines (its parser executes Pass,
    Wait, Choice... states in a thread): an execution then ends, SUCCEEDED or
    FAILED, with its output and times, where by default it stays RUNNING. Returns
    the setting it replaced (moto's, process-wide: put back at ``stop``)."""
    from moto.core.config import default_user_config

    replaced = default_user_config.get("stepfunctions", {}).get("execute_state_machine", False)
    default_user_config["stepfunctions"] = {"execute_state_machine": True}
    return {"execute_state_machine": replaced}


class EmbeddedAws:
    """moto in server mode on a loopback port, in a background thread."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._host = host
        self._port = port
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None
        self._replaced_stepfunctions: dict[str, bool] | None = None

    @property
    def endpoint(self) -> str:
        assert self._server is not None, "start() first"
        return f"http://{self._host}:{self._server.server_port}"

    def start(self) -> EmbeddedAws:
        # Imported here: components that only connect to a running endpoint
        # (``dynacron local --aws-endpoint``) start faster without moto.
        from moto.moto_server.werkzeug_app import create_backend_app

        speed_up_moto_sqs()
        speed_up_moto_transactions()
        self._replaced_stepfunctions = run_state_machines()
        app = AtomicDynamoDB(_dispatcher_remembering_backends()(create_backend_app))
        self._server = make_server(
            self._host, self._port, app, threaded=True, request_handler=_quiet_request_handler()
        )
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},  # stop() waits for one poll
            name="embedded-aws",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._replaced_stepfunctions is not None:
            from moto.core.config import default_user_config

            default_user_config["stepfunctions"] = {
                "execute_state_machine": self._replaced_stepfunctions["execute_state_machine"]
            }
            self._replaced_stepfunctions = None


def aws_clients(endpoint: str) -> tuple[DynamoDBClient, SQSClient]:
    """DynamoDB and SQS clients for an AWS emulator at ``endpoint``."""
    config = Config(
        retries={"max_attempts": 5, "mode": "standard"},
        max_pool_connections=50,
    )
    common: dict[str, Any] = {
        "endpoint_url": endpoint,
        "region_name": REGION,
        "config": config,
        **LOCAL_CREDENTIALS,
    }
    return boto3.client("dynamodb", **common), boto3.client("sqs", **common)


def provision(
    dynamodb: DynamoDBClient,
    sqs: SQSClient,
    prefix: str = "dynacron",
    clock: Clock | None = None,
    **overrides: Any,
) -> Settings:
    """Create every table and queue from the shared definitions; safe to repeat."""
    created: set[str] = set()
    for table in TABLES:
        name = table.default_name(prefix)
        try:
            dynamodb.create_table(**create_table_request(table, name))
            created.add(table.logical_id)
        except ClientError as error:
            if error.response["Error"]["Code"] != "ResourceInUseException":
                raise
        if table.ttl_attribute:
            dynamodb.update_time_to_live(
                TableName=name,
                TimeToLiveSpecification={"Enabled": True, "AttributeName": table.ttl_attribute},
            )
    dead_letter_url = _create_queue(sqs, DEAD_LETTER_QUEUE, prefix, None)
    undelivered_url = _create_queue(sqs, UNDELIVERED_QUEUE, prefix, None)
    dispatch_url = _create_queue(sqs, DISPATCH_QUEUE, prefix, _arn(sqs, undelivered_url))
    settings = Settings(
        tasks_table=TASKS.default_name(prefix),
        executions_table=EXECUTIONS.default_name(prefix),
        coordination_table=COORDINATION.default_name(prefix),
        dispatch_queue_url=dispatch_url,
        dead_letter_queue_url=dead_letter_url,
        **overrides,
    )
    if TASKS.logical_id in created:
        # A new store holds no task due before now: start each shard's cursor
        # here instead of walking back through a week of empty buckets.
        cursors = DynamoCursorStore(dynamodb, settings.coordination_table)
        start = settings.sharding.bucket((clock or SystemClock()).now())
        for shard in range(settings.shard_count):
            cursors.apply(shard, transitions.advance_cursor(start))
    return settings


def _arn(sqs: SQSClient, queue_url: str) -> str:
    arn: str = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    return arn


def undelivered_queue_url(sqs: SQSClient, prefix: str = "dynacron") -> str:
    """The queue SQS moves undeliverable dispatch messages to (not in ``Settings``:
    deployed, its function is fed by an event source and never names it)."""
    url: str = sqs.get_queue_url(QueueName=UNDELIVERED_QUEUE.default_name(prefix))["QueueUrl"]
    return url


def _create_queue(
    sqs: SQSClient, queue: QueueDefinition, prefix: str, dead_letter_arn: str | None
) -> str:
    attributes: dict[QueueAttributeNameType, str] = {
        "VisibilityTimeout": str(queue.visibility_timeout_seconds),
        "MessageRetentionPeriod": str(queue.retention_seconds),
    }
    if dead_letter_arn and queue.max_receive_count:
        attributes["RedrivePolicy"] = json.dumps(
            {"deadLetterTargetArn": dead_letter_arn, "maxReceiveCount": queue.max_receive_count}
        )
    url: str = sqs.create_queue(QueueName=queue.default_name(prefix), Attributes=attributes)[
        "QueueUrl"
    ]
    return url


def serve(port: int = 0) -> None:
    """Run the embedded AWS alone until interrupted; prints its endpoint when ready."""
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    aws = EmbeddedAws(port=port).start()
    print(f"embedded AWS listening on {aws.endpoint}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        aws.stop()


def main() -> None:
    """Run the embedded AWS alone (``python -m dynacron.local.aws``), e.g. for tests."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--port", type=int, default=0)
    serve(parser.parse_args().port)


if __name__ == "__main__":
    main()
