from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from statewright.definition import Event, Guard, Machine, State, Transition
from statewright.definition.validate import CODES, validate
from statewright.errors import DefinitionError, Problem


def _yes(context: Mapping[str, Any], payload: Mapping[str, Any]) -> bool:
    return True


G = Guard("g", _yes)
A = State("a", initial=True)
B = State("b", terminal=True)
GO = Event("go")
A_GO_B = Transition(("a",), "go", "b")


def problems(
    states: Sequence[State] = (A, B),
    events: Sequence[Event] = (GO,),
    transitions: Sequence[Transition] = (A_GO_B,),
    name: str = "m",
    version: int = 1,
) -> list[Problem]:
    with pytest.raises(DefinitionError) as info:
        validate(name, version, states, events, transitions)
    assert info.value.machine == name
    return info.value.problems


def find(found: list[Problem], code: str) -> Problem:
    matching = [p for p in found if p.code == code]
    assert matching, f"no {code!r} in {[p.code for p in found]}"
    return matching[0]


CASES: dict[str, tuple[dict[str, Any], str | None, str | None]] = {
    # code: (arguments to problems(), expected state, expected event)
    "invalid_machine_name": ({"name": "has space"}, None, None),
    "invalid_version": ({"version": 0}, None, None),
    "invalid_state_name": ({"states": [A, B, State("")]}, "", None),
    "invalid_event_name": ({"events": [GO, Event("")]}, None, ""),
    "duplicate_state": ({"states": [A, B, State("b", terminal=True)]}, "b", None),
    "duplicate_event": ({"events": [GO, Event("go")]}, None, "go"),
    "no_initial_state": ({"states": [State("a"), B]}, None, None),
    "multiple_initial_states": (
        {"states": [A, State("b", initial=True, terminal=True)]},
        "b",
        None,
    ),
    "no_terminal_state": ({"states": [A, State("b")]}, None, None),
    "transition_without_source": (
        {"transitions": [A_GO_B, Transition((), "go", "b")]},
        None,
        "go",
    ),
    "unknown_source_state": (
        {"transitions": [A_GO_B, Transition(("zz",), "go", "b")]},
        "zz",
        "go",
    ),
    "unknown_target_state": (
        {"transitions": [A_GO_B, Transition(("a",), "go", "zz", G)]},
        "zz",
        "go",
    ),
    "unknown_event": ({"transitions": [A_GO_B, Transition(("a",), "nope", "b")]}, None, "nope"),
    "transition_from_terminal": (
        {"transitions": [A_GO_B, Transition(("b",), "go", "a")]},
        "b",
        "go",
    ),
    "ambiguous_transition": ({"transitions": [A_GO_B, Transition(("a",), "go", "a")]}, "a", "go"),
    "shadowed_transition": (
        {"transitions": [A_GO_B, Transition(("a",), "go", "a", G)]},
        "a",
        "go",
    ),
    "unreachable_state": ({"states": [A, B, State("island", terminal=True)]}, "island", None),
    "trap_state": (
        {
            "states": [A, B, State("pit")],
            "transitions": [A_GO_B, Transition(("a",), "go", "pit", G)],
        },
        "pit",
        None,
    ),
    "invalid_after_delay": ({"states": [State("a", initial=True, after={0: "go"}), B]}, "a", "go"),
    "after_unknown_event": (
        {"states": [State("a", initial=True, after={5: "nope"}), B]},
        "a",
        "nope",
    ),
    "after_event_not_from_state": (
        {
            "states": [State("a", initial=True, after={5: "stop"}), B],
            "events": [GO, Event("stop")],
        },
        "a",
        "stop",
    ),
    "after_on_terminal_state": (
        {"states": [A, State("b", terminal=True, after={5: "go"})]},
        "b",
        None,
    ),
    "invalid_every_interval": (
        {"states": [State("a", initial=True, every={0: "go"}), B]},
        "a",
        "go",
    ),
    "every_unknown_event": (
        {"states": [State("a", initial=True, every={5: "nope"}), B]},
        "a",
        "nope",
    ),
    "every_event_not_from_state": (
        {
            "states": [State("a", initial=True, every={5: "stop"}), B],
            "events": [GO, Event("stop")],
        },
        "a",
        "stop",
    ),
    "every_on_terminal_state": (
        {"states": [A, State("b", terminal=True, every={5: "go"})]},
        "b",
        None,
    ),
    "invalid_stuck_after": ({"states": [State("a", initial=True, stuck_after=-1), B]}, "a", None),
    "invalid_payload_schema": (
        {"events": [Event("go", payload_schema={"type": "nonsense"})]},
        None,
        "go",
    ),
}


def test_every_code_has_a_case() -> None:
    assert set(CASES) == set(CODES)


@pytest.mark.parametrize("code", list(CASES))
def test_problem_code(code: str) -> None:
    kwargs, state, event = CASES[code]
    problem = find(problems(**kwargs), code)
    assert (problem.state, problem.event) == (state, event)
    for name in (state, event):
        if name:
            assert repr(name) in problem.message


def test_machine_name_empty() -> None:
    assert find(problems(name=""), "invalid_machine_name")


def test_trap_includes_cycles_without_exit() -> None:
    found = problems(
        states=[A, B, State("x"), State("y")],
        transitions=[
            A_GO_B,
            Transition(("a",), "go", "x", G),
            Transition(("x",), "go", "y"),
            Transition(("y",), "go", "x"),
        ],
    )
    assert {p.state for p in found if p.code == "trap_state"} == {"x", "y"}


def test_all_problems_in_one_error() -> None:
    found = problems(
        name="",
        states=[State("a"), B, B],
        transitions=[Transition(("a",), "nope", "zz")],
    )
    codes = {p.code for p in found}
    assert {
        "invalid_machine_name",
        "duplicate_state",
        "no_initial_state",
        "unknown_event",
        "unknown_target_state",
    } <= codes


def test_error_is_json_ready() -> None:
    with pytest.raises(DefinitionError) as info:
        Machine.build("m", states=[A, B], events=[GO], transitions=[])
    data = info.value.to_dict()
    assert data["code"] == "definition_invalid"
    assert data["problems"] == [
        {
            "code": "unreachable_state",
            "message": "state 'b' cannot be reached from the initial state",
            "state": "b",
            "event": None,
        },
        {
            "code": "trap_state",
            "message": info.value.problems[1].message,
            "state": "a",
            "event": None,
        },
    ]


def test_valid_machine_builds() -> None:
    m = Machine.build(
        "ok",
        states=[State("a", initial=True, after={30: "tick", 60: "go"}, stuck_after=90), B],
        events=[GO, Event("tick"), Event("unused")],
        transitions=[Transition(("a",), "go", "b", G), A_GO_B, Transition(("a",), "tick", "a")],
        version=3,
    )
    assert m.version == 3
    assert m.allowed_events("a") == ["go", "tick"]


def test_initial_terminal_state_is_fine() -> None:
    m = Machine.build(
        "one", states=[State("only", initial=True, terminal=True)], events=[], transitions=[]
    )
    assert m.terminal_states == ("only",)


def test_the_schemas_known_valid_are_valid_json_schemas() -> None:
    """Machines whose payload schemas are all known valid skip importing jsonschema at build
    (a CLI start cost); the built-in machines' schemas are, and must really be valid."""
    from jsonschema import Draft202012Validator

    from statewright.definition.builtin.agent_task import agent_task_machine
    from statewright.definition.validate import _KNOWN_VALID

    agent_task_machine()
    assert _KNOWN_VALID
    for text in _KNOWN_VALID:
        Draft202012Validator.check_schema(json.loads(text))
