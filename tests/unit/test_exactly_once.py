"""The runtime contract around user code, on the real SQLite store: unknown outcomes are
reconciled, fencing, user code off the loop, deadlines, budgets, idempotency keys, the inbox.

The fake payment gateway here does NOT deduplicate: every call charges.
"""

from __future__ import annotations

import asyncio
import email.utils
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from statewright import (
    Applied,
    Engine,
    MachineBuilder,
    ManualClock,
    Next,
    NotApplied,
    RetryPolicy,
    Run,
    SQLiteStore,
    Worker,
    WorkflowType,
)
from statewright.engine.looplag import LagReport
from statewright.engine.steps import StepKey
from statewright.engine.syncrun import SyncRun
from statewright.engine.workflow_type import Reconciled
from statewright.errors import (
    IdempotencyKeyReused,
    IllegalTransition,
    InvalidInput,
    LeaseLost,
    TransientError,
    VersionConflict,
    WorkflowFinished,
)
from statewright.testing import memory_engine
from statewright.types import DeferWrite

PAY = (
    MachineBuilder("pay")
    .state("charging", initial=True)
    .state("review")
    .state("paid", terminal=True)
    .state("failed", terminal=True)
    .event("charged")
    .event("fatal_error")
    .event("outcome_unknown")
    .event("retry_charge")
    .transition("charged", "charging", "paid")
    .transition("fatal_error", "charging", "failed")
    .transition("outcome_unknown", "charging", "review")
    .transition("retry_charge", "review", "charging")
    .build()
)


class Gateway:
    """A payment service that does not deduplicate: every call charges."""

    def __init__(self, fail_after_charge: int = 0, fail_before_charge: int = 0) -> None:
        self.charges: list[str] = []
        self.lookups: list[str] = []
        self.fail_after_charge = fail_after_charge
        self.fail_before_charge = fail_before_charge

    def charge(self, key: str) -> dict[str, Any]:
        if self.fail_before_charge:
            self.fail_before_charge -= 1
            raise ConnectionRefusedError("the gateway refused the connection")
        self.charges.append(key)
        if self.fail_after_charge:
            self.fail_after_charge -= 1
            raise TimeoutError("the answer timed out (the charge went through)")
        return {"charge": len(self.charges), "key": key}

    def lookup(self, key: str) -> Reconciled:
        self.lookups.append(key)
        if key in self.charges:
            return Applied({"charge": self.charges.index(key) + 1, "key": key})
        return NotApplied()


def pay_type(gw: Gateway, *, reconcile: bool = True, **options: Any) -> WorkflowType:
    step_options: dict[str, Any] = options.pop("step_options", {})

    async def handler(run: Run) -> Next:
        result = await run.step(
            "charge", gw.charge, reconcile=gw.lookup if reconcile else None, **step_options
        )
        return Next("charged", context={"charge": result})

    options.setdefault("retry", RetryPolicy(base_delay=1.0, jitter=0.0))
    return WorkflowType(PAY, {"charging": handler}, **options)


async def drain(engine: Engine, clock: ManualClock, rounds: int = 10, step: float = 5.0) -> None:
    """Run the worker, letting backoff timers come due."""
    worker = Worker(engine)
    for _ in range(rounds):
        await worker.run_until_idle()
        clock.advance(step)


# -- unknown outcomes -------------------------------------------------------------------------


async def test_a_call_that_raised_after_the_effect_is_reconciled_not_repeated(
    clock: ManualClock,
) -> None:
    gw = Gateway(fail_after_charge=1)
    async with memory_engine([pay_type(gw)], clock) as engine:
        await engine.start("pay", workflow_id="p")
        await drain(engine, clock)
        row = await engine.get("p")
        assert gw.charges == ["p:charge"], "charged once, never again"
        assert gw.lookups == ["p:charge"], "reconcile was asked before any second run"
        assert (row.state, row.context["charge"]) == ("paid", {"charge": 1, "key": "p:charge"})
        [step] = await engine.store.steps("p")
        assert (step.status, step.attempts, step.result) == ("done", 2, row.context["charge"])
        assert (row.attempts, row.total_attempts) == (0, 1)


