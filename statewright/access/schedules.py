"""Who may see and change schedules (for the HTTP surface): reading needs any token of the
schedule's tenant, declaring, pausing, resuming and removing need the operator or admin role.
Declaring also needs that the caller may start the schedule's type in its tenant
(:meth:`Access.check_start`): its ticks start workflows on the declarer's behalf, and name
them (``schedule:<id> for <actor>``).

Schedule ids are scoped per tenant like workflow ids (:mod:`statewright.ids`): a caller bound
to tenant ``acme`` names its schedule ``nightly``, kept as ``acme:nightly``, and the
workflows it starts are ``acme:nightly.<tick>``, which that caller knows as
``nightly.<tick>``. Another tenant's schedule is, for the caller, exactly as absent as a free
id.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from statewright import ids
from statewright.access.core import OPERATORS, Access
from statewright.engine import schedules as schedule_ops
from statewright.errors import Forbidden, ScheduleNotFound, UnknownWorkflowType
from statewright.redaction import Redactor
from statewright.types import ScheduleRecord


def _operator(access: Access, what: str) -> None:
    access.principal.check_role(what, *OPERATORS)


def _store_id(access: Access, schedule_id: str) -> str:
    scope = access.principal.scope
    if scope is None:
        return schedule_ops.check_schedule_id(schedule_id)
    if not ids.valid_id(schedule_id):
        raise ScheduleNotFound(schedule_id)
    return ids.qualify(scope, schedule_id)


async def get(access: Access, schedule_id: str) -> ScheduleRecord:
    """The schedule the caller knows as ``schedule_id``; ScheduleNotFound otherwise."""
    found = await access.runtime.store.get_schedule(_store_id(access, schedule_id))
    scope = access.principal.scope
    if found is None or (scope is not None and found.tenant != scope):
        raise ScheduleNotFound(schedule_id)
    return found


async def listing(
    access: Access, *, after: str | None = None, limit: int | None = None
) -> list[ScheduleRecord]:
    """The caller's tenant's schedules by store id, after the store id ``after``."""
    return await schedule_ops.listing(
        access.runtime, tenant=access.principal.scope, after=after, limit=limit
    )


async def declare(
    access: Access,
    schedule_id: str,
    workflow_type: str,
    cron: str,
    input: Mapping[str, Any] | None,
    *,
    catch_up: str,
    timezone: str,
    tenant: str | None,
    paused: bool,
) -> ScheduleRecord:
    """Create or replace a schedule in the caller's tenant (roles operator/admin)."""
    _operator(access, "manage schedules")
    scope = access.principal.scope
    if scope is not None:
        if tenant not in (None, scope):
            raise Forbidden(f"{access.principal.actor!r} may only schedule in {scope!r}")
        tenant = scope
        prefix, sep, local = schedule_id.rpartition(ids.SEPARATOR)
        if sep and prefix != scope:
            raise Forbidden(f"{access.principal.actor!r} may only schedule in {scope!r}")
        store_id = ids.qualify(scope, schedule_ops.check_schedule_id(local))
    else:
        store_id = schedule_ops.check_schedule_id(schedule_id, tenant)
        prefix, sep, _ = store_id.rpartition(ids.SEPARATOR)
        tenant = tenant or (prefix if sep else ids.DEFAULT_TENANT)
    access.check_start(workflow_type, tenant)
    return await schedule_ops.put(
        access.runtime,
        workflow_type,
        cron,
        input,
        schedule_id=store_id,
        catch_up=catch_up,
        timezone=timezone,
        tenant=tenant,
        paused=paused,
        actor=access.principal.actor,
    )


async def remove(access: Access, schedule_id: str) -> None:
    found = await get(access, schedule_id)
    _operator(access, "remove schedules")
    await schedule_ops.remove(access.runtime, found.id)


async def set_paused(access: Access, schedule_id: str, paused: bool) -> ScheduleRecord:
    found = await get(access, schedule_id)
    _operator(access, "pause or resume schedules")
    return await schedule_ops.set_paused(access.runtime, found.id, paused)


def view(access: Access, s: ScheduleRecord) -> dict[str, Any]:
    """A schedule as the caller sees it: its ids as the caller knows them, its input
    redacted as the type redacts the context of its workflows (unless the caller sees
    secrets)."""
    body = dict(s.input)
    if not access.sees_secrets:
        try:
            paths = access.type_of(s.type).redact
        except UnknownWorkflowType:
            paths = tuple(dict.fromkeys(p for t in access.types for p in t.redact))
        body = Redactor(paths, body).mapping(body) or {}
    return {
        "id": access.public_id(s.id),
        "type": s.type,
        "cron": s.cron,
        "timezone": s.timezone,
        "catch_up": s.catch_up,
        "input": body,
        "tenant": s.tenant,
        "paused": s.paused,
        "next_at": s.next_at,
        "last_tick": s.last_tick,
        "last_workflow_id": (
            None if s.last_workflow_id is None else access.public_id(s.last_workflow_id)
        ),
        "last_error": None if s.last_error is None else access.public_text(s.last_error),
        "created_by": s.created_by,
        "created_at": s.created_at,
        "updated_at": s.updated_at,
    }
