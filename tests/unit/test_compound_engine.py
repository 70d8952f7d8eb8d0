"""Compound states and entry/exit actions run by the engine on SQLite ``:memory:`` with a
ManualClock: the stored state is the leaf's path, a compound's transitions and timers apply
anywhere inside it, and the actions' patch is in the log, so replay equals the row."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from statewright import Engine, MachineBuilder, ManualClock, SQLiteStore, Worker, WorkflowType
from statewright.definition.machine import Machine
from statewright.errors import ActionFailed, DefinitionError


def order_machine() -> Machine:
    return (
        MachineBuilder("order")
        .state(
            "active",
            initial=True,
            after={100: "expire"},
            every={30: "remind"},
            entry={"opened": "(context.opened or 0) + 1"},
            exit={"log": "(context.log or '') + 'x(active)'"},
        )
        .state(
            "picking",
            parent="active",
            initial=True,
            entry={"log": "(context.log or '') + 'n(picking)'"},
            exit={"log": "(context.log or '') + 'x(picking)'"},
        )
        .state(
            "shipping",
            parent="active",
            after={10: "lost"},
            entry={"log": "(context.log or '') + 'n(shipping)'"},
            exit={"log": "(context.log or '') + 'x(shipping)'"},
        )
        .state("held", initial=False)
        .state("done", terminal=True, entry={"log": "(context.log or '') + 'n(done)'"})
        .state("cancelled", terminal=True)
        .event("pick", assign={"log": "(context.log or '') + 'a(pick)'"})
        .event("ship")
        .event("hold")
        .event("release")
        .event("cancel")
        .event("expire")
        .event("remind", assign={"reminders": "(context.reminders or 0) + 1"})
        .event("lost")
        .transition("pick", "active.picking", "active.shipping")
        .transition("ship", "active.shipping", "done")
        .transition("lost", "active.shipping", "active.picking")
        .transition("hold", "active", "held")
        .transition("release", "held", "active")
        .transition("remind", "active.shipping", "active.picking")
        .transition("remind", "active.picking", "active.picking")
        .transition("cancel", "active", "cancelled")
        .transition("expire", "active", "cancelled")
        .build()
    )


async def _engine(clock: ManualClock) -> Engine:
    engine = Engine(
        SQLiteStore(":memory:"),
        [WorkflowType(order_machine())],
        clock=clock,
        rng=random.Random(1),
    )
    await engine.open()
    return engine


async def _keys(engine: Engine, wid: str) -> list[tuple[str | None, str]]:
    return sorted((t.key, t.event) for t in await engine.timers(wid))


async def test_the_start_enters_the_initial_leaf_and_runs_every_entry_action(
    clock: ManualClock,
) -> None:
    engine = await _engine(clock)
    row = (await engine.start("order", workflow_id="o", input={"log": ""})).row
    assert row.state == "active.picking"
    assert row.context == {"log": "n(picking)", "opened": 1}
    [start] = await engine.history("o")
    assert start.to_state == "active.picking"
    assert await _keys(engine, "o") == [
        ("state:active:after:100", "expire"),
        ("state:active:every:30", "remind"),
    ]
    assert (await engine.check("o")).context == row.context
    await engine.close()


async def test_a_transition_declared_on_the_compound_applies_from_every_leaf(
    clock: ManualClock,
) -> None:
    engine = await _engine(clock)
    for wid, moves in (("a", []), ("b", ["pick"])):
        await engine.start("order", workflow_id=wid)
        for event in moves:
            await engine.send(wid, event)
        row = (await engine.send(wid, "cancel")).row
        assert row.state == "cancelled"
        assert row.terminal
        assert await engine.timers(wid) == []
        await engine.check(wid)
    await engine.close()


async def test_exit_transition_entry_order_is_stored_in_the_log(clock: ManualClock) -> None:
    engine = await _engine(clock)
    await engine.start("order", workflow_id="o", input={"log": ""})
    row = (await engine.send("o", "pick")).row
    # Inside the compound: only the leaves are left and entered; the event's assign between.
    assert row.context["log"] == "n(picking)x(picking)a(pick)n(shipping)"
    row = (await engine.send("o", "ship")).row
    assert row.context["log"].endswith("x(shipping)x(active)n(done)")
    log = await engine.history("o")
    assert [t.to_state for t in log] == ["active.picking", "active.shipping", "done"]
    assert log[1].context_patch == {"log": "n(picking)x(picking)a(pick)n(shipping)"}
    assert log[2].context_patch == {
        "log": "n(picking)x(picking)a(pick)n(shipping)x(shipping)x(active)n(done)"
    }
    replayed = await engine.check("o")
    assert (replayed.state, replayed.context) == (row.state, row.context)
    await engine.close()


async def test_a_self_transition_runs_no_entry_or_exit(clock: ManualClock) -> None:
    engine = await _engine(clock)
    await engine.start("order", workflow_id="o", input={"log": ""})
    row = (await engine.send("o", "remind")).row  # active.picking -> active.picking
    assert row.state == "active.picking"
    assert row.context == {"log": "n(picking)", "opened": 1, "reminders": 1}
    await engine.close()


async def test_a_compound_timer_is_kept_inside_and_cleared_on_leaving(
    clock: ManualClock,
) -> None:
    engine = await _engine(clock)
    worker = Worker(engine)
    t0 = clock.now()
    await engine.start("order", workflow_id="o")
    clock.advance(5)
    await engine.send("o", "pick")  # a move inside: the compound's timers stay as they were
    timers = {t.key: t for t in await engine.timers("o")}
    assert timers["state:active:after:100"].due_at == t0 + 100
    assert timers["state:active:every:30"].due_at == t0 + 30
    shipping = [t for t in timers.values() if t.event == "lost"]
    assert [t.due_at for t in shipping] == [t0 + 15]  # the leaf's own timer, armed now
    # The leaf's timer fires and moves inside the compound: the compound's timers stay.
    clock.advance(10)
    await worker.run_until_idle()
    row = await engine.get("o")
    assert row.state == "active.picking"
    assert [k for k, _ in await _keys(engine, "o")] == [
        "state:active:after:100",
        "state:active:every:30",
    ]
    # Leaving the compound (to a non-terminal state) drops them by key.
    await engine.send("o", "hold")
    assert await engine.timers("o") == []
    # Entering it again arms them anew, from now.
    clock.advance(1)
    await engine.send("o", "release")
    assert {t.key: t.due_at for t in await engine.timers("o")} == {
        "state:active:after:100": clock.now() + 100,
        "state:active:every:30": clock.now() + 30,
    }
    await engine.check("o")
    await engine.close()


async def test_a_compound_timer_fires_from_any_leaf(clock: ManualClock) -> None:
    engine = await _engine(clock)
    worker = Worker(engine)
    await engine.start("order", workflow_id="o")
    await engine.send("o", "pick")
    await engine.send("o", "lost")  # back to picking, still inside
    for _ in range(3):
        clock.advance(30)
        await worker.run_until_idle()
    row = await engine.get("o")
    assert row.state == "active.picking"
    assert row.context["reminders"] == 3
    clock.advance(10)  # t0 + 100: the deadline on the compound
    await worker.run_until_idle()
    row = await engine.get("o")
    assert row.state == "cancelled"
    await engine.check("o")
    await engine.close()


async def test_a_recurring_compound_timer_moving_between_leaves_is_rearmed(
    clock: ManualClock,
) -> None:
    engine = await _engine(clock)
    worker = Worker(engine)
    t0 = clock.now()
    await engine.start("order", workflow_id="o")
    await engine.send("o", "pick")
    clock.advance(30)
    await worker.run_until_idle()  # remind from active.shipping moves to active.picking
    row = await engine.get("o")
    assert (row.state, row.context["reminders"]) == ("active.picking", 1)
    every = [t for t in await engine.timers("o") if t.every]
    assert [(t.key, t.due_at) for t in every] == [("state:active:every:30", t0 + 60)]
    clock.advance(30)
    await worker.run_until_idle()
    assert (await engine.get("o")).context["reminders"] == 2
    await engine.check("o")
    await engine.close()


def renamed_machine() -> Machine:
    """Version 2 of the order: its compound state renamed, with a shorter deadline."""
    return (
        MachineBuilder("order", version=2)
        .state("live", initial=True, after={50: "expire"})
        .state("picking", parent="live", initial=True)
        .state("cancelled", terminal=True)
        .event("cancel")
        .event("expire")
        .transition("cancel", "live", "cancelled")
        .transition("expire", "live", "cancelled")
        .build()
    )


async def test_a_migration_drops_the_compound_timers_it_leaves_and_arms_the_new_ones(
    tmp_path: Path, clock: ManualClock
) -> None:
    db = tmp_path / "m.db"
    engine = Engine(SQLiteStore(db), [WorkflowType(order_machine())], clock=clock)
    async with engine:
        await engine.start("order", workflow_id="o")
    clock.advance(1)
    both = [WorkflowType(order_machine()), WorkflowType(renamed_machine())]
    async with Engine(SQLiteStore(db), both, clock=clock) as engine:
        leaves = {"active.picking": "live.picking", "active.shipping": "live.picking"}
        await engine.migrate(
            "order", 1, 2, {**leaves, "held": "live.picking"}, actor="ops", reason="rename"
        )
        row = await engine.get("o")
        assert (row.state, row.machine_version) == ("live.picking", 2)
        assert {t.key: t.due_at for t in await engine.timers("o")} == {
            "state:live:after:50": clock.now() + 50
        }
        await engine.check("o")


async def test_a_fork_into_a_leaf_arms_the_compound_timers_around_it(clock: ManualClock) -> None:
    engine = await _engine(clock)
    await engine.start("order", workflow_id="o")
    await engine.send("o", "pick")
    clock.advance(7)
    fork = await engine.fork("o", actor="ops", reason="retry", new_id="o2")
    assert fork.state == "active.shipping"
    assert sorted((t.key or t.event, t.due_at) for t in await engine.timers("o2")) == [
        ("lost", clock.now() + 10),
        ("state:active:after:100", clock.now() + 100),
        ("state:active:every:30", clock.now() + 30),
    ]
    await engine.close()


async def test_a_failing_entry_action_refuses_the_start(clock: ManualClock) -> None:
    broken = (
        MachineBuilder("broken")
        .state("p", initial=True, entry={"n": "context.n + 1"})
        .state("a", parent="p", initial=True)
        .state("end", terminal=True)
        .event("stop")
        .transition("stop", "p", "end")
        .build()
    )
    engine = Engine(SQLiteStore(":memory:"), [WorkflowType(broken)], clock=clock)
    await engine.open()
    with pytest.raises(ActionFailed, match="entry of 'p'"):
        await engine.start("broken", workflow_id="b")  # context.n is missing
    assert (await engine.start("broken", {"n": 1}, workflow_id="b")).row.context == {"n": 2}
    await engine.close()


def test_handlers_bind_to_leaves_and_a_compound_state_is_refused_by_name() -> None:
    async def ship(run: Any) -> None:
        return None

    WorkflowType(order_machine(), handlers={"active.shipping": ship})
    with pytest.raises(DefinitionError, match="compound state 'active': a workflow is never"):
        WorkflowType(order_machine(), handlers={"active": ship})