async def test_the_reconcile_hook_gets_the_key_with_the_asking_claims_token(
    clock: ManualClock,
) -> None:
    asked: list[tuple[str, int, int]] = []
    gw = Gateway(fail_after_charge=1)

    def lookup(key: StepKey) -> Reconciled:
        asked.append((str(key), key.fencing_token, key.attempt))
        return gw.lookup(key)

    async with memory_engine(
        [pay_type(gw, reconcilers={"charge": lookup}, reconcile=False)], clock
    ) as engine:
        await engine.start("pay", workflow_id="p")
        await drain(engine, clock)
        row = await engine.get("p")
        assert row.state == "paid" and asked == [("p:charge", row.fence, 1)]


async def test_without_a_verdict_an_unknown_step_parks_the_workflow_visibly(
    clock: ManualClock,
) -> None:
    gw = Gateway(fail_after_charge=1)
    async with memory_engine([pay_type(gw, reconcile=False)], clock) as engine:
        await engine.start("pay", workflow_id="p")
        await drain(engine, clock)
        row = await engine.get("p")
        assert gw.charges == ["p:charge"], "not run again blindly"
        assert (row.state, row.parked, row.lease_owner, row.next_due_at) == (
            "charging",
            "step_outcome_unknown",
            None,
            None,
        )
        assert "p:charge" in (row.last_error or "")
        [step] = await engine.store.steps("p")
        assert (step.status, step.outcome) == ("failed", "unknown")
        assert engine.is_stuck(row, clock.now() + 2 * 86400)  # shows up as stuck

        # The operator checked with the gateway: it did charge. The workflow goes on with
        # that result and the gateway is not called again.
        rec = await engine.resolve_step(
            "p", "charge", Applied({"charge": 1, "key": "p:charge"}), actor="ops", reason="seen"
        )
        assert rec.status == "done" and "ops" in (rec.error or "")
        await drain(engine, clock)
        row = await engine.get("p")
        assert (row.state, row.parked, gw.charges) == ("paid", None, ["p:charge"])


async def test_the_type_can_route_an_unknown_outcome_to_a_state(clock: ManualClock) -> None:
    gw = Gateway(fail_after_charge=1)
    wtype = pay_type(gw, reconcile=False, step_outcome_unknown="outcome_unknown")
    async with memory_engine([wtype], clock) as engine:
        await engine.start("pay", workflow_id="p")
        await drain(engine, clock)
        row = await engine.get("p")
        assert (row.state, row.parked, gw.charges) == ("review", None, ["p:charge"])
        last = (await engine.history("p"))[-1]
        assert (last.event, last.payload["key"]) == ("outcome_unknown", "p:charge")


async def test_an_error_that_proves_nothing_was_sent_runs_again_without_asking(
    clock: ManualClock,
) -> None:
    gw = Gateway(fail_before_charge=2)
    async with memory_engine([pay_type(gw, reconcile=False)], clock) as engine:
        await engine.start("pay", workflow_id="p")
        await drain(engine, clock)
        assert (await engine.get("p")).state == "paid"
        assert gw.charges == ["p:charge"] and gw.lookups == []


async def test_a_step_timeout_is_an_unknown_outcome_reconciled_before_the_retry(
    clock: ManualClock,
) -> None:
    gw = Gateway()
    slow = asyncio.Event()

    async def charge(key: str) -> dict[str, Any]:
        gw.charges.append(key)  # the charge lands, the answer never comes
        if not slow.is_set():
            slow.set()
            await asyncio.sleep(30)
        return {"charge": 1, "key": key}

    async def handler(run: Run) -> str:
        await run.step("charge", charge, reconcile=gw.lookup, timeout=0.05)
        return "charged"

    wtype = WorkflowType(PAY, {"charging": handler}, retry=RetryPolicy(jitter=0.0))
    async with memory_engine([wtype], clock) as engine:
        await engine.start("pay", workflow_id="p")
        worker = Worker(engine)
        await worker.run_until_idle()
        row = await engine.get("p")
        assert row.attempts == 1 and "DeadlineExceeded" in (row.last_error or "")
        [step] = await engine.store.steps("p")
        assert (step.status, step.outcome) == ("failed", "unknown")
        clock.advance(10)
        await worker.run_until_idle()
        assert (await engine.get("p")).state == "paid"
        assert gw.charges == ["p:charge"] and gw.lookups == ["p:charge"]


