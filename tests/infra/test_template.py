"""Each construct's key properties, read from the synthesised CloudFormation template."""

from __future__ import annotations

import json
from typing import Any

from dynacron.definitions import metric_names
from dynacron.definitions.resources import (
    COORDINATION,
    DEAD_LETTER_QUEUE,
    DEPENDENTS_INDEX,
    DISPATCH_QUEUE,
    DUE_INDEX,
    EXECUTIONS,
    HOST_KEY_PREFIX,
    LIMIT_KEY_PREFIXES,
    NAME_INDEX,
    QUEUES,
    TABLES,
    TASKS,
    TENANT_INDEX,
    TENANT_KEY_PREFIX,
    UNDELIVERED_QUEUE,
    UNDELIVERED_TIMEOUT_SECONDS,
    WORKER_TIMEOUT_SECONDS,
    Key,
    QueueDefinition,
    TableDefinition,
)
from dynacron.entry.settings import (
    BUCKET_SECONDS_VAR,
    HANDLER_MODULES_VAR,
    SHARD_COUNT_VAR,
    TARGET_ROLES_VAR,
    Settings,
)
from infra.config import SchedulerConfig
from tests.infra.conftest import (
    ALARM_EMAIL,
    USER_CONFIG,
    USER_WORKER_HANDLER,
    Synthesized,
    resources_of,
)

FUNCTIONS = ("Tick", "Claim", "Worker", "Api", "Reaper", "Undelivered", "Completions")
DYNAMODB_ITEM_WRITES = {
    "dynamodb:DeleteItem",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:BatchWriteItem",
}


def function_id(template: dict[str, Any], concern: str) -> str:
    """The logical id of a concern's function (construct paths name them)."""
    prefix = {
        "Reaper": "SchedulerWorkerReaperFunction",
        "Claim": "SchedulerTickClaimFunction",
    }.get(concern, f"Scheduler{concern}Function")
    (found,) = [
        logical_id
        for logical_id in resources_of(template, "AWS::Lambda::Function")
        if logical_id.startswith(prefix) and not logical_id.startswith(prefix + "Role")
    ]
    return found


def function(template: dict[str, Any], concern: str) -> dict[str, Any]:
    return resources_of(template, "AWS::Lambda::Function")[function_id(template, concern)]


def environment(template: dict[str, Any], concern: str = "Worker") -> dict[str, Any]:
    return dict(function(template, concern)["Environment"]["Variables"])


def referenced(template: dict[str, Any], definition: TableDefinition | QueueDefinition) -> str:
    """The logical id that a definition's environment variable points the code at."""
    value = environment(template)[definition.env_var]
    assert set(value) == {"Ref"}, value
    return str(value["Ref"])


def key_schema(partition_key: Key, sort_key: Key | None) -> list[dict[str, str]]:
    schema = [{"AttributeName": partition_key.name, "KeyType": "HASH"}]
    if sort_key is not None:
        schema.append({"AttributeName": sort_key.name, "KeyType": "RANGE"})
    return schema


# --- storage ---------------------------------------------------------------------------


def test_every_table_has_the_keys_and_indexes_of_its_definition(
    template: dict[str, Any],
) -> None:
    tables = resources_of(template, "AWS::DynamoDB::Table")
    assert len(tables) == len(TABLES)
    for definition in TABLES:
        table = tables[referenced(template, definition)]
        assert table["KeySchema"] == key_schema(definition.partition_key, definition.sort_key)
        indexes = {i["IndexName"]: i for i in table.get("GlobalSecondaryIndexes", [])}
        assert set(indexes) == {index.name for index in definition.indexes}
        for index in definition.indexes:
            assert indexes[index.name]["KeySchema"] == key_schema(
                index.partition_key, index.sort_key
            )
            assert indexes[index.name]["Projection"]["ProjectionType"] == index.projection
            included = indexes[index.name]["Projection"].get("NonKeyAttributes", [])
            assert included == list(index.non_key_attributes)
        types = {a["AttributeName"]: a["AttributeType"] for a in table["AttributeDefinitions"]}
        for index in definition.indexes:
            for key in (index.partition_key, index.sort_key):
                assert types[key.name] == key.type


def test_tasks_are_indexed_by_due_time_and_by_tenant(template: dict[str, Any]) -> None:
    tasks = resources_of(template, "AWS::DynamoDB::Table")[referenced(template, TASKS)]
    indexes = {i["IndexName"]: i for i in tasks["GlobalSecondaryIndexes"]}
    assert set(indexes) == {
        DUE_INDEX.name,
        TENANT_INDEX.name,
        DEPENDENTS_INDEX.name,
        NAME_INDEX.name,
    }
    keys = {name: [k["AttributeName"] for k in i["KeySchema"]] for name, i in indexes.items()}
    assert keys[DUE_INDEX.name] == ["due_bucket", "next_run_at"]
    assert indexes[DUE_INDEX.name]["Projection"]["ProjectionType"] == "KEYS_ONLY"
    # write-sharded (decision 0053): a tenant's entries over TENANT_INDEX_PARTS partitions
    assert keys[TENANT_INDEX.name] == ["tenant_part", "created_at"]
    # keys and tags only: a claim changes no projected attribute, so it never
    # rewrites the entry
    assert indexes[TENANT_INDEX.name]["Projection"] == {
        "ProjectionType": "INCLUDE",
        "NonKeyAttributes": ["tags"],
    }
    assert keys[DEPENDENTS_INDEX.name] == ["after_task_id", "task_id"]
    # by name: keys only, so a claim (which never changes the name) writes nothing there
    assert keys[NAME_INDEX.name] == ["tenant_part", "name_key"]
    assert indexes[NAME_INDEX.name]["Projection"] == {"ProjectionType": "KEYS_ONLY"}


def test_tables_expire_records_recover_to_a_point_in_time_and_cost_nothing_idle(
    template: dict[str, Any],
) -> None:
    tables = resources_of(template, "AWS::DynamoDB::Table")
    for definition in TABLES:
        table = tables[referenced(template, definition)]
        if definition.ttl_attribute:
            assert table["TimeToLiveSpecification"] == {
                "AttributeName": definition.ttl_attribute,
                "Enabled": True,
            }
        else:
            assert "TimeToLiveSpecification" not in table
        assert table["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"] is True
        assert table["BillingMode"] == "PAY_PER_REQUEST"
        # Not production: no deletion protection, and deleting the stack deletes data.
        assert table["DeletionProtectionEnabled"] is False
        assert template["Resources"][referenced(template, definition)]["DeletionPolicy"] == (
            "Delete"
        )


