"""Routes of the HTTP API (Powertools REST resolver with request validation)."""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
from aws_lambda_powertools.event_handler.openapi.params import Query

from dynacron.api.problems import PROBLEM_JSON, describe_validation_errors, problem
from dynacron.delivery import CALLBACK_TOKEN_HEADER
from dynacron.domain.errors import (
    CallbackRefused,
    Conflict,
    ExecutionNotFound,
    InvalidRequest,
    TaskNotFound,
)
from dynacron.domain.instants import format_instant
from dynacron.models import (
    BackfillRequest,
    BackfillView,
    CompleteRequest,
    ExecutionPage,
    ExecutionView,
    ForecastView,
    OccurrencesView,
    PauseRequest,
    TaskCreate,
    TaskPage,
    TaskPatch,
    TaskView,
)
from dynacron.services.executions import Completion, ExecutionService
from dynacron.services.forecast import HerdForecast
from dynacron.services.tasks import PayloadTooLarge, TaskService

logger = Logger(service="dynacron-api")

PageLimit = Annotated[int, Query(ge=1, le=100, description="Items per page")]
PageToken = Annotated[str | None, Query(max_length=2048, description="From the previous page")]
PreviewCount = Annotated[int, Query(ge=1, le=100, description="How many occurrences")]
ForecastHours = Annotated[int, Query(ge=1, le=24, description="Hours ahead to count")]
PreviewAfter = Annotated[
    str | None,
    Query(max_length=64, description="ISO 8601 instant to start after (default: now)"),
]


