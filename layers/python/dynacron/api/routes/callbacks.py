"""Routes under ``/callbacks/``: a long job's heartbeat and completion, sent with
the callback token alone (decision 0023). API Gateway lets exactly these through
without IAM (infra/constructs/api.py); the token names the execution, and the
execution the tenant, which is rate-limited here as the middleware does elsewhere."""

from __future__ import annotations

from aws_lambda_powertools.event_handler.api_gateway import Router

from dynacron.api.caller import sent_callback_token
from dynacron.api.openapi import CALLBACK_SECURITY, problems
from dynacron.api.parameters import ExecutionId
from dynacron.api.requests import CompleteRequest
from dynacron.api.responses import ExecutionView
from dynacron.definitions.callbacks import CALLBACKS_RESOURCE
from dynacron.domain.coordination.quotas import TenantRateLimiter
from dynacron.services.executions import Completion, ExecutionService

# 404: only for a path no route takes (an id with characters no id has); an id
# that may exist, or not, is the 403 of a wrong token.
_RESPONSES = problems(403, 404, 409)


def callbacks_router(executions: ExecutionService, rate_limiter: TenantRateLimiter) -> Router:
    """The token-only callback routes, served by ``executions``."""
    router = Router()  # type: ignore[no-untyped-call]  # (its __init__ is unannotated)

    @router.post(
        f"/{CALLBACKS_RESOURCE}/<execution_id>/heartbeat",
        responses=_RESPONSES,
        security=CALLBACK_SECURITY,
        summary="A long job is alive: extend its lease (callback token only, no IAM)",
    )
    def heartbeat_by_token(execution_id: ExecutionId) -> ExecutionView:
        execution = executions.by_callback_token(execution_id, sent_callback_token(router))
        rate_limiter.take(execution.tenant_id)
        return ExecutionView.of(executions.heartbeat_of(execution))

    @router.post(
        f"/{CALLBACKS_RESOURCE}/<execution_id>/complete",
        responses=_RESPONSES,
        security=CALLBACK_SECURITY,
        summary="A long job finished: SUCCEEDED or FAILED (callback token only, no IAM)",
    )
    def complete_by_token(execution_id: ExecutionId, body: CompleteRequest) -> ExecutionView:
        execution = executions.by_callback_token(execution_id, sent_callback_token(router))
        rate_limiter.take(execution.tenant_id)
        completed = executions.complete_of(execution, Completion(body.status), body.error)
        return ExecutionView.of(completed)

    return router
