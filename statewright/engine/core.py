"""The engine: start workflows, fire events, run the error paths, replay the log.

Every state change goes through :meth:`Engine._fire`: resolve the transition on the machine
(pure), build one :class:`TransitionWrite`, and let the store apply it atomically.
"""

from __future__ import annotations

import logging
import random
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from statewright.clock import Clock, SystemClock
from statewright.definition.machine import Machine, State
from statewright.engine.cancel import cancel as cancel_workflow
from statewright.engine.hooks import Observers, TransitionEvent
from statewright.engine.workflow_type import WorkflowType
from statewright.errors import (
    IllegalTransition,
    InvalidInput,
    InvalidPayload,
    ReplayMismatch,
    StatewrightError,
    StoreError,
    UnknownWorkflowType,
    VersionConflict,
    WorkflowExists,
    WorkflowNotFound,
)
from statewright.store.protocol import Store
from statewright.types import (
    JSON,
    NewWorkflow,
    TimerSpec,
    TransitionRecord,
    TransitionWrite,
    WorkflowFilter,
    WorkflowRow,
)

log = logging.getLogger(__name__)

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,199}$")
_EVENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]{0,99}$")


@dataclass(frozen=True)
class Replayed:
    """A workflow as rebuilt from its transition log alone."""

    state: str | None
    version: int
    context: JSON


@dataclass(frozen=True)
class Stuck:
    """A non-terminal workflow that has sat in its state past the state's threshold."""

    workflow: WorkflowRow
    age: float
    threshold: float