def build_api(
    tasks: TaskService, executions: ExecutionService, forecast: HerdForecast | None = None
) -> APIGatewayRestResolver:
    app = APIGatewayRestResolver(enable_validation=True)

    def callback_token() -> str:
        token = app.current_event.headers.get(CALLBACK_TOKEN_HEADER)  # case-insensitive
        if not token:
            raise CallbackRefused(f"send the token of the delivery in {CALLBACK_TOKEN_HEADER}")
        return token

    @app.post("/tasks")
    def create_task(body: TaskCreate) -> Response[TaskView]:
        task = tasks.register(body)
        return Response(status_code=201, body=TaskView.of(task), content_type="application/json")

    @app.get("/tasks")
    def list_tasks(limit: PageLimit = 50, next_token: PageToken = None) -> TaskPage:
        page = tasks.page(limit, next_token)
        return TaskPage(items=[TaskView.of(t) for t in page.items], next_token=page.next_token)

    @app.get("/tasks/<task_id>")
    def get_task(task_id: str) -> TaskView:
        return TaskView.of(tasks.get(task_id))

    @app.patch("/tasks/<task_id>")
    def patch_task(task_id: str, body: TaskPatch) -> TaskView:
        return TaskView.of(tasks.patch(task_id, body))

    @app.post("/tasks/<task_id>/pause")
    def pause_task(task_id: str, body: PauseRequest | None = None) -> TaskView:
        return TaskView.of(tasks.pause(task_id, body.note if body else None))

    @app.post("/tasks/<task_id>/resume")
    def resume_task(task_id: str) -> TaskView:
        return TaskView.of(tasks.resume(task_id))

    @app.post("/tasks/<task_id>/trigger")
    def trigger_task(task_id: str) -> Response[ExecutionView]:
        execution = tasks.trigger(task_id)
        return Response(
            status_code=202, body=ExecutionView.of(execution), content_type="application/json"
        )

    @app.post("/tasks/<task_id>/backfill")
    def backfill_task(task_id: str, body: BackfillRequest) -> Response[BackfillView]:
        backfill = tasks.backfill(task_id, body.from_, body.to)
        view = BackfillView(
            task_id=task_id,
            execution_ids=backfill.execution_ids,
            started=backfill.started,
            already_requested=[i for i in backfill.execution_ids if i not in backfill.started],
        )
        return Response(status_code=202, body=view, content_type="application/json")

    @app.delete("/tasks/<task_id>")
    def delete_task(task_id: str) -> Response[None]:
        tasks.delete(task_id)
        return Response(status_code=204)

    @app.get("/tasks/<task_id>/executions")
    def list_executions(
        task_id: str, limit: PageLimit = 50, next_token: PageToken = None
    ) -> ExecutionPage:
        page = tasks.executions(task_id, limit, next_token)
        return ExecutionPage(
            items=[ExecutionView.of(e) for e in page.items], next_token=page.next_token
        )

    @app.get("/tasks/<task_id>/next")
    def next_occurrences(
        task_id: str, count: PreviewCount = 10, after: PreviewAfter = None
    ) -> OccurrencesView:
        task, occurrences = tasks.upcoming(task_id, count, after)
        return OccurrencesView(
            task_id=task.task_id,
            timezone=task.timezone,
            occurrences=[format_instant(o) for o in occurrences],
        )

    if forecast is not None:

        @app.get("/forecast")
        def herd_forecast(hours: ForecastHours = 24) -> ForecastView:
            return ForecastView.of(forecast.next_hours(hours))

    @app.get("/executions/<execution_id>")
    def get_execution(execution_id: str) -> ExecutionView:
        return ExecutionView.of(executions.get(execution_id))

    @app.post("/executions/<execution_id>/heartbeat")
    def heartbeat(execution_id: str) -> ExecutionView:
        return ExecutionView.of(executions.heartbeat(execution_id, callback_token()))

    @app.post("/executions/<execution_id>/complete")
    def complete(execution_id: str, body: CompleteRequest) -> ExecutionView:
        execution = executions.complete(
            execution_id, callback_token(), Completion(body.status), body.error
        )
        return ExecutionView.of(execution)

    @app.get("/dead-letters")
    def list_dead_letters(limit: PageLimit = 50, next_token: PageToken = None) -> ExecutionPage:
        page = executions.dead_letters(limit, next_token)
        return ExecutionPage(
            items=[ExecutionView.of(e) for e in page.items], next_token=page.next_token
        )

    @app.post("/dead-letters/<execution_id>/redrive")
    def redrive(execution_id: str) -> Response[ExecutionView]:
        execution = executions.redrive(execution_id)
        return Response(
            status_code=202, body=ExecutionView.of(execution), content_type="application/json"
        )

    @app.exception_handler(RequestValidationError)
    def invalid_request_shape(error: RequestValidationError) -> Response[str]:
        errors = describe_validation_errors(error.errors())
        status = 400 if any(e["field"] == "body" for e in errors) else 422
        detail = "; ".join(f"{e['field']}: {e['message']}" for e in errors)
        return problem(status, "Invalid request", detail, errors)

    @app.exception_handler(PayloadTooLarge)
    def payload_too_large(error: PayloadTooLarge) -> Response[str]:
        return problem(413, "Payload too large", str(error), [_field(error)])

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

    @app.not_found
    def route_not_found(error: NotFoundError) -> Response[str]:
        event = app.current_event
        return problem(404, "Not found", f"no route for {event.http_method} {event.path}")

    @app.exception_handler(Exception)
    def unexpected(error: Exception) -> Response[str]:
        logger.exception("unhandled error")
        return problem(500, "Internal error", "the request failed on our side; it is safe to retry")

    return app


def unsupported_body(event: dict[str, Any]) -> dict[str, Any] | None:
    """A 415 response for a body that is not declared as JSON, else None.

    Checked before routing: the resolver would otherwise parse a form-encoded
    body as a form and answer with field errors that hide the real mistake.
    """
    headers = {k.lower(): v for k, v in (event.get("headers") or {}).items()}
    content_type = headers.get("content-type")
    if not event.get("body") or not content_type or "json" in content_type.lower():
        return None
    response = problem(
        415,
        "Unsupported media type",
        f"the body must be JSON, sent with 'Content-Type: application/json', not {content_type!r}",
    )
    return {
        "statusCode": response.status_code,
        "headers": {"Content-Type": PROBLEM_JSON},
        "body": response.body,
        "isBase64Encoded": False,
    }


def _field(error: InvalidRequest) -> dict[str, str]:
    return {"field": error.field, "message": error.message}
