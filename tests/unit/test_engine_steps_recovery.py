"""Idempotent steps, reconciliation of interrupted steps, and recovery of dead workers."""

from __future__ import annotations

from typing import Any

import pytest

from statewright import (
    Applied,
    InvalidInput,
    MachineBuilder,
    ManualClock,
    NotApplied,
    Run,
    Worker,
    WorkflowType,
)
from statewright.engine import agent_task_type
from statewright.engine.recovery import recover
from statewright.engine.workflow_type import Reconciled
from statewright.errors import StepOutcomeUnknown
from statewright.testing import memory_engine

PAY = (
    MachineBuilder("pay")
    .state("charging", initial=True)
    .state("paid", terminal=True)
    .state("failed", terminal=True)
    .event("charged")
    .event("fatal_error")
    .transition("charged", "charging", "paid")
    .transition("fatal_error", "charging", "failed")
    .build()
)
DEAD = "vm-that-is-gone:999999:dead"


class Gateway:
    def __init__(self) -> None:
        self.charges: dict[str, int] = {}
        self.calls = 0

    def charge(self, key: str) -> dict[str, Any]:
        self.calls += 1
        self.charges.setdefault(key, 100)
        return {"charge_id": key, "amount": self.charges[key]}

    def lookup(self, key: str) -> Reconciled:
        return (
            Applied({"charge_id": key, "amount": self.charges[key]})
            if key in self.charges
            else NotApplied()
        )


def pay_type(gw: Gateway, **step_kw: Any) -> WorkflowType:
    async def handler(run: Run) -> str:
        await run.step("charge", gw.charge, **step_kw)
        return "charged"

    return WorkflowType(PAY, {"charging": handler})


async def _interrupt(engine: Any, key: str, wid: str) -> None:
    """Leave a step 'executing' in the ledger, as a crash mid-step would."""
    await engine.store.step_begin(key, wid, key.split(":")[1], 0.0)


async def test_step_runs_once_and_hands_over_its_key(clock: ManualClock) -> None:
    gw = Gateway()
    async with memory_engine([pay_type(gw)], clock) as engine:
        await engine.start("pay", workflow_id="p")
        row = await engine.get("p")
        run = Run(engine.runtime, engine.type_of("pay"), row)
        first = await run.step("charge", gw.charge)
        second = await run.step("charge", gw.charge)
        assert first == second == {"charge_id": "p:charge", "amount": 100}
        assert gw.calls == 1
        [rec] = await engine.store.steps("p")
        assert (rec.status, rec.attempts, rec.result) == ("done", 1, first)
        with pytest.raises(InvalidInput):
            await run.step("a:b", gw.charge)


async def test_a_step_that_never_left_is_recorded_and_runs_again(clock: ManualClock) -> None:
    calls = []

    def flaky(key: str) -> str:
        calls.append(key)
        if len(calls) == 1:
            raise ConnectionRefusedError("refused")  # proves the request never left
        return "ok"

    async with memory_engine([PAY], clock) as engine:
        await engine.start("pay", workflow_id="p")
        run = Run(engine.runtime, engine.type_of("pay"), await engine.get("p"))
        with pytest.raises(ConnectionRefusedError):
            await run.step("s", flaky)
        rec = await engine.store.get_step("p:s")
        assert rec is not None and (rec.status, rec.outcome) == ("failed", "not_applied")
        assert await run.step("s", flaky) == "ok"
        assert (await engine.store.get_step("p:s")).attempts == 2  # type: ignore[union-attr]


async def test_interrupted_step_reconciled_as_applied_is_not_rerun(clock: ManualClock) -> None:
    gw = Gateway()
    gw.charges["p:charge"] = 100  # the gateway did charge before the crash
    async with memory_engine([pay_type(gw, reconcile=gw.lookup)], clock) as engine:
        await engine.start("pay", workflow_id="p")
        await _interrupt(engine, "p:charge", "p")
        await Worker(engine).run_until_idle()
        assert (await engine.get("p")).state == "paid"
        assert gw.calls == 0
        assert (await engine.store.get_step("p:charge")).result["amount"] == 100  # type: ignore[union-attr]


async def test_interrupted_step_reconciled_as_not_applied_runs(clock: ManualClock) -> None:
    gw = Gateway()
    async with memory_engine([pay_type(gw, reconcile=gw.lookup)], clock) as engine:
        await engine.start("pay", workflow_id="p")
        await _interrupt(engine, "p:charge", "p")
        await Worker(engine).run_until_idle()
        assert (await engine.get("p")).state == "paid"
        assert gw.calls == 1


async def test_interrupted_unknown_step_fails_unless_safe_to_repeat(clock: ManualClock) -> None:
    gw = Gateway()
    async with memory_engine([pay_type(gw)], clock) as engine:
        await engine.start("pay", workflow_id="p")
        await _interrupt(engine, "p:charge", "p")
        run = Run(engine.runtime, engine.type_of("pay"), await engine.get("p"))
        with pytest.raises(StepOutcomeUnknown) as info:
            await run.step("charge", gw.charge)
        assert info.value.key == "p:charge" and gw.calls == 0
        await Worker(engine).run_until_idle()
        row = await engine.get("p")
        # Parked for an operator, visibly: not failed silently, not run again.
        assert (row.state, row.parked, row.lease_owner, row.next_due_at) == (
            "charging",
            "step_outcome_unknown",
            None,
            None,
        )
        assert "p:charge" in (row.last_error or "")
        assert gw.calls == 0

    gw2 = Gateway()
    async with memory_engine([pay_type(gw2, safe_to_repeat=True)], clock) as engine:
        await engine.start("pay", workflow_id="p")
        await _interrupt(engine, "p:charge", "p")
        await Worker(engine).run_until_idle()
        assert (await engine.get("p")).state == "paid" and gw2.calls == 1


