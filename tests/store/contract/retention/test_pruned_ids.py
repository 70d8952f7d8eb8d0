"""A start retried after its workflow was pruned (issue 22, item 9), on every store: the
pruned workflow's id stays taken (a tombstone written with its delete), so the start is
refused with ``workflow_pruned`` instead of creating a new workflow that would run every step
again under the same step keys. Import gives the id back to its workflow; prune forgets
tombstones only when told to."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from statewright import Engine, ManualClock, Next, Worker, WorkflowType
from statewright.engine.core import id_for_key
from statewright.errors import WorkflowPruned
from statewright.store.postgres import PostgresStore
from statewright.store.protocol import FullStore as Store
from tests.store.contract.retention.test_retention import DAY, machine


class Gateway:
    """Counts every charge: it does not deduplicate by key."""

    def __init__(self) -> None:
        self.charges: list[str] = []

    def charge(self, key: str) -> dict[str, str]:
        self.charges.append(str(key))
        return {"charge_id": f"ch-{len(self.charges)}"}


def engine_on(store: Store, gateway: Gateway) -> Engine:
    async def run(run: Any) -> Next:
        return Next("finish", context=await run.step("charge", gateway.charge))

    return Engine(store, [WorkflowType(machine(), handlers={"running": run})], clock=ManualClock())


async def paid_and_pruned(engine: Engine, archive: Path | None = None) -> str:
    """A job started with an idempotency key, charged, finished and pruned; its id."""
    row = (await engine.start("job", {"order": 1}, idempotency_key="order-1", tenant="acme")).row
    await engine.send(row.id, "go")
    await Worker(engine).run_until_idle()
    assert (await engine.get(row.id)).state == "done"
    assert isinstance(engine.clock, ManualClock)
    engine.clock.advance(2 * DAY)
    assert (await engine.prune(DAY, archive=archive)).workflows == 1
    return row.id


async def test_a_start_retried_after_its_workflow_was_pruned_is_refused(store: Store) -> None:
    gateway = Gateway()
    engine = engine_on(store, gateway)
    wid = await paid_and_pruned(engine)
    assert wid == id_for_key("acme", "order-1")
    with pytest.raises(WorkflowPruned, match="idempotency key 'order-1'") as refused:
        await engine.start("job", {"order": 1}, idempotency_key="order-1", tenant="acme")
    assert refused.value.code == "workflow_pruned" and refused.value.workflow_id == wid
    assert await store.get_workflow(wid) is None and await store.history(wid) == []
    # The same by the id itself, whatever the type or input.
    with pytest.raises(WorkflowPruned):
        await engine.start("job", {}, workflow_id=wid, tenant="acme")
    await Worker(engine).run_until_idle()
    assert gateway.charges == [f"{wid}:charge"]  # charged once, not again
    # Other ids are untouched.
    assert (await engine.start("job", {}, workflow_id="other", tenant="acme")).row.version == 1


async def test_import_gives_the_id_back_to_its_workflow(store: Store, tmp_path: Path) -> None:
    engine = engine_on(store, Gateway())
    archive = tmp_path / "old.jsonl.gz"
    wid = await paid_and_pruned(engine, archive)
    assert (await engine.import_archive(archive)).imported == [wid]
    started = await engine.start("job", {"order": 1}, idempotency_key="order-1", tenant="acme")
    row, created = started.row, started.created
    assert (row.id, row.state, created) == (wid, "done", False)  # the retry finds it again
    # Pruned again: refused again.
    assert isinstance(engine.clock, ManualClock)
    engine.clock.advance(2 * DAY)
    assert (await engine.prune(DAY)).workflows == 1
    with pytest.raises(WorkflowPruned):
        await engine.start("job", {"order": 1}, idempotency_key="order-1", tenant="acme")


async def test_prune_forgets_pruned_ids_only_when_told(store: Store) -> None:
    gateway = Gateway()
    engine = engine_on(store, gateway)
    wid = await paid_and_pruned(engine)
    assert isinstance(engine.clock, ManualClock)
    engine.clock.advance(10 * DAY)
    assert (await engine.prune(DAY)).pruned_ids == 0  # kept unless asked
    dry = await engine.prune(DAY, pruned_ids_older_than=30 * DAY, dry_run=True)
    assert dry.pruned_ids == 0
    dry = await engine.prune(DAY, pruned_ids_older_than=5 * DAY, tenant="other", dry_run=True)
    assert dry.pruned_ids == 0
    dry = await engine.prune(DAY, pruned_ids_older_than=5 * DAY, tenant="acme", dry_run=True)
    assert dry.pruned_ids == 1
    with pytest.raises(WorkflowPruned):
        await engine.start("job", {"order": 1}, idempotency_key="order-1", tenant="acme")
    assert (await engine.prune(DAY, pruned_ids_older_than=5 * DAY)).pruned_ids == 1
    # Forgotten: the key starts a new workflow, as documented.
    row = (await engine.start("job", {"order": 1}, idempotency_key="order-1", tenant="acme")).row
    assert (row.id, row.version) == (wid, 1)


async def test_a_start_waiting_on_the_row_a_prune_deletes_is_refused(pg_dsn: str) -> None:
    """PostgreSQL: the start's insert waits on the row the prune's transaction is deleting and
    proceeds when that commits; the tombstone, committed with it, is seen by the check that
    runs after the insert (its own snapshot), so the start is refused, not created again."""
    store = PostgresStore(pg_dsn)
    await store.open()
    try:
        engine = engine_on(store, Gateway())
        wid = (await engine.start("job", {}, workflow_id="racing")).row.id
        await engine.send(wid, "go")
        await Worker(engine).run_until_idle()
        row = await engine.get(wid)
        connect = psycopg.AsyncConnection.connect
        async with await connect(pg_dsn, row_factory=dict_row) as prune:
            async with prune.transaction():
                from statewright.store.postgres.retention import delete as pg_delete

                await pg_delete(prune, [(wid, row.version)], 1.0)  # the prune, not committed
                start = asyncio.create_task(engine.start("job", {}, workflow_id=wid))
                await asyncio.sleep(0.5)
                assert not start.done(), "the start did not wait for the prune"
            # committed: the start goes on
            with pytest.raises(WorkflowPruned):
                await start
        assert await store.get_workflow(wid) is None
    finally:
        await store.close()
