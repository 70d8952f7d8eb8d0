"""Operator actions, each one audited transition with its actor and reason: resolve a step
whose outcome is unknown, resume a parked workflow, move it to a state, patch its context,
migrate the live workflows of a type to another machine version.

Forking lives in :mod:`statewright.engine.fork`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from statewright.engine import parked as parking
from statewright.engine.commands import check_idempotency_key
from statewright.engine.reads import get
from statewright.engine.runtime import Runtime
from statewright.engine.transitions import (
    CONTEXT_EVENT,
    MIGRATE_EVENT,
    MOVE_EVENT,
    RESUME_EVENT,
    Fire,
)
from statewright.engine.workflow_type import Applied, NotApplied
from statewright.errors import (
    InvalidInput,
    StepUnresolved,
    UnknownState,
    VersionConflict,
    WorkflowBusy,
    WorkflowFinished,
)
from statewright.types import (
    StepRecord,
    WorkflowFilter,
    WorkflowRow,
)

log = logging.getLogger(__name__)


MAX_REASON = 1000
"""Characters an operator's reason (resume, move, fork, context patch, migration) may have."""


@dataclass(frozen=True)
class Migration:
    """What :meth:`Engine.migrate` did (or, with ``dry_run``, would do)."""

    plan: list[tuple[str, str, str]]
    """``(workflow id, state on the old version, state on the new)`` for each live workflow."""
    moved: list[str]
    busy: list[str]
    """Held by a worker at that moment: not moved (migrate again later)."""
    dry_run: bool = False


async def resolve_step(
    rt: Runtime,
    workflow_id: str,
    step: str,
    verdict: Applied | NotApplied,
    *,
    actor: str,
    reason: str,
) -> StepRecord:
    """An operator's answer for a step whose outcome is unknown (the workflow is parked
    with ``step_outcome_unknown``): :class:`Applied` with the result the external system
    holds, or :class:`NotApplied` (safe to run). Then resume the workflow: a parked one
    becomes due and its handler runs again (the step returns the result, or runs).

    Raises WorkflowNotFound, StepNotFound, StepDone (its result stands), WorkflowBusy (a
    worker holds the workflow), InvalidInput (no reason, not a verdict).
    """
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidInput("resolving a step needs a reason")
    row = await get(rt, workflow_id)
    key = f"{workflow_id}:{step}"
    note = f"resolved by {actor}: {reason}"[:1000]
    now = rt.clock.now()
    if isinstance(verdict, Applied):
        rt.limits.check(verdict.result, f"result of step {step!r}")
        rec = await rt.store.resolve_step(key, "done", verdict.result, None, note, now)
    elif isinstance(verdict, NotApplied):
        rec = await rt.store.resolve_step(key, "failed", None, "not_applied", note, now)
    else:
        raise InvalidInput("a verdict is Applied(result) or NotApplied()")
    log.warning(
        "step resolved by an operator",
        extra={
            "action": "step_resolved",
            "workflow_id": workflow_id,
            "key": key,
            "verdict": type(verdict).__name__,
            "actor": actor,
            "reason": reason,
        },
    )
    if row.parked is not None and not row.terminal:
        # Another step whose outcome is unknown would park it again: then it stays
        # parked (the stuck listing names that step next).
        with contextlib.suppress(StepUnresolved):
            await resume(rt, workflow_id, actor=actor, reason=f"step {step!r} resolved")
    return rec


