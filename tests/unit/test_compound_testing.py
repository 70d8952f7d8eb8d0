"""statewright.testing on machines with compound states: every simple path and the transition
cover run through a real engine, with replay equal to the row after every step, and random
runs hold."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import settings

from statewright import Engine, Machine, MachineBuilder, ManualClock, SQLiteStore
from statewright.testing import check_cover, check_machine, simple_paths, transition_cover
from statewright.types import WorkflowRow
from tests.unit.test_compound import shop_machine


def support_machine() -> Machine:
    """Two levels of nesting, an edge on each level, entry/exit actions and compound timers."""
    return (
        MachineBuilder("support")
        .state(
            "open",
            initial=True,
            after={3600: "expire"},
            every={600: "nudge"},
            entry={"opened": "(context.opened or 0) + 1"},
            exit={"closed_from": "'open'"},
        )
        .state("triage", parent="open", initial=True)
        .state("working", parent="open", entry={"picked": "True"})
        .state("coding", parent="open.working", initial=True)
        .state("testing", parent="open.working", exit={"tested": "True"})
        .state("waiting")
        .state("solved", terminal=True)
        .state("expired", terminal=True)
        .event("pick")
        .event("push")
        .event("fail")
        .event("ask")
        .event("answer")
        .event("solve")
        .event("expire")
        .event("nudge", assign={"nudges": "(context.nudges or 0) + 1"})
        .transition("pick", "open.triage", "open.working")
        .transition("push", "open.working.coding", "open.working.testing")
        .transition("fail", "open.working.testing", "open.working")
        .transition("ask", "open", "waiting")
        .transition("answer", "waiting", "open.working")
        .transition("solve", "open.working.testing", "solved")
        .transition("nudge", "open", "open")
        .transition("nudge", "open.triage", "open.triage")
        .transition("expire", ["open", "waiting"], "expired")
        .build()
    )


async def _context_after(machine: Machine, events: list[str]) -> tuple[WorkflowRow, Any]:
    """Drive ``events`` through an engine; also fold the definition's patches by hand."""
    engine = Engine(SQLiteStore(":memory:"), [machine], clock=ManualClock(), rng=random.Random(1))
    async with engine:
        row = (await engine.start(machine.name, workflow_id="w")).row
        expected = dict(machine.started({}) or {})
        state = row.state
        for event in events:
            t = machine.resolve(state, event, expected)
            expected |= machine.assigned(t, expected, {}, source=state) or {}
            row = (await engine.send("w", event)).row
            assert row.state == t.target
            replayed = await engine.check("w")
            assert (replayed.state, replayed.context) == (row.state, row.context)
            state = row.state
        return row, expected


async def test_every_simple_path_replays_to_the_row_and_the_actions_patch() -> None:
    for machine in (support_machine(), shop_machine()):
        paths = simple_paths(machine)
        assert paths
        for path in paths:
            row, expected = await _context_after(machine, [step.event for step in path])
            assert row.context == expected, path
            assert row.terminal == machine.is_terminal(row.state)


def test_the_transition_cover_runs_on_compound_machines() -> None:
    for machine in (support_machine(), shop_machine()):
        cover = check_cover(machine)
        # Edges declared on a compound are taken from each of its leaves.
        sources = {step.source for step in cover.covered if step.event == "expire"}
        if machine.name == "support":
            assert sources == {
                "open.triage",
                "open.working.coding",
                "open.working.testing",
                "waiting",
            }
        assert not transition_cover(machine).unreachable


def test_random_runs_with_compound_timers_hold() -> None:
    def inside_open_has_been_entered(row: WorkflowRow) -> bool:
        return bool(row.context.get("opened", 0) >= 1)

    check_machine(
        support_machine(),
        invariants=[inside_open_has_been_entered],
        settings=settings(max_examples=25, derandomize=True, database=None, deadline=None),
    )
