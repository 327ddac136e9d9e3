"""The HTTP API's resolver, composed of one Powertools ``Router`` per resource.

Every route acts for one tenant: the ``authenticate`` middleware derives it from
the caller's identity and rate-limits it, and ``caller_tenant(router)`` hands it
to the route. The exceptions are the callback routes (``routes/callbacks.py``),
which a handler calls with the per-attempt callback token alone.
"""

from __future__ import annotations

from aws_lambda_powertools.event_handler import APIGatewayRestResolver

from dynacron.api.errors import map_errors_to_problems
from dynacron.api.json_body import parse_json_body
from dynacron.api.middlewares import authenticate, keep_fixed_paths, refuse_unknown_query
from dynacron.api.pre_routing import unroutable_path, unsupported_body
from dynacron.api.routes.calendars import calendars_router
from dynacron.api.routes.callbacks import callbacks_router
from dynacron.api.routes.changes import changes_router
from dynacron.api.routes.dead_letters import dead_letters_router
from dynacron.api.routes.executions import executions_router
from dynacron.api.routes.meta import include_meta_routes
from dynacron.api.routes.schedules import schedules_router
from dynacron.api.routes.tasks import OutsideLock, run_here, tasks_router
from dynacron.api.routes.tenant import tenant_router
from dynacron.api.settings import ApiSettings
from dynacron.domain.coordination.quotas import TenantRateLimiter
from dynacron.services.executions import ExecutionService
from dynacron.services.forecast import HerdForecast
from dynacron.services.tasks import TaskService

# Answered before the resolver routes a request (entry/composition.py calls them first).
__all__ = ["build_api", "unroutable_path", "unsupported_body"]


def build_api(
    tasks: TaskService,
    executions: ExecutionService,
    settings: ApiSettings,
    rate_limiter: TenantRateLimiter,
    forecast: HerdForecast | None = None,
    outside_lock: OutsideLock = run_here,
) -> APIGatewayRestResolver:
    """The API's resolver: its routes, the middlewares they run through, and the
    problem answer of every error. ``outside_lock``: how a route releases the
    caller's one-request-at-a-time lock for work that reads nothing of the request."""
    app = APIGatewayRestResolver(enable_validation=True, json_body_deserializer=parse_json_body)
    app.use(
        middlewares=[authenticate(settings, rate_limiter), refuse_unknown_query, keep_fixed_paths]
    )
    # In this order: the OpenAPI document lists the paths as they were included.
    app.include_router(tasks_router(tasks, outside_lock))
    app.include_router(changes_router(tasks))
    app.include_router(schedules_router(tasks, forecast))
    app.include_router(executions_router(executions))
    app.include_router(callbacks_router(executions, rate_limiter))
    app.include_router(dead_letters_router(executions))
    app.include_router(tenant_router(tasks, settings))
    if tasks.calendar_service is not None:
        app.include_router(calendars_router(tasks.calendar_service))
    include_meta_routes(app, settings)
    map_errors_to_problems(app)
    return app