async def test_a_handler_past_its_deadline_is_stopped_and_its_step_reconciled(
    clock: ManualClock,
) -> None:
    gw = Gateway()
    calls = 0

    async def handler(run: Run) -> str:
        nonlocal calls
        calls += 1

        async def charge(key: str) -> dict[str, Any]:
            gw.charges.append(key)
            if calls == 1:
                await asyncio.sleep(30)  # hangs after the charge went through
            return {"charge": 1, "key": key}

        await run.step("charge", charge, reconcile=gw.lookup)
        return "charged"

    wtype = WorkflowType(
        PAY, {"charging": handler}, deadlines={"charging": 0.1}, retry=RetryPolicy(jitter=0.0)
    )
    async with memory_engine([wtype], clock) as engine:
        await engine.start("pay", workflow_id="p")
        worker = Worker(engine)
        await worker.run_until_idle()
        row = await engine.get("p")
        assert (row.state, row.attempts, row.lease_owner) == ("charging", 1, None)
        assert "deadline" in (row.last_error or "")
        [step] = await engine.store.steps("p")
        assert step.status == "executing"  # interrupted: left for reconcile
        clock.advance(10)
        await worker.run_until_idle()
        assert (await engine.get("p")).state == "paid"
        assert gw.charges == ["p:charge"] and gw.lookups == ["p:charge"]


# -- budgets and Retry-After ------------------------------------------------------------------


async def test_the_lifetime_budget_bounds_failures_that_alternate_with_successes(
    clock: ManualClock,
) -> None:
    flip = (
        MachineBuilder("flip")
        .state("a", initial=True)
        .state("b")
        .state("failed", terminal=True)
        .event("go")
        .event("fatal_error")
        .transition("go", "a", "b")
        .transition("go", "b", "a")
        .transition("fatal_error", ["a", "b"], "failed")
        .build()
    )
    runs: dict[str, int] = {"a": 0, "b": 0}

    async def handler(run: Run) -> str:
        runs[run.state] += 1
        if runs[run.state] % 2:  # every first try in a state fails, the retry succeeds
            raise TransientError("flaky")
        return "go"

    policy = RetryPolicy(max_attempts=3, max_total_attempts=5, jitter=0.0)
    wtype = WorkflowType(flip, {"a": handler, "b": handler}, retry=policy)
    async with memory_engine([wtype], clock) as engine:
        await engine.start("flip", workflow_id="f")
        await drain(engine, clock, rounds=40)
        row = await engine.get("f")
        assert row.state == "failed" and "lifetime" in (row.last_error or "")
        assert row.total_attempts == 6  # the sixth failure spent the budget of five
        assert row.attempts == 1  # consecutive failures never exceeded one


async def test_a_retry_after_http_date_is_honoured(clock: ManualClock) -> None:
    class Throttled(Exception):
        def __init__(self, at: float) -> None:
            super().__init__("429")
            self.status_code = 429
            self.headers = {"Retry-After": email.utils.formatdate(at, usegmt=True)}

    async def handler(run: Run) -> str:
        raise Throttled(run.now() + 120)

    wtype = WorkflowType(PAY, {"charging": handler}, retry=RetryPolicy(jitter=0.0))
    async with memory_engine([wtype], clock) as engine:
        await engine.start("pay", workflow_id="p")
        await Worker(engine).run_until_idle()
        row = await engine.get("p")
        assert row.next_due_at is not None
        assert row.next_due_at - clock.now() == pytest.approx(120, abs=1.0)


# -- user code off the event loop -------------------------------------------------------------


