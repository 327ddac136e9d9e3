"""A tenant's calendars: named sets of days its tasks' occurrences are held to
(decision 0056)."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Path

from dynacron.api.caller import caller_tenant
from dynacron.api.openapi import problems
from dynacron.api.requests import CalendarBody
from dynacron.api.responses import CalendarList, CalendarView
from dynacron.domain.schedules.calendars import NAME_PATTERN
from dynacron.services.calendars import CalendarService

CalendarName = Annotated[str, Path(pattern=NAME_PATTERN, max_length=64)]


def calendars_router(calendars: CalendarService) -> Router:
    """``/calendars`` and ``/calendars/{name}``, served by ``calendars``."""
    router = Router()  # type: ignore[no-untyped-call]  # (its __init__ is unannotated)

    # 404: a name with characters no route takes (a control character) meets no route.
    @router.put("/calendars/<name>", responses=problems(404, 409))
    def put_calendar(name: CalendarName, body: CalendarBody) -> CalendarView:
        """Create or replace the calendar: the tasks that name it are held to its new
        days from their next occurrence on."""
        tenant = caller_tenant(router)
        return CalendarView.of(calendars.put(tenant, name, body.timezone, body.entries()))

    @router.get("/calendars", responses=problems())
    def list_calendars() -> CalendarList:
        return CalendarList(
            calendars=[CalendarView.of(c) for c in calendars.list(caller_tenant(router))]
        )

    @router.get("/calendars/<name>", responses=problems(404))
    def get_calendar(name: CalendarName) -> CalendarView:
        return CalendarView.of(calendars.get(caller_tenant(router), name))

    @router.delete("/calendars/<name>", responses=problems(404, 409, ok=(204, "Deleted")))
    def delete_calendar(name: CalendarName) -> Response[None]:
        """Delete the calendar; refused (409) while a task names it."""
        calendars.delete(caller_tenant(router), name)
        return Response(status_code=204)

    return router
