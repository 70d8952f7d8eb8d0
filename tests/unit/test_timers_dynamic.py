"""Recurring (``every``) and dynamic (``Engine.schedule``, ``run.schedule``) timers, on real
SQLite stores with a ManualClock; "restart" is a new Engine on the same database file."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from statewright import (
    Engine,
    IllegalTransition,
    InvalidInput,
    MachineBuilder,
    ManualClock,
    Next,
    Run,
    SQLiteStore,
    Worker,
    WorkflowType,
)
from statewright.definition.formats.document import from_dict, to_dict
from statewright.errors import DefinitionError, InvalidPayload, WorkflowFinished
from statewright.types import TimerSpec


def watch_machine(every: float = 10.0) -> Any:
    return (
        MachineBuilder("watch")
        .state("watching", initial=True, every={every: "tick"})
        .state("paused")
        .state("done", terminal=True)
        .event("tick")
        .event("pause")
        .event("resume")
        .event("finish")
        .event("remind", payload_schema={"type": "object", "required": ["n"]})
        .event("expire")
        .transition("tick", "watching", "watching")
        .transition("pause", "watching", "paused")
        .transition("resume", "paused", "watching")
        .transition("remind", ["watching", "paused"], "watching")
        .transition("expire", "*", "done")
        .transition("finish", "*", "done")
        .build()
    )


async def _engine(path: Path | str, clock: ManualClock, *types: WorkflowType) -> Engine:
    engine = Engine(SQLiteStore(path), list(types), clock=clock, rng=random.Random(1))
    await engine.open()
    return engine


async def _ticks(engine: Engine, wid: str, event: str = "tick") -> int:
    return sum(1 for t in await engine.history(wid) if t.event == event)


# -- recurring timers --------------------------------------------------------------------------


async def test_recurring_timer_fires_once_per_interval_and_stops_when_left(
    tmp_path: Path, clock: ManualClock
) -> None:
    engine = await _engine(tmp_path / "r.db", clock, WorkflowType(watch_machine()))
    t0 = clock.now()
    await engine.start("watch", workflow_id="w")
    worker = Worker(engine)
    for _ in range(5):
        clock.advance(10)
        await worker.run_until_idle()
    assert await _ticks(engine, "w") == 5
    [timer] = await engine.timers("w")
    assert (timer.due_at, timer.every) == (t0 + 60, 10.0)
    await engine.send("w", "pause")
    assert await engine.timers("w") == []
    clock.advance(100)
    await worker.run_until_idle()
    assert await _ticks(engine, "w") == 5
    assert (await engine.get("w")).next_due_at is None
    await engine.check("w")
    await engine.close()


async def test_recurring_timer_skips_missed_intervals(tmp_path: Path, clock: ManualClock) -> None:
    engine = await _engine(tmp_path / "r.db", clock, WorkflowType(watch_machine()))
    t0 = clock.now()
    await engine.start("watch", workflow_id="w")
    clock.advance(100.5)  # ten intervals missed at once
    await Worker(engine).run_until_idle()
    assert await _ticks(engine, "w") == 1  # one firing, never a burst
    [timer] = await engine.timers("w")
    assert timer.due_at == t0 + 110  # the next one on the original grid
    clock.advance(9.4)
    await Worker(engine).run_until_idle()
    assert await _ticks(engine, "w") == 1
    clock.advance(0.1)
    await Worker(engine).run_until_idle()
    assert await _ticks(engine, "w") == 2
    await engine.close()


async def test_refused_recurring_tick_is_logged_rearmed_and_does_not_fail(
    tmp_path: Path, clock: ManualClock
) -> None:
    machine = (
        MachineBuilder("gate")
        .state("waiting", initial=True, every={5: "probe"})
        .state("open", terminal=True)
        .event("probe")
        .transition("probe", "waiting", "open", guard="context.ready == True")
        .build()
    )
    engine = await _engine(tmp_path / "g.db", clock, WorkflowType(machine))
    t0 = clock.now()
    await engine.start("gate", {"ready": False}, workflow_id="g")
    clock.advance(5)
    await Worker(engine).run_until_idle()
    row = await engine.get("g")
    assert (row.state, row.terminal, row.version) == ("waiting", False, 1)
    [timer] = await engine.timers("g")
    assert timer.due_at == t0 + 10  # consumed and re-armed
    rejected = await engine.store.rejections(0)
    assert [(r.event, r.code, r.actor) for r in rejected] == [
        ("probe", "illegal_transition", "timer")
    ]
    await engine.patch_context("g", {"ready": True}, actor="op", reason="dependency ready")
    clock.advance(5)
    await Worker(engine).run_until_idle()
    row = await engine.get("g")
    assert (row.state, row.terminal) == ("open", True)
    assert await engine.timers("g") == []
    await engine.close()


async def test_recurring_timer_runs_the_handler_once_per_tick(
    tmp_path: Path, clock: ManualClock
) -> None:
    """A tick that stays is a self-transition: the handler runs once after it, never twice,
    and a tick that came due while the handler was owed a run never starves it."""
    runs: list[float] = []

    def handler(run: Run) -> None:
        runs.append(run.now())
        return None  # idle until the next tick

    engine = await _engine(
        tmp_path / "h.db", clock, WorkflowType(watch_machine(), handlers={"watching": handler})
    )
    await engine.start("watch", workflow_id="w")
    worker = Worker(engine)
    await worker.run_until_idle()
    assert len(runs) == 1
    for _ in range(3):
        clock.advance(10)
        await worker.run_until_idle()
    assert (len(runs), await _ticks(engine, "w")) == (4, 3)
    # Started, then not run until three intervals passed: the handler runs first, then one
    # tick (missed ones skipped), then the handler once more.
    await engine.start("watch", workflow_id="late")
    clock.advance(35)
    before = len(runs)
    await worker.run_until_idle()
    assert await _ticks(engine, "late") == 1
    assert len(runs) - before == 1 + 1 + 1  # "w" ticked too (one handler run), "late" twice
    await engine.close()


# -- definitions -------------------------------------------------------------------------------


def test_every_round_trips_and_is_validated() -> None:
    machine = watch_machine(2.5)
    doc = to_dict(machine)
    [watching] = [s for s in doc["states"] if s["name"] == "watching"]
    assert watching["every"] == {"2.5": "tick"}
    assert from_dict(doc).states["watching"].every == {2.5: "tick"}
    bad = (
        MachineBuilder("bad")
        .state("a", initial=True, every={0: "tick", 5: "nope", 6: "go"})
        .state("b", terminal=True)
        .event("tick")
        .event("go")
        .transition("go", "a", "b")
        .transition("tick", "b", "b")
    )
    with pytest.raises(DefinitionError) as info:
        bad.build()
    codes = {p.code for p in info.value.problems}
    assert {"invalid_every_interval", "every_unknown_event"} <= codes


# -- dynamic timers ----------------------------------------------------------------------------


async def test_scheduled_timer_survives_a_restart(tmp_path: Path, clock: ManualClock) -> None:
    path = tmp_path / "d.db"
    engine = await _engine(path, clock, WorkflowType(watch_machine(3600)))
    await engine.start("watch", workflow_id="w")
    rec = await engine.schedule("w", "remind", after=90, payload={"n": 1}, actor="op")
    assert (rec.key, rec.event, rec.keep, rec.scheduled_by) == ("remind", "remind", False, "op")
    assert (await engine.get("w")).version == 1  # not a transition
    await engine.close()
    clock.advance(90)
    engine = await _engine(path, clock, WorkflowType(watch_machine(3600)))
    await Worker(engine).run_until_idle()
    [fired] = [t for t in await engine.history("w") if t.event == "remind"]
    # The transition names who scheduled it (kept with the timer across the restart).
    assert (fired.payload, fired.actor) == ({"n": 1}, "timer for op")
    assert [t.key for t in await engine.timers("w")] == [None]  # only the state's own
    await engine.close()


async def test_cancelled_timer_never_fires(tmp_path: Path, clock: ManualClock) -> None:
    engine = await _engine(tmp_path / "c.db", clock, WorkflowType(watch_machine(3600)))
    await engine.start("watch", workflow_id="w")
    # A type registered without handlers makes the state it enters due: the worker finds
    # nothing to run and lets it wait for its timers.
    await Worker(engine).run_until_idle()
    await engine.schedule("w", "finish", after=30, key="deadline")
    assert await engine.cancel_timer("w", "deadline")
    assert not await engine.cancel_timer("w", "deadline")
    assert (await engine.get("w")).next_due_at == clock.now() + 3600
    clock.advance(60)
    await Worker(engine).run_until_idle()
    assert (await engine.get("w")).state == "watching"
    await engine.close()


async def test_same_key_replaces_the_pending_timer(tmp_path: Path, clock: ManualClock) -> None:
    engine = await _engine(tmp_path / "k.db", clock, WorkflowType(watch_machine(3600)))
    t0 = clock.now()
    await engine.start("watch", workflow_id="w")
    await engine.schedule("w", "finish", after=30, key="deadline")
    await engine.schedule("w", "finish", after=30, key="deadline")  # a client's retry
    await engine.schedule("w", "finish", at=t0 + 120, key="deadline")  # extended
    assert [(t.key, t.due_at) for t in await engine.timers("w") if t.key] == [
        ("deadline", t0 + 120)
    ]
    clock.advance(60)
    await Worker(engine).run_until_idle()
    assert (await engine.get("w")).state == "watching"
    clock.advance(60)
    await Worker(engine).run_until_idle()
    assert (await engine.get("w")).state == "done"
    assert await _ticks(engine, "w", "finish") == 1
    await engine.close()


async def test_kept_timer_survives_leaving_the_state_and_dies_at_the_end(
    tmp_path: Path, clock: ManualClock
) -> None:
    engine = await _engine(tmp_path / "keep.db", clock, WorkflowType(watch_machine(3600)))
    await engine.start("watch", workflow_id="w")
    await engine.schedule("w", "expire", after=100, keep=True)
    await engine.schedule("w", "remind", after=100, payload={"n": 1})  # not kept
    await engine.send("w", "pause")
    assert [t.key for t in await engine.timers("w")] == ["expire"]
    clock.advance(100)
    await Worker(engine).run_until_idle()
    assert (await engine.get("w")).state == "done"  # fired in the later state

    await engine.start("watch", workflow_id="w2")
    await engine.schedule("w2", "remind", after=100, payload={"n": 2}, keep=True)
    await engine.send("w2", "finish")
    assert await engine.timers("w2") == []  # a terminal state clears even kept timers
    await engine.close()


async def test_a_kept_timer_fires_once_even_when_its_event_leaves_the_state(
    tmp_path: Path, clock: ManualClock
) -> None:
    """Regression: on SQLite, a kept timer whose event moved the workflow to another state
    stayed pending and fired again there."""
    engine = await _engine(tmp_path / "once.db", clock, WorkflowType(watch_machine(3600)))
    await engine.start("watch", workflow_id="w")
    await engine.send("w", "pause")
    await engine.schedule("w", "remind", after=100, payload={"n": 1}, keep=True)
    clock.advance(100)
    await Worker(engine).run_until_idle()
    assert (await engine.get("w")).state == "watching"  # paused -> watching by the reminder
    assert [t.event for t in await engine.timers("w")] == ["tick"]  # watching's own
    clock.advance(1000)
    await Worker(engine).run_until_idle()
    assert await _ticks(engine, "w", "remind") == 1
    await engine.close()


async def test_schedule_is_checked_up_front(tmp_path: Path, clock: ManualClock) -> None:
    engine = await _engine(tmp_path / "v.db", clock, WorkflowType(watch_machine()))
    await engine.start("watch", workflow_id="w")
    with pytest.raises(IllegalTransition):
        await engine.schedule("w", "nope", after=1)
    with pytest.raises(IllegalTransition):
        await engine.schedule("w", "resume", after=1)  # no edge from "watching"
    with pytest.raises(InvalidPayload):
        await engine.schedule("w", "remind", after=1, payload={})
    with pytest.raises(InvalidInput):
        await engine.schedule("w", "finish", after=1, at=clock.now())
    with pytest.raises(InvalidInput):
        await engine.schedule("w", "finish")
    await engine.schedule("w", "resume", after=1, keep=True)  # may fire in a later state
    await engine.send("w", "finish")
    with pytest.raises(WorkflowFinished):
        await engine.schedule("w", "finish", after=1)
    await engine.close()


async def test_schedule_racing_a_transition_lands_in_the_new_visit(
    tmp_path: Path, clock: ManualClock
) -> None:
    """A schedule read in one visit whose write comes after a transition: the conditioned
    insert refuses, the workflow is read again, and the timer is armed in the visit it is in
    now (checked again there), never left behind in a state it was not meant for."""
    engine = await _engine(tmp_path / "race.db", clock, WorkflowType(watch_machine(3600)))
    await engine.start("watch", workflow_id="w")
    read = await engine.get("w")
    await engine.send("w", "pause")
    store = engine.store
    spec = TimerSpec(clock.now() + 5, "remind", {"n": 1}, key="remind")
    stale = await store.schedule_timer(
        "w", spec, state=read.state, entered_at=read.state_entered_at, at=clock.now()
    )
    assert stale is None and await store.timers("w") == []
    # Through the engine, the race is absorbed: moved between its read and its write.
    real = store.schedule_timer
    moved = False

    async def racing(*args: Any, **kw: Any) -> Any:
        nonlocal moved
        if not moved:
            moved = True
            clock.advance(1)
            await engine.send("w", "resume")  # paused -> watching: a new visit
        return await real(*args, **kw)

    store.schedule_timer = racing  # type: ignore[method-assign]
    rec = await engine.schedule("w", "remind", after=5, payload={"n": 1})
    row = await engine.get("w")
    assert row.state == "watching" and moved
    assert [t.key for t in await store.timers("w") if t.key] == [rec.key]
    await engine.send("w", "pause")  # leaving clears it
    assert await store.timers("w") == []
    await engine.close()


async def test_run_schedule_is_armed_with_the_outcome_in_the_target_state(
    tmp_path: Path, clock: ManualClock
) -> None:
    machine = (
        MachineBuilder("job")
        .state("working", initial=True)
        .state("waiting")
        .state("done", terminal=True)
        .event("wait")
        .event("nudge")
        .event("finish")
        .transition("wait", "working", "waiting")
        .transition("nudge", "waiting", "waiting")
        .transition("finish", "*", "done")
        .build()
    )

    async def work(run: Run) -> Next:
        run.schedule("nudge", after=60)
        run.schedule("finish", after=600, key="deadline", keep=True)
        run.schedule("finish", after=900, key="deadline", keep=True)  # the latest wins
        return Next("wait")

    engine = await _engine(
        tmp_path / "run.db", clock, WorkflowType(machine, handlers={"working": work})
    )
    t0 = clock.now()
    await engine.start("job", workflow_id="j")
    await Worker(engine).run_until_idle()
    row = await engine.get("j")
    assert row.state == "waiting"
    assert [(t.key, t.due_at) for t in await engine.timers("j")] == [
        ("nudge", t0 + 60),
        ("deadline", t0 + 900),
    ]
    assert row.next_due_at == t0 + 60
    clock.advance(900)
    await Worker(engine).run_until_idle()
    assert (await engine.get("j")).state == "done"
    await engine.close()


async def test_sync_handler_schedules_while_staying_idle(
    tmp_path: Path, clock: ManualClock
) -> None:
    calls: list[int] = []

    def handler(run: Any) -> None:  # a SyncRun
        calls.append(1)
        if len(calls) == 1:
            run.schedule("finish", after=30, key="later")
        return None

    engine = await _engine(
        tmp_path / "idle.db",
        clock,
        WorkflowType(watch_machine(3600), handlers={"paused": handler}),
    )
    await engine.start("watch", workflow_id="w")
    await engine.send("w", "pause")
    await Worker(engine).run_until_idle()
    assert [t.key for t in await engine.timers("w")] == ["later"]
    clock.advance(30)
    await Worker(engine).run_until_idle()
    assert (await engine.get("w")).state == "done"
    assert len(calls) == 1
    await engine.close()


async def test_a_crashed_handler_leaves_no_timer(tmp_path: Path, clock: ManualClock) -> None:
    crashes = 0

    async def work(run: Run) -> Next:
        nonlocal crashes
        run.schedule("finish", after=60, key="deadline")
        if crashes == 0:
            crashes += 1
            raise RuntimeError("boom after scheduling")
        return Next("pause")

    engine = await _engine(
        tmp_path / "crash.db",
        clock,
        WorkflowType(watch_machine(3600), handlers={"watching": work}),
    )
    await engine.start("watch", workflow_id="w")
    await Worker(engine).run_until_idle()
    # The run failed (fatal: parked): nothing it scheduled was written.
    row = await engine.get("w")
    assert (row.state, row.parked is not None) == ("watching", True)
    assert [t.key for t in await engine.timers("w")] == [None]  # the state's own tick only
    await engine.resume("w", actor="op", reason="fixed")
    await Worker(engine).run_until_idle()
    # The re-run scheduled again, once, with the transition that left the state.
    assert (await engine.get("w")).state == "paused"
    assert [t.key for t in await engine.timers("w")] == ["deadline"]
    await engine.close()
