"""Fewer commits per state (issue 13, item 1), on both stores: a handler's last step's *done*
record commits with the transition it returns; a worker whose transition enters a state with
a handler runs that handler next under the same claim (bounded)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from statewright import (
    Applied,
    Engine,
    MachineBuilder,
    ManualClock,
    Next,
    Run,
    Worker,
    WorkflowType,
)
from statewright.definition.machine import Machine
from statewright.engine.recovery import recover
from statewright.errors import StoreError
from statewright.store import SQLiteStore
from statewright.store.postgres import PostgresStore
from statewright.store.protocol import FullStore as Store
from statewright.types import StepFinish

OWNER = "vm-that-is-gone:999999:dead"


def chain(states: int) -> Machine:
    b = MachineBuilder("chain")
    for i in range(states):
        b.state(f"s{i}", initial=i == 0)
    b.state("done", terminal=True).state("cancelled", terminal=True).state("failed", terminal=True)
    b.event("next").event("other").event("cancel").event("fatal_error")
    for i in range(states):
        b.transition("next", f"s{i}", f"s{i + 1}" if i + 1 < states else "done")
    b.transition("other", [f"s{i}" for i in range(states)], "done")
    b.transition("cancel", [f"s{i}" for i in range(states)], "cancelled")
    b.transition("fatal_error", [f"s{i}" for i in range(states)], "failed")
    return b.build()


class Calls:
    """The external system: counts calls per key."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}
        self.fences: list[tuple[str, int]] = []

    def action(self, key: Any) -> dict[str, Any]:
        self.calls[str(key)] = self.calls.get(str(key), 0) + 1
        self.fences.append((key.step, key.fencing_token))
        return {"key": str(key)}


def stepping(calls: Calls, states: int, **step_kw: Any) -> WorkflowType:
    async def handler(run: Run) -> Next:
        await run.step(run.state, calls.action, **step_kw)
        return Next("next")

    return WorkflowType(chain(states), {f"s{i}": handler for i in range(states)})


