"""The schedules part (:class:`~statewright.store.protocol.Schedules`) of both SQL stores: the
``schedules`` table, every method one statement. (The claim of workflow types with limits,
``claim_due`` with ``limits``, is the core's: :mod:`statewright.store.core`.)
"""

from __future__ import annotations

from statewright.store import params as p
from statewright.store.base import SQLStore
from statewright.types import ScheduleRecord


class SchedulesSQL(SQLStore):
    """Schedules over a SQL dialect."""

    async def put_schedule(self, schedule: ScheduleRecord) -> ScheduleRecord:
        params = p.schedule(schedule, self.enc)
        return self.rows.schedule(
            await self._one(self.queries["schedule_put"], params, write=True)
        )

    async def get_schedule(self, schedule_id: str) -> ScheduleRecord | None:
        row = await self._one(self.queries["schedule_get"], {"id": schedule_id})
        return None if row is None else self.rows.schedule(row)

    async def list_schedules(
        self, tenant: str | None = None, *, after: str | None = None, limit: int | None = None
    ) -> list[ScheduleRecord]:
        if after is None and limit is None:
            rows = await self._all(self.queries["schedule_list"], {"tenant": tenant})
        else:
            params = {"tenant": tenant, "after": after, "limit": self.enc.limit(limit)}
            rows = await self._all(self.queries["schedule_page"], params)
        return [self.rows.schedule(r) for r in rows]

    async def delete_schedule(self, schedule_id: str) -> bool:
        return await self._rowcount(self.queries["schedule_delete"], {"id": schedule_id}) > 0

    async def due_schedules(self, now: float, limit: int = 100) -> list[ScheduleRecord]:
        rows = await self._all(self.queries["schedule_due"], {"now": float(now), "limit": limit})
        return [self.rows.schedule(r) for r in rows]

    async def advance_schedule(
        self,
        schedule_id: str,
        expected_next_at: float,
        next_at: float,
        *,
        at: float,
        last_tick: float | None = None,
        last_workflow_id: str | None = None,
        error: str | None = None,
    ) -> bool:
        params = p.schedule_tick(
            schedule_id, expected_next_at, next_at, at, last_tick, last_workflow_id, error
        )
        return await self._rowcount(self.queries["schedule_advance"], params) == 1

    async def pause_schedule(
        self, schedule_id: str, paused: bool, next_at: float, at: float
    ) -> ScheduleRecord | None:
        params = {"id": schedule_id, "paused": paused, "next_at": float(next_at), "at": float(at)}
        row = await self._one(self.queries["schedule_pause"], params, write=True)
        return None if row is None else self.rows.schedule(row)
