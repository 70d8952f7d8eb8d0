"""Transactional steps in the store (``TransitionWrite.effects``), on SQLite and PostgreSQL:
the application's rows and the transition commit together or not at all, inside group
commit (a failing step rolls back its own write only), behind the lease fence; tables
outside the store's database are refused."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from statewright.errors import (
    LeaseLost,
    TransactionFailed,
    TransactionUnavailable,
    VersionConflict,
)
from statewright.store import SQLiteStore
from statewright.store.postgres import PostgresStore
from statewright.store.protocol import FullStore as Store
from statewright.store.transactional import TransactionalStore
from statewright.types import Lease, ParentLink, TimerSpec, TransactionalStep
from tests.store import appsql
from tests.store.contract.writes import T0, move, new


async def _exec(store: Store, sql: str) -> None:
    await appsql.execute(store, sql)


async def _app_rows(store: Store) -> list[tuple[str, int]]:
    return [
        (r[0], r[1])
        for r in await appsql.rows(store, "SELECT wid, n FROM app_rows ORDER BY wid, n")
    ]


@pytest.fixture
async def app(store: Store) -> Store:
    await _exec(store, "CREATE TABLE app_rows (wid TEXT NOT NULL, n INTEGER NOT NULL)")
    return store


def insert(
    store: Store,
    wid: str,
    n: int,
    *,
    fail: bool = False,
    calls: list[str] | None = None,
    slow: float = 0.0,
    column: str = "n",
) -> TransactionalStep:
    """A step inserting ``(wid, n)`` into ``app_rows`` (then raising, with ``fail``; a
    ``column`` that does not exist makes its statement fail)."""

    def after() -> None:
        if calls is not None:
            calls.append(wid)
        if fail:
            raise ValueError(f"no stock for {wid}")

    fn: Callable[[Any], Any]
    if isinstance(store, SQLiteStore):

        def fn(conn: Any) -> None:
            conn.execute(f"INSERT INTO app_rows (wid, {column}) VALUES (?, ?)", (wid, n))
            time.sleep(slow)
            after()

    else:

        async def fn(conn: Any) -> None:
            await conn.execute(f"INSERT INTO app_rows (wid, {column}) VALUES (%s, %s)", (wid, n))
            await asyncio.sleep(slow)
            after()

    return TransactionalStep(f"insert-{wid}", fn, ("app_rows",))


async def test_the_store_offers_transactional_steps(store: Store) -> None:
    assert isinstance(store, TransactionalStore)


async def test_rows_commit_with_the_transition(app: Store) -> None:
    await app.create_workflow(new())
    step = insert(app, "w1", 7)
    row = await app.apply_transition(move("w1", 1, effects=(step, insert(app, "w1", 8))))
    assert (row.state, row.version) == ("b", 2)
    log = await app.history("w1")
    assert [e.version for e in log] == [1, 2]
    assert log[1].payload == {"p": 1, "$transactions": ["insert-w1", "insert-w1"]}
    assert await _app_rows(app) == [("w1", 7), ("w1", 8)]


async def test_a_raising_step_rolls_back_the_whole_write(app: Store) -> None:
    await app.create_workflow(new())
    timer = TimerSpec(event="tick", due_at=T0 + 50, key="k")
    write = move(
        "w1",
        1,
        add_timers=(timer,),
        effects=(insert(app, "w1", 1), insert(app, "w1", 2, fail=True)),
    )
    with pytest.raises(TransactionFailed) as info:
        await app.apply_transition(write)
    assert info.value.step == "insert-w1"
    assert isinstance(info.value.error, ValueError)
    row = await app.get_workflow("w1")
    assert row is not None and (row.state, row.version) == ("a", 1)
    assert len(await app.history("w1")) == 1
    assert await app.timers("w1") == []
    assert await _app_rows(app) == []
    # The same write without the failing step then applies.
    await app.apply_transition(move("w1", 1, effects=(insert(app, "w1", 1),)))
    assert await _app_rows(app) == [("w1", 1)]


async def test_a_raising_step_fails_only_its_own_write_in_a_group_commit(app: Store) -> None:
    ids = [f"w{i}" for i in range(6)]
    for wid in ids:
        await app.create_workflow(new(wid))
    if isinstance(app, PostgresStore):
        app.batcher.in_flight = 1  # the first write goes alone, the others queue behind it
    before = _batches(app)
    writes = [
        # The first holds the store's writes a moment, so that the others form one batch.
        move("w0", 1, effects=(insert(app, "w0", 0, slow=0.2),)),
        move("w1", 1),  # a plain write in the same batch
        move("w2", 1, effects=(insert(app, "w2", 2),)),
        move("w3", 1, effects=(insert(app, "w3", 3, fail=True),)),
        move("w4", 1, effects=(insert(app, "w4", 4),)),
        move("w5", 1, effects=(insert(app, "w5", 5, column="missing"),)),  # its SQL fails
    ]
    tasks = []
    for write in writes:
        tasks.append(asyncio.create_task(app.apply_transition(write)))
        await asyncio.sleep(0.01)  # in this order
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert _batches(app) > before, "the writes after the first shared a transaction"
    assert isinstance(results[3], TransactionFailed)
    assert isinstance(results[5], TransactionFailed)
    assert all(not isinstance(r, BaseException) for r in results[:3] + results[4:5])
    assert await _app_rows(app) == [("w0", 0), ("w2", 2), ("w4", 4)]
    for wid in ids:
        row = await app.get_workflow(wid)
        assert row is not None
        assert row.version == (1 if wid in ("w3", "w5") else 2), wid


def _batches(store: Store) -> int:
    """Transactions that carried more than one write (SQLite: batches run again in
    savepoints after one of their writes failed)."""
    if isinstance(store, SQLiteStore):
        return store.conn.retried_batches
    assert isinstance(store, PostgresStore)
    return store.batcher.batches


async def test_a_stale_version_never_calls_the_step(app: Store) -> None:
    await app.create_workflow(new())
    await app.apply_transition(move("w1", 1))
    calls: list[str] = []
    with pytest.raises(VersionConflict):
        await app.apply_transition(
            move("w1", 1, to="c", effects=(insert(app, "w1", 1, calls=calls),))
        )
    assert calls == []
    assert await _app_rows(app) == []
    assert len(await app.history("w1")) == 2


async def test_a_lost_lease_never_calls_the_step(app: Store) -> None:
    await app.create_workflow(new(run_at=T0))
    [claimed] = await app.claim_due("worker-1", T0, 30, 10)
    assert claimed.lease is not None
    calls: list[str] = []
    stale = Lease("worker-0", claimed.lease.fence - 1)
    for lease in (stale, Lease("worker-2", claimed.lease.fence)):
        with pytest.raises(LeaseLost):
            await app.apply_transition(
                move("w1", 1, lease=lease, effects=(insert(app, "w1", 1, calls=calls),))
            )
    assert calls == []
    assert await _app_rows(app) == []
    row = await app.apply_transition(
        move("w1", 1, lease=claimed.lease, effects=(insert(app, "w1", 1, calls=calls),))
    )
    assert row.version == 2 and calls == ["w1"]
    assert await _app_rows(app) == [("w1", 1)]


async def test_tables_outside_the_store_database_are_refused(app: Store) -> None:
    assert isinstance(app, TransactionalStore)
    await app.check_tables(["app_rows"])
    await app.check_tables(["app_rows"])  # cached
    for tables in (["no_such_table"], ["app_rows", "elsewhere.app_rows"]):
        with pytest.raises(TransactionUnavailable) as info:
            await app.check_tables(tables)
        assert "run.step" in info.value.message
        assert info.value.details["tables"] == [t for t in tables if t != "app_rows"]


async def test_a_table_created_later_is_accepted_then(app: Store) -> None:
    assert isinstance(app, TransactionalStore)
    with pytest.raises(TransactionUnavailable):
        await app.check_tables(["later_rows"])
    await _exec(app, "CREATE TABLE later_rows (n INTEGER)")
    await app.check_tables(["later_rows"])


async def test_a_child_s_end_with_steps_commits_rows_and_notice_together(app: Store) -> None:
    """A terminal transition that notifies its parent (PostgreSQL runs it alone, in its own
    transaction) carries transactional steps too: all of it, or none of it."""
    await app.create_workflow(new("p"))
    await app.create_workflow(new("p.k1", parent=ParentLink("p", "k1")))
    payload = {"child": "p.k1", "key": "k1", "state": "done", "result": None}
    notice = TimerSpec(T0 + 5, "child_done", payload, key="child:k1", keep=True)
    failing = move(
        "p.k1",
        1,
        "done",
        terminal=True,
        notice=notice,
        effects=(insert(app, "p.k1", 1, fail=True),),
    )
    with pytest.raises(TransactionFailed):
        await app.apply_transition(failing)
    assert await app.timers("p") == [] and await _app_rows(app) == []
    child = await app.get_workflow("p.k1")
    assert child is not None and not child.terminal
    write = move(
        "p.k1", 1, "done", terminal=True, notice=notice, effects=(insert(app, "p.k1", 1),)
    )
    after = await app.apply_transition(write)
    assert after.terminal
    assert [t.key for t in await app.timers("p")] == ["child:k1"]
    assert await _app_rows(app) == [("p.k1", 1)]