async def resume(
    rt: Runtime,
    workflow_id: str,
    *,
    actor: str,
    reason: str,
    idempotency_key: str | None = None,
    reconcile: bool = False,
) -> WorkflowRow:
    """Make a workflow due again, typically a parked one: its state's handler runs once
    more (its finished steps return their results; the failure counters are kept).

    One logged transition, ``$resume`` (a self-transition: the state and its timers stay),
    with the actor and ``{"reason": reason}``: the log says who resumed it and why.

    A workflow parked because a step's outcome is unknown (``step_outcome_unknown``) is
    refused while that step is unresolved (StepUnresolved): the handler would meet the
    step again and park again. Resolve the step (:meth:`resolve_step`, which resumes it);
    or, with ``reconcile=True``, resume anyway to have the step's reconcile hook asked
    again (it may answer now, e.g. its service was down): without a verdict it parks
    again. The log then says so (``{"reason": ..., "reconcile": true}``).

    Raises WorkflowNotFound, WorkflowFinished, WorkflowBusy (a worker holds it),
    StepUnresolved, InvalidInput (no reason).
    """
    check_reason(reason, "resuming a workflow")
    row = await get(rt, workflow_id)
    if row.terminal:
        raise WorkflowFinished(workflow_id, row.state)
    if row.lease_owner is not None:
        raise WorkflowBusy(f"a worker holds workflow {workflow_id!r}: nothing to resume")
    if not reconcile:
        try:
            await parking.check_resumable(rt.store, row)
        except StepUnresolved:
            # A retry of a resume applied earlier (the key is in the log) is its replay.
            key = check_idempotency_key(idempotency_key)
            if key is None or await rt.store.transition_by_key(row.id, key) is None:
                raise
    fire = Fire(
        RESUME_EVENT,
        {"reason": reason} | ({"reconcile": True} if reconcile else {}),
        actor,
        release_lease=False,
        require_unleased=True,
        idempotency_key=check_idempotency_key(idempotency_key),
    )
    try:
        sent = await rt.transitions.send(workflow_id, fire, row=row)
    except VersionConflict:
        fresh = await get(rt, workflow_id)
        if fresh.lease_owner is not None:
            raise WorkflowBusy(
                f"a worker holds workflow {workflow_id!r}: nothing to resume"
            ) from None
        raise
    log.warning(
        "workflow resumed",
        extra={
            "action": "workflow_resumed",
            "workflow_id": workflow_id,
            "actor": actor,
            "reason": reason,
            "parked": row.parked,
        },
    )
    return sent.row


async def move_to(
    rt: Runtime,
    workflow_id: str,
    state: str,
    *,
    actor: str,
    reason: str,
    expected_version: int | None = None,
    idempotency_key: str | None = None,
) -> WorkflowRow:
    """Move a workflow to a named state of its machine, outside the machine's edges: an
    operator's last resort (``Access`` allows it to admins only). One logged transition,
    ``$move``, with the actor and ``{"reason": reason}``; the target state is entered as
    by any transition (its timers armed, its handler due, the old state's timers
    cleared; a terminal target finishes the workflow). Replay accepts it.

    Raises WorkflowNotFound, WorkflowFinished, InvalidInput (no reason, no such state),
    VersionConflict, IdempotencyKeyReused.
    """
    check_reason(reason, "moving a workflow")
    if not isinstance(state, str) or not state:
        raise InvalidInput("name the state to move to")
    fire = Fire(
        MOVE_EVENT,
        {"reason": reason, "to": state},
        actor,
        release_lease=False,
        target=state,
        idempotency_key=check_idempotency_key(idempotency_key),
    )
    sent = await rt.transitions.send(workflow_id, fire, expected_version=expected_version)
    log.warning(
        "workflow moved by hand",
        extra={
            "action": "workflow_moved",
            "workflow_id": workflow_id,
            "actor": actor,
            "reason": reason,
            "to": state,
            "replayed": sent.replayed,
        },
    )
    return sent.row


