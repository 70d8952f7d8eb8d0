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
so a blocking call never stops the heartbeat. A synchronous handler gets a :class:`SyncRun`,
whose methods block, and whose actions and hooks run in the handler's own thread.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import logging
import queue
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from statewright.engine import tracecontext
from statewright.engine.cancel import pending
from statewright.engine.looplag import user_code
from statewright.engine.timers import timer_spec
from statewright.engine.wakeup import listen
from statewright.engine.workflow_type import (
    Applied,
    NotApplied,
    Reconciled,
    Reconciler,
    WorkflowType,
)
from statewright.errors import (
    Cancelled,
    DeadlineExceeded,
    FatalError,
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
    StepFinish,
    StepRecord,
    TimerSpec,
    WorkflowRow,
)

if TYPE_CHECKING:
    from statewright.engine.runtime import Runtime

log = logging.getLogger(__name__)
T = TypeVar("T")

UserCall = Callable[[Callable[..., Any], tuple[Any, ...], "float | None", str], Awaitable[Any]]
"""How a run calls user code: ``(fn, args, timeout, label) -> result``."""


def is_async(fn: Callable[..., Any]) -> bool:
    """Whether calling ``fn`` gives a coroutine (``async def``, also behind a partial or as
    an object's ``async def __call__``)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - an object's async __call__
    )


class StepKey(str):
    """A step's idempotency key (``workflow_id:step``), as handed to its action.

    It is a ``str`` (send it as the external system's idempotency key) that also carries the
    **fencing token** of the claim running the step: a number that grows with every claim of
    the workflow. A service that records the highest token it has seen per key (or per
    workflow) and refuses lower ones rejects a call from a worker that was frozen past its
    lease while another worker took over, which nothing else can recall once in flight.

    Attributes:
        workflow_id, step: what the key names.
        fencing_token: the claim's token (``Run.fencing_token``).
        attempt: this run of the step (1 for the first; the ledger's ``attempts``).
    """

    workflow_id: str
    step: str
    fencing_token: int
    attempt: int

    def __new__(cls, workflow_id: str, step: str, fencing_token: int, attempt: int) -> StepKey:
        key = super().__new__(cls, f"{workflow_id}:{step}")
        key.workflow_id = workflow_id
        key.step = step
        key.fencing_token = fencing_token
        key.attempt = attempt
        return key


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


@dataclass
class _Begun:
    """A step that may run now: its ledger entry (this attempt)."""

    key: StepKey
    record: StepRecord
    started: float


@dataclass
class _Pending:
    """A finished step's *done* record not written yet (see :attr:`Run.carry_done`)."""

    finish: StepFinish
    name: str
    elapsed: float


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:1000]


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
        self.stopped: BaseException | None = None
        """Set when the worker gave up on this run (deadline, lost lease): its calls raise."""
        self._cancel: CancelRequest | None = None
        self._cancel_raw: CancelRequest | None = None
        self._cancel_seen = False
        self._call_user: UserCall = self._invoke
        self.carry_done = False
        """Keep the last finished step's *done* record pending, for the worker to commit it
        with the transition the handler returns (one commit fewer). Whatever else the handler
        does next through this run writes it first (:meth:`flush`)."""
        self._pending: _Pending | None = None

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

    # -- the pending done record ---------------------------------------------------------------

    @property
    def pending_finish(self) -> StepFinish | None:
        """The finished step's outcome not written yet (None: nothing pending)."""
        return None if self._pending is None else self._pending.finish

    async def flush(self) -> None:
        """Write the pending *done* record now, on its own, fenced by the lease (worker use:
        before anything that needs it durable, and when the transition that was to carry it
        is refused). Raises LeaseLost when the lease (or that attempt) is gone."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        await self.rt.store.step_finish(pending.finish, self.lease)
        self.rt.observers.step_finished(self.workflow, pending.name, pending.elapsed)

    def carried(self) -> None:
        """The pending record was committed with the handler's transition (worker use)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            self.rt.observers.step_finished(self.workflow, pending.name, pending.elapsed)

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
        self._check_live()
        await self.flush()
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

    @property
    def scheduled(self) -> tuple[TimerSpec, ...]:
        """The timers this run's outcome arms."""
        return tuple(spec for spec in self.timer_ops.values() if spec is not None)

    @property
    def cancelled_timers(self) -> tuple[str, ...]:
        """The timer keys this run's outcome deletes."""
        return tuple(key for key, spec in self.timer_ops.items() if spec is None)

    # -- progress ------------------------------------------------------------------------------

    async def progress(self, **fields: Any) -> None:
        """Report progress (e.g. ``done=3, of=10, message="..."``); kept until the state
        changes and shown by ``statewright show``. A report the store cannot take is logged
        and dropped; only a lost lease (the workflow was taken over) raises LeaseLost."""
        self._check_live()
        await self.flush()
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
        """
        if not isinstance(name, str) or not name or ":" in name:
            raise InvalidInput(f"step name must be non-empty and contain no ':': {name!r}")
        if timeout is not None and not timeout > 0:
            raise InvalidInput(f"a step's timeout must be positive, not {timeout!r}")
        # In its span (a child of the handler's) when a tracer provider is set.
        with tracecontext.step_span(self.workflow, name, self.key(name)):
            return await self._step(name, action, safe_to_repeat, reconcile, timeout)

    async def _step(
        self,
        name: str,
        action: Callable[[StepKey], Awaitable[Any] | Any],
        safe_to_repeat: bool,
        reconcile: Reconciler | None,
        timeout: float | None,
    ) -> Any:
        # The usual start in one trip (step_open): with no pending cancel request and no
        # ledger entry the step is recorded executing at once; otherwise what was found is
        # decided here (a cancel, a done result, a reconcile) before step_begin. A pending
        # done record is written first.
        self._check_live()
        await self.flush()
        key = self.key(name)
        opened = await self.rt.store.step_open(key, self.workflow.id, name, self.now(), self.lease)
        await self.note_cancel(opened.cancel)
        if self._cancel is not None:
            raise Cancelled(self._cancel.reason)
        begun: _Begun | StepRecord
        if opened.begun:
            assert opened.record is not None
            begun = self._begun(name, opened.record)
        else:
            begun = await self._prepare(name, reconcile, safe_to_repeat, opened.record)
        if not isinstance(begun, _Begun):
            tracecontext.note(outcome="recorded", attempt=begun.attempts)
            return begun.result
        tracecontext.note(attempt=begun.record.attempts)
        label = f"step {self.type.name}/{self.state}/{name} {self.id}"
        try:
            result = await self._call_user(action, (begun.key,), timeout, label)
        except Exception as exc:
            await self._failed(begun, exc)
            raise
        tracecontext.note(outcome="done")
        return await self._done(begun, name, result)

    async def _prepare(
        self,
        name: str,
        reconcile: Reconciler | None,
        safe_to_repeat: bool,
        record: StepRecord | None,
    ) -> _Begun | StepRecord:
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
        rec = await store.step_begin(key, self.workflow.id, name, self.now(), self.lease)
        if rec.status == "done":
            return rec  # finished meanwhile (its result stands)
        begun = self._begun(name, rec)
        if isinstance(verdict, Applied):
            await self._keepable(begun, name, verdict.result)
            return await self._finish(begun, "done", verdict.result, None, None)
        return begun

    def _begun(self, name: str, record: StepRecord) -> _Begun:
        """The attempt ``record`` (just recorded executing) as it runs now."""
        return _Begun(
            StepKey(self.workflow.id, name, self.fencing_token, record.attempts),
            record,
            time.perf_counter(),
        )

    async def _finish(
        self,
        begun: _Begun,
        status: str,
        result: Any,
        error: str | None,
        outcome: Any,
    ) -> StepRecord:
        finish = self._outcome(begun, status, result, error, outcome)
        return await self.rt.store.step_finish(finish, self.lease)

    def _outcome(
        self, begun: _Begun, status: str, result: Any, error: str | None, outcome: Any
    ) -> StepFinish:
        return StepFinish(
            key=str(begun.key),
            attempt=begun.record.attempts,
            status="done" if status == "done" else "failed",
            result=result,
            error=error,
            outcome=outcome,
            at=self.now(),
        )

    async def _failed(self, begun: _Begun, exc: BaseException) -> None:
        outcome = self.type.retry.outcome(exc)
        try:
            await self._finish(begun, "failed", None, describe(exc), outcome)
        except LeaseLost as lost:
            raise lost from exc
        log.warning(
            "step failed",
            extra={
                "action": "step_failed",
                "key": str(begun.key),
                "attempt": begun.record.attempts,
                "outcome": outcome,
                "error": describe(exc),
            },
        )

    async def _keepable(self, begun: _Begun, name: str, result: Any) -> None:
        try:
            self.rt.limits.check(result, f"result of step {name!r}")
        except InvalidInput as exc:
            # The call went through, but its result cannot be kept (not JSON, too deep or
            # too large): the outcome stays unknown to the ledger (reconcile can tell, or an
            # operator resolves it), and the workflow fails this state.
            error = FatalError(f"{exc.message}: it cannot be kept")
            await self._finish(begun, "failed", None, describe(error), "unknown")
            raise error from exc

    async def _done(self, begun: _Begun, name: str, result: Any) -> Any:
        await self._keepable(begun, name, result)
        elapsed = time.perf_counter() - begun.started
        if self.carry_done and self._pending is None:
            # Kept for the handler's transition: the step stays *executing* in the ledger
            # until then (a crash meanwhile is reconciled like one during the call).
            finish = self._outcome(begun, "done", result, None, None)
            self._pending = _Pending(finish, name, elapsed)
            return result
        await self._finish(begun, "done", result, None, None)
        self.rt.observers.step_finished(self.workflow, name, elapsed)
        return result

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
            aw = user_code(label, fn(*args))
        else:
            ctx = contextvars.copy_context()
            aw = asyncio.get_running_loop().run_in_executor(self.executor, ctx.run, fn, *args)
        return await _bounded(asyncio.ensure_future(aw), timeout, label)

    # -- inbox ---------------------------------------------------------------------------------

    async def next_input(self, name: str | None = None) -> Input | None:
        """Take the oldest input (of ``name``) this run has not taken yet, or None.

        It is consumed by the write that ends this handler run (its transition, or going
        idle): if the run fails or the worker dies first, it is delivered again.
        """
        self._check_live()
        await self.flush()
        item = await self.rt.store.next_input(self.workflow.id, name, self.taken)
        if item is None:
            return None
        self.taken.append(item.id)
        return Input(item)

    async def wait_input(
        self, name: str | None = None, *, timeout: float, poll_interval: float = 0.5
    ) -> Input | None:
        """Wait up to ``timeout`` seconds for an inbox input (of ``name``); take the oldest
        one and return it (its payload, with ``.name`` and ``.id``), or None on timeout.

        The store wakes the wait when an input is posted (from any process on PostgreSQL, and
        on SQLite from this process at once, from others within ``poll_interval``). A cancel
        request ends the wait with :class:`~statewright.errors.Cancelled`. Like
        :meth:`next_input`, the input is consumed with the transition that ends this run.
        """
        store = self.rt.store
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            remaining = deadline - time.monotonic()
            waiter = await listen(store, min(remaining, poll_interval))
            try:
                item = await self.next_input(name)
                if item is not None:
                    return item
                await self.check_cancel()
                if remaining <= 0:
                    return None
                await waiter
            finally:
                waiter.cancel()


class _Trampoline:
    """Runs a synchronous handler's calls into its :class:`Run` (coroutines) on the loop,
    and the user code they call back (actions, reconcile hooks) in the handler's own thread.

    Why: a sync handler holds one pool thread while it waits; running its actions on another
    pool thread could starve the pool (every thread a handler waiting for an action). Here the
    handler's thread serves its own actions while it waits for the loop.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._queue: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """In the handler's thread: run ``coro`` on the loop, serving its callbacks here."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            coro.close()
            raise RuntimeError("a SyncRun method was called on an event loop's thread")
        future = asyncio.run_coroutine_threadsafe(self._wrap(coro), self.loop)
        while True:
            try:
                kind, item = self._queue.get(timeout=0.5)
            except queue.Empty:
                if future.done() and self._queue.empty():
                    return future.result()  # raises what the coroutine raised
                continue
            if kind == "done":
                return future.result()
            fn, args, reply = item
            try:
                value = fn(*args)
            except BaseException as exc:
                self.loop.call_soon_threadsafe(_settle, reply, None, exc)
            else:
                self.loop.call_soon_threadsafe(_settle, reply, value, None)

    async def _wrap(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            return await coro
        finally:
            self._queue.put(("done", None))

    async def call(
        self, fn: Callable[..., Any], args: tuple[Any, ...], timeout: float | None, label: str
    ) -> Any:
        """On the loop: run ``fn(*args)`` in the handler's thread."""
        reply: asyncio.Future[Any] = self.loop.create_future()
        self._queue.put(("call", (fn, args, reply)))
        return await _bounded(reply, timeout, label)


async def _bounded(future: asyncio.Future[Any], timeout: float | None, label: str) -> Any:
    """The result of user code's ``future``, waited for up to ``timeout`` seconds; past it,
    :class:`DeadlineExceeded` (a thread cannot be stopped: its late result is dropped). A
    plain function that returned a coroutine has it awaited, watched like async user code."""
    try:
        done, _ = await asyncio.wait({future}, timeout=timeout)
    finally:
        if not future.done():
            future.cancel()
    if future not in done:
        raise DeadlineExceeded(f"{label} ran past its timeout of {timeout:g}s")
    result = future.result()
    if inspect.isawaitable(result):
        result = await user_code(label, result)
    return result


def _settle(reply: asyncio.Future[Any], value: Any, exc: BaseException | None) -> None:
    if reply.done():  # timed out meanwhile: the late result is dropped
        return
    if exc is not None:
        reply.set_exception(exc)
    else:
        reply.set_result(value)


class SyncRun:
    """The :class:`Run` of a synchronous handler, with blocking methods.

    Synchronous handlers run in the worker's thread pool, so a blocking call never stops the
    heartbeat or the other workflows. Their step actions and reconcile hooks run in the
    handler's own thread. Calling these methods from the event loop's thread is an error.
    """

    def __init__(self, run: Run, loop: asyncio.AbstractEventLoop) -> None:
        self._run = run
        self._trampoline = _Trampoline(loop)
        run._call_user = self._trampoline.call

    @property
    def run(self) -> Run:
        return self._run

    def __getattr__(self, name: str) -> Any:
        # Plain attributes and properties (workflow, id, state, context, partial,
        # fencing_token, cancel_request, key, now, save_partial, taken) come from the Run.
        return getattr(self._run, name)

    def step(
        self,
        name: str,
        action: Callable[[StepKey], Any],
        *,
        safe_to_repeat: bool = False,
        reconcile: Reconciler | None = None,
        timeout: float | None = None,
    ) -> Any:
        """:meth:`Run.step`, blocking."""
        return self._trampoline.run(
            self._run.step(
                name, action, safe_to_repeat=safe_to_repeat, reconcile=reconcile, timeout=timeout
            )
        )

    def check_cancel(self) -> None:
        """:meth:`Run.check_cancel`, blocking."""
        self._trampoline.run(self._run.check_cancel())

    def progress(self, **fields: Any) -> None:
        """:meth:`Run.progress`, blocking."""
        self._trampoline.run(self._run.progress(**fields))

    def next_input(self, name: str | None = None) -> Input | None:
        """:meth:`Run.next_input`, blocking."""
        return self._trampoline.run(self._run.next_input(name))

    def wait_input(
        self, name: str | None = None, *, timeout: float, poll_interval: float = 0.5
    ) -> Input | None:
        """:meth:`Run.wait_input`, blocking."""
        return self._trampoline.run(
            self._run.wait_input(name, timeout=timeout, poll_interval=poll_interval)
        )


__all__ = [
    "Input",
    "Run",
    "StatewrightError",
    "StepKey",
    "SyncRun",
    "describe",
    "is_async",
]
