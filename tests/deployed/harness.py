"""The deployed stack, as far as an emulator can hold it: the template's tables and
queues created by CloudFormation in moto, each Lambda entry point run with exactly
the environment the template gives it, and each AWS call it makes authorised
against its own role's policies from the template before it reaches moto.

moto's request-time IAM enforcement passes ``*`` as the resource of every DynamoDB
request, so it cannot tell one table or index grant from another. Here every call
is recorded with the ARN it really touches (the table, the index of a Query, each
item of a transaction or batch, the queue behind a URL) and judged by moto's own
policy evaluator (``IAMPolicy``) against that ARN; a call no statement allows
raises ``AccessDeniedException`` as AWS would, and never reaches moto.

A stack encrypted with the operator's key (decision 0059) gets a key in moto's KMS
in its place, and each call on an encrypted table or queue is judged for what it
asks of KMS too: ``kms:Decrypt`` for any, ``kms:GenerateDataKey`` to send a message.

The only deviations from Lambda, each marked where it is made: a settable clock
(SQS's delays and visibility timeouts follow it too), a sleep that moves it,
deliveries allowed to loopback only (handlers are a loopback sink), the region AWS
targets are called in given as Lambda gives it (``AWS_REGION``), and moto's key
for the operator's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import functools
import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import boto3
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ClientError
from moto.core import DEFAULT_ACCOUNT_ID
from moto.iam.access_control import IAMPolicy, PermissionResult

import dynacron.adapters.delivery.registry
import dynacron.entry.functions
from dynacron.adapters.aws.clients import CLAIM_INVOKE_CONFIG, aws_client_config
from dynacron.adapters.aws.due_page_hand_out import LambdaDuePageHandOut
from dynacron.adapters.delivery.registry import HandlerRegistry
from dynacron.adapters.delivery.targets import client_factory
from dynacron.definitions.resources import QUEUES
from dynacron.domain.clock import SettableClock
from dynacron.domain.tasks.task import shard_for
from dynacron.entry.composition import Dynacron
from dynacron.entry.events import TICK_LOOP_MARGIN
from dynacron.entry.settings import LOOPBACK_NETWORKS, Settings
from dynacron.local.aws import REGION
from dynacron.local.gateway import ApiGateway, LocalContext, proxy_event
from dynacron.local.runtime import sqs_event
from dynacron.local.stores import SQS_BATCH
from tests.support import FakeLambdaContext

ACCOUNT = DEFAULT_ACCOUNT_ID
# The names the two synthesised stacks are created under in moto.
DEFAULT_STACK = "dynacron-deployed"
USER_STACK = "dynacron-user"
# What moto's CloudFormation can create, and what the code needs to run.
DEPLOYED_TYPES = ("AWS::DynamoDB::Table", "AWS::SQS::Queue")
ENTRY_POINTS = ("api", "tick", "worker", "reaper", "undelivered", "claim", "completions")
# A grant to remove while loading the roles: set by ``verify_grants.py``.
MUTATION_VAR = "DYNACRON_GRANT_MUTATION"
ACCESS_DENIED = "AccessDeniedException"
TICKS_PER_INVOCATION = 3
# IAM names a batch call by its single form.
SQS_ACTIONS = {
    "SendMessageBatch": "sqs:SendMessage",
    "DeleteMessageBatch": "sqs:DeleteMessage",
    "ChangeMessageVisibilityBatch": "sqs:ChangeMessageVisibility",
}
TRANSACT_WRITE_ACTIONS = {
    "Put": "dynamodb:PutItem",
    "Update": "dynamodb:UpdateItem",
    "Delete": "dynamodb:DeleteItem",
    "ConditionCheck": "dynamodb:ConditionCheckItem",
}
# What a call on a table or queue encrypted with a customer-managed key asks of KMS
# with the caller's role (AWS's guides for DynamoDB and SQS): to decrypt the table's
# or a message's data key, and a fresh data key for a message sent.
KMS_DECRYPT = "kms:Decrypt"
KMS_GENERATE_DATA_KEY = "kms:GenerateDataKey"


@dataclass(frozen=True)
class Access:
    """One IAM-authorised request: what a call asks of one resource."""

    action: str
    resource: str
    # The partition key values it touches (``dynamodb:LeadingKeys``), when it names them.
    leading_keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class Mutation:
    """One action removed from one statement of one policy, in one stack."""

    stack: str
    policy: str
    statement: int
    action: str

    @classmethod
    def from_env(cls) -> Mutation | None:
        raw = os.environ.get(MUTATION_VAR)
        return cls(**json.loads(raw)) if raw else None


class TemplateValues:
    """Template values resolved as CloudFormation resolves them, for what was created."""

    def __init__(self, stack_name: str, physical_ids: dict[str, str]) -> None:
        self.stack_name = stack_name
        self.physical_ids = physical_ids
        self.attributes: dict[str, dict[str, str]] = {}

    def ref(self, target: str) -> str:
        pseudo = {
            "AWS::Region": REGION,
            "AWS::AccountId": ACCOUNT,
            "AWS::Partition": "aws",
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::StackName": self.stack_name,
        }
        if target in pseudo:
            return pseudo[target]
        # What the emulator does not create (log groups, roles) resolves to a name
        # that matches no real resource.
        return self.physical_ids.get(target, f"undeployed-{target}")

    def get_att(self, target: str, attribute: str) -> str:
        if target in self.attributes and attribute in self.attributes[target]:
            return self.attributes[target][attribute]
        return f"arn:aws:undeployed:{REGION}:{ACCOUNT}:{target}/{attribute}"

    def resolve(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self.resolve(v) for v in value]
        if not isinstance(value, dict):
            return value
        if set(value) == {"Ref"}:
            return self.ref(value["Ref"])
        if set(value) == {"Fn::GetAtt"}:
            target, attribute = value["Fn::GetAtt"]
            return self.get_att(target, attribute)
        if set(value) == {"Fn::Join"}:
            separator, parts = value["Fn::Join"]
            return separator.join(str(self.resolve(p)) for p in parts)
        if set(value) == {"Fn::Select"}:
            index, items = value["Fn::Select"]
            return self.resolve(items)[int(index)]
        if set(value) == {"Fn::Split"}:
            separator, text = value["Fn::Split"]
            return str(self.resolve(text)).split(separator)
        if len(value) == 1 and next(iter(value)).startswith("Fn::"):
            raise NotImplementedError(f"no resolver for {value}")
        return {k: self.resolve(v) for k, v in value.items()}


def table_arn(name: str) -> str:
    return f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{name}"


def queue_arn(url: str) -> str:
    account, name = urlsplit(url).path.strip("/").split("/")
    return f"arn:aws:sqs:{REGION}:{account}:{name}"


def _string(value: dict[str, Any] | None) -> str | None:
    return None if value is None else str(next(iter(value.values())))


class Role:
    """A function's role: every statement of every policy attached to it, resolved."""

    def __init__(self, name: str, statements: list[dict[str, Any]]) -> None:
        self.name = name
        self.statements = statements
        self._decided: dict[Access, str | None] = {}

    def denial(self, access: Access) -> str | None:
        """None if the role allows ``access``; else AWS's message for its refusal."""
        if access not in self._decided:
            self._decided[access] = self._evaluate(access)
        return self._decided[access]

    def _evaluate(self, access: Access) -> str | None:
        allowed = False
        for statement in self.statements:
            # One statement at a time: moto's evaluator answers DENIED for an Allow
            # whose condition fails (AWS: the statement does not apply), and knows
            # only StringEquals, so conditions are judged below.
            document = {key: v for key, v in statement.items() if key != "Condition"}
            policy = IAMPolicy(json.dumps({"Version": "2012-10-17", "Statement": [document]}))
            result = policy.is_action_permitted(access.action, access.resource)
            if result == PermissionResult.NEUTRAL:
                continue
            if not _conditions_hold(statement.get("Condition", {}), access):
                continue
            if result == PermissionResult.DENIED or statement["Effect"] == "Deny":
                return f"explicitly denied {access.action} on {access.resource}"
            _refuse_wildcards(statement, access)
            allowed = True
        if allowed:
            return None
        return (
            f"User: arn:aws:sts::{ACCOUNT}:assumed-role/{self.name}/function is not "
            f"authorized to perform: {access.action} on resource: {access.resource} "
            f"because no identity-based policy allows the {access.action} action"
        )


