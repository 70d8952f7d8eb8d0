"""Upgrading a store written before the timer-keys migration (SQLite 0007, PostgreSQL 0006):
its timers are kept, read back as one-shot state timers, fire and clear as before, and the
new columns work (on both stores)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import psycopg

from statewright.store import SQLiteStore
from statewright.store.postgres import PostgresStore
from statewright.store.protocol import FullStore as Store
from statewright.store.queries import migrations
from statewright.types import TimerSpec, TransitionWrite

T0 = 1_800_000_000.0
WORKFLOW = (
    "INSERT INTO workflows (id, type, machine_version, state, context, version, attempts,"
    " terminal, created_at, updated_at, state_entered_at, next_due_at)"
    " VALUES ('w', 't', 1, 'a', '{{}}', 1, 0, {false}, {t0}, {t0}, {t0}, {due})"
)
TIMER = (
    "INSERT INTO timers (workflow_id, due_at, event, payload)"
    " VALUES ('w', {due}, 'expire', '{{}}')"
)


def _before(dialect: str) -> list[tuple[int, str, str]]:
    all_ = migrations(dialect)
    this = next(n for n, name, _ in all_ if name == "timer_keys")
    return [m for m in all_ if m[0] < this]


async def _check(store: Store) -> None:
    [timer] = await store.timers("w")
    assert (timer.event, timer.due_at, timer.key, timer.every, timer.keep) == (
        "expire",
        T0 + 60,
        None,
        None,
        False,
    )
    row = await store.get_workflow("w")
    assert row is not None
    rec = await store.schedule_timer(
        "w",
        TimerSpec(T0 + 30, "ping", key="k", keep=True),
        state=row.state,
        entered_at=row.state_entered_at,
        at=T0,
    )
    assert rec is not None and rec.keep
    moved = await store.apply_transition(
        TransitionWrite(
            workflow_id="w",
            expected_version=1,
            from_state="a",
            to_state="b",
            event="go",
            payload={},
            actor="t",
            at=T0 + 1,
            context={},
        )
    )
    assert [t.key for t in await store.timers("w")] == ["k"]
    assert moved.next_due_at == T0 + 30


async def test_sqlite_upgrade_keeps_timers(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL,"
        " applied_at REAL NOT NULL)"
    )
    for number, name, sql in _before("sqlite"):
        conn.executescript(sql)
        conn.execute("INSERT INTO schema_migrations VALUES (?, ?, ?)", (number, name, time.time()))
    conn.execute(WORKFLOW.format(false=0, t0=T0, due=T0 + 60))
    conn.execute(TIMER.format(due=T0 + 60))
    conn.commit()
    conn.close()
    store = SQLiteStore(path)
    await store.open()
    try:
        await _check(store)
    finally:
        await store.close()


async def test_postgres_upgrade_keeps_timers(pg_database: Callable[..., str]) -> None:
    dsn = pg_database(template="template0")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL,"
            " applied_at DOUBLE PRECISION NOT NULL)"
        )
        for number, name, sql in _before("postgres"):
            conn.execute(sql.encode())
            conn.execute(
                "INSERT INTO schema_migrations VALUES (%s, %s, %s)", (number, name, time.time())
            )
        conn.execute(WORKFLOW.format(false="FALSE", t0=T0, due=T0 + 60).encode())
        conn.execute(TIMER.format(due=T0 + 60).encode())
    store = PostgresStore(dsn, min_size=1, max_size=1)
    await store.open()
    try:
        await _check(store)
    finally:
        await store.close()
