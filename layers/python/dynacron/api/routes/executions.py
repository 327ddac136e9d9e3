"""Routes of ``/executions``: the tenant's executions across its tasks, one
execution, and a long job's heartbeat and completion sent with the tenant's
identity and the callback token."""

from __future__ import annotations

from aws_lambda_powertools.event_handler.api_gateway import Router

from dynacron.api.caller import callback_token, caller_tenant
from dynacron.api.openapi import problems
from dynacron.api.parameters import (
    ExecutionId,
    ListedSince,
    ListedStatus,
    ListedUntil,
    PageLimit,
    PageToken,
)
from dynacron.api.requests import CompleteRequest
from dynacron.api.responses import ExecutionPage, ExecutionView
from dynacron.domain.executions.attention import attention_query
from dynacron.services.executions import Completion, ExecutionService


def executions_router(executions: ExecutionService) -> Router:
    """The routes of a tenant's executions, served by ``executions``."""
    router = Router()  # type: ignore[no-untyped-call]  # (its __init__ is unannotated)

    @router.get("/executions", responses=problems())
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
        return ExecutionPage.of(
            executions.needing_attention(caller_tenant(router), query, limit, next_token)
        )

    @router.get("/executions/<execution_id>", responses=problems(404))
    def get_execution(execution_id: ExecutionId) -> ExecutionView:
        return ExecutionView.of(executions.get(caller_tenant(router), execution_id))

    @router.post("/executions/<execution_id>/heartbeat", responses=problems(403, 404, 409))
    def heartbeat(execution_id: ExecutionId) -> ExecutionView:
        tenant, token = caller_tenant(router), callback_token(router)
        return ExecutionView.of(executions.heartbeat(tenant, execution_id, token))

    @router.post("/executions/<execution_id>/complete", responses=problems(403, 404, 409))
    def complete(execution_id: ExecutionId, body: CompleteRequest) -> ExecutionView:
        tenant, token = caller_tenant(router), callback_token(router)
        completion = Completion(body.status)
        return ExecutionView.of(
            executions.complete(tenant, execution_id, token, completion, body.error)
        )

    return router