async def test_type_level_reconciler(clock: ManualClock) -> None:
    gw = Gateway()
    gw.charges["p:charge"] = 5
    wtype = WorkflowType(PAY, pay_type(gw).handlers, reconcilers={"charge": gw.lookup})
    async with memory_engine([wtype], clock) as engine:
        await engine.start("pay", workflow_id="p")
        await _interrupt(engine, "p:charge", "p")
        await Worker(engine).run_until_idle()
        assert (await engine.get("p")).state == "paid" and gw.calls == 0


async def test_dead_local_worker_is_recovered_at_once_by_rerun(clock: ManualClock) -> None:
    gw = Gateway()
    async with memory_engine([pay_type(gw)], clock) as engine:
        await engine.start("pay", workflow_id="p")
        assert len(await engine.store.claim_due(DEAD, clock.now(), 3600, 10)) == 1
        assert await Worker(engine).run_until_idle() == 0  # leased by the dead worker
        # not a local pid: wait for the lease to expire
        assert await recover(engine) == []
        clock.advance(3601)
        [rec] = await recover(engine)
        assert (rec.workflow_id, rec.action, rec.owner) == ("p", "rerun", DEAD)
        await Worker(engine).run_until_idle()
        assert (await engine.get("p")).state == "paid"


async def test_dead_pid_on_this_host_needs_no_lease_expiry(clock: ManualClock) -> None:
    import socket

    owner = f"{socket.gethostname()}:999999:gone"
    async with memory_engine([pay_type(Gateway())], clock) as engine:
        await engine.start("pay", workflow_id="p")
        await engine.store.claim_due(owner, clock.now(), 3600, 10)
        [rec] = await recover(engine)
        assert rec.owner == owner


async def test_agent_task_default_recovery_running_goes_to_retrying(clock: ManualClock) -> None:
    wtype = agent_task_type({"running": lambda run: "complete"})
    async with memory_engine([wtype], clock) as engine:
        await engine.start("agent_task", workflow_id="t")
        await engine.send("t", "start")
        await engine.store.claim_due(DEAD, clock.now(), 10, 10)
        clock.advance(11)
        [rec] = await recover(engine)
        assert rec.action == "retry"
        row = await engine.get("t")
        assert (row.state, row.attempts, row.lease_owner) == ("retrying", 1, None)
        assert "was lost" in (row.last_error or "")
        clock.advance(3600)
        await Worker(engine).run_until_idle()
        assert (await engine.get("t")).state == "done"


async def test_lease_of_an_earlier_process_with_our_pid_is_recovered(clock: ManualClock) -> None:
    import os
    import socket

    earlier = f"{socket.gethostname()}:{os.getpid()}:0ldrun00"
    async with memory_engine([pay_type(Gateway())], clock) as engine:
        await engine.start("pay", workflow_id="p")
        live = Worker(engine)
        await engine.store.claim_due(earlier, clock.now(), 3600, 10)
        [rec] = await recover(engine)
        assert rec.owner == earlier
        await engine.start("pay", workflow_id="q")
        await engine.store.claim_due(live.id, clock.now(), 3600, 10)
        assert await recover(engine) == []  # a live worker of this process keeps its lease


async def test_a_worker_that_no_longer_exists_leaves_no_trace(clock: ManualClock) -> None:
    """The workers this process counts as alive are those that still exist: one that was
    created and dropped is forgotten (the set does not grow with every worker), and a lease
    left under its id is recovered at once, as a dead process's would be."""
    import gc

    from statewright.engine.recovery import LIVE_WORKERS

    async with memory_engine([pay_type(Gateway())], clock) as engine:
        gc.collect()
        before = len(LIVE_WORKERS)
        gone = Worker(engine)
        gone_id = gone.id
        assert len(LIVE_WORKERS) == before + 1
        del gone
        gc.collect()
        assert len(LIVE_WORKERS) == before
        await engine.start("pay", workflow_id="p")
        await engine.store.claim_due(gone_id, clock.now(), 3600, 10)
        [rec] = await recover(engine)
        assert (rec.workflow_id, rec.owner) == ("p", gone_id)


def test_a_zombie_child_counts_as_dead() -> None:
    import socket
    import subprocess
    import sys
    import time

    from statewright.engine.recovery import dead_local_owner

    child = subprocess.Popen([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), 9)"])
    try:
        deadline = time.monotonic() + 10
        owner = f"{socket.gethostname()}:{child.pid}:x"
        while not dead_local_owner(owner):
            assert time.monotonic() < deadline, "a killed, unreaped child must count as dead"
            time.sleep(0.02)
    finally:
        child.wait()


async def test_agent_task_default_recovery_blocked_stays_blocked(clock: ManualClock) -> None:
    async with memory_engine([agent_task_type({"blocked": lambda run: None})], clock) as engine:
        await engine.start("agent_task", workflow_id="t")
        await engine.send("t", "start")
        await engine.send("t", "block")
        assert len(await engine.store.claim_due(DEAD, clock.now(), 10, 10)) == 1
        clock.advance(11)
        [rec] = await recover(engine)
        assert rec.action == "leave"
        row = await engine.get("t")
        assert (row.state, row.lease_owner, row.next_due_at) == ("blocked", None, None)
        assert await Worker(engine).run_until_idle() == 0
