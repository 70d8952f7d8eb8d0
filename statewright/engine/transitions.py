"""The one way a workflow's row changes: plan (pure), write (checked in SQL), tell.

Every state change (an external event, a handler's result, a timer, a retry, a cancel, a
recovery) is described by a :class:`Fire` and goes through :class:`Transitions`; writes that
keep the state (a retry in place, going idle, parking for an operator) by a :class:`Defer`.

- **Planning is pure and runs here**, outside the store: user guards never run on the store's
  thread or inside a database transaction. The plan is made on a row as read; the store
  applies it only if the row is still at that version (compare-and-swap) and, for a worker's
  write, only while the worker's lease holds (fencing), both in the statement that writes.
- **Observers and the rejections log are told here, once**: a refused event (illegal in the
  state, a payload its schema rejects) is logged the same way whoever sent it.
- **Client retries are safe**: an event sent with an idempotency key is applied once; a retry
  with the same key returns the workflow and applies nothing (:class:`Dispatched.replayed`).

External events plan on a recently seen row when one is at hand (see :class:`RowCache`): the
compare-and-swap makes a stale row cost one refused write and a re-read, never a wrong write.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from statewright.definition.machine import State, Transition
from statewright.engine import search as searching
from statewright.engine.changes import (
    CONTEXT_EVENT,
    FORK_EVENT,
    MAX_SEND_ROUNDS,
    MIGRATE_EVENT,
    MOVE_EVENT,
    OPERATOR_EVENTS,
    RESUME_EVENT,
    Defer,
    Dispatched,
    Fire,
    canonical,
    same_json,
)
from statewright.engine.compensation_names import compensated, intended
from statewright.engine.hooks import NO_STEP, StepRef, TransitionEvent
from statewright.engine.nesting import moving
from statewright.engine.rowcache import RowCache
from statewright.engine.tracecontext import capture as capture_trace
from statewright.engine.workflow_type import WorkflowType
from statewright.errors import (
    ActionFailed,
    IdempotencyKeyReused,
    IllegalTransition,
    InvalidInput,
    InvalidPayload,
    LeaseLost,
    StatewrightError,
    StoreError,
    UnknownState,
    VersionConflict,
    WorkflowFinished,
    WorkflowNotFound,
)
from statewright.types import (
    DeferWrite,
    Lease,
    TimerSpec,
    TransitionRecord,
    TransitionWrite,
    WorkflowRow,
)

if TYPE_CHECKING:
    from statewright.clock import Clock
    from statewright.engine.hooks import Observers
    from statewright.engine.registry import Registry
    from statewright.jsonvalue import Limits
    from statewright.store.protocol import Store

log = logging.getLogger(__name__)


class Transitions:
    """Plans and applies every change of a workflow row (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        registry: Registry,
        clock: Clock,
        limits: Limits,
        observers: Observers,
        row_cache_size: int = 4096,
    ) -> None:
        self.store = store
        self.registry = registry
        self.clock = clock
        self.limits = limits
        self.observers = observers
        self.rows = RowCache(row_cache_size)
        self.on_end: Callable[[WorkflowRow], None] | None = None
        """Told of every workflow that has children this process moves to a terminal state,
        after the write (the engine cancels the live ones: :mod:`statewright.engine.children`)."""

    # -- planning (pure) -----------------------------------------------------------------------

    def plan(self, row: WorkflowRow, fire: Fire) -> TransitionWrite:
        """Resolve ``fire.event`` on ``row`` and build the write. Pure but for the clock.

        Raises IllegalTransition (naming the workflow) or InvalidPayload.
        """
        # A migration is planned on the version it moves to (the one it leaves may not even
        # be registered any more).
        migrating = fire.event == MIGRATE_EVENT and fire.machine_version is not None
        wtype = self.registry.type_of(
            row.type, fire.machine_version if migrating else row.machine_version
        )
        machine = wtype.machine
        payload = fire.payload
        if not isinstance(payload, Mapping):
            raise InvalidPayload(
                fire.event, f"expected a JSON object, got {type(payload).__name__}"
            )
        limits = self.limits
        limits.check(payload, f"payload of {fire.event!r}")
        if fire.context_patch:
            limits.check(fire.context_patch, f"context patch of {fire.event!r}")
        if fire.event in OPERATOR_EVENTS:
            # An operator's action: outside the machine's events (so no guard or action),
            # refused once the workflow has finished; a move names its target.
            if row.terminal:
                raise WorkflowFinished(row.id, row.state)
            target_name = fire.target or row.state
            if target_name not in machine.states:
                raise UnknownState(
                    f"machine {machine.name!r} v{machine.version} has no state {target_name!r}",
                    state=target_name,
                )
            t = Transition((row.state,), fire.event, target_name)
        else:
            try:
                t = machine.resolve(row.state, fire.event, row.context, payload)
            except IllegalTransition as exc:
                raise IllegalTransition(
                    exc.state, exc.event, exc.allowed, exc.reason, row.id
                ) from None
            if t.compensate or fire.compensated is not None or wtype.compensate_on:
                payload = compensated(row, wtype.compensating_events, t, fire.compensated, payload)
        now = self.clock.now()
        target = machine.states[t.target]
        # A migration enters its state anew (the old version's timers go, the new one's are
        # armed), even under the same name; a self-transition is internal (XState-style): the
        # state's timers keep running. Compound states' timers: see engine/nesting.py.
        old = self.registry.known_machine(row.type, row.machine_version) if migrating else None
        move = moving(machine, row.state, t, now, migrating=migrating, old=old)
        staying = move.staying
        timers = move.arm
        if fire.rearm is not None and move.rearms(fire.rearm.key):
            timers += (fire.rearm,)  # a recurring timer that fired: its next interval
        if not target.terminal:
            timers += fire.add_timers  # a handler's schedules, armed in the state it enters
        run_at = run_at_for(wtype, target, now)
        if fire.event == RESUME_EVENT:
            run_at = now  # due again, as asked (a worker finds out whether anything runs)
        if fire.retry_delay is not None:
            if run_at is not None:
                run_at = now + fire.retry_delay  # the handler itself is retried later
            if (
                (run_at is None or not wtype.knows_handlers)  # no handler here, or none known
                and not target.terminal
                and machine.can(t.target, wtype.retry_event)
            ):
                timers += (TimerSpec(now + fire.retry_delay, wtype.retry_event),)
        patch = fire.context_patch
        # The edge's actions run on the context as it was (the guards' view); their patch is
        # stored in the log with the caller's, so replay never runs them again.
        assigned = (
            None
            if t.event in OPERATOR_EVENTS
            else machine.assigned(t, row.context, payload, source=row.state)
        )
        if assigned is not None:
            try:
                limits.check(assigned, f"context update of {fire.event!r}")
            except InvalidInput as exc:  # too deep, too large, not JSON: refused like a payload
                raise ActionFailed(fire.event, "assign", exc.message) from None
            patch = {**assigned, **patch} if patch else assigned
        context = {**row.context, **patch} if patch else row.context
        names = wtype.search_attributes  # (a type without any: no work, nothing written)
        search = None
        if names and migrating:
            search = searching.every(names, context)  # the version's, whatever it had
        elif names and patch:
            search = searching.changes(names, row.context, patch)
        notice = None
        if target.terminal and row.parent_key is not None and not row.terminal:
            notice = self._notice(wtype, row, t.target, context, now)
        return TransitionWrite(
            workflow_id=row.id,
            expected_version=row.version,
            from_state=row.state,
            to_state=t.target,
            event=fire.event,
            payload=payload,
            actor=fire.actor,
            at=now,
            context=context,
            context_patch=patch,
            terminal=target.terminal,
            attempts=row.attempts if fire.attempts is None else fire.attempts,
            total_attempts=fire.total_attempts,
            run_at=run_at,
            # Always, when leaving: a timer scheduled on its own (Engine.schedule) does not
            # change the version, so the row this was planned on may not show it.
            clear_timers=not staying,
            fired_timer_id=fire.fired_timer,
            add_timers=timers,
            cancel_timer_keys=(*fire.cancel_timer_keys, *move.drop_keys),
            release_lease=fire.release_lease
            and not (fire.keep_lease_if_due and run_at is not None and fire.retry_delay is None),
            last_error=fire.last_error,
            guard=None if t.guard is None else t.guard.name,
            consume_inbox_ids=fire.consume_inputs,
            lease=fire.lease,
            require_unleased=fire.require_unleased,
            idempotency_key=fire.idempotency_key,
            machine_version=fire.machine_version if migrating else None,
            messages=fire.messages,
            step_finish=fire.step_finish,
            # The span it is made in (a request's, a worker's handler span), if any.
            trace=capture_trace(),
            notice=notice,
            effects=fire.effects,
            search=search,
        )

    def _notice(
        self, wtype: WorkflowType, row: WorkflowRow, final: str, context: Any, now: float
    ) -> TimerSpec:
        """A child's end for its parent (:mod:`statewright.engine.children`). A result that
        does not fit the limits, or whose hook raises, is reported as such, not as the
        child's: its end must still reach the parent."""
        try:
            notice = wtype.notice(row, final, {"result": wtype.child_result(context)}, now)
            self.limits.check(notice.payload, f"result of {row.id!r} for its parent")
        except Exception as exc:  # the type's result hook, or the limits
            log.warning("the result of child %s is not sent: %s", row.id, exc)
            error = f"the result could not be sent: {exc}"
            notice = wtype.notice(row, final, {"result": None, "error": error}, now)
        return notice

    # -- writes --------------------------------------------------------------------------------

    async def fire(self, row: WorkflowRow, fire: Fire, step: StepRef = NO_STEP) -> WorkflowRow:
        """Fire on ``row`` as read: applied only if it is still at that version (and the lease
        holds, for a worker's write). ``step``: the handler's last step, for the record.

        Raises IllegalTransition, InvalidPayload (logged as rejections), VersionConflict,
        LeaseLost, StoreError (OutcomeUnknown when it may have applied).
        """
        try:
            write = self.plan(row, fire)
            after = await self.store.apply_transition(write)
        except (IllegalTransition, InvalidPayload, VersionConflict) as exc:
            self.rows.drop(row.id)
            await self.rejected(row.id, row, fire.event, exc, fire.actor)
            raise
        except StoreError as exc:
            self.rows.drop(row.id)
            self.observers.persistence_failed(row.id, fire.event, exc)
            raise
        except LeaseLost:
            self.rows.drop(row.id)
            raise
        self.rows.put(after)
        ev = TransitionEvent(row, after, fire.event, fire.actor, write.guard, *step)
        self.observers.transitioned(ev)
        if after.has_children and after.terminal and self.on_end is not None:
            self.on_end(after)
        if fire.retry_delay is not None and not after.terminal:
            # A transient failure moved it to a waiting state with a retry timer (a terminal
            # target means the budget was spent: no retry).
            self.observers.retried(row, after, fire.retry_delay)
        return after

    async def send(
        self,
        workflow_id: str,
        fire: Fire,
        *,
        expected_version: int | None = None,
        row: WorkflowRow | None = None,
    ) -> Dispatched:
        """Fire an external event on a workflow as it is in the store.

        ``row``: the caller's fresh read of it, if it has one (saves a read). Without
        ``expected_version`` a concurrent writer's win is absorbed by re-reading and planning
        again; with it, it is a VersionConflict. With ``fire.idempotency_key``, a key this
        workflow's log already has returns that first application (``replayed``) or, for a
        different event or payload, raises IdempotencyKeyReused.
        """
        store = self.store
        key = fire.idempotency_key
        fresh = row is not None
        if row is None:
            row = self.rows.get(workflow_id)
        for _ in range(MAX_SEND_ROUNDS):
            if key is not None:
                # Whether the key was applied, asked together with a fresh read (one trip to
                # SQLite's connection thread, two concurrent queries on PostgreSQL).
                read, prior = await asyncio.gather(
                    self._read(workflow_id) if not fresh or row is None else _given(row),
                    store.transition_by_key(workflow_id, key),
                )
                row, fresh = read, True
                if prior is not None:
                    return self._replay(row, prior, fire)
            elif row is None:
                row, fresh = await self._read(workflow_id), True
            if expected_version is not None and row.version != expected_version:
                if not fresh:
                    row = None
                    continue
                exc = VersionConflict(workflow_id, expected_version, row.version)
                await self.rejected(workflow_id, row, fire.event, exc, fire.actor)
                raise exc
            try:
                write = self.plan(row, fire)
            except (IllegalTransition, InvalidPayload) as exc:
                if not fresh:  # confirm on the row as it is before refusing
                    row = None
                    continue
                if fire.if_allowed and isinstance(exc, IllegalTransition):
                    return await self._not_applied(row, fire, exc)
                await self.rejected(workflow_id, row, fire.event, exc, fire.actor)
                raise
            try:
                after = await store.apply_transition(write)
            except (VersionConflict, IdempotencyKeyReused):
                # A concurrent writer moved it (or applied the same key) since our read.
                self.rows.drop(workflow_id)
                if expected_version is not None and key is None and fresh:
                    lost = VersionConflict(workflow_id, expected_version, None)
                    await self.rejected(workflow_id, row, fire.event, lost, fire.actor)
                    raise lost from None
                row, fresh = None, False
                continue
            except StoreError as exc:
                self.rows.drop(workflow_id)
                self.observers.persistence_failed(workflow_id, fire.event, exc)
                raise
            self.rows.put(after)
            ev = TransitionEvent(row, after, fire.event, fire.actor, write.guard)
            self.observers.transitioned(ev)
            if after.has_children and after.terminal and self.on_end is not None:
                self.on_end(after)
            return Dispatched(after, False, after.version)
        raise VersionConflict(workflow_id, expected_version or 0, None)

    def _replay(self, row: WorkflowRow, prior: TransitionRecord, fire: Fire) -> Dispatched:
        # An operator's context patch is its patch as much as its reason (its payload).
        other_patch = fire.event == CONTEXT_EVENT and not same_json(
            prior.context_patch, dict(fire.context_patch or {})
        )
        if (
            prior.event != fire.event
            or not same_json(intended(prior.payload), intended(fire.payload))
            or other_patch
        ):
            raise IdempotencyKeyReused(
                row.id,
                prior.idempotency_key or "",
                f"event {prior.event!r} (version {prior.version}) with another payload"
                if prior.event == fire.event
                else f"event {prior.event!r} (version {prior.version})",
            )
        log.info(
            "idempotent retry: already applied",
            extra={
                "action": "idempotent_replay",
                "workflow_id": row.id,
                "event": fire.event,
                "version": prior.version,
            },
        )
        return Dispatched(row, True, prior.version)

    async def _not_applied(
        self, row: WorkflowRow, fire: Fire, exc: IllegalTransition
    ) -> Dispatched:
        """An ``if_allowed`` event refused on a fresh read: not applied when only the state
        refuses it now; an unknown event or state, or a payload its schema rejects, is still
        refused (and logged as a rejection)."""
        machine = self.registry.type_of(row.type, row.machine_version).machine
        refused: StatewrightError = exc
        declared = machine.events.get(fire.event)
        if declared is not None and row.state in machine.states:
            try:
                # Legality comes first in planning: check the payload all the same.
                declared.validate_payload(fire.payload)
            except InvalidPayload as bad:
                refused = bad
            else:
                self.observers.event_not_applied(row, fire.event, exc, fire.actor)
                return Dispatched(row, False, row.version, applied=False, refusal=exc)
        await self.rejected(row.id, row, fire.event, refused, fire.actor)
        raise refused

    async def _read(self, workflow_id: str) -> WorkflowRow:
        row = await self.store.get_workflow(workflow_id)
        if row is None:
            self.rows.drop(workflow_id)
            raise WorkflowNotFound(workflow_id)
        self.rows.put(row)
        return row

    async def defer(self, row: WorkflowRow, defer: Defer) -> WorkflowRow:
        """Keep ``row`` in its state (see :class:`Defer`); CAS on its version and lease."""
        write = DeferWrite(
            workflow_id=row.id,
            expected_version=row.version,
            at=self.clock.now(),
            attempts=defer.attempts,
            next_due_at=defer.next_due_at,
            last_error=defer.last_error,
            total_attempts=defer.total_attempts,
            parked=defer.parked,
            lease=defer.lease,
            consume_inbox_ids=defer.consume_inputs,
            fired_timer_id=defer.fired_timer,
            add_timers=defer.add_timers,
            cancel_timer_keys=defer.cancel_timer_keys,
            wake_input=defer.wake_input,
        )
        try:
            after = await self.store.defer(write)
        except StatewrightError:
            self.rows.drop(row.id)
            raise
        self.rows.put(after)
        return after

    async def let_go(self, row: WorkflowRow, lease: Lease | None) -> WorkflowRow:
        """Release ``row`` keeping its counters, error and parked reason; its next due time
        is re-armed from its pending timers (nothing to run now)."""
        return await self.defer(
            row,
            Defer(
                attempts=row.attempts,
                last_error=row.last_error,
                parked=row.parked,
                lease=lease,
            ),
        )

    # -- telling -------------------------------------------------------------------------------

    async def rejected(
        self,
        workflow_id: str,
        row: WorkflowRow | None,
        event: str,
        exc: StatewrightError,
        actor: str,
    ) -> None:
        """Tell the observers about a refused transition, and log an invalid one (illegal
        event, bad payload; not a lost race) in the store's rejections log.

        That is one write, and its failure is logged, never raised: the caller gets the
        refusal it caused, not a store error about the bookkeeping.
        """
        state = row.state if row else "?"
        self.observers.rejected_transition(
            workflow_id, state, event, exc, workflow=row, actor=actor
        )
        if row is None or isinstance(exc, VersionConflict):
            return
        try:
            await self.store.record_rejection(
                workflow_id=workflow_id,
                type=row.type,
                tenant=row.tenant,
                state=state,
                event=event,
                code=exc.code,
                actor=actor,
                message=exc.message[:1000],
                at=self.clock.now(),
            )
        except Exception:
            log.warning(
                "could not log a rejected transition",
                exc_info=True,
                extra={"action": "rejection_not_logged", "workflow_id": workflow_id},
            )


