from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from statewright.definition import Guard, Machine, MachineBuilder, State
from statewright.errors import IllegalTransition, InvalidPayload


def is_vip(context: Mapping[str, Any], payload: Mapping[str, Any]) -> bool:
    return bool(context.get("vip"))


def order_machine() -> Machine:
    return (
        MachineBuilder("order")
        .guard("is_vip", is_vip)
        .state("new", initial=True)
        .state("review")
        .state("approved", terminal=True)
        .state("rejected", terminal=True)
        .event(
            "submit",
            payload_schema={
                "type": "object",
                "required": ["total"],
                "properties": {"total": {"type": "number"}, "lines": {"type": "array"}},
            },
        )
        .event("ping")
        .event("approve")
        .event("reject")
        .transition("submit", "new", "approved", guard="is_vip")
        .transition("submit", "new", "approved", guard="payload.total < 100")
        .transition("submit", "new", "review")
        .transition("ping", "review", "review")
        .transition("approve", "review", "approved", guard="context.manager_ok == True")
        .transition("reject", ["new", "review"], "rejected")
        .build()
    )


def test_can_ignores_guards() -> None:
    m = order_machine()
    assert m.can("new", "submit")
    assert m.can("review", "approve")
    assert not m.can("new", "approve")
    assert not m.can("approved", "reject")


def test_allowed_events_evaluates_guards() -> None:
    m = order_machine()
    assert m.allowed_events("review") == ["ping", "reject"]
    assert m.allowed_events("review", {"manager_ok": True}) == ["ping", "approve", "reject"]
    assert m.allowed_events("approved") == []


def test_resolve_first_passing_guard_wins() -> None:
    m = order_machine()
    big = {"total": 500}
    first = m.resolve("new", "submit", {"vip": True}, {"total": 10})
    assert first.guard is not None
    assert first.guard.name == "is_vip"
    second = m.resolve("new", "submit", {}, {"total": 10})
    assert second.guard is not None
    assert second.guard.expr == "payload.total < 100"
    fallback = m.resolve("new", "submit", {}, big)
    assert (fallback.target, fallback.guard) == ("review", None)


def test_self_transition() -> None:
    t = order_machine().resolve("review", "ping")
    assert t.is_self
    assert t.target == "review"


def test_no_guard_passed_is_illegal() -> None:
    with pytest.raises(IllegalTransition) as info:
        order_machine().resolve("review", "approve", {"manager_ok": False})
    assert info.value.reason is not None
    assert "no guard passed" in info.value.reason


def test_terminal_state_raises_illegal_transition() -> None:
    with pytest.raises(IllegalTransition) as info:
        order_machine().resolve("approved", "submit", payload={"nothing": "here"})
    err = info.value
    assert (err.state, err.event, err.reason) == ("approved", "submit", "terminal state")
    assert err.allowed == []
    assert "'submit'" in err.message
    assert "'approved'" in err.message


def test_event_not_from_state_lists_allowed() -> None:
    with pytest.raises(IllegalTransition) as info:
        order_machine().resolve("new", "approve")
    assert info.value.allowed == ["submit", "reject"]


def test_unknown_event_and_state() -> None:
    m = order_machine()
    with pytest.raises(IllegalTransition) as info:
        m.resolve("new", "explode")
    assert (info.value.event, info.value.reason) == ("explode", "unknown event")
    with pytest.raises(IllegalTransition) as info:
        m.resolve("limbo", "submit")
    assert info.value.reason == "unknown state"


def test_invalid_payload_names_path() -> None:
    m = order_machine()
    with pytest.raises(InvalidPayload) as info:
        m.resolve("new", "submit", payload={"total": "lots"})
    assert (info.value.event, info.value.path) == ("submit", "total")
    with pytest.raises(InvalidPayload) as info:
        m.resolve("new", "submit", payload={"total": 1, "lines": {}})
    assert info.value.path == "lines"
    with pytest.raises(InvalidPayload, match="'total' is a required property"):
        m.resolve("new", "submit", payload={})


def test_non_mapping_payload_is_invalid() -> None:
    with pytest.raises(InvalidPayload, match="expected a JSON object"):
        order_machine().events["submit"].validate_payload([1, 2])


def test_raising_guard_counts_as_not_passing() -> None:
    m = (
        MachineBuilder("g")
        .state("a", initial=True)
        .state("b", terminal=True)
        .event("go")
        .transition("go", "a", "b", guard="context.n > 3")
        .build()
    )
    assert m.allowed_events("a", {"n": "text"}) == []  # "text" > 3 raises TypeError
    assert m.allowed_events("a", {"n": 4}) == ["go"]
    with pytest.raises(IllegalTransition, match="no guard passed"):
        m.resolve("a", "go", {"n": "text"})


def test_queries_and_immutability() -> None:
    m = order_machine()
    assert m.initial.name == "new"
    assert m.terminal_states == ("approved", "rejected")
    assert m.events_from("review") == ("ping", "approve", "reject")
    assert m.is_terminal("rejected")
    with pytest.raises(TypeError):
        m.states["new"].after[1.0] = "ping"  # type: ignore[index]


def test_expression_guards_compare_by_text() -> None:
    a = Guard("x", lambda c, p: True, expr="payload.a == 1")
    b = Guard("x", lambda c, p: False, expr="payload.a == 1")
    assert a == b
    assert hash(a) == hash(b)
    assert Guard("f", is_vip) == Guard("f", is_vip)
    assert Guard("f", is_vip) != Guard("f", lambda c, p: True)


def test_state_is_frozen() -> None:
    s = State("x")
    with pytest.raises(AttributeError):
        s.name = "y"  # type: ignore[misc]