@pytest.fixture(params=["sqlite", "postgres"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Store]:
    if request.param == "sqlite":
        return lambda: SQLiteStore(tmp_path / "carry.db")
    dsn = request.getfixturevalue("pg_dsn")
    return lambda: PostgresStore(dsn)


@pytest.fixture
async def opened(
    make_store: Callable[[], Store],
) -> AsyncIterator[Callable[[list[WorkflowType]], Engine]]:
    engines: list[Engine] = []

    def open_engine(types: list[WorkflowType]) -> Engine:
        engine = Engine(make_store(), types, clock=ManualClock(1000.0))
        engines.append(engine)
        return engine

    yield open_engine
    for engine in engines:
        await engine.close()


def count_calls(store: Store, name: str) -> list[Any]:
    """Record the calls of one store method (its arguments), still calling it."""
    seen: list[Any] = []
    real = getattr(store, name)

    async def wrapped(*args: Any, **kw: Any) -> Any:
        seen.append(args)
        return await real(*args, **kw)

    setattr(store, name, wrapped)
    return seen


async def test_done_record_commits_with_the_transition(
    opened: Callable[[list[WorkflowType]], Engine],
) -> None:
    calls = Calls()
    engine = opened([stepping(calls, 3)])
    await engine.open()
    await engine.start("chain", workflow_id="w")
    finishes = count_calls(engine.store, "step_finish")
    transitions = count_calls(engine.store, "apply_transition")
    await Worker(engine, concurrency=4).run_until_idle()
    row = await engine.get("w")
    assert row.state == "done"
    assert calls.calls == {"w:s0": 1, "w:s1": 1, "w:s2": 1}
    assert finishes == []  # every done record rode with its transition
    carried = [args[0].step_finish for args in transitions]
    assert [f.key if f else None for f in carried] == ["w:s0", "w:s1", "w:s2"]
    steps = {s.key: s for s in await engine.store.steps("w")}
    assert {k: s.status for k, s in steps.items()} == dict.fromkeys(calls.calls, "done")
    assert steps["w:s1"].result == {"key": "w:s1"}
    assert [t.event for t in await engine.store.history("w")] == ["$start", "next", "next", "next"]


async def test_one_commit_fewer_per_state_on_sqlite(tmp_path: Path) -> None:
    calls = Calls()
    store = SQLiteStore(tmp_path / "commits.db")
    async with Engine(store, [stepping(calls, 1)], clock=ManualClock(1000.0)) as engine:
        # A step alone: executing + done is two commits; kept for the transition, one.
        for wid, carry, commits in (("a", False, 2), ("b", True, 1)):
            await engine.start("chain", workflow_id=wid)
            [claimed] = await store.claim_due("me", engine.clock.now(), 30.0, 1)
            run = Run(engine.runtime, engine.type_of("chain"), claimed)
            run.carry_done = carry
            before = store.conn.commits
            await run.step("x", calls.action)
            assert store.conn.commits - before == commits
            assert claimed.id == wid
            await store.release_lease(wid, claimed.lease)  # type: ignore[arg-type]
            await engine.send(wid, "other")
        # Through a worker, one state with one step: the claim, the step's executing record,
        # the transition with its done record, and the empty claim that ends the loop.
        await engine.start("chain", workflow_id="w")
        before = store.conn.commits
        await Worker(engine, concurrency=1).run_until_idle()
        assert store.conn.commits - before == 4
        assert (await engine.get("w")).state == "done"


async def test_refused_transition_still_writes_done(
    opened: Callable[[list[WorkflowType]], Engine],
) -> None:
    """An external event moves the workflow while the handler runs: its transition loses the
    compare-and-swap, and the finished step is recorded done all the same."""
    calls = Calls()
    engine: Engine

    async def handler(run: Run) -> Next:
        await run.step("pay", calls.action)
        await engine.send(run.id, "other")  # moves it under the handler's feet
        return Next("next")

    engine = opened([WorkflowType(chain(2), {"s0": handler})])
    await engine.open()
    await engine.start("chain", workflow_id="w")
    await Worker(engine).run_until_idle()
    row = await engine.get("w")
    assert row.state == "done" and row.lease_owner is None
    [step] = await engine.store.steps("w")
    assert (step.status, step.result) == ("done", {"key": "w:pay"})


async def test_illegal_result_still_writes_done(
    opened: Callable[[list[WorkflowType]], Engine],
) -> None:
    calls = Calls()

    async def handler(run: Run) -> Next:
        await run.step("pay", calls.action)
        return Next("no-such-event")

    engine = opened([WorkflowType(chain(2), {"s0": handler})])
    await engine.open()
    await engine.start("chain", workflow_id="w")
    await Worker(engine).run_until_idle()
    assert (await engine.get("w")).state == "failed"
    [step] = await engine.store.steps("w")
    assert step.status == "done"
    assert calls.calls == {"w:pay": 1}


async def test_anything_after_the_step_writes_it_first(
    opened: Callable[[list[WorkflowType]], Engine],
) -> None:
    """A second step, progress, an input read, a failure: the pending done record is written
    on its own first (the ledger shows it done while the handler is still running)."""
    calls = Calls()
    seen: list[str] = []
    engine: Engine

    async def handler(run: Run) -> Next:
        await run.step("a", calls.action)
        assert run.pending_finish is not None
        await run.progress(done=1)
        seen.append((await engine.store.get_step("w:a")).status)  # type: ignore[union-attr]
        await run.step("b", calls.action)
        await run.next_input()
        seen.append((await engine.store.get_step("w:b")).status)  # type: ignore[union-attr]
        await run.step("c", calls.action)
        raise RuntimeError("boom after c")

    engine = opened([WorkflowType(chain(1), {"s0": handler})])
    await engine.open()
    await engine.start("chain", workflow_id="w")
    await Worker(engine).run_once()
    assert seen == ["done", "done"]
    steps = {s.step: s.status for s in await engine.store.steps("w")}
    assert steps == {"a": "done", "b": "done", "c": "done"}


async def test_store_failure_on_the_transition_writes_done_on_its_own(
    opened: Callable[[list[WorkflowType]], Engine],
) -> None:
    calls = Calls()
    engine = opened([stepping(calls, 1)])
    await engine.open()
    await engine.start("chain", workflow_id="w")
    store = engine.store
    real = store.apply_transition

    async def broken(write: Any) -> Any:
        if write.lease is not None:
            raise StoreError("the store fell over")
        return await real(write)

    store.apply_transition = broken  # type: ignore[method-assign]
    await Worker(engine).run_once()
    store.apply_transition = real  # type: ignore[method-assign]
    [step] = await store.steps("w")
    assert step.status == "done"
    assert (await engine.get("w")).state == "s0"


@pytest.mark.parametrize("how", ["reconciled", "safe_to_repeat", "parked"])
async def test_crash_between_call_and_transition_is_reconciled(
    opened: Callable[[list[WorkflowType]], Engine], how: str
) -> None:
    """The worker dies after the action returned and before the transition committed: the
    step is left *executing*, and the next run reconciles it exactly as after a crash
    during the call."""
    calls = Calls()
    lookups: list[str] = []

    def lookup(key: Any) -> Any:
        lookups.append(str(key))
        return Applied({"key": str(key), "from": "lookup"})

    options: dict[str, dict[str, Any]] = {
        "reconciled": {"reconcile": lookup},
        "safe_to_repeat": {"safe_to_repeat": True},
        "parked": {},
    }
    kw = options[how]
    engine = opened([stepping(calls, 1, **kw)])
    await engine.open()
    await engine.start("chain", workflow_id="w")
    [claimed] = await engine.store.claim_due(OWNER, engine.clock.now(), 30.0, 10)
    run = Run(engine.runtime, engine.type_of("chain"), claimed)
    run.carry_done = True
    assert await run.step("s0", calls.action) == {"key": "w:s0"}
    assert isinstance(run.pending_finish, StepFinish)
    # ... and the process is killed here: no transition, nothing flushed.
    [step] = await engine.store.steps("w")
    assert step.status == "executing"
    engine.clock.advance(31.0)  # type: ignore[attr-defined]
    await recover(engine)  # the dead worker's lease expired: released, run again
    await Worker(engine).run_until_idle()
    row = await engine.get("w")
    [step] = await engine.store.steps("w")
    if how == "reconciled":
        assert row.state == "done" and lookups == ["w:s0"]
        assert calls.calls == {"w:s0": 1}
        assert step.result == {"key": "w:s0", "from": "lookup"}
    elif how == "safe_to_repeat":
        assert row.state == "done" and calls.calls == {"w:s0": 2}
    else:
        assert row.state == "s0" and row.parked == "step_outcome_unknown"
        assert calls.calls == {"w:s0": 1} and step.status == "executing"


async def test_chained_handlers_run_under_one_claim(
    opened: Callable[[list[WorkflowType]], Engine],
) -> None:
    calls = Calls()
    engine = opened([stepping(calls, 5)])
    await engine.open()
    await engine.start("chain", workflow_id="w")
    claims = count_calls(engine.store, "claim_due")
    worker = Worker(engine, concurrency=2)
    assert await worker.run_once() == 1
    assert (await engine.get("w")).state == "done"
    assert len(claims) == 1  # one claim ran all five handlers
    assert len({fence for _, fence in calls.fences}) == 1  # the same fencing token throughout
    assert worker.processed == 5
    assert (await engine.get("w")).lease_owner is None


async def test_a_chain_reads_timers_only_when_one_may_be_due(
    opened: Callable[[list[WorkflowType]], Engine],
) -> None:
    """A row the claim's own transition returned, whose next_due_at is that write's time, had
    no timer due: the next handler runs without reading timers. A handler that armed one
    (due at once here: the clock stands still) has it read and fired first."""
    calls = Calls()

    async def handler(run: Run) -> Next:
        await run.step(run.state, calls.action)
        if run.state == "s1" and run.id == "armed":
            run.schedule("other", after=0)  # due at the transition's own instant
        return Next("next")

    engine = opened([WorkflowType(chain(5), {f"s{i}": handler for i in range(5)})])
    await engine.open()
    await engine.start("chain", workflow_id="plain")
    reads = count_calls(engine.store, "timers")
    assert await Worker(engine).run_once() == 1
    assert (await engine.get("plain")).state == "done"
    assert reads == [("plain",)]  # the claimed row's; none in the chain of four after it

    await engine.start("chain", workflow_id="armed")
    reads.clear()
    assert await Worker(engine).run_once() == 1
    row = await engine.get("armed")
    assert row.state == "done"
    assert [e.event for e in await engine.history("armed")][-1] == "other"
    assert "armed:s2" not in calls.calls  # the timer fired before s2's handler could run
    assert reads == [("armed",), ("armed",)]


async def test_a_chain_is_bounded(opened: Callable[[list[WorkflowType]], Engine]) -> None:
    calls = Calls()
    engine = opened([stepping(calls, 5)])
    await engine.open()
    await engine.start("chain", workflow_id="w")
    worker = Worker(engine, chain_limit=3)
    assert await worker.run_once() == 1
    row = await engine.get("w")
    assert row.state == "s3" and row.lease_owner is None  # released after three runs
    assert await worker.run_until_idle() == 1
    assert (await engine.get("w")).state == "done"
    fences = [fence for _, fence in calls.fences]
    assert fences[:3] == [fences[0]] * 3 and fences[3:] == [fences[0] + 1] * 2


async def test_a_chain_stops_when_the_worker_stops(
    opened: Callable[[list[WorkflowType]], Engine],
) -> None:
    calls = Calls()
    worker: Worker

    async def first(run: Run) -> Next:
        await run.step("s0", calls.action)
        worker.stop()
        return Next("next")

    async def later(run: Run) -> Next:
        await run.step(run.state, calls.action)
        return Next("next")

    engine = opened([WorkflowType(chain(3), {"s0": first, "s1": later, "s2": later})])
    await engine.open()
    await engine.start("chain", workflow_id="w")
    worker = Worker(engine)
    await worker.run_once()
    row = await engine.get("w")
    assert row.state == "s1" and row.lease_owner is None and row.next_due_at is not None
    assert calls.calls == {"w:s0": 1}


async def test_cancel_requested_during_a_chain(
    opened: Callable[[list[WorkflowType]], Engine],
) -> None:
    """A cancel requested while s1's handler runs is delivered before s2's handler starts,
    under the same claim."""
    calls = Calls()
    engine: Engine

    async def handler(run: Run) -> Next:
        await run.step(run.state, calls.action)
        if run.state == "s1":
            await engine.cancel(run.id, reason="enough")  # recorded: a worker holds it
        return Next("next")

    engine = opened([WorkflowType(chain(4), {f"s{i}": handler for i in range(4)})])
    await engine.open()
    await engine.start("chain", workflow_id="w")
    claims = count_calls(engine.store, "claim_due")
    await Worker(engine).run_once()
    row = await engine.get("w")
    assert row.state == "cancelled" and row.lease_owner is None
    assert calls.calls == {"w:s0": 1, "w:s1": 1}
    assert len(claims) == 1
    [*_, last] = await engine.store.history("w")
    assert (last.event, last.payload) == ("cancel", {"reason": "enough"})
