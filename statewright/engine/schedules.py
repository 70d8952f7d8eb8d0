"""Cron schedules that start workflows: declared once, durable (the ``schedules`` table),
fired by workers, exactly one workflow per tick however many workers run.

How a tick starts exactly one workflow:

1. The started workflow's id is derived from the schedule and the tick
   (``<schedule>.<UTC tick, 20270115T020000Z>``, qualified by the schedule's tenant), so a
   second start of the same tick, by another worker or by the same one after a crash, finds
   the workflow and creates nothing (``create_workflow`` is idempotent on the id).
2. Then the schedule's next tick moves on with a compare-and-swap from the value read: of the
   workers that read the same due schedule one advances it; the others change nothing.

A worker killed between 1 and 2 leaves the schedule due; the next round (any worker) starts
the same tick again (a no-op) and advances it. No tick is lost, none is started twice.

**A tick starts its own workflow or fails loudly.** Tick ids are predictable, so no caller
may create a workflow under an id of their form (:func:`statewright.ids.check_new_id`); and
when a tick finds its id taken all the same (a workflow made before that rule, or by the
trusted Python API), the workflow counts as the tick's only if this schedule started it: its
first log entry is ``$start`` by the schedule's actor with the schedule's input (the type
is checked by the start). Otherwise the tick is recorded as the schedule's ``last_error``,
logged at ERROR, and not counted as started.

**Who a tick acts for.** A schedule keeps who declared its definition (``created_by``; the
surfaces require that this caller may start the type in the schedule's tenant), and the
workflows its ticks start are logged as started by ``schedule:<id> for <created_by>``
(:func:`tick_actor`).

Parsing and iterating cron expressions is cronsim's (a small, maintained library used by
healthchecks.io), with ``zoneinfo`` for time zones (a daily ``0 2 * * *`` in
``Europe/Paris`` stays at 02:00 local time across daylight saving).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, get_args
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from statewright import ids
from statewright.engine.commands import start
from statewright.engine.input_schema import check_input
from statewright.engine.transitions import same_json
from statewright.errors import (
    InvalidSchedule,
    ScheduleNotFound,
    StatewrightError,
    StoreError,
)
from statewright.types import ScheduleRecord, WorkflowRow

if TYPE_CHECKING:
    from statewright.engine.runtime import Runtime

log = logging.getLogger(__name__)

CatchUp = Literal["latest", "all", "skip"]
"""What a worker does with ticks missed while no worker ran (or the schedule was behind):