async def test_sync_handlers_and_actions_run_in_the_pool_not_on_the_loop(
    clock: ManualClock,
) -> None:
    threads: dict[str, str] = {}
    loop_ticks = 0

    def charge(key: StepKey) -> dict[str, Any]:
        threads["action"] = threading.current_thread().name
        time.sleep(0.2)  # blocking: must not stop the loop
        return {"key": str(key), "fence": key.fencing_token, "attempt": key.attempt}

    def handler(run: SyncRun) -> Next:
        threads["handler"] = threading.current_thread().name
        result = run.step("charge", charge)  # blocks this thread, not the loop
        run.progress(done=1)
        return Next("charged", context={"charge": result})

    async def ticker() -> None:
        nonlocal loop_ticks
        while True:
            await asyncio.sleep(0.01)
            loop_ticks += 1

    async with memory_engine([WorkflowType(PAY, {"charging": handler})], clock) as engine:
        await engine.start("pay", workflow_id="p")
        tick = asyncio.create_task(ticker())
        await Worker(engine).run_until_idle()
        tick.cancel()
        row = await engine.get("p")
        assert row.state == "paid"
        assert row.context["charge"] == {"key": "p:charge", "fence": row.fence, "attempt": 1}
        assert threads["handler"].startswith("statewright-user")
        assert threads["action"] == threads["handler"]  # a sync handler's action: its thread
        assert loop_ticks >= 10, "the loop kept running while user code blocked"


async def test_a_sync_action_of_an_async_handler_runs_in_the_pool(clock: ManualClock) -> None:
    where: list[str] = []

    def charge(key: str) -> int:
        where.append(threading.current_thread().name)
        return 1

    async def handler(run: Run) -> str:
        await run.step("charge", charge)
        return "charged"

    async with memory_engine([WorkflowType(PAY, {"charging": handler})], clock) as engine:
        await engine.start("pay", workflow_id="p")
        await Worker(engine, threads=2).run_until_idle()
        assert (await engine.get("p")).state == "paid"
        assert where[0].startswith("statewright-user")


async def test_a_blocking_async_handler_is_named_by_the_loop_watchdog(tmp_path: Path) -> None:
    reports: list[LagReport] = []

    async def handler(run: Run) -> str:
        time.sleep(0.8)  # wrong: blocks the event loop
        return "charged"

    engine = Engine(SQLiteStore(tmp_path / "lag.db"), [WorkflowType(PAY, {"charging": handler})])
    engine.observers.lag.append(reports.append)
    async with engine:
        await engine.start("pay", workflow_id="p")
        worker = Worker(engine, loop_lag_threshold=0.3, poll_interval=0.05)
        task = asyncio.create_task(worker.run())
        deadline = time.monotonic() + 5
        while (await engine.get("p")).state != "paid" and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)
        worker.stop()
        await task
    assert reports, "the stall was not reported"
    assert reports[0].seconds >= 0.5 and "pay/charging p" in (reports[0].culprit or "")


# -- fencing ----------------------------------------------------------------------------------


async def test_a_worker_whose_lease_was_taken_over_stops_and_writes_nothing(
    tmp_path: Path,
) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    charged: list[str] = []

    async def charge(key: str) -> str:
        charged.append(key)
        started.set()
        await release.wait()
        return "late"

    async def handler(run: Run) -> str:
        await run.step("charge", charge)
        return "charged"

    engine = Engine(SQLiteStore(tmp_path / "f.db"), [WorkflowType(PAY, {"charging": handler})])
    async with engine:
        await engine.start("pay", workflow_id="p")
        worker = Worker(engine, lease_seconds=0.3, poll_interval=0.05)
        task = asyncio.create_task(worker.run(recover=False))
        await asyncio.wait_for(started.wait(), 5)
        held = await engine.get("p")
        assert held.lease_owner == worker.id
        # Another worker recovers it (as after a freeze past the lease): a new claim.
        taken = await engine.store.take_over("p", worker.id, "thief", time.time() + 60)
        assert taken is not None and taken.fence == held.fence + 1
        deadline = time.monotonic() + 5
        while worker.in_flight and time.monotonic() < deadline:  # the heartbeat notices
            await asyncio.sleep(0.05)
        assert not worker.in_flight, "the handler was not stopped"
        release.set()
        worker.stop()
        await task
        row = await engine.get("p")
        assert (row.state, row.version, row.lease_owner, row.fence) == (
            "charging",
            1,
            "thief",
            held.fence + 1,
        )
        [step] = await engine.store.steps("p")
        assert (step.status, step.attempts, step.result) == ("executing", 1, None)
        assert charged == ["p:charge"]


