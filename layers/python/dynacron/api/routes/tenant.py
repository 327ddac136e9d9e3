"""Routes of ``/tenant``: who the caller is to dynacron, its limits, and its
signing secrets (and their rotation)."""

from __future__ import annotations

from aws_lambda_powertools.event_handler.api_gateway import Router

from dynacron.api.caller import caller_tenant
from dynacron.api.openapi import problems
from dynacron.api.responses import TenantView
from dynacron.entry.settings import Settings
from dynacron.services.tasks import TaskService


def tenant_router(tasks: TaskService, settings: Settings) -> Router:
    """The caller's tenant, served by ``tasks``; its limits are ``settings``'."""
    router = Router()  # type: ignore[no-untyped-call]  # (its __init__ is unannotated)

    @router.get("/tenant", responses=problems())
    def get_tenant() -> TenantView:
        tenant = caller_tenant(router)
        return tenant_view(tenant, tasks.signing_secrets(tenant))

    @router.post("/tenant/signing-secrets/rotate", responses=problems(409))
    def rotate_signing_secret() -> TenantView:
        tenant = caller_tenant(router)
        return tenant_view(tenant, tasks.rotate_signing_secret(tenant))

    def tenant_view(tenant: str, secrets: list[str]) -> TenantView:
        return TenantView(
            tenant_id=tenant,
            signing_secrets=secrets,
            task_count=tasks.task_count(tenant),
            max_tasks=settings.max_tasks_per_tenant,
            max_payload_bytes=settings.max_payload_bytes,
            min_interval_seconds=settings.min_interval_seconds,
        )

    return router