async def migrate(
    rt: Runtime,
    workflow_type: str,
    from_version: int,
    to_version: int,
    state_map: Mapping[str, str] | None = None,
    *,
    actor: str,
    reason: str,
    dry_run: bool = False,
) -> Migration:
    """Move the live workflows of ``workflow_type`` on ``from_version`` to ``to_version``:
    each is one ``$migrate`` transition (actor, reason, the versions and the map in its
    payload) into ``state_map[state]`` (a state the map does not name keeps its name),
    entered anew on the target version (the old version's timers cleared, the new one's
    armed, its handler due). Replay understands it: the log before it is checked
    against the old version when that is registered.

    Checked before anything moves: ``to_version`` is registered, and every state a
    workflow is in (and, when ``from_version`` is registered, every non-terminal state it
    has) maps to a state of the target: else :class:`UnknownState` naming the offending
    state. ``dry_run`` returns the plan and changes nothing. A workflow a worker holds at
    that moment is skipped (listed in ``busy``; migrate again later).

    Raises UnknownWorkflowType, UnknownState, InvalidInput.
    """
    check_reason(reason, "a migration")
    mapping = dict(state_map or {})
    if from_version == to_version:
        raise InvalidInput("from_version and to_version are the same")
    target = rt.registry.type_of(workflow_type, to_version).machine
    source = rt.registry.known_machine(workflow_type, from_version)
    rows: list[WorkflowRow] = []
    for name, state, _ in await rt.store.count_by_state(terminal=False):
        if name != workflow_type:
            continue
        after: tuple[float, str] | None = None
        while True:
            page = await rt.store.list_workflows(
                WorkflowFilter(
                    type=workflow_type, state=state, terminal=False, limit=500, after=after
                )
            )
            rows += [r for r in page if r.machine_version == from_version]
            if len(page) < 500:
                break
            after = (page[-1].state_entered_at, page[-1].id)
    states = {r.state for r in rows}
    if source is not None:
        states |= {s.name for s in source.states.values() if not s.terminal}
    for state in sorted(states):
        goes_to = mapping.get(state, state)
        if goes_to not in target.states:
            raise UnknownState(
                f"state {state!r} of {workflow_type!r} v{from_version} maps to "
                f"{goes_to!r}, which v{to_version} does not have: add it to the map",
                state=state,
            )
    plan = [(r.id, r.state, mapping.get(r.state, r.state)) for r in rows]
    if dry_run:
        return Migration(plan, [], [], dry_run=True)
    moved: list[str] = []
    busy: list[str] = []
    payload = {
        "from_version": from_version,
        "to_version": to_version,
        "map": mapping,
        "reason": reason,
    }
    for wid, _, goes_to in plan:
        fire = Fire(
            MIGRATE_EVENT,
            payload,
            actor,
            release_lease=False,
            require_unleased=True,
            target=goes_to,
            machine_version=to_version,
        )
        try:
            await rt.transitions.send(wid, fire)
        except VersionConflict:
            busy.append(wid)
            continue
        moved.append(wid)
    log.warning(
        "workflows migrated",
        extra={
            "action": "workflows_migrated",
            "type": workflow_type,
            "from_version": from_version,
            "to_version": to_version,
            "moved": len(moved),
            "busy": len(busy),
            "actor": actor,
        },
    )
    return Migration(plan, moved, busy)


async def patch_context(
    rt: Runtime,
    workflow_id: str,
    patch: Mapping[str, Any],
    *,
    actor: str,
    reason: str,
    expected_version: int | None = None,
    idempotency_key: str | None = None,
) -> WorkflowRow:
    """An operator's explicit change of a workflow's context: the top-level keys of
    ``patch`` are set, in one transition logged as ``$patch_context`` with the actor and
    ``{"reason": reason}`` as its payload (replay applies it like any other).

    It is a self-transition: the state and its timers stay, and a state with a handler
    runs it again on the new context (its finished steps return their results). Events
    carry data into the context through their declared ``assign`` actions; this is the
    audited way around them, for people, not for agents.

    Raises WorkflowNotFound, WorkflowFinished, InvalidInput (no reason, an empty or
    non-object patch), ValueTooDeep / ValueTooLarge, VersionConflict, IdempotencyKeyReused.
    """
    check_reason(reason, "a context patch")
    if not isinstance(patch, Mapping) or not patch:
        raise InvalidInput("a context patch must be a non-empty JSON object")
    if any(not isinstance(k, str) or not k for k in patch):
        raise InvalidInput("context keys must be non-empty strings")
    fire = Fire(
        CONTEXT_EVENT,
        {"reason": reason},
        actor,
        context_patch=dict(patch),
        release_lease=False,
        idempotency_key=check_idempotency_key(idempotency_key),
    )
    sent = await rt.transitions.send(workflow_id, fire, expected_version=expected_version)
    log.warning(
        "workflow context patched",
        extra={
            "action": "context_patched",
            "workflow_id": workflow_id,
            "actor": actor,
            "reason": reason,
            "keys": sorted(patch),
            "replayed": sent.replayed,
        },
    )
    return sent.row


def check_reason(reason: object, what: str) -> None:
    """An operator's reason: required, and kept in the log (bounded)."""
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidInput(f"{what} needs a reason")
    if len(reason) > MAX_REASON:
        raise InvalidInput(f"the reason is longer than {MAX_REASON} characters")
