"""Transactional steps through the engine (``run.transaction``), on every store: the
application's row commits with the handler's transition; a step that raises fails the
handler run (retried when transient, ``on_fatal`` when fatal) and leaves nothing behind;
what cannot be done is refused before anything is written (when registered, or for the
tables, before the transition)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from statewright import (
    Engine,
    MachineBuilder,
    ManualClock,
    Next,
    RetryPolicy,
    Run,
    SyncRun,
    Worker,
    WorkflowType,
)
from statewright.engine.hooks import Failure
from statewright.engine.transactional import check, register
from statewright.errors import (
    FatalError,
    InvalidInput,
    TransactionUnavailable,
    TransientError,
)
from statewright.store import SQLiteStore
from statewright.store.protocol import FullStore as Store
from tests.store import appsql

MACHINE = (
    MachineBuilder("order")
    .state("reserving", initial=True)
    .state("reserved", terminal=True)
    .state("failed", terminal=True)
    .event("reserved")
    .event("fatal_error")
    .transition("reserved", "reserving", "reserved")
    .transition("fatal_error", "reserving", "failed")
    .build()
)


async def _exec(store: Store, sql: str) -> None:
    await appsql.execute(store, sql)


async def _orders(store: Store) -> list[tuple[str, int]]:
    return [
        (r[0], r[1]) for r in await appsql.rows(store, "SELECT wid, qty FROM orders ORDER BY wid")
    ]


def order_row(store: Store, wid: str, qty: int, then: Callable[[], None] = lambda: None) -> Any:
    """``fn(conn)`` inserting the order (then calling ``then``), in the store's dialect."""
    if isinstance(store, SQLiteStore):

        def fn(conn: Any) -> None:
            conn.execute("INSERT INTO orders VALUES (?, ?)", (wid, qty))
            then()

        return fn

    async def afn(conn: Any) -> None:
        await conn.execute("INSERT INTO orders VALUES (%s, %s)", (wid, qty))
        then()

    return afn


