"""Transition actions (``assign``): pure context updates made inside the transition."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from statewright import Machine, MachineBuilder
from statewright.definition.formats import (
    dumps_json,
    dumps_yaml,
    from_dict,
    from_xstate,
    loads_json,
    loads_yaml,
    to_dict,
    to_xstate,
)
from statewright.errors import DefinitionError


def payment_machine() -> Machine:
    """The seed's "3 failed payment attempts -> cancelled": an event action counts, a guard
    reads the count (guards see the context before the action)."""
    return (
        MachineBuilder("payment")
        .state("charging", initial=True)
        .state("awaiting_shipment")
        .state("shipped", terminal=True)
        .state("cancelled", terminal=True)
        .event("payment_failed", assign={"failed_attempts": "(context.failed_attempts or 0) + 1"})
        .event(
            "payment_captured",
            payload_schema={
                "type": "object",
                "properties": {"stripe_charge_id": {"type": "string"}},
                "required": ["stripe_charge_id"],
            },
        )
        .event("shipped")
        .transition(
            "payment_failed", "charging", "cancelled", guard="context.failed_attempts >= 2"
        )
        .transition("payment_failed", "charging", "charging")
        .transition(
            "payment_captured",
            "charging",
            "awaiting_shipment",
            assign={"stripe_charge_id": "payload.stripe_charge_id"},
        )
        .transition(
            "shipped",
            "awaiting_shipment",
            "shipped",
            assign={"shipment_id": "payload.shipment_id", "shipped": "True"},
        )
        .build()
    )


def test_expression_actions_compute_from_the_context_before_the_transition() -> None:
    m = payment_machine()
    t = m.resolve("charging", "payment_failed", {"failed_attempts": 1})
    assert t.target == "charging"
    assert m.assigned(t, {"failed_attempts": 1}, {}) == {"failed_attempts": 2}
    t = m.resolve("charging", "payment_failed", {"failed_attempts": 2})
    assert t.target == "cancelled"


def test_event_action_runs_before_the_transition_action_which_sees_its_result() -> None:
    m = (
        MachineBuilder("chain")
        .state("a", initial=True)
        .state("b", terminal=True)
        .event("go", assign={"n": "(context.n or 0) + 1"})
        .transition("go", "a", "b", assign={"double": "context.n * 2"})
        .build()
    )
    t = m.resolve("a", "go", {"n": 4})
    assert m.assigned(t, {"n": 4}, {}) == {"n": 5, "double": 10}


def test_python_action_by_function_and_by_name() -> None:
    def note(context: Mapping[str, Any], payload: Mapping[str, Any]) -> dict[str, Any]:
        return {"seen": [*context.get("seen", []), payload.get("x")]}

    m = (
        MachineBuilder("py")
        .action("note", note)
        .state("a", initial=True)
        .state("z", terminal=True)
        .event("end")
        .transition("end", "a", "z")
        .event("poke")
        .event("poke2")
        .transition("poke", "a", "a", assign=note)
        .transition("poke2", "a", "a", assign="note")
        .build()
    )
    t = m.resolve("a", "poke2")
    assert m.assigned(t, {"seen": [1]}, {"x": 2}) == {"seen": [1, 2]}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"n": "import os"}, "not a valid expression"),
        ({"n": "context.__class__"}, "dunder"),
        ({"n": "open('x')"}, "only len()"),
        ({"$n": "1"}, "not starting with"),
        ({"n": 1}, "must be an expression string"),
        ({}, "at least one key"),
        ("not_registered", "not registered"),
    ],
)
def test_bad_actions_are_refused_when_the_machine_is_built(spec: Any, message: str) -> None:
    with pytest.raises(DefinitionError, match=message):
        (
            MachineBuilder("bad")
            .state("a", initial=True)
            .state("z", terminal=True)
            .event("end")
            .transition("end", "a", "z")
            .event("e")
            .transition("e", "a", "a", assign=spec)
            .build()
        )


def test_json_and_yaml_keep_actions() -> None:
    m = payment_machine()
    for text, load in ((dumps_json(m), loads_json), (dumps_yaml(m), loads_yaml)):
        again = load(text)
        assert again == m
        assert to_dict(again) == to_dict(m)
    doc = to_dict(m)
    assert doc["events"][0]["assign"] == {"failed_attempts": "(context.failed_attempts or 0) + 1"}


def test_a_file_names_a_python_action_passed_to_the_loader() -> None:
    doc = {
        "name": "named",
        "states": [{"name": "a", "initial": True}, {"name": "z", "terminal": True}],
        "events": [{"name": "e"}, {"name": "end"}],
        "transitions": [
            {"event": "e", "source": "a", "target": "a", "assign": "stamp"},
            {"event": "end", "source": "a", "target": "z"},
        ],
    }
    with pytest.raises(DefinitionError, match="action 'stamp' is not registered"):
        from_dict(doc)
    m = from_dict(doc, actions={"stamp": lambda c, p: {"stamped": True}})
    assert m.assigned(m.resolve("a", "e"), {}, {}) == {"stamped": True}


def test_a_bad_expression_in_a_file_names_where_it_is() -> None:
    doc = {
        "name": "bad",
        "states": [{"name": "a", "initial": True}, {"name": "z", "terminal": True}],
        "events": [{"name": "e"}, {"name": "end"}],
        "transitions": [
            {"event": "e", "source": "a", "target": "a", "assign": {"n": "lambda: 1"}},
            {"event": "end", "source": "a", "target": "z"},
        ],
    }
    with pytest.raises(DefinitionError, match=r"transitions/0 \(event 'e'\).*not allowed"):
        from_dict(doc)


# -- XState ------------------------------------------------------------------------------------


def test_xstate_round_trip_keeps_assign() -> None:
    m = payment_machine()
    doc = json.loads(json.dumps(to_xstate(m)))
    edge = doc["states"]["charging"]["on"]["payment_captured"]
    assert edge == [
        {
            "target": "awaiting_shipment",
            "actions": [
                {
                    "type": "xstate.assign",
                    "assignment": {"stripe_charge_id": "payload.stripe_charge_id"},
                }
            ],
        }
    ]
    assert from_xstate(doc) == m


def test_xstate_import_maps_expressible_assign_actions() -> None:
    doc = {
        "id": "counter",
        "initial": "on",
        "states": {
            "off": {"type": "final"},
            "on": {
                "on": {
                    "INC": {
                        "actions": {
                            "type": "xstate.assign",
                            "assignment": {"count": "(context.count or 0) + 1"},
                        }
                    },
                    "RESET": {
                        "actions": [
                            {"type": "xstate.assign", "assignment": {"count": 0, "tags": ["a"]}}
                        ]
                    },
                    "STAMP": {"actions": "stamp"},
                    "STOP": "off",
                }
            },
        },
    }
    m = from_xstate(doc, actions={"stamp": lambda c, p: {"stamped": True}})
    assert m.assigned(m.resolve("on", "INC"), {"count": 2}, {}) == {"count": 3}
    assert m.assigned(m.resolve("on", "RESET"), {"count": 2}, {}) == {"count": 0, "tags": ["a"]}
    assert m.assigned(m.resolve("on", "STAMP"), {}, {}) == {"stamped": True}


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ({"on": {"GO": {"actions": ["sendEmail"]}}}, "action 'sendEmail' is not supported"),
        ({"on": {"GO": {"actions": {"type": "xstate.assign"}}}}, "needs an 'assignment'"),
        (
            {"on": {"GO": {"actions": {"type": "xstate.assign", "assignment": {"o": {"p": 1}}}}}},
            "cannot be expressed",
        ),
        (
            {
                "on": {
                    "GO": {
                        "actions": [
                            {"type": "xstate.assign", "assignment": {"a": "1"}},
                            {"type": "xstate.assign", "assignment": {"b": "2"}},
                        ]
                    }
                }
            },
            "more than one assign",
        ),
        ({"entry": ["log"], "on": {"GO": "a"}}, "entry: action 'log' is not supported"),
        ({"exit": [{"type": "xstate.assign"}], "on": {"GO": "a"}}, "exit: an 'xstate.assign'"),
    ],
)
def test_xstate_import_refuses_actions_it_cannot_keep(state: dict[str, Any], message: str) -> None:
    doc = {"id": "x", "initial": "a", "states": {"a": state, "z": {"type": "final"}}}
    with pytest.raises(
        DefinitionError, match=r"not supported|cannot be|needs an|more than"
    ) as info:
        from_xstate(doc)
    assert message in str(info.value)
    assert "state 'a'" in str(info.value)