async def _given(row: WorkflowRow) -> WorkflowRow:
    return row


def run_at_for(wtype: WorkflowType, state: State, now: float) -> float | None:
    """When a worker should claim a workflow entering ``state``: now, or never (a terminal
    state, or one without a handler, by a process that has the type's handlers).

    Every write that enters a state decides it here (start, events from any surface,
    handlers' results, timers, fork, move, migrate, resume, schedule ticks), and a process
    that does not run the type (registered without handlers: :meth:`WorkflowType.has_work`)
    makes every non-terminal state due: the worker that claims the row and has no handler
    for its state lets it go with its next due time from its timers (processing.py), so the
    row costs one claim and then waits for its timer, input or event, never a spin.

    Chosen over keeping each machine version's handled states in the store for such writers
    to read: a worker registering or changing them would have to find and make due the rows
    written before (not due), and lock out a writer that read them just before; here a
    writer that has the handlers (a worker's own transitions, chained handlers, group
    commit) decides exactly as before, at no cost.
    """
    return now if not state.terminal and wtype.has_work(state.name) else None


__all__ = [
    "CONTEXT_EVENT",
    "FORK_EVENT",
    "MAX_SEND_ROUNDS",
    "MIGRATE_EVENT",
    "MOVE_EVENT",
    "OPERATOR_EVENTS",
    "RESUME_EVENT",
    "Defer",
    "Dispatched",
    "Fire",
    "Transitions",
    "canonical",
    "run_at_for",
    "same_json",
]
