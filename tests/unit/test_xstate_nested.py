"""XState machines with nested states: imported, run by the engine, rendered; the features not
built (history and parallel states) are refused by name."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from statewright import Engine, ManualClock, SQLiteStore, Worker, WorkflowType
from statewright.definition import from_xstate, to_dot, to_mermaid, to_xstate
from statewright.definition.formats.document import to_dict
from statewright.errors import DefinitionError

# XState's documentation examples, as published (each object literal written as JSON, nothing
# added or removed).

# The "Parent states" entry of the XState v5 cheatsheet:
# https://stately.ai/docs/cheatsheet#parent-states (statelyai/docs, content/docs/cheatsheet.mdx)
PARENT: dict[str, Any] = {
    "id": "parent",
    "initial": "active",
    "states": {
        "active": {
            "initial": "one",
            "states": {"one": {"on": {"NEXT": {"target": "two"}}}, "two": {}},
            "on": {"NEXT": {"target": "inactive"}},
        },
        "inactive": {},
    },
}

# The "State meta data" example of the XState v4 guide to states:
# https://xstate.js.org/docs/guides/states.html#state-meta-data (statelyai/xstate at
# 45d97de0, docs/guides/states.md)
FETCH: dict[str, Any] = {
    "id": "fetch",
    "initial": "idle",
    "states": {
        "idle": {"on": {"FETCH": {"target": "loading"}}},
        "loading": {
            "after": {"3000": "failure.timeout"},
            "on": {
                "RESOLVE": {"target": "success"},
                "REJECT": {"target": "failure"},
                "TIMEOUT": {"target": "failure.timeout"},
            },
            "meta": {"message": "Loading..."},
        },
        "success": {"meta": {"message": "The request succeeded!"}},
        "failure": {
            "initial": "rejection",
            "states": {
                "rejection": {"meta": {"message": "The request failed."}},
                "timeout": {"meta": {"message": "The request timed out."}},
            },
            "meta": {"alert": "Uh oh."},
        },
    },
}

# The "Parent and child states" example of the XState v4 documentation:
# https://stately.ai/docs/xstate-v4/xstate/states/parent-and-child-states
DOG_WALK: dict[str, Any] = {
    "initial": "waiting",
    "states": {
        "waiting": {"on": {"leave home": {"target": "on a walk"}}},
        "on a walk": {
            "initial": "walking",
            "on": {"arrive home": {"target": "walk complete"}},
            "states": {
                "walking": {
                    "on": {
                        "speed up": {"target": "running"},
                        "stop": {"target": "stopping to sniff good smells"},
                    }
                },
                "running": {"on": {"slow down": {"target": "walking"}}},
                "stopping to sniff good smells": {"on": {"speed up": {"target": "walking"}}},
            },
        },
        "walk complete": {},
    },
}

WALK = "on a walk"
SNIFF = f"{WALK}.stopping to sniff good smells"


async def _engine(*machines: Any, clock: ManualClock | None = None) -> Engine:
    engine = Engine(
        SQLiteStore(":memory:"),
        [WorkflowType(m) for m in machines],
        clock=clock or ManualClock(),
        rng=random.Random(1),
    )
    await engine.open()
    return engine


async def test_the_cheatsheet_parent_states_example_runs_as_documented() -> None:
    m = from_xstate(PARENT)
    assert list(m.states) == ["active.one", "active.two", "inactive"]
    assert m.terminal_states == ("inactive",)  # nothing leads out of it
    engine = await _engine(m)
    # The docs: starts in { active: 'one' }; NEXT -> { active: 'two' }; NEXT -> 'inactive'
    # (one's own NEXT wins over its parent's; two has none, so its parent's is taken).
    row = (await engine.start("parent", workflow_id="p")).row
    assert row.state == "active.one"
    assert (await engine.send("p", "NEXT")).row.state == "active.two"
    row = (await engine.send("p", "NEXT")).row
    assert (row.state, row.terminal) == ("inactive", True)
    assert (await engine.check("p")).state == "inactive"
    await engine.close()


async def test_the_fetch_example_runs_its_timer_into_a_nested_state() -> None:
    m = from_xstate(FETCH)
    timer = "xstate.after.3000.loading"
    assert m.states["loading"].after == {3.0: timer}
    assert m.resolve("loading", "REJECT").target == "failure.rejection"
    assert m.resolve("loading", timer).target == "failure.timeout"
    assert set(m.terminal_states) == {"success", "failure.rejection", "failure.timeout"}
    clock = ManualClock()
    engine = await _engine(m, clock=clock)
    await engine.start("fetch", workflow_id="f")
    await engine.send("f", "FETCH")
    clock.advance(3)
    await Worker(engine).run_until_idle()
    row = await engine.get("f")
    assert (row.state, row.terminal) == ("failure.timeout", True)
    assert [t.event for t in await engine.history("f")] == ["$start", "FETCH", timer]
    await engine.check("f")
    await engine.close()


def test_the_fetch_example_renders() -> None:
    m = from_xstate(FETCH)
    mermaid = to_mermaid(m, current="failure.timeout")
    assert "    state failure {" in mermaid
    assert "    loading --> s" in mermaid  # into a child of failure, by its alias
    dot = to_dot(m)
    assert 'subgraph "cluster_failure" {' in dot
    assert '"loading" -> "failure.rejection" [label="REJECT", lhead="cluster_failure"];' in dot
    assert '"loading" -> "failure.timeout" [label="xstate.after.3000.loading (after 3s)"];' in dot


def test_names_with_spaces_import_as_paths() -> None:
    m = from_xstate(DOG_WALK)
    assert m.name == "machine"  # XState's default id
    assert list(m.states) == [
        "waiting",
        f"{WALK}.walking",
        f"{WALK}.running",
        SNIFF,
        "walk complete",
    ]
    # 'walk complete' has no way out: XState rests there for good, here it is terminal.
    assert m.terminal_states == ("walk complete",)
    # 'arrive home' is declared on the parent: the docs' point, it works in every child.
    for leaf in (f"{WALK}.walking", f"{WALK}.running", SNIFF):
        assert m.resolve(leaf, "arrive home").target == "walk complete"
    # 'stop' is declared on walking only.
    assert m.can(f"{WALK}.walking", "stop")
    assert not m.can(f"{WALK}.running", "stop")
    # Entering the parent enters its initial child.
    assert m.resolve("waiting", "leave home").target == f"{WALK}.walking"


def test_names_with_spaces_render_through_aliases() -> None:
    m = from_xstate(DOG_WALK)
    mermaid = to_mermaid(m, current=SNIFF)
    lines = mermaid.splitlines()
    # 'on a walk' is not a plain id: it gets an alias, and its box holds its three children.
    [opening] = [line for line in lines if line.endswith("{")]
    box = opening.split()[1]
    assert f'    state "on a walk" as {box}' in lines
    inside = lines[lines.index(opening) + 1 : lines.index("    }")]
    assert sum(1 for line in inside if line.startswith('        state "')) == 3
    assert any(line.startswith("        [*] --> ") for line in inside)
    assert any(line.startswith(f"    {box} --> ") and "arrive home" in line for line in lines)
    assert "class " in mermaid.splitlines()[-1]

    dot = to_dot(m, current=SNIFF)
    assert 'subgraph "cluster_on a walk" {' in dot
    assert '"on a walk.running" [label="running"];' in dot
    assert 'ltail="cluster_on a walk"' in dot
    assert 'lhead="cluster_on a walk"' in dot
    assert f'"{SNIFF}" [label="stopping to sniff good smells", style=filled' in dot


def test_nested_machines_round_trip_through_xstate_json() -> None:
    m = from_xstate(DOG_WALK)
    doc = json.loads(json.dumps(to_xstate(m)))
    assert doc["states"][WALK]["initial"] == "walking"
    assert doc["states"][WALK]["on"]["arrive home"] == "walk complete"  # both top-level
    walking = doc["states"][WALK]["states"]["walking"]
    assert walking["on"]["speed up"] == f"#machine.{WALK}.running"
    again = from_xstate(doc)
    assert to_dict(again) == to_dict(m)
    assert again == m


def test_entry_and_exit_assigns_are_imported() -> None:
    m = from_xstate(
        {
            "id": "door",
            "initial": "open",
            "states": {
                "open": {
                    "initial": "wide",
                    "entry": [{"type": "xstate.assign", "assignment": {"opened": True}}],
                    "exit": {"type": "xstate.assign", "assignment": {"closes": "1"}},
                    "on": {"SHUT": "shut"},
                    "states": {"wide": {"on": {"NARROW": "ajar"}}, "ajar": {}},
                },
                "shut": {"type": "final"},
            },
        }
    )
    node = m.node("open")
    assert node.entry is not None and node.entry.exprs == {"opened": "True"}
    assert node.exit is not None and node.exit.exprs == {"closes": "1"}
    assert m.started({}) == {"opened": True}
    t = m.resolve("open.ajar", "SHUT")
    assert m.assigned(t, {}, {}, source="open.ajar") == {"closes": 1}
    assert m.resolve("open.wide", "NARROW").target == "open.ajar"


@pytest.mark.parametrize(
    ("node", "message"),
    [
        (
            {"initial": "a", "states": {"a": {"on": {"GO": "hist"}}, "hist": {"type": "history"}}},
            "state 'p.hist': history states are not supported",
        ),
        (
            {"type": "parallel", "states": {"a": {}, "b": {}}},
            "state 'p': parallel states are not supported: run concurrent work as child workflows",
        ),
        (
            {"initial": "a", "on": {"POKE": {"actions": []}}, "states": {"a": {}}},
            "a transition without a target on a compound state is not supported",
        ),
    ],
)
def test_what_is_not_built_is_refused_by_name(node: dict[str, Any], message: str) -> None:
    doc = {
        "id": "m",
        "initial": "p",
        "states": {"p": {**node, "on": {**node.get("on", {}), "END": "end"}}, "end": {}},
    }
    with pytest.raises(DefinitionError) as info:
        from_xstate(doc)
    assert message in str(info.value)
    assert "xstate_unsupported" in [p.code for p in info.value.problems]


def test_a_child_target_and_a_sibling_path_resolve() -> None:
    m = from_xstate(
        {
            "id": "m",
            "initial": "a",
            "states": {
                "a": {"on": {"DEEP": "b.y", "END": "end"}},
                "b": {
                    "initial": "x",
                    "on": {"RESET": ".x", "END": "end"},
                    "states": {"x": {"on": {"NEXT": "y"}}, "y": {}},
                },
                "end": {"type": "final"},
            },
        }
    )
    assert m.resolve("a", "DEEP").target == "b.y"
    assert m.resolve("b.y", "RESET").target == "b.x"
    assert m.resolve("b.x", "NEXT").target == "b.y"
