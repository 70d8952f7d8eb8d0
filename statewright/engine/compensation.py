"""Compensation, the saga pattern: undoing a workflow's completed steps, newest first.

A step declares its undo, ``run.step("charge", charge, compensate=refund)``; the ledger records
the undo's name with the step (a name any process can resolve: see
:mod:`statewright.engine.compensation_names`). Before a worker writes a **compensating**
transition (an edge marked ``compensate``; the cancel event or the ``on_fatal`` event when the
type's ``compensate_on`` says so), under its claim's lease, it runs the undos of the completed
steps in reverse order of completion, ``refund(key, result)`` with the compensated step's
stored result, each as the durable step ``undo.<step>`` of the same ledger: recorded
*executing* before and *done* after, fenced, reconciled when its outcome is unknown (with the
type's ``reconcilers["undo.<step>"]``), so a crash never runs one twice and a done one is
skipped. The transition's payload then says what was undone (``{"compensated": [...]}``).

Only completed steps are undone. A step that declared an undo and whose outcome is unknown (found
*executing*, or failed as it may have reached the other side) is reconciled first with the
type's reconciler for it: applied, it is done and undone; not applied, it is recorded so; with
no verdict the workflow parks for an operator (``Engine.resolve_step``), as for any step.

A crash during compensation: for a cancel, the request stays on the row until the workflow
ends, so the next claim delivers it again and undoes what is left; for a handler's
compensating event or a fatal failure, the handler runs again (its steps return their stored
results) and returns the same event: the determinism steps already ask. A compensation that
fails is a failure of the state (retried after the backoff, budgets spent as for the
handler's); one that cannot be found, or fails on the way to a transition that compensates
again, parks the workflow with its error.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from statewright.engine import tracecontext
from statewright.engine.compensation_names import SEEN, UNDO_PREFIX, undo_name
from statewright.engine.compensation_owed import HAND_OVER_KEY, owed
from statewright.engine.failures import PARKED_FATAL, describe
from statewright.engine.ledger import Begun, StepKey
from statewright.engine.outcome import decide
from statewright.engine.outcome_kinds import (
    Advance,
    CancelRun,
    Claim,
    Drop,
    Fail,
    Failed,
    FireTimer,
    Outcome,
    Park,
    Retry,
)
from statewright.engine.steps import Run
from statewright.engine.transitions import Defer, Fire
from statewright.engine.usercalls import is_async
from statewright.engine.workflow_type import WorkflowType
from statewright.errors import CompensationNotFound, LeaseLost, StatewrightError
from statewright.types import StepRecord

log = logging.getLogger(__name__)


def resolve(wtype: WorkflowType, step: str, name: str) -> Callable[..., Any]:
    """The compensation recorded as ``name`` for ``step``: the type's, one passed to
    ``run.step`` in this process, or imported by its ``module:qualname``. Raises
    CompensationNotFound."""
    found = wtype.compensators.get(name) or SEEN.get(name)
    if found is not None:
        return found
    module, _, qualname = name.partition(":")
    obj: Any = None
    if module and qualname:
        try:
            obj = importlib.import_module(module)
            for part in qualname.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError):
            obj = None
    if not callable(obj):
        raise CompensationNotFound(step, name)
    SEEN.setdefault(name, obj)
    return obj  # type: ignore[no-any-return]


def compensating(claim: Claim, outcome: Outcome) -> Fire | None:
    """The transition ``outcome`` writes when it compensates and has not yet (see the
    module docstring), else None. Only under a worker's claim: a cancel fired without one is
    handed to a worker first (:func:`~.compensation_owed.hand_over`)."""
    fire: Fire | None = None
    if isinstance(outcome, Advance | FireTimer | Fail | CancelRun):
        fire = outcome.fire
    elif isinstance(outcome, Retry) and isinstance(outcome.change, Fire):
        fire = outcome.change
    if fire is None or fire.compensated is not None or claim.lease is None:
        return None
    wtype, row = claim.wtype, claim.row
    if fire.event in wtype.compensating_events:
        return fire  # the cancel event or on_fatal, by the type's policy
    try:
        edge = wtype.machine.resolve(row.state, fire.event, row.context, fire.payload)
    except StatewrightError:
        return None  # refused when written, as it would be anyway
    return fire if edge.compensate else None


async def before(claim: Claim, outcome: Outcome, fire: Fire) -> Outcome:
    """``outcome``, whose transition ``fire`` compensates (:func:`compensating`), as it is
    written: ``fire`` after the compensations ran (its payload naming them); what follows
    instead when they fail."""
    try:
        names = await compensate(claim)
    except LeaseLost:
        return Drop(logged=True)
    except CompensationNotFound as exc:
        return _unhanded(_park(claim, exc))
    except Exception as exc:
        log.warning(
            "compensation failed",
            extra={
                "action": "compensation_failed",
                "workflow_id": claim.row.id,
                "state": claim.row.state,
                "error": describe(exc),
            },
        )
        after = decide(claim, Failed(exc))
        return _unhanded(_park(claim, exc) if compensating(claim, after) is not None else after)
    return _unhanded(_with_fire(outcome, replace(fire, compensated=names, step_finish=None)))


def _with_fire(outcome: Outcome, fire: Fire) -> Outcome:
    if isinstance(outcome, Retry):
        return replace(outcome, change=fire)
    assert isinstance(outcome, Advance | FireTimer | Fail | CancelRun)
    return replace(outcome, fire=fire)


def _unhanded(outcome: Outcome) -> Outcome:
    """``outcome`` deleting the timer that handed a cancel to a worker, if there is one
    (:func:`~.compensation_owed.hand_over`): it has brought the worker here, and left pending it
    would make the workflow due again at once, past a retry's backoff or a park."""
    if isinstance(outcome, Retry) and isinstance(outcome.change, Defer):
        keys = (*outcome.change.cancel_timer_keys, HAND_OVER_KEY)
        return replace(outcome, change=replace(outcome.change, cancel_timer_keys=keys))
    if isinstance(outcome, Park):
        keys = (*outcome.defer.cancel_timer_keys, HAND_OVER_KEY)
        return replace(outcome, defer=replace(outcome.defer, cancel_timer_keys=keys))
    if isinstance(outcome, Advance | FireTimer | Fail | CancelRun | Retry):
        fire = outcome.fire if not isinstance(outcome, Retry) else outcome.change
        assert isinstance(fire, Fire)
        if HAND_OVER_KEY not in fire.cancel_timer_keys:
            keys = (*fire.cancel_timer_keys, HAND_OVER_KEY)
            return _with_fire(outcome, replace(fire, cancel_timer_keys=keys))
    return outcome