async def test_a_late_thread_cannot_overwrite_the_result_of_the_worker_that_took_over(
    clock: ManualClock,
) -> None:
    gate = threading.Event()

    def slow_charge(key: str) -> str:
        gate.wait(5)
        return "from the frozen worker"

    async with memory_engine([WorkflowType(PAY, {})], clock) as engine:
        await engine.start("pay", workflow_id="p")
        await engine.store.defer(DeferWrite("p", 1, clock.now(), 0, next_due_at=clock.now()))
        [claim] = await engine.store.claim_due("frozen", clock.now(), 30, 1)
        frozen = Run(engine.runtime, engine.type_of("pay"), claim)
        step = asyncio.create_task(frozen.step("charge", slow_charge))
        await asyncio.sleep(0.1)  # the frozen worker's action is in flight
        await engine.store.break_leases("frozen")
        [again] = await engine.store.claim_due("second", clock.now(), 30, 1)
        second = Run(engine.runtime, engine.type_of("pay"), again)
        assert await second.step("charge", lambda key: "from the 2nd", safe_to_repeat=True)
        gate.set()
        with pytest.raises(LeaseLost):
            await step
        [rec] = await engine.store.steps("p")
        assert (rec.status, rec.result, rec.attempts) == ("done", "from the 2nd", 2)


# -- idempotency keys -------------------------------------------------------------------------


async def test_a_send_retried_with_its_key_applies_once(clock: ManualClock) -> None:
    async with memory_engine([WorkflowType(PAY)], clock) as engine:
        await engine.start("pay", workflow_id="p")
        first = await engine.send("p", "charged", {"id": 7}, idempotency_key="k-1")
        again = await engine.send("p", "charged", {"id": 7}, idempotency_key="k-1")
        assert (first.replayed, again.replayed, again.applied_version) == (False, True, 2)
        assert again.row.version == 2 and len(await engine.history("p")) == 2
        with pytest.raises(IdempotencyKeyReused):
            await engine.send("p", "charged", {"id": 8}, idempotency_key="k-1")
        with pytest.raises(InvalidInput):
            await engine.send("p", "charged", idempotency_key="has space")
        assert (await engine.history("p"))[-1].idempotency_key == "k-1"


async def test_starts_approvals_cancels_and_inputs_take_keys(clock: ManualClock) -> None:
    async with memory_engine([WorkflowType(PAY)], clock) as engine:
        a = (await engine.start("pay", {"n": 1}, idempotency_key="start-1")).row
        b = (await engine.start("pay", {"n": 1}, idempotency_key="start-1")).row
        assert a.id == b.id and a.id.startswith("idem-")
        with pytest.raises(IdempotencyKeyReused):
            await engine.start("pay", {"n": 2}, idempotency_key="start-1")
        first = (await engine.post_input(a.id, "doc", {"page": 1}, idempotency_key="in-1")).item
        again = await engine.post_input(a.id, "doc", {"page": 1}, idempotency_key="in-1")
        assert (again.item.id, again.created) == (first.id, False)
        with pytest.raises(IdempotencyKeyReused):
            await engine.post_input(a.id, "doc", {"page": 2}, idempotency_key="in-1")
        await engine.send(a.id, "fatal_error")
        with pytest.raises(WorkflowFinished):
            await engine.post_input(a.id, "doc", {"page": 3})


