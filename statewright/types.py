"""Rows and write requests shared by the store and the engine. Frozen dataclasses only."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

JSON = dict[str, Any]
R = TypeVar("R")


class _Factory:
    """The default of a field made by its ``default_factory`` (shown as dataclasses shows it)."""

    def __repr__(self) -> str:
        return "<factory>"


_NO_VALUE = _Factory()


def quick_init(cls: type[R]) -> type[R]:
    """Give a frozen dataclass an ``__init__`` that stores its fields straight into the new
    instance's ``__dict__``; everything else (frozen, equality, ``replace``) is unchanged.

    Why: the ``__init__`` that ``dataclass(frozen=True)`` writes calls ``object.__setattr__``
    once per field, 4.4 µs for a :class:`TransitionWrite` against 1 µs this way, and a
    worker builds several such records per state. Only for dataclasses whose fields are all
    ``init`` fields and that have no ``__post_init__``."""
    params: list[str] = []
    body: list[str] = []
    namespace: dict[str, Any] = {"_NO_VALUE": _NO_VALUE}
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"quick_init cannot build {cls.__name__}: it has a __post_init__")
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if not f.init:
            raise TypeError(f"quick_init cannot build {cls.__name__}.{f.name}: not an init field")
        name = f.name
        if f.default is not dataclasses.MISSING:
            namespace[f"_default_{name}"] = f.default
            params.append(f"{name}=_default_{name}")
        elif f.default_factory is not dataclasses.MISSING:
            namespace[f"_factory_{name}"] = f.default_factory
            params.append(f"{name}=_NO_VALUE")
            body.append(f"    if {name} is _NO_VALUE: {name} = _factory_{name}()")
        else:
            params.append(name)
        body.append(f"    d[{name!r}] = {name}")
    source = f"def __init__(self, {', '.join(params)}):\n    d = self.__dict__\n" + "\n".join(body)
    exec(source, namespace)  # as dataclasses itself writes __init__
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__annotations__ = {f.name: f.type for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    init.__annotations__["return"] = None
    cls.__init__ = init  # type: ignore[method-assign]
    return cls


StepStatus = Literal["executing", "done", "failed"]
StepOutcome = Literal["not_applied", "unknown"]
"""Of a failed step: ``not_applied`` (the error proves nothing happened: safe to run again)
or ``unknown`` (the call may have reached the other side: reconcile before running again)."""


@quick_init
@dataclass(frozen=True)
class Lease:
    """A worker's claim on a workflow: the worker and this claim's fencing token.

    The token grows with every claim of the workflow. Every write a worker makes for a claimed
    workflow carries its lease and is refused in the same statement once the lease is gone
    (broken by recovery, or taken by a newer claim), so a worker frozen past its lease can
    never overwrite what its successor did.
    """

    owner: str
    fence: int


@quick_init
@dataclass(frozen=True)
class CancelRequest:
    """A pending cancel request on a workflow (kept until the workflow ends)."""

    reason: str
    actor: str | None = None
    """Who asked (the cancel event's actor)."""
    at: float | None = None
    """When it was requested (requester's clock), if known."""
    version: int | None = None
    """The workflow's version when it was requested: a cancel event logged after it means
    the request was delivered (versions, unlike clocks, agree across hosts)."""
    idempotency_key: str | None = None
    """The requester's idempotency key; the cancel transition carries it."""


@quick_init
@dataclass(frozen=True)
class WorkflowRow:
    """The one durable row that holds a workflow's current state."""

    id: str
    type: str
    """The machine name the workflow runs."""
    machine_version: int
    """The definition version it was started with."""
    state: str
    context: JSON
    version: int
    """Number of transitions applied, the creation included; the compare-and-swap counter."""
    attempts: int
    """Consecutive transient failures in the current state (the retry counter)."""
    terminal: bool
    created_at: float
    updated_at: float
    state_entered_at: float
    next_due_at: float | None
    """When a worker should next look at it: a handler to run or a timer to fire."""
    lease_owner: str | None
    lease_expires_at: float | None
    last_error: str | None
    cancel: CancelRequest | None = None
    """A pending cancel request (cleared when the workflow ends)."""
    progress: JSON | None = None
    """The latest progress report of the current state's step (cleared on state change)."""
    tenant: str = "default"
    """The tenant the workflow belongs to (tokens of other tenants cannot see it)."""
    fence: int = 0
    """The fencing token of the latest claim (grows with every claim)."""
    total_attempts: int = 0
    """Failures over the workflow's whole life (``attempts`` resets on success; this never)."""
    parked: str | None = None
    """Why the workflow waits for an operator (e.g. ``step_outcome_unknown``); None if not."""
    trace: str | None = None
    """The W3C trace context (``traceparent``, ``tracestate``: a JSON object) of the last
    start or transition made inside a trace; a worker's handler span joins it (None: none)."""
    parent: str | None = None
    """The workflow that started this one as its child (None: none did)."""
    parent_key: str | None = None
    """The key the parent started it under (its id is ``<parent>.<key>``)."""
    has_children: bool = False
    """Whether it ever started a child workflow (set as the first child is created)."""

    @property
    def cancel_requested(self) -> str | None:
        """The reason of a pending cancel request, or None."""
        return None if self.cancel is None else self.cancel.reason

    @property
    def lease(self) -> Lease | None:
        """The lease as claimed (None when no worker holds the workflow)."""
        return None if self.lease_owner is None else Lease(self.lease_owner, self.fence)


@quick_init
@dataclass(frozen=True)
class TransitionRecord:
    """One entry of the append-only transition log."""

    seq: int
    workflow_id: str
    version: int
    from_state: str | None
    to_state: str
    event: str
    payload: JSON
    actor: str
    context_patch: JSON | None
    at: float
    idempotency_key: str | None = None
    """The client's idempotency key, when the event was sent with one."""
    messages: list[Any] | None = None
    """What the transition's handler emitted (``run.emit``): a list of ``{"topic", "body"}``,
    committed with the entry; None when none. Replay ignores it."""


@quick_init
@dataclass(frozen=True)
class StepRecord:
    """One entry of the step ledger (idempotent side effects)."""

    key: str
    workflow_id: str
    step: str
    status: StepStatus
    result: Any
    error: str | None
    attempts: int
    started_at: float
    finished_at: float | None
    outcome: StepOutcome | None = None
    """Of a failed step: whether its call may have taken effect (see :data:`StepOutcome`)."""
    fence: int | None = None
    """The fencing token of the claim that ran the latest attempt."""
    compensation: str | None = None
    """The name of the step's undo (``run.step(..., compensate=fn)``), run by a compensating
    transition once the step is done (see :mod:`statewright.engine.compensation`)."""


@quick_init
@dataclass(frozen=True)
class StepOpening:
    """What :meth:`~statewright.store.protocol.Store.step_open` found, or began."""

    record: StepRecord | None
    """The attempt it recorded *executing* (``begun``), else the ledger entry it found."""
    begun: bool
    cancel: CancelRequest | None
    """The workflow's pending cancel request (nothing was begun then)."""


@quick_init
@dataclass(frozen=True)
class StepFinish:
    """The outcome of one step attempt, to record in the ledger.

    Refused (nothing written) unless the ledger entry is still the same attempt
    (``attempt``) and *executing*: a late writer never overwrites a newer result. Shaped so a
    transition can carry it and commit it in its own transaction.
    """

    key: str
    attempt: int
    status: Literal["done", "failed"]
    result: Any = None
    error: str | None = None
    outcome: StepOutcome | None = None
    at: float = 0.0


@quick_init
@dataclass(frozen=True)
class TimerRecord:
    """A durable timer: fire ``event`` for the workflow at ``due_at``."""

    id: int
    workflow_id: str
    due_at: float
    event: str
    payload: JSON
    key: str | None = None
    """A scheduled timer's name, unique per workflow (None for a state's own timers)."""
    every: float | None = None
    """A recurring timer's interval in seconds (None: it fires once)."""
    keep: bool = False
    """It survives leaving the state it was armed in (cleared only at a terminal state)."""
    scheduled_by: str | None = None
    """Who scheduled it (``Engine.schedule``'s actor): its transition is logged as
    ``timer for <scheduled_by>``. None for the system's own (a state's, a handler's)."""


@quick_init
@dataclass(frozen=True)
class InboxItem:
    """An external input posted to a workflow."""

    id: int
    workflow_id: str
    name: str
    payload: JSON
    posted_at: float
    consumed_at: float | None
    idempotency_key: str | None = None


@quick_init
@dataclass(frozen=True)
class TimerSpec:
    """A timer to create as part of a transition (or a deferral, or on its own).

    A timer with a ``key`` replaces the workflow's pending timer of the same key.
    """

    due_at: float
    event: str
    payload: Mapping[str, Any] = field(default_factory=dict)
    key: str | None = None
    every: float | None = None
    """Recurring: the interval to re-arm it by after it fires (None: one-shot)."""
    keep: bool = False
    """Survive leaving the state (cleared only when the workflow reaches a terminal state)."""


@quick_init
@dataclass(frozen=True)
class ParentLink:
    """A child workflow's parent, as the child is created (see :attr:`NewWorkflow.parent`)."""

    id: str
    key: str
    """The child's key among the parent's children (its id is ``<parent id>.<key>``)."""
    lease: Lease | None = None
    """The parent's claim its handler starts the child under (None: not from a handler)."""


@quick_init
@dataclass(frozen=True)
class NewWorkflow:
    """Everything :meth:`Store.create_workflow` writes: the row and the first log entry."""

    id: str
    type: str
    machine_version: int
    state: str
    context: Mapping[str, Any]
    actor: str
    at: float
    terminal: bool = False
    run_at: float | None = None
    timers: tuple[TimerSpec, ...] = ()
    tenant: str = "default"
    idempotency_key: str | None = None
    """The client's key, stored with the ``$start`` log entry."""
    event: str = "$start"
    """The first log entry's event: ``$start``, or ``$fork`` for a workflow started from a
    past version of another."""
    payload: Mapping[str, Any] | None = None
    """The first log entry's payload (None: the context, as for ``$start``)."""
    steps: tuple[StepRecord, ...] = ()
    """Done steps written with it (a fork's copies of the steps its source had done), in the
    same transaction: no worker can run the new workflow before they are there."""
    trace: str | None = None
    """The caller's W3C trace context, stored on the row (see :attr:`WorkflowRow.trace`)."""
    fork_of: tuple[str, int] | None = None
    """A fork's source as it was read, ``(id, fence)``: the fork is created only if, in the
    same transaction, the source is still unleased at that fence (no worker claimed it since
    its steps were read, so none of them began meanwhile); otherwise WorkflowBusy."""
    parent: ParentLink | None = None
    """The workflow starting this one as its child: created only if, in the same
    transaction, that parent is there, not terminal and (for a worker's handler) still held
    by the lease it starts the child under; otherwise WorkflowNotFound, WorkflowFinished or
    LeaseLost, and nothing is written. An existing workflow of the id is returned as is."""
    search: Mapping[str, str] | None = None
    """Its search attributes (name -> canonical text; :mod:`statewright.engine.search`),
    written with it; None or empty: none."""


@quick_init
@dataclass(frozen=True)
class TransitionWrite:
    """One atomic transition: CAS on the row + log append + timer and lease changes.

    The store applies all of it in one transaction or none of it.
    """

    workflow_id: str
    expected_version: int
    from_state: str
    to_state: str
    event: str
    payload: Mapping[str, Any]
    actor: str
    at: float
    context: Mapping[str, Any]
    """The full context after the transition (stored on the row)."""
    context_patch: Mapping[str, Any] | None = None
    """What changed (stored in the log, so replay can rebuild ``context``)."""
    terminal: bool = False
    attempts: int = 0
    run_at: float | None = None
    """Set when the target state has a handler: the workflow is due for a worker then."""
    clear_timers: bool = True
    """Delete the workflow's pending timers (leaving a state cancels its timers): those not
    marked ``keep``, or all of them when the target is terminal."""
    fired_timer_id: int | None = None
    """The timer this transition consumes (deleted even when ``clear_timers`` is False)."""
    add_timers: tuple[TimerSpec, ...] = ()
    """Timers to arm, after the clearing: a keyed one replaces the pending timer of its key
    (which the clearing and ``cancel_timer_keys`` then leave alone). Keys are unique here."""
    cancel_timer_keys: tuple[str, ...] = ()
    """Keyed timers to delete (none of them is among ``add_timers``)."""
    release_lease: bool = True
    last_error: str | None = None
    guard: str | None = None
    """The name of the guard that chose the target, for the transition's record (its log line
    and span event); not stored."""
    consume_inbox_ids: tuple[int, ...] = ()
    """Inbox items this transition consumes, atomically (refused if one already was)."""
    lease: Lease | None = None
    """Fencing: apply only while this lease holds (a worker's write); None for others."""
    require_unleased: bool = False
    """Refuse (as a version conflict) while any worker holds the workflow."""
    total_attempts: int | None = None
    """The lifetime failure counter after the transition (None: unchanged)."""
    idempotency_key: str | None = None
    """The client's key, stored with the log entry (unique per workflow)."""
    machine_version: int | None = None
    """A migration's new machine version for the row (None: unchanged)."""
    step_finish: StepFinish | None = None
    """The outcome of the step the handler ran last (its *done* record), committed in this
    transaction: applied only if the transition is, and only while that attempt is still
    *executing* (else the whole write is refused, as for a lost lease)."""
    trace: str | None = None
    """The W3C trace context the transition was made in, stored on the row (None: the row's
    stays as it is)."""
    notice: TimerSpec | None = None
    """A child's end, for its parent (set only on a terminal transition of a workflow that
    has one): in the same transaction, armed on the parent as a one-shot timer due at once,
    replacing its pending timer of ``notice.key``, and the parent made due, unless the
    parent is gone or terminal (then nothing is armed). Exactly once, as the transition."""
    effects: tuple[TransactionalStep, ...] = ()
    """A handler's transactional steps (``run.transaction``): each ``fn(conn)`` runs in this
    write's transaction right after its compare-and-swap matched, in order; one raising rolls
    the whole write back (see :mod:`statewright.store.transactional`). The log entry's
    payload names them (``"$transactions"``)."""

    messages: tuple[Mapping[str, Any], ...] = ()
    """Messages emitted by the handler (``run.emit``, ``{"topic", "body"}`` each), stored
    with the log entry (NULL when none): they commit with the transition or not at all."""
    search: Mapping[str, str | None] | None = None
    """The search attributes this transition changes (name -> canonical text, None: the
    attribute is gone), written with it; None when it changes none (nothing extra is sent)."""


@dataclass(frozen=True)
class TransactionalStep:
    """User code writing the application's own rows in a transition's transaction
    (``run.transaction``): ``fn`` gets the store's connection; ``tables`` are the tables it
    writes, checked to be in the store's database when it was registered."""

    name: str
    fn: Any
    """``fn(conn)``: SQLite, a ``sqlite3.Connection`` (synchronous); PostgreSQL, a
    ``psycopg.AsyncConnection`` (it may return an awaitable, which is awaited)."""
    tables: tuple[str, ...] = ()


@quick_init
@dataclass(frozen=True)
class DeferWrite:
    """A write that keeps the workflow in its state (no log entry): count a failure and run
    the handler again later, go idle, or park for an operator. Releases the lease.

    ``next_due_at`` is merged with the pending timers (the earlier wins), so deferring never
    silences a timer: ``next_due_at IS NULL`` on the row always means "no timers".
    """

    workflow_id: str
    expected_version: int
    at: float
    attempts: int
    next_due_at: float | None = None
    last_error: str | None = None
    total_attempts: int | None = None
    """The lifetime failure counter after this write (None: unchanged)."""
    parked: str | None = None
    """Why it now waits for an operator (shown and counted), or None."""
    lease: Lease | None = None
    """Fencing, as for :class:`TransitionWrite`."""
    consume_inbox_ids: tuple[int, ...] = ()
    fired_timer_id: int | None = None
    """A timer consumed without a transition (a recurring timer whose event was refused)."""
    add_timers: tuple[TimerSpec, ...] = ()
    """Timers armed with it (a handler's schedules, a recurring timer re-armed), as for
    :attr:`TransitionWrite.add_timers`; merged into ``next_due_at`` like the others."""
    cancel_timer_keys: tuple[str, ...] = ()
    """Keyed timers to delete (none of them is among ``add_timers``)."""
    wake_input: tuple[str | None, tuple[int, ...]] | None = None
    """A handler suspended waiting for an input (:mod:`statewright.engine.suspend`): ``(name,
    taken)``. Due now if the inbox holds an unconsumed input of ``name`` (None: any) not
    among ``taken``: one posted while the run held the lease, whose post could not wake it."""


@quick_init
@dataclass(frozen=True)
class WorkflowFilter:
    """Filter for :meth:`Store.list_workflows`. ``None`` means no constraint."""

    type: str | None = None
    state: str | None = None
    terminal: bool | None = None
    tenant: str | None = None
    entered_before: float | None = None
    """Only workflows that entered their state before this time (age filter)."""
    limit: int = 100
    offset: int = 0
    entered_after: float | None = None
    """Only workflows that entered their state at or after this time (e.g. ended recently)."""
    min_attempts: int | None = None
    """Only workflows whose retry counter is at least this."""
    after: tuple[float, str] | None = None
    """Keyset paging: only workflows after this ``(state_entered_at, id)`` in the listing's
    order (pass the last row's of the previous page). Every page then costs what the first
    does, where ``offset`` reads and drops everything before it."""
    parked: bool = False
    """Only workflows parked for an operator (from their partial index)."""
    search: tuple[tuple[str, str], ...] = ()
    """Only workflows whose search attributes have all these ``(name, value)`` (exact match
    on the canonical text: :mod:`statewright.engine.search`)."""


StuckKey = tuple[str, str, float, str]
"""A stuck workflow's place in the stuck listing's order: ``(type, state, state_entered_at,
id)``."""


@quick_init
@dataclass(frozen=True)
class StuckCutoff:
    """Which workflows of one type in one state are stuck: those that entered the state before
    ``entered_before`` (None: none are, e.g. the state is terminal in that machine version).

    ``machine_version`` narrows it to the workflows of one version; None applies it to the
    versions of the type that have no cutoff of their own for the state (each version's
    definition may give the state another threshold).
    """

    type: str
    state: str
    entered_before: float | None
    machine_version: int | None = None


@quick_init
@dataclass(frozen=True)
class RejectionRecord:
    """One entry of the rejections log: an event the engine refused (illegal in the state, or
    a payload its schema rejects). Nothing else changed; this is for alerts and audits."""

    seq: int
    workflow_id: str
    type: str
    tenant: str
    state: str
    event: str
    code: str
    """The error's stable code (``illegal_transition``, ``invalid_payload``)."""
    actor: str
    message: str
    at: float


@quick_init
@dataclass(frozen=True)
class ScheduleRecord:
    """A cron schedule that starts workflows of one type (see
    :mod:`statewright.engine.schedules`)."""

    id: str
    type: str
    cron: str
    timezone: str
    catch_up: str
    """``latest`` (default), ``all`` or ``skip``: what a late worker does with missed ticks."""
    input: dict[str, Any]
    tenant: str
    paused: bool
    next_at: float
    """The next tick not yet fired (epoch seconds)."""
    created_at: float
    updated_at: float
    last_tick: float | None = None
    last_workflow_id: str | None = None
    last_error: str | None = None
    created_by: str | None = None
    """Who declared its definition: the workflows its ticks start are logged as started by
    ``schedule:<id> for <created_by>`` (``schedule:<id>`` when None: declared before it was
    kept, or by the Python API without an actor)."""


@quick_init
@dataclass(frozen=True)
class TypeLimit:
    """What a claim may hand out of one workflow type: at most ``max_concurrent`` leased at
    once (across every worker), at most ``max_per_second`` claims per second on average with
    bursts of ``burst`` (a token bucket kept in the store). None: no such limit."""

    max_concurrent: int | None = None
    max_per_second: float | None = None
    burst: float | None = None
