"""Bulk rows for tests that need many workflows: written with raw SQL in one go (executemany on
SQLite's own connection, COPY on PostgreSQL), so 100,000 rows take a second or two."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

import psycopg

from statewright.store import SQLiteStore
from statewright.store.postgres import PostgresStore
from statewright.store.protocol import FullStore as Store

WORKFLOW_COLUMNS = (
    "id",
    "type",
    "machine_version",
    "state",
    "context",
    "version",
    "attempts",
    "terminal",
    "created_at",
    "updated_at",
    "state_entered_at",
    "tenant",
    "parked",
)
TRANSITION_COLUMNS = (
    "workflow_id",
    "version",
    "from_state",
    "to_state",
    "event",
    "payload",
    "actor",
    "at",
)
STEP_COLUMNS = ("key", "workflow_id", "step", "status", "attempts", "started_at")


def workflow(
    wid: str,
    type_: str,
    state: str,
    entered_at: float,
    *,
    tenant: str = "default",
    terminal: bool = False,
    parked: str | None = None,
    machine_version: int = 1,
) -> tuple[Any, ...]:
    """One ``workflows`` row in :data:`WORKFLOW_COLUMNS` order."""
    return (
        wid,
        type_,
        machine_version,
        state,
        "{}",
        1,
        0,
        terminal,
        entered_at,
        entered_at,
        entered_at,
        tenant,
        parked,
    )


async def insert(
    store: Store, table: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]
) -> None:
    """Insert ``rows`` into ``table`` of the store's database, in one transaction."""
    rows = list(rows)
    if isinstance(store, SQLiteStore):
        sql = (
            f"INSERT INTO {table} ({', '.join(columns)}) "
            f"VALUES ({', '.join('?' for _ in columns)})"
        )
        plain = [tuple(int(v) if isinstance(v, bool) else v for v in r) for r in rows]

        def fn(conn: sqlite3.Connection) -> None:
            conn.executemany(sql, plain)

        await store.conn.write(fn)
        return
    assert isinstance(store, PostgresStore)
    async with await psycopg.AsyncConnection.connect(store.dsn) as conn:
        async with conn.cursor() as cur:
            copy_sql = f"COPY {table} ({', '.join(columns)}) FROM STDIN"
            async with cur.copy(copy_sql) as copy:
                for r in rows:
                    await copy.write_row(r)
        await conn.commit()


async def analyze(store: Store) -> None:
    """Fresh planner statistics (and, on PostgreSQL, a visibility map for index-only scans),
    as autovacuum would have after a bulk load."""
    if isinstance(store, PostgresStore):
        async with await psycopg.AsyncConnection.connect(store.dsn, autocommit=True) as conn:
            # Statistics from every row, not ANALYZE's random sample (300 x the target: 30,000
            # rows by default): the plans the EXPLAIN tests check are then the same every run,
            # not a coin flip where a small partial index (the parked ones) sits near a
            # planner threshold.
            await conn.execute("SET default_statistics_target = 10000")
            await conn.execute("VACUUM ANALYZE workflows, transitions, steps, search_attributes")