def test_production_tables_are_protected_and_provisioned_ones_scale(
    user_template: dict[str, Any],
) -> None:
    tables = resources_of(user_template, "AWS::DynamoDB::Table")
    for logical_id, table in tables.items():
        assert table["DeletionProtectionEnabled"] is True
        assert user_template["Resources"][logical_id]["DeletionPolicy"] == "Retain"
        assert "BillingMode" not in table or table["BillingMode"] == "PROVISIONED"
    targets = resources_of(user_template, "AWS::ApplicationAutoScaling::ScalableTarget")
    # Reads and writes of every table, and of each index.
    assert len(targets) == 2 * (len(TABLES) + sum(len(t.indexes) for t in TABLES))
    assert {t["MaxCapacity"] for t in targets.values()} == {USER_CONFIG.provisioned_max_capacity}


# --- queues ----------------------------------------------------------------------------


def test_the_dispatch_queue_redrives_to_the_undelivered_queue(template: dict[str, Any]) -> None:
    queues = resources_of(template, "AWS::SQS::Queue")
    assert len(queues) == len(QUEUES)
    dispatch = queues[referenced(template, DISPATCH_QUEUE)]
    assert dispatch["RedrivePolicy"] == {
        "deadLetterTargetArn": {"Fn::GetAtt": [referenced(template, UNDELIVERED_QUEUE), "Arn"]},
        "maxReceiveCount": DISPATCH_QUEUE.max_receive_count,
    }
    # Decision 0022: the undelivered queue's function forwards what it cannot read
    # itself; a redrive policy there could count the receives of the dispatch queue.
    assert "RedrivePolicy" not in queues[referenced(template, UNDELIVERED_QUEUE)]
    assert "RedrivePolicy" not in queues[referenced(template, DEAD_LETTER_QUEUE)]
    for definition in QUEUES:
        queue = queues[referenced(template, definition)]
        assert queue["SqsManagedSseEnabled"] is True
        assert queue["MessageRetentionPeriod"] == definition.retention_seconds


def test_queues_refuse_requests_without_tls(template: dict[str, Any]) -> None:
    policies = resources_of(template, "AWS::SQS::QueuePolicy").values()
    guarded = set()
    for policy in policies:
        for statement in policy["PolicyDocument"]["Statement"]:
            if statement["Effect"] == "Deny" and statement["Condition"] == {
                "Bool": {"aws:SecureTransport": "false"}
            }:
                guarded |= {ref["Ref"] for ref in policy["Queues"]}
    assert guarded == {referenced(template, q) for q in QUEUES}


def test_the_visibility_timeout_is_six_worker_timeouts_plus_the_batch_window(
    template: dict[str, Any], user_template: dict[str, Any]
) -> None:
    for tmpl, window in (
        (template, SchedulerConfig().worker_batch_window_seconds),
        (user_template, USER_CONFIG.worker_batch_window_seconds),
    ):
        dispatch = resources_of(tmpl, "AWS::SQS::Queue")[referenced(tmpl, DISPATCH_QUEUE)]
        assert function(tmpl, "Worker")["Timeout"] == WORKER_TIMEOUT_SECONDS
        assert dispatch["VisibilityTimeout"] >= 6 * WORKER_TIMEOUT_SECONDS + window


# --- functions -------------------------------------------------------------------------


def test_functions_run_on_arm64_python_3_12_with_both_layers(template: dict[str, Any]) -> None:
    layers = list(resources_of(template, "AWS::Lambda::LayerVersion"))
    assert len(layers) == 2
    for concern in FUNCTIONS:
        properties = function(template, concern)
        assert properties["Architectures"] == ["arm64"]
        assert properties["Runtime"] == "python3.12"
        assert properties["Handler"] == "handler.handler"
        assert [layer["Ref"] for layer in properties["Layers"]] == layers


def test_every_function_is_told_every_name_through_the_variables_settings_read(
    template: dict[str, Any],
) -> None:
    tables = resources_of(template, "AWS::DynamoDB::Table")
    queues = resources_of(template, "AWS::SQS::Queue")
    for concern in FUNCTIONS:
        env = environment(template, concern)
        for table in TABLES:
            assert env[table.env_var]["Ref"] in tables
        for queue in QUEUES:
            assert env[queue.env_var]["Ref"] in queues
        assert env[SHARD_COUNT_VAR] == str(Settings.shard_count)
        assert env[BUCKET_SECONDS_VAR] == str(Settings.bucket_seconds)
        assert env["POWERTOOLS_METRICS_NAMESPACE"] == metric_names.NAMESPACE
    assert len({environment(template, c)[TASKS.env_var]["Ref"] for c in FUNCTIONS}) == 1


def test_the_worker_reports_batch_item_failures_with_bounded_concurrency(
    template: dict[str, Any], user_template: dict[str, Any]
) -> None:
    (mapping,) = event_source_mappings(template, "Worker")
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert mapping["EventSourceArn"] == {
        "Fn::GetAtt": [referenced(template, DISPATCH_QUEUE), "Arn"]
    }
    assert mapping["FunctionName"] == {"Ref": function_id(template, "Worker")}
    # Decision 0034: batches of up to 100, gathered for at most a second
    assert (mapping["BatchSize"], mapping["MaximumBatchingWindowInSeconds"]) == (100, 1)
    assert mapping["BatchSize"] == SchedulerConfig().worker_batch_size
    assert mapping["ScalingConfig"] == {
        "MaximumConcurrency": SchedulerConfig().worker_max_concurrency
    }
    (user_mapping,) = event_source_mappings(user_template, "Worker")
    assert user_mapping["ScalingConfig"] == {
        "MaximumConcurrency": USER_CONFIG.worker_max_concurrency
    }
    assert user_mapping["MaximumBatchingWindowInSeconds"] == (
        USER_CONFIG.worker_batch_window_seconds
    )


def test_the_worker_runs_its_records_at_once_with_the_cpu_to_feed_them(
    template: dict[str, Any],
) -> None:
    from dynacron.definitions.environment import WORKER_CONCURRENCY_VAR

    # Decision 0034: 32 calls in flight, and 1,024 MB (0.58 vCPU) to keep them fed
    env = environment(template, "Worker")
    assert env[WORKER_CONCURRENCY_VAR] == str(Settings.worker_concurrency) == "32"
    assert function(template, "Worker")["MemorySize"] == SchedulerConfig().worker_memory_mb
    assert SchedulerConfig().worker_memory_mb == 1024
    # What the worker reads back is what was configured; no other function reads it.
    resolved = {name: value for name, value in env.items() if isinstance(value, str)}
    settings = Settings.from_env({**Settings("t", "e", "c", "d", "dl").to_env(), **resolved})
    assert settings.worker_concurrency == SchedulerConfig().worker_concurrency
    for concern in ("Tick", "Api", "Reaper"):
        assert WORKER_CONCURRENCY_VAR not in environment(template, concern)


def event_source_mappings(template: dict[str, Any], concern: str) -> list[dict[str, Any]]:
    return [
        mapping
        for mapping in resources_of(template, "AWS::Lambda::EventSourceMapping").values()
        if mapping["FunctionName"] == {"Ref": function_id(template, concern)}
    ]


