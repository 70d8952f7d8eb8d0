"""Transactional steps, what is PostgreSQL's own: which relations qualify as the store's
tables, and a step that swallows an error of its own statement (the transaction is then
aborted: its write fails, alone or in a batch, and reports it)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from statewright.errors import FatalError, TransactionFailed, TransactionUnavailable
from statewright.store.postgres import PostgresStore
from statewright.types import TransactionalStep
from tests.store.contract.writes import move, new


@pytest.fixture
async def store(pg_dsn: str) -> AsyncIterator[PostgresStore]:
    s = PostgresStore(pg_dsn)
    await s.open()
    for sql in (
        "CREATE TABLE app_rows (wid TEXT NOT NULL, n INTEGER NOT NULL)",
        "CREATE SCHEMA shop",
        "CREATE TABLE shop.items (n INTEGER)",
        "CREATE VIEW app_view AS SELECT * FROM app_rows",
    ):
        await s._rowcount(sql, {})
    yield s
    await s.close()


async def test_tables_views_and_schemas(store: PostgresStore) -> None:
    await store.check_tables(["app_rows", "shop.items", "public.app_rows"])
    for tables in (["app_view"], ["items"], ["shop.app_rows"]):  # items: not on search_path
        with pytest.raises(TransactionUnavailable):
            await store.check_tables(tables)


async def _swallowing(conn: Any) -> None:
    try:
        await conn.execute("INSERT INTO app_rows (wid, missing) VALUES ('x', 1)")
    except Exception:
        pass  # the transaction is aborted all the same


async def _insert(conn: Any) -> None:
    await conn.execute("INSERT INTO app_rows VALUES ('ok', 1)")


async def _slow(conn: Any) -> None:
    await asyncio.sleep(0.2)


async def _count(store: PostgresStore) -> int:
    row = await store._one("SELECT count(*) AS n FROM app_rows", {})
    assert row is not None
    return int(row["n"])


async def test_a_step_swallowing_its_error_fails_its_write_alone(store: PostgresStore) -> None:
    await store.create_workflow(new("w1"))
    step = TransactionalStep("swallow", _swallowing, ("app_rows",))
    with pytest.raises(TransactionFailed, match="aborted the transaction") as info:
        await store.apply_transition(move("w1", 1, effects=(step,)))
    assert isinstance(info.value.error, FatalError)
    row = await store.get_workflow("w1")
    assert row is not None and row.version == 1
    assert await _count(store) == 0


async def test_a_step_swallowing_its_error_fails_its_write_in_a_batch(
    store: PostgresStore,
) -> None:
    for wid in ("w0", "w1", "w2"):
        await store.create_workflow(new(wid))
    store.batcher.in_flight = 1
    batches = store.batcher.batches
    writes = [
        move("w0", 1, effects=(TransactionalStep("slow", _slow),)),
        move("w1", 1, effects=(TransactionalStep("swallow", _swallowing),)),
        move("w2", 1, effects=(TransactionalStep("insert", _insert),)),
    ]
    tasks = []
    for write in writes:
        tasks.append(asyncio.create_task(store.apply_transition(write)))
        await asyncio.sleep(0.01)
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert store.batcher.batches > batches
    assert isinstance(results[1], TransactionFailed), results
    assert not isinstance(results[0], BaseException) and not isinstance(results[2], BaseException)
    versions = [(await store.get_workflow(w)).version for w in ("w0", "w1", "w2")]  # type: ignore[union-attr]
    assert versions == [2, 1, 2]
    assert await _count(store) == 1
