"""Routes of the HTTP API (Powertools REST resolver with request validation).

Every route acts for one tenant: the ``authenticate`` middleware derives it from
the caller's identity, rate-limits it, and ``caller_tenant()`` hands it to the
route. A route added later gets both by calling ``caller_tenant()``.

The exceptions are the callback routes under ``/callbacks/``, which a handler
calls with no identity at all: the per-attempt callback token is their whole
authorisation (decision 0023), and the execution it opens names the tenant.
"""

from __future__ import annotations

from typing import Any, Protocol

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.middlewares import NextMiddleware
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError

from dynacron.api.identity import tenant_of
from dynacron.api.json_body import parse_json_body
from dynacron.api.openapi import CALLBACK_SECURITY, CallerIdentities, problems, security_of
from dynacron.api.parameters import (
    CreateKeyHeader,
    ExecutionId,
    ForecastHours,
    ListedSince,
    ListedStatus,
    ListedUntil,
    PageLimit,
    PageToken,
    PreviewAfter,
    PreviewCount,
    TagFilters,
    TaskId,
)
from dynacron.api.problems import PROBLEM_JSON, describe_validation_errors, problem
from dynacron.api.requests import (
    BackfillRequest,
    CompleteRequest,
    PauseRequest,
    SchedulePreviewRequest,
    TaskCreate,
    TaskPatch,
)
from dynacron.api.responses import (
    BackfillView,
    ExecutionPage,
    ExecutionView,
    ForecastView,
    OccurrencesView,
    SchedulePreviewView,
    TaskPage,
    TaskView,
    TenantView,
)
from dynacron.definitions.callbacks import (
    CALLBACK_TOKEN_HEADER,
    CALLBACKS_RESOURCE,
    is_callback_path,
)
from dynacron.domain.coordination.create_keys import CreateKey
from dynacron.domain.coordination.quotas import TenantRateLimiter
from dynacron.domain.errors import (
    CallbackRefused,
    Conflict,
    ExecutionNotFound,
    InvalidRequest,
    LimitExceeded,
    RateLimited,
    TaskNotFound,
    Unauthenticated,
)
from dynacron.domain.executions.attention import attention_query
from dynacron.domain.tasks.tags import (
    parse_tag_filters,
)
from dynacron.services.executions import Completion, ExecutionService
from dynacron.services.forecast import HerdForecast
from dynacron.services.tasks import PayloadTooLarge, TaskService
from dynacron.version import __version__

logger = Logger(service="dynacron-api")

OPENAPI_PATH = "/openapi.json"
DOCS_PATH = "/docs"
PUBLIC_PATHS = frozenset({OPENAPI_PATH, DOCS_PATH})
TENANT_CONTEXT_KEY = "tenant"


class ApiSettings(CallerIdentities, Protocol):
    """What the API reads of the settings (``Settings`` has it): who callers are,
    and the limits a tenant is told of."""

    @property
    def max_tasks_per_tenant(self) -> int: ...
    @property
    def max_payload_bytes(self) -> int: ...
    @property
    def min_interval_seconds(self) -> int: ...


