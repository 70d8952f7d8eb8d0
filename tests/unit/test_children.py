"""Child workflows in one process (SQLite ``:memory:``): fan-out with a cap, the join, each
child's end heard once, results gathered, failures reported, an ended parent's live children
cancelled (or abandoned by choice), and the refusals of a bad start."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pytest

from statewright import Engine, MachineBuilder, SQLiteStore, Worker, WorkflowType
from statewright.engine.children import (
    all_done,
    any_done,
    cancel_orphans,
    child_id,
    fan_out,
    gather,
    n_done,
    settled,
)
from statewright.errors import InvalidInput, WorkflowExists, WorkflowFinished
from statewright.types import ParentLink


def parent_type(*, cap: int | None = 3, join: Any = None, **options: Any) -> WorkflowType:
    b = MachineBuilder("order")
    b.state("fanning", initial=True).state("done", terminal=True)
    b.state("cancelled", terminal=True)
    b.event("child_done").event("child_failed").event("cancel")
    for event in ("child_done", "child_failed"):
        b.transition(event, "fanning", "done", guard=join or all_done("parcels"), assign=gather())
        b.transition(event, "fanning", "fanning", assign=gather())
    b.transition("cancel", "fanning", "cancelled")
    handler = fan_out("parcel", "parcels", cap=cap, input=lambda item: {"item": item})
    return WorkflowType(b.build(), handlers={"fanning": handler}, **options)


def child_type(ship: bool = True) -> WorkflowType:
    """``parcel``: ships (one step) unless its item is negative (it fails), or waits for an
    event when ``ship`` is False."""
    b = MachineBuilder("parcel")
    b.state("shipping", initial=True).state("shipped", terminal=True)
    b.state("failed", terminal=True).state("cancelled", terminal=True)
    b.event("ship").event("fail").event("cancel")
    b.transition("ship", "shipping", "shipped").transition("fail", "shipping", "failed")
    b.transition("cancel", "shipping", "cancelled")

    async def shipping(run: Any) -> str:
        if run.context["item"] < 0:
            return "fail"
        await run.step("label", lambda key: {"label": key})
        return "ship"

    return WorkflowType(
        b.build(),
        handlers={"shipping": shipping} if ship else {},
        runs_here=True,
        result=lambda c: {"item": c["item"]},
    )


async def run_all(engine: Engine, rounds: int = 50) -> None:
    worker = Worker(engine, concurrency=8)
    for _ in range(rounds):
        if not await worker.run_until_idle():
            await settled(engine.runtime)  # the background cascade of an ended parent
            if not await worker.run_until_idle():
                return


def _events(history: list[Any], name: str) -> Counter[str]:
    return Counter(str(h.payload["key"]) for h in history if h.event == name)


async def test_a_capped_fan_out_joins_every_child_once() -> None:
    async with Engine(SQLiteStore(":memory:"), [parent_type(), child_type()]) as engine:
        await engine.start("order", {"parcels": [10, 11, 12, 13, 14, 15, 16]}, workflow_id="o1")
        await run_all(engine)
        row = await engine.get("o1")
        assert row.state == "done"
        assert row.context["children"] == {
            str(i): {"state": "shipped", "result": {"item": 10 + i}} for i in range(7)
        }
        kids = await engine.store.children("o1")
        assert [(k.id, k.state, k.parent_key) for k in kids] == [
            (f"o1.{i}", "shipped", str(i)) for i in range(7)
        ]
        history = await engine.history("o1")
        assert _events(history, "child_done") == Counter({str(i): 1 for i in range(7)})
        assert {h.actor for h in history[1:]} == {f"timer for child o1.{i}" for i in range(7)}
        for wid in ["o1", *(k.id for k in kids)]:
            await engine.check(wid)  # replay equals the row


async def test_the_cap_bounds_the_children_alive_at_once() -> None:
    seen: list[int] = []
    async with Engine(
        SQLiteStore(":memory:"), [parent_type(cap=2), child_type(ship=False)]
    ) as engine:
        await engine.start("order", {"parcels": list(range(5))}, workflow_id="o1")
        await run_all(engine)
        assert [k.id for k in await engine.store.children("o1")] == ["o1.0", "o1.1"]
        for _ in range(5):
            live = [k for k in await engine.store.children("o1") if not k.terminal]
            seen.append(len(live))
            await engine.send(live[0].id, "ship")
            await run_all(engine)
        assert max(seen) == 2 and (await engine.get("o1")).state == "done"
        assert len(await engine.store.children("o1")) == 5


async def test_a_failed_child_is_reported_as_such() -> None:
    async with Engine(SQLiteStore(":memory:"), [parent_type(), child_type()]) as engine:
        await engine.start("order", {"parcels": [1, -1, 2]}, workflow_id="o1")
        await run_all(engine)
        row = await engine.get("o1")
        assert row.state == "done"
        assert row.context["children"]["1"] == {"state": "failed", "result": {"item": -1}}
        history = await engine.history("o1")
        assert _events(history, "child_failed") == Counter({"1": 1})
        assert _events(history, "child_done") == Counter({"0": 1, "2": 1})


async def test_any_and_n_of_m_joins_leave_early_and_cancel_the_rest() -> None:
    for join, ended in ((any_done(), 1), (n_done(2), 2)):
        types = [parent_type(cap=None, join=join), child_type(ship=False)]
        async with Engine(SQLiteStore(":memory:"), types) as engine:
            await engine.start("order", {"parcels": [1, 2, 3, 4]}, workflow_id="o1")
            await run_all(engine)
            for i in range(ended):
                await engine.send(f"o1.{i}", "ship")
                await run_all(engine)
            row = await engine.get("o1")
            assert row.state == "done" and len(row.context["children"]) == ended
            states = [k.state for k in await engine.store.children("o1")]
            assert states == ["shipped"] * ended + ["cancelled"] * (4 - ended)


async def test_cancelling_the_parent_cancels_its_live_children() -> None:
    async with Engine(SQLiteStore(":memory:"), [parent_type(), child_type(ship=False)]) as engine:
        await engine.start("order", {"parcels": list(range(6))}, workflow_id="o1")
        await run_all(engine)
        await engine.send("o1.0", "ship")
        await run_all(engine)
        await engine.cancel("o1", reason="customer changed their mind")
        await run_all(engine)
        kids = await engine.store.children("o1")
        assert [k.state for k in kids] == ["shipped", "cancelled", "cancelled", "cancelled"]
        history = await engine.history("o1.1")
        assert history[-1].actor == "parent o1"
        assert await engine.store.orphans() == []


async def test_recovery_cancels_what_an_ended_parent_left_alive() -> None:
    async with Engine(SQLiteStore(":memory:"), [parent_type(), child_type(ship=False)]) as engine:
        await engine.start("order", {"parcels": [1, 2]}, workflow_id="o1")
        await run_all(engine)
        engine.runtime.transitions.on_end = None  # the process dies before it cascades
        await engine.cancel("o1", reason="stop")
        assert [o.id for o in await engine.store.orphans()] == ["o1.0", "o1.1"]
        assert await cancel_orphans(engine.runtime) == (2, None)
        assert [k.state for k in await engine.store.children("o1")] == ["cancelled"] * 2
        assert await engine.store.orphans() == []


async def test_abandoned_children_run_on_and_their_ends_reach_nobody() -> None:
    types = [parent_type(children_on_end="abandon"), child_type(ship=False)]
    async with Engine(SQLiteStore(":memory:"), types) as engine:
        await engine.start("order", {"parcels": [1, 2]}, workflow_id="o1")
        await run_all(engine)
        await engine.cancel("o1", reason="stop")
        await run_all(engine)
        assert await cancel_orphans(engine.runtime) == (0, None)
        assert [k.state for k in await engine.store.children("o1")] == ["shipping"] * 2
        await engine.send("o1.0", "ship")
        await run_all(engine)
        assert (await engine.get("o1.0")).state == "shipped"
        assert await engine.store.timers("o1") == []


async def test_bad_child_starts_are_refused_and_change_nothing() -> None:
    with pytest.raises(InvalidInput):
        child_id("o1", "a.b")
    with pytest.raises(InvalidInput):
        child_id("o1", "")
    async with Engine(SQLiteStore(":memory:"), [parent_type(), child_type(ship=False)]) as engine:
        await engine.start("parcel", {"item": 1}, workflow_id="o1.0")  # not o1's child
        await engine.start("order", {"parcels": [1]}, workflow_id="o1")
        worker = Worker(engine)
        await worker.run_until_idle()
        row = await engine.get("o1")
        assert row.parked is not None or row.last_error is not None  # the handler's start failed
        assert "WorkflowExists" in (row.last_error or "")
        await engine.cancel("o1", reason="stop")
        rt = engine.runtime
        from statewright.engine import commands

        with pytest.raises(WorkflowFinished):
            await commands.start(
                rt, "parcel", {"item": 2}, workflow_id="o1.9", parent=ParentLink("o1", "9")
            )
        assert await engine.store.get_workflow("o1.9") is None
        with pytest.raises(WorkflowExists):
            await commands.start(
                rt, "parcel", {"item": 1}, workflow_id="o1.0", parent=ParentLink("o1", "0")
            )


def test_join_guards_count_the_reported_child_once() -> None:
    ctx: Mapping[str, Any] = {"parcels": [1, 2], "children": {"0": {"state": "shipped"}}}
    assert all_done("parcels")(ctx, {"key": "1", "state": "shipped"})
    assert not all_done("parcels")(ctx, {"key": "0", "state": "shipped"})  # already counted
    assert n_done(2, succeeded=True)(ctx, {"key": "1", "state": "shipped"})
    assert not n_done(2, succeeded=True)(ctx, {"key": "1", "state": "failed"})
    assert any_done()({}, {"key": "0", "state": "failed"})
    assert gather()(ctx, {"key": "1", "state": "failed", "result": None}) == {
        "children": {"0": {"state": "shipped"}, "1": {"state": "failed", "result": None}}
    }


async def test_a_parent_is_not_pruned_while_an_abandoned_child_lives() -> None:
    types = [parent_type(children_on_end="abandon"), child_type(ship=False)]
    async with Engine(SQLiteStore(":memory:"), types) as engine:
        await engine.start("order", {"parcels": [1]}, workflow_id="o1")
        await run_all(engine)
        await engine.cancel("o1", reason="stop")
        first = await engine.prune(terminal_older_than=0)
        assert await engine.store.get_workflow("o1") is not None  # its child still runs
        assert first.workflows == 0
        await engine.send("o1.0", "ship")
        await run_all(engine)
        second = await engine.prune(terminal_older_than=0)
        assert second.workflows == 2 and await engine.store.get_workflow("o1") is None


async def test_fork_and_move_of_parents_and_children() -> None:
    async with Engine(
        SQLiteStore(":memory:"), [parent_type(cap=None), child_type(ship=False)]
    ) as engine:
        await engine.start("order", {"parcels": [1, 2]}, workflow_id="o1")
        await run_all(engine)
        await engine.send("o1.0", "ship")
        await run_all(engine)
        # A fork of the parent: no children of its own until it runs its fan-out again,
        # which starts only what the copied context does not show ended.
        fork = await engine.fork("o1", actor="ops", reason="try again", new_id="o2")
        assert not fork.has_children and fork.context["children"].keys() == {"0"}
        await run_all(engine)
        assert [k.id for k in await engine.store.children("o2")] == ["o2.1"]
        # A fork of a child has no parent: its end reaches nobody.
        orphan = await engine.fork("o1.1", actor="ops", reason="copy", new_id="copy-1")
        assert orphan.parent is None
        # An operator's move of a child to a terminal state reaches its parent.
        await engine.move_to("o1.1", "shipped", actor="ops", reason="shipped by hand")
        await run_all(engine)
        assert (await engine.get("o1")).state == "done"
        # A move of a parent to a terminal state cancels its live children.
        await engine.move_to("o2", "cancelled", actor="ops", reason="no longer needed")
        await run_all(engine)
        assert (await engine.get("o2.1")).state == "cancelled"


async def test_a_synchronous_handler_starts_children_too() -> None:
    def fan(run: Any) -> None:
        for i, item in enumerate(run.context["parcels"]):
            run.start_child("parcel", str(i), {"item": item})

    wtype = parent_type()
    sync_parent = WorkflowType(wtype.machine, handlers={"fanning": fan})
    async with Engine(SQLiteStore(":memory:"), [sync_parent, child_type()]) as engine:
        await engine.start("order", {"parcels": [5, 6]}, workflow_id="o1")
        await run_all(engine)
        row = await engine.get("o1")
        assert row.state == "done" and row.context["children"]["1"]["result"] == {"item": 6}


async def test_abandoned_children_do_not_hide_the_orphans_recovery_must_cancel() -> None:
    keep = parent_type(children_on_end="abandon")
    abandoning = WorkflowType(
        replace(keep.machine, name="a_order"), handlers=keep.handlers, children_on_end="abandon"
    )
    types = [abandoning, parent_type(), child_type(ship=False)]
    async with Engine(SQLiteStore(":memory:"), types) as engine:
        await engine.start("a_order", {"parcels": [1, 2, 3]}, workflow_id="a1")
        await engine.start("order", {"parcels": [1]}, workflow_id="o1")
        await run_all(engine)
        engine.runtime.transitions.on_end = None  # no cascade: recovery's to do
        await engine.cancel("a1", reason="stop")
        await engine.cancel("o1", reason="stop")
        after, rounds = None, 0
        while (await engine.get("o1.0")).state != "cancelled":
            _, after = await cancel_orphans(engine.runtime, limit=2, after=after)
            rounds += 1
            assert rounds <= 3, "the abandoned children hid the orphan"
        assert [k.state for k in await engine.store.children("a1")] == ["shipping"] * 3


async def test_a_child_whose_result_cannot_be_sent_still_reaches_its_parent() -> None:
    wtype = child_type()

    def broken(context: Any) -> Any:
        raise KeyError("no such key")

    kid = WorkflowType(wtype.machine, handlers=wtype.handlers, result=broken)
    async with Engine(SQLiteStore(":memory:"), [parent_type(), kid]) as engine:
        await engine.start("order", {"parcels": [1]}, workflow_id="o1")
        await run_all(engine)
        row = await engine.get("o1")
        assert row.state == "done"
        assert row.context["children"]["0"] == {"state": "shipped", "result": None}
        [*_, heard] = await engine.history("o1")
        assert "no such key" in heard.payload["error"]
