"""Routes of a task's change history (decision 0054): list its changes, newest first,
and revert one (its "before" fields sent back through PATCH, with the version check)."""

from __future__ import annotations

from aws_lambda_powertools.event_handler.api_gateway import Router
from pydantic import ValidationError

from dynacron.api.caller import caller_identity, caller_tenant
from dynacron.api.openapi import CHANGES_DESCRIPTION, REVERT_DESCRIPTION, problems
from dynacron.api.parameters import PageLimit, PageToken, TaskId
from dynacron.api.requests import RevertRequest, TaskPatch
from dynacron.api.responses import ChangePage, TaskView
from dynacron.domain.errors import InvalidRequest
from dynacron.domain.tasks.history import revert_body
from dynacron.services.tasks import TaskService


def changes_router(tasks: TaskService) -> Router:
    """The routes of a task's change history, served by ``tasks``."""
    router = Router()  # type: ignore[no-untyped-call]  # (its __init__ is unannotated)

    @router.get(
        "/tasks/<task_id>/changes", description=CHANGES_DESCRIPTION, responses=problems(404)
    )
    def list_changes(
        task_id: TaskId, limit: PageLimit = 50, next_token: PageToken = None
    ) -> ChangePage:
        """Who changed the task, when, and each field before and after; kept after
        the task is deleted, until the history retention."""
        return ChangePage.of(tasks.changes(caller_tenant(router), task_id, limit, next_token))

    @router.post(
        "/tasks/<task_id>/revert", description=REVERT_DESCRIPTION, responses=problems(404, 409)
    )
    def revert_change(task_id: TaskId, body: RevertRequest) -> TaskView:
        """Restore a change's "before" fields as a PATCH would (409 if the task is no
        longer at ``version``); the revert is itself a change."""
        tenant_id = caller_tenant(router)
        tasks.get(tenant_id, task_id)  # a deleted task has its history, nothing to revert
        change = tasks.change(tenant_id, task_id, body.change_id)
        try:
            patch = TaskPatch.model_validate(revert_body(change, body.version))
        except ValidationError as invalid:
            raise InvalidRequest(
                "change_id", f"its fields before cannot be sent back as a PATCH: {invalid}"
            ) from None
        changed = tasks.patch(
            tenant_id,
            task_id,
            patch.to_changes(),
            who=caller_identity(router),
            reverting=change.change_id,
        )
        return TaskView.of(changed)

    return router