def _conditions_hold(conditions: dict[str, Any], access: Access) -> bool:
    for operator, keys in conditions.items():
        if operator != "ForAllValues:StringLike" or set(keys) != {"dynamodb:LeadingKeys"}:
            raise NotImplementedError(f"no evaluator for the condition {operator} {keys}")
        patterns = keys["dynamodb:LeadingKeys"]
        patterns = [patterns] if isinstance(patterns, str) else patterns
        # ForAllValues over no values holds, as in AWS.
        if not all(any(fnmatch.fnmatchcase(k, p) for p in patterns) for k in access.leading_keys):
            return False
    return True


def _refuse_wildcards(statement: dict[str, Any], access: Access) -> None:
    """Least privilege: no call of ours may be allowed by a wildcard grant, but the
    roles AWS targets name: they are the tenants' own, allowed by the operator's
    pattern (decision 0047), and each role's trust policy decides."""
    if access.action == "sts:AssumeRole":
        return
    for element in ("Action", "Resource"):
        values = statement[element]
        for value in [values] if isinstance(values, str) else values:
            assert "*" not in value, f"{access} is allowed by a wildcard: {statement}"


def _is_lambda_network_policy(arn: Any) -> bool:
    """AWS's AWSLambdaVPCAccessExecutionRole (a worker in the operator's VPC,
    decision 0050): the network interfaces Lambda itself manages, and logs; none of
    the calls the scenarios judge, so it grants them nothing."""
    return "service-role/AWSLambdaVPCAccessExecutionRole" in json.dumps(arn)