def test_the_undelivered_queue_feeds_its_own_small_function(template: dict[str, Any]) -> None:
    assert len(resources_of(template, "AWS::Lambda::EventSourceMapping")) == 2
    (mapping,) = event_source_mappings(template, "Undelivered")
    assert mapping["EventSourceArn"] == {
        "Fn::GetAtt": [referenced(template, UNDELIVERED_QUEUE), "Arn"]
    }
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert mapping["ScalingConfig"] == {"MaximumConcurrency": 2}
    assert function(template, "Undelivered")["Timeout"] == UNDELIVERED_TIMEOUT_SECONDS
    queue = resources_of(template, "AWS::SQS::Queue")[referenced(template, UNDELIVERED_QUEUE)]
    assert queue["VisibilityTimeout"] >= 6 * UNDELIVERED_TIMEOUT_SECONDS


def test_a_user_runs_their_own_worker_code(
    template: dict[str, Any], user_template: dict[str, Any]
) -> None:
    user_worker = function(user_template, "Worker")
    assert user_worker["Handler"] == USER_WORKER_HANDLER
    assert user_worker["Code"]["S3Key"] != function(template, "Worker")["Code"]["S3Key"]
    # The rest of the scheduler is the same dynacron.
    assert (
        function(user_template, "Tick")["Code"]["S3Key"]
        == (function(template, "Tick")["Code"]["S3Key"])
    )


def test_the_user_s_api_knows_their_handlers_as_their_worker_does(
    template: dict[str, Any], user_template: dict[str, Any]
) -> None:
    # The API runs the user's code too (dynacron's entry point from the layer) and
    # imports the module that registers their handlers, so it accepts their names.
    user_api, user_worker = function(user_template, "Api"), function(user_template, "Worker")
    assert user_api["Code"]["S3Key"] == user_worker["Code"]["S3Key"]
    assert user_api["Handler"] == "dynacron.entry.functions.api"
    modules = USER_WORKER_HANDLER.rsplit(".", 1)[0]
    for properties in (user_api, user_worker):
        assert properties["Environment"]["Variables"][HANDLER_MODULES_VAR] == modules
    # A stack without user code names no handler modules.
    for concern in FUNCTIONS:
        assert HANDLER_MODULES_VAR not in environment(template, concern)


# --- tick and reaper -------------------------------------------------------------------


def tick_targets(template: dict[str, Any]) -> list[dict[str, Any]]:
    tick = function_id(template, "Tick")
    return [
        target
        for rule in resources_of(template, "AWS::Events::Rule").values()
        for target in rule["Targets"]
        if target["Arn"] == {"Fn::GetAtt": [tick, "Arn"]}
        and rule["ScheduleExpression"] == "rate(1 minute)"
    ]


def test_every_shard_gets_one_looping_tick_invocation_a_minute(
    template: dict[str, Any], user_template: dict[str, Any]
) -> None:
    for tmpl, shards in ((template, Settings.shard_count), (user_template, 7)):
        inputs = sorted(
            (json.loads(t["Input"]) for t in tick_targets(tmpl)), key=lambda i: i["shard"]
        )
        assert inputs == [{"shard": shard, "loop": True} for shard in range(shards)]
    # Seven shards need two rules: EventBridge allows five targets per rule.
    scheduled = [
        rule
        for rule in resources_of(user_template, "AWS::Events::Rule").values()
        if "ScheduleExpression" in rule
    ]
    assert len(scheduled) == 2 + 1  # + the reaper (the others match events: decision 0049)


def test_tick_outlives_its_loop_and_is_never_retried(template: dict[str, Any]) -> None:
    # Decision 0036: an invocation stands by for a minute, then holds the shard for
    # a minute; the invocation after next arrives 15 s before it hands over, so a
    # holder always has a standby; the loop stops 15 s before the timeout.
    assert function(template, "Tick")["Timeout"] == 60 + 60 + 15 + 15
    configs = resources_of(template, "AWS::Lambda::EventInvokeConfig")
    tick = [
        c for c in configs.values() if c["FunctionName"] == {"Ref": function_id(template, "Tick")}
    ]
    assert tick == [
        {
            "FunctionName": {"Ref": function_id(template, "Tick")},
            "MaximumEventAgeInSeconds": 60,
            "MaximumRetryAttempts": 0,
            "Qualifier": "$LATEST",
        }
    ]


def test_the_reaper_runs_every_minute(template: dict[str, Any]) -> None:
    reaper = function_id(template, "Reaper")
    rules = [
        rule
        for rule in resources_of(template, "AWS::Events::Rule").values()
        if any(t["Arn"] == {"Fn::GetAtt": [reaper, "Arn"]} for t in rule["Targets"])
    ]
    assert [rule["ScheduleExpression"] for rule in rules] == ["rate(1 minute)"]


def test_only_the_ends_of_dynacrons_step_functions_and_ecs_runs_reach_completions(
    template: dict[str, Any],
) -> None:
    completions = {"Fn::GetAtt": [function_id(template, "Completions"), "Arn"]}
    rules = [
        rule
        for rule in resources_of(template, "AWS::Events::Rule").values()
        if any(t["Arn"] == completions for t in rule["Targets"])
    ]
    patterns = sorted((rule["EventPattern"] for rule in rules), key=json.dumps)
    assert patterns == [
        {
            "detail": {"lastStatus": ["STOPPED"], "startedBy": [{"prefix": "dynacron-"}]},
            "detail-type": ["ECS Task State Change"],
            "source": ["aws.ecs"],
        },
        {
            "detail": {
                "status": ["SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"],
                "name": [{"prefix": "dynacron-"}],
            },
            "detail-type": ["Step Functions Execution Status Change"],
            "source": ["aws.states"],
        },
    ]
    # on the account's default bus, retried for a day if the function fails
    for rule in rules:
        assert "EventBusName" not in rule
        ((target),) = rule["Targets"]
        assert target["RetryPolicy"] == {
            "MaximumEventAgeInSeconds": 86400,
            "MaximumRetryAttempts": 185,
        }


# --- API -------------------------------------------------------------------------------


def test_every_api_method_requires_iam_and_is_validated(template: dict[str, Any]) -> None:
    methods = resources_of(template, "AWS::ApiGateway::Method")
    validators = resources_of(template, "AWS::ApiGateway::RequestValidator")
    (validator,) = validators.values()
    assert validator["ValidateRequestBody"] is True
    assert validator["ValidateRequestParameters"] is True
    assert methods
    # ...but the token-authorised callbacks (test_only_the_callbacks_take_no_iam)
    callbacks = {k for k, path in method_paths(template).items() if path.startswith("/callbacks/")}
    for logical_id, method in methods.items():
        if logical_id in callbacks:
            continue
        assert method["AuthorizationType"] == "AWS_IAM"
        assert method["Integration"]["Type"] == "AWS_PROXY"
    # The two creates (POST /tasks and /tasks/batch) have the gateway check their body
    posts = [m for k, m in methods.items() if m["HttpMethod"] == "POST" and k not in callbacks]
    assert len(posts) == 2
    assert all("application/json" in post["RequestModels"] for post in posts)
    assert all("RequestValidatorId" in m for m in methods.values())


