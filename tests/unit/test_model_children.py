"""Model-based tests of a parent with children (``check_machine(..., children=...)``): every
workflow of the tree replays to its row after every step, the model never sends the children's
events itself, and a child left live by an ended parent is found (orphaned)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import settings

from statewright import MachineBuilder, WorkflowType
from statewright.engine import children
from statewright.engine.children import all_done, fan_out, gather
from statewright.testing import ModelCheckFailure, check_machine

FEW = settings(max_examples=15, deadline=None, database=None)


def parent() -> WorkflowType:
    b = MachineBuilder("trip")
    b.state("booking", initial=True).state("booked", terminal=True)
    b.state("abandoned", terminal=True)
    b.event("child_done").event("child_failed").event("abandon")
    for event in ("child_done", "child_failed"):
        b.transition(event, "booking", "booked", guard=all_done("legs"), assign=gather())
        b.transition(event, "booking", "booking", assign=gather())
    b.transition("abandon", "booking", "abandoned")
    return WorkflowType(b.build(), handlers={"booking": fan_out("leg", "legs", cap=2)})


def leg() -> WorkflowType:
    """A leg waits for its confirmation (an event) after its reservation step."""
    b = MachineBuilder("leg")
    b.state("reserving", initial=True).state("held").state("confirmed", terminal=True)
    b.state("cancelled", terminal=True)
    b.event("held").event("confirm").event("cancel")
    b.transition("held", "reserving", "held").transition("confirm", "held", "confirmed")
    b.transition("cancel", ["reserving", "held"], "cancelled")

    async def reserving(run: Any) -> str:
        await run.step("reserve", lambda key: {"seat": key})
        return "held"

    async def held(run: Any) -> str:
        return "confirm"

    return WorkflowType(b.build(), handlers={"reserving": reserving, "held": held})


def test_a_parent_and_its_children_hold_under_random_events() -> None:
    check_machine(parent, children=[leg], inputs={"legs": ["out", "back", "car"]}, settings=FEW)


def test_a_child_left_live_by_its_ended_parent_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(children, "ended", lambda rt, row: None)  # the cascade is lost

    def slow_leg() -> WorkflowType:
        wtype = leg()
        return WorkflowType(wtype.machine, handlers={"reserving": wtype.handlers["reserving"]})

    with pytest.raises(ModelCheckFailure, match="orphaned"):
        check_machine(
            parent,
            children=[slow_leg],
            inputs={"legs": ["out", "back"]},
            settings=settings(max_examples=60, deadline=None, database=None),
        )
