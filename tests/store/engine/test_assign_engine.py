"""Transition actions in the engine, on every store: the patch lands in the row and the log
in one transaction, guards read it later, replay rebuilds it, a failing action changes nothing;
and an operator's explicit context patch is one logged transition."""

from __future__ import annotations

import pytest

from statewright import Engine, InvalidInput, MachineBuilder, ManualClock
from statewright.errors import ActionFailed, IdempotencyKeyReused, WorkflowFinished
from statewright.store.protocol import FullStore as Store
from tests.unit.test_assign import payment_machine


def engine_on(store: Store, *machines: object) -> Engine:
    return Engine(store, [payment_machine(), *machines], clock=ManualClock())  # type: ignore[list-item]


async def test_a_counter_assigned_by_an_action_is_read_by_a_guard_and_replays(
    store: Store,
) -> None:
    engine = engine_on(store)
    if True:
        await engine.start("payment", {}, workflow_id="p1")
        states = []
        for _ in range(3):
            row = (await engine.send("p1", "payment_failed")).row
            states.append((row.state, row.context["failed_attempts"]))
        assert states == [("charging", 1), ("charging", 2), ("cancelled", 3)]
        history = await engine.history("p1")
        assert [h.context_patch for h in history[1:]] == [
            {"failed_attempts": 1},
            {"failed_attempts": 2},
            {"failed_attempts": 3},
        ]
        assert (await engine.check("p1")).context == {"failed_attempts": 3}


async def test_a_failing_action_refuses_the_transition_and_changes_nothing(store: Store) -> None:
    m = (
        MachineBuilder("strict")
        .state("a", initial=True)
        .state("b", terminal=True)
        .event("go", assign={"total": "context.total + payload.amount"})
        .transition("go", "a", "b")
        .build()
    )
    engine = engine_on(store, m)
    if True:
        before = (await engine.start("strict", {"total": 1}, workflow_id="s1")).row
        with pytest.raises(ActionFailed, match="cannot add") as info:
            await engine.send("s1", "go", {"amount": "ten"})
        assert info.value.code == "action_failed"
        after = await engine.get("s1")
        assert (after.state, after.version, after.context) == ("a", before.version, {"total": 1})
        row = (await engine.send("s1", "go", {"amount": 2})).row
        assert row.context == {"total": 3}


async def test_rejected_actions_are_logged_as_rejections(store: Store) -> None:
    m = (
        MachineBuilder("strict2")
        .state("a", initial=True)
        .state("z", terminal=True)
        .event("end")
        .transition("end", "a", "z")
        .event("go", assign={"n": "payload.n + 1"})
        .transition("go", "a", "a")
        .build()
    )
    engine = engine_on(store, m)
    await engine.start("strict2", {}, workflow_id="r1")
    with pytest.raises(ActionFailed):
        await engine.send("r1", "go", {"n": "x"})
    assert [(r.event, r.code) for r in await store.rejections(0.0)] == [("go", "action_failed")]


async def test_an_operator_context_patch_is_one_logged_transition(store: Store) -> None:
    engine = engine_on(store)
    started = (await engine.start("payment", {"failed_attempts": 2}, workflow_id="c1")).row
    row = await engine.patch_context(
        "c1", {"failed_attempts": 0}, actor="alice", reason="card replaced by the customer"
    )
    assert (row.state, row.version, row.context) == (
        "charging",
        started.version + 1,
        {"failed_attempts": 0},
    )
    last = (await engine.history("c1"))[-1]
    assert (last.event, last.actor, last.from_state, last.to_state) == (
        "$patch_context",
        "alice",
        "charging",
        "charging",
    )
    assert last.payload == {"reason": "card replaced by the customer"}
    assert last.context_patch == {"failed_attempts": 0}
    # The guard reads the patched counter: two more failures are needed now.
    assert (await engine.send("c1", "payment_failed")).row.state == "charging"
    assert (await engine.check("c1")).context == {"failed_attempts": 1}
    # A keyed retry applies nothing twice.
    again = await engine.patch_context(
        "c1", {"note": "x"}, actor="alice", reason="r", idempotency_key="k1"
    )
    same = await engine.patch_context(
        "c1", {"note": "x"}, actor="alice", reason="r", idempotency_key="k1"
    )
    assert same.version == again.version
    with pytest.raises(IdempotencyKeyReused):
        await engine.patch_context(
            "c1", {"note": "y"}, actor="alice", reason="r", idempotency_key="k1"
        )


async def test_bad_context_patches_are_refused_and_change_nothing(store: Store) -> None:
    engine = engine_on(store)
    before = (await engine.start("payment", {}, workflow_id="c2")).row
    for patch, reason in (({}, "r"), ({"a": 1}, ""), ([1], "r"), ({"": 1}, "r")):
        with pytest.raises(InvalidInput):
            await engine.patch_context("c2", patch, actor="a", reason=reason)  # type: ignore[arg-type]
    assert (await engine.get("c2")).version == before.version
    await engine.send("c2", "payment_failed")
    await engine.send("c2", "payment_failed")
    await engine.send("c2", "payment_failed")
    with pytest.raises(WorkflowFinished):
        await engine.patch_context("c2", {"a": 1}, actor="a", reason="too late")
