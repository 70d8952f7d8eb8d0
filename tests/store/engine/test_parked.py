"""A parked workflow counts as stuck from the moment it parks, on every store (issue 22, item
11): listed by ``Engine.stuck`` with its reason and what to do, counted by ``stuck_counts``
and ``parked_totals``; and ``resume`` refuses a workflow parked because a step's outcome is
unknown (it would only park again) instead of reporting success.

The gateway does not deduplicate: it counts every charge, so a blind re-run would show."""

from __future__ import annotations

from typing import Any

import pytest

from statewright import (
    Applied,
    Engine,
    FatalError,
    MachineBuilder,
    ManualClock,
    Next,
    NotApplied,
    RetryPolicy,
    Run,
    Worker,
    WorkflowType,
)
from statewright.engine.core import ParkedTotal, StuckTotal
from statewright.errors import IdempotencyKeyReused, StepUnresolved
from statewright.store.protocol import FullStore as Store
from statewright.types import StepFinish


class Gateway:
    """Charges, then times out before answering (the charge happened): the worker cannot
    tell, so the step's outcome is unknown. Counts every charge it takes."""

    def __init__(self) -> None:
        self.charges: list[str] = []

    def charge(self, key: str) -> dict[str, str]:
        self.charges.append(str(key))
        raise TimeoutError("the gateway took the charge but the answer never came")


def pay_type(gateway: Gateway) -> WorkflowType:
    machine = (
        MachineBuilder("pay")
        .state("paying", initial=True, stuck_after=3600)
        .state("paid", terminal=True)
        .event("charged")
        .transition("charged", "paying", "paid")
        .build()
    )

    async def pay(run: Run) -> Next:
        if run.context.get("broken"):
            raise FatalError("the receipt printer is broken")
        charge = await run.step("charge", gateway.charge)
        return Next("charged", context={"charge": charge})

    return WorkflowType(
        machine,
        handlers={"paying": pay},
        retry=RetryPolicy(max_attempts=3, base_delay=1.0, max_delay=1.0, jitter=0.0),
        on_transient=None,
        on_fatal=None,
    )


async def _run(engine: Engine, clock: ManualClock) -> None:
    """Run the worker until nothing is due, the clock moved past each backoff."""
    for _ in range(10):
        await Worker(engine).run_until_idle()
        clock.advance(2)


async def _parked(store: Store) -> tuple[Engine, ManualClock, Gateway]:
    gateway = Gateway()
    clock = ManualClock(1_800_000_000.0)
    engine = Engine(store, [pay_type(gateway)], clock=clock)
    await engine.start("pay", {}, workflow_id="p-unknown")
    await engine.start("pay", {"broken": True}, workflow_id="p-fatal")
    await engine.start("pay", {}, workflow_id="p-fine")
    await engine.send("p-fine", "charged")  # paid: never stuck
    await _run(engine, clock)
    return engine, clock, gateway


async def test_a_parked_workflow_is_stuck_at_once_with_what_to_do(store: Store) -> None:
    engine, clock, gateway = await _parked(store)
    unknown, fatal = await engine.get("p-unknown"), await engine.get("p-fatal")
    assert (unknown.parked, fatal.parked) == ("step_outcome_unknown", "fatal_error")
    assert gateway.charges == ["p-unknown:charge"]  # charged once, never blindly again
    now = clock.now()
    assert now - unknown.state_entered_at < 3600  # far from its state's threshold
    assert engine.is_stuck(unknown) and engine.is_stuck(fatal)

    found = await engine.stuck()
    assert [(s.workflow.id, s.parked, s.action, s.step) for s in found] == [
        ("p-fatal", "fatal_error", "resume", None),
        ("p-unknown", "step_outcome_unknown", "resolve_step", "charge"),
    ]
    assert "step 'charge' is unknown" in found[1].hint and "resolve" in found[1].hint
    assert "fix the cause" in found[0].hint and "resume" in found[0].hint
    assert found[0].threshold == 3600 and found[0].age < 3600
    # Pages continue after the last one's key.
    first = await engine.stuck(limit=1)
    assert [s.workflow.id for s in first] == ["p-fatal"]
    rest = await engine.stuck(after=first[-1].key)
    assert [s.workflow.id for s in rest] == ["p-unknown"]
    oldest = now - min(unknown.state_entered_at, fatal.state_entered_at)
    assert await engine.stuck_counts() == [StuckTotal("pay", "paying", 2, oldest)]
    assert await engine.parked_counts() == [("pay", "paying", 2)]
    totals = await engine.parked_totals()
    assert totals == [
        ParkedTotal("pay", "paying", "fatal_error", 1, now - fatal.state_entered_at),
        ParkedTotal("pay", "paying", "step_outcome_unknown", 1, now - unknown.state_entered_at),
    ]
    # Past the threshold they are still listed once each.
    clock.advance(7200)
    assert [s.workflow.id for s in await engine.stuck()] == ["p-fatal", "p-unknown"]
    assert (await engine.stuck_counts())[0].count == 2


