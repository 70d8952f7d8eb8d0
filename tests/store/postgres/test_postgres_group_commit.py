"""Group commit on PostgreSQL: concurrent transitions of one store share a transaction, and each
writer still gets exactly its own answer (statewright.store.postgres.batch).

A batch forms when writes arrive while the store's slots are busy: the tests below take the
slot with one write (``in_flight = 1``) and issue the batch's writes in the same turn of the
event loop, so they queue together and go out as one transaction.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from dataclasses import replace
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from statewright import Engine, MachineBuilder
from statewright.errors import (
    IdempotencyKeyReused,
    LeaseLost,
    OutcomeUnknown,
    StoreError,
    VersionConflict,
)
from statewright.store.postgres import PostgresStore
from statewright.types import CancelRequest, StepOpening, TimerSpec, WorkflowRow
from tests.store.postgres.test_postgres import T0, OpenStore, new, stores, write
from tests.store.postgres.test_postgres_outcome_unknown import CutAfterCommit

__all__ = ["stores"]  # the fixture, shared with test_postgres

PINGPONG = (
    MachineBuilder("t")
    .state("a", initial=True)
    .state("b")
    .state("end", terminal=True)
    .event("go")
    .event("stop")
    .transition("go", "a", "b")
    .transition("go", "b", "a")
    .transition("stop", ["a", "b"], "end")
    .build()
)


async def batch_of(store: PostgresStore, *writes: Awaitable[Any]) -> list[Any]:
    """Run ``writes`` as one batch: a write on a workflow of its own takes the only slot
    first, the others queue behind it in the same turn of the event loop."""
    store.batcher.in_flight = 1
    blocker, _ = await store.create_workflow(new(f"blocker-{store.batcher.commits}"))
    sent = store.batcher.batches_sent
    results = await asyncio.gather(
        store.apply_transition(write(blocker, 1, "block")), *writes, return_exceptions=True
    )
    assert store.batcher.batches_sent > sent, "the writes did not share a transaction"
    return results[1:]


async def versions(store: PostgresStore, wid: str) -> list[int]:
    return [t.version for t in await store.history(wid)]


async def test_concurrent_sends_share_commits_and_all_apply(pg_dsn: str) -> None:
    store = PostgresStore(pg_dsn, max_size=4)
    async with Engine(store, [PINGPONG]) as engine:
        ids = [f"w{i}" for i in range(16)]
        for wid in ids:
            await engine.start("t", workflow_id=wid)
        commits, writes = store.batcher.commits, store.batcher.batched_writes

        async def client(wid: str) -> None:
            for n in range(10):
                await engine.send(wid, "go", {"n": n})

        await asyncio.gather(*(client(wid) for wid in ids))
        commits = store.batcher.commits - commits
        writes = store.batcher.batched_writes - writes
        assert writes == 160
        assert commits < writes / 2, (commits, writes)
        assert store.batcher.batches > 0 and store.batcher.largest > 2
        for wid in ids:
            assert await versions(store, wid) == list(range(1, 12))
            assert (await engine.get(wid)).state == "a"
            await engine.check(wid)


async def test_each_writer_of_a_batch_gets_its_own_answer(stores: OpenStore) -> None:
    store = await stores(max_size=4)
    rows: dict[str, WorkflowRow] = {}
    for wid in ("ok1", "ok2", "stale", "keyed", "ok3"):
        rows[wid], _ = await store.create_workflow(new(wid))
    rows["fenced"], _ = await store.create_workflow(new("fenced", run_at=T0))
    rows["keyed"] = await store.apply_transition(
        replace(write(rows["keyed"], 1, "first"), idempotency_key="k")
    )
    [claimed] = await store.claim_due("worker-1", T0, 30, 10)
    assert claimed.id == "fenced" and claimed.lease is not None
    stolen = await store.take_over("fenced", "worker-1", "worker-2", T0 + 60)
    assert stolen is not None and stolen.fence != claimed.fence

    results = await batch_of(
        store,
        store.apply_transition(write(rows["ok1"], 1, "ok1")),
        store.apply_transition(write(rows["stale"], 7, "stale")),  # the row is at version 1
        store.apply_transition(
            replace(write(rows["keyed"], 2, "again"), idempotency_key="k")  # used at version 2
        ),
        store.apply_transition(replace(write(claimed, 1, "fenced"), lease=claimed.lease)),
        store.apply_transition(write(rows["ok2"], 1, "ok2")),
        store.apply_transition(
            replace(write(rows["ok3"], 1, "ok3"), idempotency_key="fresh", run_at=T0 + 5)
        ),
    )
    ok1, stale, keyed, fenced, ok2, ok3 = results
    assert isinstance(ok1, WorkflowRow) and (ok1.version, ok1.context) == (2, {"last": "ok1"})
    assert isinstance(ok2, WorkflowRow) and ok2.version == 2
    assert isinstance(ok3, WorkflowRow) and (ok3.version, ok3.next_due_at) == (2, T0 + 5)
    assert isinstance(stale, VersionConflict)
    assert (stale.expected, stale.actual) == (7, 1)
    assert isinstance(keyed, IdempotencyKeyReused) and keyed.key == "k"
    assert isinstance(fenced, LeaseLost) and fenced.workflow_id == "fenced"
    # The refused ones changed nothing; the others are in the log once.
    assert await versions(store, "ok1") == await versions(store, "ok2") == [1, 2]
    assert await versions(store, "ok3") == [1, 2]
    assert await versions(store, "stale") == [1]
    assert await versions(store, "keyed") == [1, 2]
    assert await versions(store, "fenced") == [1]
    assert (await store.transition_by_key("ok3", "fresh")) is not None


async def test_two_writes_of_one_workflow_in_one_batch_see_each_other(
    stores: OpenStore,
) -> None:
    store = await stores(max_size=4)
    same, _ = await store.create_workflow(new("same"))
    chained, _ = await store.create_workflow(new("chained"))
    after_first = replace(chained, state="b", version=2)
    results = await batch_of(
        store,
        # Both planned on version 1: the first applies, the second is told it is stale.
        store.apply_transition(write(same, 1, "first")),
        store.apply_transition(write(same, 1, "second")),
        # The second planned on the first's result: both apply, in order.
        store.apply_transition(write(chained, 1, "one")),
        store.apply_transition(write(after_first, 2, "two")),
    )
    first, second, one, two = results
    assert isinstance(first, WorkflowRow) and first.context == {"last": "first"}
    assert isinstance(second, VersionConflict) and (second.expected, second.actual) == (1, 2)
    assert isinstance(one, WorkflowRow) and one.version == 2
    assert isinstance(two, WorkflowRow) and (two.version, two.state) == (3, "a")
    assert store.batcher.largest == 4
    assert await versions(store, "same") == [1, 2]
    assert [t.payload for t in await store.history("chained")][1:] == [
        {"event_id": "one"},
        {"event_id": "two"},
    ]


async def test_timer_changing_writes_pass_the_snapshot_check_inside_a_batch(
    stores: OpenStore,
) -> None:
    """Writes that change timers also require the row version their statement's snapshot saw
    (xmin); inside a batch a row the same transaction updated before still passes it."""
    store = await stores(max_size=4)
    row, _ = await store.create_workflow(new("timed"))
    other, _ = await store.create_workflow(new("other"))
    armed = TimerSpec(T0 + 60, "go", key="later")
    results = await batch_of(
        store,
        store.apply_transition(replace(write(row, 1, "arm"), add_timers=(armed,))),
        store.apply_transition(
            replace(write(replace(row, state="b", version=2), 2, "leave"), clear_timers=True)
        ),
        store.apply_transition(write(other, 1, "other")),
    )
    assert all(isinstance(r, WorkflowRow) for r in results), results
    assert await versions(store, "timed") == [1, 2, 3]
    assert await store.timers("timed") == []


class CutAfterBatchCommit(CutAfterCommit):
    """Cuts the connection that sends a batch (BEGIN ... COMMIT in one pipeline) right after
    the server answered its COMMIT; lone writes (no BEGIN) pass."""

    MARKER = b"BEGIN"


@pytest.fixture
async def batch_proxy(pg_dsn: str) -> AsyncIterator[tuple[CutAfterBatchCommit, str]]:
    cut = CutAfterBatchCommit(pg_dsn)
    port = await cut.start()
    info = {k: v for k, v in conninfo_to_dict(pg_dsn).items() if v is not None}
    info.update(host="127.0.0.1", port=str(port), sslmode="disable")
    yield cut, " ".join(f"{k}={v}" for k, v in info.items())
    await cut.close()


async def test_a_batch_whose_commit_answer_is_lost_is_outcome_unknown_for_every_writer(
    batch_proxy: tuple[CutAfterBatchCommit, str], pg_dsn: str
) -> None:
    cut, proxied = batch_proxy
    # Statements are sent as text every time (no server-side prepare), so the proxy sees them.
    store = PostgresStore(proxied, connect_kwargs={"prepare_threshold": None}, max_size=4)
    direct = Engine(PostgresStore(pg_dsn), [PINGPONG])
    async with Engine(store, [PINGPONG]) as engine, direct:
        ids = [f"c{i}" for i in range(4)]
        for wid in ids:
            await engine.start("t", workflow_id=wid)
        rows = [await store.get_workflow(wid) for wid in ids]
        cut.armed = True
        results = await batch_of(
            store,
            *(
                store.apply_transition(
                    replace(write(row, 1, f"e-{row.id}"), idempotency_key=f"key-{row.id}")
                )
                for row in rows
                if row is not None
            ),
        )
        assert cut.cuts == 1
        assert all(isinstance(r, OutcomeUnknown) for r in results), results
        assert all(isinstance(r, StoreError) and "may or may not" in r.message for r in results)
        # It did commit, every write of it.
        for wid in ids:
            assert [t.version for t in await direct.history(wid)] == [1, 2]

        # Each client retries with its key (the pool reconnects): applied once, in all.
        sent = await asyncio.gather(
            *(
                engine.send(wid, "go", {"event_id": f"e-{wid}"}, idempotency_key=f"key-{wid}")
                for wid in ids
            )
        )
        assert [(s.replayed, s.applied_version) for s in sent] == [(True, 2)] * 4
        for wid in ids:
            assert [t.version for t in await direct.history(wid)] == [1, 2]


async def test_a_batch_cut_before_its_commit_is_sent_is_a_store_error(
    stores: OpenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection breaks while the batch is still being sent, before its COMMIT: nothing
    can have committed, so the writers get StoreError, not OutcomeUnknown."""
    store = await stores(max_size=4)
    rows = [(await store.create_workflow(new(f"x{i}")))[0] for i in range(3)]
    real_execute = psycopg.AsyncConnection.execute
    calls = 0

    async def breaking_execute(self: Any, query: Any, *args: Any, **kw: Any) -> Any:
        nonlocal calls
        if self._pipeline is not None:
            calls += 1
            if calls == 3:  # BEGIN, the first write, then the connection "breaks"
                raise psycopg.OperationalError("server closed the connection unexpectedly")
        return await real_execute(self, query, *args, **kw)

    monkeypatch.setattr(psycopg.AsyncConnection, "execute", breaking_execute)
    results = await batch_of(store, *(store.apply_transition(write(r, 1, "x")) for r in rows))
    monkeypatch.undo()
    assert all(type(r) is StoreError for r in results), results
    for r in rows:
        assert await versions(store, r.id) == [1]


