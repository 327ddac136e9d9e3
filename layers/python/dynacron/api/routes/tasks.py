"""Routes of ``/tasks``: register, read, change, pause, run and delete a task."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from pydantic import ValidationError

from dynacron.api.answers import accepted, answered, created
from dynacron.api.caller import caller_identity, caller_tenant
from dynacron.api.errors import problem_of
from dynacron.api.openapi import (
    PREFERENCE_APPLIED,
    TASK_LISTING_DESCRIPTION,
    batch_answers,
    problems,
)
from dynacron.api.parameters import (
    MINIMAL,
    CreateKeyHeader,
    ListedScheduleKind,
    ListedTaskStatus,
    ListingOrder,
    ListingSort,
    NamePrefix,
    PageLimit,
    PageToken,
    PreferHeader,
    PreviewAfter,
    PreviewCount,
    SkipInstant,
    TagFilters,
    TaskId,
    prefers_minimal,
)
from dynacron.api.problems import describe_validation_errors
from dynacron.api.requests import (
    BackfillRequest,
    PauseRequest,
    SkipBody,
    TaskBatch,
    TaskCreate,
    TaskPatch,
)
from dynacron.api.responses import (
    BackfillView,
    BatchItemView,
    BatchView,
    ExecutionPage,
    ExecutionView,
    OccurrencesView,
    Problem,
    TaskIdView,
    TaskPage,
    TaskView,
)
from dynacron.domain.coordination.create_keys import BATCH_KEY_FIELD, KEY_RULE, CreateKey
from dynacron.domain.errors import InvalidRequest
from dynacron.domain.tasks.listing import TaskListing, TaskOrder
from dynacron.domain.tasks.tags import parse_tag_filters
from dynacron.domain.tasks.task import TaskStatus
from dynacron.services.tasks import BatchItem, BatchOutcome, TaskService

T = TypeVar("T")


class OutsideLock(Protocol):
    """Runs work that reads nothing of the request from the resolver with the API's
    one-request-at-a-time lock released (``LambdaEvents.outside_api_lock``)."""

    def __call__(self, work: Callable[[], T]) -> T: ...


def run_here(work: Callable[[], T]) -> T:
    """``OutsideLock`` where there is no lock to release."""
    return work()


def tasks_router(tasks: TaskService, outside_lock: OutsideLock = run_here) -> Router:
    """The routes of a tenant's tasks, served by ``tasks``; a batch create is checked
    and stored ``outside_lock``."""
    router = Router()  # type: ignore[no-untyped-call]  # (its __init__ is unannotated)
    _add_task_routes(router, tasks, outside_lock)
    _add_control_routes(router, tasks)
    _add_timeline_routes(router, tasks)
    _add_skip_routes(router, tasks)
    return router


def _add_task_routes(router: Router, tasks: TaskService, outside_lock: OutsideLock) -> None:
    """Register, list, read, change and delete a task."""

    @router.post("/tasks", responses=problems(409, 413, ok=(201, "Registered")))
    def create_task(
        body: TaskCreate, idempotency_key: CreateKeyHeader = None
    ) -> Response[TaskView]:
        if idempotency_key is None:
            task = tasks.register(
                caller_tenant(router), body.to_spec(), who=caller_identity(router)
            )
            return created(TaskView.of(task))
        key = CreateKey.of(idempotency_key, router.current_event.json_body)
        task, replayed = tasks.register_once(
            caller_tenant(router), body.to_spec(), key, who=caller_identity(router)
        )
        return created(TaskView.of(task), {"Idempotent-Replayed": "true"} if replayed else None)

    @router.post("/tasks/batch", responses=batch_answers())
    def create_tasks(body: TaskBatch, prefer: PreferHeader = None) -> Response[BatchView]:
        minimal = prefers_minimal(prefer)
        tenant_id, who = caller_tenant(router), caller_identity(router)
        # Read from the request first: the rest needs nothing of the resolver.
        view = outside_lock(lambda: _create_batch(tasks, tenant_id, body, who, minimal=minimal))
        return answered(view, {PREFERENCE_APPLIED: MINIMAL} if minimal else None)

    @router.get("/tasks", responses=problems(), description=TASK_LISTING_DESCRIPTION)
    def list_tasks(
        limit: PageLimit = 50,
        next_token: PageToken = None,
        tag: TagFilters = [],  # noqa: B006 (read, never mutated)
        name_prefix: NamePrefix = None,
        sort: ListingSort = None,
        order: ListingOrder = "asc",
        status: ListedTaskStatus = None,
        kind: ListedScheduleKind = None,
    ) -> TaskPage:
        filters = parse_tag_filters(tag)
        listing = TaskListing(
            name_prefix=name_prefix,
            order=TaskOrder(sort) if sort else None,
            descending=order == "desc",
            status=TaskStatus(status) if status else None,
            kind=kind,
        )
        page = tasks.page(caller_tenant(router), limit, next_token, filters, listing)
        return TaskPage.of(page)

    @router.get("/tasks/<task_id>", responses=problems(404))
    def get_task(task_id: TaskId) -> TaskView:
        return TaskView.of(tasks.get(caller_tenant(router), task_id))

    @router.patch("/tasks/<task_id>", responses=problems(404, 409))
    def patch_task(task_id: TaskId, body: TaskPatch) -> TaskView:
        changes = body.to_changes()
        who = caller_identity(router)
        return TaskView.of(tasks.patch(caller_tenant(router), task_id, changes, who=who))

    @router.delete("/tasks/<task_id>", responses=problems(404, ok=(204, "Deleted")))
    def delete_task(task_id: TaskId) -> Response[None]:
        tasks.delete(caller_tenant(router), task_id, who=caller_identity(router))
        return Response(status_code=204)


def _add_control_routes(router: Router, tasks: TaskService) -> None:
    """Pause and resume a task, run it now, run it for past occurrences."""

    @router.post("/tasks/<task_id>/pause", responses=problems(404, 409))
    def pause_task(task_id: TaskId, body: PauseRequest | None = None) -> TaskView:
        note = body.note if body else None
        return TaskView.of(
            tasks.pause(caller_tenant(router), task_id, note, who=caller_identity(router))
        )

    @router.post("/tasks/<task_id>/resume", responses=problems(404, 409))
    def resume_task(task_id: TaskId) -> TaskView:
        return TaskView.of(
            tasks.resume(caller_tenant(router), task_id, who=caller_identity(router))
        )

    @router.post("/tasks/<task_id>/trigger", responses=problems(404, 409, ok=(202, "Started")))
    def trigger_task(task_id: TaskId) -> Response[ExecutionView]:
        started = tasks.trigger(caller_tenant(router), task_id, who=caller_identity(router))
        return accepted(ExecutionView.of(started))

    @router.post("/tasks/<task_id>/backfill", responses=problems(404, 409, ok=(202, "Started")))
    def backfill_task(task_id: TaskId, body: BackfillRequest) -> Response[BackfillView]:
        backfill = tasks.backfill(
            caller_tenant(router), task_id, body.from_, body.to, who=caller_identity(router)
        )
        return accepted(BackfillView.of(task_id, backfill.execution_ids, backfill.started))


def _add_timeline_routes(router: Router, tasks: TaskService) -> None:
    """A task's executions so far, and its occurrences ahead."""

    @router.get("/tasks/<task_id>/executions", responses=problems(404))
    def list_executions(
        task_id: TaskId, limit: PageLimit = 50, next_token: PageToken = None
    ) -> ExecutionPage:
        return ExecutionPage.of(tasks.executions(caller_tenant(router), task_id, limit, next_token))

    @router.get("/tasks/<task_id>/next", responses=problems(404))
    def next_occurrences(
        task_id: TaskId, count: PreviewCount = 10, after: PreviewAfter = None
    ) -> OccurrencesView:
        task, preview = tasks.upcoming(caller_tenant(router), task_id, count, after)
        return OccurrencesView.of_task(task.task_id, preview)


