"""Timers scheduled and cancelled on their own on PostgreSQL (those armed with a transition
are in its statement, ``apply_transition``): each in a transaction that locks the workflow's
row (``timer_visit``), serialised with its transitions."""

from __future__ import annotations

from psycopg.rows import DictRow

from statewright.errors import WorkflowNotFound
from statewright.store import params, timerdue
from statewright.store.core import CoreSQL, other_visit
from statewright.store.postgres.base import Conn, PostgresBase, Q, rollback


async def set_next_due(
    conn: Conn, workflow_id: str, found: DictRow, removed: float | None, at: float
) -> None:
    """``next_due_at`` after a timer was scheduled or cancelled on its own (:mod:`.timerdue`;
    ``found``: the workflow's ``timer_visit``)."""
    first = await (await conn.execute(Q["first_timer"], {"id": workflow_id})).fetchone()
    due = timerdue.next_due(
        found["next_due_at"],
        removed,
        None if first is None else first["first"],
        now=at,
        attempts=found["attempts"],
        parked=found["parked"],
    )
    await conn.execute(Q["set_next_due"], {"id": workflow_id, "next_due_at": due})


class PostgresTimers(PostgresBase, CoreSQL):
    """Timers scheduled and cancelled on their own."""

    async def _arm_timer(
        self, timer: params.Params, visit: tuple[str, float], at: float
    ) -> DictRow | None:
        workflow_id = timer["id"]
        async with self._connection(write=True) as conn:
            try:
                async with conn.transaction():
                    found = await (await conn.execute(Q["timer_visit"], timer)).fetchone()
                    if found is None:
                        raise WorkflowNotFound(workflow_id)
                    if other_visit(found, *visit):
                        return None  # another visit of the workflow: the caller reads again
                    removed: float | None = None
                    if timer["key"] is not None:
                        old = await (await conn.execute(Q["take_timer_key"], timer)).fetchone()
                        removed = None if old is None else old["due_at"]
                    armed = await (await conn.execute(Q["insert_timer"], timer)).fetchone()
                    await set_next_due(conn, workflow_id, found, removed, at)
            except BaseException:
                await rollback(conn)
                raise
        return armed

    async def cancel_timer(self, workflow_id: str, key: str, *, at: float) -> bool:
        asked = {"id": workflow_id, "key": key}
        async with self._connection(write=True) as conn:
            try:
                async with conn.transaction():
                    found = await (await conn.execute(Q["timer_visit"], asked)).fetchone()
                    if found is None:
                        raise WorkflowNotFound(workflow_id)
                    old = await (await conn.execute(Q["take_timer_key"], asked)).fetchone()
                    if old is None:
                        return False
                    await set_next_due(conn, workflow_id, found, old["due_at"], at)
            except BaseException:
                await rollback(conn)
                raise
        return True
