"""Fork: start a new workflow from a past version of another (Temporal's reset, LangGraph's
checkpoints, from our log), keeping the results of the steps done by then and never calling a
step again behind the ledger's back.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

from statewright import ids
from statewright.engine import search
from statewright.engine.hooks import TransitionEvent
from statewright.engine.nesting import start_timers
from statewright.engine.operator import check_reason
from statewright.engine.reads import get
from statewright.engine.replay import replay_log
from statewright.engine.runtime import Runtime
from statewright.engine.tracecontext import capture as capture_trace
from statewright.engine.transitions import (
    FORK_EVENT,
    run_at_for,
    same_json,
)
from statewright.errors import (
    InvalidInput,
    StepsWouldRerun,
    StepUnresolved,
    VersionNotFound,
    WorkflowBusy,
    WorkflowExists,
)
from statewright.store.protocol import fork_source_busy
from statewright.types import (
    NewWorkflow,
    StepRecord,
    WorkflowRow,
)

log = logging.getLogger(__name__)


async def fork(
    rt: Runtime,
    workflow_id: str,
    *,
    actor: str,
    reason: str,
    version: int | None = None,
    new_id: str | None = None,
    rerun_steps: bool = False,
) -> WorkflowRow:
    """Start a new workflow from a past version of an existing one: Temporal's reset,
    LangGraph's checkpoints, from our log. The new workflow is in the state, with the
    context, that the log gives at ``version`` (default: the latest); the steps the
    original had *done* by then are copied under the new workflow's keys, so they return
    their results there and do not run again. Its first log entry is ``$fork`` with the
    source, version, reason and actor. The original is not touched (if it is live, both
    go on: what comes after the fork point runs in each).

    **Steps done after ``version`` run again in the fork, under the fork's keys** (no
    reconcile hook or deduplicating service links them to the original's calls): a
    charge is made a second time. Such a fork is refused with :class:`StepsWouldRerun`,
    naming them, unless ``rerun_steps=True`` says that is meant (they are listed in the
    ``$fork`` entry). Forking the latest version reruns nothing.

    Refused, so that no call is made twice behind the ledger's back: while a worker holds
    the original (WorkflowBusy: a step may be in flight; checked again in the transaction
    that creates the fork), and while any step of the original has an unknown outcome
    (:class:`StepUnresolved`: *executing*, or failed by an error that does not prove the
    call never left, as for a workflow parked ``step_outcome_unknown``). Resolve such a
    step on the original first (:meth:`resolve_step`, or let its worker reconcile it):
    done, the fork carries its result; not applied, the fork may run it.

    ``new_id`` defaults to ``<id>.fork-<version>``; forking the same version to the same id
    again returns that fork (a retry is safe: the workflow, its first log entry and its
    steps are one write).

    Raises WorkflowNotFound, UnknownWorkflowType (its version is not registered),
    InvalidInput (no reason, a version out of range, a bad id), WorkflowExists (the id is
    taken by something else), WorkflowBusy, StepUnresolved, StepsWouldRerun.
    """
    check_reason(reason, "forking a workflow")
    if not isinstance(rerun_steps, bool):
        raise InvalidInput("rerun_steps must be true or false")
    source = await get(rt, workflow_id)
    at = source.version if version is None else version
    if isinstance(at, bool) or not isinstance(at, int):
        raise InvalidInput(f"version must be an integer, got {version!r}")
    if not 1 <= at <= source.version:
        raise VersionNotFound(
            f"workflow {workflow_id!r} has versions 1..{source.version}, not {at}",
            version=at,
        )
    records = await rt.store.history(workflow_id, 0, at + 1)
    state, context, fork_version = replay_log(rt, source, records[:at])
    wtype = rt.registry.type_of(source.type, fork_version)
    machine = wtype.machine
    fork_id = ids.check_ref(new_id or ids.fork_id(workflow_id, at), source.tenant)
    payload: dict[str, Any] = {"forked_from": workflow_id, "version": at, "reason": reason}
    existing = await existing_fork(rt, fork_id, payload)
    if existing is not None:
        return existing  # a retry
    if source.lease_owner is not None:
        raise WorkflowBusy(fork_source_busy(workflow_id))
    now = rt.clock.now()
    steps = await rt.store.steps(workflow_id)
    unknown = [s.step for s in steps if _outcome_unknown(s)]
    if unknown:
        raise StepUnresolved(workflow_id, unknown, action="fork")
    # The steps done while the workflow was at that version: before the next transition
    # (for the latest version: all done so far). Those done later would run again.
    cutoff = records[at].at if len(records) > at else now
    copied = tuple(
        # Without their compensations: the original's effects are the original's to undo
        # (both undoing one charge would refund it twice).
        dataclasses.replace(
            step, key=f"{fork_id}:{step.step}", workflow_id=fork_id, compensation=None
        )
        for step in steps
        if step.status == "done" and step.finished_at is not None and step.finished_at <= cutoff
    )
    kept = {step.step for step in copied}
    rerun = [s.step for s in steps if s.status == "done" and s.step not in kept]
    if rerun and not rerun_steps:
        raise StepsWouldRerun(workflow_id, at, rerun)
    if rerun:
        payload["rerun_steps"] = rerun
    target = machine.states[state]
    row, created = await rt.store.create_workflow(
        NewWorkflow(
            id=fork_id,
            type=source.type,
            machine_version=fork_version,
            state=state,
            context=context,
            actor=actor,
            at=now,
            terminal=target.terminal,
            run_at=run_at_for(wtype, target, now),
            timers=() if target.terminal else start_timers(machine, state, now),
            tenant=source.tenant,
            event=FORK_EVENT,
            payload=payload,
            steps=copied,
            trace=capture_trace(),
            fork_of=(workflow_id, source.fence),
            search=search.attributes(wtype.search_attributes, context)
            if wtype.search_attributes
            else None,
        )
    )
    if not created:
        existing = await existing_fork(rt, fork_id, payload)
        if existing is None:
            raise WorkflowExists(fork_id, row.type, f"a fork of {workflow_id} v{at}")
        return existing
    log.warning(
        "workflow forked",
        extra={
            "action": "workflow_forked",
            "workflow_id": fork_id,
            "forked_from": workflow_id,
            "version": at,
            "actor": actor,
            "reason": reason,
            "steps_copied": len(copied),
            "steps_rerun": rerun,
        },
    )
    rt.transitions.rows.put(row)
    rt.observers.transitioned(TransitionEvent(None, row, FORK_EVENT, actor))
    return row


async def existing_fork(
    rt: Runtime, fork_id: str, payload: Mapping[str, Any]
) -> WorkflowRow | None:
    """The workflow ``fork_id`` if it is this fork (a retry: its ``$fork`` entry names the
    same source, version and reason); None if there is none; WorkflowExists if the id is
    taken by something else."""
    row = await rt.store.get_workflow(fork_id)
    if row is None:
        return None
    first = (await rt.store.history(fork_id, 0, 1))[:1]
    if (
        not first
        or first[0].event != FORK_EVENT
        or not all(same_json(first[0].payload.get(k), v) for k, v in payload.items())
    ):
        raise WorkflowExists(
            fork_id, row.type, f"a fork of {payload['forked_from']} v{payload['version']}"
        )
    return row


def _outcome_unknown(step: StepRecord) -> bool:
    """Whether the ledger cannot tell if ``step``'s call happened: *executing* (a worker may
    be in it, or died in it), or failed by an error that does not prove the call never left
    (what a worker reconciles before running it again, and parks on without a verdict)."""
    return step.status == "executing" or (
        step.status == "failed" and step.outcome != "not_applied"
    )
