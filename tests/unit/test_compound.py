"""Compound (nested) states in the definition: compiling into leaf paths, the order edges are
tried in, validation naming the compound, entry/exit actions and what a move leaves and
enters, and the fingerprint."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from statewright.definition import Event, Machine, MachineBuilder, State, Transition
from statewright.definition.compound import CODES
from statewright.definition.fingerprint import fingerprint
from statewright.errors import ActionFailed, DefinitionError, IllegalTransition, Problem


def trail(name: str) -> dict[str, str]:
    """An action appending ``name`` to ``context.trail`` (to see the order actions ran in)."""
    return {"trail": f"(context.trail or '') + '{name};'"}


def shop() -> MachineBuilder:
    return (
        MachineBuilder("shop")
        .state("active", initial=True, entry=trail("+active"), exit=trail("-active"))
        .state("cart", parent="active", initial=True, entry=trail("+cart"), exit=trail("-cart"))
        .state("checkout", parent="active", entry=trail("+checkout"), exit=trail("-checkout"))
        .state("paying", parent="active.checkout", initial=True, exit=trail("-paying"))
        .state("confirming", parent="active.checkout", entry=trail("+confirming"))
        .state("paid", terminal=True, entry=trail("+paid"))
        .state("cancelled", terminal=True)
        .event("next", assign=trail("event"))
        .event("back")
        .event("cancel")
        .event("restart")
        .event("finish")
        .transition("next", "active.cart", "active.checkout", assign=trail("edge"))
        .transition("next", "active.checkout.paying", "active.checkout.confirming")
        .transition("finish", "active.checkout.confirming", "paid")
        .transition("back", "active.checkout", "active.cart")
        .transition("restart", "active", "active")
        .transition("cancel", "active", "cancelled")
    )


def shop_machine() -> Machine:
    return shop().build()


def problems_of(build: Any) -> list[Problem]:
    with pytest.raises(DefinitionError) as info:
        build()
    return info.value.problems


def test_leaves_are_the_states_named_by_path() -> None:
    m = shop_machine()
    assert list(m.states) == [
        "active.cart",
        "active.checkout.paying",
        "active.checkout.confirming",
        "paid",
        "cancelled",
    ]
    assert m.initial.name == "active.cart"
    assert m.tree is not None
    assert list(m.tree.compounds) == ["active", "active.checkout"]
    assert m.ancestors("active.checkout.paying") == ("active.checkout", "active")
    assert m.ancestors("paid") == ()


def test_a_compound_edge_applies_from_every_leaf_and_targets_resolve_to_initial_leaves() -> None:
    m = shop_machine()
    for leaf in ("active.cart", "active.checkout.paying", "active.checkout.confirming"):
        assert m.resolve(leaf, "cancel").target == "cancelled"
        assert "cancel" in m.allowed_events(leaf)
    # A target that is a compound state enters its initial leaf, recursively.
    assert m.resolve("active.cart", "next").target == "active.checkout.paying"
    assert m.resolve("active.checkout.paying", "restart").target == "active.cart"
    assert not m.can("paid", "cancel")
    with pytest.raises(IllegalTransition):
        m.resolve("active.cart", "back")


def test_the_deepest_declaration_is_tried_first_and_an_unguarded_one_hides_its_parents() -> None:
    m = (
        MachineBuilder("deep")
        .state("outer", initial=True)
        .state("a", parent="outer", initial=True)
        .state("b", parent="outer")
        .state("x", terminal=True)
        .state("y", terminal=True)
        .state("z", terminal=True)
        .event("go")
        .transition("go", "outer", "x")  # declared first, but on the parent
        .transition("go", "outer.a", "y", guard="payload.n == 1")
        .transition("go", "outer.b", "z")
        .transition("go", "outer.a", "outer.b", guard="payload.n == 2")
        .build()
    )
    assert m.resolve("outer.a", "go", {}, {"n": 1}).target == "y"
    assert m.resolve("outer.a", "go", {}, {"n": 2}).target == "outer.b"
    assert m.resolve("outer.a", "go", {}, {"n": 3}).target == "x"  # the parent's, last
    # outer.b's own unguarded edge overrides the parent's: the parent's is never tried there.
    assert [t.target for t in m.transitions_from("outer.b", "go")] == ["z"]
    assert [t.target for t in m.transitions_from("outer.a", "go")] == ["y", "outer.b", "x"]


def test_validation_names_the_compound_state() -> None:
    def two_unguarded() -> Machine:
        return (
            shop()
            .transition("cancel", "active", "paid")  # a second unguarded edge on 'active'
            .build()
        )

    [p] = [p for p in problems_of(two_unguarded) if p.code == "ambiguous_transition"]
    assert p.state == "active"
    assert "'active'" in p.message


NESTING_CASES: list[tuple[str, Any, str]] = [
    (
        "no_initial_child",
        lambda: (
            MachineBuilder("m")
            .state("p", initial=True)
            .state("a", parent="p")
            .state("end", terminal=True)
            .event("go")
            .transition("go", "p", "end")
            .build()
        ),
        "p",
    ),
    (
        "multiple_initial_children",
        lambda: (
            MachineBuilder("m")
            .state("p", initial=True)
            .state("a", parent="p", initial=True)
            .state("b", parent="p", initial=True)
            .state("end", terminal=True)
            .event("go")
            .transition("go", "p", "end")
            .build()
        ),
        "p",
    ),
    (
        "terminal_compound_state",
        lambda: (
            MachineBuilder("m")
            .state("p", initial=True, terminal=True)
            .state("a", parent="p", initial=True, terminal=True)
            .build()
        ),
        "p",
    ),
    (
        "unknown_parent_state",
        lambda: MachineBuilder("m").state("a", initial=True).state("b", parent="nowhere").build(),
        "nowhere",
    ),
]


@pytest.mark.parametrize(("code", "build", "state"), NESTING_CASES)
def test_nesting_problems_name_the_state(code: str, build: Any, state: str) -> None:
    found = [p for p in problems_of(build) if p.code == code]
    assert found, problems_of(build)
    assert found[0].state == state


def test_every_nesting_code_has_a_case() -> None:
    assert {code for code, _, _ in NESTING_CASES} == set(CODES)


def test_dots_are_reserved_in_a_nested_machine_but_not_in_a_flat_one() -> None:
    flat = (
        MachineBuilder("flat")
        .state("a.b", initial=True)
        .state("c.d", terminal=True)
        .event("go")
        .transition("go", "a.b", "c.d")
        .build()
    )
    assert flat.tree is None
    assert flat.resolve("a.b", "go").target == "c.d"

    def dotted() -> Machine:
        return shop().state("odd.name", parent="active").build()

    [p] = [p for p in problems_of(dotted) if p.code == "invalid_state_name"]
    assert p.state == "odd.name"


def test_a_compound_timer_must_lead_out_of_every_leaf() -> None:
    def missing() -> Machine:
        return (
            MachineBuilder("m")
            .state("p", initial=True, after={60: "late"})
            .state("a", parent="p", initial=True)
            .state("b", parent="p")
            .state("end", terminal=True)
            .event("late")
            .event("go")
            .transition("go", "p.a", "p.b")
            .transition("late", "p.a", "end")
            .transition("go", "p.b", "end")
            .build()
        )

    [p] = [p for p in problems_of(missing) if p.code == "after_event_not_from_state"]
    assert (p.state, p.event) == ("p", "late")
    assert "'p.b'" in p.message


def test_stuck_after_is_inherited_by_the_leaves() -> None:
    m = (
        MachineBuilder("m")
        .state("p", initial=True, stuck_after=600)
        .state("a", parent="p", initial=True)
        .state("b", parent="p", stuck_after=5)
        .state("end", terminal=True)
        .event("go")
        .transition("go", "p.a", "p.b")
        .transition("go", "p.b", "end")
        .build()
    )
    assert m.states["p.a"].stuck_after == 600
    assert m.states["p.b"].stuck_after == 5


# -- entry and exit -----------------------------------------------------------------------------


def run(m: Machine, source: str, event: str, context: Mapping[str, Any]) -> tuple[str, str]:
    t = m.resolve(source, event, context)
    patch = m.assigned(t, context, {}, source=source) or {}
    return t.target, {**context, **patch}.get("trail", "")


def test_exit_then_the_edge_then_entry_each_seeing_the_one_before() -> None:
    m = shop_machine()
    assert m.started({}) == {"trail": "+active;+cart;"}
    # Into a sibling compound: leave the leaf, event and edge actions, enter down to the leaf.
    assert run(m, "active.cart", "next", {}) == (
        "active.checkout.paying",
        "-cart;event;edge;+checkout;",
    )
    # Out of two compounds at once: innermost exit first.
    assert run(m, "active.checkout.confirming", "cancel", {}) == (
        "cancelled",
        "-checkout;-active;",
    )
    assert run(m, "active.checkout.confirming", "finish", {}) == (
        "paid",
        "-checkout;-active;+paid;",
    )


def test_what_a_move_leaves_and_enters_follows_xstate() -> None:
    m = shop_machine()
    # An edge on 'active.checkout' to a sibling of it: leaves the checkout, enters the cart.
    t = m.resolve("active.checkout.paying", "back")
    assert m.crossing("active.checkout.paying", t) == (
        ("active.checkout.paying", "active.checkout"),
        ("active.cart",),
    )
    # An edge declared on 'active' targeting itself stays inside it (reenter: false) and goes
    # back to its initial leaf, re-entering it even from there.
    t = m.resolve("active.cart", "restart")
    assert m.crossing("active.cart", t) == (("active.cart",), ("active.cart",))
    t = m.resolve("active.checkout.paying", "restart")
    assert m.crossing("active.checkout.paying", t) == (
        ("active.checkout.paying", "active.checkout"),
        ("active.cart",),
    )


def test_a_self_transition_declared_on_the_leaf_leaves_and_enters_nothing() -> None:
    m = (
        MachineBuilder("m")
        .state("p", initial=True, entry=trail("+p"), exit=trail("-p"))
        .state("a", parent="p", initial=True, entry=trail("+a"), exit=trail("-a"))
        .state("end", terminal=True)
        .event("tick", assign=trail("tick"))
        .event("stop")
        .transition("tick", "p.a", "p.a")
        .transition("stop", "p", "end")
        .build()
    )
    assert run(m, "p.a", "tick", {}) == ("p.a", "tick;")


def test_a_flat_machine_runs_exit_and_entry_of_its_states() -> None:
    m = (
        MachineBuilder("flat")
        .state("a", initial=True, exit={"left_a": "True"})
        .state("b", terminal=True, entry={"in_b": "context.left_a"})
        .event("go")
        .transition("go", "a", "b")
        .build()
    )
    assert m.tree is None
    t = m.resolve("a", "go")
    assert m.assigned(t, {}, {}) == {"left_a": True, "in_b": True}


def test_a_failing_entry_action_names_the_state() -> None:
    def boom(context: Mapping[str, Any], payload: Mapping[str, Any]) -> Mapping[str, Any]:
        raise ValueError("no")

    m = (
        MachineBuilder("m")
        .action("boom", boom)
        .state("a", initial=True)
        .state("b", terminal=True, entry="boom")
        .event("go")
        .transition("go", "a", "b")
        .build()
    )
    with pytest.raises(ActionFailed) as info:
        m.assigned(m.resolve("a", "go"), {}, {}, source="a")
    assert "entry of 'b'" in info.value.message


# -- identity -----------------------------------------------------------------------------------


def test_state_stays_frozen_and_hashable() -> None:
    s = State("p", states=(State("a", initial=True),), after={5: "x"})
    assert hash(s) == hash(State("p", states=(State("a", initial=True),), after={5: "x"}))
    with pytest.raises(AttributeError):
        s.name = "q"  # type: ignore[misc]


def test_the_fingerprint_sees_nesting_and_entry_exit() -> None:
    base = fingerprint(shop_machine())
    assert fingerprint(shop_machine()) == base
    moved = (
        shop()
        .state("review", parent="active.checkout")
        .event("review")
        .transition("review", "active.checkout.paying", "active.checkout.review")
        .build
    )
    extra_entry = (
        MachineBuilder("shop")
        .state("active", initial=True)
        .state("cart", parent="active", initial=True, entry={"x": "1"})
        .state("done", terminal=True)
        .event("next")
        .transition("next", "active", "done")
    )
    no_entry = (
        MachineBuilder("shop")
        .state("active", initial=True)
        .state("cart", parent="active", initial=True)
        .state("done", terminal=True)
        .event("next")
        .transition("next", "active", "done")
    )
    flattened = (
        MachineBuilder("shop")
        .state("cart", initial=True)
        .state("done", terminal=True)
        .event("next")
        .transition("next", "cart", "done")
    )
    prints = {fingerprint(b.build()) for b in (extra_entry, no_entry, flattened)}
    assert len(prints) == 3
    assert fingerprint(moved()) != base


def test_machine_build_takes_nested_states_directly() -> None:
    m = Machine.build(
        "direct",
        states=[
            State("p", initial=True, states=(State("a", initial=True), State("b"))),
            State("end", terminal=True),
        ],
        events=[Event("go"), Event("stop")],
        transitions=[
            Transition(("p.a",), "go", "p.b"),
            Transition(("p",), "stop", "end"),
        ],
    )
    assert list(m.states) == ["p.a", "p.b", "end"]
    assert m.resolve("p.b", "stop").target == "end"


def test_an_edge_every_inner_state_overrides_is_reported() -> None:
    def hidden() -> Machine:
        return (
            MachineBuilder("m")
            .state("p", initial=True)
            .state("a", parent="p", initial=True)
            .state("end", terminal=True)
            .state("gone", terminal=True)
            .event("stop")
            .transition("stop", "*", "end")  # a wildcard counts as declared on each leaf
            .transition("stop", "p", "gone")
            .build()
        )

    [p] = [p for p in problems_of(hidden) if p.code == "shadowed_transition"]
    assert (p.state, p.event) == ("p", "stop")
    assert "every state inside 'p'" in p.message


def test_an_edge_naming_a_state_and_its_parent_is_tried_once() -> None:
    m = (
        MachineBuilder("m")
        .state("p", initial=True)
        .state("a", parent="p", initial=True)
        .state("end", terminal=True)
        .event("stop")
        .transition("stop", ["p", "p.a"], "end")
        .build()
    )
    assert len(m.transitions_from("p.a", "stop")) == 1


def test_a_child_added_to_a_compound_state_only_adds() -> None:
    from statewright.definition.fingerprint import canonical_document, only_additions

    old = canonical_document(shop_machine())
    grown = (
        shop()
        .state("review", parent="active.checkout")
        .event("review")
        .transition("review", "active.checkout.paying", "active.checkout.review")
        .build()
    )
    assert only_additions(old, canonical_document(grown)) == []
    # A leaf that becomes a compound state strands the workflows in it: a change.
    nested_cart = shop().state("empty", parent="active.cart", initial=True).build()
    assert "state 'active.cart' was changed" in only_additions(
        old, canonical_document(nested_cart)
    )
