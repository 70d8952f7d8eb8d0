"""An input no handler would ever read is refused on every store (``InputNotExpected``, naming
the state; nothing written), and only then: a state with a handler, or one from which a state
with a handler is reachable, takes it (it waits in the inbox); so does a workflow whose type
this process does not register, or registers without its handlers (a client: the workers
decide). A retry of a post taken before the workflow moved on answers with that input."""

from __future__ import annotations

from typing import Any

import pytest

from statewright import Engine, MachineBuilder, ManualClock, Worker, WorkflowType
from statewright.errors import IdempotencyKeyReused, InputNotExpected, InvalidInput
from statewright.store.protocol import FullStore as Store

T0 = 1_800_000_000.0


def machine() -> Any:
    """``review`` (a handler that reads ``note`` inputs) -> ``approval`` (no handler, a state
    with a handler after it) -> ``packing`` (a handler) -> ``shipped`` (no handler, nothing
    after it but the end) -> ``done``."""
    b = MachineBuilder("parcel")
    b.state("review", initial=True).state("approval").state("packing").state("shipped")
    b.state("done", terminal=True)
    for event, source, target in [
        ("reviewed", "review", "approval"),
        ("approved", "approval", "packing"),
        ("packed", "packing", "shipped"),
        ("delivered", "shipped", "done"),
    ]:
        b.event(event).transition(event, source, target)
    return b.build()


async def review(run: Any) -> str | None:
    return "reviewed" if await run.next_input("note") is not None else None


async def packing(run: Any) -> str | None:
    return "packed" if await run.next_input("label") is not None else None


def full_type() -> WorkflowType:
    return WorkflowType(machine(), {"review": review, "packing": packing})


@pytest.fixture
async def engine(store: Store) -> Engine:
    return Engine(store, [full_type()], clock=ManualClock(T0))


async def test_an_input_nothing_would_read_is_refused(engine: Engine, store: Store) -> None:
    worker = Worker(engine)
    await engine.start("parcel", {}, workflow_id="p1")
    await engine.post_input("p1", "note", {"ok": True})  # review reads it
    await worker.run_until_idle()
    assert (await engine.get("p1")).state == "approval"
    # No handler in approval, but packing's is ahead: the label waits for it.
    await engine.post_input("p1", "label", {"code": "L-1"}, idempotency_key="label-1")
    await engine.send("p1", "approved")
    await worker.run_until_idle()
    row = await engine.get("p1")
    assert row.state == "shipped"
    assert await store.next_input("p1") is None  # consumed by packing

    # shipped: no handler there nor after it.
    with pytest.raises(InputNotExpected) as caught:
        await engine.post_input("p1", "label", {"code": "L-2"})
    exc = caught.value
    assert isinstance(exc, InvalidInput) and exc.code == "input_not_expected"
    assert (exc.state, exc.name, exc.workflow_id) == ("shipped", "label", "p1")
    assert "state 'shipped'" in exc.message and "'label'" in exc.message
    assert await store.next_input("p1") is None  # nothing written
    assert await engine.get("p1") == row

    # The retry of the label posted in approval (its answer lost): that input, not a refusal.
    again = await engine.post_input("p1", "label", {"code": "L-1"}, idempotency_key="label-1")
    assert not again.created and again.item.payload == {"code": "L-1"}
    with pytest.raises(IdempotencyKeyReused):
        await engine.post_input("p1", "label", {"code": "L-9"}, idempotency_key="label-1")
    with pytest.raises(InputNotExpected):
        await engine.post_input("p1", "label", {"code": "L-1"}, idempotency_key="label-2")
    assert await engine.get("p1") == row


async def test_a_process_that_cannot_tell_takes_it(engine: Engine, store: Store) -> None:
    await engine.start("parcel", {}, workflow_id="p1")
    await engine.post_input("p1", "note", {})
    await Worker(engine).run_until_idle()
    await engine.send("p1", "approved")
    await engine.post_input("p1", "label", {})
    await Worker(engine).run_until_idle()
    assert (await engine.get("p1")).state == "shipped"
    # A client with the bare machine (the handlers live in the workers) ...
    client = Engine(store, [machine()], clock=ManualClock(T0))
    assert (await client.post_input("p1", "late", {"n": 1})).created
    # ... or without the type at all: accepted, as before.
    stranger = Engine(store, [], clock=ManualClock(T0))
    assert (await stranger.post_input("p1", "later", {"n": 2})).created


def test_takes_inputs_is_decided_from_the_machine() -> None:
    wtype = full_type()
    states = {s: wtype.takes_inputs(s) for s in wtype.machine.states}
    assert states == {
        "review": True,
        "approval": True,
        "packing": True,
        "shipped": False,
        "done": False,
    }
    assert WorkflowType(machine()).takes_inputs("shipped")  # no handlers known here