def test_the_api_stage_is_throttled_and_logs_every_request(template: dict[str, Any]) -> None:
    (stage,) = resources_of(template, "AWS::ApiGateway::Stage").values()
    assert stage["StageName"] == "test"
    (settings,) = [m for m in stage["MethodSettings"] if m["ResourcePath"] == "/*"]
    assert settings["ThrottlingRateLimit"] == 50
    assert settings["ThrottlingBurstLimit"] == 100
    log_group = stage["AccessLogSetting"]["DestinationArn"]["Fn::GetAtt"][0]
    assert template["Resources"][log_group]["Type"] == "AWS::Logs::LogGroup"
    assert "$context.requestId" in stage["AccessLogSetting"]["Format"]


def test_a_body_refused_by_the_gateway_is_still_problem_json(template: dict[str, Any]) -> None:
    responses = {
        r["ResponseType"]: r
        for r in resources_of(template, "AWS::ApiGateway::GatewayResponse").values()
    }
    assert sorted(responses) == ["BAD_REQUEST_BODY", "REQUEST_TOO_LARGE", "THROTTLED"]
    for response in responses.values():
        headers = response["ResponseParameters"]
        assert headers["gatewayresponse.header.Content-Type"] == "'application/problem+json'"
    # The OpenAPI document declares 413 and 429 as problem+json, 429 with Retry-After.
    assert responses["THROTTLED"]["StatusCode"] == "429"
    assert "gatewayresponse.header.Retry-After" in responses["THROTTLED"]["ResponseParameters"]
    assert responses["REQUEST_TOO_LARGE"]["StatusCode"] == "413"


def test_every_method_on_tasks_reaches_the_function(template: dict[str, Any]) -> None:
    """An undeclared method on /tasks is answered by the function (405 with Allow),
    not by API Gateway, as on every other path (finding 8)."""
    resources = resources_of(template, "AWS::ApiGateway::Resource")
    (tasks,) = [k for k, r in resources.items() if r["PathPart"] == "tasks"]
    methods = resources_of(template, "AWS::ApiGateway::Method").values()
    on_tasks = {m["HttpMethod"] for m in methods if m["ResourceId"] == {"Ref": tasks}}
    assert on_tasks == {"ANY", "GET", "POST"}


def test_the_batch_create_is_signed_and_checked_as_a_create(template: dict[str, Any]) -> None:
    """POST /tasks/batch has its own method, IAM-signed and its body checked to be a
    JSON object by the gateway, as POST /tasks; any other method reaches the function."""
    methods = resources_of(template, "AWS::ApiGateway::Method")
    paths = method_paths(template)
    on_batch = {k: m for k, m in methods.items() if paths[k] == "/tasks/batch"}
    assert {m["HttpMethod"] for m in on_batch.values()} == {"ANY", "POST"}
    assert {m["AuthorizationType"] for m in on_batch.values()} == {"AWS_IAM"}
    (post,) = [m for m in on_batch.values() if m["HttpMethod"] == "POST"]
    (create,) = [
        m for k, m in methods.items() if paths[k] == "/tasks" and m["HttpMethod"] == "POST"
    ]
    assert post["RequestModels"] == create["RequestModels"]
    assert post["Integration"] == create["Integration"]


def method_paths(template: dict[str, Any]) -> dict[str, str]:
    """Each API method's logical id -> its resource path, e.g. ``/tasks/{proxy+}``."""
    resources = resources_of(template, "AWS::ApiGateway::Resource")

    def path_of(reference: dict[str, Any]) -> str:
        if "Ref" not in reference:  # the root: {"Fn::GetAtt": [api, "RootResourceId"]}
            return ""
        resource = resources[reference["Ref"]]
        return f"{path_of(resource['ParentId'])}/{resource['PathPart']}"

    return {
        logical_id: path_of(method["ResourceId"]) or "/"
        for logical_id, method in resources_of(template, "AWS::ApiGateway::Method").items()
    }


def test_only_the_callbacks_take_no_iam(template: dict[str, Any]) -> None:
    """Decision 0023: exactly POST heartbeat and complete under /callbacks are open to
    a caller with no AWS identity (the function checks the token); nothing else."""
    methods = resources_of(template, "AWS::ApiGateway::Method")
    paths = method_paths(template)
    unauthenticated = sorted(
        (paths[k], m["HttpMethod"])
        for k, m in methods.items()
        if m["AuthorizationType"] != "AWS_IAM"
    )
    assert unauthenticated == [
        ("/callbacks/{execution_id}/complete", "POST"),
        ("/callbacks/{execution_id}/heartbeat", "POST"),
    ]
    for logical_id, method in methods.items():
        if paths[logical_id].startswith("/callbacks/"):
            assert method["AuthorizationType"] == "NONE"
            assert method["Integration"]["Type"] == "AWS_PROXY"
            assert "RequestValidatorId" in method
    # A completion's body is checked by the gateway before it costs an invocation
    (complete,) = [k for k, p in paths.items() if p.endswith("/complete")]
    model_id = methods[complete]["RequestModels"]["application/json"]["Ref"]
    schema = resources_of(template, "AWS::ApiGateway::Model")[model_id]["Schema"]
    # ...by the same rules as the function's model, so the two cannot disagree
    from dynacron.api.requests import CompleteRequest

    model = CompleteRequest.model_json_schema()
    assert schema["additionalProperties"] is model["additionalProperties"] is False
    assert schema["required"] == model["required"]
    assert schema["properties"]["status"]["enum"] == model["properties"]["status"]["enum"]
    (text,) = [t for t in model["properties"]["error"]["anyOf"] if t["type"] == "string"]
    assert schema["properties"]["error"]["maxLength"] == text["maxLength"]


def test_the_callbacks_are_throttled_on_their_own(template: dict[str, Any]) -> None:
    (stage,) = resources_of(template, "AWS::ApiGateway::Stage").values()
    by_path = {
        (m["ResourcePath"], m["HttpMethod"]): m
        for m in stage["MethodSettings"]
        if m["ResourcePath"] != "/*"
    }
    config = SchedulerConfig()
    assert sorted(by_path) == [
        ("/~1callbacks~1{execution_id}~1complete", "POST"),
        ("/~1callbacks~1{execution_id}~1heartbeat", "POST"),
    ]
    for settings in by_path.values():
        assert settings["ThrottlingRateLimit"] == config.callback_rate_limit
        assert settings["ThrottlingBurstLimit"] == config.callback_burst_limit