async def test_a_cancel_retried_with_its_key_applies_once(clock: ManualClock) -> None:
    job = (
        MachineBuilder("job")
        .state("working", initial=True)
        .state("cancelled", terminal=True)
        .event("cancel")
        .transition("cancel", "working", "cancelled")
        .build()
    )
    async with memory_engine([job], clock) as engine:
        await engine.start("job", workflow_id="j")
        row = (await engine.cancel("j", reason="stop", actor="ops", idempotency_key="c-1")).row
        again = (await engine.cancel("j", reason="stop", actor="ops", idempotency_key="c-1")).row
        assert row.state == again.state == "cancelled" and len(await engine.history("j")) == 2
        with pytest.raises(IdempotencyKeyReused):
            await engine.cancel("j", reason="other", actor="ops", idempotency_key="c-1")
        # A retry carries the version its first try read: the key, not the version, decides.
        retried = await engine.cancel(
            "j", reason="stop", actor="ops", idempotency_key="c-1", expected_version=1
        )
        assert retried.replayed and retried.applied_version == 2
        await engine.start("job", workflow_id="k")
        with pytest.raises(VersionConflict):
            await engine.cancel("k", reason="stop", expected_version=7)
        assert (await engine.get("k")).state == "working"


async def test_a_stale_cached_row_costs_a_reread_never_a_wrong_write(tmp_path: Path) -> None:
    counter = (
        MachineBuilder("counter")
        .state("on", initial=True)
        .event("tick")
        .state("off", terminal=True)
        .event("stop")
        .transition("tick", "on", "on")
        .transition("stop", "on", "off")
        .build()
    )
    path = tmp_path / "shared.db"
    async with (
        Engine(SQLiteStore(path), [counter]) as one,
        Engine(SQLiteStore(path), [counter]) as two,
    ):
        await one.start("counter", workflow_id="c")
        await one.send("c", "tick")  # one caches version 2
        await two.send("c", "tick")  # now at 3, unknown to one
        await two.send("c", "tick")
        row = (await one.send("c", "tick", {"n": 4})).row
        assert row.version == 5
        assert [t.version for t in await one.history("c")] == [1, 2, 3, 4, 5]
        await two.send("c", "stop")
        with pytest.raises(IllegalTransition):
            await one.send("c", "tick")  # illegal now: confirmed on a fresh read
        assert (await one.check("c")).version == 6


# -- the inbox --------------------------------------------------------------------------------


async def test_an_input_is_consumed_only_with_the_transition_of_the_run_that_took_it(
    clock: ManualClock,
) -> None:
    seen: list[tuple[str, dict[str, Any], int]] = []
    fail = [True]

    async def handler(run: Run) -> Next | None:
        item = await run.wait_input("answer", timeout=0)
        if item is None:
            return None  # idle until an input arrives
        seen.append((item.name, item.payload, item.id))
        if fail[0]:
            fail[0] = False
            raise TransientError("crashed before the transition")
        return Next("charged", context={"answer": item.payload})

    wtype = WorkflowType(PAY, {"charging": handler}, retry=RetryPolicy(jitter=0.0))
    async with memory_engine([wtype], clock) as engine:
        await engine.start("pay", workflow_id="p")
        worker = Worker(engine)
        await worker.run_until_idle()
        assert (await engine.get("p")).next_due_at is None  # idle
        posted = (await engine.post_input("p", "answer", {"ok": True})).item.id
        assert (await engine.get("p")).next_due_at == clock.now()  # the input woke it
        await worker.run_until_idle()
        clock.advance(10)
        await worker.run_until_idle()
        row = await engine.get("p")
        assert (row.state, row.context["answer"]) == ("paid", {"ok": True})
        assert seen == [("answer", {"ok": True}, posted)] * 2  # redelivered after the failure
        assert await engine.store.next_input("p") is None  # consumed with the transition


async def test_a_refused_cancel_is_in_the_rejections_log_like_any_refused_event(
    clock: ManualClock,
) -> None:
    async with memory_engine([WorkflowType(PAY)], clock) as engine:
        await engine.start("pay", workflow_id="p")  # PAY has no cancel edge
        with pytest.raises(IllegalTransition):
            await engine.cancel("p", reason="stop", actor="ops")
        [rejected] = await engine.store.rejections(clock.now() - 1)
        assert (rejected.event, rejected.code, rejected.actor) == (
            "cancel",
            "illegal_transition",
            "ops",
        )
