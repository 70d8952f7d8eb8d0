"""Engine commands on a real SQLite store: start, send, errors that change nothing, replay."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from statewright import (
    Engine,
    IllegalTransition,
    InvalidInput,
    MachineBuilder,
    ManualClock,
    SQLiteStore,
    WorkflowNotFound,
)
from statewright.definition.builtin.agent_task import agent_task_machine
from statewright.engine.hooks import TransitionEvent
from statewright.errors import (
    InvalidPayload,
    ReplayMismatch,
    UnknownWorkflowType,
    VersionConflict,
    WorkflowExists,
)
from statewright.testing import memory_engine

DOC = (
    MachineBuilder("doc", version=1)
    .state("draft", initial=True)
    .state("review")
    .state("published", terminal=True)
    .event(
        "submit",
        payload_schema={
            "type": "object",
            "required": ["by"],
            "properties": {"by": {"type": "string"}},
        },
    )
    .event("publish")
    .event("reject")
    .transition("submit", "draft", "review")
    .transition("publish", "review", "published", guard="context.approved == True")
    .transition("reject", "review", "draft")
    .build()
)


async def test_start_send_and_read(clock: ManualClock) -> None:
    async with memory_engine([agent_task_machine(), DOC], clock) as engine:
        wf = (await engine.start("doc", {"title": "x"}, workflow_id="d1", actor="ann")).row
        assert (wf.state, wf.version, wf.machine_version, wf.type) == ("draft", 1, 1, "doc")
        assert await engine.allowed_events("d1") == ["submit"]
        wf = (
            await engine.send(
                "d1", "submit", {"by": "ann"}, actor="ann", context={"approved": True}
            )
        ).row
        assert (wf.state, wf.version, wf.context) == (
            "review",
            2,
            {"title": "x", "approved": True},
        )
        assert await engine.allowed_events("d1") == ["publish", "reject"]
        history = await engine.history("d1")
        assert [(h.event, h.actor, h.to_state) for h in history] == [
            ("$start", "ann", "draft"),
            ("submit", "ann", "review"),
        ]
        assert (await engine.check("d1")).state == "review"


async def test_illegal_transition_names_state_and_event_and_changes_nothing(
    clock: ManualClock,
) -> None:
    async with memory_engine([DOC], clock) as engine:
        await engine.start("doc", workflow_id="d1")
        before = await engine.get("d1")
        with pytest.raises(IllegalTransition) as info:
            await engine.send("d1", "publish")
        err = info.value
        assert (err.state, err.event, err.allowed, err.workflow_id) == (
            "draft",
            "publish",
            ["submit"],
            "d1",
        )
        assert err.code == "illegal_transition" and "'publish'" in str(err)
        # guard failing is illegal too
        await engine.send("d1", "submit", {"by": "x"})
        with pytest.raises(IllegalTransition, match="no guard passed"):
            await engine.send("d1", "publish")
        with pytest.raises(IllegalTransition, match="unknown event"):
            await engine.send("d1", "explode")
        after = await engine.get("d1")
        assert after.version == before.version + 1 and after.state == "review"
        assert len(await engine.history("d1")) == 2


async def test_bad_inputs_are_typed_errors_and_change_nothing(clock: ManualClock) -> None:
    async with memory_engine([DOC], clock) as engine:
        await engine.start("doc", workflow_id="d1")
        with pytest.raises(InvalidPayload) as info:
            await engine.send("d1", "submit", {"by": 7})
        assert info.value.path == "by"
        with pytest.raises(InvalidPayload):
            await engine.send("d1", "submit", [1, 2])  # type: ignore[arg-type]
        with pytest.raises(InvalidInput):
            await engine.send("d1", "submit", {"by": "x"}, context={"f": {1, 2}})
        with pytest.raises(InvalidInput):
            await engine.send("d1", "bad event name!")
        with pytest.raises(WorkflowNotFound):
            await engine.send("nope", "submit", {"by": "x"})
        with pytest.raises(UnknownWorkflowType):
            await engine.start("nope")
        with pytest.raises(InvalidInput):
            await engine.start("doc", workflow_id="has space")
        with pytest.raises(InvalidInput):
            await engine.start("doc", "not a dict")  # type: ignore[arg-type]
        row = await engine.get("d1")
        assert (row.state, row.version) == ("draft", 1)
        assert len(await engine.history("d1")) == 1


async def test_start_with_an_id_is_idempotent(clock: ManualClock) -> None:
    async with memory_engine([DOC, agent_task_machine()], clock) as engine:
        first = (await engine.start("doc", {"a": 1}, workflow_id="same")).row
        again = (await engine.start("doc", {"a": 2}, workflow_id="same")).row
        assert again == first
        assert len(await engine.history("same")) == 1
        with pytest.raises(WorkflowExists):
            await engine.start("agent_task", workflow_id="same")


async def test_stale_expected_version_conflicts(clock: ManualClock) -> None:
    async with memory_engine([DOC], clock) as engine:
        await engine.start("doc", workflow_id="d1")
        await engine.send("d1", "submit", {"by": "a"}, expected_version=1)
        with pytest.raises(VersionConflict) as info:
            await engine.send("d1", "reject", expected_version=1)
        assert (info.value.expected, info.value.actual) == (1, 2)
        assert (await engine.get("d1")).state == "review"


async def test_racing_senders_exactly_one_wins(tmp_path: Path) -> None:
    # Two engines (two "processes") on one file, both read version 2 and race.
    path = tmp_path / "race.db"
    async with Engine(SQLiteStore(path), [DOC]) as a, Engine(SQLiteStore(path), [DOC]) as b:
        await a.start("doc", workflow_id="d1")
        await a.send("d1", "submit", {"by": "x"})
        results = await asyncio.gather(
            a.send("d1", "reject", expected_version=2),
            b.send("d1", "reject", expected_version=2),
            a.send("d1", "reject", expected_version=2),
            return_exceptions=True,
        )
        assert sum(not isinstance(r, BaseException) for r in results) == 1
        assert all(isinstance(r, VersionConflict) for r in results if isinstance(r, BaseException))
        assert [h.version for h in await a.history("d1")] == [1, 2, 3]


async def test_machine_versions_are_recorded_and_kept(clock: ManualClock) -> None:
    v2 = (
        MachineBuilder("doc", version=2)
        .state("draft", initial=True)
        .state("published", terminal=True)
        .event("publish")
        .transition("publish", "draft", "published")
        .build()
    )
    async with memory_engine([DOC], clock) as engine:
        old = (await engine.start("doc", workflow_id="old")).row
        engine.register(v2)
        new = (await engine.start("doc", workflow_id="new")).row
        assert (old.machine_version, new.machine_version) == (1, 2)
        assert (await engine.send("new", "publish")).row.state == "published"
        with pytest.raises(IllegalTransition):
            await engine.send("old", "publish")  # v1 has no such edge from draft
        assert (await engine.send("old", "submit", {"by": "x"})).row.state == "review"


async def test_replay_detects_a_tampered_row(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    async with Engine(SQLiteStore(path), [DOC]) as engine:
        await engine.start("doc", {"n": 1}, workflow_id="d1")
        await engine.send("d1", "submit", {"by": "x"}, context={"n": 2})
        assert (await engine.replay("d1")).context == {"n": 2}
        raw = sqlite3.connect(path, isolation_level=None)
        raw.execute("UPDATE workflows SET state = 'published'")
        raw.close()
        with pytest.raises(ReplayMismatch):
            await engine.check("d1")


async def test_observers_never_break_a_transition(clock: ManualClock) -> None:
    seen: list[str] = []

    def broken(ev: TransitionEvent) -> None:
        raise RuntimeError("observer bug")

    async with memory_engine([DOC], clock) as engine:
        engine.observers.transition.append(broken)
        engine.observers.transition.append(lambda ev: seen.append(ev.after.state))
        await engine.start("doc", workflow_id="d1")
        assert (await engine.send("d1", "submit", {"by": "x"})).row.state == "review"
        assert seen == ["draft", "review"]
