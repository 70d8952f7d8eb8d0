"""``GET /v1/me``: who the caller is, as the service sees them (the actor its token names,
its roles and tenant), and what that lets it do. The dashboard reads it to show the
controls a caller may use (the bulk panel) before any workflow is listed; a client can check
which token it holds. The API refuses what a caller may not do either way: this only says
so ahead of time."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, Field

from statewright.access.principal import ALL_TENANTS
from statewright.http.api import _ERRORS
from statewright.http.deps import AccessDep, KnownQuery

router = APIRouter(prefix="/v1", responses=_ERRORS, dependencies=[KnownQuery], tags=["caller"])


class MeOut(BaseModel):
    actor: str = Field(description="Recorded as the actor of what this caller does.")
    roles: list[str] = Field(description="The caller's roles, sorted.")
    tenant: str = Field(description="The tenant the caller acts in (`*`: every tenant).")
    all_tenants: bool = Field(description="Whether the caller sees every tenant.")
    read_only: bool = Field(description="A viewer: reads only, changes nothing.")
    bulk_actions: list[str] = Field(
        description="The bulk actions (`POST /v1/bulk`) the caller may take: none for an "
        "agent, approver or viewer; all but `move` for an operator; all for an admin."
    )


@router.get("/me", response_model=MeOut, summary="Who the caller is")
async def me(access: AccessDep) -> MeOut:
    who = access.principal
    return MeOut(
        actor=who.actor,
        roles=sorted(who.roles),
        tenant=who.tenant,
        all_tenants=who.tenant == ALL_TENANTS,
        read_only=who.read_only,
        bulk_actions=list(who.bulk_actions()),
    )