async def test_resume_refuses_a_workflow_parked_for_an_unknown_outcome(store: Store) -> None:
    engine, clock, gateway = await _parked(store)
    before = await engine.get("p-unknown")
    with pytest.raises(StepUnresolved) as refused:
        await engine.resume("p-unknown", actor="ops", reason="try again")
    assert refused.value.code == "step_unresolved" and refused.value.steps == ["charge"]
    assert "resolve the step" in refused.value.message
    after = await engine.get("p-unknown")
    assert (after.version, after.parked, after.next_due_at) == (
        before.version,
        "step_outcome_unknown",
        before.next_due_at,
    )
    assert [t.event for t in await engine.history("p-unknown")] == ["$start"]  # nothing logged

    # Asked explicitly: the reconcile hook is asked again; there is none, so it parks again,
    # and the charge is not made twice.
    resumed = await engine.resume(
        "p-unknown", actor="ops", reason="hook back", reconcile=True, idempotency_key="r-1"
    )
    assert resumed.parked is None
    last = (await engine.history("p-unknown"))[-1]
    assert (last.event, last.payload) == ("$resume", {"reason": "hook back", "reconcile": True})
    await _run(engine, clock)
    parked_again = await engine.get("p-unknown")
    assert parked_again.parked == "step_outcome_unknown"
    assert gateway.charges == ["p-unknown:charge"]
    # A retry of that resume with its key is its replay (nothing applied), not a refusal.
    retried = await engine.resume(
        "p-unknown", actor="ops", reason="hook back", reconcile=True, idempotency_key="r-1"
    )
    assert retried.version == parked_again.version
    with pytest.raises(IdempotencyKeyReused):  # the same key for another resume: told so
        await engine.resume("p-unknown", actor="ops", reason="hook back", idempotency_key="r-1")
    with pytest.raises(StepUnresolved):  # a new resume without reconcile is refused
        await engine.resume("p-unknown", actor="ops", reason="again", idempotency_key="r-2")

    # Other reasons resume as before.
    fatal = await engine.resume("p-fatal", actor="ops", reason="printer fixed")
    assert fatal.parked is None

    # Resolved: it runs on with the result the gateway holds, without calling it again.
    await engine.resolve_step(
        "p-unknown", "charge", Applied({"charge_id": "ch_1"}), actor="ops", reason="seen"
    )
    assert (await engine.get("p-unknown")).parked is None  # resolve_step resumed it
    await _run(engine, clock)
    done = await engine.get("p-unknown")
    assert (done.state, done.context["charge"]) == ("paid", {"charge_id": "ch_1"})
    assert gateway.charges == ["p-unknown:charge"]
    assert [s.workflow.id for s in await engine.stuck()] == ["p-fatal"]  # parked again


async def test_resolving_one_of_two_unknown_steps_leaves_it_parked(store: Store) -> None:
    engine, _, _ = await _parked(store)
    now = engine.clock.now()
    # A second step whose outcome is unknown (found executing after a crash, say).
    await store.step_begin("p-unknown:refund", "p-unknown", "refund", now + 1)
    with pytest.raises(StepUnresolved) as refused:
        await engine.resume("p-unknown", actor="ops", reason="r")
    assert refused.value.steps == ["charge", "refund"]
    await engine.resolve_step("p-unknown", "charge", NotApplied(), actor="ops", reason="none")
    row = await engine.get("p-unknown")
    assert row.parked == "step_outcome_unknown"  # resuming would park it again on refund
    [listed] = [s for s in await engine.stuck() if s.workflow.id == "p-unknown"]
    assert (listed.action, listed.step) == ("resolve_step", "refund")
    await store.step_finish(
        StepFinish("p-unknown:refund", 1, "failed", error="boom", outcome="not_applied", at=now)
    )
    # Nothing unresolved any more: resume is what is left (and it is accepted).
    [listed] = [s for s in await engine.stuck() if s.workflow.id == "p-unknown"]
    assert (listed.action, listed.step) == ("resume", None)
    resumed: Any = await engine.resume("p-unknown", actor="ops", reason="both answered")
    assert resumed.parked is None
