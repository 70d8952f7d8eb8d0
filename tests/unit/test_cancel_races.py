"""A cancel whose request lands just after the worker let go of the workflow (found by the
children's SIGKILL suite, where an ended parent cancels its children while they move on):

- with an idempotency key, the request must not wait for good on a row no worker will claim
  (a state without a handler): the cancel fires it itself;
- when a worker claims the row and delivers that request before the cancel looks again, the
  cancel succeeded: it must not raise IllegalTransition on the finished workflow."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from statewright import Engine, MachineBuilder, Next, SQLiteStore, Worker, WorkflowType
from statewright.types import CancelRequest, WorkflowRow


def kid() -> WorkflowType:
    b = MachineBuilder("kid")
    b.state("shipping", initial=True).state("waiting").state("cancelled", terminal=True)
    b.event("wait").event("cancel")
    b.transition("wait", "shipping", "waiting")
    b.transition("cancel", ["shipping", "waiting"], "cancelled")
    return WorkflowType(b.build(), handlers={"shipping": lambda run: Next("wait")})


async def claimed(engine: Engine, wid: str) -> WorkflowRow:
    await engine.start("kid", {}, workflow_id=wid)
    [row] = await engine.store.claim_due("host:1:w", engine.clock.now(), 30, 1)
    assert row.lease is not None
    return row


@pytest.mark.parametrize("key", ["key-1", None])
async def test_a_request_on_a_row_just_let_go_is_fired_not_stranded(
    key: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with Engine(SQLiteStore(":memory:"), [kid()]) as engine:
        row = await claimed(engine, "k1")
        store = engine.store
        original = store.request_cancel

        async def let_go_first(wid: str, request: CancelRequest) -> WorkflowRow:
            monkeypatch.setattr(store, "request_cancel", original)
            assert row.lease is not None
            await store.release_lease(wid, row.lease)  # the worker moves on, lets go
            await engine.send(wid, "wait", {})  # into a state no worker runs
            return await original(wid, request)

        monkeypatch.setattr(store, "request_cancel", let_go_first)
        done = await engine.cancel("k1", reason="stop", idempotency_key=key)
        after = await engine.get("k1")
        assert after.state == "cancelled" and done.row.state == "cancelled"
        assert not done.replayed
        again = await engine.cancel("k1", reason="stop", idempotency_key=key) if key else None
        assert again is None or again.replayed


async def test_a_request_delivered_by_a_worker_meanwhile_is_this_cancel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    b = MachineBuilder("par")
    b.state("fanning", initial=True).state("called_off", terminal=True)
    b.event("cancel").transition("cancel", "fanning", "called_off")
    wtype = WorkflowType(b.build(), handlers={"fanning": lambda run: None})
    async with Engine(SQLiteStore(":memory:"), [wtype]) as engine:
        await engine.start("par", {}, workflow_id="p1")
        [row] = await engine.store.claim_due("host:1:w", engine.clock.now(), 30, 1)
        store = engine.store
        original = store.request_cancel

        async def delivered_meanwhile(wid: str, request: CancelRequest) -> Any:
            monkeypatch.setattr(store, "request_cancel", original)
            assert row.lease is not None
            await store.release_lease(wid, row.lease)  # the worker let go just before
            requested = await original(wid, request)
            worker = Worker(engine, concurrency=1)  # ...and one delivers it at once
            await worker.run_until_idle()
            assert (await engine.get(wid)).terminal
            return requested

        monkeypatch.setattr(store, "request_cancel", delivered_meanwhile)
        done = await engine.cancel("p1", reason="stop")  # raised IllegalTransition before
        assert done.row.state == "called_off" and not done.replayed
        [*_, last] = await engine.history("p1")
        assert (last.event, last.payload, last.version) == (
            "cancel",
            {"reason": "stop"},
            done.applied_version,
        )
        await asyncio.sleep(0)