class Engine:
    """Runs workflows of registered types on a store.

    Args:
        store: where everything is persisted (opened by :meth:`open` / ``async with``).
        types: workflow types to register.
        clock: time source; inject :class:`~statewright.clock.ManualClock` in tests.
        default_stuck_after: threshold for states that declare no ``stuck_after``.
    """

    def __init__(
        self,
        store: Store,
        types: Iterable[WorkflowType | Machine] = (),
        *,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        default_stuck_after: float = 86400.0,
    ) -> None:
        self.store = store
        self.clock: Clock = clock or SystemClock()
        self.rng = rng or random.Random()
        self.default_stuck_after = default_stuck_after
        self.observers = Observers()
        self._types: dict[str, dict[int, WorkflowType]] = {}
        self._latest: dict[str, WorkflowType] = {}
        for t in types:
            self.register(t)

    # -- registry ------------------------------------------------------------------------------

    def register(self, *types: WorkflowType | Machine) -> None:
        """Register workflow types (a bare Machine becomes a type with no handlers).

        Several versions of one machine may be registered: new workflows use the highest,
        existing ones keep the version they started with.
        """
        for t in types:
            wtype = t if isinstance(t, WorkflowType) else WorkflowType(t)
            self._types.setdefault(wtype.name, {})[wtype.version] = wtype
            latest = self._latest.get(wtype.name)
            if latest is None or wtype.version >= latest.version:
                self._latest[wtype.name] = wtype

    @property
    def types(self) -> list[WorkflowType]:
        return list(self._latest.values())

    def type_of(self, name: str, version: int | None = None) -> WorkflowType:
        if version is None:
            if name not in self._latest:
                raise UnknownWorkflowType(name)
            return self._latest[name]
        found = self._types.get(name, {}).get(version)
        if found is None:
            raise UnknownWorkflowType(name, version)
        return found

    # -- lifecycle -----------------------------------------------------------------------------

    async def open(self) -> None:
        await self.store.open()

    async def close(self) -> None:
        await self.store.close()

    async def __aenter__(self) -> Engine:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- commands ------------------------------------------------------------------------------

    async def start(
        self,
        workflow_type: str,
        input: Mapping[str, Any] | None = None,
        *,
        workflow_id: str | None = None,
        actor: str = "system",
        tenant: str = "default",
    ) -> WorkflowRow:
        """Start a workflow in the machine's initial state; ``input`` becomes its context.

        With a caller-chosen ``workflow_id`` start is idempotent: starting an existing id of
        the same type (and tenant) returns the existing workflow unchanged.
        """
        row, _ = await self.create(
            workflow_type, input, workflow_id=workflow_id, actor=actor, tenant=tenant
        )
        return row

    async def create(
        self,
        workflow_type: str,
        input: Mapping[str, Any] | None = None,
        *,
        workflow_id: str | None = None,
        actor: str = "system",
        tenant: str = "default",
    ) -> tuple[WorkflowRow, bool]:
        """:meth:`start`, also telling whether this call created the workflow."""
        wtype = self.type_of(workflow_type)
        if input is not None and not isinstance(input, Mapping):
            raise InvalidInput(f"input must be a JSON object, got {type(input).__name__}")
        if workflow_id is None:
            workflow_id = uuid.uuid4().hex
        elif not isinstance(workflow_id, str) or not _ID.match(workflow_id):
            raise InvalidInput(
                f"invalid workflow id {workflow_id!r}: 1-200 letters, digits, '_', '.', '-'"
            )
        if not isinstance(tenant, str) or not _ID.match(tenant):
            raise InvalidInput(f"invalid tenant {tenant!r}: 1-200 letters, digits, '_', '.', '-'")
        now = self.clock.now()
        initial = wtype.machine.initial
        new = NewWorkflow(
            id=workflow_id,
            type=wtype.name,
            machine_version=wtype.version,
            state=initial.name,
            context=dict(input or {}),
            actor=actor,
            at=now,
            terminal=initial.terminal,
            run_at=self._run_at(wtype, initial, now),
            timers=self._state_timers(initial, now),
            tenant=tenant,
        )
        row, created = await self.store.create_workflow(new)
        if row.type != wtype.name or row.tenant != tenant:
            # Another tenant's id must not leak its type: report it as taken, nothing more.
            theirs = row.type if row.tenant == tenant else "another tenant's workflow"
            raise WorkflowExists(workflow_id, theirs, wtype.name)
        if created:
            self.observers.transitioned(TransitionEvent(None, row, "$start", actor))
        return row, created

    async def get(self, workflow_id: str) -> WorkflowRow:
        row = await self.store.get_workflow(workflow_id)
        if row is None:
            raise WorkflowNotFound(workflow_id)
        return row

    async def send(
        self,
        workflow_id: str,
        event: str,
        payload: Mapping[str, Any] | None = None,
        *,
        actor: str = "system",
        expected_version: int | None = None,
        context: Mapping[str, Any] | None = None,
    ) -> WorkflowRow:
        """Fire ``event`` on a workflow; returns the row after the transition.

        Raises:
            WorkflowNotFound, IllegalTransition, InvalidPayload, VersionConflict (the row
            moved since ``expected_version``, or a concurrent writer won), StoreError.
        """
        if not isinstance(event, str) or not _EVENT.match(event):
            raise InvalidInput(f"invalid event name {event!r}")
        if context is not None and not isinstance(context, Mapping):
            raise InvalidInput("context must be a JSON object")
        body = {} if payload is None else payload
        seen: list[WorkflowRow] = []

        def plan(row: WorkflowRow) -> TransitionWrite:
            # Runs inside the store's write operation, on the row it just read: one trip
            # to the store per send instead of a read and then a write.
            seen.append(row)
            if expected_version is not None and row.version != expected_version:
                raise VersionConflict(workflow_id, expected_version, row.version)
            # An external event leaves a worker's lease alone: that worker's own result
            # will then lose the compare-and-swap and be dropped.
            return self._plan(row, event, body, actor, context_patch=context, release_lease=False)

        try:
            before, after = await self.store.apply_event(workflow_id, plan)
        except (IllegalTransition, InvalidPayload, VersionConflict) as exc:
            await self._rejected(workflow_id, seen[-1] if seen else None, event, exc, actor)
            raise
        except StoreError as exc:
            self.observers.persistence_failed(workflow_id, event, exc)
            raise
        self.observers.transitioned(TransitionEvent(before, after, event, actor))
        return after

    async def approve(
        self, workflow_id: str, approver: str, comment: str | None = None
    ) -> WorkflowRow:
        """Fire the type's approval event with the approver as actor."""
        return await self.decide(workflow_id, True, approver=approver, comment=comment)

    async def deny(
        self, workflow_id: str, approver: str, comment: str | None = None
    ) -> WorkflowRow:
        """Fire the type's denial event with the approver as actor."""
        return await self.decide(workflow_id, False, approver=approver, comment=comment)

    async def decide(
        self,
        workflow_id: str,
        approve: bool,
        *,
        approver: str,
        comment: str | None = None,
        actor: str | None = None,
        expected_version: int | None = None,
    ) -> WorkflowRow:
        """Fire the approval (``approve=True``) or denial event, payload ``{approver, comment}``.

        ``actor`` (default: the approver) is who the log records as firing it, e.g. the
        service that relayed the decision. Without ``expected_version`` the decision applies
        to the workflow as read first.
        """
        payload = decision_payload(approver, comment)
        row = await self.get(workflow_id)
        wtype = self.type_of(row.type, row.machine_version)
        return await self.send(
            workflow_id,
            wtype.approve_event if approve else wtype.deny_event,
            payload,
            actor=actor or approver,
            expected_version=row.version if expected_version is None else expected_version,
        )

    async def cancel(self, workflow_id: str, *, reason: str, actor: str = "system") -> WorkflowRow:
        """Cancel a workflow: fire its type's ``cancel_event`` with ``{"reason": reason}``.

        When no worker holds the workflow the event fires at once (IllegalTransition if the
        current state has no edge for it). When a worker holds it, the request is recorded
        (``cancel_requested`` on the returned row, still in its state) and the worker delivers
        it to the running handler, which may save partial results; the worker then fires the
        event as ``actor``.

        Raises:
            WorkflowNotFound, IllegalTransition, InvalidPayload, InvalidInput, StoreError.
        """
        return await cancel_workflow(self, workflow_id, reason, actor)

    async def post_input(self, workflow_id: str, name: str, payload: Mapping[str, Any]) -> int:
        """Post an external input into a workflow's inbox; returns its id."""
        if not isinstance(payload, Mapping):
            raise InvalidInput("input payload must be a JSON object")
        item = await self.store.post_input(workflow_id, name, dict(payload), self.clock.now())
        return item.id

    # -- queries -------------------------------------------------------------------------------

    async def history(self, workflow_id: str) -> list[TransitionRecord]:
        await self.get(workflow_id)
        return await self.store.history(workflow_id)

    async def allowed_events(self, workflow_id: str) -> list[str]:
        row = await self.get(workflow_id)
        machine = self.type_of(row.type, row.machine_version).machine
        return machine.allowed_events(row.state, row.context)

    async def list_workflows(self, where: WorkflowFilter | None = None) -> list[WorkflowRow]:
        return await self.store.list_workflows(where or WorkflowFilter())

    def stuck_threshold(self, state: State) -> float:
        """Seconds in ``state`` after which a workflow counts as stuck."""
        return state.stuck_after or self.default_stuck_after

    def is_stuck(self, row: WorkflowRow, now: float | None = None) -> bool:
        if row.terminal:
            return False
        now = self.clock.now() if now is None else now
        state = self.type_of(row.type, row.machine_version).machine.states[row.state]
        return now - row.state_entered_at > self.stuck_threshold(state)

    async def stuck(self, now: float | None = None, tenant: str | None = None) -> list[Stuck]:
        """Non-terminal workflows older in their state than its ``stuck_after`` threshold."""
        now = self.clock.now() if now is None else now
        found: list[Stuck] = []
        for wtype in self.types:
            for state in wtype.machine.states.values():
                if state.terminal:
                    continue
                threshold = self.stuck_threshold(state)
                rows = await self.store.list_workflows(
                    WorkflowFilter(
                        type=wtype.name,
                        state=state.name,
                        entered_before=now - threshold,
                        tenant=tenant,
                        limit=1000,
                    )
                )
                found += [Stuck(r, now - r.state_entered_at, threshold) for r in rows]
        return sorted(found, key=lambda s: -s.age)

    async def replay(self, workflow_id: str) -> Replayed:
        """Rebuild state, version and context from the log alone, checking every step."""
        row = await self.get(workflow_id)
        machine = self.type_of(row.type, row.machine_version).machine
        state: str | None = None
        context: JSON = {}
        version = 0
        for rec in await self.store.history(workflow_id):
            problem = _replay_problem(machine, rec, state, version)
            if problem:
                raise ReplayMismatch(f"workflow {workflow_id!r} v{rec.version}: {problem}")
            if rec.context_patch is not None:
                context = (
                    dict(rec.context_patch)
                    if rec.from_state is None
                    else {**context, **rec.context_patch}
                )
            state, version = rec.to_state, rec.version
        return Replayed(state, version, context)

    async def check(self, workflow_id: str) -> Replayed:
        """Compare replay with the stored row; raises :class:`ReplayMismatch` if they differ."""
        replayed = await self.replay(workflow_id)
        row = await self.get(workflow_id)
        stored = Replayed(row.state, row.version, row.context)
        if replayed != stored:
            raise ReplayMismatch(
                f"workflow {workflow_id!r}: replay gives {replayed} but the row holds {stored}",
                workflow_id=workflow_id,
            )
        return replayed

    # -- the one way a state changes -----------------------------------------------------------

    async def _fire(
        self,
        row: WorkflowRow,
        event: str,
        payload: Mapping[str, Any],
        actor: str,
        **options: Any,
    ) -> WorkflowRow:
        """Fire ``event`` on ``row`` as read (compare-and-swap on its version)."""
        try:
            write = self._plan(row, event, payload, actor, **options)
            after = await self.store.apply_transition(write)
        except (IllegalTransition, InvalidPayload, VersionConflict) as exc:
            await self._rejected(row.id, row, event, exc, actor)
            raise
        except StoreError as exc:
            self.observers.persistence_failed(row.id, event, exc)
            raise
        self.observers.transitioned(TransitionEvent(row, after, event, actor))
        retry_delay = options.get("retry_delay")
        if retry_delay is not None and not after.terminal:
            # A transient failure moved it to a waiting state with a retry timer (a terminal
            # target means the budget was spent: no retry).
            self.observers.retried(row, after, retry_delay)
        return after

    async def _rejected(
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

    def _plan(
        self,
        row: WorkflowRow,
        event: str,
        payload: Mapping[str, Any],
        actor: str,
        *,
        context_patch: Mapping[str, Any] | None = None,
        attempts: int | None = None,
        fired_timer: int | None = None,
        retry_delay: float | None = None,
        last_error: str | None = None,
        release_lease: bool = True,
    ) -> TransitionWrite:
        """Resolve ``event`` on ``row`` and build the write. Pure but for the clock: no I/O.

        Raises IllegalTransition (naming the workflow) or InvalidPayload.
        """
        wtype = self.type_of(row.type, row.machine_version)
        machine = wtype.machine
        if not isinstance(payload, Mapping):
            raise InvalidPayload(event, f"expected a JSON object, got {type(payload).__name__}")
        try:
            t = machine.resolve(row.state, event, row.context, payload)
        except IllegalTransition as exc:
            raise IllegalTransition(
                exc.state, exc.event, exc.allowed, exc.reason, row.id
            ) from None
        now = self.clock.now()
        target = machine.states[t.target]
        staying = t.target == row.state
        # A self-transition is internal (XState-style): the state's timers keep running.
        timers = () if staying else self._state_timers(target, now)
        run_at = self._run_at(wtype, target, now)
        if retry_delay is not None:
            if run_at is not None:
                run_at = now + retry_delay  # the handler itself is retried later
            elif not target.terminal and machine.can(t.target, wtype.retry_event):
                timers += (TimerSpec(now + retry_delay, wtype.retry_event),)
        return TransitionWrite(
            workflow_id=row.id,
            expected_version=row.version,
            from_state=row.state,
            to_state=t.target,
            event=event,
            payload=payload,
            actor=actor,
            at=now,
            context={**row.context, **context_patch} if context_patch else row.context,
            context_patch=context_patch,
            terminal=target.terminal,
            attempts=row.attempts if attempts is None else attempts,
            run_at=run_at,
            # next_due_at IS NULL means no pending timers (the store keeps it so): nothing
            # to delete then, which spares externally driven workflows a statement.
            clear_timers=not staying and row.next_due_at is not None,
            fired_timer_id=fired_timer,
            add_timers=timers,
            release_lease=release_lease,
            last_error=last_error,
        )

    @staticmethod
    def _run_at(wtype: WorkflowType, state: State, now: float) -> float | None:
        return now if state.name in wtype.handlers and not state.terminal else None

    @staticmethod
    def _state_timers(state: State, now: float) -> tuple[TimerSpec, ...]:
        return tuple(TimerSpec(now + secs, ev) for secs, ev in sorted(state.after.items()))


def decision_payload(approver: str, comment: str | None) -> dict[str, Any]:
    """The payload of an approval or denial: ``{approver, comment?}``."""
    if not isinstance(approver, str) or not approver.strip():
        raise InvalidInput("an approval needs the approver's name")
    return {"approver": approver} | ({"comment": comment} if comment else {})


def _replay_problem(
    machine: Machine, rec: TransitionRecord, state: str | None, version: int
) -> str | None:
    if rec.version != version + 1:
        return f"expected version {version + 1}, log has {rec.version} (gap or duplicate)"
    if rec.from_state != state:
        return f"log says from {rec.from_state!r} but replay is in {state!r}"
    if rec.from_state is None:
        return None if rec.to_state == machine.initial.name else "does not start in initial"
    if not any(t.target == rec.to_state for t in machine.transitions_from(state or "", rec.event)):
        return f"no edge {state!r} --{rec.event}--> {rec.to_state!r} in the machine"
    return None


__all__ = ["Engine", "Replayed", "StatewrightError", "Stuck"]
