"""The transition cover of a workflow type, driven through a real engine.

:func:`check_cover` walks each sequence of :func:`~statewright.testing.transition_cover`
on a fresh in-memory engine with the bare machine, finding a payload for each step (from
the caller, or searched for with hypothesis) so that the guards pick exactly that edge.

Needs ``hypothesis`` (the ``test`` extra), like :mod:`statewright.testing.model`.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import hypothesis

from statewright.clock import ManualClock
from statewright.definition.machine import Machine
from statewright.engine.core import Engine
from statewright.engine.workflow_type import WorkflowType
from statewright.errors import IllegalTransition, InvalidPayload
from statewright.store.sqlite import SQLiteStore
from statewright.testing.model import (
    WORKFLOW_ID,
    Invariant,
    ModelCheckFailure,
    Payload,
    _run_sync,
    _text,
    payloads,
)
from statewright.testing.paths import Cover, Step, format_path, transition_cover

__all__ = ["PayloadFor", "check_cover"]

PayloadFor = Mapping[Any, Payload] | Callable[[Step, Payload], Payload | None]
"""Payloads for :func:`check_cover`: a map from a :class:`Step`, a ``(source, event, target)``
tuple or an event name to the payload, or ``fn(step, context)`` returning one (or None)."""


def _given_payload(given: PayloadFor | None, step: Step, context: Payload) -> Payload | None:
    if given is None:
        return None
    if callable(given):
        return given(step, context)
    for key in (step, tuple(step[:3]), step.event):
        if key in given:
            return given[key]
    return None


def _edge_of(machine: Machine, state: str, event: str, context: Payload, payload: Payload) -> Step:
    t = machine.resolve(state, event, context, payload)
    return Step(state, event, t.target, t.guard.name if t.guard is not None else None)


def _search_payload(machine: Machine, step: Step, context: Payload, tries: int) -> Payload | None:
    def takes_step(payload: Payload) -> bool:
        try:
            return _edge_of(machine, step.source, step.event, context, payload) == step
        except (IllegalTransition, InvalidPayload):
            return False

    if takes_step({}):
        return {}
    try:
        return hypothesis.find(
            payloads(machine, step.event),
            takes_step,
            settings=hypothesis.settings(
                max_examples=tries,
                database=None,
                phases=[hypothesis.Phase.generate],  # the first found will do: no shrinking
                deadline=None,
                suppress_health_check=list(hypothesis.HealthCheck),
            ),
        )
    except hypothesis.errors.NoSuchExample:
        return None


async def _walk(
    machine: Machine,
    sequence: Sequence[Step],
    inputs: Payload,
    given: PayloadFor | None,
    invariants: Sequence[Invariant],
    tries: int,
) -> None:
    # The bare machine: no handler moves the workflow, the sequence alone does.
    async with Engine(SQLiteStore(":memory:"), [machine], clock=ManualClock()) as engine:
        done: list[str] = [f"start {_text(inputs)}"]
        try:
            row = (await engine.start(machine.name, inputs, workflow_id=WORKFLOW_ID)).row
            for step in sequence:
                payload = _given_payload(given, step, row.context)
                if payload is None:
                    payload = _search_payload(machine, step, row.context, tries)
                if payload is None:
                    raise AssertionError(
                        f"found no payload that takes {step} (guards are evaluated on the "
                        "context and the payload): pass one in payloads="
                    )
                done.append(f"send {step.event} {_text(payload)}   # {step}")
                sent = await engine.send(WORKFLOW_ID, step.event, payload, actor="cover")
                row = sent.row
                if row.state != step.target:
                    raise AssertionError(f"{step.event!r} went to {row.state!r}, not {step}")
                await engine.check(WORKFLOW_ID)
                for invariant in invariants:
                    result = invariant(row)
                    if inspect.isawaitable(result):
                        result = await result
                    if result is False:
                        raise AssertionError(f"invariant {invariant!r} returned False")
        except AssertionError as exc:
            raise ModelCheckFailure(
                f"cover sequence {format_path(sequence)}: {exc}", done
            ) from exc
        except Exception as exc:
            raise ModelCheckFailure(
                f"cover sequence {format_path(sequence)}: {type(exc).__name__}: {exc}", done
            ) from exc


def check_cover(
    target: WorkflowType | Machine,
    *,
    inputs: Payload | None = None,
    payloads: PayloadFor | None = None,
    invariants: Iterable[Invariant] = (),
    search: int = 200,
) -> Cover:
    """Drive every sequence of :func:`transition_cover` through a real engine.

    Each sequence runs on a fresh in-memory engine with the bare machine (no handlers: the
    sequence alone moves the workflow), started with ``inputs``. Each step's payload comes
    from ``payloads`` or, failing that, is searched for (up to ``search`` candidates drawn
    from the event's schema) so that the guards pick exactly that edge. After each step the
    row must be in the step's target and replay must equal it; ``invariants`` are checked
    too. Fails with :class:`ModelCheckFailure` naming the sequence and the step; an edge
    unreachable from the initial state fails too. Returns the cover.
    """
    machine = target.machine if isinstance(target, WorkflowType) else target
    cover = transition_cover(machine)
    if cover.unreachable:
        raise ModelCheckFailure(
            "transitions unreachable from the initial state: "
            + ", ".join(map(str, cover.unreachable)),
            [],
        )
    checks = list(invariants)

    def run_all() -> None:
        async def go() -> None:
            for sequence in cover:
                await _walk(machine, sequence, dict(inputs or {}), payloads, checks, search)

        asyncio.run(go())

    _run_sync(run_all)
    return cover