def _create_batch(
    tasks: TaskService, tenant_id: str, batch: TaskBatch, who: str, *, minimal: bool = False
) -> BatchView:
    """Each item parsed as ``POST /tasks`` parses its body; those that parse are
    registered together, and every item is answered by its index (``minimal``: a
    task by its id and status only)."""
    answers: dict[int, BatchItemView] = {}
    parsed: list[tuple[int, BatchItem]] = []
    for index, raw in enumerate(batch.tasks):
        try:
            parsed.append((index, _batch_item(raw)))
        except ValidationError as invalid:
            errors = describe_validation_errors(invalid.errors())
            detail = "; ".join(f"{e['field']}: {e['message']}" for e in errors)
            shown = Problem(title="Invalid request", status=422, detail=detail, errors=errors)
            answers[index] = BatchItemView(
                index=index, outcome="refused", status=422, problem=shown
            )
        except InvalidRequest as invalid:
            answers[index] = _answer(index, BatchOutcome(None, error=invalid), minimal)
    outcomes = tasks.register_many(tenant_id, [item for _, item in parsed], who=who)
    for (index, _), outcome in zip(parsed, outcomes, strict=True):
        answers[index] = _answer(index, outcome, minimal)
    items = [answers[index] for index in range(len(batch.tasks))]
    return BatchView(items=items, created=sum(item.outcome == "created" for item in items))


