"""Retry backoff and approval timeouts are durable: they fire after a restart, on time.

Time comes from a ManualClock; "restart" is a new Engine on the same database file.
"""

from __future__ import annotations

import random
from pathlib import Path

from statewright import (
    Engine,
    MachineBuilder,
    ManualClock,
    Next,
    RetryPolicy,
    Run,
    SQLiteStore,
    TransientError,
    Worker,
    WorkflowType,
)
from statewright.definition.builtin.agent_task import agent_task_machine

POLICY = RetryPolicy(max_attempts=3, base_delay=10, multiplier=2, jitter=0)


class Flaky:
    """Fails with a transient error ``failures`` times, then completes."""

    def __init__(self, failures: int, retry_after: float | None = None) -> None:
        self.failures = failures
        self.retry_after = retry_after
        self.calls = 0

    def __call__(self, run: Run) -> Next:
        self.calls += 1
        if self.calls <= self.failures:
            raise TransientError("503 from upstream", retry_after=self.retry_after)
        return Next("complete", context={"result": "ok"})


def agent_type(handler: object, **kw: object) -> WorkflowType:
    return WorkflowType(
        agent_task_machine(**kw),  # type: ignore[arg-type]
        handlers={"running": handler, "planned": lambda run: "start"},  # type: ignore[dict-item]
        retry=POLICY,
        recovery={"running": "retry"},
    )


async def _run(path: Path, clock: ManualClock, wtype: WorkflowType) -> Engine:
    engine = Engine(SQLiteStore(path), [wtype], clock=clock, rng=random.Random(1))
    await engine.open()
    await Worker(engine).run_until_idle()
    return engine


async def test_backoff_survives_a_restart_and_fires_on_time(tmp_path: Path) -> None:
    clock, path, flaky = ManualClock(), tmp_path / "r.db", Flaky(failures=2)
    t0 = clock.now()
    engine = await _run(path, clock, agent_type(flaky))
    await engine.start("agent_task", workflow_id="t")
    await Worker(engine).run_until_idle()
    row = await engine.get("t")
    assert (row.state, row.attempts) == ("retrying", 1)
    [timer] = await engine.store.timers("t")
    assert (timer.event, timer.due_at) == ("retry", t0 + 10)
    await engine.close()  # the process stops

    clock.advance(9.9)
    engine = await _run(path, clock, agent_type(flaky))
    assert (await engine.get("t")).state == "retrying"  # not yet due
    clock.advance(0.1)
    await Worker(engine).run_until_idle()
    row = await engine.get("t")
    assert (row.state, row.attempts) == ("retrying", 2)  # retried, failed again
    assert (await engine.store.timers("t"))[0].due_at == clock.now() + 20  # doubled
    await engine.close()

    clock.advance(20)
    engine = await _run(path, clock, agent_type(flaky))
    row = await engine.get("t")
    assert (row.state, row.attempts, row.context) == ("done", 0, {"result": "ok"})
    assert flaky.calls == 3
    events = [h.event for h in await engine.history("t")]
    assert events == [
        "$start",
        "start",
        "error_transient",
        "retry",
        "error_transient",
        "retry",
        "complete",
    ]
    await engine.check("t")
    await engine.close()


async def test_retry_after_is_honoured(tmp_path: Path, clock: ManualClock) -> None:
    engine = await _run(tmp_path / "r.db", clock, agent_type(Flaky(1, retry_after=120)))
    await engine.start("agent_task", workflow_id="t")
    await Worker(engine).run_until_idle()
    [timer] = await engine.store.timers("t")
    assert timer.due_at == clock.now() + 120
    [*_, last] = await engine.history("t")
    assert last.payload["retry_after"] == 120
    await engine.close()


async def test_retry_budget_is_durable_and_ends_in_failed(tmp_path: Path) -> None:
    clock, path, flaky = ManualClock(), tmp_path / "r.db", Flaky(failures=99)
    engine = await _run(path, clock, agent_type(flaky))
    await engine.start("agent_task", workflow_id="t")
    for _ in range(5):  # restart between every attempt: the counter must not reset
        await Worker(engine).run_until_idle()
        await engine.close()
        clock.advance(1000)
        engine = await _run(path, clock, agent_type(flaky))
    row = await engine.get("t")
    assert row.state == "failed" and row.terminal
    assert flaky.calls == POLICY.max_attempts + 1
    last = (await engine.history("t"))[-1]
    assert (last.event, last.payload["attempt"], last.payload["max_attempts"]) == (
        "error_transient",
        4,
        3,
    )
    await engine.close()


