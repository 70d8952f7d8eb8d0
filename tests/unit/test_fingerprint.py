"""Definition fingerprints: equal for equal definitions, different for any edit; and which
edits only add."""

from __future__ import annotations

from statewright import Machine, MachineBuilder
from statewright.definition.fingerprint import canonical_document, fingerprint, only_additions
from statewright.definition.formats import dumps_yaml, loads_yaml


def order(*, extra_state: bool = False, rename: bool = False, guard: str | None = None) -> Machine:
    first = "received" if rename else "new"
    b = (
        MachineBuilder("order", version=3)
        .state(first, initial=True)
        .state("done", terminal=True)
        .event("finish")
        .transition("finish", first, "done", guard=guard)
    )
    if extra_state:
        b = (
            b.state("on_hold")
            .event("hold")
            .event("release")
            .transition("hold", first, "on_hold")
            .transition("release", "on_hold", first)
        )
    return b.build()


def test_equal_definitions_have_equal_fingerprints_across_formats() -> None:
    m = order()
    assert fingerprint(m) == fingerprint(order())
    assert fingerprint(loads_yaml(dumps_yaml(m))) == fingerprint(m)
    assert fingerprint(m).startswith("sha256:") and len(fingerprint(m)) == 7 + 64


def test_every_edit_changes_the_fingerprint() -> None:
    base = fingerprint(order())
    for other in (order(extra_state=True), order(rename=True), order(guard="payload.ok")):
        assert fingerprint(other) != base


def test_only_additions_accepts_added_states_events_and_edges() -> None:
    old, new = canonical_document(order()), canonical_document(order(extra_state=True))
    assert only_additions(old, new) == []


def test_only_additions_names_what_was_changed() -> None:
    old = canonical_document(order())
    renamed = only_additions(old, canonical_document(order(rename=True)))
    assert "state 'new' was removed or renamed" in renamed
    guarded = only_additions(old, canonical_document(order(guard="payload.ok")))
    assert guarded == ["the transitions on 'finish' from 'new' were changed"]