async def test_a_batch_chosen_as_deadlock_victim_runs_again_and_applies(
    pg_dsn: str, stores: OpenStore
) -> None:
    """Another transaction holds w2 and then waits for w1, which the batch locked before it
    waited for w2: PostgreSQL aborts the batch (its deadlock check fires first). Nothing of it
    committed; it is sent again and applies once the other transaction ends."""
    store = await stores(max_size=4, connect_kwargs={"options": "-c deadlock_timeout=300ms"})
    w1, _ = await store.create_workflow(new("w1"))
    w2, _ = await store.create_workflow(new("w2"))
    other = await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True)
    try:
        await other.execute("SET deadlock_timeout = '20s'")
        await other.execute("BEGIN")
        await other.execute("SELECT 1 FROM workflows WHERE id = 'w2' FOR UPDATE")

        async def lock_w1_later() -> None:
            await asyncio.sleep(0.1)  # the batch holds w1 and waits for w2 by now
            await other.execute("SELECT 1 FROM workflows WHERE id = 'w1' FOR UPDATE")
            await other.execute("ROLLBACK")

        results, _ = await asyncio.gather(
            batch_of(
                store,
                store.apply_transition(write(w1, 1, "one")),
                store.apply_transition(write(w2, 1, "two")),
            ),
            lock_w1_later(),
        )
    finally:
        await other.close()
    assert store.batcher.deadlocks >= 1
    assert all(isinstance(r, WorkflowRow) and r.version == 2 for r in results), results
    assert await versions(store, "w1") == await versions(store, "w2") == [1, 2]


