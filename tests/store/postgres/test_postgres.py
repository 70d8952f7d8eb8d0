"""PostgreSQL-only behaviour: triggers, races between clients, SKIP LOCKED claims, wake-ups."""

from __future__ import annotations

import asyncio
import logging
import random
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any

import psycopg
import pytest

from statewright.errors import InvalidInput, VersionConflict
from statewright.store.postgres import PostgresStore
from statewright.types import CancelRequest, NewWorkflow, TransitionWrite, WorkflowRow

T0 = 1_800_000_000.0


def new(wid: str, run_at: float | None = None) -> NewWorkflow:
    return NewWorkflow(
        id=wid, type="t", machine_version=1, state="a", context={}, actor="t", at=T0, run_at=run_at
    )


def write(
    row: WorkflowRow, expected: int, event_id: str, run_at: float | None = None
) -> TransitionWrite:
    return TransitionWrite(
        workflow_id=row.id,
        expected_version=expected,
        from_state=row.state,
        to_state="a" if row.state == "b" else "b",
        event="go",
        payload={"event_id": event_id},
        actor="client",
        at=T0 + expected,
        context={"last": event_id},
        run_at=run_at,
    )


OpenStore = Callable[..., Awaitable[PostgresStore]]


@pytest.fixture
async def stores(pg_dsn: str) -> AsyncIterator[OpenStore]:
    """Opens any number of independent stores (clients) on this test's database."""
    opened: list[PostgresStore] = []

    async def open_store(**kw: Any) -> PostgresStore:
        store = PostgresStore(pg_dsn, **kw)
        await store.open()
        opened.append(store)
        return store

    yield open_store
    for store in opened:
        await store.close()


async def test_log_is_append_only(pg_dsn: str) -> None:
    store = PostgresStore(pg_dsn)
    await store.open()
    row, _ = await store.create_workflow(new("w"))
    await store.apply_transition(write(row, 1, "e1"))
    await store.close()
    with psycopg.connect(pg_dsn, autocommit=True) as raw:
        for statement in (
            "UPDATE transitions SET event = 'forged'",
            "DELETE FROM transitions",
            "TRUNCATE transitions",
        ):
            with pytest.raises(psycopg.errors.RestrictViolation, match="append-only"):
                raw.execute(statement)
        assert raw.execute("SELECT count(*) FROM transitions").fetchone() == (2,)


async def test_racing_clients_never_lose_or_double_a_transition(
    pg_dsn: str, stores: OpenStore
) -> None:
    """16 clients (own stores, own connections) send events to the same 100 workflows.

    Each client reads a workflow, thinks briefly, then sends its event planned on the version it
    read: whoever moved the workflow meanwhile makes it a loser, which gets VersionConflict and
    retries on a fresh read.
    """
    clients, workflows, events_each = 16, 100, 25
    ids = [f"w{i:03d}" for i in range(workflows)]
    first = await stores()
    for wid in ids:
        await first.create_workflow(new(wid))
    clients_stores = [first] + [await stores(min_size=1, max_size=1) for _ in range(clients - 1)]
    acked: list[tuple[str, int, str]] = []
    conflicts = 0

    async def client(n: int, store: PostgresStore) -> None:
        nonlocal conflicts
        rng = random.Random(n)
        for e in range(events_each):
            wid, event_id = rng.choice(ids), f"c{n}-e{e}"
            for _ in range(50):
                seen = await store.get_workflow(wid)
                assert seen is not None
                await asyncio.sleep(rng.random() * 0.003)  # the client decides what to send

                try:
                    after = await store.apply_transition(write(seen, seen.version, event_id))
                except VersionConflict:
                    conflicts += 1
                    continue
                acked.append((wid, after.version, event_id))
                break
            else:
                pytest.fail(f"{event_id} lost 50 races in a row")

    await asyncio.gather(*(client(n, s) for n, s in enumerate(clients_stores)))

    assert len(acked) == clients * events_each
    assert conflicts > 0, "the clients never raced: the test proves nothing"
    logged: dict[tuple[str, int], str] = {}
    for wid in ids:
        log = await first.history(wid)
        versions = [t.version for t in log]
        assert versions == list(range(1, len(log) + 1)), f"{wid}: gap or repeat in {versions}"
        row = await first.get_workflow(wid)
        assert row is not None and row.version == versions[-1]
        logged.update({(wid, t.version): t.payload["event_id"] for t in log[1:]})
    # every acknowledged event is in the log exactly once, at the version it was acknowledged
    # with, and the log holds nothing else
    assert logged == {(wid, version): event_id for wid, version, event_id in acked}
    assert max(Counter(logged.values()).values()) == 1


async def test_concurrent_claimers_never_share_a_workflow(
    stores: OpenStore,
) -> None:
    first = await stores()
    ids = {f"w{i:03d}" for i in range(200)}
    for wid in ids:
        await first.create_workflow(new(wid, run_at=T0))
    claimers = [first] + [await stores() for _ in range(3)]
    claimed: dict[str, list[str]] = {}

    async def claimer(name: str, store: PostgresStore) -> None:
        while rows := await store.claim_due(name, T0, 30, 7):
            for row in rows:
                assert row.lease_owner == name
                claimed.setdefault(row.id, []).append(name)

    await asyncio.gather(*(claimer(f"worker-{i}", s) for i, s in enumerate(claimers)))

    assert set(claimed) == ids
    assert all(len(owners) == 1 for owners in claimed.values()), "a workflow was claimed twice"
    for wid, (owner,) in claimed.items():
        row = await first.get_workflow(wid)
        assert row is not None and row.lease_owner == owner


