"""The log is the truth: rebuild a workflow from its transition log, and check the row.

Replay checks every logged step against the machine version it was taken on (a ``$migrate``
entry switches versions); a step on a version this process does not register is checked for
order only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from statewright.definition.machine import Machine
from statewright.engine.reads import get
from statewright.engine.runtime import Runtime
from statewright.engine.transitions import (
    CONTEXT_EVENT,
    FORK_EVENT,
    MIGRATE_EVENT,
    MOVE_EVENT,
    RESUME_EVENT,
)
from statewright.errors import (
    ReplayMismatch,
)
from statewright.types import (
    JSON,
    TransitionRecord,
    WorkflowRow,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Replayed:
    """A workflow as rebuilt from its transition log alone."""

    state: str | None
    version: int
    context: JSON


async def replay(rt: Runtime, workflow_id: str) -> Replayed:
    """Rebuild state, version and context from the log alone, checking every step."""
    row = await get(rt, workflow_id)
    rt.registry.type_of(row.type, row.machine_version)  # its current version must be known here
    records = await rt.store.history(workflow_id)
    state, context, machine_version = replay_log(rt, row, records)
    if machine_version != row.machine_version:
        raise ReplayMismatch(
            f"workflow {workflow_id!r}: the log ends on version {machine_version} of its "
            f"machine, the row is on {row.machine_version}",
            workflow_id=workflow_id,
        )
    return Replayed(state, records[-1].version if records else 0, context)


def replay_log(
    rt: Runtime, row: WorkflowRow, records: list[TransitionRecord]
) -> tuple[str, JSON, int]:
    """State, context and machine version after ``records`` (a log from its start),
    checking every step against the machine version it was taken on: a ``$migrate``
    entry switches versions (the log's first version is the first migration's
    ``from_version``). Steps on a version this engine does not register are checked for
    order only."""
    migrations = [r for r in records if r.event == MIGRATE_EVENT]
    current = int(migrations[0].payload["from_version"]) if migrations else row.machine_version
    state: str | None = None
    context: JSON = {}
    version = 0
    for rec in records:
        if rec.event == MIGRATE_EVENT:
            current = int(rec.payload["to_version"])
        machine = rt.registry.known_machine(row.type, current)
        problem = replay_problem(machine, rec, state, version)
        if problem:
            raise ReplayMismatch(f"workflow {row.id!r} v{rec.version}: {problem}")
        if rec.context_patch is not None:
            context = (
                dict(rec.context_patch)
                if rec.from_state is None
                else {**context, **rec.context_patch}
            )
        state, version = rec.to_state, rec.version
    if state is None:
        raise ReplayMismatch(f"workflow {row.id!r} has an empty log")
    return state, context, current


async def check(rt: Runtime, workflow_id: str) -> Replayed:
    """Compare replay with the stored row; raises :class:`ReplayMismatch` if they differ."""
    replayed = await replay(rt, workflow_id)
    row = await get(rt, workflow_id)
    stored = Replayed(row.state, row.version, row.context)
    if replayed != stored:
        raise ReplayMismatch(
            f"workflow {workflow_id!r}: replay gives {replayed} but the row holds {stored}",
            workflow_id=workflow_id,
        )
    return replayed


def check_archived(
    rt: Runtime, workflow: Mapping[str, Any], log: Iterable[Mapping[str, Any]]
) -> Replayed:
    """An archived workflow's row (its columns, as :meth:`import_archive` reads them) and
    log replay to each other, on the machine versions registered here (on others, the
    order of the log only); a finished row must be in a terminal state of its machine.
    ReplayMismatch otherwise (also for a log too malformed to replay)."""
    wid = str(workflow["id"])
    try:
        entries = sorted(log, key=lambda t: int(t["version"]))
        records = [
            TransitionRecord(
                seq=n,
                workflow_id=wid,
                version=int(t["version"]),
                from_state=t.get("from_state"),
                to_state=t["to_state"],
                event=t["event"],
                payload=t["payload"],
                actor=t["actor"],
                context_patch=t.get("context_patch"),
                at=float(t["at"]),
                idempotency_key=t.get("idempotency_key"),
            )
            for n, t in enumerate(entries, 1)
        ]
        row = WorkflowRow(
            id=wid,
            type=str(workflow["type"]),
            machine_version=int(workflow["machine_version"]),
            state=str(workflow["state"]),
            context=dict(workflow["context"]),
            version=int(workflow["version"]),
            attempts=0,
            terminal=bool(workflow["terminal"]),
            created_at=float(workflow["created_at"]),
            updated_at=float(workflow["updated_at"]),
            state_entered_at=float(workflow["state_entered_at"]),
            next_due_at=None,
            lease_owner=None,
            lease_expires_at=None,
            last_error=None,
        )
        state, context, machine_version = replay_log(rt, row, records)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ReplayMismatch(
            f"workflow {wid!r}: its log cannot be replayed ({type(exc).__name__}: {exc})",
            workflow_id=wid,
        ) from None
    replayed = Replayed(state, records[-1].version, context)
    stored = Replayed(row.state, row.version, row.context)
    if replayed != stored or machine_version != row.machine_version:
        raise ReplayMismatch(
            f"workflow {wid!r}: replay gives {replayed} on machine version "
            f"{machine_version}, but the row holds {stored} on {row.machine_version}",
            workflow_id=wid,
        )
    machine = rt.registry.known_machine(row.type, row.machine_version)
    target = None if machine is None else machine.states.get(row.state)
    if machine is not None and (target is None or target.terminal != row.terminal):
        raise ReplayMismatch(
            f"workflow {wid!r}: the row says {'' if row.terminal else 'not '}finished, "
            f"but {row.state!r} is {'not ' if row.terminal else ''}a terminal state",
            workflow_id=wid,
        )
    return replayed


def replay_problem(
    machine: Machine | None, rec: TransitionRecord, state: str | None, version: int
) -> str | None:
    if rec.version != version + 1:
        return f"expected version {version + 1}, log has {rec.version} (gap or duplicate)"
    if rec.from_state != state:
        return f"log says from {rec.from_state!r} but replay is in {state!r}"
    if machine is None:  # a machine version this engine does not register: order only
        return None
    if rec.from_state is None:
        if rec.event == FORK_EVENT:  # started from another workflow's past version
            return None if rec.to_state in machine.states else f"forked into {rec.to_state!r}"
        return None if rec.to_state == machine.initial.name else "does not start in initial"
    if rec.event in (CONTEXT_EVENT, RESUME_EVENT):
        return None if rec.to_state == state else f"a {rec.event} that changed the state"
    if rec.event in (MOVE_EVENT, MIGRATE_EVENT):
        return None if rec.to_state in machine.states else f"a {rec.event} to {rec.to_state!r}"
    if not any(t.target == rec.to_state for t in machine.transitions_from(state or "", rec.event)):
        return f"no edge {state!r} --{rec.event}--> {rec.to_state!r} in the machine"
    return None
