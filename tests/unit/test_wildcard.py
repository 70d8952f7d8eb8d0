"""A transition from ``*`` leaves every non-terminal state (issue 12, item 2)."""

from __future__ import annotations

import pytest

from statewright import MachineBuilder
from statewright.definition.formats.document import from_dict, to_dict
from statewright.errors import DefinitionError, IllegalTransition


def builder() -> MachineBuilder:
    b = MachineBuilder("payment")
    b.state("created", initial=True).state("authorized").state("captured")
    b.state("done", terminal=True).state("failed", terminal=True)
    b.event("authorize").event("capture").event("finish").event("fatal_error")
    b.transition("authorize", "created", "authorized")
    b.transition("capture", "authorized", "captured")
    b.transition("finish", "captured", "done")
    return b


def test_a_wildcard_source_is_every_live_state() -> None:
    m = builder().transition("fatal_error", "*", "failed").build()
    for state in ("created", "authorized", "captured"):
        assert m.resolve(state, "fatal_error", {}, {}).target == "failed"
    with pytest.raises(IllegalTransition):
        m.resolve("done", "fatal_error", {}, {})  # a terminal state stays final
    [edge] = [t for t in m.transitions if t.event == "fatal_error"]
    assert edge.sources == ("created", "authorized", "captured")


def test_a_wildcard_next_to_named_states_and_in_documents() -> None:
    doc = to_dict(builder().transition("fatal_error", "created", "failed").build())
    [edge] = [t for t in doc["transitions"] if t["event"] == "fatal_error"]
    edge["source"] = ["created", "*"]  # named first, then every other live state
    m = from_dict(doc)
    assert {s for t in m.transitions if t.event == "fatal_error" for s in t.sources} == {
        "created",
        "authorized",
        "captured",
    }


def test_a_conflict_with_an_explicit_edge_is_named() -> None:
    b = builder().transition("fatal_error", "captured", "done")
    b.transition("fatal_error", "*", "failed")
    with pytest.raises(DefinitionError) as err:
        b.build()
    [problem] = err.value.problems
    assert (problem.code, problem.state) == ("ambiguous_transition", "captured")
    # A guarded explicit edge declared first is fine: it wins when its guard passes.
    b = builder().transition("fatal_error", "captured", "done", guard="payload.late == True")
    m = b.transition("fatal_error", "*", "failed").build()
    assert m.resolve("captured", "fatal_error", {}, {"late": True}).target == "done"
    assert m.resolve("captured", "fatal_error", {}, {"late": False}).target == "failed"


def test_star_is_not_a_state_name() -> None:
    b = MachineBuilder("m")
    b.state("*", initial=True).state("end", terminal=True).event("go")
    b.transition("go", "*", "end")
    with pytest.raises(DefinitionError, match="reserved"):
        b.build()