def test_the_worker_is_told_the_api_url_for_callbacks(template: dict[str, Any]) -> None:
    """Every 202-capable delivery names absolute callback URLs on this API's stage."""
    from dynacron.entry.settings import API_URL_VAR

    (rest_api,) = resources_of(template, "AWS::ApiGateway::RestApi")
    (stage,) = resources_of(template, "AWS::ApiGateway::Stage")
    url = environment(template, "Worker")[API_URL_VAR]
    parts = url["Fn::Join"][1]
    assert parts[0] == "https://"
    assert {"Ref": rest_api} in parts
    assert {"Ref": stage} in parts
    # The stack's own ApiUrl output is the same URL
    (output,) = [o for k, o in template["Outputs"].items() if k.startswith("ApiUrl")]
    assert output["Value"] == url
    # Only the worker delivers
    for concern in FUNCTIONS:
        if concern != "Worker":
            assert API_URL_VAR not in environment(template, concern)


def test_the_stack_names_the_coordination_table_the_api_reads_tenant_limits_from(
    template: dict[str, Any],
) -> None:
    """`dynacron tenants set-limits --coordination-table` takes the stack's output."""
    (output,) = [o for k, o in template["Outputs"].items() if k.startswith("CoordinationTable")]
    tables = resources_of(template, "AWS::DynamoDB::Table")
    (table,) = [name for name in tables if COORDINATION.logical_id in name]
    assert output["Value"] == {"Ref": table}
    # ...the very table the API (which holds tenants to their limits) is told to read
    assert environment(template, "Api")[COORDINATION.env_var] == output["Value"]
    assert "--coordination-table" in output["Description"]


def test_the_stack_names_the_tasks_table_the_name_key_backfill_writes(
    template: dict[str, Any],
) -> None:
    """`dynacron admin backfill-name-keys --tasks-table` takes the stack's output."""
    (output,) = [o for k, o in template["Outputs"].items() if k.startswith("TasksTable")]
    tables = resources_of(template, "AWS::DynamoDB::Table")
    (table,) = [name for name in tables if TASKS.logical_id in name]
    assert output["Value"] == {"Ref": table}
    # ...the very table the API lists tasks from
    assert environment(template, "Api")[TASKS.env_var] == output["Value"]
    assert "--tasks-table" in output["Description"]


def test_the_stack_names_the_executions_table_the_census_backfill_writes(
    template: dict[str, Any],
) -> None:
    """`dynacron admin backfill-census --executions-table` takes the stack's output:
    the table the schedule census lives in (decision 0046)."""
    (output,) = [o for k, o in template["Outputs"].items() if k.startswith("ExecutionsTable")]
    tables = resources_of(template, "AWS::DynamoDB::Table")
    (table,) = [name for name in tables if EXECUTIONS.logical_id in name]
    assert output["Value"] == {"Ref": table}
    assert environment(template, "Api")[EXECUTIONS.env_var] == output["Value"]
    assert "--executions-table" in output["Description"]


# --- least privilege -------------------------------------------------------------------


# The default ``target_roles``: roles under the path /dynacron-target/ of the stack's account.
TARGET_ROLES = {
    "Fn::Join": [
        "",
        [
            "arn:",
            {"Ref": "AWS::Partition"},
            ":iam::",
            {"Ref": "AWS::AccountId"},
            ":role/dynacron-target/*",
        ],
    ]
}


def test_the_worker_assumes_only_the_roles_the_operator_allows(template: dict[str, Any]) -> None:
    role = function(template, "Worker")["Role"]["Fn::GetAtt"][0]
    assumed = [
        statement["Resource"]
        for policy in resources_of(template, "AWS::IAM::Policy").values()
        if {"Ref": role} in policy["Roles"]
        for statement in policy["PolicyDocument"]["Statement"]
        if "sts:AssumeRole" in statement["Action"]
    ]
    assert assumed == [TARGET_ROLES]
    # the API refuses a target naming another role: it is told the same patterns
    assert environment(template, "Api")[TARGET_ROLES_VAR] == TARGET_ROLES
    # and what a target's trust policy names is an output of the stack
    outputs = template["Outputs"].values()
    assert {"Fn::GetAtt": [role, "Arn"]} in [o["Value"] for o in outputs]


def access_of(template: dict[str, Any], concern: str) -> dict[str, set[str]]:
    """What a function's role may do: resource label -> actions.

    Labels are the definitions' logical ids (``Tasks``, ``Tasks/index/due-index``,
    ``DispatchQueue``...) and ``own logs``; anything else fails the lookup.
    """
    labels: dict[str, str] = {}
    for definition in (*TABLES, *QUEUES):
        labels[json.dumps({"Fn::GetAtt": [referenced(template, definition), "Arn"]})] = (
            definition.logical_id
        )
    for table in TABLES:
        for index in table.indexes:
            arn = {
                "Fn::Join": [
                    "",
                    [{"Fn::GetAtt": [referenced(template, table), "Arn"]}, f"/index/{index.name}"],
                ]
            }
            labels[json.dumps(arn)] = f"{table.logical_id}/index/{index.name}"
    properties = function(template, concern)
    role = properties["Role"]["Fn::GetAtt"][0]
    own_logs = properties["LoggingConfig"]["LogGroup"]["Ref"]
    labels[json.dumps({"Fn::GetAtt": [own_logs, "Arn"]})] = "own logs"
    labels[json.dumps(TARGET_ROLES)] = "target roles"
    for other in FUNCTIONS:
        labels[json.dumps({"Fn::GetAtt": [function_id(template, other), "Arn"]})] = (
            f"{other} function"
        )
    access: dict[str, set[str]] = {}
    for policy in resources_of(template, "AWS::IAM::Policy").values():
        if {"Ref": role} not in policy["Roles"]:
            continue
        for statement in policy["PolicyDocument"]["Statement"]:
            assert statement["Effect"] == "Allow"
            actions = statement["Action"]
            resources = statement["Resource"]
            for resource in resources if isinstance(resources, list) else [resources]:
                label = labels[json.dumps(resource)]
                access.setdefault(label, set()).update(
                    actions if isinstance(actions, list) else [actions]
                )
    return access


ITEM_READ_WRITE = {
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
}
LOGS = {"logs:CreateLogStream", "logs:PutLogEvents"}
# Ending an execution frees its task's run slot and starts its dependents
# (services/follow_ups.py); the worker, the reaper and the API (callbacks) all may.
# An unreadable dependent is set aside (an update, decision 0021).
FOLLOW_UPS = {
    "Tasks": {
        "dynamodb:GetItem",
        "dynamodb:BatchGetItem",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
    },
    "Tasks/index/dependents-index": {"dynamodb:Query"},
    # DeleteItem: census entries only, once they count no task (decision 0046)
    "Executions": {
        "dynamodb:GetItem",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:DeleteItem",
    },
    "DispatchQueue": {"sqs:SendMessage"},
}

