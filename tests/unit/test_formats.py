from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from statewright.definition import (
    Machine,
    MachineBuilder,
    Spawn,
    agent_task_machine,
    dumps_json,
    dumps_yaml,
    from_dict,
    from_xstate,
    load_path,
    loads_json,
    loads_yaml,
    save_path,
    to_dict,
    to_xstate,
)
from statewright.definition.formats import check_document, machine_schema
from statewright.errors import DefinitionError, InvalidInput

FILE_KEYS = {"subscriptions", "budgets", "redact", "input_schema", "search_attributes"}
"""Keys of a definition file that are not the machine's (the type's, or its subscriptions)."""


def over_budget(context: Mapping[str, Any], payload: Mapping[str, Any]) -> bool:
    return bool(context.get("spent", 0) > context.get("budget", 0))


def guarded_machine() -> Machine:
    return (
        MachineBuilder("spend", version=2, description="Python and expression guards")
        .guard("over_budget", over_budget)
        .state(
            "open",
            initial=True,
            after={0.5: "tick", 60: "close"},
            stuck_after=120,
            every={30: "tick"},
        )
        .state("closed", terminal=True, description="done")
        .event("tick", "a timer", roles=["system"], assign={"ticks": "(context.ticks or 0) + 1"})
        .event("close", payload_schema={"type": "object"}, approval=True)
        .transition("close", "open", "closed", guard="over_budget", description="python")
        .transition("close", "open", "closed", guard="payload.force == True")
        .transition(
            "close", ["open"], "closed", assign={"closed_by": "payload.by"}, compensate=True
        )
        .transition("tick", "open", "open")
        .build()
    )


@pytest.mark.parametrize("machine", [agent_task_machine(), guarded_machine()])
def test_json_and_yaml_round_trip(machine: Machine) -> None:
    guards = {"over_budget": over_budget}
    for text, load in ((dumps_json(machine), loads_json), (dumps_yaml(machine), loads_yaml)):
        again = load(text, guards)
        assert to_dict(again) == to_dict(machine)
        assert again == machine


def test_dumps_are_deterministic_json() -> None:
    text = dumps_json(agent_task_machine())
    assert text == dumps_json(agent_task_machine())
    assert json.loads(text)["states"][2]["after"] == {
        "82800": "approval_reminder",
        "86400": "approval_timeout",
    }


def test_python_guard_is_saved_by_name_and_needs_registering() -> None:
    data = to_dict(guarded_machine())
    assert data["transitions"][0]["guard"] == "over_budget"
    assert data["transitions"][1]["guard"] == "payload.force == True"
    with pytest.raises(DefinitionError) as info:
        from_dict(data)
    (problem,) = info.value.problems
    assert (problem.code, problem.event) == ("missing_guard", "close")
    assert "'over_budget'" in problem.message
    assert "guards=" in problem.message
    machine = from_dict(data, guards={"over_budget": over_budget})
    assert machine.resolve("open", "close", {"spent": 5, "budget": 1}).description == "python"


def test_registered_name_takes_precedence_over_expression() -> None:
    data = to_dict(guarded_machine())
    data["transitions"][0]["guard"] = "payload.force == True"
    never = {"payload.force == True": lambda c, p: False, "over_budget": over_budget}
    machine = from_dict(data, guards=never)
    guard = machine.transitions[0].guard
    assert guard is not None
    assert guard.expr is None
    assert not guard({}, {"force": True})


def test_missing_guard_reported_with_other_problems() -> None:
    data = to_dict(guarded_machine())
    data["states"].append({"name": "island", "terminal": True})
    with pytest.raises(DefinitionError) as info:
        from_dict(data)
    assert [p.code for p in info.value.problems] == ["missing_guard", "unreachable_state"]