def build_api(
    tasks: TaskService,
    executions: ExecutionService,
    settings: ApiSettings,
    rate_limiter: TenantRateLimiter,
    forecast: HerdForecast | None = None,
) -> APIGatewayRestResolver:
    app = APIGatewayRestResolver(enable_validation=True, json_body_deserializer=parse_json_body)

    def authenticate(app: APIGatewayRestResolver, next_middleware: NextMiddleware) -> Response[Any]:
        path = app.current_event.path
        # A callback route authorises by its token, in the route, and takes no tenant
        # from the caller; it never reads ``caller_tenant()``.
        if path not in PUBLIC_PATHS and not is_callback_path(path):
            tenant = tenant_of(
                app.current_event.raw_event, settings.api_keys, settings.default_tenant
            )
            rate_limiter.take(tenant)
            app.context[TENANT_CONTEXT_KEY] = tenant
        return next_middleware(app)

    def refuse_unknown_query(
        app: APIGatewayRestResolver, next_middleware: NextMiddleware
    ) -> Response[Any]:
        """A query parameter no route declares is refused, not ignored: ``?tags=env:prod``
        (for ``?tag=``) would otherwise list every task as if filtered."""
        event = app.current_event
        sent = set(event.multi_value_query_string_parameters or {})
        sent |= set(event.query_string_parameters or {})
        route = app.context.get("_route")
        # Only a declared route's: a request no route takes (a 404 or 405) is a
        # stand-in route that declares nothing, and gets its own answer.
        declared = route in app._static_routes + app._dynamic_routes
        if sent and route is not None and declared and event.path not in PUBLIC_PATHS:
            known = sorted(param.alias for param in route.dependant.query_params)
            takes = ", ".join(known) or "none"
            message = f"is not a query parameter of {route.method} {route.path} (it takes {takes})"
            unknown = sorted(sent - set(known))
            if unknown:
                raise RequestValidationError(
                    [
                        {"type": "unknown_query_parameter", "loc": ("query", name), "msg": message}
                        for name in unknown
                    ]
                )
        return next_middleware(app)

    app.use(middlewares=[authenticate, refuse_unknown_query])

    def caller_tenant() -> str:
        """The tenant of the request being handled: scope every read and write with it."""
        return str(app.context[TENANT_CONTEXT_KEY])

    def callback_token() -> str:
        token = sent_callback_token()
        if not token:
            raise CallbackRefused(f"send the token of the delivery in {CALLBACK_TOKEN_HEADER}")
        return token

    def sent_callback_token() -> str | None:
        return app.current_event.headers.get(CALLBACK_TOKEN_HEADER)  # case-insensitive

    @app.post("/tasks", responses=problems(409, 413, ok=(201, "Registered")))
    def create_task(
        body: TaskCreate, idempotency_key: CreateKeyHeader = None
    ) -> Response[TaskView]:
        if idempotency_key is None:
            task = tasks.register(caller_tenant(), body.to_spec())
            return Response(201, body=TaskView.of(task), content_type="application/json")
        key = CreateKey.of(idempotency_key, app.current_event.json_body)
        task, replayed = tasks.register_once(caller_tenant(), body.to_spec(), key)
        return Response(
            201,
            body=TaskView.of(task),
            content_type="application/json",
            headers={"Idempotent-Replayed": "true"} if replayed else None,
        )

    @app.get("/tasks", responses=problems())
    def list_tasks(
        limit: PageLimit = 50,
        next_token: PageToken = None,
        tag: TagFilters = [],  # noqa: B006 (read, never mutated)
    ) -> TaskPage:
        filters = parse_tag_filters(tag)
        page = tasks.page(caller_tenant(), limit, next_token, filters)
        return TaskPage(items=[TaskView.of(t) for t in page.items], next_token=page.next_token)

    @app.get("/tasks/<task_id>", responses=problems(404))
    def get_task(task_id: TaskId) -> TaskView:
        return TaskView.of(tasks.get(caller_tenant(), task_id))

    @app.patch("/tasks/<task_id>", responses=problems(404, 409))
    def patch_task(task_id: TaskId, body: TaskPatch) -> TaskView:
        return TaskView.of(tasks.patch(caller_tenant(), task_id, body.to_changes()))

    @app.post("/tasks/<task_id>/pause", responses=problems(404, 409))
    def pause_task(task_id: TaskId, body: PauseRequest | None = None) -> TaskView:
        return TaskView.of(tasks.pause(caller_tenant(), task_id, body.note if body else None))

    @app.post("/tasks/<task_id>/resume", responses=problems(404, 409))
    def resume_task(task_id: TaskId) -> TaskView:
        return TaskView.of(tasks.resume(caller_tenant(), task_id))

    @app.post("/tasks/<task_id>/trigger", responses=problems(404, 409, ok=(202, "Started")))
    def trigger_task(task_id: TaskId) -> Response[ExecutionView]:
        execution = tasks.trigger(caller_tenant(), task_id)
        return Response(
            status_code=202, body=ExecutionView.of(execution), content_type="application/json"
        )

    @app.post("/tasks/<task_id>/backfill", responses=problems(404, 409, ok=(202, "Started")))
    def backfill_task(task_id: TaskId, body: BackfillRequest) -> Response[BackfillView]:
        backfill = tasks.backfill(caller_tenant(), task_id, body.from_, body.to)
        view = BackfillView(
            task_id=task_id,
            execution_ids=backfill.execution_ids,
            started=backfill.started,
            already_requested=[i for i in backfill.execution_ids if i not in backfill.started],
        )
        return Response(status_code=202, body=view, content_type="application/json")

    @app.delete("/tasks/<task_id>", responses=problems(404, ok=(204, "Deleted")))
    def delete_task(task_id: TaskId) -> Response[None]:
        tasks.delete(caller_tenant(), task_id)
        return Response(status_code=204)

    @app.get("/tasks/<task_id>/executions", responses=problems(404))
    def list_executions(
        task_id: TaskId, limit: PageLimit = 50, next_token: PageToken = None
    ) -> ExecutionPage:
        page = tasks.executions(caller_tenant(), task_id, limit, next_token)
        return ExecutionPage(
            items=[ExecutionView.of(e) for e in page.items], next_token=page.next_token
        )

    @app.get("/tasks/<task_id>/next", responses=problems(404))
    def next_occurrences(
        task_id: TaskId, count: PreviewCount = 10, after: PreviewAfter = None
    ) -> OccurrencesView:
        task, preview = tasks.upcoming(caller_tenant(), task_id, count, after)
        return OccurrencesView.of_task(task.task_id, preview)

    @app.post("/schedules/preview", responses=problems())
    def preview_schedule(body: SchedulePreviewRequest) -> SchedulePreviewView:
        """The occurrences a task registered now with this schedule would have, checked
        as POST /tasks checks a schedule (the same 422 problems), nothing stored. A
        cron's H fields are spread by the task id, which only POST /tasks gives: here
        by a fresh one, as an example."""
        preview = tasks.preview_schedule(caller_tenant(), body.schedule_spec(), body.count)
        return SchedulePreviewView.of(preview)

    if forecast is not None:

        @app.get("/forecast", responses=problems())
        def herd_forecast(hours: ForecastHours = 24) -> ForecastView:
            return ForecastView.of(forecast.next_hours(caller_tenant(), hours))

    @app.get("/executions", responses=problems())
    def list_executions_across_tasks(
        status: ListedStatus = None,
        since: ListedSince = None,
        until: ListedUntil = None,
        limit: PageLimit = 50,
        next_token: PageToken = None,
    ) -> ExecutionPage:
        """The tenant's executions an operator looks for, across its tasks: FAILED,
        waiting for or running a retry, long jobs running. Newest first by
        ``attention_at`` (when each entered the state it is listed in); a page may
        hold fewer than ``limit`` and still name a next one."""
        query = attention_query(status, since, until)
        page = executions.across_tasks(caller_tenant(), query, limit, next_token)
        return ExecutionPage(
            items=[ExecutionView.of(e) for e in page.items], next_token=page.next_token
        )

    @app.get("/executions/<execution_id>", responses=problems(404))
    def get_execution(execution_id: ExecutionId) -> ExecutionView:
        return ExecutionView.of(executions.get(caller_tenant(), execution_id))

    @app.post("/executions/<execution_id>/heartbeat", responses=problems(403, 404, 409))
    def heartbeat(execution_id: ExecutionId) -> ExecutionView:
        execution = executions.heartbeat(caller_tenant(), execution_id, callback_token())
        return ExecutionView.of(execution)

    @app.post("/executions/<execution_id>/complete", responses=problems(403, 404, 409))
    def complete(execution_id: ExecutionId, body: CompleteRequest) -> ExecutionView:
        execution = executions.complete(
            caller_tenant(), execution_id, callback_token(), Completion(body.status), body.error
        )
        return ExecutionView.of(execution)

    # The routes a handler calls back on with the token alone (decision 0023). API
    # Gateway lets exactly these two through without IAM (infra/constructs/api.py).
    @app.post(
        f"/{CALLBACKS_RESOURCE}/<execution_id>/heartbeat",
        # 404: only for a path no route takes (an id with characters no id has);
        # an id that may exist, or not, is the 403 of a wrong token.
        responses=problems(403, 404, 409),
        security=CALLBACK_SECURITY,
        summary="A long job is alive: extend its lease (callback token only, no IAM)",
    )
    def heartbeat_by_token(execution_id: ExecutionId) -> ExecutionView:
        execution = executions.by_callback_token(execution_id, sent_callback_token())
        rate_limiter.take(execution.tenant_id)
        return ExecutionView.of(executions.heartbeat_of(execution))

    @app.post(
        f"/{CALLBACKS_RESOURCE}/<execution_id>/complete",
        # 404: only for a path no route takes (an id with characters no id has);
        # an id that may exist, or not, is the 403 of a wrong token.
        responses=problems(403, 404, 409),
        security=CALLBACK_SECURITY,
        summary="A long job finished: SUCCEEDED or FAILED (callback token only, no IAM)",
    )
    def complete_by_token(execution_id: ExecutionId, body: CompleteRequest) -> ExecutionView:
        execution = executions.by_callback_token(execution_id, sent_callback_token())
        rate_limiter.take(execution.tenant_id)
        completed = executions.complete_of(execution, Completion(body.status), body.error)
        return ExecutionView.of(completed)

    @app.get("/dead-letters", responses=problems())
    def list_dead_letters(limit: PageLimit = 50, next_token: PageToken = None) -> ExecutionPage:
        page = executions.dead_letters(caller_tenant(), limit, next_token)
        return ExecutionPage(
            items=[ExecutionView.of(e) for e in page.items], next_token=page.next_token
        )

    @app.post(
        "/dead-letters/<execution_id>/redrive",
        responses=problems(404, 409, ok=(202, "Queued again")),
    )
    def redrive(execution_id: ExecutionId) -> Response[ExecutionView]:
        execution = executions.redrive(caller_tenant(), execution_id)
        return Response(
            status_code=202, body=ExecutionView.of(execution), content_type="application/json"
        )

    @app.get("/tenant", responses=problems())
    def get_tenant() -> TenantView:
        tenant = caller_tenant()
        return _tenant_view(tenant, tasks.signing_secrets(tenant))

    @app.post("/tenant/signing-secrets/rotate", responses=problems(409))
    def rotate_signing_secret() -> TenantView:
        tenant = caller_tenant()
        return _tenant_view(tenant, tasks.rotate_signing_secret(tenant))

    def _tenant_view(tenant: str, secrets: list[str]) -> TenantView:
        return TenantView(
            tenant_id=tenant,
            signing_secrets=secrets,
            task_count=tasks.task_count(tenant),
            max_tasks=settings.max_tasks_per_tenant,
            max_payload_bytes=settings.max_payload_bytes,
            min_interval_seconds=settings.min_interval_seconds,
        )

    @app.get(OPENAPI_PATH, include_in_schema=False)
    def openapi() -> Response[str]:
        return Response(
            status_code=200,
            content_type="application/json",
            body=app.get_openapi_json_schema(
                title="dynacron", version=__version__, **security_of(settings)
            ),
        )

    # Swagger UI with its script and styles inlined: the page fetches nothing else.
    app.enable_swagger(
        path=DOCS_PATH, title="dynacron", version=__version__, **security_of(settings)
    )

    @app.exception_handler(RequestValidationError)
    def invalid_request_shape(error: RequestValidationError) -> Response[str]:
        errors = describe_validation_errors(error.errors())
        status = 400 if any(e["field"] == "body" for e in errors) else 422
        detail = "; ".join(f"{e['field']}: {e['message']}" for e in errors)
        return problem(status, "Invalid request", detail, errors)

    @app.exception_handler(PayloadTooLarge)
    def payload_too_large(error: PayloadTooLarge) -> Response[str]:
        return problem(413, "Payload too large", str(error), [_field(error)], limit=error.limit)

    @app.exception_handler(LimitExceeded)
    def limit_exceeded(error: LimitExceeded) -> Response[str]:
        return problem(422, "Limit exceeded", str(error), [_field(error)], limit=error.limit)

    @app.exception_handler(InvalidRequest)
    def invalid_request(error: InvalidRequest) -> Response[str]:
        return problem(422, "Invalid request", str(error), [_field(error)])

    @app.exception_handler(TaskNotFound)
    def task_not_found(error: TaskNotFound) -> Response[str]:
        return problem(404, "Not found", str(error))

    @app.exception_handler(ExecutionNotFound)
    def execution_not_found(error: ExecutionNotFound) -> Response[str]:
        return problem(404, "Not found", str(error))

    @app.exception_handler(CallbackRefused)
    def callback_refused(error: CallbackRefused) -> Response[str]:
        return problem(403, "Forbidden", str(error))

    @app.exception_handler(Conflict)
    def conflict(error: Conflict) -> Response[str]:
        return problem(409, "Conflict", str(error))

    @app.exception_handler(Unauthenticated)
    def unauthenticated(error: Unauthenticated) -> Response[str]:
        return problem(401, "Unauthenticated", str(error))

    @app.exception_handler(RateLimited)
    def rate_limited(error: RateLimited) -> Response[str]:
        response = problem(429, "Too many requests", str(error), limit="tenant_rate_per_second")
        response.headers["Retry-After"] = str(error.retry_after_seconds)
        return response

    @app.not_found
    def route_not_found(error: NotFoundError) -> Response[str]:
        event = app.current_event
        method = event.http_method.upper()
        allowed = allowed_methods(app, event.path)
        if not allowed:
            return problem(404, "Not found", f"no route for {method} {event.path}")
        # RFC 9110: a known resource answers a method it does not support with 405
        # and the methods it does support; OPTIONS asks for exactly that list.
        allow = ", ".join(allowed)
        if method == "OPTIONS":
            return Response(status_code=204, headers={"Allow": allow})
        response = problem(405, "Method not allowed", f"{event.path} answers {allow}, not {method}")
        response.headers["Allow"] = allow
        return response

    @app.exception_handler(Exception)
    def unexpected(error: Exception) -> Response[str]:
        logger.exception("unhandled error")
        return problem(500, "Internal error", "the request failed on our side; it is safe to retry")

    return app