EXPECTED_ACCESS = {
    "Tick": {
        "own logs": LOGS,
        # GetItem: a task set aside leaves the schedule census (decision 0046)
        "Tasks": {"dynamodb:BatchGetItem", "dynamodb:UpdateItem", "dynamodb:GetItem"},
        "Tasks/index/due-index": {"dynamodb:Query"},
        # SKIPPED records of the overlap policy; UpdateItem: census# entries only
        "Executions": {"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"},
        "Coordination": ITEM_READ_WRITE,
        "DispatchQueue": {"sqs:SendMessage", "sqs:GetQueueAttributes"},
        # Decision 0025: large pages go to the claim function, and nothing else is invoked
        "Claim function": {"lambda:InvokeFunction"},
    },
    # The tick's page path for a page handed to it: no due-index query, no lease or
    # cursor write (it reads its shard's cursor item only), no queue depth.
    "Claim": {
        "own logs": LOGS,
        "Tasks": {"dynamodb:BatchGetItem", "dynamodb:UpdateItem", "dynamodb:GetItem"},
        "Executions": {"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"},
        "Coordination": {"dynamodb:GetItem"},
        "DispatchQueue": {"sqs:SendMessage"},
    },
    "Worker": {
        "own logs": LOGS,
        **FOLLOW_UPS,
        # the tenant of a deleted task, from its earlier executions (an old message)
        "Executions": FOLLOW_UPS["Executions"] | {"dynamodb:Query"},
        # BatchGetItem: a batch's host breakers in one read (decision 0034)
        "Coordination": ITEM_READ_WRITE | {"dynamodb:BatchGetItem"},
        "DispatchQueue": {
            # what the event source mapping needs, and sending follow-up runs
            "sqs:ReceiveMessage",
            "sqs:ChangeMessageVisibility",
            "sqs:GetQueueUrl",
            "sqs:DeleteMessage",
            "sqs:GetQueueAttributes",
            "sqs:SendMessage",
        },
        "DeadLetterQueue": {"sqs:SendMessage"},
        # AWS targets, as the role each names (decision 0047): only roles under the
        # operator's pattern, by default the path /dynacron-target/ of this account
        "target roles": {"sts:AssumeRole"},
    },
    "Api": {
        "own logs": LOGS,
        **FOLLOW_UPS,
        "Tasks": {
            "dynamodb:PutItem",
            "dynamodb:GetItem",
            "dynamodb:BatchGetItem",
            "dynamodb:DeleteItem",
            "dynamodb:ConditionCheckItem",
            # FOLLOW_UPS' (a callback's), and an ``after`` marks its upstream
            # (transitions.mark_has_dependents): tests/deployed fails without it
            "dynamodb:UpdateItem",
        },
        "Tasks/index/tenant-part-index": {"dynamodb:Query"},
        "Tasks/index/name-part-index": {"dynamodb:Query"},
        "Coordination": {"dynamodb:GetItem", "dynamodb:UpdateItem"},
        "Executions": {
            "dynamodb:Query",
            "dynamodb:GetItem",
            # GET /executions reads the items of the attention index's keys
            "dynamodb:BatchGetItem",
            "dynamodb:PutItem",
            "dynamodb:UpdateItem",
            "dynamodb:DeleteItem",
        },
        "Executions/index/dead-letter-index": {"dynamodb:Query"},
        "Executions/index/attention-index": {"dynamodb:Query"},
        "DeadLetterQueue": {
            "sqs:SendMessage",
            "sqs:ReceiveMessage",
            "sqs:DeleteMessage",
            "sqs:ChangeMessageVisibility",
        },
    },
    "Reaper": {
        "own logs": LOGS,
        **FOLLOW_UPS,
        "Executions/index/lease-index": {"dynamodb:Query"},
        "Executions/index/dead-letter-index": {"dynamodb:Query"},
        "Executions": {
            "dynamodb:Query",
            "dynamodb:GetItem",
            "dynamodb:PutItem",
            "dynamodb:UpdateItem",
            "dynamodb:DeleteItem",
        },
        "DeadLetterQueue": {"sqs:SendMessage"},
        # a tracked run whose end event was lost is described as its task's role
        # (decision 0049): the roles the worker may assume, no more
        "target roles": {"sts:AssumeRole"},
    },
    # Decision 0049: ends a tracked execution as a callback does (follow-ups, a
    # retry, a dead letter); no role assumed, no index queried.
    "Completions": {
        "own logs": LOGS,
        **FOLLOW_UPS,
        "DeadLetterQueue": {"sqs:SendMessage"},
    },
    # Decision 0022: records a dispatch that never began as a dead letter (or takes
    # over the running attempt it guarded), frees the run slot, sends the copy.
    "Undelivered": {
        "own logs": LOGS,
        # UpdateItem: a task that cannot be read is set aside (decision 0021);
        # BatchGetItem and the dependents index: a dead letter starts the tasks that
        # run after failures (decision 0058)
        "Tasks": {
            "dynamodb:GetItem",
            "dynamodb:PutItem",
            "dynamodb:UpdateItem",
            "dynamodb:BatchGetItem",
        },
        "Tasks/index/dependents-index": {"dynamodb:Query"},
        # Query: the tenant of an old message, from the task's earlier executions
        "Executions": {
            "dynamodb:GetItem",
            "dynamodb:PutItem",
            "dynamodb:UpdateItem",
            "dynamodb:Query",
            "dynamodb:DeleteItem",
        },
        "DispatchQueue": {"sqs:SendMessage"},
        "UndeliveredQueue": {
            # what the event source mapping needs
            "sqs:ReceiveMessage",
            "sqs:ChangeMessageVisibility",
            "sqs:GetQueueUrl",
            "sqs:DeleteMessage",
            "sqs:GetQueueAttributes",
        },
        "DeadLetterQueue": {"sqs:SendMessage"},
    },
}


def test_each_function_may_do_exactly_what_it_uses_on_exactly_what_it_uses(
    template: dict[str, Any],
) -> None:
    for concern, expected in EXPECTED_ACCESS.items():
        assert access_of(template, concern) == expected, concern


def worker_coordination_keys(template: dict[str, Any]) -> dict[str, set[str]]:
    """Each action the worker may take in the coordination table, with the leading
    keys it may take it on (every statement there must be limited to some)."""
    role = function(template, "Worker")["Role"]["Fn::GetAtt"][0]
    table = {"Fn::GetAtt": [referenced(template, COORDINATION), "Arn"]}
    keys: dict[str, set[str]] = {}
    for policy in resources_of(template, "AWS::IAM::Policy").values():
        if {"Ref": role} not in policy["Roles"]:
            continue
        for statement in policy["PolicyDocument"]["Statement"]:
            if statement["Resource"] == table:
                condition = statement["Condition"]["ForAllValues:StringLike"]
                actions = statement["Action"]
                for action in [actions] if isinstance(actions, str) else actions:
                    keys.setdefault(action, set()).update(condition["dynamodb:LeadingKeys"])
    return keys