@pytest.mark.parametrize(
    ("mutate", "where"),
    [
        (lambda d: d.update(colour="red"), "at /: Additional properties"),
        (lambda d: d["states"][0].update(intial=True), "at /states/0: Additional"),
        (lambda d: d["events"][0].update(role=["x"]), "at /events/0: Additional"),
        (lambda d: d["transitions"][0].update(when="x"), "at /transitions/0: Additional"),
        (lambda d: d["states"][2]["after"].update(soon="x"), "at /states/2/after"),
        (lambda d: d["transitions"][0].update(source=[]), "at /transitions/0/source"),
        (lambda d: d.pop("states"), "'states' is a required property"),
        (lambda d: d.update(version="1"), "at /version"),
    ],
)
def test_schema_rejects_bad_documents(mutate: Any, where: str) -> None:
    data = to_dict(agent_task_machine())
    mutate(data)
    with pytest.raises(DefinitionError) as info:
        from_dict(data)
    assert info.value.problems[0].code == "invalid_document"
    assert where in str(info.value)


def test_non_object_document_rejected() -> None:
    with pytest.raises(DefinitionError, match="is not of type 'object'"):
        check_document([1, 2])


def test_bad_syntax() -> None:
    with pytest.raises(DefinitionError) as info:
        loads_json("{nope")
    assert info.value.problems[0].code == "invalid_syntax"
    with pytest.raises(DefinitionError) as info:
        loads_yaml("a: [unclosed")
    assert info.value.problems[0].code == "invalid_syntax"


def test_yaml_accepts_numeric_after_keys_and_defaults() -> None:
    machine = loads_yaml(
        """
        name: tiny
        states:
          - {name: a, initial: true, after: {30: go}}
          - {name: b, terminal: true}
        events: [{name: go}]
        transitions: [{event: go, source: a, target: b}]
        """
    )
    assert machine.states["a"].after == {30.0: "go"}
    assert (machine.version, machine.description) == (1, "")


def test_load_and_save_path_by_suffix(tmp_path: Path) -> None:
    machine = agent_task_machine()
    for suffix in (".json", ".yaml", ".YML"):
        path = tmp_path / f"m{suffix}"
        save_path(machine, path)
        assert load_path(str(path)) == machine
    assert (tmp_path / "m.json").read_text(encoding="utf-8").startswith("{")
    with pytest.raises(InvalidInput, match=r"\.toml"):
        save_path(machine, tmp_path / "m.toml")
    with pytest.raises(InvalidInput):
        load_path(tmp_path / "m.toml")


def test_schema_is_valid_and_describes_to_dict_output() -> None:
    schema = machine_schema()
    Draft202012Validator.check_schema(schema)
    for machine in (agent_task_machine(), guarded_machine()):
        check_document(to_dict(machine))


class Recording(dict[str, Any]):
    """A dict that records which keys the parser reads, per kind of object."""

    def __init__(self, kind: str, data: Mapping[str, Any], seen: set[tuple[str, str]]) -> None:
        super().__init__(data)
        self.kind = kind
        self.seen = seen

    def __getitem__(self, key: str) -> Any:
        self.seen.add((self.kind, key))
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self.seen.add((self.kind, key))
        return super().get(key, default)


def test_parser_reads_exactly_the_schema_keys() -> None:
    """STYLE #18: the keys the parser reads equal the schema's properties."""
    data = to_dict(guarded_machine())
    seen: set[tuple[str, str]] = set()
    doc = Recording("machine", data, seen)
    doc["states"] = [Recording("state", s, seen) for s in data["states"]]
    doc["events"] = [Recording("event", e, seen) for e in data["events"]]
    doc["transitions"] = [Recording("transition", t, seen) for t in data["transitions"]]
    seen.clear()
    from_dict(doc, guards={"over_budget": over_budget})

    schema = machine_schema()
    # (``subscriptions``, ``budgets``, ``redact`` and ``input_schema`` are the file's, not the
    # machine's: see test_subscriptions_in_a_file, tests/integration/test_cli_agents.py and
    # test_cli_input_schema.py.)
    expected = {("machine", k) for k in schema["properties"] if k not in FILE_KEYS}
    for kind in ("state", "event", "transition"):
        expected |= {(kind, k) for k in schema["$defs"][kind]["properties"]}
    assert seen == expected