def allowed_methods(app: APIGatewayRestResolver, path: str) -> list[str]:
    """The methods routed for ``path``, as an ``Allow`` header lists them; none if it is unknown.

    Matched with the resolver's own compiled routes, so a path is "known" exactly
    when some method would reach a route with it.
    """
    routes = app._static_routes + app._dynamic_routes
    return sorted({route.method for route in routes if route.rule.match(path)})


def unroutable_path(event: dict[str, Any]) -> dict[str, Any] | None:
    """A 404 for a path holding a control character, else None.

    The resolver matches routes with ``$``, which also matches before a final
    newline: ``/executions/%0A`` reached ``GET /executions``. No route of ours has
    such a character, so none is routed.
    """
    path = str(event.get("path") or "")
    if not any(ord(character) < 0x20 or ord(character) == 0x7F for character in path):
        return None
    return _proxy_answer(problem(404, "Not found", f"no route for {path!r}"))


def unsupported_body(event: dict[str, Any]) -> dict[str, Any] | None:
    """A 415 response for a body that is not declared as JSON, else None.

    Checked before routing: the resolver would otherwise parse a form-encoded
    body as a form and answer with field errors that hide the real mistake.
    """
    headers = {k.lower(): v for k, v in (event.get("headers") or {}).items()}
    content_type = headers.get("content-type")
    # Exactly what the resolver parses as JSON (it matches the type as spelled)
    media_type = (content_type or "").split(";")[0].strip()
    if not event.get("body") or media_type == "application/json":
        return None
    # A body that declares no type is refused too: it is what a page of another
    # site can send to a local API without a CORS preflight.
    sent = f"not {content_type!r}" if content_type else "and it was sent with no Content-Type"
    return _proxy_answer(
        problem(
            415,
            "Unsupported media type",
            f"the body must be JSON, sent with 'Content-Type: application/json', {sent}",
        )
    )


def _proxy_answer(response: Response[str]) -> dict[str, Any]:
    """A problem answered before routing, as the resolver's answers are shaped."""
    return {
        "statusCode": response.status_code,
        "headers": {"Content-Type": PROBLEM_JSON},
        "body": response.body,
        "isBase64Encoded": False,
    }


def _field(error: InvalidRequest) -> dict[str, str]:
    return {"field": error.field, "message": error.message}
