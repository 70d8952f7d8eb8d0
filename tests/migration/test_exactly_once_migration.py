"""Upgrading a store written before the exactly-once migration: cancel requests stored as a
JSON string become columns, plain-string requests stay reasons, and every row stays readable
(on both stores)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import psycopg

from statewright.store import SQLiteStore
from statewright.store.postgres import PostgresStore
from statewright.store.queries import migrations
from statewright.types import CancelRequest

JSON_REQUEST = '{"reason": "customer asked", "actor": "erin", "at": 1800000000.5, "v": 3}'
ROWS = [
    ("json", JSON_REQUEST),
    ("plain", "a plain reason"),
    ("not-ours", '{"why": "another writer"}'),
    ("none", None),
]
EXPECTED = {
    "json": CancelRequest("customer asked", "erin", 1800000000.5, 3),
    "plain": CancelRequest("a plain reason"),
    "not-ours": CancelRequest('{"why": "another writer"}'),
    "none": None,
}
INSERT = (
    "INSERT INTO workflows (id, type, machine_version, state, context, version, attempts,"
    " terminal, created_at, updated_at, state_entered_at, cancel_requested)"
    " VALUES ({p}, 't', 1, 'a', '{{}}', 1, 0, {false}, 0, 0, 0, {p})"
)


def _before(dialect: str) -> list[tuple[int, str, str]]:
    """The migrations that came before this one."""
    all_ = migrations(dialect)
    this = next(n for n, name, _ in all_ if name == "exactly_once")
    return [m for m in all_ if m[0] < this]


async def test_sqlite_upgrade_moves_cancel_requests_into_columns(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL,"
        " applied_at REAL NOT NULL)"
    )
    for number, name, sql in _before("sqlite"):
        conn.executescript(sql)
        conn.execute("INSERT INTO schema_migrations VALUES (?, ?, ?)", (number, name, time.time()))
    for wid, raw in ROWS:
        conn.execute(INSERT.format(p="?", false=0), (wid, raw))
    conn.commit()
    conn.close()

    store = SQLiteStore(path)
    await store.open()
    try:
        for wid, want in EXPECTED.items():
            row = await store.get_workflow(wid)
            assert row is not None and row.cancel == want, wid
            assert (row.fence, row.total_attempts, row.parked) == (0, 0, None)
    finally:
        await store.close()


async def test_postgres_upgrade_moves_cancel_requests_into_columns(
    pg_database: Callable[..., str],
) -> None:
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
        for wid, raw in ROWS:
            conn.execute(INSERT.format(p="%s", false="FALSE"), (wid, raw))
    store = PostgresStore(dsn, min_size=1, max_size=1)
    await store.open()
    try:
        for wid, want in EXPECTED.items():
            row = await store.get_workflow(wid)
            assert row is not None and row.cancel == want, wid
            assert (row.fence, row.total_attempts, row.parked) == (0, 0, None)
    finally:
        await store.close()