async def _listening(store: PostgresStore) -> None:
    """Start the store's listener (the first wait opens it) and wait until it listens."""
    await store.wait_for_work(0)
    await asyncio.wait_for(store.listener.listening.wait(), 5)


@pytest.mark.alone
async def test_notify_wakes_a_worker_of_another_store_within_a_second(
    stores: OpenStore,
) -> None:
    worker, client = await stores(), await stores()
    await _listening(worker)
    loop = asyncio.get_running_loop()
    row, _ = await client.create_workflow(new("w"))

    async def woken_by(action: Callable[[], object]) -> float:
        waiter = asyncio.create_task(worker.wait_for_work(10))
        await asyncio.sleep(0)
        started = loop.time()
        await action()  # type: ignore[misc]
        await asyncio.wait_for(waiter, 5)
        return loop.time() - started

    latencies = [
        await woken_by(lambda: client.create_workflow(new("due", run_at=T0))),
        await woken_by(lambda: client.apply_transition(write(row, 1, "e1", run_at=T0))),
        await woken_by(lambda: client.post_input("w", "doc", {}, T0)),
        await woken_by(lambda: client.request_cancel("w", CancelRequest("stop"))),
    ]
    await client.claim_due("client", T0, 30, 10)
    latencies.append(await woken_by(lambda: client.break_leases("client")))
    assert max(latencies) < 1.0, latencies

    # a transition that leaves nothing due wakes nobody ("w" has a cancel request pending:
    # its transitions make it due, for a claim to deliver it)
    row2, _ = await client.create_workflow(new("quiet"))
    started = loop.time()
    waiter = asyncio.create_task(worker.wait_for_work(0.3))
    await asyncio.sleep(0)
    await client.apply_transition(write(row2, row2.version, "e2"))
    await waiter
    assert loop.time() - started >= 0.25


async def test_a_broken_listener_falls_back_to_polling_then_reconnects(
    pg_dsn: str,
    stores: OpenStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    worker, client = await stores(), await stores()
    await _listening(worker)
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        killed = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND query LIKE 'LISTEN%'"
        ).fetchall()
    assert killed == [(True,)]
    loop = asyncio.get_running_loop()
    with caplog.at_level(logging.WARNING, logger="statewright.store.postgres.listen"):
        started = loop.time()
        await worker.wait_for_work(0.3)  # the listener is gone: a plain sleep
        assert loop.time() - started >= 0.25
        assert not worker.listener.listening.is_set()
    assert [r.action for r in caplog.records] == ["listen_failed"]  # type: ignore[attr-defined]
    # the next wait reconnects; wake-ups from other stores arrive again
    await _listening(worker)
    waiter = asyncio.create_task(worker.wait_for_work(10))
    await asyncio.sleep(0)
    await client.create_workflow(new("due", run_at=T0))
    await asyncio.wait_for(waiter, 1)


async def test_json_keeps_numbers_exactly_and_refuses_nul(stores: OpenStore) -> None:
    """JSONB stores numbers as exact decimals, and no text in PostgreSQL can hold NUL."""
    store = await stores()
    context = {
        "e16": 1e16,
        "e300": 1e300,
        "min": 5e-324,
        "neg": -2.5e-7,
        "int": 10**30,
        "s": "1e5",
    }
    await store.create_workflow(replace(new("w"), context=context))
    row = await store.get_workflow("w")
    assert row is not None and row.context == context
    assert {k: type(v) for k, v in row.context.items()} == {k: type(v) for k, v in context.items()}
    with pytest.raises(InvalidInput, match="Unicode escape"):
        await store.create_workflow(replace(new("nul"), context={"s": "a\x00b"}))
    assert await store.get_workflow("nul") is None


async def test_the_log_cursor_never_skips_a_transition_that_commits_late(
    pg_dsn: str, stores: OpenStore
) -> None:
    """seq is taken before commit, so a later seq can commit first: a reader of the global log
    must not move its cursor past a transition still in flight."""
    store = await stores()
    row, _ = await store.create_workflow(new("w"))
    [start] = await store.transitions_since(0)
    async with await psycopg.AsyncConnection.connect(pg_dsn) as slow:
        # a writer that has appended (as the store does: under the shared log lock) but not
        # committed yet
        await slow.execute("SELECT pg_advisory_xact_lock_shared(hashtext('statewright.log'))")
        await slow.execute(
            "INSERT INTO transitions (workflow_id, version, to_state, event, payload, actor, at)"
            " VALUES ('slow', 1, 'a', '$start', '{}', 't', 0)"
        )
        await store.apply_transition(write(row, 1, "e1"))  # a later seq, committed first
        reader = asyncio.create_task(store.transitions_since(start.seq))
        await asyncio.sleep(0.2)
        assert not reader.done()  # it waits for the append in flight...
        await slow.commit()
    got = await asyncio.wait_for(reader, 5)
    assert [(t.workflow_id, t.version) for t in got] == [("slow", 1), ("w", 2)]  # ...gets both
    assert got[0].seq < got[1].seq