``latest`` (the default, like Temporal's and DBOS's schedules): start one workflow for the
most recent missed tick, skip the older ones. ``all``: start one for every missed tick, oldest
first (at most :data:`MAX_CATCH_UP` per round; the rest in the next rounds). ``skip``: start
none of them: only a tick that is at most :data:`MISFIRE_GRACE` seconds late starts a
workflow."""
CATCH_UP: tuple[str, ...] = get_args(CatchUp)
MISFIRE_GRACE = 60.0
"""Seconds late a tick may be and still count as on time (``catch_up="skip"``)."""
MAX_CATCH_UP = 100
"""Missed ticks ``catch_up="all"`` starts per round."""
ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
"""The usual shorthands (cronsim reads the five fields only)."""
_STAMP = "%Y%m%dT%H%M%SZ"
_MAX_LOCAL_ID = 200 - 1 - len("20270115T020000Z")


@dataclass(frozen=True)
class Cron:
    """A validated cron expression in a time zone."""

    expr: str
    timezone: str

    @property
    def fields(self) -> str:
        return ALIASES.get(self.expr.strip().lower(), self.expr.strip())

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    def next_after(self, at: float) -> float:
        """The first tick strictly after ``at``."""
        start = datetime.fromtimestamp(at, self.zone)
        return next(CronSim(self.fields, start)).timestamp()

    def latest_at_or_before(self, at: float) -> float:
        """The last tick at or before ``at``."""
        start = datetime.fromtimestamp(at, self.zone) + timedelta(microseconds=1)
        return next(CronSim(self.fields, start, reverse=True)).timestamp()


def parse(expr: Any, timezone: Any = "UTC") -> Cron:
    """A :class:`Cron`, or InvalidSchedule saying what is wrong with the expression or zone."""
    if not isinstance(timezone, str) or not timezone:
        raise InvalidSchedule(f"invalid time zone {timezone!r}", field="timezone")
    try:
        ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise InvalidSchedule(
            f"unknown time zone {timezone!r} (an IANA name such as 'Europe/Paris')",
            field="timezone",
        ) from exc
    if not isinstance(expr, str) or not expr.strip() or len(expr) > 200:
        raise InvalidSchedule(f"invalid cron expression {expr!r}", field="cron")
    cron = Cron(expr.strip(), timezone)
    try:
        cron.next_after(0.0)
    except (CronSimError, StopIteration, ValueError, LookupError, OverflowError) as exc:
        raise InvalidSchedule(
            f"invalid cron expression {expr!r}: {exc or 'it never fires'} (five fields: "
            "minute hour day-of-month month day-of-week, e.g. '*/5 * * * *', or @daily...)",
            field="cron",
        ) from exc
    return cron


def tick_workflow_id(schedule: ScheduleRecord, tick: float) -> str:
    """The id of the workflow a schedule starts for a tick (the same for every worker)."""
    local = schedule.id.rpartition(ids.SEPARATOR)[2]
    stamp = datetime.fromtimestamp(tick, UTC).strftime(_STAMP)
    return ids.qualify(schedule.tenant, f"{local}.{stamp}")


def tick_actor(schedule: ScheduleRecord, prefix: str = "schedule") -> str:
    """The actor of the ``$start`` of the workflows a schedule's ticks start:
    ``schedule:<id> for <who declared it>`` (``schedule:<id>`` when that is not known)."""
    actor = f"{prefix}:{schedule.id}"
    return actor if schedule.created_by is None else f"{actor} for {schedule.created_by}"


async def started_by(
    rt: Runtime, schedule: ScheduleRecord, row: WorkflowRow, prefix: str = "schedule"
) -> str | None:
    """Why the existing workflow ``row`` under a tick's id was not started by ``schedule``
    (None: it was: its first log entry is ``$start`` by the schedule's actor, or by the
    actor ticks had before schedules kept their creator, with the schedule's input)."""
    first = await rt.store.history(row.id, 0, 1)
    if not first:
        return "it has no log"
    entry = first[0]
    actors = {tick_actor(schedule, prefix), f"{prefix}:{schedule.id}"}
    if entry.event != "$start" or entry.actor not in actors:
        return f"it was made by {entry.actor!r} ({entry.event})"
    if not same_json(entry.payload, schedule.input):
        return "it was started with another input"
    return None


def due_ticks(schedule: ScheduleRecord, now: float) -> tuple[list[float], float]:
    """``(ticks to start now, the next tick after them)`` for a due schedule."""
    cron = parse(schedule.cron, schedule.timezone)
    if schedule.catch_up == "all":
        ticks: list[float] = []
        t = schedule.next_at
        while t <= now and len(ticks) < MAX_CATCH_UP:
            ticks.append(t)
            t = cron.next_after(t)
        return ticks, t
    latest = cron.latest_at_or_before(now)
    latest = max(latest, schedule.next_at)  # the schedule's own next tick is a tick
    following = cron.next_after(now)
    if schedule.catch_up == "skip" and now - latest > MISFIRE_GRACE:
        return [], following
    return [latest], following


def check_definition(
    rt: Runtime,
    workflow_type: str,
    cron: str,
    input: Mapping[str, Any] | None,
    schedule_id: str,
    catch_up: str,
    timezone: str,
    tenant: str,
) -> tuple[Cron, dict[str, Any]]:
    """Every check a start would make, at schedule time: typed errors, nothing stored."""
    wtype = rt.registry.type_of(workflow_type)  # UnknownWorkflowType
    parsed = parse(cron, timezone)
    if catch_up not in CATCH_UP:
        raise InvalidSchedule(
            f"invalid catch_up {catch_up!r}: one of {', '.join(CATCH_UP)}", field="catch_up"
        )
    ids.check_id(tenant, "tenant")
    check_schedule_id(schedule_id, tenant)
    if input is not None and not isinstance(input, Mapping):
        raise InvalidSchedule(
            f"input must be a JSON object, got {type(input).__name__}", field="input"
        )
    body = dict(input or {})
    rt.limits.check(body, "input")
    if wtype.input_validator is not None:  # InputNotAccepted: every tick would be refused
        check_input(wtype.name, wtype.input_validator, body)
    return parsed, body


def check_schedule_id(schedule_id: Any, tenant: str | None = None) -> str:
    """A schedule id: like a workflow id (optionally ``<tenant>:`` first, then that of the
    schedule's tenant), short enough to name the workflows it starts."""
    if not isinstance(schedule_id, str):
        raise InvalidSchedule(f"invalid schedule id {schedule_id!r}", field="schedule_id")
    prefix, sep, local = schedule_id.rpartition(ids.SEPARATOR)
    if not ids.valid_id(local) or (sep and not ids.valid_id(prefix)):
        raise InvalidSchedule(
            f"invalid schedule id {schedule_id!r}: {ids.RULE} (optionally after '<tenant>:')",
            field="schedule_id",
        )
    if sep and tenant is not None and prefix != tenant:
        raise InvalidSchedule(
            f"schedule id {schedule_id!r} is qualified by tenant {prefix!r}, not {tenant!r}",
            field="schedule_id",
        )
    if len(local) > _MAX_LOCAL_ID:
        raise InvalidSchedule(
            f"schedule id {schedule_id!r} is too long (at most {_MAX_LOCAL_ID} characters: "
            "the workflows it starts are named after it)",
            field="schedule_id",
        )
    return str(schedule_id)


async def put(
    rt: Runtime,
    workflow_type: str,
    cron: str,
    input: Mapping[str, Any] | None = None,
    *,
    schedule_id: str,
    catch_up: str = "latest",
    timezone: str = "UTC",
    tenant: str = ids.DEFAULT_TENANT,
    paused: bool = False,
    actor: str | None = None,
) -> ScheduleRecord:
    """Start a workflow of ``workflow_type`` with ``input`` at every tick of ``cron`` (five
    fields, or ``@daily``, ``@hourly``...) in ``timezone``; workers fire the ticks, one
    workflow per tick however many run (its id: ``<schedule_id>.<UTC tick>``).

    ``actor``: who declares it, kept as the schedule's ``created_by``; the workflows its
    ticks start are logged as started by ``schedule:<schedule_id> for <actor>`` (by
    ``schedule:<schedule_id>`` without one). The engine trusts its caller; the HTTP
    surface first checks that the caller may start the type in the tenant.

    Declaring a schedule again as it is changes nothing; with another definition it
    replaces it (its next tick counted from now). ``catch_up``: ``latest`` (default: of
    the ticks missed while no worker ran, start the latest only), ``all`` or ``skip``
    (:data:`CatchUp`).

    Raises UnknownWorkflowType, InvalidSchedule (cron, zone, policy or id), InvalidInput
    (an input a start would refuse).
    """
    parsed, body = check_definition(
        rt, workflow_type, cron, input, schedule_id, catch_up, timezone, tenant
    )
    now = rt.clock.now()
    before = await rt.store.get_schedule(schedule_id)
    if before is not None and (
        before.type,
        before.cron,
        before.timezone,
        before.catch_up,
        before.input,
        before.tenant,
        before.paused,
    ) == (workflow_type, parsed.expr, timezone, catch_up, body, tenant, paused):
        # Declared again as it is (every deploy may declare its schedules): its creator
        # stays the one who declared this definition.
        return before
    record = ScheduleRecord(
        id=schedule_id,
        type=workflow_type,
        cron=parsed.expr,
        timezone=timezone,
        catch_up=catch_up,
        input=body,
        tenant=tenant,
        paused=paused,
        next_at=parsed.next_after(now),
        created_at=now,
        updated_at=now,
        created_by=actor,
    )
    saved = await rt.store.put_schedule(record)
    log.info(
        "schedule declared",
        extra={
            "action": "schedule_put",
            "schedule_id": schedule_id,
            "cron": parsed.expr,
            "actor": actor or "system",
        },
    )
    return saved


async def listing(
    rt: Runtime, tenant: str | None = None, *, after: str | None = None, limit: int | None = None
) -> list[ScheduleRecord]:
    """The schedules (of one tenant when given), by id: after the id ``after``, at most
    ``limit`` (default: all)."""
    return await rt.store.list_schedules(tenant, after=after, limit=limit)


async def get(rt: Runtime, schedule_id: str) -> ScheduleRecord:
    """One schedule; raises ScheduleNotFound."""
    found = await rt.store.get_schedule(schedule_id)
    if found is None:
        raise ScheduleNotFound(schedule_id)
    return found


async def remove(rt: Runtime, schedule_id: str) -> None:
    """Remove a schedule (the workflows it started stay); raises ScheduleNotFound."""
    if not await rt.store.delete_schedule(schedule_id):
        raise ScheduleNotFound(schedule_id)


async def set_paused(rt: Runtime, schedule_id: str, paused: bool) -> ScheduleRecord:
    """Pause (no tick fires) or resume (from the first tick after now: the ticks of the pause
    are skipped, whatever the catch-up policy)."""
    found = await get(rt, schedule_id)
    now = rt.clock.now()
    next_at = found.next_at if paused else parse(found.cron, found.timezone).next_after(now)
    changed = await rt.store.pause_schedule(schedule_id, paused, next_at, now)
    if changed is None:
        raise ScheduleNotFound(schedule_id)
    return changed


async def pause(rt: Runtime, schedule_id: str) -> ScheduleRecord:
    """Stop a schedule's ticks until :func:`resume`; raises ScheduleNotFound."""
    return await set_paused(rt, schedule_id, True)


async def resume(rt: Runtime, schedule_id: str) -> ScheduleRecord:
    """Resume a paused schedule from its first tick after now (the paused ticks are not
    caught up); raises ScheduleNotFound."""
    return await set_paused(rt, schedule_id, False)


async def fire_due(
    rt: Runtime,
    now: float | None = None,
    *,
    types: Collection[str] | None = None,
    actor_prefix: str = "schedule",
    limit: int = 100,
) -> list[str]:
    """Start the workflows of every due tick of the schedules of ``types`` (default: the
    engine's); returns the ids of the workflows this call created.

    Safe to run in any number of workers at once (see the module's docstring). A schedule
    whose start is refused (an input the type no longer takes, say) or whose tick id holds a
    workflow it did not start records the error on the schedule and moves on to its next
    tick; a store failure leaves it due (retried).
    """
    now = rt.clock.now() if now is None else now
    names = {t.name for t in rt.registry.types} if types is None else set(types)
    created: list[str] = []
    for schedule in await rt.store.due_schedules(now, limit):
        if schedule.type not in names:
            continue  # another deployment's type: its own workers fire it
        error: str | None = None
        last_id = None
        try:
            ticks, following = due_ticks(schedule, now)
        except InvalidSchedule as exc:  # a row written by hand, or a zone gone from tzdata
            ticks, following, error = [], math.inf, exc.message
            log.error(
                "schedule cannot be read",
                extra={"action": "schedule_invalid", "schedule_id": schedule.id},
            )
        for tick in ticks:
            workflow_id = tick_workflow_id(schedule, tick)
            try:
                started = await start(
                    rt,
                    schedule.type,
                    schedule.input,
                    workflow_id=workflow_id,
                    actor=tick_actor(schedule, actor_prefix),
                    tenant=schedule.tenant,
                )
                row, new = started.row, started.created
                squatted = None if new else await started_by(rt, schedule, row, actor_prefix)
            except StoreError:
                raise  # nothing advanced: the tick stays due
            except StatewrightError as exc:
                error = f"{exc.code}: {exc.message}"
                log.error(
                    "scheduled start refused",
                    extra={
                        "action": "schedule_refused",
                        "schedule_id": schedule.id,
                        "workflow_id": workflow_id,
                        "code": exc.code,
                    },
                )
                continue
            if squatted is not None:
                error = (
                    f"workflow_exists: the tick's id {workflow_id!r} holds a workflow this "
                    f"schedule did not start ({squatted}); the tick started nothing"
                )
                log.error(
                    "scheduled tick's id taken by another workflow",
                    extra={
                        "action": "schedule_tick_taken",
                        "schedule_id": schedule.id,
                        "workflow_id": workflow_id,
                        "reason": squatted,
                    },
                )
                continue
            last_id = workflow_id
            if new:
                created.append(workflow_id)
                log.info(
                    "scheduled workflow started",
                    extra={
                        "action": "schedule_fired",
                        "schedule_id": schedule.id,
                        "workflow_id": workflow_id,
                    },
                )
        if math.isinf(following):
            following = now + 365 * 86400.0  # unreadable: parked a year out, error shown
            error = error or "the schedule's cron expression or time zone cannot be read"
        await rt.store.advance_schedule(
            schedule.id,
            schedule.next_at,
            following,
            at=now,
            last_tick=ticks[-1] if ticks else None,
            last_workflow_id=last_id,
            error=error,
        )
    return created
