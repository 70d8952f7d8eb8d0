"""Idempotent steps and the ``Run`` handed to state handlers.

A step is a side effect keyed ``workflow_id:step``. The ledger records *executing* (committed)
before the action runs and *done* with the result after, both fenced by the worker's lease.
Whenever a step's outcome is unknown (found *executing* after a crash, or its action raised
an error that does not prove the call never left), it is **reconciled** before it may run
again: the step's reconcile hook asks the external system; without a verdict it runs again
only if declared ``safe_to_repeat``, otherwise :class:`~statewright.errors.StepOutcomeUnknown`
(the worker parks the workflow for an operator).

User code (actions, reconcile hooks) defined with ``async def`` runs on the event loop inside
:func:`~statewright.engine.looplag.user_code`; anything else runs in the worker's thread pool,
so a blocking call never stops the heartbeat. A synchronous handler gets a
:class:`~statewright.engine.syncrun.SyncRun`, whose methods block, and whose actions and hooks
run in the handler's own thread.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any

from statewright.engine import commands, emit, suspend, tracecontext, transactional
from statewright.engine.cancel import pending
from statewright.engine.children import child_id
from statewright.engine.commands import Started
from statewright.engine.compensation_names import UNDO_PREFIX, name_for
from statewright.engine.ledger import Begun, Ledger, StepKey, describe
from statewright.engine.looplag import user_code
from statewright.engine.timers import timer_spec
from statewright.engine.usercalls import UserCall, bounded, is_async
from statewright.engine.workflow_type import (
    Applied,
    NotApplied,
    Reconciled,
    Reconciler,
    WorkflowType,
)
from statewright.errors import (
    Cancelled,
    InvalidInput,
    LeaseLost,
    StatewrightError,
    StepOutcomeUnknown,
)
from statewright.types import (
    JSON,
    CancelRequest,
    InboxItem,
    Lease,
    ParentLink,
    StepFinish,
    StepRecord,
    TimerSpec,
    TransactionalStep,
    WorkflowRow,
)

if TYPE_CHECKING:
    from statewright.engine.runtime import Runtime

log = logging.getLogger(__name__)

RESERVED = (UNDO_PREFIX, suspend.RESERVED_PREFIX)
"""Step names the engine gives (an undo, a wait's deadline): a user's step may not take them."""


class Input(dict[str, Any]):
    """An inbox input taken by a handler: its payload (this dict) with its name and id."""

    def __init__(self, item: InboxItem) -> None:
        super().__init__(item.payload)
        self.name = item.name
        self.id = item.id
        self.posted_at = item.posted_at

    @property
    def payload(self) -> JSON:
        return dict(self)


class Run:
    """What a handler sees: the workflow as claimed, durable steps, cancel, progress, inbox.

    Attributes:
        workflow: the row as it was when the worker claimed it.
        partial: results stashed with :meth:`save_partial`.
    """

    def __init__(
        self,
        rt: Runtime,
        wtype: WorkflowType,
        workflow: WorkflowRow,
        *,
        executor: Executor | None = None,
    ) -> None:
        self.rt = rt
        self.type = wtype
        self.workflow = workflow
        self.partial: JSON = {}
        self.executor = executor
        """Where synchronous user code runs (None: the loop's default executor)."""
        self.lease: Lease | None = workflow.lease
        """The claim every write of this run is fenced by (None outside a worker)."""
        self.taken: list[int] = []
        """Inbox items this run took: consumed by the write that ends the run."""
        self.timer_ops: dict[str, TimerSpec | None] = {}
        """Timers this run scheduled (by key; None: cancelled), written with its outcome."""
        self.messages: list[dict[str, Any]] = []
        """Messages this run emitted (:meth:`emit`), written with its transition."""
        self.stopped: BaseException | None = None
        """Set when the worker gave up on this run (deadline, lost lease): its calls raise."""
        self._cancel: CancelRequest | None = None
        self._cancel_raw: CancelRequest | None = None
        self._cancel_seen = False
        self._call_user: UserCall = self._invoke
        self.ledger = Ledger(rt, wtype, workflow, self.lease)
        """This run's step ledger writes, and the *done* record it keeps pending for the
        worker (``ledger.carry_done``)."""

    @property
    def id(self) -> str:
        return self.workflow.id

    @property
    def state(self) -> str:
        return self.workflow.state

    @property
    def context(self) -> JSON:
        return self.workflow.context

    @property
    def fencing_token(self) -> int:
        """The fencing token of this claim (see :class:`StepKey`)."""
        return self.workflow.fence

    def key(self, step: str) -> str:
        """The idempotency key of a step: ``workflow_id:step``."""
        return f"{self.workflow.id}:{step}"

    def now(self) -> float:
        return self.rt.clock.now()

    def _check_live(self) -> None:
        if self.stopped is not None:
            raise self.stopped

    @property
    def carry_done(self) -> bool:
        """Keep the last finished step's *done* record pending, for the worker to commit with
        the handler's transition (see ``Ledger.carry_done``)."""
        return self.ledger.carry_done

    @carry_done.setter
    def carry_done(self, value: bool) -> None:
        self.ledger.carry_done = value

    @property
    def pending_finish(self) -> StepFinish | None:
        """The finished step's outcome not written yet (None: nothing pending)."""
        return self.ledger.pending_finish

    async def _ready(self) -> None:
        """Before a store call of the handler's: the run is still live, and the *done* record
        the ledger keeps pending is written first (the worker writes it for every other
        outcome than the transition that carries it)."""
        self._check_live()
        await self.ledger.flush()

    # -- cancel --------------------------------------------------------------------------------

    @property
    def cancel_request(self) -> CancelRequest | None:
        """The pending cancel request (reason, requester, time) as last seen; None if none was
        seen.

        Refreshed by :meth:`check_cancel`, before each :meth:`step`, and by the worker's
        heartbeat. A request counts only in a state with an edge for the cancel event.
        """
        return self._cancel

    async def check_cancel(self) -> None:
        """Ask the store; raise :class:`~statewright.errors.Cancelled` if a cancel is pending.

        Let it propagate (after :meth:`save_partial`, if there is something worth keeping):
        the worker then fires the cancel event with the partial results.
        """
        await self._ready()
        found = await self.rt.store.cancel_requests([self.workflow.id])
        await self.note_cancel(found.get(self.workflow.id))
        if self._cancel is not None:
            raise Cancelled(self._cancel.reason)

    async def note_cancel(self, request: CancelRequest | None) -> None:
        """Record the store's pending request for this workflow (worker use)."""
        if self._cancel_seen and request == self._cancel_raw:
            return
        wf = self.workflow
        found = await pending(self.rt, self.type, wf.id, wf.state, request)
        # Marked as seen only once resolved: a concurrent caller must not skip it meanwhile.
        self._cancel, self._cancel_raw, self._cancel_seen = found, request, True

    def save_partial(self, **context: Any) -> None:
        """Stash partial results: if the run ends cancelled, they are merged into the context
        in the same transaction as the cancel event. Values must be JSON-serialisable."""
        self.rt.limits.check({**self.partial, **context}, "partial results")
        self.partial.update(context)

    # -- children ------------------------------------------------------------------------------

    async def start_child(
        self, workflow_type: str, key: str, input: Mapping[str, Any] | None = None
    ) -> Started:
        """Start a child workflow of ``workflow_type`` with ``input`` as its context, under
        ``key`` among this workflow's children; it runs on its own, and when it ends this
        workflow gets one ``child_done`` or ``child_failed`` event (see
        :mod:`statewright.engine.children`).

        Its id is ``<this id>.<key>``, so a run that starts it again (after a crash, or on a
        later run of the state) gets the same child back (``created`` False), never a
        second one. **Written now, not with the run's outcome**: the child exists even if
        this run then fails; it is refused (LeaseLost, and nothing written) once this run's
        claim is gone, so a worker frozen past its lease starts nothing. Raises
        InvalidInput (a bad key), UnknownWorkflowType, WorkflowExists (the id is taken by a
        workflow that is not this one's child)."""
        self._check_live()
        cid = child_id(self.workflow.id, key)
        started = await commands.start(
            self.rt,
            workflow_type,
            input,
            workflow_id=cid,
            actor=f"workflow {self.workflow.id}",
            tenant=self.workflow.tenant,
            parent=ParentLink(self.workflow.id, key, self.lease),
        )
        return started

    # -- timers --------------------------------------------------------------------------------

    def schedule(
        self,
        event: str,
        *,
        after: float | None = None,
        at: float | None = None,
        payload: Mapping[str, Any] | None = None,
        key: str | None = None,
        keep: bool = False,
    ) -> TimerSpec:
        """Schedule a durable timer for this workflow: fire ``event`` ``after`` seconds from
        now or ``at`` an epoch time (see :meth:`Engine.schedule` for ``key`` and ``keep``).

        **It is written atomically with this run's outcome**, not now: with the transition
        the handler returns (after the clearing of the state it leaves, so the timer belongs
        to the state it moves to, unless ``keep``), or with going idle when it returns None.
        A run that fails, crashes or is dropped (a lost lease, a concurrent event) leaves no
        timer behind, and its re-run schedules again; a keyed timer is never doubled (a
        later schedule of the same key replaces it, here and in the store). Into a terminal
        state nothing is armed. Checked now: the event is declared, its payload fits its
        schema and the limits (IllegalTransition, InvalidPayload, InvalidInput).
        """
        self._check_live()
        machine = self.type.machine
        spec = timer_spec(
            self.rt,
            machine,
            None,
            event,
            after=after,
            at=at,
            payload=payload,
            key=key,
            keep=keep,
        )
        assert spec.key is not None
        self.timer_ops.pop(spec.key, None)  # the latest call for a key wins, in call order
        self.timer_ops[spec.key] = spec
        return spec

    def cancel_timer(self, key: str) -> None:
        """Cancel the workflow's pending timer ``key`` (or one this run scheduled), with this
        run's outcome, like :meth:`schedule`."""
        self._check_live()
        self.timer_ops.pop(key, None)
        self.timer_ops[key] = None

    def emit(self, topic: str, body: Any = None) -> None:
        """Emit a message (a JSON ``body`` under ``topic``) **with this run's transition**:
        stored in its log entry, so it commits with it or not at all (a run that ends
        otherwise emits nothing; see :mod:`statewright.engine.emit`). Subscriptions deliver
        it. Checked now (InvalidInput)."""
        self._check_live()
        self.messages.append(emit.message(self.rt.limits, topic, body, len(self.messages)))

    @property
    def scheduled(self) -> tuple[TimerSpec, ...]:
        """The timers this run's outcome arms."""
        return tuple(spec for spec in self.timer_ops.values() if spec is not None)

    @property
    def cancelled_timers(self) -> tuple[str, ...]:
        """The timer keys this run's outcome deletes."""
        return tuple(key for key, spec in self.timer_ops.items() if spec is None)

    # -- transactional steps ---------------------------------------------------------------

    effects: tuple[TransactionalStep, ...] = ()
    """The transactional steps this run registered (a class default: no cost unused)."""

    def transaction(
        self, name: str, fn: Callable[[Any], Any], *, tables: Iterable[str] = ()
    ) -> None:
        """Have ``fn(conn)`` write the application's rows (``tables``) in the transaction of
        the transition this handler returns: both commit or neither does. Not run now;
        checked now, and its tables before that transition is written (see
        :mod:`statewright.engine.transactional`)."""
        self._check_live()
        step = transactional.register(self.rt.store, self.effects, name, fn, tables)
        self.effects = (*self.effects, step)

    # -- progress ------------------------------------------------------------------------------

    async def progress(self, **fields: Any) -> None:
        """Report progress (e.g. ``done=3, of=10, message="..."``); kept until the state
        changes and shown by ``statewright show``. A report the store cannot take is logged
        and dropped; only a lost lease (the workflow was taken over) raises LeaseLost."""
        await self._ready()
        try:
            self.rt.limits.check(fields, "progress report")
            await self.rt.store.record_progress(
                self.workflow.id, dict(fields), self.now(), self.lease
            )
        except LeaseLost:
            raise
        except Exception:
            log.warning(
                "progress not recorded",
                exc_info=True,
                extra={"action": "progress_failed", "workflow_id": self.workflow.id},
            )

    # -- steps ---------------------------------------------------------------------------------

    async def step(
        self,
        name: str,
        action: Callable[[StepKey], Awaitable[Any] | Any],
        *,
        safe_to_repeat: bool = False,
        reconcile: Reconciler | None = None,
        timeout: float | None = None,
        compensate: Callable[[StepKey, Any], Awaitable[Any] | Any] | None = None,
    ) -> Any:
        """Run ``action(key)`` at most once per workflow and step name; return its result.

        ``key`` is the step's idempotency key (a :class:`StepKey`: a ``str`` that also carries
        the claim's fencing token): hand it to the external system. The ledger records
        *executing* before the action runs and *done* with the result after; a second call
        returns the stored result without running it. The result must be JSON-serialisable.

        **Unknown outcomes are reconciled, always**: a step found *executing* (a crash
        interrupted it) or whose action raised an error that does not prove the request never
        left (a timeout, a 5xx, a reset connection: see ``RetryPolicy.outcome``) is not run
        again blindly. ``reconcile(key)`` (or the type's reconciler for this step) is asked
        first; it returns :class:`Applied` (with the result the external system holds),
        :class:`NotApplied` (safe to run) or None (cannot tell). With no verdict the step
        runs again only if ``safe_to_repeat``; otherwise :class:`StepOutcomeUnknown`, and the
        worker parks the workflow for an operator (``Engine.resolve_step``).

        ``timeout``: seconds the action may take; past it the step fails with
        :class:`DeadlineExceeded`, a transient error whose outcome is unknown (reconciled
        before any retry). A pending cancel request raises
        :class:`~statewright.errors.Cancelled` before the step starts.

        ``compensate``: the step's undo, ``compensate(key, result)``, recorded with it by name
        and run once the step is done and a compensating transition comes (see
        :mod:`statewright.engine.compensation`).
        """
        if not isinstance(name, str) or not name or ":" in name or name.startswith(RESERVED):
            raise InvalidInput(f"step name must be non-empty, no ':', not undo.* or $*: {name!r}")
        if timeout is not None and not timeout > 0:
            raise InvalidInput(f"a step's timeout must be positive, not {timeout!r}")
        undo = None if compensate is None else name_for(self.type.compensators, compensate)
        # In its span (a child of the handler's) when a tracer provider is set.
        with tracecontext.step_span(self.workflow, name, self.key(name)):
            return await self._step(name, action, safe_to_repeat, reconcile, timeout, undo)

    async def _step(
        self,
        name: str,
        action: Callable[[StepKey], Awaitable[Any] | Any],
        safe_to_repeat: bool,
        reconcile: Reconciler | None,
        timeout: float | None,
        compensation: str | None = None,
        undoing: bool = False,
    ) -> Any:
        # The usual start in one trip (step_open): with no pending cancel request and no
        # ledger entry the step is recorded executing at once; otherwise what was found is
        # decided here (a cancel, a done result, a reconcile) before step_begin. A pending
        # done record is written first.
        await self._ready()
        key = self.key(name)
        # ``compensation``: the undo recorded with the step; ``undoing``: this is an undo
        # (:mod:`~statewright.engine.compensation`), run for the cancel it must not stop.
        store, wid = self.rt.store, self.workflow.id
        opened = await store.step_open(key, wid, name, self.now(), self.lease, compensation)
        if not undoing:
            await self.note_cancel(opened.cancel)
            if self._cancel is not None:
                raise Cancelled(self._cancel.reason)
        begun: Begun | StepRecord
        if opened.begun:
            assert opened.record is not None
            begun = self.ledger.begun(name, opened.record)
        else:
            begun = await self._prepare(
                name, reconcile, safe_to_repeat, opened.record, compensation
            )
        if not isinstance(begun, Begun):
            tracecontext.note(outcome="recorded", attempt=begun.attempts)
            return begun.result
        tracecontext.note(attempt=begun.record.attempts)
        label = f"step {self.type.name}/{self.state}/{name} {self.id}"
        try:
            result = await self._call_user(action, (begun.key,), timeout, label)
        except Exception as exc:
            await self.ledger.failed(begun, exc)
            raise
        tracecontext.note(outcome="done")
        return await self.ledger.done(begun, name, result)

    async def _prepare(
        self,
        name: str,
        reconcile: Reconciler | None,
        safe_to_repeat: bool,
        record: StepRecord | None,
        compensation: str | None = None,
    ) -> Begun | StepRecord:
        """The done record to return, or the ledger entry of the attempt that may run now
        (``record``: the step's ledger entry as just read)."""
        store = self.rt.store
        key = self.key(name)
        if record is not None and record.status == "done":
            return record
        verdict: Reconciled = None
        if record is not None and (
            record.status == "executing" or record.outcome != "not_applied"
        ):
            hook = reconcile or self.type.reconcilers.get(name)
            label = f"reconcile {self.type.name}/{name} {self.id}"
            if hook is not None:
                # The asking claim's fencing token goes along: a service that records it as
                # the highest seen refuses the late call of the claim whose outcome is asked.
                asking = StepKey(self.workflow.id, name, self.fencing_token, record.attempts)
                verdict = await self._call_user(hook, (asking,), None, label)
            log.warning(
                "step outcome unknown: reconciled",
                extra={
                    "action": "step_reconcile",
                    "key": key,
                    "found": record.status,
                    "error": record.error,
                    "verdict": repr(verdict),
                },
            )
            if not isinstance(verdict, Applied | NotApplied) and not safe_to_repeat:
                raise StepOutcomeUnknown(key)
        self._check_live()
        rec = await store.step_begin(
            key, self.workflow.id, name, self.now(), self.lease, compensation
        )
        if rec.status == "done":
            return rec  # finished meanwhile (its result stands)
        begun = self.ledger.begun(name, rec)
        if isinstance(verdict, Applied):
            await self.ledger.keepable(begun, name, verdict.result)
            return await self.ledger.finish(begun, "done", verdict.result, None, None)
        return begun

    async def _invoke(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        timeout: float | None,
        label: str,
    ) -> Any:
        """Call user code: ``async def`` on the loop (watched for blocking), anything else in
        the worker's thread pool (with the caller's context variables, e.g. the trace)."""
        self._check_live()
        aw: Awaitable[Any]
        if is_async(fn):
            if timeout is None:
                # Awaited in the handler's own task: with nothing to bound, a task of its own
                # and ``asyncio.wait`` would only cost time on every step. Cancelling the
                # handler cancels the call inside it and waits for it to unwind (with a task
                # of its own, the call was left to end in the background).
                result = await user_code(label, fn(*args))
                if inspect.isawaitable(result):
                    result = await user_code(label, result)
                return result
            aw = user_code(label, fn(*args))
        else:
            ctx = contextvars.copy_context()
            aw = asyncio.get_running_loop().run_in_executor(self.executor, ctx.run, fn, *args)
        return await bounded(asyncio.ensure_future(aw), timeout, label)

    # -- inbox ---------------------------------------------------------------------------------

    async def next_input(self, name: str | None = None) -> Input | None:
        """Take the oldest input (of ``name``) this run has not taken yet, or None.

        It is consumed by the write that ends this handler run (its transition, or going
        idle): if the run fails or the worker dies first, it is delivered again.
        """
        await self._ready()
        item = await self.rt.store.next_input(self.workflow.id, name, self.taken)
        if item is None:
            return None
        self.taken.append(item.id)
        return Input(item)

    waits = 0
    """The ordinal of this run's next wait (:mod:`statewright.engine.suspend`)."""

    async def sleep(self, seconds: float) -> None:
        """Sleep ``seconds``, durably and without holding the worker: return at once once
        the deadline (recorded by the first call in this visit of the state) has passed,
        else suspend the workflow until then; the handler then runs again from its start
        (see :mod:`statewright.engine.suspend`). InvalidInput: not a number >= 0."""
        await suspend.sleep(self, seconds)

    async def wait_input(
        self,
        name: str | None = None,
        *,
        timeout: float | None = None,
        hold: float = 0.0,
        poll_interval: float = 0.5,
    ) -> Input | None:
        """Take the oldest inbox input (of ``name``) and return it (its payload, with
        ``.name`` and ``.id``); None once ``timeout`` seconds have passed since the first
        call in this visit of the state (a durable deadline; None: no timeout).

        With no input yet, it waits here up to ``hold`` seconds (holding the worker's slot:
        for short waits; woken at once by a post, or within ``poll_interval``), then
        **suspends** the workflow: the slot and lease are freed, and a posted input (or the
        deadline) runs the handler again from its start (see
        :mod:`statewright.engine.suspend`). A cancel request raises
        :class:`~statewright.errors.Cancelled`. Like :meth:`next_input`, the input is
        consumed with the transition that ends the run.
        """
        item: Input | None = await suspend.wait_input(self, name, timeout, hold, poll_interval)
        return item

    async def engine_step(self, name: str, action: Callable[[StepKey], Any]) -> Any:
        """A step the engine names (reserved ``$`` prefix), safe to repeat; its *done* record
        written now (a wait's deadline must be durable before the run suspends on it)."""
        with tracecontext.step_span(self.workflow, name, self.key(name)):
            result = await self._step(name, action, True, None, None)
        await self._ready()  # writes the pending done record, as before any store call
        return result


__all__ = [
    "Input",
    "Run",
    "StatewrightError",
    "StepKey",
    "describe",
    "is_async",
]
