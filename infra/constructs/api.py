"""The HTTP API: API Gateway (REST) in front of the API function, IAM-authorised,
but for the two callback methods a handler calls with its token alone (decision 0023)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_apigateway as apigateway
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from dynacron.definitions.callbacks import (
    CALLBACK_ACTIONS,
    CALLBACKS_RESOURCE,
    EXECUTION_ID_PARAMETER,
    callback_gateway_paths,
)
from dynacron.definitions.environment import HANDLER_MODULES_VAR, TARGET_ROLES_VAR
from dynacron.definitions.resources import (
    ATTENTION_INDEX,
    COORDINATION,
    DEAD_LETTER_INDEX,
    DEAD_LETTER_QUEUE,
    DISPATCH_QUEUE,
    EXECUTIONS,
    NAME_INDEX,
    TASKS,
    TENANT_INDEX,
)
from infra.constructs.firewall import ApiFirewall
from infra.constructs.foundation import Foundation
from infra.constructs.functions import HANDLER, RETENTION, allow, allow_follow_ups, index_arn
from infra.constructs.nag import acknowledge
from infra.constructs.worker import target_role_arns

API_TIMEOUT = Duration.seconds(29)  # API Gateway's own integration limit
# With the user's code (their handlers) the entry point comes from the layer.
API_HANDLER = "dynacron.entry.functions.api"
# Field-level validation lives in the API function (one set of pydantic models,
# errors as problem+json); the gateway only turns away bodies that are not a
# JSON object before they cost an invocation.
JSON_OBJECT_SCHEMA = apigateway.JsonSchema(
    schema=apigateway.JsonSchemaVersion.DRAFT4, type=apigateway.JsonSchemaType.OBJECT
)
PROBLEM_TEMPLATE = json.dumps(
    {
        "type": "about:blank",
        "title": "Invalid request",
        "status": 400,
        "detail": "$context.error.validationErrorString",
    }
)
# A completion's shape, checked by the gateway before an unauthenticated body costs
# an invocation (models.CompleteRequest: the function checks it again, and the token).
COMPLETE_SCHEMA = apigateway.JsonSchema(
    schema=apigateway.JsonSchemaVersion.DRAFT4,
    type=apigateway.JsonSchemaType.OBJECT,
    additional_properties=False,
    required=["status"],
    properties={
        "status": apigateway.JsonSchema(
            type=apigateway.JsonSchemaType.STRING, enum=["SUCCEEDED", "FAILED"]
        ),
        "error": apigateway.JsonSchema(
            type=[apigateway.JsonSchemaType.STRING, apigateway.JsonSchemaType.NULL],
            max_length=2000,
        ),
    },
)
# What API Gateway answers itself, before the function, as the problem+json the
# OpenAPI document declares for these statuses (its default is {"message": ...}).
GATEWAY_PROBLEMS = {
    "THROTTLED": (429, "Too many requests", "this API's request rate is exceeded; retry later"),
    "REQUEST_TOO_LARGE": (413, "Payload too large", "the body is over API Gateway's 10 MB"),
}


class Api(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        foundation: Foundation,
        code: lambda_.Code | None = None,
        handler_modules: Sequence[str] = (),
    ) -> None:
        """``code`` and ``handler_modules``: the user's Python handlers, so that the
        API accepts a task naming one (it runs ``dynacron.entry.functions.api``
        from the layer)."""
        super().__init__(scope, construct_id)
        config, storage = foundation.config, foundation.storage
        self.function = foundation.kit.function(
            self,
            "Function",
            entry="api",
            memory_mb=config.api_memory_mb,
            timeout=API_TIMEOUT,
            description="the HTTP API: tasks and their executions",
            code=code,
            handler=API_HANDLER if code else HANDLER,
        )
        if handler_modules:
            self.function.add_environment(HANDLER_MODULES_VAR, ",".join(handler_modules))
        # The roles the worker may assume: a target naming another is refused at
        # registration, not at its first call (decision 0047).
        self.function.add_environment(
            TARGET_ROLES_VAR, ",".join(target_role_arns(self, config.target_roles))
        )
        tasks, executions = storage.table(TASKS), storage.table(EXECUTIONS)
        # Creates and deletes are transactions with the tenant's record (its task
        # count and signing secrets) in the coordination table; lists query the
        # tenant index, or the name index by name. Reads, puts and updates of tasks
        # (an ``after`` marks its upstream: transitions.mark_has_dependents) are
        # allow_follow_ups' below.
        allow(self.function, ["dynamodb:DeleteItem"], [tasks.table_arn])
        allow(
            self.function,
            ["dynamodb:Query"],
            [index_arn(tasks, TENANT_INDEX), index_arn(tasks, NAME_INDEX)],
        )
        allow(
            self.function,
            ["dynamodb:GetItem", "dynamodb:UpdateItem"],
            [storage.table(COORDINATION).table_arn],
        )
        # Executions: history, the dead-letter list, the list across tasks (its keys
        # from the attention index, its items read in one batch), heartbeat and
        # complete callbacks.
        allow(
            self.function,
            ["dynamodb:Query"],
            [
                executions.table_arn,
                index_arn(executions, DEAD_LETTER_INDEX),
                index_arn(executions, ATTENTION_INDEX),
            ],
        )
        allow(self.function, ["dynamodb:BatchGetItem"], [executions.table_arn])
        # A redrive or a failed callback queues the next attempt (allow_follow_ups'
        # grants); a redrive removes the dead-letter copy, and an exhausted callback
        # leaves one.
        dead_letters = foundation.queues.queue(DEAD_LETTER_QUEUE)
        allow(self.function, ["sqs:SendMessage"], [dead_letters.queue_arn])
        allow(
            self.function,
            ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility"],
            [dead_letters.queue_arn],
        )
        # PATCH, pause, resume, trigger, backfill; a completion callback ends an execution.
        # A PATCH of ``after`` checks the chain's versions in its transaction.
        allow(self.function, ["dynamodb:ConditionCheckItem"], [tasks.table_arn])
        allow_follow_ups(
            self.function,
            tasks,
            executions,
            foundation.queues.queue(DISPATCH_QUEUE).queue_arn,
        )

        access_logs = logs.LogGroup(
            self,
            "AccessLogs",
            retention=RETENTION[config.log_retention_days],
            removal_policy=RemovalPolicy.RETAIN if config.protect_data else RemovalPolicy.DESTROY,
            encryption_key=foundation.kit.key,
        )
        self.rest_api = apigateway.RestApi(
            self,
            "RestApi",
            description="dynacron: register tasks, read their executions",
            endpoint_types=[apigateway.EndpointType.REGIONAL],
            # Execution logging would need an account-wide role; access logs suffice.
            cloud_watch_role=False,
            # Every method, including any added later, is signed with IAM (SigV4).
            default_method_options=apigateway.MethodOptions(
                authorization_type=apigateway.AuthorizationType.IAM
            ),
            deploy_options=apigateway.StageOptions(
                stage_name=config.stage,
                throttling_rate_limit=config.api_rate_limit,
                throttling_burst_limit=config.api_burst_limit,
                # The unauthenticated methods have limits of their own (decision 0023).
                method_options={
                    f"{path}/POST": apigateway.MethodDeploymentOptions(
                        throttling_rate_limit=config.callback_rate_limit,
                        throttling_burst_limit=config.callback_burst_limit,
                    )
                    for path in callback_gateway_paths()
                },
                access_log_destination=apigateway.LogGroupLogDestination(access_logs),
                access_log_format=apigateway.AccessLogFormat.json_with_standard_fields(
                    caller=True,
                    http_method=True,
                    ip=True,
                    protocol=True,
                    request_time=True,
                    resource_path=True,
                    response_length=True,
                    status=True,
                    user=True,
                ),
            ),
        )
        validator = self.rest_api.add_request_validator(
            "Validator", validate_request_body=True, validate_request_parameters=True
        )
        json_object = self.rest_api.add_model(
            "JsonObject", content_type="application/json", schema=JSON_OBJECT_SCHEMA
        )
        self.rest_api.add_gateway_response(
            "InvalidBody",
            type=apigateway.ResponseType.BAD_REQUEST_BODY,
            status_code="400",
            response_headers={"Content-Type": "'application/problem+json'"},
            templates={"application/json": PROBLEM_TEMPLATE},
        )
        for response_type, (status, title, detail) in GATEWAY_PROBLEMS.items():
            self.rest_api.add_gateway_response(
                response_type.title().replace("_", ""),
                type=getattr(apigateway.ResponseType, response_type),
                status_code=str(status),
                response_headers={"Content-Type": "'application/problem+json'"}
                # The document promises Retry-After with every 429.
                | ({"Retry-After": "'1'"} if status == 429 else {}),
                templates={
                    "application/json": json.dumps(
                        {"type": "about:blank", "title": title, "status": status, "detail": detail}
                    )
                },
            )
        integration = apigateway.LambdaIntegration(self.function)
        iam_auth = apigateway.AuthorizationType.IAM
        # Routes live in the API function; the gateway passes every path on,
        # except that a new task's body must at least be a JSON object. API
        # Gateway does not fall back from /tasks to the root's proxy, so /tasks
        # has its own.
        tasks_path = self.rest_api.root.add_resource("tasks")
        for parent in (self.rest_api.root, tasks_path):
            parent.add_resource("{proxy+}").add_method(
                "ANY", integration, authorization_type=iam_auth, request_validator=validator
            )
        # Any other method on /tasks reaches the function too, which answers 405
        # with Allow (API Gateway's own answer to an unrouted method is a 403).
        for method in ("GET", "ANY"):
            tasks_path.add_method(
                method, integration, authorization_type=iam_auth, request_validator=validator
            )
        # A batch create too: its body a JSON object (the function checks each task),
        # signed as POST /tasks is; other methods reach the function, which answers 405.
        batch_path = tasks_path.add_resource("batch")
        for path in (tasks_path, batch_path):
            path.add_method(
                "POST",
                integration,
                authorization_type=iam_auth,
                request_validator=validator,
                request_models={"application/json": json_object},
            )
        batch_path.add_method(
            "ANY", integration, authorization_type=iam_auth, request_validator=validator
        )
        self.callback_methods = self._callback_methods(integration, validator)
        acknowledge(
            self.rest_api,
            "AwsSolutions-COG4",
            "Callers sign requests with IAM (SigV4) instead of Cognito tokens: the "
            "scheduler's clients are services with AWS credentials.",
        )
        # Per source address, so that one anonymous caller cannot use up the throttles
        # every tenant's callbacks share (issue 23).
        self.firewall: ApiFirewall | None = None
        if config.api_firewall:
            self.firewall = ApiFirewall(
                self, "Firewall", config=config, stage=self.rest_api.deployment_stage
            )
        else:
            acknowledge(
                self.rest_api,
                "AwsSolutions-APIG3",
                "Switched off by api_firewall=false: the stage and callback throttles are "
                "shared by all callers, and the two token-authorised callback methods take "
                "anonymous requests, so one source can use them up for every tenant.",
            )
        acknowledge(
            self.rest_api,
            "AwsSolutions-APIG6",
            "Access logs are on; execution logs need an account-wide API Gateway role "
            "that a reusable construct must not take over.",
        )

    def _callback_methods(
        self, integration: apigateway.LambdaIntegration, validator: apigateway.RequestValidator
    ) -> list[apigateway.Method]:
        """``POST /callbacks/{execution_id}/heartbeat`` and ``/complete``: the only
        methods without IAM. A handler has no AWS identity to sign with; the API
        function authorises each call by the attempt's callback token (decision 0023).
        Only POST: any other method on these paths is API Gateway's own 403."""
        complete = self.rest_api.add_model(
            "CallbackCompletion", content_type="application/json", schema=COMPLETE_SCHEMA
        )
        execution = self.rest_api.root.add_resource(CALLBACKS_RESOURCE).add_resource(
            f"{{{EXECUTION_ID_PARAMETER}}}"
        )
        methods = []
        for action in CALLBACK_ACTIONS:
            method = execution.add_resource(action).add_method(
                "POST",
                integration,
                authorization_type=apigateway.AuthorizationType.NONE,
                request_validator=validator,
                request_models={"application/json": complete} if action == "complete" else None,
            )
            acknowledge(
                method,
                "AwsSolutions-APIG4",
                "A long job's handler calls back with no AWS identity: the per-attempt "
                "callback token (192 bits, stored as its SHA-256) authorises the call in "
                "the API function; these methods are throttled on their own (decision "
                "0023) and, unless api_firewall=false, per source address by WAF.",
            )
            methods.append(method)
        return methods