def roles_of(
    template: dict[str, Any], values: TemplateValues, mutation: Mutation | None
) -> dict[str, Role]:
    """Role logical id -> its resolved statements (inline, attached, managed)."""
    resources = template["Resources"]
    statements: dict[str, list[dict[str, Any]]] = {}
    for logical_id, resource in resources.items():
        if resource["Type"] != "AWS::IAM::Role":
            continue
        properties = resource.get("Properties", {})
        managed = [
            arn
            for arn in properties.get("ManagedPolicyArns", [])
            if not _is_lambda_network_policy(arn)
        ]
        if managed:
            raise NotImplementedError(f"managed policies on {logical_id}")
        statements[logical_id] = [
            s for p in properties.get("Policies", []) for s in p["PolicyDocument"]["Statement"]
        ]
    for logical_id, resource in resources.items():
        if resource["Type"] != "AWS::IAM::Policy":
            continue
        properties = resource["Properties"]
        for index, statement in enumerate(properties["PolicyDocument"]["Statement"]):
            statement = dict(statement)
            if (
                mutation is not None
                and mutation.stack == values.stack_name
                and mutation.policy == logical_id
                and mutation.statement == index
            ):
                actions = statement["Action"]
                actions = [actions] if isinstance(actions, str) else list(actions)
                assert mutation.action in actions, mutation
                actions.remove(mutation.action)
                if not actions:
                    continue
                statement["Action"] = actions
            for role in properties.get("Roles", []):
                statements[role["Ref"]].append(statement)
    return {
        role_id: Role(role_id, [values.resolve(s) for s in found])
        for role_id, found in statements.items()
    }


