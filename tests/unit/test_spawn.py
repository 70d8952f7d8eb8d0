"""A state that declares its children (``Spawn``): the handler that starts them and the join's
edges are made from it, in Python and in files; bad declarations are refused by name."""

from __future__ import annotations

from typing import Any

import pytest

from statewright import Engine, MachineBuilder, SQLiteStore, Worker, WorkflowType
from statewright.definition import Spawn, from_dict, loads_yaml, to_dict
from statewright.definition.fingerprint import fingerprint
from statewright.errors import DefinitionError

ORDER_YAML = """
name: order
states:
  - name: shipping
    initial: true
    spawn: {type: parcel, over: parcels, cap: 2, then: shipped}
  - name: shipped
    terminal: true
  - name: cancelled
    terminal: true
events:
  - name: cancel
transitions:
  - {event: cancel, source: shipping, target: cancelled}
"""


def parcel() -> WorkflowType:
    machine = (
        MachineBuilder("parcel")
        .state("packing", initial=True)
        .state("sent", terminal=True)
        .state("failed", terminal=True)
        .event("sent")
        .event("fail")
        .transition("sent", "packing", "sent")
        .transition("fail", "packing", "failed")
        .build()
    )

    async def pack(run: Any) -> str:
        return "fail" if run.context["item"] == "broken" else "sent"

    return WorkflowType(machine, handlers={"packing": pack}, result=lambda c: c["item"])


async def finish(order: Any, parcels: list[str]) -> Any:
    async with Engine(SQLiteStore(":memory:"), [WorkflowType(order), parcel()]) as engine:
        await engine.start("order", {"parcels": parcels}, workflow_id="o1")
        worker = Worker(engine)
        for _ in range(5):
            await worker.run_until_idle()
        for child in await engine.store.children("o1"):
            await engine.check(child.id)
        await engine.check("o1")
        return await engine.get("o1"), await engine.history("o1")


async def test_a_file_declared_fan_out_runs_and_joins() -> None:
    order = loads_yaml(ORDER_YAML)
    assert {"child_done", "child_failed"} <= set(order.events)
    row, history = await finish(order, ["a", "b", "c", "broken"])
    assert row.state == "shipped"
    assert row.context["children"] == {
        "0": {"state": "sent", "result": "a"},
        "1": {"state": "sent", "result": "b"},
        "2": {"state": "sent", "result": "c"},
        "3": {"state": "failed", "result": "broken"},
    }
    ends = [h.event for h in history[1:]]
    assert sorted(ends) == ["child_done"] * 3 + ["child_failed"]


async def test_any_and_n_joins_leave_early() -> None:
    for join, ended in (("any", 1), (2, 2)):
        order = (
            MachineBuilder("order")
            .state(
                "shipping",
                initial=True,
                spawn=Spawn("parcel", "parcels", cap=1, join=join, then="shipped"),
            )
            .state("shipped", terminal=True)
            .build()
        )
        row, _ = await finish(order, ["a", "b", "c"])
        assert row.state == "shipped" and len(row.context["children"]) == ended


def test_a_saved_machine_keeps_the_spawn_not_its_edges() -> None:
    order = loads_yaml(ORDER_YAML)
    doc = to_dict(order)
    [shipping] = [s for s in doc["states"] if s["name"] == "shipping"]
    assert shipping["spawn"] == {"type": "parcel", "over": "parcels", "cap": 2, "then": "shipped"}
    assert [t["event"] for t in doc["transitions"]] == ["cancel"]
    again = from_dict(doc)
    assert fingerprint(again) == fingerprint(order)
    assert len(again.transitions) == len(order.transitions) == 5
    assert fingerprint(loads_yaml(ORDER_YAML.replace("cap: 2", "cap: 3"))) != fingerprint(order)


def test_a_declared_edge_on_a_child_event_comes_first() -> None:
    order = (
        MachineBuilder("order")
        .state("shipping", initial=True, spawn=Spawn("parcel", "parcels", then="shipped"))
        .state("shipped", terminal=True)
        .state("failed", terminal=True)
        .event("child_failed")
        .transition("child_failed", "shipping", "failed")
        .build()
    )
    assert order.resolve("shipping", "child_failed", {"parcels": [1, 2]}, {"key": "0"}).target == (
        "failed"
    )
    ctx = {"parcels": [1, 2], "children": {"1": {}}}
    assert order.resolve("shipping", "child_done", ctx, {"key": "0"}).target == "shipped"
    assert order.resolve("shipping", "child_done", {"parcels": [1, 2]}, {"key": "0"}).target == (
        "shipping"
    )


def test_a_nested_leaf_declares_children_by_its_path() -> None:
    order = (
        MachineBuilder("order")
        .state("active", initial=True)
        .state("shipping", parent="active", initial=True, spawn=Spawn("parcel", "parcels"))
        .state("done", terminal=True)
        .event("finish")
        .transition("finish", "active", "done")
        .build()
    )
    assert order.resolve("active.shipping", "child_done", {}, {"key": "0"}).target == (
        "active.shipping"
    )
    assert "active.shipping" in WorkflowType(order).handlers


def test_a_type_gets_the_spawning_handler_but_stays_handlerless() -> None:
    wtype = WorkflowType(loads_yaml(ORDER_YAML))
    assert set(wtype.handlers) == {"shipping"}
    assert not wtype.knows_handlers  # its other handlers (if any) live in the workers


@pytest.mark.parametrize(
    ("spawn", "terminal", "message"),
    [
        (Spawn("parcel", "parcels"), True, "is terminal and cannot start children"),
        (Spawn("parcel", "parcels", cap=0), False, "cap must be at least 1"),
        (Spawn("parcel", "parcels", join="most"), False, "join must be 'all', 'any'"),
        (Spawn("parcel", "parcels", then="nowhere"), False, "nowhere"),
    ],
)
def test_bad_spawns_are_refused_by_name(spawn: Spawn, terminal: bool, message: str) -> None:
    b = MachineBuilder("order").state("start", initial=True).state("end", terminal=True)
    b.event("go").transition("go", "start", "end")
    b.state("waiting", terminal=terminal, spawn=spawn)
    b.transition("go", "start", "waiting") if not terminal else None
    with pytest.raises(DefinitionError, match=message):
        b.build()


def test_a_compound_state_cannot_declare_children() -> None:
    b = MachineBuilder("order").state("active", initial=True, spawn=Spawn("parcel", "parcels"))
    b.state("inner", parent="active", initial=True).state("done", terminal=True)
    b.event("finish").transition("finish", "active", "done")
    with pytest.raises(DefinitionError, match="compound state"):
        b.build()
