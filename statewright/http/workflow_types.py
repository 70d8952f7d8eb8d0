"""``/v1/types``: the registered workflow types, what each declares (states, events, the
input schema, search attributes) and what the caller may do with it (``may_start``, each
event's ``may_fire``), and a type's machine as a Mermaid diagram."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query
from fastapi.responses import PlainTextResponse

from statewright.access import Access
from statewright.definition.data import plain
from statewright.definition.render.mermaid import to_mermaid
from statewright.engine.workflow_type import WorkflowType
from statewright.errors import UnknownState
from statewright.http.api import _ERRORS, _JSON_ERRORS
from statewright.http.deps import AccessDep, KnownQuery
from statewright.http.inputs import not_null
from statewright.http.schemas import EventInfo, StateInfo, TypeOut

router = APIRouter(prefix="/v1", responses=_ERRORS, dependencies=[KnownQuery])

TypeName = Annotated[str, Path(max_length=200, description="The workflow type (machine).")]
TypeVersion = Annotated[int | None, Query(ge=1, le=2**31 - 1, json_schema_extra=not_null)]


def _type_out(access: Access, wtype: WorkflowType) -> TypeOut:
    machine = wtype.machine
    return TypeOut(
        input_schema=None if wtype.input_schema is None else plain(wtype.input_schema),
        search_attributes=list(wtype.search_attributes),
        cancel_event=wtype.cancel_event,
        may_start=not access.principal.read_only,
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
                within=list(reversed(machine.ancestors(s.name))),
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


@router.get("/types", summary="The registered workflow types")
async def list_types(access: AccessDep) -> list[TypeOut]:
    return [_type_out(access, t) for t in access.types]


@router.get("/types/{name}", summary="One workflow type: states, events and who may fire them")
async def get_type(access: AccessDep, name: TypeName, version: TypeVersion = None) -> TypeOut:
    return _type_out(access, access.type_of(name, version))


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
    machine = access.type_of(name, version).machine
    if current is not None and current not in machine.states:
        raise UnknownState(f"workflow type {name!r} has no state {current!r}", state=current)
    return to_mermaid(machine, current)
