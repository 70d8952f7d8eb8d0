"""A child's end is the child's to send: declared without roles, ``child_done`` and
``child_failed`` are fired by hand by ``admin`` alone (an agent must not report a child's
result it made up); roles the machine names for them still apply."""

from __future__ import annotations

from statewright.access.principal import LOCAL, LOCAL_AGENT, Principal
from statewright.definition.machine import Event


def test_child_events_without_roles_are_admin_only() -> None:
    for name in ("child_done", "child_failed"):
        event = Event(name)
        assert not LOCAL_AGENT.may_fire(event)
        assert not Principal("ops-bot", frozenset({"operator", "system"})).may_fire(event)
        assert LOCAL.may_fire(event)  # the person at this machine (admin)
    named = Event("child_done", roles=("system",))
    assert Principal("svc", frozenset({"system"})).may_fire(named)
    assert not LOCAL_AGENT.may_fire(named)
    assert LOCAL_AGENT.may_fire(Event("shipped"))  # other events are unchanged
