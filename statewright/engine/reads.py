"""Reading workflows: one workflow, its log, listings, and what is stuck or parked.

Functions of the :class:`~statewright.engine.runtime.Runtime` (the engine forwards to them);
none of them writes.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from dataclasses import dataclass
from typing import Any

from statewright.definition.machine import State
from statewright.engine import parked as parking
from statewright.engine import search
from statewright.engine.runtime import Runtime
from statewright.errors import (
    UnknownWorkflowType,
    WorkflowNotFound,
)
from statewright.types import (
    StepRecord,
    StuckCutoff,
    StuckKey,
    TransitionRecord,
    WorkflowFilter,
    WorkflowRow,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Stuck:
    """A non-terminal workflow that has sat in its state past the state's threshold, or is
    parked for an operator (stuck from the moment it parks, whatever its age)."""

    workflow: WorkflowRow
    age: float
    threshold: float
    step: str | None = None
    """Parked with ``step_outcome_unknown``: the step whose outcome is unknown (the first,
    if several), to resolve; else None."""

    @property
    def key(self) -> StuckKey:
        """Its place in the stuck listing (``Engine.stuck(after=...)`` continues after it)."""
        w = self.workflow
        return (w.type, w.state, w.state_entered_at, w.id)

    @property
    def parked(self) -> str | None:
        """Why it waits for an operator (``step_outcome_unknown``, ``fatal_error``, ...), or
        None: it has only sat past its threshold."""
        return self.workflow.parked

    @property
    def action(self) -> parking.Action:
        """What to do: ``resolve_step`` (:attr:`step`), ``resume`` or ``investigate``."""
        return parking.action(self.workflow, self.step)

    @property
    def hint(self) -> str:
        """What to do, as a sentence."""
        return parking.hint(self.workflow, self.step)


@dataclass(frozen=True)
class StuckTotal:
    """How many workflows are stuck in one state of one type, and the oldest one's age."""

    type: str
    state: str
    count: int
    oldest_age: float


@dataclass(frozen=True)
class ParkedTotal:
    """How many workflows are parked for one reason in one state of one type, and the oldest
    one's time in the state."""

    type: str
    state: str
    reason: str
    count: int
    oldest_age: float


async def get(rt: Runtime, workflow_id: str) -> WorkflowRow:
    row = await rt.store.get_workflow(workflow_id)
    if row is None:
        raise WorkflowNotFound(workflow_id)
    rt.transitions.rows.put(row)
    return row


async def history(
    rt: Runtime, workflow_id: str, after_version: int = 0, limit: int | None = None
) -> list[TransitionRecord]:
    """The workflow's log in version order (after ``after_version``, at most ``limit``)."""
    await get(rt, workflow_id)
    return await rt.store.history(workflow_id, after_version, limit)


async def search_attributes(rt: Runtime, workflow_id: str) -> dict[str, str]:
    """The workflow's search attributes as stored (name -> text; see
    :mod:`statewright.engine.search`)."""
    return await rt.store.search_attributes(workflow_id)


async def steps(
    rt: Runtime,
    workflow_id: str,
    after: tuple[float, str] | None = None,
    limit: int | None = None,
) -> list[StepRecord]:
    """The workflow's step ledger in ``(started_at, key)`` order (after ``after``, at most
    ``limit``)."""
    await get(rt, workflow_id)
    return await rt.store.steps(workflow_id, after, limit)


async def allowed_events(rt: Runtime, workflow_id: str) -> list[str]:
    row = await get(rt, workflow_id)
    machine = rt.registry.type_of(row.type, row.machine_version).machine
    return machine.allowed_events(row.state, row.context)


async def list_workflows(rt: Runtime, where: WorkflowFilter | None = None) -> list[WorkflowRow]:
    """Workflows matching ``where``; its search attributes must be declared by its type (or,
    with no type, by some registered type): InvalidInput otherwise, before any read."""
    where = where or WorkflowFilter()
    if where.search:
        where = dataclasses.replace(where, search=checked_search(rt, where.search, where.type))
    return await rt.store.list_workflows(where)


def checked_search(rt: Runtime, pairs: Any, type_: str | None) -> search.SearchFilter:
    """A search filter checked for shape and against the registered types' attributes."""
    found = search.check_filter(pairs)
    declared = {
        name: {a for t in versions.values() for a in t.search_attributes}
        for name, versions in rt.registry.versions().items()
    }
    search.check_known(found, declared, type_)
    return found


def stuck_threshold(rt: Runtime, state: State) -> float:
    """Seconds in ``state`` after which a workflow counts as stuck."""
    return state.stuck_after or rt.settings.default_stuck_after


def is_stuck(rt: Runtime, row: WorkflowRow, now: float | None = None) -> bool:
    """Whether ``row`` is stuck: parked for an operator (from the moment it parks), or in
    a non-terminal state past the state's threshold."""
    if row.terminal:
        return False
    if row.parked is not None:
        return True
    now = rt.clock.now() if now is None else now
    try:
        state = rt.registry.type_of(row.type, row.machine_version).machine.states.get(row.state)
    except UnknownWorkflowType:
        state = None
    if state is None:  # a version or state this engine does not have: the default
        return now - row.state_entered_at > rt.settings.default_stuck_after
    return now - row.state_entered_at > stuck_threshold(rt, state)


