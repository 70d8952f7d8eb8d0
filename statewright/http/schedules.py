"""``/v1/schedules``: cron schedules that start workflows (see
:mod:`statewright.engine.schedules`; who may do what: :mod:`statewright.access.schedules`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Response
from pydantic import BaseModel, ConfigDict, Field

from statewright import paging
from statewright.access import schedules as sched
from statewright.http.api import _ERRORS, Cursor, PageLimit
from statewright.http.deps import AccessDep, KnownQuery
from statewright.http.inputs import BodyIn
from statewright.http.jsonbody import JSONBody
from statewright.http.schemas import NEXT_CURSOR
from statewright.ids import ID_PATTERN, REF_PATTERN

router = APIRouter(prefix="/v1", responses=_ERRORS, dependencies=[KnownQuery], tags=["schedules"])

_FIELD = r"[0-9A-Za-z*?,/#\-]{1,60}"
CRON_PATTERN = (
    rf"^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|{_FIELD}( {_FIELD}){{4}})$"
)
"""Five fields (minute hour day-of-month month day-of-week) or a shorthand; the values are
checked when the schedule is declared (409 ``invalid_schedule`` for one out of range, or a
day that never comes)."""
ZONE_PATTERN = r"^[A-Za-z][A-Za-z0-9_+\-]{0,30}(/[A-Za-z0-9_+\-]{1,30}){0,2}$"

ScheduleId = Annotated[
    str,
    Path(
        pattern=REF_PATTERN,
        description="The schedule's id (a caller that sees every tenant may give a "
        "tenant-qualified id, `tenant:id`).",
    ),
]


class ScheduleIn(BodyIn):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "id": "nightly-report",
                    "type": "agent_task",
                    "cron": "0 2 * * *",
                    "timezone": "Europe/Paris",
                    "input": {"goal": "Write the nightly report"},
                }
            ]
        },
    )

    id: str = Field(pattern=REF_PATTERN, max_length=183, description="The schedule's id.")
    type: str = Field(min_length=1, max_length=200, description="The workflow type it starts.")
    cron: str = Field(pattern=CRON_PATTERN, max_length=200, description="When: a cron line.")
    input: dict[str, Any] = Field(
        default_factory=dict, description="The input of every workflow it starts."
    )
    catch_up: Literal["latest", "all", "skip"] = Field(
        default="latest",
        description="Ticks missed while no worker ran: start the latest only (default), all "
        "of them, or none.",
    )
    timezone: str = Field(
        default="UTC", pattern=ZONE_PATTERN, description="An IANA time zone of the cron line."
    )
    paused: bool = False
    tenant: str | None = Field(
        default=None,
        pattern=ID_PATTERN,
        description="Only for tokens that see every tenant; others schedule in their own.",
    )


class ScheduleOut(BaseModel):
    id: str
    type: str
    cron: str
    timezone: str
    catch_up: str
    input: dict[str, Any]
    tenant: str
    paused: bool
    next_at: float = Field(description="The next tick (epoch seconds).")
    last_tick: float | None
    last_workflow_id: str | None = Field(description="The workflow the last tick started.")
    last_error: str | None = Field(description="Why the last tick's start was refused.")
    created_by: str | None = Field(
        default=None,
        description="Who declared its definition: the workflows it starts are logged as "
        "started by `schedule:<id> for <created_by>`.",
    )
    created_at: float
    updated_at: float


class ScheduleList(BaseModel):
    items: list[ScheduleOut] = Field(description="Schedules by id.")
    next_cursor: str | None = Field(default=None, description=NEXT_CURSOR)


class ScheduleRemoved(BaseModel):
    removed: bool


@router.post(
    "/schedules",
    response_model=ScheduleOut,
    status_code=201,
    summary="Operators: declare a cron schedule that starts workflows",
    description="Creates the schedule, or replaces the definition of the one with that id "
    "(declared again as it is, it is unchanged). Workers start one workflow per tick, named "
    "`<id>.<UTC tick>` (e.g. `nightly-report.20270115T010000Z`: ids of that form are "
    "refused to callers), each logged as started by `schedule:<id> for <caller>`. Needs the "
    "operator or admin role and the right to start the type in the tenant; 404 for an "
    "unknown type, 409 `invalid_schedule` for a cron line whose values are out of range or "
    "that never fires, or an unknown time zone.",
)
async def declare(body: ScheduleIn, access: AccessDep) -> Response:
    record = await sched.declare(
        access,
        body.id,
        body.type,
        body.cron,
        body.input,
        catch_up=body.catch_up,
        timezone=body.timezone,
        tenant=body.tenant,
        paused=body.paused,
    )
    return JSONBody(sched.view(access, record), 201)


@router.get(
    "/schedules", response_model=ScheduleList, summary="The schedules, by id, a page at a time"
)
async def listing(access: AccessDep, limit: PageLimit = 100, cursor: Cursor = None) -> Response:
    after = None if cursor is None else paging.schedule_after(cursor)
    found = await sched.listing(access, after=after, limit=limit + 1)
    page = found[:limit]
    more = len(found) > limit
    return JSONBody(
        {
            "items": [sched.view(access, s) for s in page],
            "next_cursor": paging.schedule_cursor(page[-1].id) if more else None,
        }
    )


@router.get("/schedules/{schedule_id}", response_model=ScheduleOut, summary="One schedule")
async def get_schedule(schedule_id: ScheduleId, access: AccessDep) -> Response:
    return JSONBody(sched.view(access, await sched.get(access, schedule_id)))


@router.delete(
    "/schedules/{schedule_id}",
    response_model=ScheduleRemoved,
    summary="Operators: remove a schedule",
    description="The workflows it started stay. Needs the operator or admin role.",
)
async def remove(schedule_id: ScheduleId, access: AccessDep) -> Response:
    await sched.remove(access, schedule_id)
    return JSONBody({"removed": True})


@router.post(
    "/schedules/{schedule_id}/pause",
    response_model=ScheduleOut,
    summary="Operators: pause a schedule (no tick fires until it is resumed)",
)
async def pause(schedule_id: ScheduleId, access: AccessDep) -> Response:
    return JSONBody(sched.view(access, await sched.set_paused(access, schedule_id, True)))


@router.post(
    "/schedules/{schedule_id}/resume",
    response_model=ScheduleOut,
    summary="Operators: resume a schedule from its next tick after now",
    description="The ticks of the pause are not caught up. Needs the operator or admin role.",
)
async def resume(schedule_id: ScheduleId, access: AccessDep) -> Response:
    return JSONBody(sched.view(access, await sched.set_paused(access, schedule_id, False)))
