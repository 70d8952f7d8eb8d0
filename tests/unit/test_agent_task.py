from __future__ import annotations

import random
from pathlib import Path

import pytest

from statewright import Engine, ManualClock, Run, SQLiteStore, Worker
from statewright.definition import agent_task_machine
from statewright.definition.builtin.agent_task import RETRY_BUDGET_GUARD
from statewright.engine.builtin import agent_task_type
from statewright.errors import DefinitionError, IllegalTransition, InvalidPayload

M = agent_task_machine()
BUDGET = {"attempt": 1, "max_attempts": 3}

LEGAL = [
    ("planned", "start", "running"),
    ("running", "request_approval", "paused"),
    ("running", "block", "blocked"),
    ("running", "complete", "done"),
    ("running", "fail", "failed"),
    ("running", "fatal_error", "failed"),
    ("paused", "approval_granted", "running"),
    ("paused", "approval_denied", "failed"),
    ("paused", "approval_timeout", "failed"),
    ("paused", "approval_reminder", "paused"),
    ("blocked", "dependency_ready", "running"),
    ("blocked", "fatal_error", "failed"),
    ("retrying", "retry", "running"),
    ("retrying", "retries_exhausted", "failed"),
    ("retrying", "fatal_error", "failed"),
    *((s, "cancel", "failed") for s in ("planned", "running", "paused", "blocked", "retrying")),
]


@pytest.mark.parametrize(("state", "event", "target"), LEGAL)
def test_legal_moves(state: str, event: str, target: str) -> None:
    assert M.resolve(state, event).target == target


def test_exact_edges() -> None:
    edges = {(s, t.event, t.target) for t in M.transitions for s in t.sources}
    assert edges == {
        *LEGAL,
        ("running", "error_transient", "retrying"),
        ("running", "error_transient", "failed"),
    }
    assert M.initial.name == "planned"
    assert M.terminal_states == ("done", "failed")


def test_allowed_events_per_state() -> None:
    assert M.allowed_events("planned") == ["start", "cancel"]
    assert M.allowed_events("running", payload=BUDGET) == [
        "request_approval",
        "block",
        "error_transient",
        "complete",
        "fail",
        "fatal_error",
        "cancel",
    ]
    assert M.allowed_events("paused") == [
        "approval_granted",
        "approval_denied",
        "approval_timeout",
        "approval_reminder",
        "cancel",
    ]
    assert M.allowed_events("blocked") == ["dependency_ready", "fatal_error", "cancel"]
    assert M.allowed_events("retrying") == ["fatal_error", "retry", "retries_exhausted", "cancel"]


@pytest.mark.parametrize("state", ["done", "failed"])
def test_terminal_states_allow_nothing(state: str) -> None:
    assert M.allowed_events(state) == []
    for event in M.events:
        assert not M.can(state, event)
    with pytest.raises(IllegalTransition) as info:
        M.resolve(state, "start")
    assert info.value.reason == "terminal state"


@pytest.mark.parametrize(
    ("attempt", "max_attempts", "target"),
    [(1, 3, "retrying"), (3, 3, "retrying"), (4, 3, "failed"), (1, 0, "failed")],
)
def test_retry_budget(attempt: int, max_attempts: int, target: str) -> None:
    payload = {"attempt": attempt, "max_attempts": max_attempts, "error": "503"}
    t = M.resolve("running", "error_transient", payload=payload)
    assert t.target == target
    assert (t.guard is not None and t.guard.expr) == (target == "retrying" and RETRY_BUDGET_GUARD)


def test_error_transient_payload_schema() -> None:
    with pytest.raises(InvalidPayload) as info:
        M.resolve("running", "error_transient", payload={"attempt": 1})
    assert "max_attempts" in info.value.message
    with pytest.raises(InvalidPayload) as info:
        M.resolve(
            "running",
            "error_transient",
            payload={"attempt": "1", "max_attempts": 3, "retry_after": 2.5},
        )
    assert info.value.path == "attempt"
    with pytest.raises(InvalidPayload):
        M.resolve("running", "error_transient", payload={**BUDGET, "retry_after": "soon"})


def test_illegal_step_skip() -> None:
    with pytest.raises(IllegalTransition):
        M.resolve("paused", "complete")
    with pytest.raises(IllegalTransition):
        M.resolve("planned", "complete")


def test_roles_and_approval() -> None:
    for name in ("approval_granted", "approval_denied"):
        assert (M.events[name].approval, M.events[name].roles) == (True, ("approver",))
    for name in ("start", "complete", "error_transient", "retry", "fatal_error"):
        assert M.events[name].roles == ("agent", "operator")
        assert not M.events[name].approval
    assert all(e.description for e in M.events.values())


def test_timers_and_stuck_after() -> None:
    assert dict(M.states["paused"].after) == {
        86400.0: "approval_timeout",
        82800.0: "approval_reminder",
    }
    stuck = {name: s.stuck_after for name, s in M.states.items()}
    assert stuck == {
        "planned": None,
        "running": 3600.0,
        "paused": 86400.0,
        "blocked": 86400.0,
        "retrying": 3600.0,
        "done": None,
        "failed": None,
    }


def test_configurable_approval_timers() -> None:
    m = agent_task_machine("review", 2, approval_timeout=600.0, approval_reminder=None)
    assert (m.name, m.version) == ("review", 2)
    assert dict(m.states["paused"].after) == {600.0: "approval_timeout"}
    assert m.states["paused"].stuck_after == 600.0
    none = agent_task_machine(approval_timeout=None, approval_reminder=None)
    assert dict(none.states["paused"].after) == {}
    assert none.states["paused"].stuck_after == 86400.0
    with pytest.raises(DefinitionError, match="shorter than"):
        agent_task_machine(approval_timeout=60.0, approval_reminder=60.0)
    with pytest.raises(DefinitionError) as info:
        agent_task_machine(approval_timeout=-1.0, approval_reminder=None)
    assert "invalid_after_delay" in [p.code for p in info.value.problems]


async def test_blocked_task_reprobes_its_dependency_on_a_recurring_timer(
    tmp_path: Path,
) -> None:
    clock = ManualClock()
    ready = {"now": False}
    probes: list[float] = []

    async def probe(run: Run) -> bool:
        probes.append(run.now())
        return ready["now"]

    wtype = agent_task_type(dependency_probe=probe, reprobe_interval=60.0)
    assert agent_task_machine().states["blocked"].every == {}  # off by default
    assert "reprobe" not in agent_task_machine().events
    engine = Engine(SQLiteStore(tmp_path / "a.db"), [wtype], clock=clock, rng=random.Random(1))
    async with engine:
        await engine.start("agent_task", {"goal": "x"}, workflow_id="t")
        await engine.send("t", "start")
        await engine.send("t", "block")
        await Worker(engine).run_until_idle()
        assert (await engine.get("t")).state == "blocked" and len(probes) == 1
        clock.advance(60)
        await Worker(engine).run_until_idle()
        assert (await engine.get("t")).state == "blocked" and len(probes) == 2
        ready["now"] = True
        clock.advance(60)
        await Worker(engine).run_until_idle()
        row = await engine.get("t")
        assert row.state == "running" and len(probes) == 3
        assert await engine.timers("t") == []  # leaving blocked cleared the re-probe
        events = [t.event for t in await engine.history("t")]
        assert events.count("reprobe") == 2 and events[-1] == "dependency_ready"
