"""The REST API under ``/v1``: thin translations of HTTP into :class:`~statewright.access.Access`
calls. Validation beyond the request shape (payload schemas, legal transitions, versions)
is the engine's; its typed errors become JSON errors in :mod:`statewright.http.errors`.

Every POST that changes a workflow takes an ``Idempotency-Key`` header. A retry with the same
key (after a timeout, a dropped connection, a 503 ``outcome_unknown``) applies nothing twice:
it answers ``200`` with the workflow as it is now and ``Idempotent-Replayed: true``. The same
key with another request is refused (409 ``idempotency_key_reused``).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Body, Header, Path, Query, Request, Response

from statewright import paging
from statewright.access import Access
from statewright.engine.workflow_type import Applied, NotApplied
from statewright.http import longpoll
from statewright.http.deps import AccessDep, KnownQuery
from statewright.http.errors import IDEMPOTENCY_KEY, REPLAYED
from statewright.http.inputs import (
    IDEMPOTENCY_KEY_PATTERN,
    ApprovalIn,
    CancelIn,
    ContextPatchIn,
    EventIn,
    InputIn,
    ResolveAppliedIn,
    ResolveNotAppliedIn,
    ResumeIn,
    StartIn,
    not_null,
)
from statewright.http.jsonbody import JSONBody
from statewright.http.pages import budgeted, response
from statewright.http.schemas import (
    ErrorOut,
    EventNotApplied,
    EventOut,
    HistoryPage,
    InputPosted,
    StepOut,
    StepPage,
    WorkflowList,
    WorkflowOut,
)
from statewright.http.search import Where, search_of
from statewright.ids import ID_PATTERN, REF_PATTERN
from statewright.types import (
    StepRecord,
    TransitionRecord,
    WorkflowFilter,
    WorkflowRow,
)
from statewright.views import step_view

log = logging.getLogger("statewright.http")

_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorOut, "description": text}
    for status, text in {
        401: "No or unknown API token (code unauthorized).",
        403: "The caller's roles do not allow it (code forbidden).",
        404: "Unknown workflow, type, state or step (workflow_not_found, "
        "unknown_workflow_type, unknown_state, step_not_found).",
        409: "Illegal transition, version conflict, id taken by another type, finished "
        "workflow, an Idempotency-Key used for another request, or an operator action that "
        "does not fit the workflow now, or a cursor no page returned (illegal_transition, "
        "version_conflict, workflow_exists, workflow_finished, idempotency_key_reused, "
        "lease_lost, workflow_busy, step_done, step_unresolved, steps_would_rerun, "
        "invalid_cursor; workflow_pruned: a start of the id of a workflow pruned since).",
        422: "Malformed request or payload, or a JSON value nested deeper than the engine "
        "takes (invalid_input, invalid_payload, value_too_deep).",
        503: "The store is unavailable and nothing was changed (store_error), or the "
        "connection broke after the write was sent and it may have been applied "
        "(outcome_unknown: retry with the same Idempotency-Key).",
    }.items()
}

# The same, for operations whose success is not JSON: FastAPI would document a ``model`` under
# the operation's own media type, but errors are always JSON.
_JSON_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {
        "description": r["description"],
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}},
    }
    for status, r in _ERRORS.items()
}


router = APIRouter(prefix="/v1", responses=_ERRORS, dependencies=[KnownQuery])
MAX_OFFSET = 10_000
"""Listings skip at most this many with ``offset``: deeper pages need a cursor."""
PageLimit = Annotated[int, Query(ge=1, le=1000, description="At most this many (1-1000).")]
Cursor = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=paging.MAX_CURSOR,
        pattern=r"^[A-Za-z0-9_-]+$",
        description="`next_cursor` of the previous page, as it was returned (one that no "
        "page returned: 409 invalid_cursor).",
        json_schema_extra=not_null,
    ),
]
WorkflowId = Annotated[
    str,
    Path(
        pattern=REF_PATTERN,
        description="The workflow's id (a caller that sees every tenant may give a "
        "tenant-qualified id, `tenant:id`).",
    ),
]
StepName = Annotated[
    str, Path(min_length=1, max_length=200, description="The step's name (``run.step``).")
]
IdempotencyKey = Annotated[
    str | None,
    Header(
        alias=IDEMPOTENCY_KEY,
        pattern=IDEMPOTENCY_KEY_PATTERN,
        description="Makes the request safe to retry: a retry with the same key applies "
        f"nothing twice and answers 200 with `{REPLAYED}: true`; the same key with another "
        "request is refused (409 idempotency_key_reused). 1-255 printable ASCII characters, "
        "no spaces; unique per workflow (per tenant for a start without an id).",
        json_schema_extra=not_null,
    ),
]
ResolveIn = Annotated[ResolveAppliedIn | ResolveNotAppliedIn, Body(discriminator="verdict")]

_REPLAYED_HEADER = {
    REPLAYED: {
        "description": "`true` when this answers a retry of a request already applied under "
        "the same Idempotency-Key (nothing was applied now).",
        "schema": {"type": "string", "enum": ["true"]},
    }
}


def _replay_doc(text: str, model: type[Any] = WorkflowOut) -> dict[int | str, dict[str, Any]]:
    """``responses`` documenting a 200 that may be a replay."""
    return {200: {"model": model, "description": text, "headers": _REPLAYED_HEADER}}


_REPLAY = {REPLAYED: "true"}


def _view(access: Access, row: WorkflowRow) -> dict[str, Any]:
    return access.view(row) | {
        "stuck": access.is_stuck(row),
        "operator_actions": access.operator_actions(row),
    }


def _step(access: Access, rec: StepRecord) -> dict[str, Any]:
    """A step as the caller reads it: its error names workflows by the caller's ids (its
    ``key`` stays the one external systems were given)."""
    view = step_view(rec)
    if view["error"] is not None:
        view["error"] = access.public_text(view["error"])
    return view


def _body(content: Any, status_code: int = 200, *, replayed: bool = False) -> JSONBody:
    """A response built from a view (see :mod:`statewright.http.jsonbody`)."""
    if replayed:
        return JSONBody(content, 200, headers=_REPLAY)
    return JSONBody(content, status_code)


@router.post(
    "/workflows",
    response_model=WorkflowOut,
    status_code=201,
    summary="Start a workflow (idempotent with a caller-chosen id or an Idempotency-Key)",
    responses=_replay_doc(
        "It existed already (the same id), or this retries a start made with the same "
        "Idempotency-Key (then without an id the key names the workflow)."
    ),
)
async def start_workflow(body: StartIn, access: AccessDep, key: IdempotencyKey = None) -> Response:
    started = await access.start(
        body.type, body.input, workflow_id=body.id, tenant=body.tenant, idempotency_key=key
    )
    created = started.created
    view = _view(access, started.row)
    return _body(view, 201 if created else 200, replayed=not created and key is not None)


@router.get(
    "/workflows",
    response_model=WorkflowList,
    summary="List workflows by type, state, age and search attributes, oldest in state first",
    description="A page at a time, in (time entered the state, id) order: pass `next_cursor` "
    "as `cursor` for the next page (each page costs what the first does). `offset` still "
    f"works up to {MAX_OFFSET:,} (counted after `cursor`, when both are given) but reads "
    "and drops what it skips: page with `cursor`.",
)
async def list_workflows(
    access: AccessDep,
    type: Annotated[str | None, Query(max_length=200, json_schema_extra=not_null)] = None,
    state: Annotated[str | None, Query(max_length=200, json_schema_extra=not_null)] = None,
    terminal: Annotated[bool | None, Query(json_schema_extra=not_null)] = None,
    older_than: Annotated[
        float | None,
        Query(
            ge=0,
            le=1e9,
            description="Seconds in the current state, at least.",
            json_schema_extra=not_null,
        ),
    ] = None,
    tenant: Annotated[str | None, Query(pattern=ID_PATTERN, json_schema_extra=not_null)] = None,
    limit: PageLimit = 100,
    offset: Annotated[
        int,
        Query(
            ge=0,
            le=MAX_OFFSET,
            description=f"Skip this many (at most {MAX_OFFSET:,}); page with `cursor` instead.",
        ),
    ] = 0,
    cursor: Cursor = None,
    where: Where = None,
) -> Response:
    before = None if older_than is None else access.now() - older_than
    filtered = WorkflowFilter(
        search=search_of(where),
        type=type,
        state=state,
        terminal=terminal,
        tenant=tenant,
        entered_before=before,
        offset=offset,
        after=None if cursor is None else paging.workflow_after(cursor),
    )
    skip = offset

    async def fetch(
        after: tuple[float, str] | None, n: int
    ) -> list[tuple[tuple[float, str], dict[str, Any]]]:
        # A chunk at a time (each row read holds its whole context); the offset skips once.
        nonlocal skip
        chunk = dataclasses.replace(filtered, after=after, offset=skip, limit=n)
        rows = await access.list_workflows(chunk)
        skip = 0
        return [((r.state_entered_at, r.id), _view(access, r)) for r in rows]

    page = await budgeted(fetch, filtered.after, _first, _second, limit, None)
    following = paging.encode(*page.cursor) if page.more and page.cursor else None
    return await response(page, {"limit": limit, "offset": offset, "next_cursor": following})


@router.get(
    "/workflows/{workflow_id}",
    response_model=WorkflowOut,
    summary="A workflow: state, summary, allowed events; or, long-polling, once it moves",
    description="With its parent (`parent`, `parent_key`) when another workflow started it, "
    "and how many children it started and how many of them ended (`children`; the children "
    "themselves: GET /v1/workflows/{id}/children). With `wait_for_state` and/or "
    "`after_version`, answers once the workflow is in one of those states or moved past "
    "that version, or is finished, or `timeout` passes (capped by the server): then with "
    "`reached`, `timed_out` and `waited`; a timeout is never an error.",
    openapi_extra={"parameters": longpoll.PARAMETERS},
)
async def get_workflow(workflow_id: WorkflowId, access: AccessDep, request: Request) -> Response:
    waited = None
    wait = longpoll.asked(request)
    if wait is None:
        row = await access.get(workflow_id)
    else:
        waited = await longpoll.wait(request, access, workflow_id, wait)
        if waited is None:
            return Response(status_code=499)  # the client went away: nobody reads this
        row = waited.row
    view = _view(access, row)
    # Parked for a step's unknown outcome: which step (from the ledger), and so which action.
    unresolved = await access.unresolved_steps(row)
    if unresolved is not None:
        view["unresolved_steps"] = unresolved
        view["operator_actions"] = access.operator_actions(row, bool(unresolved))
    # What a parent waits for: its children counted from one page of them, never all.
    counts = await access.child_counts(row)
    view["children"] = None if counts is None else counts.to_dict()
    if (used := await access.usage(row)) is not None:  # its agents' tokens and cost
        view["usage"] = used
    if waited is not None:
        view |= waited.fields()
    return _body(view)


@router.get(
    "/workflows/{workflow_id}/context",
    response_model=dict[str, Any],
    summary="A workflow's full context",
    description="The keys its type redacts are left out unless the caller has the operator "
    "or admin role (as from every other read: summary, history, steps, stream).",
)
async def get_context(workflow_id: WorkflowId, access: AccessDep) -> Response:
    return _body(access.context(await access.get(workflow_id)))


@router.patch(
    "/workflows/{workflow_id}/context",
    response_model=WorkflowOut,
    summary="Operators: set context keys by hand, as one logged transition",
    description="A shallow merge of `patch` into the context, logged as a `$patch_context` "
    "transition with the caller as actor and the reason as its payload; the state stays, and "
    "a state with a handler runs it again. Needs the operator or admin role. An event's own "
    "data reaches the context through the event's declared `assign` actions instead.",
    responses=_replay_doc("The workflow after the patch (or as it is now, for a retry)."),
)
async def patch_context(
    workflow_id: WorkflowId,
    body: ContextPatchIn,
    access: AccessDep,
    key: IdempotencyKey = None,
) -> Response:
    row = await access.patch_context(
        workflow_id,
        body.patch,
        reason=body.reason,
        expected_version=body.expected_version,
        idempotency_key=key,
    )
    return _body(_view(access, row))


@router.post(
    "/workflows/{workflow_id}/events",
    response_model=EventOut | EventNotApplied,
    summary="Fire an event",
    description="With `if_allowed=true`, an event the workflow's state does not allow now "
    "(no transition from it, a finished workflow, no guard passed) is not an error: 200 with "
    "the workflow as it is (its `state` and `allowed_events` among its fields, the same shape "
    "as when applied), `applied: false` and the `refusal` (the event and why); nothing changes "
    "(it is not counted as a rejected transition). An unknown event, an invalid payload, a "
    "version conflict or a role that may not fire the event are refused either way.",
    responses=_replay_doc(
        "The workflow after the event (or as it is now, for a retry), `applied: true`; or, "
        "with `if_allowed=true`, `applied: false` when the state did not allow it.",
        EventOut | EventNotApplied,  # type: ignore[arg-type]
    ),
)
async def send_event(
    workflow_id: WorkflowId,
    body: EventIn,
    access: AccessDep,
    key: IdempotencyKey = None,
    if_allowed: Annotated[
        bool,
        Query(
            description="Answer 200 `applied: false` instead of 409 illegal_transition when "
            "the workflow's state does not allow the event now (late webhooks, duplicate "
            "callbacks)."
        ),
    ] = False,
) -> Response:
    sent = await access.send(
        workflow_id,
        body.event,
        body.payload,
        expected_version=body.expected_version,
        idempotency_key=key,
        if_allowed=if_allowed,
    )
    view = _view(access, sent.row)
    if not sent.applied:  # the same shape: the workflow, applied: false and why
        why = {"event": body.event, "reason": sent.refusal and sent.refusal.reason}
        return _body(view | {"applied": False, "refusal": why})
    return _body(view | {"applied": True}, replayed=sent.replayed)


@router.get(
    "/workflows/{workflow_id}/history",
    response_model=HistoryPage,
    summary="The workflow's transition log, a page at a time",
    description="In version order. For the next page pass `next_cursor` (the last entry's "
    "version) as `after`.",
)
async def history(
    workflow_id: WorkflowId,
    access: AccessDep,
    after: Annotated[
        int,
        Query(ge=0, le=2**31 - 1, description="Only entries after this version."),
    ] = 0,
    limit: PageLimit = 100,
) -> Response:
    row = await access.get(workflow_id)  # (and another tenant's does not exist)

    async def fetch(version: int, n: int) -> list[TransitionRecord]:
        return await access.history(workflow_id, version, n, row=row)

    page = await budgeted(fetch, after, lambda r: r.version, access.transition_view, limit)
    return await response(page, {"next_cursor": str(page.cursor) if page.more else None})


@router.get(
    "/workflows/{workflow_id}/steps",
    response_model=StepPage,
    summary="The workflow's step ledger, a page at a time",
    description="In (started_at, key) order. A step run again while you page moves to its "
    "new start: it may show up twice, never not at all.",
)
async def steps(
    workflow_id: WorkflowId, access: AccessDep, cursor: Cursor = None, limit: PageLimit = 100
) -> Response:
    start = None if cursor is None else paging.step_after(cursor)  # (a bad one: 422 first)
    row = await access.get(workflow_id)

    async def fetch(after: tuple[float, str] | None, n: int) -> list[StepRecord]:
        return await access.steps(workflow_id, after, n, row=row)

    page = await budgeted(
        fetch, start, lambda s: (s.started_at, s.key), lambda s: _step(access, s), limit
    )
    last = page.cursor
    following = paging.step_cursor(*last) if page.more and last is not None else None
    return await response(page, {"next_cursor": following})


@router.post(
    "/workflows/{workflow_id}/cancel",
    response_model=WorkflowOut,
    summary="Cancel (reaches a running step)",
    responses=_replay_doc(
        "Cancelled, or the cancel was handed to the worker running the workflow "
        "(cancel_requested); or, for a retry, the workflow as it is now."
    ),
)
async def cancel(
    workflow_id: WorkflowId,
    body: CancelIn,
    access: AccessDep,
    key: IdempotencyKey = None,
) -> Response:
    cancelled = await access.cancel(workflow_id, reason=body.reason, idempotency_key=key)
    return _body(_view(access, cancelled.row), replayed=cancelled.replayed)


@router.post(
    "/workflows/{workflow_id}/inputs",
    response_model=InputPosted,
    status_code=201,
    summary="Post an input to the workflow's inbox",
    description="For a handler that waits for it. 409 `input_not_expected` (nothing "
    "written) when no handler would ever read it: neither the workflow's state nor any "
    "state after it has one (known when this service registers the type's handlers).",
    responses=_replay_doc(
        "A retry of an input already posted with the same Idempotency-Key: that input.",
        InputPosted,
    ),
)
async def post_input(
    workflow_id: WorkflowId,
    body: InputIn,
    access: AccessDep,
    key: IdempotencyKey = None,
) -> Response:
    posted = await access.post_input(workflow_id, body.name, body.payload, idempotency_key=key)
    return _body({"id": posted.item.id}, 201, replayed=not posted.created)


@router.post(
    "/approvals",
    response_model=WorkflowOut,
    summary="Approval callback: approve or deny a paused workflow",
    responses=_replay_doc("The workflow after the decision (or as it is now, for a retry)."),
)
async def approval(body: ApprovalIn, access: AccessDep, key: IdempotencyKey = None) -> Response:
    decided = await access.decide(
        body.workflow_id,
        body.decision == "approve",
        approver=body.approver,
        comment=body.comment,
        expected_version=body.expected_version,
        idempotency_key=key,
    )
    return _body(_view(access, decided.row), replayed=decided.replayed)


@router.post(
    "/workflows/{workflow_id}/steps/{step}/resolve",
    response_model=StepOut,
    summary="Operators: answer for a step whose outcome is unknown, then resume the workflow",
    description="`applied` with the result the external system holds (the step returns it "
    "from now on), or `not_applied` (the step is safe to run again). A parked workflow is "
    "made due at once. Needs the operator or admin role; refused (409) for a step that is "
    "done, or while a worker holds the workflow.",
)
async def resolve_step(
    workflow_id: WorkflowId, step: StepName, body: ResolveIn, access: AccessDep
) -> Response:
    verdict = Applied(body.result) if isinstance(body, ResolveAppliedIn) else NotApplied()
    record = await access.resolve_step(workflow_id, step, verdict, reason=body.reason)
    return _body(_step(access, record))


@router.post(
    "/workflows/{workflow_id}/resume",
    response_model=WorkflowOut,
    summary="Operators: make a parked workflow run its state's handler again",
    description="Its finished steps return their results; the failure counters are kept. "
    "Needs the operator or admin role; refused (409) for a finished workflow, while a "
    "worker holds it, or (`step_unresolved`) while it is parked because a step's outcome is "
    "unknown: it would park again; resolve the step instead (or pass `reconcile: true` to "
    "have its reconcile hook asked again).",
)
async def resume(workflow_id: WorkflowId, body: ResumeIn, access: AccessDep) -> Response:
    row = await access.resume(workflow_id, reason=body.reason, reconcile=body.reconcile)
    return _body(_view(access, row))


K = TypeVar("K")
V = TypeVar("V")


def _first(pair: tuple[K, V]) -> K:
    return pair[0]


def _second(pair: tuple[K, V]) -> V:
    return pair[1]