def _batch_item(raw: Any) -> BatchItem:
    """One item of a batch: its task (a ``POST /tasks`` body) and its key, if any. The
    key's fingerprint is the task's, as the same body sent to ``POST /tasks`` has."""
    if not isinstance(raw, dict):
        raise InvalidRequest("body", "must be a JSON object (a body of POST /tasks)")
    body = {name: value for name, value in raw.items() if name != BATCH_KEY_FIELD}
    spec = TaskCreate.model_validate(body).to_spec()
    key = raw.get(BATCH_KEY_FIELD)
    if key is None:
        return BatchItem(spec)
    if not isinstance(key, str):
        raise InvalidRequest(BATCH_KEY_FIELD, KEY_RULE)
    try:
        return BatchItem(spec, CreateKey.of(key, body))
    except InvalidRequest:
        raise InvalidRequest(BATCH_KEY_FIELD, KEY_RULE) from None


def _answer(index: int, outcome: BatchOutcome, minimal: bool) -> BatchItemView:
    if outcome.task is not None:
        return BatchItemView(
            index=index,
            outcome="replayed" if outcome.replayed else "created",
            status=201,
            task=TaskIdView.of(outcome.task) if minimal else TaskView.of(outcome.task),
        )
    assert outcome.error is not None
    shown = problem_of(outcome.error)
    return BatchItemView(index=index, outcome="refused", status=shown.status, problem=shown)


def _add_skip_routes(router: Router, tasks: TaskService) -> None:
    """Occurrences of a task not to run, and taking that back (decision 0055)."""

    @router.post("/tasks/<task_id>/skip", responses=problems(404, 409))
    def skip_occurrences(task_id: TaskId, body: SkipBody) -> TaskView:
        """The next ``occurrences``, every occurrence before ``until``, or those ``at``
        will not run: each is recorded SKIPPED when it comes, with who asked and the
        note. The task otherwise runs as before."""
        tenant = caller_tenant(router)
        return TaskView.of(tasks.skip(tenant, task_id, body.to_request(), caller_identity(router)))

    @router.delete("/tasks/<task_id>/skips", responses=problems(404, 409))
    def remove_skips(task_id: TaskId, at: SkipInstant = None) -> TaskView:
        """Remove the task's skips not yet reached, or only the occurrence ``at``."""
        tenant = caller_tenant(router)
        return TaskView.of(tasks.unskip(tenant, task_id, at, who=caller_identity(router)))
