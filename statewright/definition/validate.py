"""Validate a machine definition once, when it is built.

Every check runs and every problem is collected, so one :class:`DefinitionError` tells the
author everything that is wrong. Each :class:`Problem` has a stable ``code`` (listed in
:data:`CODES`) and names the offending state and/or event.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from statewright.definition.data import plain
from statewright.definition.graph import can_reach_terminal, reachable
from statewright.definition.model import Event, State, Transition
from statewright.errors import DefinitionError, Problem

__all__ = ["CODES", "NAME_PATTERN", "validate"]

NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]{0,127}")
"""Machine names: they become workflow types in URLs, CLI arguments and table rows."""

CODES = (
    "invalid_machine_name",
    "invalid_version",
    "invalid_state_name",
    "invalid_event_name",
    "duplicate_state",
    "duplicate_event",
    "no_initial_state",
    "multiple_initial_states",
    "no_terminal_state",
    "transition_without_source",
    "unknown_source_state",
    "unknown_target_state",
    "unknown_event",
    "transition_from_terminal",
    "ambiguous_transition",
    "shadowed_transition",
    "unreachable_state",
    "trap_state",
    "invalid_after_delay",
    "after_unknown_event",
    "after_event_not_from_state",
    "after_on_terminal_state",
    "invalid_every_interval",
    "every_unknown_event",
    "every_event_not_from_state",
    "every_on_terminal_state",
    "invalid_stuck_after",
    "invalid_payload_schema",
)
"""Every problem code :func:`validate` can report (a machine with compound states adds
:data:`statewright.definition.compound.CODES`)."""


def validate(
    name: str,
    version: int,
    states: Sequence[State],
    events: Sequence[Event],
    transitions: Sequence[Transition],
    *,
    declared: Sequence[Transition] | None = None,
    found: Sequence[Problem] = (),
) -> None:
    """Raise one :class:`DefinitionError` listing every problem, or return None.

    For a machine with compound states, ``states`` and ``transitions`` are the compiled
    leaves and edges (see :mod:`statewright.definition.compound`), ``declared`` the edges as
    declared (their determinism is checked there, so a problem names the compound it is
    declared on) and ``found`` the problems the compilation found.
    """
    out = _Problems(found)
    _check_header(out, name, version)
    _check_names(out, states, events)
    _check_initial_terminal(out, states)
    _check_transitions(out, states, events, transitions)
    _check_determinism(out, transitions if declared is None else declared)
    _check_graph(out, states, transitions)
    _check_timers(out, states, events, transitions)
    _check_schemas(out, events)
    if out:
        raise DefinitionError(out, machine=name if isinstance(name, str) else None)


class _Problems(list[Problem]):
    def add(
        self, code: str, message: str, state: str | None = None, event: str | None = None
    ) -> None:
        self.append(Problem(code, message, state, event))


def _check_header(out: _Problems, name: str, version: int) -> None:
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        rule = "use 1-128 letters, digits, '_', '.' or '-', starting with a letter or '_'"
        out.add("invalid_machine_name", f"machine name {name!r} is invalid: {rule}")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        out.add("invalid_version", f"version {version!r} must be an integer >= 1")


def _check_names(out: _Problems, states: Sequence[State], events: Sequence[Event]) -> None:
    for s in states:
        if not isinstance(s.name, str) or not s.name.strip():
            out.add("invalid_state_name", f"state name {s.name!r} is empty", state=s.name)
        elif s.name == "*":
            msg = "state name '*' is reserved: as a source it means every non-terminal state"
            out.add("invalid_state_name", msg, state=s.name)
    for e in events:
        if not isinstance(e.name, str) or not e.name.strip():
            out.add("invalid_event_name", f"event name {e.name!r} is empty", event=e.name)
    for n, count in Counter(s.name for s in states).items():
        if count > 1:
            out.add("duplicate_state", f"state {n!r} is declared {count} times", state=n)
    for n, count in Counter(e.name for e in events).items():
        if count > 1:
            out.add("duplicate_event", f"event {n!r} is declared {count} times", event=n)


def _check_initial_terminal(out: _Problems, states: Sequence[State]) -> None:
    initial = [s.name for s in states if s.initial]
    if not initial:
        out.add("no_initial_state", "no state is marked initial")
    elif len(initial) > 1:
        names = ", ".join(map(repr, initial))
        msg = f"only one state may be initial, found {len(initial)}: {names}"
        out.add("multiple_initial_states", msg, state=initial[1])
    if states and not any(s.terminal for s in states):
        out.add("no_terminal_state", "no state is terminal, so no workflow could ever finish")


def _check_transitions(
    out: _Problems,
    states: Sequence[State],
    events: Sequence[Event],
    transitions: Sequence[Transition],
) -> None:
    by_name = {s.name: s for s in states}
    event_names = {e.name for e in events}
    for t in transitions:
        ev = t.event
        if not t.sources:
            msg = f"transition on {ev!r} to {t.target!r} has no source state"
            out.add("transition_without_source", msg, event=ev)
        if ev not in event_names:
            msg = f"transition on unknown event {ev!r} (declare it with .event())"
            out.add("unknown_event", msg, event=ev)
        for s in t.sources:
            source = by_name.get(s)
            if source is None:
                msg = f"transition on {ev!r} starts from unknown state {s!r}"
                out.add("unknown_source_state", msg, state=s, event=ev)
            elif source.terminal:
                msg = f"state {s!r} is terminal, yet event {ev!r} leads out of it"
                out.add("transition_from_terminal", msg, state=s, event=ev)
        if t.target not in by_name:
            sources = ", ".join(map(repr, t.sources)) or "nowhere"
            msg = f"transition on {ev!r} from {sources} goes to unknown state {t.target!r}"
            out.add("unknown_target_state", msg, state=t.target, event=ev)


def _check_determinism(out: _Problems, transitions: Sequence[Transition]) -> None:
    # For each (source, event) the first passing guard wins, in declaration order; an
    # unguarded edge always passes, so it must be the only one and come last.
    unguarded: dict[tuple[str, str], str] = {}
    for t in transitions:
        for s in t.sources:
            key = (s, t.event)
            first = unguarded.get(key)
            if first is None:
                if t.guard is None:
                    unguarded[key] = t.target
            elif t.guard is None:
                msg = (
                    f"state {s!r} has two unguarded transitions on {t.event!r} "
                    f"(to {first!r} and to {t.target!r})"
                )
                out.add("ambiguous_transition", msg, state=s, event=t.event)
            else:
                msg = (
                    f"transition on {t.event!r} from {s!r} to {t.target!r} guarded by "
                    f"{t.guard.name!r} can never fire: an unguarded transition to {first!r} "
                    "is declared before it (put the unguarded one last)"
                )
                out.add("shadowed_transition", msg, state=s, event=t.event)


def _check_graph(
    out: _Problems, states: Sequence[State], transitions: Sequence[Transition]
) -> None:
    if any(s.initial for s in states):
        seen = reachable(states, transitions)
        for s in states:
            if s.name not in seen:
                msg = f"state {s.name!r} cannot be reached from the initial state"
                out.add("unreachable_state", msg, state=s.name)
    if any(s.terminal for s in states):
        finishing = can_reach_terminal(states, transitions)
        for s in states:
            if s.name not in finishing:
                msg = (
                    f"state {s.name!r} is not terminal but no terminal state can be reached "
                    "from it: a workflow there could never finish"
                )
                out.add("trap_state", msg, state=s.name)


def _check_timers(
    out: _Problems,
    states: Sequence[State],
    events: Sequence[Event],
    transitions: Sequence[Transition],
) -> None:
    event_names = {e.name for e in events}
    leaving = {(s, t.event) for t in transitions for s in t.sources}
    for s in states:
        name = s.name
        if s.stuck_after is not None and not _positive(s.stuck_after):
            msg = f"state {name!r}: stuck_after must be > 0, got {s.stuck_after!r}"
            out.add("invalid_stuck_after", msg, state=name)
        if s.after and s.terminal:
            msg = f"state {name!r} is terminal and cannot have 'after' timers"
            out.add("after_on_terminal_state", msg, state=name)
        for seconds, ev in s.after.items():
            if not _positive(seconds):
                msg = f"state {name!r}: 'after' delay for {ev!r} must be > 0 s, got {seconds!r}"
                out.add("invalid_after_delay", msg, state=name, event=ev)
            if ev not in event_names:
                msg = f"state {name!r}: 'after' fires unknown event {ev!r}"
                out.add("after_unknown_event", msg, state=name, event=ev)
            elif not s.terminal and (name, ev) not in leaving:
                msg = (
                    f"state {name!r}: 'after' fires {ev!r} but no transition on it leaves {name!r}"
                )
                out.add("after_event_not_from_state", msg, state=name, event=ev)
        if s.every and s.terminal:
            msg = f"state {name!r} is terminal and cannot have 'every' timers"
            out.add("every_on_terminal_state", msg, state=name)
        for seconds, ev in s.every.items():
            if not _positive(seconds):
                msg = f"state {name!r}: 'every' interval for {ev!r} must be > 0 s, got {seconds!r}"
                out.add("invalid_every_interval", msg, state=name, event=ev)
            if ev not in event_names:
                msg = f"state {name!r}: 'every' fires unknown event {ev!r}"
                out.add("every_unknown_event", msg, state=name, event=ev)
            elif not s.terminal and (name, ev) not in leaving:
                msg = (
                    f"state {name!r}: 'every' fires {ev!r} but no transition on it leaves {name!r}"
                )
                out.add("every_event_not_from_state", msg, state=name, event=ev)


def _positive(value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value) and value > 0


_KNOWN_VALID: set[str] = set()
"""Payload schemas known to be valid JSON Schemas (the built-in machines' own, checked by a
unit test): building a machine whose schemas are all here does not import jsonschema, which
costs ~65 ms of every CLI command's start."""


def known_valid_schema(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """Mark a payload schema as known valid (for the built-in machines; see
    :data:`_KNOWN_VALID`); returns it."""
    _KNOWN_VALID.add(_schema_text(schema))
    return schema


def _schema_text(schema: Any) -> str:
    return json.dumps(plain(schema), sort_keys=True, separators=(",", ":"))


def _check_schemas(out: _Problems, events: Sequence[Event]) -> None:
    unknown = [
        e
        for e in events
        if e.payload_schema is not None and _schema_text(e.payload_schema) not in _KNOWN_VALID
    ]
    if not unknown:
        return
    # jsonschema is a pure-Python validator: no I/O, fine for this layer.
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    for e in unknown:
        if e.payload_schema is None:
            continue
        try:
            Draft202012Validator.check_schema(plain(e.payload_schema))
        except SchemaError as exc:
            where = "/".join(str(p) for p in exc.absolute_path)
            at = f" at {where}" if where else ""
            msg = f"event {e.name!r} has an invalid payload_schema{at}: {exc.message}"
            out.add("invalid_payload_schema", msg, event=e.name)