def _park(claim: Claim, exc: BaseException) -> Park:
    row, error = claim.row, describe(exc)
    return Park(
        Defer(attempts=row.attempts, last_error=error, parked=PARKED_FATAL, lease=claim.lease),
        "workflow parked: its compensations could not run; an operator must look",
        {"action": "workflow_parked", "workflow_id": row.id, "error": error},
    )


async def compensate(claim: Claim) -> tuple[str, ...]:
    """Run the compensations the claimed workflow owes, newest completed step first, under
    the claim's lease; the steps undone (all of them, also those undone before a crash), in
    the order they were undone."""
    rt, wtype, row, handler_run = claim.rt, claim.wtype, claim.row, claim.run
    # The handler's last step is recorded done by now (settle writes it first).
    assert handler_run is None or handler_run.pending_finish is None
    run = Run(rt, wtype, row, executor=None if handler_run is None else handler_run.executor)
    ledger = await rt.store.steps(row.id)
    todo: list[StepRecord] = []
    for rec in owed(ledger):
        if rec.status != "done":
            found = await _reconciled(run, rec)
            if found is None:
                continue
            rec = found
        todo.append(rec)
    todo.sort(key=lambda r: (r.finished_at or 0.0, r.started_at, r.key), reverse=True)
    earlier = sorted(
        (s for s in ledger if s.step.startswith(UNDO_PREFIX) and s.status == "done"),
        key=lambda s: (s.finished_at or 0.0, s.key),
    )
    names = [s.step[len(UNDO_PREFIX) :] for s in earlier]
    for rec in todo:
        assert rec.compensation is not None
        fn = resolve(wtype, rec.step, rec.compensation)
        name = undo_name(rec.step)
        with tracecontext.step_span(row, name, run.key(name)):
            await run._step(name, _undo(fn, rec.result), False, None, None, None, True)
        names.append(rec.step)
    if names:
        log.info(
            "compensated",
            extra={"action": "compensated", "workflow_id": row.id, "steps": names},
        )
    return tuple(names)


async def _reconciled(run: Run, rec: StepRecord) -> StepRecord | None:
    """A step whose outcome is unknown, reconciled (the type's reconciler for it): its done
    record, or None when it never applied (recorded so). StepOutcomeUnknown without a
    verdict."""
    found = await run._prepare(rec.step, None, False, rec, rec.compensation)
    if isinstance(found, Begun):
        note = "not applied (reconciled before its compensation)"
        await run.ledger.finish(found, "failed", None, note, "not_applied")
        return None
    return found if found.status == "done" else None


def _undo(fn: Callable[..., Any], result: Any) -> Callable[[StepKey], Awaitable[Any] | Any]:
    """The undo's action: ``fn(key, result)``, sync or async as ``fn`` is."""
    if is_async(fn):

        async def undo_async(key: StepKey) -> Any:
            return await fn(key, result)

        return undo_async

    def undo(key: StepKey) -> Any:
        return fn(key, result)

    return undo
