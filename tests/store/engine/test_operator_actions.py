"""Operator actions on every store: each is one transition in the log with its actor and
reason, and replay understands it (issue 14, item 3)."""

from __future__ import annotations

from typing import Any

import pytest

from statewright import (
    Engine,
    InvalidInput,
    Machine,
    MachineBuilder,
    ManualClock,
    Next,
    WorkflowType,
)
from statewright.errors import WorkflowFinished
from statewright.store.protocol import FullStore as Store


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
    before = (await engine.start("job", {}, workflow_id="j2")).row
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
    from statewright.errors import WorkflowExists

    with pytest.raises(WorkflowExists):
        await engine.fork("j4", version=2, new_id="j4-again", actor="a", reason="redo")


class TimingOutGateway(Gateway):
    """Charges, then loses the answer once: the call timed out after the charge went through."""

    def __init__(self) -> None:
        super().__init__()
        self.timed_out = False

    def charge(self, key: str) -> dict[str, str]:
        result = super().charge(key)
        if not self.timed_out:
            self.timed_out = True
            raise TimeoutError("the gateway's answer timed out (the charge went through)")
        return result


async def _parked_on_an_unknown_charge(store: Store) -> tuple[Engine, TimingOutGateway]:
    from statewright import Worker

    gateway = TimingOutGateway()
    clock = ManualClock()
    engine = Engine(store, [payment_type(gateway)], clock=clock)
    await engine.start("pay", {}, workflow_id="p2")
    await Worker(engine).run_until_idle()  # times out: a transient failure, retried later
    clock.advance(3600)
    await Worker(engine).run_until_idle()  # no hook can tell, not safe to repeat: parked
    row = await engine.get("p2")
    assert row.parked == "step_outcome_unknown" and gateway.charges == ["p2:charge"]
    return engine, gateway


async def test_fork_refuses_a_step_of_unknown_outcome_until_it_is_resolved(store: Store) -> None:
    """Issue 22, item 3: a fork of a workflow parked on a charge whose call timed out after
    charging would charge again under the fork's key. Refused, naming the step and the way
    out; once resolved on the source, the fork carries the charge's result."""
    from statewright import Applied, Worker
    from statewright.errors import StepUnresolved

    engine, gateway = await _parked_on_an_unknown_charge(store)
    with pytest.raises(StepUnresolved, match="resolve-step p2 charge") as refused:
        await engine.fork("p2", actor="alice", reason="try again")
    assert refused.value.steps == ["charge"]
    assert await store.get_workflow(f"p2.fork-{(await engine.get('p2')).version}") is None

    await engine.resolve_step(
        "p2", "charge", Applied({"charge_id": "ch-1"}), actor="alice", reason="gateway says so"
    )
    fork = await engine.fork("p2", actor="alice", reason="try again")
    [copied] = await store.steps(fork.id)
    assert (copied.key, copied.status, copied.result) == (
        f"{fork.id}:charge",
        "done",
        {"charge_id": "ch-1"},
    )
    await Worker(engine).run_until_idle()
    assert (await engine.get(fork.id)).state == "paid"
    assert (await engine.get("p2")).state == "paid"
    assert gateway.charges == ["p2:charge"]  # one charge, for both


async def test_fork_refuses_a_step_left_executing(store: Store) -> None:
    engine = Engine(store, [payment_type(Gateway())], clock=ManualClock())
    await engine.start("pay", {}, workflow_id="p3")
    [claimed] = await store.claim_due("w-1", engine.clock.now(), 30, 1)
    assert claimed.lease is not None
    await store.step_begin("p3:charge", "p3", "charge", engine.clock.now(), claimed.lease)
    await store.release_lease("p3", claimed.lease)  # the worker died mid-call; lease gone
    from statewright.errors import StepUnresolved

    with pytest.raises(StepUnresolved, match="'charge'"):
        await engine.fork("p3", actor="alice", reason="r")
    assert await store.get_workflow("p3.fork-1") is None


