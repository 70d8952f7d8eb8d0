"""The application's own SQL on a store's connection, for the tests of transactional steps
(the application's tables live in the store's database): one helper for both stores."""

from __future__ import annotations

from typing import Any

from statewright.store import SQLiteStore, Store
from statewright.store.postgres import PostgresStore


async def execute(store: Store, sql: str) -> None:
    """Run ``sql`` (DDL or a write) on the store's own connection, committed."""
    if isinstance(store, SQLiteStore):
        await store.conn.write(lambda conn: conn.execute(sql))
    else:
        assert isinstance(store, PostgresStore)
        await store._rowcount(sql, {})


async def rows(store: Store, sql: str) -> list[tuple[Any, ...]]:
    """The rows of a query, as tuples in the selected columns' order."""
    if isinstance(store, SQLiteStore):
        found = await store.conn.read(lambda conn: conn.execute(sql).fetchall())
        return [tuple(r) for r in found]
    assert isinstance(store, PostgresStore)
    return [tuple(r.values()) for r in await store._all(sql, {})]
