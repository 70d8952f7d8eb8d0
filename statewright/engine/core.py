"""The engine: start workflows, fire events, post inputs, replay the log.

Every state change goes through :class:`~statewright.engine.transitions.Transitions`: resolve
the transition on the machine (pure), build one write, and let the store apply it atomically
(compare-and-swap on the version, and on the lease for a worker's write).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import itertools
import logging
import os
import random
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from statewright import ids
from statewright.clock import Clock, SystemClock
from statewright.definition.machine import Machine, State
from statewright.engine import parked as parking
from statewright.engine import schedules as schedule_ops
from statewright.engine import timers as timer_ops
from statewright.engine.cancel import cancel as cancel_workflow
from statewright.engine.hooks import Observers, TransitionEvent
from statewright.engine.tracecontext import capture as capture_trace
from statewright.engine.transitions import (
    CONTEXT_EVENT,
    MIGRATE_EVENT,
    MOVE_EVENT,
    RESUME_EVENT,
    Dispatched,
    Fire,
    Transitions,
    run_at_for,
    same_json,
    state_timers,
)
from statewright.engine.workflow_type import Applied, NotApplied, WorkflowType
from statewright.errors import (
    DefinitionChanged,
    IdempotencyKeyReused,
    InvalidInput,
    ReplayMismatch,
    StatewrightError,
    StepsWouldRerun,
    StepUnresolved,
    UnknownState,
    UnknownWorkflowType,
    VersionConflict,
    VersionNotFound,
    WorkflowBusy,
    WorkflowExists,
    WorkflowFinished,
    WorkflowNotFound,
    WorkflowPruned,
)
from statewright.jsonvalue import Limits
from statewright.store.protocol import FullStore as Store
from statewright.store.protocol import fork_source_busy
from statewright.types import (
    JSON,
    InboxItem,
    NewWorkflow,
    ScheduleRecord,
    StepRecord,
    StuckCutoff,
    StuckKey,
    TimerRecord,
    TransitionRecord,
    WorkflowFilter,
    WorkflowRow,
)

if TYPE_CHECKING:
    from statewright.engine.retention import ImportReport, PruneReport

log = logging.getLogger(__name__)

_EVENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]{0,99}$")
_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")
"""An idempotency key: 1-255 printable ASCII characters, no spaces (like an HTTP token)."""


def check_idempotency_key(key: str | None) -> str | None:
    """``key`` if it is a valid idempotency key (or None); InvalidInput otherwise."""
    if key is not None and (not isinstance(key, str) or not _KEY.fullmatch(key)):
        raise InvalidInput(
            f"invalid idempotency key {key!r}: 1-255 printable ASCII characters, no spaces"
        )
    return key


@dataclass(frozen=True)
class Replayed:
    """A workflow as rebuilt from its transition log alone."""

    state: str | None
    version: int
    context: JSON


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


@dataclass(frozen=True)
class Migration:
    """What :meth:`Engine.migrate` did (or, with ``dry_run``, would do)."""

    plan: list[tuple[str, str, str]]
    """``(workflow id, state on the old version, state on the new)`` for each live workflow."""
    moved: list[str]
    busy: list[str]
    """Held by a worker at that moment: not moved (migrate again later)."""
    dry_run: bool = False


class Engine:
    """Runs workflows of registered types on a store.

    Args:
        store: where everything is persisted (opened by :meth:`open` / ``async with``).
        types: workflow types to register.
        clock: time source; inject :class:`~statewright.clock.ManualClock` in tests.
        default_stuck_after: threshold for states that declare no ``stuck_after``.
        row_cache_size: recently seen rows kept to plan external events on without a read
            (a stale one costs a refused write and a re-read; 0 disables it).
        limits: the input policy: how deep and how large one JSON value (an input, payload,
            context patch, inbox payload, step result or progress report) may be; checked
            before anything is stored (:class:`~statewright.jsonvalue.Limits`, default 64
            levels and 256 KiB).
    """

    def __init__(
        self,
        store: Store,
        types: Iterable[WorkflowType | Machine] = (),
        *,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        default_stuck_after: float = 86400.0,
        row_cache_size: int = 4096,
        limits: Limits | None = None,
        allow_compatible_changes: bool = False,
    ) -> None:
        self.store = store
        self.allow_compatible_changes = allow_compatible_changes
        self.limits = Limits() if limits is None else limits
        self.clock: Clock = clock or SystemClock()
        self.rng = rng or random.Random()
        self.default_stuck_after = default_stuck_after
        self.observers = Observers()
        self.transitions = Transitions(self, row_cache_size)
        """The one way a workflow's row changes (used by the worker, cancel and recovery)."""
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
        """Open the store, then check every registered machine version against the definition
        the store recorded for it (recording it the first time): a version whose definition
        changed is refused with :class:`DefinitionChanged` naming the machine, unless the
        change only adds and ``allow_compatible_changes`` is set (then the new one is
        recorded)."""
        await self.store.open()
        try:
            await self._check_definitions()
        except BaseException:
            await self.store.close()
            raise

    async def _check_definitions(self) -> None:
        from statewright.definition.fingerprint import (
            canonical_document,
            fingerprint_of,
            only_additions,
        )

        now = self.clock.now()
        for versions in self._types.values():
            for wtype in versions.values():
                machine = wtype.machine
                document = canonical_document(machine)
                mine = fingerprint_of(document)
                recorded, before = await self.store.record_definition(
                    machine.name, machine.version, mine, document, now
                )
                if recorded == mine:
                    continue
                changes = only_additions(before, document)
                if changes or not self.allow_compatible_changes:
                    raise DefinitionChanged(
                        machine.name, machine.version, changes or ["it only adds"]
                    )
                await self.store.record_definition(
                    machine.name, machine.version, mine, document, now, replace=True
                )
                log.warning(
                    "machine definition extended in place",
                    extra={
                        "action": "definition_extended",
                        "machine": machine.name,
                        "version": machine.version,
                    },
                )

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
        idempotency_key: str | None = None,
    ) -> WorkflowRow:
        """Start a workflow in the machine's initial state; ``input`` becomes its context.

        With a caller-chosen ``workflow_id`` start is idempotent: starting an existing id of
        the same type (and tenant) returns the existing workflow unchanged. With an
        ``idempotency_key`` and no id, the id is derived from the tenant and the key
        (:func:`id_for_key`), so a retried start creates nothing new; either way the key
        must come with the same type and input as the first time (IdempotencyKeyReused).
        That holds after the workflow is pruned too: a start of a pruned workflow's id (or
        key) raises :class:`WorkflowPruned`, until ``prune(pruned_ids_older_than=)`` forgets
        it; it never creates a workflow that would run the same steps under the same keys.

        The id is the store's key as given: a trusted caller of the Python API names ids
        across tenants. ``Access`` (HTTP, MCP) scopes ids per tenant by qualifying them,
        ``acme:order-1`` (:mod:`statewright.ids`); such an id must name ``tenant``.
        """
        row, _ = await self.create(
            workflow_type,
            input,
            workflow_id=workflow_id,
            actor=actor,
            tenant=tenant,
            idempotency_key=idempotency_key,
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
        idempotency_key: str | None = None,
    ) -> tuple[WorkflowRow, bool]:
        """:meth:`start`, also telling whether this call created the workflow."""
        wtype = self.type_of(workflow_type)
        if input is not None and not isinstance(input, Mapping):
            raise InvalidInput(f"input must be a JSON object, got {type(input).__name__}")
        self.limits.check(dict(input or {}), "input")
        check_idempotency_key(idempotency_key)
        ids.check_id(tenant, "tenant")
        if workflow_id is None and idempotency_key is not None:
            workflow_id = id_for_key(tenant, idempotency_key)
        if workflow_id is None:
            workflow_id = uuid.uuid4().hex
        else:
            # A bare id, or one qualified by this tenant (statewright.ids).
            ids.check_ref(workflow_id, tenant)
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
            run_at=run_at_for(wtype, initial, now),
            timers=state_timers(initial, now),
            tenant=tenant,
            idempotency_key=idempotency_key,
            trace=capture_trace(),  # the caller's span, if any: the worker's spans join it
        )
        try:
            row, created = await self.store.create_workflow(new)
        except WorkflowPruned as exc:
            if idempotency_key is None:
                raise
            raise WorkflowPruned(exc.workflow_id, idempotency_key) from None
        self.transitions.rows.put(row)
        if row.type != wtype.name or row.tenant != tenant:
            # Another tenant's id must not leak its type: report it as taken, nothing more.
            theirs = row.type if row.tenant == tenant else "another tenant's workflow"
            raise WorkflowExists(workflow_id, theirs, wtype.name)
        if not created and idempotency_key is not None:
            [first] = await self.store.history(workflow_id, limit=1)
            if not same_json(first.payload, dict(new.context)):
                raise IdempotencyKeyReused(
                    workflow_id, idempotency_key, "a start with another input"
                )
        if created:
            self.observers.transitioned(TransitionEvent(None, row, "$start", actor))
        return row, created

    async def get(self, workflow_id: str) -> WorkflowRow:
        row = await self.store.get_workflow(workflow_id)
        if row is None:
            raise WorkflowNotFound(workflow_id)
        self.transitions.rows.put(row)
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
        idempotency_key: str | None = None,
        if_allowed: bool = False,
    ) -> WorkflowRow:
        """Fire ``event`` on a workflow; returns the row after the transition.

        With ``idempotency_key``, a retry of a send already applied (same key, event and
        payload) applies nothing and returns the workflow as it is now; use it whenever a
        send may be retried after an ambiguous failure (:class:`OutcomeUnknown`).

        With ``if_allowed``, an event the workflow's state does not allow *now* (no edge from
        it, a terminal state, no guard passed; confirmed on a fresh read) returns the row
        unchanged instead of raising IllegalTransition: for late webhooks and duplicate
        callbacks. It is counted (``statewright_events_not_applied``) and logged, not
        recorded as a rejected transition. An unknown event, an invalid payload, a version
        conflict or an unknown workflow still raise. :meth:`dispatch` tells which it was.

        Raises:
            WorkflowNotFound, IllegalTransition, InvalidPayload, VersionConflict (the row
            moved since ``expected_version``), IdempotencyKeyReused (the key was used for
            another event or payload), OutcomeUnknown (the connection broke after the write
            left: retry with the same key), StoreError (nothing was changed).
        """
        sent = await self.dispatch(
            workflow_id,
            event,
            payload,
            actor=actor,
            expected_version=expected_version,
            context=context,
            idempotency_key=idempotency_key,
            if_allowed=if_allowed,
        )
        return sent.row

    async def dispatch(
        self,
        workflow_id: str,
        event: str,
        payload: Mapping[str, Any] | None = None,
        *,
        actor: str = "system",
        expected_version: int | None = None,
        context: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        row: WorkflowRow | None = None,
        if_allowed: bool = False,
    ) -> Dispatched:
        """:meth:`send`, telling also whether it was an idempotent retry (``replayed``) and,
        with ``if_allowed``, whether it was applied (``applied``; if not, ``refusal`` says
        why: its ``reason``, ``state`` and ``allowed`` events).

        ``row``: a fresh read of the workflow the caller already made (saves a read).
        """
        if not isinstance(event, str) or not _EVENT.fullmatch(event):
            raise InvalidInput(f"invalid event name {event!r}")
        if context is not None and not isinstance(context, Mapping):
            raise InvalidInput("context must be a JSON object")
        fire = Fire(
            event,
            {} if payload is None else payload,
            actor,
            context_patch=context,
            release_lease=False,
            idempotency_key=check_idempotency_key(idempotency_key),
            if_allowed=if_allowed,
        )
        return await self.transitions.send(
            workflow_id, fire, expected_version=expected_version, row=row
        )

    async def approve(
        self,
        workflow_id: str,
        approver: str,
        comment: str | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> WorkflowRow:
        """Fire the type's approval event with the approver as actor."""
        return await self.decide(
            workflow_id, True, approver=approver, comment=comment, idempotency_key=idempotency_key
        )

    async def deny(
        self,
        workflow_id: str,
        approver: str,
        comment: str | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> WorkflowRow:
        """Fire the type's denial event with the approver as actor."""
        return await self.decide(
            workflow_id, False, approver=approver, comment=comment, idempotency_key=idempotency_key
        )

    async def decide(
        self,
        workflow_id: str,
        approve: bool,
        *,
        approver: str,
        comment: str | None = None,
        actor: str | None = None,
        expected_version: int | None = None,
        idempotency_key: str | None = None,
        row: WorkflowRow | None = None,
    ) -> WorkflowRow:
        """Fire the approval (``approve=True``) or denial event, payload ``{approver, comment}``.

        ``actor`` (default: the approver) is who the log records as firing it, e.g. the
        service that relayed the decision. Without ``expected_version`` the decision applies
        to the workflow as read first (``row``, when the caller has just read it).
        """
        return (
            await self.decide_ex(
                workflow_id,
                approve,
                approver=approver,
                comment=comment,
                actor=actor,
                expected_version=expected_version,
                idempotency_key=idempotency_key,
                row=row,
            )
        ).row

    async def decide_ex(
        self,
        workflow_id: str,
        approve: bool,
        *,
        approver: str,
        comment: str | None = None,
        actor: str | None = None,
        expected_version: int | None = None,
        idempotency_key: str | None = None,
        row: WorkflowRow | None = None,
    ) -> Dispatched:
        """:meth:`decide`, telling also whether it was an idempotent retry."""
        payload = decision_payload(approver, comment)
        if row is None:
            row = await self.get(workflow_id)
        wtype = self.type_of(row.type, row.machine_version)
        # With a key, a retry whose first attempt moved the version still replays: the key
        # is looked up before the version is compared.
        return await self.dispatch(
            workflow_id,
            wtype.approve_event if approve else wtype.deny_event,
            payload,
            actor=actor or approver,
            expected_version=row.version if expected_version is None else expected_version,
            idempotency_key=idempotency_key,
            row=row,
        )

    async def cancel(
        self,
        workflow_id: str,
        *,
        reason: str,
        actor: str = "system",
        idempotency_key: str | None = None,
    ) -> WorkflowRow:
        """Cancel a workflow: fire its type's ``cancel_event`` with ``{"reason": reason}``.

        When no worker holds the workflow the event fires at once (IllegalTransition if the
        current state has no edge for it). When a worker holds it, the request is recorded
        (``cancel`` on the returned row, still in its state) and the worker delivers it to
        the running handler, which may save partial results; the worker then fires the event
        as ``actor`` (carrying ``idempotency_key``).

        Raises:
            WorkflowNotFound, IllegalTransition, InvalidPayload, InvalidInput,
            IdempotencyKeyReused, StoreError.
        """
        cancelled = await self.cancel_ex(
            workflow_id, reason=reason, actor=actor, idempotency_key=idempotency_key
        )
        return cancelled.row

    async def cancel_ex(
        self,
        workflow_id: str,
        *,
        reason: str,
        actor: str = "system",
        idempotency_key: str | None = None,
        expected_version: int | None = None,
        if_allowed: bool = False,
    ) -> Dispatched:
        """:meth:`cancel`, telling also whether it was an idempotent retry (``replayed``:
        the key's cancel fired already, or is pending with the worker). With
        ``expected_version``, refused (VersionConflict) unless the workflow is still at it,
        or the key's cancel was made already. With ``if_allowed``, a state that does not
        allow the cancel now (finished, no edge) is no error: ``applied`` False and
        ``refusal`` says why, nothing changed, as for :meth:`dispatch`."""
        return await cancel_workflow(
            self,
            workflow_id,
            reason,
            actor,
            check_idempotency_key(idempotency_key),
            expected_version,
            if_allowed,
        )

    async def post_input(
        self,
        workflow_id: str,
        name: str,
        payload: Mapping[str, Any],
        *,
        idempotency_key: str | None = None,
    ) -> int:
        """Post an external input into a workflow's inbox; returns its id.

        A handler takes it with ``run.wait_input`` / ``run.next_input``; it is consumed by
        the transition that ends that handler run (a crash before it delivers it again). A
        workflow idle in a state with a handler is made due, so its handler runs now.

        Raises WorkflowNotFound, WorkflowFinished (a terminal workflow takes no inputs),
        InvalidInput, IdempotencyKeyReused.
        """
        item, _ = await self.put_input(workflow_id, name, payload, idempotency_key=idempotency_key)
        return item.id

    async def put_input(
        self,
        workflow_id: str,
        name: str,
        payload: Mapping[str, Any],
        *,
        idempotency_key: str | None = None,
        row: WorkflowRow | None = None,
    ) -> tuple[InboxItem, bool]:
        """:meth:`post_input`, returning ``(item, created)``: ``created`` is False for a retry
        with an idempotency key already used for the same name and payload."""
        if not isinstance(name, str) or not _EVENT.fullmatch(name):
            raise InvalidInput(f"invalid input name {name!r}")
        if not isinstance(payload, Mapping):
            raise InvalidInput("input payload must be a JSON object")
        self.limits.check(dict(payload), f"payload of input {name!r}")
        check_idempotency_key(idempotency_key)
        if row is None:
            row = await self.get(workflow_id)
        # Woken where the state may have a handler: decided like a transition's due time
        # (WorkflowType.has_work), so a process without the handlers wakes it too.
        wake: str | None = None
        if not row.terminal:
            try:
                known = self.type_of(row.type, row.machine_version).has_work(row.state)
            except UnknownWorkflowType:
                known = True  # another deployment's type: its workers decide
            wake = row.state if known else None
        item, created = await self.store.post_input(
            workflow_id,
            name,
            dict(payload),
            self.clock.now(),
            idempotency_key=idempotency_key,
            wake_in_state=wake,
        )
        if not created and (item.name != name or not same_json(item.payload, dict(payload))):
            raise IdempotencyKeyReused(
                workflow_id, idempotency_key or "", f"input {item.name!r} #{item.id}"
            )
        return item, created

    async def resolve_step(
        self,
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
        row = await self.get(workflow_id)
        key = f"{workflow_id}:{step}"
        note = f"resolved by {actor}: {reason}"[:1000]
        now = self.clock.now()
        if isinstance(verdict, Applied):
            self.limits.check(verdict.result, f"result of step {step!r}")
            rec = await self.store.resolve_step(key, "done", verdict.result, None, note, now)
        elif isinstance(verdict, NotApplied):
            rec = await self.store.resolve_step(key, "failed", None, "not_applied", note, now)
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
                await self.resume(workflow_id, actor=actor, reason=f"step {step!r} resolved")
        return rec

    async def resume(
        self,
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
        _check_reason(reason, "resuming a workflow")
        row = await self.get(workflow_id)
        if row.terminal:
            raise WorkflowFinished(workflow_id, row.state)
        if row.lease_owner is not None:
            raise WorkflowBusy(f"a worker holds workflow {workflow_id!r}: nothing to resume")
        if not reconcile:
            try:
                await parking.check_resumable(self.store, row)
            except StepUnresolved:
                # A retry of a resume applied earlier (the key is in the log) is its replay.
                key = check_idempotency_key(idempotency_key)
                if key is None or await self.store.transition_by_key(row.id, key) is None:
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
            sent = await self.transitions.send(workflow_id, fire, row=row)
        except VersionConflict:
            fresh = await self.get(workflow_id)
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
        self,
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
        _check_reason(reason, "moving a workflow")
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
        sent = await self.transitions.send(workflow_id, fire, expected_version=expected_version)
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

    async def schedule(
        self,
        workflow_id: str,
        event: str,
        *,
        after: float | None = None,
        at: float | None = None,
        payload: Mapping[str, Any] | None = None,
        key: str | None = None,
        keep: bool = False,
        actor: str | None = None,
    ) -> TimerRecord:
        """Arm a durable timer on one workflow: fire ``event`` (with ``payload``) ``after``
        seconds from now or ``at`` an epoch time (exactly one of them).

        ``actor``: who schedules it, kept with the timer (``scheduled_by``); the transition
        it makes when it fires is logged with the actor ``timer for <actor>``. None (the
        default): a timer of the system's, logged as ``timer``. (The engine trusts its
        caller; :meth:`Access.schedule <statewright.access.Access.schedule>` first checks that
        the caller may fire ``event`` itself.)

        ``key`` (default: the event's name) names it: scheduling the same key again replaces
        the pending timer (extend a deadline; a retried call changes nothing more). It belongs
        to the workflow's current visit of its state: leaving the state clears it, unless
        ``keep`` (then only reaching a terminal state does). Scheduling does not change the
        workflow's version (a running handler's result still applies), and is atomic with the
        check that the workflow is still in the visit it was read in: a timer never survives
        into a state it was not meant for (a transition racing it moves it to the new visit,
        where it is checked again). At firing time it is a timer like the state's own: a
        refused event fails the workflow, as for ``after`` timers.

        Raises WorkflowNotFound, WorkflowFinished (terminal), IllegalTransition (the event is
        not declared, or a timer that is not kept has no edge out of the current state),
        InvalidPayload, InvalidInput (ValueTooDeep, ValueTooLarge; not exactly one of
        ``after``/``at``; a bad key), VersionConflict (the workflow kept moving).
        """
        return await timer_ops.schedule(
            self,
            workflow_id,
            event,
            after=after,
            at=at,
            payload=payload,
            key=key,
            keep=keep,
            actor=actor,
        )

    async def cancel_timer(self, workflow_id: str, key: str, *, actor: str = "system") -> bool:
        """Delete a workflow's pending timer by its key; True if there was one (it never
        fires). Raises WorkflowNotFound, InvalidInput (a bad key)."""
        return await timer_ops.cancel(self, workflow_id, key, actor=actor)

    async def timers(self, workflow_id: str) -> list[TimerRecord]:
        """A workflow's pending timers (the state's own and scheduled ones), earliest first.
        Raises WorkflowNotFound."""
        return await timer_ops.listing(self, workflow_id)

    # -- schedules (statewright.engine.schedules) ---------------------------------------------

    async def schedule_start(
        self,
        workflow_type: str,
        cron: str,
        input: Mapping[str, Any] | None = None,
        *,
        schedule_id: str,
        catch_up: str = "latest",
        timezone: str = "UTC",
        tenant: str = "default",
        paused: bool = False,
        actor: str | None = None,
    ) -> ScheduleRecord:
        """Start a workflow of ``workflow_type`` with ``input`` at every tick of ``cron`` (five
        fields, or ``@daily``, ``@hourly``...) in ``timezone``; workers fire the ticks, one
        workflow per tick however many run (its id: ``<schedule_id>.<UTC tick>``).

        ``actor``: who declares it, kept as the schedule's ``created_by``; the workflows its
        ticks start are logged as started by ``schedule:<schedule_id> for <actor>`` (by
        ``schedule:<schedule_id>`` without one). The engine trusts its caller; the HTTP
        surface first checks that the caller may start the type in the tenant.

        Declaring a schedule again as it is changes nothing; with another definition it
        replaces it (its next tick counted from now). ``catch_up``: ``latest`` (default: of
        the ticks missed while no worker ran, start the latest only), ``all`` or ``skip``
        (:data:`~statewright.engine.schedules.CatchUp`).

        Raises UnknownWorkflowType, InvalidSchedule (cron, zone, policy or id), InvalidInput
        (an input a start would refuse).
        """
        return await schedule_ops.put(
            self,
            workflow_type,
            cron,
            input,
            schedule_id=schedule_id,
            catch_up=catch_up,
            timezone=timezone,
            tenant=tenant,
            paused=paused,
            actor=actor,
        )

    async def schedules(
        self, tenant: str | None = None, *, after: str | None = None, limit: int | None = None
    ) -> list[ScheduleRecord]:
        """The schedules (of one tenant when given), by id: after the id ``after``, at most
        ``limit`` (default: all)."""
        return await self.store.list_schedules(tenant, after=after, limit=limit)

    async def get_schedule(self, schedule_id: str) -> ScheduleRecord:
        """One schedule; raises ScheduleNotFound."""
        return await schedule_ops.get(self, schedule_id)

    async def unschedule(self, schedule_id: str) -> None:
        """Remove a schedule (the workflows it started stay); raises ScheduleNotFound."""
        await schedule_ops.remove(self, schedule_id)

    async def pause_schedule(self, schedule_id: str) -> ScheduleRecord:
        """Stop a schedule's ticks until :meth:`resume_schedule`; raises ScheduleNotFound."""
        return await schedule_ops.set_paused(self, schedule_id, True)

    async def resume_schedule(self, schedule_id: str) -> ScheduleRecord:
        """Resume a paused schedule from its first tick after now (the paused ticks are not
        caught up); raises ScheduleNotFound."""
        return await schedule_ops.set_paused(self, schedule_id, False)

    async def fire_schedules(self, now: float | None = None) -> list[str]:
        """Start the workflows of the due ticks (workers do this); returns the ids created."""
        return await schedule_ops.fire_due(self, now)

    async def fork(
        self,
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
        _check_reason(reason, "forking a workflow")
        if not isinstance(rerun_steps, bool):
            raise InvalidInput("rerun_steps must be true or false")
        source = await self.get(workflow_id)
        at = source.version if version is None else version
        if isinstance(at, bool) or not isinstance(at, int):
            raise InvalidInput(f"version must be an integer, got {version!r}")
        if not 1 <= at <= source.version:
            raise VersionNotFound(
                f"workflow {workflow_id!r} has versions 1..{source.version}, not {at}",
                version=at,
            )
        records = await self.store.history(workflow_id, 0, at + 1)
        state, context, fork_version = self._replay_log(source, records[:at])
        wtype = self.type_of(source.type, fork_version)
        machine = wtype.machine
        fork_id = ids.check_ref(new_id or ids.fork_id(workflow_id, at), source.tenant)
        payload: dict[str, Any] = {"forked_from": workflow_id, "version": at, "reason": reason}
        existing = await self._existing_fork(fork_id, payload)
        if existing is not None:
            return existing  # a retry
        if source.lease_owner is not None:
            raise WorkflowBusy(fork_source_busy(workflow_id))
        now = self.clock.now()
        steps = await self.store.steps(workflow_id)
        unknown = [s.step for s in steps if _outcome_unknown(s)]
        if unknown:
            raise StepUnresolved(workflow_id, unknown, action="fork")
        # The steps done while the workflow was at that version: before the next transition
        # (for the latest version: all done so far). Those done later would run again.
        cutoff = records[at].at if len(records) > at else now
        copied = tuple(
            dataclasses.replace(step, key=f"{fork_id}:{step.step}", workflow_id=fork_id)
            for step in steps
            if step.status == "done"
            and step.finished_at is not None
            and step.finished_at <= cutoff
        )
        kept = {step.step for step in copied}
        rerun = [s.step for s in steps if s.status == "done" and s.step not in kept]
        if rerun and not rerun_steps:
            raise StepsWouldRerun(workflow_id, at, rerun)
        if rerun:
            payload["rerun_steps"] = rerun
        target = machine.states[state]
        row, created = await self.store.create_workflow(
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
                timers=() if target.terminal else state_timers(target, now),
                tenant=source.tenant,
                event=FORK_EVENT,
                payload=payload,
                steps=copied,
                trace=capture_trace(),
                fork_of=(workflow_id, source.fence),
            )
        )
        if not created:
            existing = await self._existing_fork(fork_id, payload)
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
        self.transitions.rows.put(row)
        self.observers.transitioned(TransitionEvent(None, row, FORK_EVENT, actor))
        return row

    async def _existing_fork(self, fork_id: str, payload: Mapping[str, Any]) -> WorkflowRow | None:
        """The workflow ``fork_id`` if it is this fork (a retry: its ``$fork`` entry names the
        same source, version and reason); None if there is none; WorkflowExists if the id is
        taken by something else."""
        row = await self.store.get_workflow(fork_id)
        if row is None:
            return None
        first = (await self.store.history(fork_id, 0, 1))[:1]
        if (
            not first
            or first[0].event != FORK_EVENT
            or not all(same_json(first[0].payload.get(k), v) for k, v in payload.items())
        ):
            raise WorkflowExists(
                fork_id, row.type, f"a fork of {payload['forked_from']} v{payload['version']}"
            )
        return row

    async def migrate(
        self,
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
        _check_reason(reason, "a migration")
        mapping = dict(state_map or {})
        if from_version == to_version:
            raise InvalidInput("from_version and to_version are the same")
        target = self.type_of(workflow_type, to_version).machine
        source = self._known_machine(workflow_type, from_version)
        rows: list[WorkflowRow] = []
        for name, state, _ in await self.store.count_by_state(terminal=False):
            if name != workflow_type:
                continue
            after: tuple[float, str] | None = None
            while True:
                page = await self.store.list_workflows(
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
                await self.transitions.send(wid, fire)
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
        self,
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
        _check_reason(reason, "a context patch")
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
        sent = await self.transitions.send(workflow_id, fire, expected_version=expected_version)
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

    # -- queries -------------------------------------------------------------------------------

    async def history(
        self, workflow_id: str, after_version: int = 0, limit: int | None = None
    ) -> list[TransitionRecord]:
        """The workflow's log in version order (after ``after_version``, at most ``limit``)."""
        await self.get(workflow_id)
        return await self.store.history(workflow_id, after_version, limit)

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
        """Whether ``row`` is stuck: parked for an operator (from the moment it parks), or in
        a non-terminal state past the state's threshold."""
        if row.terminal:
            return False
        if row.parked is not None:
            return True
        now = self.clock.now() if now is None else now
        try:
            state = self.type_of(row.type, row.machine_version).machine.states.get(row.state)
        except UnknownWorkflowType:
            state = None
        if state is None:  # a version or state this engine does not have: the default
            return now - row.state_entered_at > self.default_stuck_after
        return now - row.state_entered_at > self.stuck_threshold(state)

    def _stuck_rules(self) -> dict[tuple[str, str], tuple[float | None, dict[int, float | None]]]:
        """Per ``(type, state)``: each registered version's threshold for the state (None: it
        is terminal there, never stuck), and the threshold of the versions without one of
        their own (that of the highest registered version that has the state)."""
        rules: dict[tuple[str, str], tuple[float | None, dict[int, float | None]]] = {}
        for name, versions in self._types.items():
            for state_name in {s for t in versions.values() for s in t.machine.states}:
                per_version: dict[int, float | None] = {}
                for version, wtype in versions.items():
                    state = wtype.machine.states.get(state_name)
                    if state is not None:
                        per_version[version] = (
                            None if state.terminal else self.stuck_threshold(state)
                        )
                rules[(name, state_name)] = (per_version[max(per_version)], per_version)
        return rules

    def stuck_cutoffs(self, now: float | None = None) -> list[StuckCutoff]:
        """What the store needs to find the workflows stuck at ``now``: per type and state,
        one cutoff, plus one per registered version whose definition gives the state another
        threshold."""
        now = self.clock.now() if now is None else now
        out: list[StuckCutoff] = []
        for (name, state), (default, per_version) in sorted(self._stuck_rules().items()):
            own = {v: t for v, t in per_version.items() if t != default}
            if default is not None or own:
                out.append(StuckCutoff(name, state, None if default is None else now - default))
            out += [
                StuckCutoff(name, state, None if t is None else now - t, v)
                for v, t in sorted(own.items())
            ]
        return out

    async def stuck(
        self,
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
        now = self.clock.now() if now is None else now
        rules = self._stuck_rules()
        rows = await self.store.stuck_workflows(
            self.stuck_cutoffs(now), after=after, limit=limit, tenant=tenant, parked=True
        )
        steps = await parking.unresolved_steps(self.store, rows)
        found = []
        for r in rows:
            default, per_version = rules.get((r.type, r.state), (None, {}))
            threshold = per_version.get(r.machine_version, default)
            step = steps.get(r.id, [None])[0]
            found.append(Stuck(r, now - r.state_entered_at, threshold or 0.0, step))
        return found

    async def stuck_counts(
        self, now: float | None = None, tenant: str | None = None
    ) -> list[StuckTotal]:
        """How many workflows are stuck (past their threshold, or parked for an operator),
        per type and state, and the oldest one's age: true counts from aggregates over index
        ranges (no row is read), by type and state."""
        now = self.clock.now() if now is None else now
        counted = await self.store.count_stuck(self.stuck_cutoffs(now), tenant, parked=True)
        return [StuckTotal(t, s, n, now - oldest) for t, s, n, oldest in counted]

    async def unregistered_counts(self) -> list[tuple[str, int, int]]:
        """``(type, machine_version, count)`` of the live workflows of the registered types on
        versions this engine does not register (an old version after an upgrade): nothing
        runs them here. One index range per gap between registered versions."""
        out: list[tuple[str, int, int]] = []
        for name, versions in sorted(self._types.items()):
            bounds = [0, *sorted(versions), 2**31 - 1]
            for lo, hi in itertools.pairwise(bounds):
                if hi - lo > 1:
                    out += [
                        (name, v, n)
                        for v, n in await self.store.live_versions_between(name, lo, hi)
                    ]
        return out

    async def parked_counts(self, tenant: str | None = None) -> list[tuple[str, str, int]]:
        """``(type, state, count)`` of the workflows parked for an operator, whatever their
        age (each is stuck too: :meth:`stuck_counts` counts it)."""
        out: dict[tuple[str, str], int] = {}
        for t in await self.parked_totals(tenant=tenant):
            out[(t.type, t.state)] = out.get((t.type, t.state), 0) + t.count
        return [(t, s, n) for (t, s), n in sorted(out.items())]

    async def parked_totals(
        self, now: float | None = None, tenant: str | None = None
    ) -> list[ParkedTotal]:
        """How many workflows are parked for an operator, per type, state and reason, and the
        oldest one's age in its state: true counts from one aggregate over a partial index."""
        now = self.clock.now() if now is None else now
        counted = await self.store.count_parked(tenant)
        return [ParkedTotal(t, s, why, n, now - oldest) for t, s, why, n, oldest in counted]

    async def replay(self, workflow_id: str) -> Replayed:
        """Rebuild state, version and context from the log alone, checking every step."""
        row = await self.get(workflow_id)
        self.type_of(row.type, row.machine_version)  # its current version must be known here
        records = await self.store.history(workflow_id)
        state, context, machine_version = self._replay_log(row, records)
        if machine_version != row.machine_version:
            raise ReplayMismatch(
                f"workflow {workflow_id!r}: the log ends on version {machine_version} of its "
                f"machine, the row is on {row.machine_version}",
                workflow_id=workflow_id,
            )
        return Replayed(state, records[-1].version if records else 0, context)

    def _replay_log(
        self, row: WorkflowRow, records: list[TransitionRecord]
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
            machine = self._known_machine(row.type, current)
            problem = _replay_problem(machine, rec, state, version)
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

    def _known_machine(self, name: str, version: int) -> Machine | None:
        try:
            return self.type_of(name, version).machine
        except UnknownWorkflowType:
            return None

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

    def check_archived(
        self, workflow: Mapping[str, Any], log: Iterable[Mapping[str, Any]]
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
            state, context, machine_version = self._replay_log(row, records)
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
        machine = self._known_machine(row.type, row.machine_version)
        target = None if machine is None else machine.states.get(row.state)
        if machine is not None and (target is None or target.terminal != row.terminal):
            raise ReplayMismatch(
                f"workflow {wid!r}: the row says {'' if row.terminal else 'not '}finished, "
                f"but {row.state!r} is {'not ' if row.terminal else ''}a terminal state",
                workflow_id=wid,
            )
        return replayed

    # -- retention (statewright.engine.retention) --------------------------------------------

    async def prune(
        self,
        terminal_older_than: float,
        *,
        archive: str | os.PathLike[str] | None = None,
        tenant: str | None = None,
        batch: int = 500,
        rejections_older_than: float | None = None,
        alerts_older_than: float | None = None,
        pruned_ids_older_than: float | None = None,
        dry_run: bool = False,
    ) -> PruneReport:
        """Delete finished workflows whose final state was entered more than
        ``terminal_older_than`` seconds ago, whole (row, log, steps, timers, inbox, refused
        events), in batches of ``batch``, each its own short transaction; and refused events
        older than ``rejections_older_than`` seconds, and alert notifications created more
        than ``alerts_older_than`` seconds ago and delivered or dead-lettered since (never a
        pending one). With ``archive`` (a ``.jsonl.gz`` path,
        appended to) each batch is written and fsynced before it is deleted. ``dry_run``
        counts and changes nothing. Raises InvalidInput.

        Each pruned workflow leaves a tombstone (its id, tenant, type and when), written
        with its delete: a start of that id, or with the idempotency key it came from, is
        refused with :class:`WorkflowPruned` rather than creating a workflow that would run
        the same steps under the same keys. Tombstones are kept until
        ``pruned_ids_older_than`` (seconds since their prune) deletes them; only then may
        such an id be started again."""
        from statewright.engine import retention

        return await retention.prune(
            self,
            terminal_older_than,
            archive=archive,
            tenant=tenant,
            batch=batch,
            rejections_older_than=rejections_older_than,
            alerts_older_than=alerts_older_than,
            pruned_ids_older_than=pruned_ids_older_than,
            dry_run=dry_run,
        )

    async def import_archive(
        self, path: str | os.PathLike[str], *, max_record_bytes: int | None = None
    ) -> ImportReport:
        """Restore the workflows of a prune archive, each whole in one transaction, **an
        archive being data to check, not to trust**: each record is checked whole first, in
        the transaction that would write it, and refused (listed in ``refused`` with its line
        and why; nothing written for it; the rest of the archive goes on) unless it is a
        finished workflow (terminal, unleased, not due, no timers: nothing can run it), its
        id consistent with its tenant, every value within this engine's input limits (the
        context, every payload and patch of its log, step results, inputs:
        :class:`~statewright.jsonvalue.Limits`) and its log replays to its row (on its machine
        version when registered here; else the log's order only, and it is listed in
        ``unchecked``). A line longer than ``max_record_bytes`` once inflated (default 16 MiB)
        is refused unread; decoding never recurses.

        A workflow already here with the same data is skipped (``identical``); with other
        data it is refused (``conflicts``), nothing written. Raises InvalidInput (before
        writing anything) for a file that is not an archive."""
        from statewright.engine import retention

        limit = max_record_bytes
        if limit is None:
            limit = retention.DEFAULT_MAX_RECORD_BYTES
        return await retention.import_archive(self, path, max_record_bytes=limit)


FORK_EVENT = "$fork"
"""The first log entry of a workflow started from a past version of another (``fork``)."""


MAX_REASON = 1000
"""Characters an operator's reason (resume, move, fork, context patch, migration) may have."""


def _outcome_unknown(step: StepRecord) -> bool:
    """Whether the ledger cannot tell if ``step``'s call happened: *executing* (a worker may
    be in it, or died in it), or failed by an error that does not prove the call never left
    (what a worker reconciles before running it again, and parks on without a verdict)."""
    return step.status == "executing" or (
        step.status == "failed" and step.outcome != "not_applied"
    )


def _check_reason(reason: object, what: str) -> None:
    """An operator's reason: required, and kept in the log (bounded)."""
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidInput(f"{what} needs a reason")
    if len(reason) > MAX_REASON:
        raise InvalidInput(f"the reason is longer than {MAX_REASON} characters")


def id_for_key(tenant: str, key: str) -> str:
    """The workflow id a start with an idempotency key and no id gets: derived from the
    tenant and the key, so every retry of that start names the same workflow."""
    digest = hashlib.sha256(f"{tenant}\x00{key}".encode()).hexdigest()
    return f"idem-{digest[:40]}"


def decision_payload(approver: str, comment: str | None) -> dict[str, Any]:
    """The payload of an approval or denial: ``{approver, comment?}``."""
    if not isinstance(approver, str) or not approver.strip():
        raise InvalidInput("an approval needs the approver's name")
    return {"approver": approver} | ({"comment": comment} if comment else {})


def _replay_problem(
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


__all__ = [
    "Dispatched",
    "Engine",
    "ParkedTotal",
    "Replayed",
    "StatewrightError",
    "Stuck",
    "StuckTotal",
]
