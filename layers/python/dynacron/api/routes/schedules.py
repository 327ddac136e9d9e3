"""Routes about schedules rather than one task: a schedule's preview, and the
tenant's herd forecast (the executions its tasks start each minute ahead)."""

from __future__ import annotations

from aws_lambda_powertools.event_handler.api_gateway import Router

from dynacron.api.caller import caller_tenant
from dynacron.api.openapi import problems
from dynacron.api.parameters import ForecastHours
from dynacron.api.requests import SchedulePreviewRequest
from dynacron.api.responses import ForecastView, SchedulePreviewView
from dynacron.services.forecast import HerdForecast
from dynacron.services.tasks import TaskService


def schedules_router(tasks: TaskService, forecast: HerdForecast | None) -> Router:
    """``POST /schedules/preview``, and ``GET /forecast`` where there is a ``forecast``."""
    router = Router()  # type: ignore[no-untyped-call]  # (its __init__ is unannotated)

    # 404: a task_id the tenant has no task of (its skips and calendars are marked).
    @router.post("/schedules/preview", responses=problems(404))
    def preview_schedule(body: SchedulePreviewRequest) -> SchedulePreviewView:
        """The occurrences a task registered now with this schedule would have, checked
        as POST /tasks checks a schedule (the same 422 problems), nothing stored. A
        cron's H fields are spread by the task id, which only POST /tasks gives: here
        by a fresh one, as an example. Occurrences that would not run are marked in
        `skipped`: those the calendars given exclude, and with `task_id` those that
        task's skips pass over (and its calendars' days, unless calendars are given)."""
        spec = body.schedule_spec()
        return SchedulePreviewView.of(
            tasks.preview_schedule(
                caller_tenant(router),
                spec,
                body.count,
                task_id=body.task_id,
                calendars=body.calendar_rule(),
            )
        )

    if forecast is not None:

        @router.get("/forecast", responses=problems())
        def herd_forecast(hours: ForecastHours = 24) -> ForecastView:
            return ForecastView.of(forecast.next_hours(caller_tenant(router), hours))

    return router