async def test_step_starts_share_a_batch_with_transitions_and_each_gets_its_answer(
    stores: OpenStore,
) -> None:
    """A step's *executing* record (``step_open``) rides in the transitions' batches: one
    commit for all, and every caller gets what it would have got alone (begun, the record it
    found, the pending cancel request, a lost lease)."""
    store = await stores(max_size=4)
    rows: dict[str, WorkflowRow] = {}
    for wid in ("fresh", "known", "cancelled", "moved"):
        rows[wid], _ = await store.create_workflow(new(wid, run_at=T0))
    rows["stolen"], _ = await store.create_workflow(new("stolen", run_at=T0))
    claimed = {r.id: r for r in await store.claim_due("worker-1", T0, 30, 10)}
    leases = {wid: row.lease for wid, row in claimed.items()}
    assert set(leases) == set(rows)
    known = await store.step_open("known:a:pay", "known", "pay", T0, leases["known"])
    assert known.begun
    await store.request_cancel("cancelled", CancelRequest("stop", "ops", T0, 1))
    await store.take_over("stolen", "worker-1", "worker-2", T0 + 60)
    commits, writes = store.batcher.commits, store.batcher.batched_writes

    fresh, again, cancelled, moved, stolen = await batch_of(
        store,
        store.step_open("fresh:a:pay", "fresh", "pay", T0, leases["fresh"]),
        store.step_open("known:a:pay", "known", "pay", T0, leases["known"]),
        store.step_open("cancelled:a:pay", "cancelled", "pay", T0, leases["cancelled"]),
        store.apply_transition(replace(write(claimed["moved"], 1, "m"), lease=leases["moved"])),
        store.step_open("stolen:a:pay", "stolen", "pay", T0, leases["stolen"]),
    )
    # The blocker went alone; the five went together, in one commit.
    assert store.batcher.commits - commits == 2
    assert store.batcher.batched_writes - writes == 6
    assert store.batcher.largest >= 5
    assert isinstance(fresh, StepOpening) and fresh.begun and fresh.cancel is None
    assert fresh.record is not None and fresh.record.status == "executing"
    assert isinstance(again, StepOpening) and not again.begun
    assert again.record is not None and again.record.attempts == 1
    assert isinstance(cancelled, StepOpening) and not cancelled.begun
    assert cancelled.cancel is not None and cancelled.cancel.reason == "stop"
    assert isinstance(moved, WorkflowRow) and moved.version == 2
    assert isinstance(stolen, LeaseLost) and stolen.workflow_id == "stolen"
    # Only the fresh step was recorded; the others wrote nothing.
    assert (await store.get_step("fresh:a:pay")) is not None
    assert (await store.get_step("cancelled:a:pay")) is None
    assert (await store.get_step("stolen:a:pay")) is None


