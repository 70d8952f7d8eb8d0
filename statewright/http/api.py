"""The REST API under ``/v1``: thin translations of HTTP into :class:`~statewright.access.Access`
calls. Validation beyond the request shape (payload schemas, legal transitions, versions)
is the engine's; its typed errors become JSON errors in :mod:`statewright.http.errors`.

Every POST that changes a workflow takes an ``Idempotency-Key`` header. A retry with the same
key (after a timeout, a dropped connection, a 503 ``outcome_unknown``) applies nothing twice:
it answers ``200`` with the workflow as it is now and ``Idempotent-Replayed: true``. The same
key with another request is refused (409 ``idempotency_key_reused``).
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Path, Query, Response
from fastapi.responses import PlainTextResponse

from statewright.access import Access
from statewright.definition.machine import Machine
from statewright.definition.render.mermaid import to_mermaid
from statewright.engine.workflow_type import Applied, NotApplied
from statewright.errors import StatewrightError
from statewright.http.deps import AccessDep, KnownQuery
from statewright.http.errors import IDEMPOTENCY_KEY, REPLAYED
from statewright.http.schemas import (
    ID_PATTERN,
    IDEMPOTENCY_KEY_PATTERN,
    ApprovalIn,
    CancelIn,
    ErrorOut,
    EventIn,
    EventInfo,
    InputIn,
    InputPosted,
    ResolveAppliedIn,
    ResolveNotAppliedIn,
    ResumeIn,
    StartIn,
    StateInfo,
    StepOut,
    StuckOut,
    TransitionOut,
    TransitionPage,
    TypeOut,
    WorkflowList,
    WorkflowOut,
    not_null,
)
from statewright.types import WorkflowFilter, WorkflowRow
from statewright.views import step_view, transition_view, workflow_view

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
        "does not fit the workflow now (illegal_transition, version_conflict, "
        "workflow_exists, workflow_finished, idempotency_key_reused, lease_lost, "
        "workflow_busy, step_done).",
        422: "Malformed request or payload (invalid_input, invalid_payload).",
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


class UnknownState(StatewrightError):
    """The machine has no such state."""

    code = "unknown_state"


router = APIRouter(prefix="/v1", responses=_ERRORS, dependencies=[KnownQuery])
WorkflowId = Annotated[str, Path(pattern=ID_PATTERN, description="The workflow's id.")]
TypeName = Annotated[str, Path(max_length=200, description="The workflow type (machine).")]
TypeVersion = Annotated[int | None, Query(ge=1, le=2**31 - 1, json_schema_extra=not_null)]
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


def _replayed(response: Response) -> None:
    response.status_code = 200
    response.headers[REPLAYED] = "true"


def _out(access: Access, row: WorkflowRow) -> WorkflowOut:
    stuck = access.engine.is_stuck(row)
    return WorkflowOut(**workflow_view(row, access.allowed_for(row)), stuck=stuck)


def _type_out(access: Access, machine: Machine) -> TypeOut:
    return TypeOut(
        name=machine.name,
        version=machine.version,
        description=machine.description,
        states=[
            StateInfo(
                name=s.name,
                description=s.description,
                terminal=s.terminal,
                initial=s.initial,
                stuck_after=s.stuck_after,
            )
            for s in machine.states.values()
        ],
        events=[
            EventInfo(
                name=e.name,
                description=e.description,
                roles=list(e.roles),
                approval=e.approval,
                payload_schema=None if e.payload_schema is None else dict(e.payload_schema),
                may_fire=access.principal.may_fire(e),
            )
            for e in machine.events.values()
        ],
    )


def _machine(access: Access, name: str, version: int | None) -> Machine:
    return access.engine.type_of(name, version).machine


@router.get("/types", summary="The registered workflow types")
async def list_types(access: AccessDep) -> list[TypeOut]:
    return [_type_out(access, t.machine) for t in access.engine.types]


@router.get("/types/{name}", summary="One workflow type: states, events and who may fire them")
async def get_type(access: AccessDep, name: TypeName, version: TypeVersion = None) -> TypeOut:
    return _type_out(access, _machine(access, name, version))


@router.get(
    "/types/{name}/diagram",
    summary="The machine as a Mermaid state diagram",
    response_class=PlainTextResponse,
    responses=_JSON_ERRORS,
)
async def type_diagram(
    access: AccessDep,
    name: TypeName,
    version: TypeVersion = None,
    current: Annotated[str | None, Query(max_length=200, json_schema_extra=not_null)] = None,
) -> str:
    machine = _machine(access, name, version)
    if current is not None and current not in machine.states:
        raise UnknownState(f"workflow type {name!r} has no state {current!r}", state=current)
    return to_mermaid(machine, current)


@router.post(
    "/workflows",
    status_code=201,
    summary="Start a workflow (idempotent with a caller-chosen id or an Idempotency-Key)",
    responses=_replay_doc(
        "It existed already (the same id), or this retries a start made with the same "
        "Idempotency-Key (then without an id the key names the workflow)."
    ),
)
async def start_workflow(
    body: StartIn, access: AccessDep, response: Response, key: IdempotencyKey = None
) -> WorkflowOut:
    row, created = await access.start(
        body.type, body.input, workflow_id=body.id, tenant=body.tenant, idempotency_key=key
    )
    if not created:
        response.status_code = 200
        if key is not None:
            _replayed(response)
    return _out(access, row)


@router.get("/workflows", summary="List workflows by type, state and age, oldest in state first")
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
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=10**9)] = 0,
) -> WorkflowList:
    before = None if older_than is None else access.engine.clock.now() - older_than
    rows = await access.list_workflows(
        WorkflowFilter(
            type=type,
            state=state,
            terminal=terminal,
            tenant=tenant,
            entered_before=before,
            limit=limit,
            offset=offset,
        )
    )
    return WorkflowList(items=[_out(access, r) for r in rows], limit=limit, offset=offset)


@router.get("/workflows/{workflow_id}", summary="A workflow: state, summary, allowed events")
async def get_workflow(workflow_id: WorkflowId, access: AccessDep) -> WorkflowOut:
    return _out(access, await access.get(workflow_id))


@router.get("/workflows/{workflow_id}/context", summary="A workflow's full context")
async def get_context(workflow_id: WorkflowId, access: AccessDep) -> dict[str, Any]:
    return (await access.get(workflow_id)).context


@router.post(
    "/workflows/{workflow_id}/events",
    summary="Fire an event",
    responses=_replay_doc("The workflow after the event (or as it is now, for a retry)."),
)
async def send_event(
    workflow_id: WorkflowId,
    body: EventIn,
    access: AccessDep,
    response: Response,
    key: IdempotencyKey = None,
) -> WorkflowOut:
    sent = await access.dispatch(
        workflow_id,
        body.event,
        body.payload,
        expected_version=body.expected_version,
        idempotency_key=key,
    )
    if sent.replayed:
        _replayed(response)
    return _out(access, sent.row)


@router.get("/workflows/{workflow_id}/history", summary="The workflow's transition log")
async def history(workflow_id: WorkflowId, access: AccessDep) -> list[TransitionOut]:
    return [TransitionOut(**transition_view(r)) for r in await access.history(workflow_id)]


@router.get("/workflows/{workflow_id}/steps", summary="The workflow's step ledger")
async def steps(workflow_id: WorkflowId, access: AccessDep) -> list[StepOut]:
    return [StepOut(**step_view(s)) for s in await access.steps(workflow_id)]


@router.post(
    "/workflows/{workflow_id}/cancel",
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
    response: Response,
    key: IdempotencyKey = None,
) -> WorkflowOut:
    cancelled = await access.cancel_ex(workflow_id, body.reason, idempotency_key=key)
    if cancelled.replayed:
        _replayed(response)
    return _out(access, cancelled.row)


@router.post(
    "/workflows/{workflow_id}/inputs",
    status_code=201,
    summary="Post an input to the workflow's inbox",
    responses=_replay_doc(
        "A retry of an input already posted with the same Idempotency-Key: that input.",
        InputPosted,
    ),
)
async def post_input(
    workflow_id: WorkflowId,
    body: InputIn,
    access: AccessDep,
    response: Response,
    key: IdempotencyKey = None,
) -> InputPosted:
    item, created = await access.put_input(
        workflow_id, body.name, body.payload, idempotency_key=key
    )
    if not created:
        _replayed(response)
    return InputPosted(id=item.id)


@router.post(
    "/approvals",
    summary="Approval callback: approve or deny a paused workflow",
    responses=_replay_doc("The workflow after the decision (or as it is now, for a retry)."),
)
async def approval(
    body: ApprovalIn, access: AccessDep, response: Response, key: IdempotencyKey = None
) -> WorkflowOut:
    decided = await access.decide_ex(
        body.workflow_id,
        body.decision == "approve",
        approver=body.approver,
        comment=body.comment,
        expected_version=body.expected_version,
        idempotency_key=key,
    )
    if decided.replayed:
        _replayed(response)
    return _out(access, decided.row)


@router.post(
    "/workflows/{workflow_id}/steps/{step}/resolve",
    summary="Operators: answer for a step whose outcome is unknown, then resume the workflow",
    description="`applied` with the result the external system holds (the step returns it "
    "from now on), or `not_applied` (the step is safe to run again). A parked workflow is "
    "made due at once. Needs the operator or admin role; refused (409) for a step that is "
    "done, or while a worker holds the workflow.",
)
async def resolve_step(
    workflow_id: WorkflowId, step: StepName, body: ResolveIn, access: AccessDep
) -> StepOut:
    verdict = Applied(body.result) if isinstance(body, ResolveAppliedIn) else NotApplied()
    record = await access.resolve_step(workflow_id, step, verdict, reason=body.reason)
    return StepOut(**step_view(record))


@router.post(
    "/workflows/{workflow_id}/resume",
    summary="Operators: make a parked workflow run its state's handler again",
    description="Its finished steps return their results; the failure counters are kept. "
    "Needs the operator or admin role; refused (409) for a finished workflow, or while a "
    "worker holds it.",
)
async def resume(workflow_id: WorkflowId, body: ResumeIn, access: AccessDep) -> WorkflowOut:
    return _out(access, await access.resume(workflow_id, reason=body.reason))


@router.get("/stuck", summary="Workflows past their state's stuck threshold, oldest first")
async def stuck(access: AccessDep) -> list[StuckOut]:
    return [
        StuckOut(workflow=_out(access, s.workflow), age=s.age, threshold=s.threshold)
        for s in await access.stuck()
    ]


@router.get("/transitions", summary="The transition log after a cursor, in commit order")
async def transitions(
    access: AccessDep,
    after: Annotated[int, Query(ge=0, le=2**62)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> TransitionPage:
    records = await access.transitions_since(after, limit)
    cursor = records[-1].seq if records else after
    return TransitionPage(
        items=[TransitionOut(**transition_view(r)) for r in records], cursor=cursor
    )
