"""Routes of ``/tenant``: who the caller is to dynacron, its limits, and its
signing secrets (and their rotation)."""

from __future__ import annotations

from aws_lambda_powertools.event_handler.api_gateway import Router

from dynacron.api.caller import caller_tenant
from dynacron.api.openapi import problems
from dynacron.api.responses import TenantView
from dynacron.api.settings import TenantLimits
from dynacron.services.tasks import TaskService


def tenant_router(tasks: TaskService, settings: TenantLimits) -> Router:
    """The caller's tenant, served by ``tasks``; its limits are ``settings``'."""
    router = Router()  # type: ignore[no-untyped-call]  # (its __init__ is unannotated)

    @router.get("/tenant", responses=problems())
    def get_tenant() -> TenantView:
        tenant = caller_tenant(router)
        secrets = tasks.signing_secrets(tenant)
        return TenantView.of(
            tenant, secrets, tasks.task_count(tenant), tasks.quota(tenant), settings
        )

    @router.post("/tenant/signing-secrets/rotate", responses=problems(409))
    def rotate_signing_secret() -> TenantView:
        tenant = caller_tenant(router)
        secrets = tasks.rotate_signing_secret(tenant)
        return TenantView.of(
            tenant, secrets, tasks.task_count(tenant), tasks.quota(tenant), settings
        )

    return router