def test_task_writers_are_known_and_nothing_grants_a_wildcard(
    template: dict[str, Any],
) -> None:
    writers = {
        concern
        for concern in FUNCTIONS
        if access_of(template, concern).get(TASKS.logical_id, set()) & DYNAMODB_ITEM_WRITES
    }
    # The worker and the reaper write a task only to free its run slot, or to set
    # aside one that makes them raise (decision 0021).
    assert writers == {"Tick", "Claim", "Api", "Worker", "Reaper", "Undelivered", "Completions"}
    # In the coordination table the worker touches limit records, and reads
    # tenant records (signing secrets); never the tick's leases and cursors.
    assert worker_coordination_keys(template) == {
        "dynamodb:GetItem": {f"{p}*" for p in (*LIMIT_KEY_PREFIXES, TENANT_KEY_PREFIX)},
        "dynamodb:PutItem": {f"{p}*" for p in LIMIT_KEY_PREFIXES},
        "dynamodb:UpdateItem": {f"{p}*" for p in LIMIT_KEY_PREFIXES},
        "dynamodb:DeleteItem": {f"{p}*" for p in LIMIT_KEY_PREFIXES},
        "dynamodb:BatchGetItem": {f"{HOST_KEY_PREFIX}*"},
    }
    # SKIPPED records, and census entries of a task set aside (decision 0046)
    assert access_of(template, "Tick")[EXECUTIONS.logical_id] == {
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:DeleteItem",
    }
    document = json.dumps(resources_of(template, "AWS::IAM::Policy"))
    assert '"*"' not in document
    assert ':*"' not in document


# --- monitoring ------------------------------------------------------------------------


def test_alarms_watch_what_the_issue_asks_for_and_notify_the_topic(
    template: dict[str, Any],
) -> None:
    alarms = resources_of(template, "AWS::CloudWatch::Alarm")
    (topic,) = resources_of(template, "AWS::SNS::Topic")
    watched = {}
    for alarm in alarms.values():
        assert alarm["AlarmActions"] == [{"Ref": topic}]
        if "Metrics" in alarm:  # metric math: tests/infra/test_alarms.py
            continue
        assert alarm["TreatMissingData"] == "notBreaching"
        dimensions = {d["Name"]: d["Value"] for d in alarm.get("Dimensions", [])}
        subject = dimensions.get("QueueName") or dimensions.get("FunctionName")
        key = (alarm["Namespace"], alarm["MetricName"], json.dumps(subject))
        watched[key] = alarm
    queue_name = {q: {"Fn::GetAtt": [referenced(template, q), "QueueName"]} for q in QUEUES}
    functions = {c: {"Ref": function_id(template, c)} for c in ("Tick", "Worker")}
    errors_only = {c: {"Ref": function_id(template, c)} for c in ("Reaper", "Api", "Claim")}
    expected = [
        ("AWS/SQS", "ApproximateNumberOfMessagesVisible", queue_name[DEAD_LETTER_QUEUE]),
        ("AWS/SQS", "ApproximateAgeOfOldestMessage", queue_name[DISPATCH_QUEUE]),
        ("AWS/SQS", "ApproximateAgeOfOldestMessage", queue_name[UNDELIVERED_QUEUE]),
        *(("AWS/Lambda", m, functions[c]) for c in functions for m in ("Errors", "Throttles")),
        *(("AWS/Lambda", "Errors", errors_only[c]) for c in errors_only),
        ("AWS/ApiGateway", "5XXError", None),
        (metric_names.NAMESPACE, metric_names.QUEUE_LATENCY, None),
        (metric_names.NAMESPACE, metric_names.SCHEDULING_LAG, None),
        (metric_names.NAMESPACE, metric_names.LEASES_REAPED, None),
        (metric_names.NAMESPACE, metric_names.BREAKER_OPENED, None),
        (metric_names.NAMESPACE, metric_names.DISPATCH_PACED, None),
        (metric_names.NAMESPACE, metric_names.LIMIT_LATENESS, None),
        (metric_names.NAMESPACE, metric_names.TASKS_SET_ASIDE, None),
        (metric_names.NAMESPACE, metric_names.LEASES_SET_ASIDE, None),
        (metric_names.NAMESPACE, metric_names.TICK_FAILURES, None),
    ]
    assert set(watched) == {(ns, name, json.dumps(subject)) for ns, name, subject in expected}
    paced = watched[(metric_names.NAMESPACE, metric_names.DISPATCH_PACED, "null")]
    assert paced["EvaluationPeriods"] == 3
    assert paced["Threshold"] == 0
    lateness = watched[(metric_names.NAMESPACE, metric_names.LIMIT_LATENESS, "null")]
    assert lateness["Statistic"] == "Sum"
    assert lateness["Threshold"] == SchedulerConfig().limit_lateness_alarm_seconds
    set_aside = watched[(metric_names.NAMESPACE, metric_names.TASKS_SET_ASIDE, "null")]
    assert (set_aside["Statistic"], set_aside["Threshold"]) == ("Sum", 0)
    tick_failures = watched[(metric_names.NAMESPACE, metric_names.TICK_FAILURES, "null")]
    assert tick_failures["EvaluationPeriods"] == 3
    lag = watched[(metric_names.NAMESPACE, metric_names.SCHEDULING_LAG, "null")]
    assert lag["ExtendedStatistic"] == "p99"
    assert lag["Threshold"] == 10
    assert lag["Dimensions"] == [
        {"Name": metric_names.SERVICE_DIMENSION, "Value": metric_names.SERVICE}
    ]


def test_alarms_reach_the_configured_email_and_the_dashboard_shows_them(
    template: dict[str, Any], user_template: dict[str, Any]
) -> None:
    (subscription,) = resources_of(template, "AWS::SNS::Subscription").values()
    assert subscription["Protocol"] == "email"
    assert subscription["Endpoint"] == ALARM_EMAIL
    assert not resources_of(user_template, "AWS::SNS::Subscription")
    (dashboard,) = resources_of(template, "AWS::CloudWatch::Dashboard").values()
    body = json.dumps(dashboard["DashboardBody"])
    for name in (metric_names.SCHEDULING_LAG, metric_names.LEASES_REAPED, "Throttles"):
        assert name in body