class Flaky:
    """Raises ``errors`` in turn, then nothing."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)


def order_type(store: Store, then: Callable[[], None] = lambda: None) -> WorkflowType:
    async def reserve(run: Run) -> Next | None:
        charge = await run.step("price", lambda key: {"qty": run.context["qty"]})
        fn = order_row(store, run.id, charge["qty"], then)
        run.transaction("order", fn, tables=["orders"])
        if run.context.get("idle"):
            return None
        return Next("reserved", context={"done": True})

    return WorkflowType(
        MACHINE,
        handlers={"reserving": reserve},
        retry=RetryPolicy(max_attempts=3, base_delay=1.0, max_delay=1.0, jitter=0.0),
        on_transient=None,
    )


@pytest.fixture
async def app(store: Store) -> Store:
    await _exec(store, "CREATE TABLE orders (wid TEXT PRIMARY KEY, qty INTEGER NOT NULL)")
    return store


async def _run(engine: Engine, clock: ManualClock) -> None:
    for _ in range(6):
        await Worker(engine).run_until_idle()
        clock.advance(2)


async def test_the_row_commits_with_the_transition(app: Store) -> None:
    clock = ManualClock(1_800_000_000.0)
    engine = Engine(app, [order_type(app)], clock=clock)
    await engine.start("order", {"qty": 3}, workflow_id="o1")
    await _run(engine, clock)
    row = await engine.get("o1")
    assert (row.state, row.context["done"]) == ("reserved", True)
    assert await _orders(app) == [("o1", 3)]
    entry = (await app.history("o1"))[-1]
    assert (entry.event, entry.payload) == ("reserved", {"$transactions": ["order"]})
    [price] = await app.steps("o1")
    assert price.status == "done"  # the step record carried by the same transaction


async def test_a_transient_failure_is_retried_and_writes_the_row_once(app: Store) -> None:
    clock = ManualClock(1_800_000_000.0)
    flaky = Flaky(TransientError("lock timeout"), ConnectionError("the app's check failed"))
    engine = Engine(app, [order_type(app, flaky)], clock=clock)
    failures: list[Failure] = []
    engine.observers.failure.append(failures.append)
    await engine.start("order", {"qty": 2}, workflow_id="o1")
    await _run(engine, clock)
    row = await engine.get("o1")
    assert row.state == "reserved" and flaky.calls >= 3
    # Each failed attempt counts as the state's failure (statewright_failures_total).
    assert [(f.kind, f.error) for f in failures] == [("handler", "transient")] * 2
    assert await _orders(app) == [("o1", 2)]
    events = [e.event for e in await app.history("o1")]
    assert events == ["$start", "reserved"]  # the failed attempts wrote no transition
    [price] = await app.steps("o1")
    assert (price.status, price.attempts) == ("done", 1)  # the step ran once


async def test_a_fatal_failure_fires_on_fatal_and_writes_no_row(app: Store) -> None:
    clock = ManualClock(1_800_000_000.0)
    engine = Engine(app, [order_type(app, Flaky(FatalError("out of stock")))], clock=clock)
    await engine.start("order", {"qty": 1}, workflow_id="o1")
    await _run(engine, clock)
    row = await engine.get("o1")
    assert row.state == "failed" and "out of stock" in (row.last_error or "")
    assert await _orders(app) == []


async def test_an_idle_run_with_steps_fails_clearly(app: Store) -> None:
    clock = ManualClock(1_800_000_000.0)
    engine = Engine(app, [order_type(app)], clock=clock)
    await engine.start("order", {"qty": 1, "idle": True}, workflow_id="o1")
    await _run(engine, clock)
    row = await engine.get("o1")
    assert row.state == "failed"
    assert "returned no event" in (row.last_error or "")
    assert await _orders(app) == []


async def test_missing_tables_are_refused_before_the_transition(app: Store) -> None:
    async def reserve(run: Run) -> Next:
        run.transaction("order", order_row(app, run.id, 1), tables=["stock"])
        return Next("reserved")

    wtype = WorkflowType(MACHINE, handlers={"reserving": reserve}, on_transient=None)
    clock = ManualClock(1_800_000_000.0)
    engine = Engine(app, [wtype], clock=clock)
    await engine.start("order", {}, workflow_id="o1")
    await _run(engine, clock)
    row = await engine.get("o1")
    assert row.state == "failed"
    assert "['stock']" in (row.last_error or "") and "run.step" in (row.last_error or "")
    assert await _orders(app) == []


async def test_a_synchronous_handler_registers_steps(app: Store) -> None:
    fn = order_row(app, "o1", 5)

    def reserve(run: SyncRun) -> Next:
        run.transaction("order", fn, tables=("orders",))
        return Next("reserved")

    wtype = WorkflowType(MACHINE, handlers={"reserving": reserve})
    clock = ManualClock(1_800_000_000.0)
    engine = Engine(app, [wtype], clock=clock)
    await engine.start("order", {}, workflow_id="o1")
    await _run(engine, clock)
    assert (await engine.get("o1")).state == "reserved"
    assert await _orders(app) == [("o1", 5)]


async def test_registration_checks_before_anything_is_written(app: Store) -> None:
    def fn(conn: Any) -> None:
        pass

    async def afn(conn: Any) -> None:
        pass

    step = register(app, (), "a", fn, ["orders"])
    assert (step.name, step.tables) == ("a", ("orders",))
    for name, f, tables in (("", fn, ()), ("b", 3, ()), ("c", fn, ["orders; drop"])):
        with pytest.raises(InvalidInput):
            register(app, (), name, f, tables)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="already registered"):
        register(app, (step,), "a", fn, ())
    with pytest.raises(TransactionUnavailable, match="cannot run user code"):
        register(object(), (), "a", fn, ())
    if isinstance(app, SQLiteStore):
        with pytest.raises(TransactionUnavailable, match="synchronous"):
            register(app, (), "a", afn, ())
    else:
        register(app, (), "a", afn, ())
    await check(app, (step,))  # its tables are the store's
    with pytest.raises(TransactionUnavailable, match="stock"):
        await check(app, (register(app, (), "s", fn, ["stock"]),))
    await asyncio.sleep(0)
