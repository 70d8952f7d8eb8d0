"""Operator actions on every store: each is one transition in the log with its actor and
reason, and replay understands it (issue 14, item 3)."""

from __future__ import annotations

import pytest

from statewright import (
    Engine,
    InvalidInput,
    Machine,
    MachineBuilder,
    ManualClock,
    Next,
    WorkflowFinished,
    WorkflowType,
)
from statewright.store import Store


def machine() -> Machine:
    return (
        MachineBuilder("job")
        .state("queued", initial=True)
        .state("running", after={600: "timeout"})
        .state("done", terminal=True)
        .state("failed", terminal=True)
        .event("go")
        .event("finish")
        .event("timeout")
        .transition("go", "queued", "running")
        .transition("finish", "running", "done")
        .transition("timeout", "running", "failed")
        .build()
    )


def engine_on(store: Store) -> Engine:
    async def run(run: object) -> Next:
        return Next("finish")

    return Engine(store, [WorkflowType(machine(), handlers={"running": run})], clock=ManualClock())


async def test_move_to_enters_the_state_like_a_transition_and_is_logged(store: Store) -> None:
    engine = engine_on(store)
    await engine.start("job", {}, workflow_id="j1")
    row = await engine.move_to("j1", "running", actor="root", reason="skip the queue")
    assert row.state == "running"
    assert row.next_due_at == engine.clock.now()  # the handler is due
    assert [t.event for t in await engine.timers("j1")] == ["timeout"]  # its timers armed
    last = (await engine.history("j1"))[-1]
    assert (last.event, last.actor, last.payload, last.from_state, last.to_state) == (
        "$move",
        "root",
        {"reason": "skip the queue", "to": "running"},
        "queued",
        "running",
    )
    await engine.check("j1")
    finished = await engine.move_to("j1", "failed", actor="root", reason="give up")
    assert finished.terminal and await engine.timers("j1") == []
    with pytest.raises(WorkflowFinished):
        await engine.move_to("j1", "queued", actor="root", reason="again")
    await engine.check("j1")


async def test_move_refuses_unknown_states_and_missing_reasons(store: Store) -> None:
    engine = engine_on(store)
    before = await engine.start("job", {}, workflow_id="j2")
    with pytest.raises(InvalidInput, match="no state 'nowhere'"):
        await engine.move_to("j2", "nowhere", actor="root", reason="r")
    with pytest.raises(InvalidInput, match="needs a reason"):
        await engine.move_to("j2", "running", actor="root", reason=" ")
    assert (await engine.get("j2")).version == before.version
    assert len(await engine.history("j2")) == 1


async def test_resume_is_one_logged_transition_that_makes_the_handler_due(store: Store) -> None:
    engine = engine_on(store)
    await engine.start("job", {}, workflow_id="j3")
    await engine.send("j3", "go")
    row = await engine.resume("j3", actor="alice", reason="upstream fixed")
    assert (row.state, row.next_due_at) == ("running", engine.clock.now())
    last = (await engine.history("j3"))[-1]
    assert (last.event, last.actor, last.payload) == (
        "$resume",
        "alice",
        {"reason": "upstream fixed"},
    )
    assert [t.event for t in await engine.timers("j3")] == ["timeout"]  # the state's timers stay
    await engine.check("j3")


class Gateway:
    """Counts every charge: it does not deduplicate by key."""

    def __init__(self) -> None:
        self.charges: list[str] = []

    def charge(self, key: str) -> dict[str, str]:
        self.charges.append(key)
        return {"charge_id": f"ch-{len(self.charges)}"}


def payment_type(gateway: Gateway) -> WorkflowType:
    from statewright import FatalError, Run

    m = (
        MachineBuilder("pay")
        .state("paying", initial=True)
        .state("paid", terminal=True)
        .event("charged")
        .transition("charged", "paying", "paid")
        .build()
    )

    async def pay(run: Run) -> Next:
        charge = await run.step("charge", gateway.charge)
        if run.context.get("receipt_printer_broken"):
            raise FatalError("the receipt printer is broken")
        receipt = await run.step("receipt", lambda key: {"receipt": key})
        return Next("charged", context={**charge, **receipt})

    return WorkflowType(m, handlers={"paying": pay}, on_fatal=None)


async def test_fork_keeps_the_steps_done_by_then_and_they_never_run_again(store: Store) -> None:
    from statewright import Worker

    gateway = Gateway()
    clock = ManualClock()
    engine = Engine(store, [payment_type(gateway)], clock=clock)
    await engine.start("pay", {"receipt_printer_broken": True}, workflow_id="p1")
    clock.advance(1)
    await Worker(engine).run_until_idle()
    failed = await engine.get("p1")
    assert failed.parked is not None and gateway.charges == ["p1:charge"]
    clock.advance(1)
    fork = await engine.fork("p1", actor="alice", reason="retry without the broken printer")
    assert (fork.id, fork.state, fork.context) == (
        f"p1.fork-{failed.version}",
        "paying",
        {"receipt_printer_broken": True},
    )
    first = (await engine.history(fork.id))[0]
    assert (first.event, first.actor, first.payload) == (
        "$fork",
        "alice",
        {
            "forked_from": "p1",
            "version": failed.version,
            "reason": "retry without the broken printer",
        },
    )
    again = await engine.fork("p1", actor="alice", reason="retry without the broken printer")
    assert again.version == fork.version  # a retry returns the same fork
    await engine.patch_context(
        fork.id, {"receipt_printer_broken": False}, actor="alice", reason="printer fixed"
    )
    await Worker(engine).run_until_idle()
    done = await engine.get(fork.id)
    assert done.state == "paid"
    assert gateway.charges == ["p1:charge"]  # the copied charge returned its result
    assert done.context["charge_id"] == "ch-1"
    await engine.check(fork.id)
    assert (await engine.get("p1")).version == failed.version  # the original is untouched


async def test_fork_from_an_early_version_and_refusals(store: Store) -> None:
    engine = engine_on(store)
    await engine.start("job", {"n": 1}, workflow_id="j4")
    await engine.send("j4", "go")
    await engine.send("j4", "finish")
    early = await engine.fork("j4", version=1, new_id="j4-again", actor="a", reason="redo")
    assert (early.id, early.state, early.context, early.terminal) == (
        "j4-again",
        "queued",
        {"n": 1},
        False,
    )
    await engine.check("j4-again")
    with pytest.raises(InvalidInput):
        await engine.fork("j4", version=9, actor="a", reason="r")
    with pytest.raises(InvalidInput):
        await engine.fork("j4", actor="a", reason="")
    from statewright import WorkflowExists

    with pytest.raises(WorkflowExists):
        await engine.fork("j4", version=2, new_id="j4-again", actor="a", reason="redo")