async def test_a_transition_that_keeps_its_lease_wakes_no_worker(
    pg_dsn: str, stores: OpenStore
) -> None:
    """NOTIFY only for a due row no worker holds: a handler chaining under its lease to the
    next state's handler cannot be claimed by anyone, so waking every worker of every process
    for it (each then runs a claim and a cancel check) is load for nothing."""
    store = await stores(max_size=2)
    listener = await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True)
    try:
        await listener.execute("LISTEN statewright_work")

        async def notified() -> int:
            await listener.execute("SELECT 1")  # delivered notifications arrive with it
            return len([n async for n in listener.notifies(timeout=0.2)])

        for wid in ("kept", "released"):
            await store.create_workflow(new(wid, run_at=T0))
        await notified()
        claimed = {r.id: r for r in await store.claim_due("worker-1", T0, 30, 10)}
        kept = replace(
            write(claimed["kept"], 1, "k", run_at=T0),
            lease=claimed["kept"].lease,
            release_lease=False,
        )
        after = await store.apply_transition(kept)
        assert after.lease_owner == "worker-1" and after.next_due_at == T0
        assert await notified() == 0
        released = replace(
            write(claimed["released"], 1, "r", run_at=T0), lease=claimed["released"].lease
        )
        after = await store.apply_transition(released)
        assert after.lease_owner is None and after.next_due_at == T0
        assert await notified() == 1
    finally:
        await listener.close()