def test_the_dashboard_shows_waiting_lateness_queue_depth_and_each_hosts_breaker(
    template: dict[str, Any],
) -> None:
    (dashboard,) = resources_of(template, "AWS::CloudWatch::Dashboard").values()
    body = json.dumps(dashboard["DashboardBody"])
    for name in (
        metric_names.WAITING_ON_CONCURRENCY,
        metric_names.WAITING_ON_RATE,
        metric_names.WAITING_ON_BREAKER,
        metric_names.WAITING_ON_PAUSE,
        metric_names.LIMIT_LATENESS,
        metric_names.QUEUE_DEPTH,
        metric_names.DISPATCH_PACED,
        metric_names.BREAKER_HALF_OPENED,
    ):
        assert f'\\"{name}\\"' in body, name
    # Breaker state per host: a Logs Insights table over the worker's own log group.
    worker_logs = function(template, "Worker")["LoggingConfig"]["LogGroup"]
    assert json.dumps(worker_logs) in body
    assert "stats latest(message) as state, max(@timestamp) as since by host" in body
    assert "filter ispresent(host) and message like /^breaker /" in body


def test_every_acknowledged_cdk_nag_finding_gives_its_reason(synthesized: Synthesized) -> None:
    acknowledged = synthesized.acknowledgments()
    rules = {rule for by_rule in acknowledged.values() for rule in by_rule}
    assert rules == {
        "Annotation::AwsSolutions-L1",
        "Annotation::AwsSolutions-SQS3",
        "Annotation::AwsSolutions-SNS2",
        "Annotation::AwsSolutions-COG4",
        "Annotation::AwsSolutions-APIG3",
        "Annotation::AwsSolutions-APIG6",
        "Annotation::AwsSolutions-APIG4",  # the token-authorised callbacks (decision 0023)
        # the worker assumes the roles AWS targets name, by the operator's pattern (0047)
        "AwsSolutions::AwsSolutions-IAM5"
        "[Resource::arn:<AWS::Partition>:iam::<AWS::AccountId>:role/dynacron-target/*]",
        # the worker placed in the operator's VPC manages its network interfaces (0050)
        "AwsSolutions::AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/"
        "service-role/AWSLambdaVPCAccessExecutionRole]",
        # CDK's own, on a stack whose VPC is imported by id (its zones read, 0050)
        "CloudFormation-Validate::W3010",
    }
    for by_rule in acknowledged.values():
        for reason in by_rule.values():
            assert len(reason.split()) >= 8


def test_the_tick_is_sized_and_given_its_fairness_settings(
    template: dict[str, Any], user_template: dict[str, Any]
) -> None:
    from dynacron.entry.settings import (
        CATCHUP_MAX_RUNS_VAR,
        TICK_BACKLOG_SECONDS_VAR,
        TICK_HEARTBEAT_SECONDS_VAR,
        TICK_MAX_CLAIMS_PER_TASK_VAR,
    )

    default = SchedulerConfig()
    assert function(template, "Tick")["MemorySize"] == default.tick_memory_mb
    env = environment(template, "Tick")
    assert env[TICK_MAX_CLAIMS_PER_TASK_VAR] == str(Settings.tick_max_claims_per_task)
    assert env[TICK_BACKLOG_SECONDS_VAR] == str(Settings.tick_backlog_seconds)
    assert env[CATCHUP_MAX_RUNS_VAR] == str(Settings.catchup_max_runs)
    assert env[TICK_HEARTBEAT_SECONDS_VAR] == str(Settings.tick_heartbeat_seconds)
    # What the tick reads back from them is what was configured.
    resolved = {name: value for name, value in env.items() if isinstance(value, str)}
    settings = Settings.from_env({**Settings("t", "e", "c", "d", "dl").to_env(), **resolved})
    assert settings.tick_backlog_seconds == default.tick_backlog_seconds
    assert settings.catchup_max_runs == default.catchup_max_runs
    # Only the tick reads them.
    for concern in ("Worker", "Api", "Reaper"):
        assert TICK_BACKLOG_SECONDS_VAR not in environment(template, concern)


def test_the_elastic_tick_idles_small_and_hands_pages_to_a_capped_claim_function(
    template: dict[str, Any], user_template: dict[str, Any]
) -> None:
    from dynacron.definitions.resources import CURSOR_KEY_PREFIX
    from dynacron.entry.settings import CLAIM_FUNCTION_VAR, TICK_BACKLOG_SECONDS_VAR

    default = SchedulerConfig()
    tick, claim = function(template, "Tick"), function(template, "Claim")
    # Decision 0025: 128 MB looping ticks, claim invocations of one vCPU
    assert (tick["MemorySize"], claim["MemorySize"]) == (128, 1769)
    assert (tick["MemorySize"], claim["MemorySize"]) == (
        default.tick_memory_mb,
        default.claim_memory_mb,
    )
    assert claim["ReservedConcurrentExecutions"] == default.claim_reserved_concurrency
    user_claim = function(user_template, "Claim")
    assert user_claim["ReservedConcurrentExecutions"] == USER_CONFIG.claim_reserved_concurrency
    assert user_claim["MemorySize"] == USER_CONFIG.claim_memory_mb
    # The tick is told which function to invoke, and may invoke that one only
    claim_id = function_id(template, "Claim")
    assert environment(template, "Tick")[CLAIM_FUNCTION_VAR] == {"Fn::GetAtt": [claim_id, "Arn"]}
    invokers = {
        c for c in FUNCTIONS if any(k.endswith(" function") for k in access_of(template, c))
    }
    assert invokers == {"Tick"}
    # ...and nothing else is told to hand pages out (a claim invocation claims its page)
    for concern in FUNCTIONS:
        if concern != "Tick":
            assert CLAIM_FUNCTION_VAR not in environment(template, concern)
    claim_env = environment(template, "Claim")
    assert TICK_BACKLOG_SECONDS_VAR not in claim_env
    assert claim_env["DYNACRON_CATCHUP_MAX_RUNS"] == str(default.catchup_max_runs)
    # The claim role reads its shard's cursor item and nothing else of the coordination table
    role = claim["Role"]["Fn::GetAtt"][0]
    coordination = {"Fn::GetAtt": [referenced(template, COORDINATION), "Arn"]}
    (statement,) = [
        s
        for policy in resources_of(template, "AWS::IAM::Policy").values()
        if {"Ref": role} in policy["Roles"]
        for s in policy["PolicyDocument"]["Statement"]
        if s["Resource"] == coordination
    ]
    assert statement["Action"] == "dynamodb:GetItem"
    assert statement["Condition"] == {
        "ForAllValues:StringLike": {"dynamodb:LeadingKeys": [f"{CURSOR_KEY_PREFIX}*"]}
    }
    # A failed claim is not retried by Lambda: the looping tick finds the page again
    (invoke_config,) = [
        c
        for c in resources_of(template, "AWS::Lambda::EventInvokeConfig").values()
        if c["FunctionName"] == {"Ref": claim_id}
    ]
    assert invoke_config["MaximumRetryAttempts"] == 0
    assert invoke_config["MaximumEventAgeInSeconds"] == 60
