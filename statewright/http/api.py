"""The REST API under ``/v1``: thin translations of HTTP into :class:`~statewright.access.Access`
calls. Validation beyond the request shape (payload schemas, legal transitions, versions)
is the engine's; its typed errors become JSON errors in :mod:`statewright.http.errors`."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Response
from fastapi.responses import PlainTextResponse

from statewright.access import Access
from statewright.definition.machine import Machine
from statewright.definition.render.mermaid import to_mermaid
from statewright.errors import StatewrightError
from statewright.http.deps import AccessDep, KnownQuery
from statewright.http.schemas import (
    ID_PATTERN,
    ApprovalIn,
    CancelIn,
    ErrorOut,
    EventIn,
    EventInfo,
    InputIn,
    InputPosted,
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
from statewright.views import transition_view, workflow_view

_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorOut, "description": text}
    for status, text in {
        401: "No or unknown API token (code unauthorized).",
        403: "The caller's roles do not allow it (code forbidden).",
        404: "Unknown workflow, type or state (workflow_not_found, unknown_workflow_type, "
        "unknown_state).",
        409: "Illegal transition, version conflict, or id taken by another type.",
        422: "Malformed request or payload (invalid_input, invalid_payload).",
        503: "The store is unavailable; nothing was changed (store_error).",
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
    summary="Start a workflow (idempotent with a caller-chosen id)",
    responses={200: {"model": WorkflowOut, "description": "It existed already."}},
)
async def start_workflow(body: StartIn, access: AccessDep, response: Response) -> WorkflowOut:
    row, created = await access.start(
        body.type, body.input, workflow_id=body.id, tenant=body.tenant
    )
    if not created:
        response.status_code = 200
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


@router.post("/workflows/{workflow_id}/events", summary="Fire an event")
async def send_event(workflow_id: WorkflowId, body: EventIn, access: AccessDep) -> WorkflowOut:
    row = await access.send(
        workflow_id, body.event, body.payload, expected_version=body.expected_version
    )
    return _out(access, row)


@router.get("/workflows/{workflow_id}/history", summary="The workflow's transition log")
async def history(workflow_id: WorkflowId, access: AccessDep) -> list[TransitionOut]:
    return [TransitionOut(**transition_view(r)) for r in await access.history(workflow_id)]


@router.get("/workflows/{workflow_id}/steps", summary="The workflow's step ledger")
async def steps(workflow_id: WorkflowId, access: AccessDep) -> list[StepOut]:
    return [
        StepOut(
            key=s.key,
            step=s.step,
            status=s.status,
            result=s.result,
            error=s.error,
            attempts=s.attempts,
            started_at=s.started_at,
            finished_at=s.finished_at,
        )
        for s in await access.steps(workflow_id)
    ]


@router.post("/workflows/{workflow_id}/cancel", summary="Cancel (reaches a running step)")
async def cancel(workflow_id: WorkflowId, body: CancelIn, access: AccessDep) -> WorkflowOut:
    return _out(access, await access.cancel(workflow_id, body.reason))


@router.post(
    "/workflows/{workflow_id}/inputs",
    status_code=201,
    summary="Post an input to the workflow's inbox",
)
async def post_input(workflow_id: WorkflowId, body: InputIn, access: AccessDep) -> InputPosted:
    return InputPosted(id=await access.post_input(workflow_id, body.name, body.payload))


@router.post("/approvals", summary="Approval callback: approve or deny a paused workflow")
async def approval(body: ApprovalIn, access: AccessDep) -> WorkflowOut:
    row = await access.decide(
        body.workflow_id,
        body.decision == "approve",
        approver=body.approver,
        comment=body.comment,
        expected_version=body.expected_version,
    )
    return _out(access, row)


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
