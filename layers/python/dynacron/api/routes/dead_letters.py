"""Routes of ``/dead-letters``: the tenant's executions that ran out of attempts,
and their redrive."""

from __future__ import annotations

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from dynacron.api.answers import accepted
from dynacron.api.caller import caller_tenant
from dynacron.api.openapi import problems
from dynacron.api.parameters import ExecutionId, PageLimit, PageToken
from dynacron.api.responses import ExecutionPage, ExecutionView
from dynacron.services.executions import ExecutionService


def dead_letters_router(executions: ExecutionService) -> Router:
    """The routes of a tenant's dead letters, served by ``executions``."""
    router = Router()  # type: ignore[no-untyped-call]  # (its __init__ is unannotated)

    @router.get("/dead-letters", responses=problems())
    def list_dead_letters(limit: PageLimit = 50, next_token: PageToken = None) -> ExecutionPage:
        return ExecutionPage.of(executions.dead_letters(caller_tenant(router), limit, next_token))

    @router.post(
        "/dead-letters/<execution_id>/redrive",
        responses=problems(404, 409, ok=(202, "Queued again")),
    )
    def redrive(execution_id: ExecutionId) -> Response[ExecutionView]:
        return accepted(ExecutionView.of(executions.redrive(caller_tenant(router), execution_id)))

    return router