async def test_fork_refuses_while_a_worker_holds_the_source(store: Store) -> None:
    """A claimed workflow may have a step in flight: no fork, like no resume. Also when the
    claim comes between the fork's read of the steps and its write."""
    from statewright.errors import WorkflowBusy

    engine = Engine(store, [payment_type(Gateway())], clock=ManualClock())
    await engine.start("pay", {}, workflow_id="p4")
    [claimed] = await store.claim_due("w-1", engine.clock.now(), 30, 1)
    assert claimed.lease is not None
    with pytest.raises(WorkflowBusy, match="worker"):
        await engine.fork("p4", actor="alice", reason="r")
    await store.release_lease("p4", claimed.lease)

    steps = store.steps

    async def claimed_meanwhile(workflow_id: str, *args: object, **kw: object) -> list[object]:
        found = await steps(workflow_id, *args, **kw)  # type: ignore[arg-type]
        await store.claim_due("w-2", engine.clock.now() + 1, 30, 1)  # a worker claims it now
        return list(found)

    store.steps = claimed_meanwhile  # type: ignore[method-assign, assignment]
    try:
        with pytest.raises(WorkflowBusy, match="worker"):
            await engine.fork("p4", actor="alice", reason="r")
    finally:
        del store.steps
    assert await store.get_workflow("p4.fork-1") is None


def shipping_type(gateway: Gateway, clock: ManualClock) -> WorkflowType:
    """Charges in ``paying``, then ships in ``shipping`` (a second later)."""
    from statewright import Run

    m = (
        MachineBuilder("ship")
        .state("paying", initial=True)
        .state("shipping")
        .state("shipped", terminal=True)
        .event("charged")
        .event("sent")
        .transition("charged", "paying", "shipping")
        .transition("sent", "shipping", "shipped")
        .build()
    )

    async def pay(run: Run) -> Next:
        return Next("charged", context=await run.step("charge", gateway.charge))

    async def ship(run: Run) -> Next:
        clock.advance(1)
        return Next("sent", context=await run.step("parcel", lambda key: {"parcel": key}))

    return WorkflowType(m, handlers={"paying": pay, "shipping": ship})


async def test_fork_from_an_earlier_version_reruns_later_steps_only_when_told(
    store: Store,
) -> None:
    from statewright import Worker
    from statewright.errors import StepsWouldRerun

    gateway, clock = Gateway(), ManualClock()
    engine = Engine(store, [shipping_type(gateway, clock)], clock=clock)
    why: dict[str, Any] = {"actor": "alice", "reason": "again"}
    await engine.start("ship", {}, workflow_id="s1")
    await Worker(engine).run_until_idle()
    assert (await engine.get("s1")).state == "shipped" and gateway.charges == ["s1:charge"]
    latest = await engine.fork("s1", actor="alice", reason="a copy")  # nothing to rerun
    assert latest.terminal and len(await store.steps(latest.id)) == 2
    # From version 1 (paying): the charge was done then and is carried; the parcel, sent
    # in shipping after it, would be sent again.
    with pytest.raises(StepsWouldRerun, match="'parcel'") as refused:
        await engine.fork("s1", version=1, actor="alice", reason="again")
    assert refused.value.steps == ["parcel"]
    assert await store.get_workflow("s1.fork-1") is None
    # From version 2 (shipping): the parcel was sent then, so it is carried too.
    assert len(await store.steps((await engine.fork("s1", version=2, **why)).id)) == 2
    fork = await engine.fork("s1", version=1, actor="alice", reason="again", rerun_steps=True)
    first = (await engine.history(fork.id))[0]
    assert first.payload["rerun_steps"] == ["parcel"]
    assert [s.step for s in await store.steps(fork.id)] == ["charge"]
    again = await engine.fork("s1", version=1, actor="alice", reason="again", rerun_steps=True)
    assert again.id == fork.id  # a retry returns it
    await Worker(engine).run_until_idle()
    [parcel] = [s for s in await store.steps(fork.id) if s.step == "parcel"]
    assert parcel.result == {"parcel": f"{fork.id}:parcel"}  # sent again, as asked
    assert gateway.charges == ["s1:charge"]