async def test_in_place_retry_without_a_retry_state(tmp_path: Path, clock: ManualClock) -> None:
    machine = (
        MachineBuilder("job")
        .state("work", initial=True)
        .state("ok", terminal=True)
        .event("finished")
        .transition("finished", "work", "ok")
        .build()
    )
    calls: list[float] = []

    def handler(run: Run) -> str:
        calls.append(run.now())
        if len(calls) < 3:
            raise TimeoutError("slow upstream")
        return "finished"

    wtype = WorkflowType(machine, {"work": handler}, retry=POLICY)
    engine = await _run(tmp_path / "j.db", clock, wtype)
    await engine.start("job", workflow_id="j")
    await Worker(engine).run_until_idle()
    row = await engine.get("j")
    assert (row.state, row.attempts, row.next_due_at) == ("work", 1, clock.now() + 10)
    assert row.last_error == "TimeoutError: slow upstream"
    clock.advance(10)
    await Worker(engine).run_until_idle()
    clock.advance(20)
    await Worker(engine).run_until_idle()
    row = await engine.get("j")
    assert (row.state, row.attempts, row.last_error) == ("ok", 0, None)
    assert [c - calls[0] for c in calls] == [0, 10, 30]
    await engine.close()


async def test_fatal_error_without_a_fail_edge_parks_and_is_stuck(
    tmp_path: Path, clock: ManualClock
) -> None:
    machine = (
        MachineBuilder("job")
        .state("work", initial=True, stuck_after=60)
        .state("ok", terminal=True)
        .event("finished")
        .transition("finished", "work", "ok")
        .build()
    )

    def handler(run: Run) -> str:
        raise ValueError("bad data")

    engine = await _run(tmp_path / "j.db", clock, WorkflowType(machine, {"work": handler}))
    await engine.start("job", workflow_id="j")
    await Worker(engine).run_until_idle()
    row = await engine.get("j")
    assert (row.state, row.next_due_at, row.last_error) == ("work", None, "ValueError: bad data")
    # Parked: stuck from the moment it parks, not only past its state's threshold.
    [stuck] = await engine.stuck()
    assert (stuck.workflow.id, stuck.parked, stuck.action) == ("j", "fatal_error", "resume")
    assert stuck.age < stuck.threshold == 60
    clock.advance(61)
    [stuck] = await engine.stuck()
    assert stuck.workflow.id == "j" and stuck.threshold == 60
    await engine.close()


async def test_approval_reminder_and_timeout_fire_after_restart(tmp_path: Path) -> None:
    clock, path = ManualClock(), tmp_path / "a.db"
    wtype = agent_type(
        lambda run: "request_approval", approval_timeout=100.0, approval_reminder=60.0
    )
    t0 = clock.now()
    engine = await _run(path, clock, wtype)
    await engine.start("agent_task", workflow_id="a")
    await Worker(engine).run_until_idle()
    assert (await engine.get("a")).state == "paused"
    assert [(t.event, t.due_at) for t in await engine.store.timers("a")] == [
        ("approval_reminder", t0 + 60),
        ("approval_timeout", t0 + 100),
    ]
    await engine.close()

    clock.advance(61)
    engine = await _run(path, clock, wtype)
    row = await engine.get("a")
    assert row.state == "paused"  # the reminder is a self-transition: timeout still pending
    assert [(t.event, t.due_at) for t in await engine.store.timers("a")] == [
        ("approval_timeout", t0 + 100)
    ]
    await engine.close()

    clock.advance(38)
    engine = await _run(path, clock, wtype)
    assert (await engine.get("a")).state == "paused"
    await engine.close()
    clock.advance(1)
    engine = await _run(path, clock, wtype)
    row = await engine.get("a")
    assert row.state == "failed"
    assert [(h.event, h.actor) for h in await engine.history("a")][-2:] == [
        ("approval_reminder", "timer"),
        ("approval_timeout", "timer"),
    ]
    await engine.check("a")
    await engine.close()


async def test_approval_cancels_the_timeout(tmp_path: Path, clock: ManualClock) -> None:
    decisions = iter(["request_approval", "complete"])
    wtype = agent_type(lambda run: next(decisions), approval_timeout=100.0, approval_reminder=None)
    engine = await _run(tmp_path / "a.db", clock, wtype)
    await engine.start("agent_task", workflow_id="a")
    await Worker(engine).run_until_idle()
    row = (await engine.approve("a", "maria", "looks fine")).row
    assert row.state == "running"
    assert await engine.store.timers("a") == []
    await Worker(engine).run_until_idle()
    clock.advance(500)
    await Worker(engine).run_until_idle()
    assert (await engine.get("a")).state == "done"
    approval = next(h for h in await engine.history("a") if h.event == "approval_granted")
    assert approval.actor == "maria" and approval.payload == {
        "approver": "maria",
        "comment": "looks fine",
    }
    await engine.close()