class AuthorisedCalls:
    """The botocore hook of one function's clients: records every call and refuses,
    before it is sent, what the function's role does not allow."""

    def __init__(
        self, role: Role, key_names: dict[str, str], encrypted: dict[str, str] | None = None
    ) -> None:
        self.role = role
        self.key_names = key_names  # table name -> its partition key attribute
        # Table or queue ARN -> the customer-managed key that encrypts it.
        self.encrypted = encrypted or {}
        self.calls: list[Access] = []

    def attach(self, client: Any) -> Any:
        service = client.meta.service_model.service_name
        client.meta.events.register(f"provide-client-params.{service}.*", self._check)
        return client

    def _check(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        service = model.service_model.service_name
        if service == "dynamodb":
            accesses = self._dynamodb(model.name, params)
        elif service == "lambda":
            accesses = self._lambda(model.name, params)
        elif service == "sts":
            accesses = self._sts(model.name, params)
        else:
            accesses = self._sqs(model.name, params)
        accesses = [*accesses, *self._kms(accesses)]
        for access in accesses:
            self.calls.append(access)
            refusal = self.role.denial(access)
            if refusal is not None:
                raise ClientError(
                    {
                        "Error": {"Code": ACCESS_DENIED, "Message": refusal},
                        "ResponseMetadata": {"HTTPStatusCode": 400},
                    },
                    model.name,
                )

    def _kms(self, accesses: list[Access]) -> list[Access]:
        """What the calls ask of KMS, once each, for the resources a key encrypts."""
        implied: list[Access] = []
        for access in accesses:
            key = self.encrypted.get(access.resource.split("/index/")[0])
            if key is None:
                continue
            actions = [KMS_DECRYPT]
            if access.action == "sqs:SendMessage":
                actions.append(KMS_GENERATE_DATA_KEY)
            implied += [Access(action, key) for action in actions]
        return list(dict.fromkeys(implied))

    def _keys(self, table: str, *items: dict[str, Any] | None) -> tuple[str, ...]:
        name = self.key_names.get(table)
        found = (_string((item or {}).get(name)) if name else None for item in items)
        return tuple(k for k in found if k is not None)

    def _dynamodb(self, operation: str, params: dict[str, Any]) -> list[Access]:
        if operation == "TransactWriteItems":
            accesses = []
            for item in params["TransactItems"]:
                ((kind, body),) = item.items()
                accesses.append(
                    Access(
                        TRANSACT_WRITE_ACTIONS[kind],
                        table_arn(body["TableName"]),
                        self._keys(body["TableName"], body.get("Key") or body.get("Item")),
                    )
                )
            return accesses
        if operation == "TransactGetItems":
            return [
                Access(
                    "dynamodb:GetItem",
                    table_arn(item["Get"]["TableName"]),
                    self._keys(item["Get"]["TableName"], item["Get"]["Key"]),
                )
                for item in params["TransactItems"]
            ]
        if operation == "BatchGetItem":
            return [
                Access(
                    f"dynamodb:{operation}", table_arn(table), self._keys(table, *request["Keys"])
                )
                for table, request in params["RequestItems"].items()
            ]
        if operation == "BatchWriteItem":
            return [
                Access(
                    f"dynamodb:{operation}",
                    table_arn(table),
                    self._keys(
                        table,
                        *(
                            (r.get("PutRequest") or {}).get("Item")
                            or (r.get("DeleteRequest") or {}).get("Key")
                            for r in requests
                        ),
                    ),
                )
                for table, requests in params["RequestItems"].items()
            ]
        table = params["TableName"]
        arn = table_arn(table)
        if params.get("IndexName"):
            arn = f"{arn}/index/{params['IndexName']}"
        return [
            Access(
                f"dynamodb:{operation}",
                arn,
                self._keys(table, params.get("Key") or params.get("Item")),
            )
        ]

    def _lambda(self, operation: str, params: dict[str, Any]) -> list[Access]:
        if operation != "Invoke":
            raise NotImplementedError(f"which function does lambda:{operation} touch? {params}")
        name = params["FunctionName"]
        arn = (
            name
            if name.startswith("arn:")
            else f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{name}"
        )
        return [Access("lambda:InvokeFunction", arn)]

    def _sts(self, operation: str, params: dict[str, Any]) -> list[Access]:
        if operation != "AssumeRole":
            raise NotImplementedError(f"which role does sts:{operation} touch? {params}")
        return [Access("sts:AssumeRole", params["RoleArn"])]

    def _sqs(self, operation: str, params: dict[str, Any]) -> list[Access]:
        action = SQS_ACTIONS.get(operation, f"sqs:{operation}")
        if "QueueUrl" in params:
            return [Access(action, queue_arn(params["QueueUrl"]))]
        if operation == "GetQueueUrl":
            owner = params.get("QueueOwnerAWSAccountId", ACCOUNT)
            return [Access(action, f"arn:aws:sqs:{REGION}:{owner}:{params['QueueName']}")]
        raise NotImplementedError(f"which queue does sqs:{operation} touch? {params}")


@dataclass
class DeployedFunction:
    logical_id: str
    entry_point: str  # the ``dynacron.entry.functions`` function its Handler names
    environment: dict[str, str]
    timeout_seconds: int
    role: Role
    calls: AuthorisedCalls
    app: Dynacron
    # The function's own clients, as its code has them (role-authorised).
    dynamodb: Any
    sqs: Any
    # Messages its SQS event source mapping hands it at most at once (BatchSize).
    batch_size: int = 10

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """The process environment during an invocation: the template's variables
        and no other ``DYNACRON_``/``POWERTOOLS_`` one (credentials stay: moto's)."""
        saved = {k: v for k, v in os.environ.items() if k.startswith(("DYNACRON_", "POWERTOOLS_"))}
        for name in saved:
            del os.environ[name]
        os.environ.update(self.environment)
        try:
            yield
        finally:
            for name in self.environment:
                os.environ.pop(name, None)
            os.environ.update(saved)

    def invoke(self, event: dict[str, Any], context: Any | None = None) -> dict[str, Any]:
        context = context or FakeLambdaContext(
            f"{self.entry_point}-request", remaining_millis=self.timeout_seconds * 1000
        )
        with self.running():
            method = getattr(self.app, self.entry_point)
            result: dict[str, Any] = method(event, context)
        return result


@contextlib.contextmanager
def own_process(code_path: Path | None) -> Iterator[HandlerRegistry]:
    """Each function is a process of its own: the modules of its code are imported
    afresh for it, and their ``@dynacron.handler`` functions register in its own
    registry (in one test process, one function's imports would otherwise make
    handlers known to all)."""
    if code_path is not None:
        for name, module in list(sys.modules.items()):
            file = getattr(module, "__file__", None)
            if file and Path(file).is_relative_to(code_path):
                del sys.modules[name]
    registry = HandlerRegistry()
    shared = dynacron.adapters.delivery.registry.default_registry
    dynacron.adapters.delivery.registry.default_registry = registry
    try:
        yield registry
    finally:
        dynacron.adapters.delivery.registry.default_registry = shared


def _load_entry_point(code_path: Path | None, handler: str) -> str | None:
    """Which ``dynacron.entry.functions`` entry point a function's Handler names, loading its
    module from the function's own code asset as Lambda would (None: not ours)."""
    module_name, attribute = handler.rsplit(".", 1)
    # Lambda puts the function's code first on the path (its handler modules).
    if code_path is not None and str(code_path) not in sys.path:
        sys.path.insert(0, str(code_path))
    candidate = code_path / (module_name.replace(".", "/") + ".py") if code_path else None
    if candidate is not None and candidate.is_file():
        spec = importlib.util.spec_from_file_location(
            f"deployed_{candidate.parent.name}", candidate
        )
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            return None
    function = getattr(module, attribute, None)
    for name in ENTRY_POINTS:
        if function is getattr(dynacron.entry.functions, name):
            return name
    return None


@dataclass
class Deployment:
    """One stack of the template, created in moto, with its functions."""

    template: dict[str, Any]
    values: TemplateValues
    clock: SettableClock
    functions: dict[str, DeployedFunction] = field(default_factory=dict)
    # Async invocations of the claim function the ticks made (Lambda queues them).
    claim_events: list[dict[str, Any]] = field(default_factory=list)
    claims_run: int = 0

    def function(self, entry_point: str) -> DeployedFunction:
        return self.functions[entry_point]

    def another_environment(self, entry_point: str) -> DeployedFunction:
        """A second execution environment of a deployed function, as Lambda starts one
        for a concurrent invocation: the same environment and role, its own clients
        and state (so a test can kill one without touching the other)."""
        first = self.function(entry_point)
        second = build_function(
            first.logical_id,
            entry_point,
            first.environment,
            {"Timeout": first.timeout_seconds},
            first.role,
            first.calls.key_names,
            self.clock,
            first.app.handlers,
            self.claim_events,
            encrypted=first.calls.encrypted,
        )
        second.batch_size = first.batch_size
        return second

    @property
    def settings(self) -> Settings:
        return self.function("api").app.settings

    # --- the API, behind API Gateway's per-method authorisation -----------------------

    def api_event(
        self,
        method: str,
        path: str,
        body: Any = None,
        principal: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> dict[str, Any] | None:
        """API Gateway's proxy event, or None when it would refuse the request itself."""
        data = json.dumps(body).encode() if body is not None else b""
        sent = ({"content-type": "application/json"} if data else {}) | (headers or {})
        event = proxy_event(method, path, sent, data, "127.0.0.1")
        authorization = self.authorization(method, urlsplit(path).path)
        if authorization == "AWS_IAM":
            if principal is None:
                return None  # an unsigned request: API Gateway answers 403
            event["requestContext"]["identity"]["userArn"] = principal
        elif authorization != "NONE":
            raise NotImplementedError(f"authorization {authorization}")
        return event

    def api(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        principal: str | None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        event = self.api_event(method, path, body, principal, headers)
        if event is None:
            return 403, {"message": "Missing Authentication Token"}
        response = self.function("api").invoke(event, LocalContext("api"))
        text = response.get("body") or ""
        return response["statusCode"], json.loads(text) if text.startswith(("{", "[")) else text

    def authorization(self, method: str, path: str) -> str:
        """The AuthorizationType of the API Gateway method that takes this request."""
        resources = {
            k: r["Properties"]
            for k, r in self.template["Resources"].items()
            if r["Type"] == "AWS::ApiGateway::Resource"
        }

        def path_of(resource: Any) -> list[str]:
            if not isinstance(resource, dict) or "Ref" not in resource:
                return []  # the API's root resource (a GetAtt of the RestApi)
            properties = resources[resource["Ref"]]
            return [*path_of(properties["ParentId"]), properties["PathPart"]]

        segments = [s for s in path.split("/") if s]
        best: tuple[int, str] | None = None
        for resource in self.template["Resources"].values():
            if resource["Type"] != "AWS::ApiGateway::Method":
                continue
            properties = resource["Properties"]
            if properties["HttpMethod"] not in (method, "ANY"):
                continue
            pattern = path_of(properties["ResourceId"])
            score = _path_match(pattern, segments)
            if score is None:
                continue
            # A literal path beats a variable one, a method beats ANY.
            rank = score * 2 + (properties["HttpMethod"] == method)
            if best is None or rank > best[0]:
                best = (rank, properties.get("AuthorizationType", "NONE"))
        assert best is not None, f"API Gateway routes no {method} {path}"
        return best[1]

    def serve_api(self, principal: str | None = None) -> ApiGateway:
        """The API function on a loopback HTTP address, as API Gateway would serve it:
        an IAM method is called as ``principal`` (None: refused, as unsigned), a
        method with authorization NONE gets no identity."""

        def handle(event: dict[str, Any], context: Any) -> dict[str, Any]:
            authorization = self.authorization(event["httpMethod"], event["path"])
            if authorization == "AWS_IAM":
                if principal is None:
                    return {
                        "statusCode": 403,
                        "body": '{"message": "Missing Authentication Token"}',
                    }
                event["requestContext"]["identity"]["userArn"] = principal
            return self.function("api").invoke(event, context)

        return ApiGateway(("127.0.0.1", 0), handle)

    # --- the schedules and the event source mappings -------------------------------

    def tick(self, shard: int) -> dict[str, Any]:
        """The looping tick of one shard, started with the input its schedule sends."""
        tick = self.function("tick")
        inputs = [
            json.loads(target["Input"])
            for resource in self.template["Resources"].values()
            if resource["Type"] == "AWS::Events::Rule"
            for target in resource["Properties"].get("Targets", [])
            if self.values.resolve(target["Arn"]) == self.function_arn(tick)
        ]
        (event,) = [e for e in inputs if e.get("shard") == shard]
        # Deviation: the invocation has a few seconds left to loop, not its whole
        # timeout, so that it is a few ticks rather than a hundred (the loop is the same).
        remaining = TICK_LOOP_MARGIN + timedelta(seconds=TICKS_PER_INVOCATION)
        context = FakeLambdaContext(
            "tick-request", remaining_millis=int(remaining.total_seconds() * 1000)
        )
        report = tick.invoke(event, context)
        # A step that raised is logged and retried by the loop; on AWS an alarm
        # sees it. Here it fails the scenario (a refused call among them).
        assert report["failed_ticks"] == 0, report
        self.run_claims()
        return report

    def run_claims(self) -> None:
        """Lambda runs the claim invocations the ticks queued (InvocationType Event),
        each with the claim function's own environment and role."""
        while self.claim_events:
            self.function("claim").invoke(self.claim_events.pop(0))
            self.claims_run += 1

    def shards_of(self, task_ids: Iterable[str]) -> set[int]:
        return {shard_for(t, self.settings.shard_count) for t in task_ids}

    def reap(self) -> dict[str, Any]:
        """The reaper, as its schedule invokes it: EventBridge's scheduled event."""
        event = {
            "version": "0",
            "id": "scheduled",
            "detail-type": "Scheduled Event",
            "source": "aws.events",
            "account": ACCOUNT,
            "time": self.clock.now().isoformat(),
            "region": REGION,
            "resources": [],
            "detail": {},
        }
        report = self.function("reaper").invoke(event)
        # An expired lease whose handling raised is set aside and logged: a failure.
        assert "set_aside" not in report, report
        return report

    def function_arn(self, function: DeployedFunction) -> str:
        return self.values.get_att(function.logical_id, "Arn")

    def drain(self, entry_point: str, queue_env_var: str, *, batches: int = 10) -> list[Any]:
        """What the function's SQS event source mapping does: receive a batch of up to
        its ``BatchSize`` with the function's role, invoke, delete the records that did
        not fail. Failed ones come back after the queue's visibility timeout (the test
        moves the clock)."""
        function = self.function(entry_point)
        url = function.environment[queue_env_var]
        results = []
        for _ in range(batches):
            messages = self.receive_batch(entry_point, queue_env_var)
            if not messages:
                break
            result = function.invoke(sqs_event(messages, queue_arn(url)))
            failed = {f["itemIdentifier"] for f in result.get("batchItemFailures", [])}
            done = [m for m in messages if m["MessageId"] not in failed]
            for start in range(0, len(done), SQS_BATCH):
                function.sqs.delete_message_batch(
                    QueueUrl=url,
                    Entries=[
                        {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                        for i, m in enumerate(done[start : start + SQS_BATCH])
                    ],
                )
            results.append(result)
        return results

    def receive_batch(self, entry_point: str, queue_env_var: str) -> list[dict[str, Any]]:
        """A batch as the function's event source mapping gathers one: up to its
        ``BatchSize`` messages, from receives of at most 10, with the function's role."""
        function = self.function(entry_point)
        url = function.environment[queue_env_var]
        messages: list[dict[str, Any]] = []
        while len(messages) < function.batch_size:
            received = function.sqs.receive_message(
                QueueUrl=url,
                MaxNumberOfMessages=min(SQS_BATCH, function.batch_size - len(messages)),
                WaitTimeSeconds=0,
                AttributeNames=["All"],
            ).get("Messages", [])
            if not received:
                break
            messages += received
        return messages

    def run_due(self, *task_ids: str) -> None:
        """The stack at work for a few seconds: the shards of ``task_ids`` tick (a
        shard no scenario uses is left alone), the worker and the undelivered
        function drain their queues."""
        for shard in sorted(self.shards_of(task_ids)):
            self.tick(shard)
        dispatch = next(q for q in QUEUES if q.logical_id == "DispatchQueue")
        undelivered = next(q for q in QUEUES if q.logical_id == "UndeliveredQueue")
        self.drain("worker", dispatch.env_var, batches=100)
        self.drain("undelivered", undelivered.env_var)


def _path_match(pattern: list[str], segments: list[str]) -> int | None:
    """How literally ``pattern`` (API Gateway path parts) matches, or None."""
    score = 0
    for index, part in enumerate(pattern):
        if part.endswith("+}"):
            return score if len(segments) > index else None
        if index >= len(segments):
            return None
        if part.startswith("{"):
            continue
        if part != segments[index]:
            return None
        score += 1
    return score if len(pattern) == len(segments) else None


def create_stack(
    stack_name: str,
    template: dict[str, Any],
    clock: SettableClock,
    assembly_directory: Path,
    mutation: Mutation | None = None,
) -> Deployment:
    """Create the template's tables and queues in moto, then its functions, with
    ``mutation`` (default: the one ``DYNACRON_GRANT_MUTATION`` names) applied."""
    template = _with_moto_s_key(template)
    resources = {
        logical_id: resource
        for logical_id, resource in template["Resources"].items()
        if resource["Type"] in DEPLOYED_TYPES
    }
    cloudformation = boto3.client("cloudformation", region_name=REGION)
    cloudformation.create_stack(
        StackName=stack_name,
        TemplateBody=json.dumps({"AWSTemplateFormatVersion": "2010-09-09", "Resources": resources}),
    )
    created = cloudformation.describe_stack_resources(StackName=stack_name)["StackResources"]
    physical_ids = {r["LogicalResourceId"]: r["PhysicalResourceId"] for r in created}
    assert set(physical_ids) == set(resources)
    values = TemplateValues(stack_name, physical_ids)
    dynamodb = boto3.client("dynamodb", region_name=REGION)
    sqs = boto3.client("sqs", region_name=REGION)
    key_names: dict[str, str] = {}
    encrypted: dict[str, str] = {}
    for logical_id, resource in resources.items():
        physical = physical_ids[logical_id]
        properties = resource.get("Properties", {})
        if resource["Type"] == "AWS::DynamoDB::Table":
            table = dynamodb.describe_table(TableName=physical)["Table"]
            values.attributes[logical_id] = {"Arn": table["TableArn"]}
            (hash_key,) = [k["AttributeName"] for k in table["KeySchema"] if k["KeyType"] == "HASH"]
            key_names[physical] = hash_key
            key = properties.get("SSESpecification", {}).get("KMSMasterKeyId")
        else:
            attributes = sqs.get_queue_attributes(QueueUrl=physical, AttributeNames=["QueueArn"])
            values.attributes[logical_id] = {
                "Arn": attributes["Attributes"]["QueueArn"],
                "QueueUrl": physical,
                "QueueName": physical.rsplit("/", 1)[1],
            }
            key = properties.get("KmsMasterKeyId")
        if key is not None:
            encrypted[values.attributes[logical_id]["Arn"]] = key
    for logical_id, resource in template["Resources"].items():
        if resource["Type"] == "AWS::Lambda::Function":
            name = f"{stack_name}-{logical_id}"
            values.attributes[logical_id] = {
                "Arn": f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{name}"
            }
    roles = roles_of(template, values, mutation or Mutation.from_env())
    batch_sizes = {
        resource["Properties"]["FunctionName"]["Ref"]: resource["Properties"]["BatchSize"]
        for resource in template["Resources"].values()
        if resource["Type"] == "AWS::Lambda::EventSourceMapping"
    }
    deployment = Deployment(template, values, clock)
    for logical_id, resource in template["Resources"].items():
        if resource["Type"] != "AWS::Lambda::Function":
            continue
        properties = resource["Properties"]
        code_path = code_asset(assembly_directory, properties["Code"])
        with own_process(code_path) as handlers:
            entry_point = _load_entry_point(code_path, properties["Handler"])
            if entry_point is None:
                continue
            assert entry_point not in deployment.functions, f"two {entry_point} functions"
            environment = {
                name: str(values.resolve(v))
                for name, v in properties.get("Environment", {}).get("Variables", {}).items()
            }
            role = roles[properties["Role"]["Fn::GetAtt"][0]]
            deployment.functions[entry_point] = build_function(
                logical_id,
                entry_point,
                environment,
                properties,
                role,
                key_names,
                clock,
                handlers,
                deployment.claim_events,
                encrypted=encrypted,
            )
            deployment.functions[entry_point].batch_size = batch_sizes.get(logical_id, 10)
    assert set(deployment.functions) == set(ENTRY_POINTS), set(deployment.functions)
    return deployment


def _with_moto_s_key(template: dict[str, Any]) -> dict[str, Any]:
    """The template with the operator's key (decision 0059), if it names one, replaced
    by a key made in moto's KMS, wherever it appears: the tables, queues and log
    groups, and the roles' grants. Deviation: moto gives a key an id of its own."""
    keys = {
        str(resource["Properties"]["SSESpecification"]["KMSMasterKeyId"])
        for resource in template["Resources"].values()
        if resource["Type"] == "AWS::DynamoDB::Table"
        and "KMSMasterKeyId" in resource["Properties"].get("SSESpecification", {})
    }
    if not keys:
        return template
    (operator_s,) = keys
    kms = boto3.client("kms", region_name=REGION)
    moto_s = kms.create_key(Description="the operator's key")["KeyMetadata"]["Arn"]
    replaced: dict[str, Any] = json.loads(json.dumps(template).replace(operator_s, moto_s))
    return replaced


def code_asset(assembly_directory: Path, code: dict[str, Any]) -> Path | None:
    """The directory the CDK staged a function's code from: ``asset.<hash>`` in the
    cloud assembly, whose zip the template names as the S3 key (None: inline code)."""
    key = code.get("S3Key")
    if not isinstance(key, str):
        return None
    staged = assembly_directory / f"asset.{Path(key).stem}"
    return staged if staged.is_dir() else None


def build_function(
    logical_id: str,
    entry_point: str,
    environment: dict[str, str],
    properties: dict[str, Any],
    role: Role,
    key_names: dict[str, str],
    clock: SettableClock,
    handlers: HandlerRegistry,
    claim_events: list[dict[str, Any]],
    *,
    encrypted: dict[str, str] | None = None,
) -> DeployedFunction:
    """``Dynacron.from_environment``, with the function's own authorised clients."""
    calls = AuthorisedCalls(role, key_names, encrypted)
    function = DeployedFunction(
        logical_id=logical_id,
        entry_point=entry_point,
        environment=environment,
        timeout_seconds=int(properties["Timeout"]),
        role=role,
        calls=calls,
        app=None,  # type: ignore[arg-type]
        dynamodb=None,
        sqs=None,
    )
    with function.running():
        settings = Settings.from_env(environment)
        # Deviation: handlers are a loopback sink (the deployed default is public only).
        settings = dataclasses.replace(
            settings,
            delivery_allow_networks=LOOPBACK_NETWORKS,
            # Lambda sets AWS_REGION itself: the template does not name it.
            target_region=REGION,
        )
        own_clients = client_factory(REGION, None, settings.http_timeout_seconds)

        def target_clients(service: str, credentials: dict[str, str] | None) -> Any:
            # The worker's own calls (STS) are its role's to allow; the calls made as
            # a target's role are that role's, which moto's STS handed out unjudged.
            client = own_clients(service, credentials)
            return calls.attach(client) if credentials is None else client

        config = aws_client_config(settings)
        dynamodb = calls.attach(boto3.client("dynamodb", region_name=REGION, config=config))
        sqs = calls.attach(boto3.client("sqs", region_name=REGION, config=config))
        function.dynamodb, function.sqs = dynamodb, sqs
        page_claims = None
        if settings.claim_function:
            invoker = calls.attach(
                boto3.client("lambda", region_name=REGION, config=CLAIM_INVOKE_CONFIG)
            )
            invoker.meta.events.register(
                "before-call.lambda.Invoke", functools.partial(_queue_claim, claim_events)
            )
            page_claims = LambdaDuePageHandOut(invoker, settings.claim_function)
        function.app = Dynacron(
            settings,
            dynamodb=dynamodb,
            sqs=sqs,
            # Deviations: a settable clock, and a sleep that moves it.
            clock=clock,
            sleep=lambda seconds: clock.advance(timedelta(seconds=seconds)),
            handlers=handlers,
            page_claims=page_claims,
            target_clients=target_clients,
        )
    return function


def _queue_claim(
    claim_events: list[dict[str, Any]], params: dict[str, Any], **_: Any
) -> tuple[AWSResponse, dict[str, Any]]:
    """Lambda's answer to an authorised asynchronous Invoke: the event is queued
    (the deployment runs it after the tick, as Lambda would soon after) and 202."""
    assert params["headers"]["X-Amz-Invocation-Type"] == "Event", params["headers"]
    claim_events.append(json.loads(params["body"]))
    return AWSResponse(params["url"], 202, {}, None), {"StatusCode": 202}