def stuck_rules(
    rt: Runtime,
) -> dict[tuple[str, str], tuple[float | None, dict[int, float | None]]]:
    """Per ``(type, state)``: each registered version's threshold for the state (None: it
    is terminal there, never stuck), and the threshold of the versions without one of
    their own (that of the highest registered version that has the state)."""
    rules: dict[tuple[str, str], tuple[float | None, dict[int, float | None]]] = {}
    for name, versions in rt.registry.versions().items():
        for state_name in {s for t in versions.values() for s in t.machine.states}:
            per_version: dict[int, float | None] = {}
            for version, wtype in versions.items():
                state = wtype.machine.states.get(state_name)
                if state is not None:
                    per_version[version] = None if state.terminal else stuck_threshold(rt, state)
            rules[(name, state_name)] = (per_version[max(per_version)], per_version)
    return rules


def stuck_cutoffs(rt: Runtime, now: float | None = None) -> list[StuckCutoff]:
    """What the store needs to find the workflows stuck at ``now``: per type and state,
    one cutoff, plus one per registered version whose definition gives the state another
    threshold."""
    now = rt.clock.now() if now is None else now
    out: list[StuckCutoff] = []
    for (name, state), (default, per_version) in sorted(
        stuck_rules(
            rt,
        ).items()
    ):
        own = {v: t for v, t in per_version.items() if t != default}
        if default is not None or own:
            out.append(StuckCutoff(name, state, None if default is None else now - default))
        out += [
            StuckCutoff(name, state, None if t is None else now - t, v)
            for v, t in sorted(own.items())
        ]
    return out


async def stuck(
    rt: Runtime,
    now: float | None = None,
    tenant: str | None = None,
    *,
    limit: int = 1000,
    after: StuckKey | None = None,
) -> list[Stuck]:
    """Up to ``limit`` non-terminal workflows that have sat in their state longer than its
    threshold (the ``stuck_after`` of the state in the workflow's machine version), and
    those parked for an operator, whatever their age: a parked workflow is stuck from the
    moment it parks. Each says what to do (:attr:`Stuck.action`, :attr:`Stuck.hint`;
    for a step whose outcome is unknown, :attr:`Stuck.step`).

    In ``(type, state, state_entered_at, id)`` order, so within a state the oldest first;
    pass the last one's :attr:`Stuck.key` as ``after`` for the next page (each page is a
    range of an index, or two: those past the threshold and the younger parked ones).
    :meth:`stuck_counts` counts them all.
    """
    now = rt.clock.now() if now is None else now
    rules = stuck_rules(
        rt,
    )
    rows = await rt.store.stuck_workflows(
        stuck_cutoffs(rt, now), after=after, limit=limit, tenant=tenant, parked=True
    )
    steps = await parking.unresolved_steps(rt.store, rows)
    found = []
    for r in rows:
        default, per_version = rules.get((r.type, r.state), (None, {}))
        threshold = per_version.get(r.machine_version, default)
        step = steps.get(r.id, [None])[0]
        found.append(Stuck(r, now - r.state_entered_at, threshold or 0.0, step))
    return found


async def stuck_counts(
    rt: Runtime, now: float | None = None, tenant: str | None = None
) -> list[StuckTotal]:
    """How many workflows are stuck (past their threshold, or parked for an operator),
    per type and state, and the oldest one's age: true counts from aggregates over index
    ranges (no row is read), by type and state."""
    now = rt.clock.now() if now is None else now
    counted = await rt.store.count_stuck(stuck_cutoffs(rt, now), tenant, parked=True)
    return [StuckTotal(t, s, n, now - oldest) for t, s, n, oldest in counted]


async def unregistered_counts(rt: Runtime) -> list[tuple[str, int, int]]:
    """``(type, machine_version, count)`` of the live workflows of the registered types on
    versions this engine does not register (an old version after an upgrade): nothing
    runs them here. One index range per gap between registered versions."""
    out: list[tuple[str, int, int]] = []
    for name, versions in sorted(rt.registry.versions().items()):
        bounds = [0, *sorted(versions), 2**31 - 1]
        for lo, hi in itertools.pairwise(bounds):
            if hi - lo > 1:
                out += [
                    (name, v, n) for v, n in await rt.store.live_versions_between(name, lo, hi)
                ]
    return out


async def parked_counts(rt: Runtime, tenant: str | None = None) -> list[tuple[str, str, int]]:
    """``(type, state, count)`` of the workflows parked for an operator, whatever their
    age (each is stuck too: :meth:`stuck_counts` counts it)."""
    out: dict[tuple[str, str], int] = {}
    for t in await parked_totals(rt, tenant=tenant):
        out[(t.type, t.state)] = out.get((t.type, t.state), 0) + t.count
    return [(t, s, n) for (t, s), n in sorted(out.items())]


async def parked_totals(
    rt: Runtime, now: float | None = None, tenant: str | None = None
) -> list[ParkedTotal]:
    """How many workflows are parked for an operator, per type, state and reason, and the
    oldest one's age in its state: true counts from one aggregate over a partial index."""
    now = rt.clock.now() if now is None else now
    counted = await rt.store.count_parked(tenant)
    return [ParkedTotal(t, s, why, n, now - oldest) for t, s, why, n, oldest in counted]
