"""Timers on SQLite: armed, replaced and cleared with a transition (functions run inside its
savepoint), or scheduled and cancelled on their own."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from statewright.errors import VersionConflict, WorkflowNotFound
from statewright.store import params, timerdue
from statewright.store.core import CoreSQL, other_visit
from statewright.store.sqlite.base import Q, SQLiteBase
from statewright.types import DeferWrite, TimerSpec, TransitionWrite


def add_timers(
    conn: sqlite3.Connection,
    workflow_id: str,
    timers: Sequence[TimerSpec],
    scheduled_by: str | None = None,
) -> None:
    conn.executemany(
        Q["insert_timer"],
        [params.timer(workflow_id, t, scheduled_by, params.SQLITE) for t in timers],
    )


def change_timers(
    conn: sqlite3.Connection,
    w: TransitionWrite | DeferWrite,
    *,
    clear: bool = False,
    clear_all: bool = False,
) -> bool:
    """Apply a write's timer changes (inside its savepoint); whether any were asked.

    The timer a fire read must still be pending (a schedule may have replaced it since):
    otherwise the write is refused as a conflict and the worker reads the timers again.
    """
    wid = w.workflow_id
    fired = w.fired_timer_id
    if fired is not None:
        if conn.execute(Q["timer_exists"], {"id": wid, "timer_id": fired}).fetchone() is None:
            raise VersionConflict(wid, w.expected_version, None)
    touched = False
    if clear:
        found = {"id": wid, "all": int(clear_all), "timer_id": fired}
        touched = conn.execute(Q["delete_timers"], found).rowcount > 0
    elif fired is not None:
        conn.execute(Q["delete_timer"], {"id": wid, "timer_id": fired})
        touched = True
    keys = [*w.cancel_timer_keys, *(t.key for t in w.add_timers if t.key is not None)]
    if keys:
        conn.execute(Q["delete_timer_keys"], {"id": wid, "keys": params.SQLITE.array(keys)})
        touched = True
    if w.add_timers:
        add_timers(conn, wid, w.add_timers)
        touched = True
    return touched


def set_next_due(
    conn: sqlite3.Connection,
    workflow_id: str,
    row: sqlite3.Row,
    removed: float | None,
    at: float,
) -> None:
    """``next_due_at`` after a timer was scheduled or cancelled on its own (:mod:`.timerdue`;
    ``row``: the workflow's ``timer_visit``)."""
    first = conn.execute(Q["first_timer"], {"id": workflow_id}).fetchone()[0]
    due = timerdue.next_due(
        row["next_due_at"],
        removed,
        first,
        now=at,
        attempts=row["attempts"],
        parked=row["parked"],
    )
    conn.execute(Q["set_next_due"], {"id": workflow_id, "next_due_at": due})


class SQLiteTimers(SQLiteBase, CoreSQL):
    """Timers scheduled and cancelled on their own."""

    async def _arm_timer(
        self, timer: params.Params, visit: tuple[str, float], at: float
    ) -> sqlite3.Row | None:
        workflow_id = timer["id"]

        def fn(conn: sqlite3.Connection) -> sqlite3.Row | None:
            row = conn.execute(Q["timer_visit"], {"id": workflow_id}).fetchone()
            if row is None:
                raise WorkflowNotFound(workflow_id)
            if other_visit(row, *visit):
                return None  # another visit of the workflow: the caller reads it again
            removed: float | None = None
            if timer["key"] is not None:
                old = conn.execute(Q["timer_by_key"], timer).fetchone()
                if old is not None:
                    removed = old["due_at"]
                    conn.execute(Q["delete_timer"], {"id": workflow_id, "timer_id": old["id"]})
            conn.execute(Q["insert_timer"], timer)
            new_id = conn.execute("SELECT last_insert_rowid()").fetchone()[0]
            set_next_due(conn, workflow_id, row, removed, at)
            armed: sqlite3.Row = conn.execute(
                "SELECT * FROM timers WHERE id = ?", (new_id,)
            ).fetchone()
            return armed

        return await self.conn.write(fn)

    async def cancel_timer(self, workflow_id: str, key: str, *, at: float) -> bool:
        def fn(conn: sqlite3.Connection) -> bool:
            row = conn.execute(Q["timer_visit"], {"id": workflow_id}).fetchone()
            if row is None:
                raise WorkflowNotFound(workflow_id)
            old = conn.execute(Q["timer_by_key"], {"id": workflow_id, "key": key}).fetchone()
            if old is None:
                return False
            conn.execute(Q["delete_timer"], {"id": workflow_id, "timer_id": old["id"]})
            set_next_due(conn, workflow_id, row, old["due_at"], at)
            return True

        return await self.conn.write(fn)