def nested_machine() -> Machine:
    """Compound states with entry and exit actions (the keys the flat one has not)."""
    return (
        MachineBuilder("nested")
        .state("active", initial=True, entry={"opened": "True"}, exit={"closed": "True"})
        .state("a", parent="active", initial=True)
        .state("b", parent="active", entry={"seen_b": "True"})
        .state("done", terminal=True)
        .event("next")
        .event("stop")
        .transition("next", "active.a", "active.b")
        .transition("stop", "active", "done")
        .build()
    )


def _nested_states(states: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [x for s in states for x in (s, *_nested_states(s.get("states", [])))]


def spawning_machine() -> Machine:
    """A state that declares its children, every key of the spawn set."""
    spawn = Spawn("parcel", "parcels", cap=2, join=2, then="shipped", input="parcel")
    return (
        MachineBuilder("order")
        .state("shipping", initial=True, spawn=spawn)
        .state("shipped", terminal=True)
        .build()
    )


def test_a_spawn_round_trips_with_every_key() -> None:
    data = to_dict(spawning_machine())
    assert data["states"][0]["spawn"] == {
        "type": "parcel",
        "over": "parcels",
        "cap": 2,
        "join": 2,
        "then": "shipped",
        "input": "parcel",
    }
    assert from_dict(data).states["shipping"].spawn == spawning_machine().states["shipping"].spawn


def test_to_dict_writes_every_schema_key() -> None:
    schema = machine_schema()
    written: dict[str, set[str]] = {"state": set(), "event": set(), "transition": set()}
    for machine in (guarded_machine(), nested_machine(), spawning_machine()):
        data = to_dict(machine)
        check_document(data)
        assert set(data) == set(schema["properties"]) - FILE_KEYS
        written["state"] |= {k for s in _nested_states(data["states"]) for k in s}
        written["event"] |= {k for e in data["events"] for k in e}
        written["transition"] |= {k for t in data["transitions"] for k in t}
    for kind, keys in written.items():
        assert keys == set(schema["$defs"][kind]["properties"]), kind


def test_parser_reads_the_nested_state_keys() -> None:
    data = to_dict(nested_machine())
    seen: set[tuple[str, str]] = set()

    def wrap(states: list[dict[str, Any]]) -> list[Recording]:
        out = []
        for s in states:
            r = Recording("state", s, seen)
            if "states" in s:
                dict.__setitem__(r, "states", wrap(s["states"]))
            out.append(r)
        return out

    doc = dict(data, states=wrap(data["states"]))
    assert from_dict(doc) == nested_machine()
    inner = {k for kind, k in seen if kind == "state"}
    assert {"entry", "exit", "states"} <= inner


# -- XState --------------------------------------------------------------------------------


def flat_machine() -> Machine:
    # Single-source transitions declared state by state: the shape XState can hold exactly.
    return (
        MachineBuilder("door", version=4, description="a door")
        .state("closed", initial=True, description="shut")
        .state("open", after={0.25: "close", 30: "alarm"}, stuck_after=60)
        .state("alarmed")
        .state("gone", terminal=True)
        .event("open", roles=["user"], payload_schema={"type": "object"})
        .event("close", "shut it")
        .event("alarm")
        .event("remove", approval=True)
        .transition("open", "closed", "open", guard="payload.key == 'ok'")
        .transition("open", "closed", "alarmed", description="forced")
        .transition("remove", "closed", "gone")
        .transition("close", "open", "closed")
        .transition("alarm", "open", "alarmed")
        .transition("close", "alarmed", "alarmed")
        .transition("remove", "alarmed", "gone")
        .build()
    )


def test_xstate_round_trip() -> None:
    machine = flat_machine()
    doc = to_xstate(machine)
    assert doc["id"] == "door"
    assert doc["initial"] == "closed"
    states = doc["states"]
    assert states["gone"] == {"type": "final"}
    assert states["closed"]["on"]["open"] == [
        {"target": "open", "guard": "payload.key == 'ok'"},
        {"target": "alarmed", "description": "forced"},
    ]
    assert states["closed"]["on"]["remove"] == "gone"
    assert states["open"]["after"]["250"] == [
        {"target": "closed", "meta": {"statewright": {"event": "close"}}}
    ]
    again = from_xstate(json.loads(json.dumps(doc)))
    assert to_dict(again) == to_dict(machine)
    assert again == machine


def test_xstate_splits_multi_source_transitions() -> None:
    machine = agent_task_machine()
    doc = to_xstate(machine)
    for state in ("running", "blocked", "retrying"):
        assert doc["states"][state]["on"]["fatal_error"] == "failed"
    again = from_xstate(doc)
    assert again.states == machine.states
    assert again.events == machine.events
    for state in machine.states:
        for event in machine.events:
            assert [(t.target, t.guard) for t in again.transitions_from(state, event)] == [
                (t.target, t.guard) for t in machine.transitions_from(state, event)
            ]


def test_xstate_foreign_machine() -> None:
    doc = {
        "id": "light",
        "initial": "green",
        "states": {
            "green": {
                "on": {"TIMER": {"target": "#light.yellow", "cond": "context.ok"}},
                "tags": ["go"],
            },
            "yellow": {"after": {"1500": "red"}, "on": {"POKE": {}}},
            "red": {"on": {"STOP": [{"target": "off"}]}},
            "off": {"type": "final"},
        },
    }
    machine = from_xstate(doc)
    assert machine.version == 1
    assert machine.resolve("green", "TIMER", {"ok": True}).target == "yellow"
    assert machine.resolve("yellow", "POKE").is_self
    timer = "xstate.after.1500.yellow"
    assert machine.states["yellow"].after == {1.5: timer}
    assert machine.resolve("yellow", timer).target == "red"
    assert list(machine.events) == ["TIMER", "POKE", timer, "STOP"]


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (
            {
                "id": "n",
                "initial": "a",
                "states": {"a": {"type": "parallel", "states": {"x": {}}}, "b": {"type": "final"}},
            },
            "parallel states are not supported: run concurrent work as child workflows",
        ),
        ({"id": "p", "type": "parallel", "states": {"a": {}, "b": {}}}, "parallel"),
        ({"id": "h", "initial": "a", "states": {"a": {"type": "history"}}}, "history"),
        ({"id": "i", "initial": "a", "states": {"a": {"invoke": {"src": "x"}}}}, "'invoke'"),
        (
            {"id": "d", "initial": "a", "states": {"a": {"after": {"SLOW": "b"}}, "b": {}}},
            "named delay",
        ),
        ({"id": "t", "initial": "a", "states": {"a": {"on": {"GO": "#other"}}}}, "'#other'"),
        ({"id": "w", "initial": "a", "states": {"a": {"on": {"*": "a"}}}}, "'*'"),
        (
            {"id": "m", "initial": "a", "states": {"a": {"on": {"GO": {"target": ["a", "b"]}}}}},
            "multiple targets",
        ),
        ({"no": "states"}, "'states' object"),
    ],
)
def test_xstate_unsupported_features_rejected(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(DefinitionError, match=r"not supported|'states' object") as info:
        from_xstate(doc)
    assert message in str(info.value)
    if "states" in doc:
        assert "xstate_unsupported" in [p.code for p in info.value.problems]


def test_load_path_of_a_missing_file_is_invalid_input(tmp_path: Path) -> None:
    from statewright.definition.formats import load_path
    from statewright.errors import InvalidInput

    with pytest.raises(InvalidInput, match="cannot read"):
        load_path(tmp_path / "absent.yaml")


def test_nested_machines_round_trip_through_json_and_yaml() -> None:
    machine = nested_machine()
    for text, load in ((dumps_json(machine), loads_json), (dumps_yaml(machine), loads_yaml)):
        again = load(text)
        assert to_dict(again) == to_dict(machine)
        assert again == machine
        assert list(again.states) == ["active.a", "active.b", "done"]
    [active, _done] = to_dict(machine)["states"]
    assert [c["name"] for c in active["states"]] == ["a", "b"]
    assert active["entry"] == {"opened": "True"} and active["states"][0]["initial"] is True
