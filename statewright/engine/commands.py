"""The commands that move workflows: start, send an event, approve or deny, cancel, post an
input. Functions of the :class:`~statewright.engine.runtime.Runtime`; the engine forwards to
them, and so do the surfaces (through :class:`~statewright.access.Access`).
"""

from __future__ import annotations

import hashlib
import logging
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from statewright import ids
from statewright.definition.machine import Machine
from statewright.engine import cancel as cancelling
from statewright.engine import search
from statewright.engine.hooks import TransitionEvent
from statewright.engine.input_schema import check_input
from statewright.engine.nesting import start_timers
from statewright.engine.reads import get
from statewright.engine.runtime import Runtime
from statewright.engine.tracecontext import capture as capture_trace
from statewright.engine.transitions import (
    Dispatched,
    Fire,
    run_at_for,
    same_json,
)
from statewright.errors import (
    ActionFailed,
    IdempotencyKeyReused,
    InputNotExpected,
    InvalidInput,
    UnknownWorkflowType,
    WorkflowExists,
    WorkflowPruned,
)
from statewright.store.protocol import ReadModel
from statewright.types import (
    InboxItem,
    NewWorkflow,
    ParentLink,
    WorkflowRow,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Started:
    """What a start did: the workflow (``row``) and whether this call created it
    (``created``; False when it existed already: the same id, or a retry with the same
    idempotency key)."""

    row: WorkflowRow
    created: bool


@dataclass(frozen=True)
class Posted:
    """What posting an input did: the input (``item``) and whether this call posted it
    (``created``; False for a retry with the same idempotency key)."""

    item: InboxItem
    created: bool


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


async def start(
    rt: Runtime,
    workflow_type: str,
    input: Mapping[str, Any] | None = None,
    *,
    workflow_id: str | None = None,
    actor: str = "system",
    tenant: str = "default",
    idempotency_key: str | None = None,
    parent: ParentLink | None = None,
) -> Started:
    """Start a workflow in the machine's initial state; ``input`` becomes its context.
    Returns :class:`Started`: the workflow (``.row``) and whether this call created it
    (``.created``; False when it existed already).

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
    wtype = rt.registry.type_of(workflow_type)
    if input is not None and not isinstance(input, Mapping):
        raise InvalidInput(f"input must be a JSON object, got {type(input).__name__}")
    rt.limits.check(dict(input or {}), "input")
    if wtype.input_validator is not None:
        check_input(wtype.name, wtype.input_validator, input or {})
    check_idempotency_key(idempotency_key)
    ids.check_id(tenant, "tenant")
    if workflow_id is None and idempotency_key is not None:
        workflow_id = id_for_key(tenant, idempotency_key)
    if workflow_id is None:
        workflow_id = uuid.uuid4().hex
    else:
        # A bare id, or one qualified by this tenant (statewright.ids).
        ids.check_ref(workflow_id, tenant)
    now = rt.clock.now()
    machine = wtype.machine
    initial = machine.initial
    context = started_context(rt, machine, dict(input or {}))
    new = NewWorkflow(
        id=workflow_id,
        type=wtype.name,
        machine_version=wtype.version,
        state=initial.name,
        context=context,
        actor=actor,
        at=now,
        terminal=initial.terminal,
        run_at=run_at_for(wtype, initial, now),
        timers=start_timers(machine, initial.name, now),
        tenant=tenant,
        idempotency_key=idempotency_key,
        trace=capture_trace(),  # the caller's span, if any: the worker's spans join it
        parent=parent,  # a child's (Run.start_child): its parent checked as it is created
        search=search.attributes(wtype.search_attributes, context)
        if wtype.search_attributes
        else None,
    )
    try:
        row, created = await rt.store.create_workflow(new)
    except WorkflowPruned as exc:
        if idempotency_key is None:
            raise
        raise WorkflowPruned(exc.workflow_id, idempotency_key) from None
    rt.transitions.rows.put(row)
    if (
        row.type != wtype.name
        or row.tenant != tenant
        or (parent is not None and row.parent != parent.id)
    ):
        # Another tenant's id must not leak its type: report it as taken, nothing more.
        theirs = row.type if row.tenant == tenant else "another tenant's workflow"
        raise WorkflowExists(workflow_id, theirs, wtype.name)
    if not created and idempotency_key is not None:
        [first] = await rt.store.history(workflow_id, limit=1)
        if not same_json(first.payload, dict(new.context)):
            raise IdempotencyKeyReused(workflow_id, idempotency_key, "a start with another input")
    if created:
        rt.observers.transitioned(TransitionEvent(None, row, "$start", actor))
    return Started(row, created)


def started_context(rt: Runtime, machine: Machine, context: dict[str, Any]) -> dict[str, Any]:
    """A new workflow's context: its input, updated by the ``entry`` actions of the states
    its start enters. The start's log entry stores this whole context as its payload, so
    replay starts from it and never runs them again.

    Raises ActionFailed (an action failed, or its update breaks the engine's limits).
    """
    patch = machine.started(context)
    if patch is None:
        return context
    try:
        rt.limits.check(patch, "context update of '$start'")
    except InvalidInput as exc:
        raise ActionFailed("$start", "entry", exc.message) from None
    return {**context, **patch}


async def send(
    rt: Runtime,
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
    """Fire ``event`` on a workflow. Returns :class:`Dispatched`: the workflow after the
    transition (``.row``), whether this was an idempotent retry (``.replayed``) and, with
    ``if_allowed``, whether it was applied (``.applied``; if not, ``.refusal`` says why: its
    ``reason``, ``state`` and ``allowed`` events).

    With ``idempotency_key``, a retry of a send already applied (same key, event and
    payload) applies nothing and returns the workflow as it is now; use it whenever a
    send may be retried after an ambiguous failure (:class:`OutcomeUnknown`).

    With ``if_allowed``, an event the workflow's state does not allow *now* (no edge from
    it, a terminal state, no guard passed; confirmed on a fresh read) returns the row
    unchanged instead of raising IllegalTransition: for late webhooks and duplicate
    callbacks. It is counted (``statewright_events_not_applied``) and logged, not
    recorded as a rejected transition. An unknown event, an invalid payload, a version
    conflict or an unknown workflow still raise.

    ``row``: a fresh read of the workflow the caller already made (saves a read).

    Raises:
        WorkflowNotFound, IllegalTransition, InvalidPayload, VersionConflict (the row
        moved since ``expected_version``), IdempotencyKeyReused (the key was used for
        another event or payload), OutcomeUnknown (the connection broke after the write
        left: retry with the same key), StoreError (nothing was changed).
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
    return await rt.transitions.send(workflow_id, fire, expected_version=expected_version, row=row)


async def approve(
    rt: Runtime,
    workflow_id: str,
    approver: str,
    comment: str | None = None,
    *,
    idempotency_key: str | None = None,
) -> Dispatched:
    """Fire the type's approval event with the approver as actor (see :func:`decide`)."""
    return await decide(
        rt, workflow_id, True, approver=approver, comment=comment, idempotency_key=idempotency_key
    )


async def deny(
    rt: Runtime,
    workflow_id: str,
    approver: str,
    comment: str | None = None,
    *,
    idempotency_key: str | None = None,
) -> Dispatched:
    """Fire the type's denial event with the approver as actor (see :func:`decide`)."""
    return await decide(
        rt, workflow_id, False, approver=approver, comment=comment, idempotency_key=idempotency_key
    )


async def decide(
    rt: Runtime,
    workflow_id: str,
    approve: bool,
    *,
    approver: str | None = None,
    comment: str | None = None,
    actor: str | None = None,
    expected_version: int | None = None,
    idempotency_key: str | None = None,
    row: WorkflowRow | None = None,
) -> Dispatched:
    """Fire the approval (``approve=True``) or denial event, payload ``{approver, comment}``.
    Returns :class:`Dispatched` (the workflow is ``.row``; ``.replayed`` for a retry).

    ``actor`` (default: the approver) is who the log records as firing it, e.g. the
    service that relayed the decision; ``approver`` (default: the actor) is the person who
    decided. Without ``expected_version`` the decision applies to the workflow as read
    first (``row``, when the caller has just read it).
    """
    payload = decision_payload(actor if approver is None else approver, comment)
    if row is None:
        row = await get(rt, workflow_id)
    wtype = rt.registry.type_of(row.type, row.machine_version)
    # With a key, a retry whose first attempt moved the version still replays: the key
    # is looked up before the version is compared.
    return await send(
        rt,
        workflow_id,
        wtype.approve_event if approve else wtype.deny_event,
        payload,
        actor=actor or payload["approver"],
        expected_version=row.version if expected_version is None else expected_version,
        idempotency_key=idempotency_key,
        row=row,
    )


async def cancel(
    rt: Runtime,
    workflow_id: str,
    *,
    reason: str,
    actor: str = "system",
    idempotency_key: str | None = None,
    expected_version: int | None = None,
    if_allowed: bool = False,
) -> Dispatched:
    """Cancel a workflow: fire its type's ``cancel_event`` with ``{"reason": reason}``.
    Returns :class:`Dispatched`: the workflow (``.row``) and whether this was an idempotent
    retry (``.replayed``: the key's cancel fired already, or is pending with the worker).

    When no worker holds the workflow the event fires at once (IllegalTransition if the
    current state has no edge for it). When a worker holds it, the request is recorded
    (``cancel`` on the returned row, still in its state) and the worker delivers it to
    the running handler, which may save partial results; the worker then fires the event
    as ``actor`` (carrying ``idempotency_key``).

    With ``expected_version``, refused (VersionConflict) unless the workflow is still at it,
    or the key's cancel was made already. With ``if_allowed``, a state that does not allow
    the cancel now (finished, no edge) is no error: ``applied`` False and ``refusal`` says
    why, nothing changed, as for :func:`send`.

    Raises:
        WorkflowNotFound, IllegalTransition, InvalidPayload, InvalidInput,
        IdempotencyKeyReused, StoreError.
    """
    return await cancelling.cancel(
        rt,
        workflow_id,
        reason,
        actor,
        check_idempotency_key(idempotency_key),
        expected_version,
        if_allowed,
    )


async def post_input(
    rt: Runtime,
    workflow_id: str,
    name: str,
    payload: Mapping[str, Any],
    *,
    idempotency_key: str | None = None,
    row: WorkflowRow | None = None,
) -> Posted:
    """Post an external input into a workflow's inbox. Returns :class:`Posted`: the input
    (``.item``, its id ``.item.id``) and whether this call posted it (``.created``; False
    for a retry with an idempotency key already used for the same name and payload).

    A handler takes it with ``run.wait_input`` / ``run.next_input``; it is consumed by
    the transition that ends that handler run (a crash before it delivers it again). A
    workflow idle in a state with a handler is made due, so its handler runs now.

    ``row``: a fresh read of the workflow the caller already made (saves a read).

    Raises WorkflowNotFound, WorkflowFinished (a terminal workflow takes no inputs),
    InputNotExpected (no handler would ever read it: neither the workflow's state nor any
    state reachable from it has one, when this process knows the type's handlers:
    :meth:`WorkflowType.takes_inputs`), InvalidInput,
    IdempotencyKeyReused.
    """
    if not isinstance(name, str) or not _EVENT.fullmatch(name):
        raise InvalidInput(f"invalid input name {name!r}")
    if not isinstance(payload, Mapping):
        raise InvalidInput("input payload must be a JSON object")
    rt.limits.check(dict(payload), f"payload of input {name!r}")
    check_idempotency_key(idempotency_key)
    if row is None:
        row = await get(rt, workflow_id)
    # Woken where the state may have a handler: decided like a transition's due time
    # (WorkflowType.has_work), so a process without the handlers wakes it too.
    wake: str | None = None
    if not row.terminal:
        try:
            wtype = rt.registry.type_of(row.type, row.machine_version)
            known, takes = wtype.has_work(row.state), wtype.takes_inputs(row.state)
        except UnknownWorkflowType:
            known = takes = True  # another deployment's type: its workers decide
        if not takes:  # no handler here or further on would ever read it
            earlier = None
            if idempotency_key is not None and isinstance(rt.store, ReadModel):
                # A retry of a post taken before the workflow moved on: answered with it.
                earlier = await rt.store.input_by_key(workflow_id, idempotency_key)
            if earlier is None:
                raise InputNotExpected(workflow_id, row.state, name)
        wake = row.state if known else None
    item, created = await rt.store.post_input(
        workflow_id,
        name,
        dict(payload),
        rt.clock.now(),
        idempotency_key=idempotency_key,
        wake_in_state=wake,
    )
    if not created and (item.name != name or not same_json(item.payload, dict(payload))):
        raise IdempotencyKeyReused(
            workflow_id, idempotency_key or "", f"input {item.name!r} #{item.id}"
        )
    return Posted(item, created)


def id_for_key(tenant: str, key: str) -> str:
    """The workflow id a start with an idempotency key and no id gets: derived from the
    tenant and the key, so every retry of that start names the same workflow."""
    digest = hashlib.sha256(f"{tenant}\x00{key}".encode()).hexdigest()
    return f"idem-{digest[:40]}"


def decision_payload(approver: str | None, comment: str | None) -> dict[str, Any]:
    """The payload of an approval or denial: ``{approver, comment?}``."""
    if not isinstance(approver, str) or not approver.strip():
        raise InvalidInput("an approval needs the approver's name")
    return {"approver": approver} | ({"comment": comment} if comment else {})
