"""``POST /v1/bulk``: one operator action over every workflow a filter matches, in the
caller's tenant (:meth:`statewright.access.Access.bulk`, :mod:`statewright.engine.bulk`)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Response
from pydantic import BaseModel, ConfigDict, Field

from statewright.engine.bulk import MAX_BATCH, MAX_SAMPLE, BulkFilter, cutoff
from statewright.engine.core import MAX_REASON
from statewright.http.api import _ERRORS
from statewright.http.deps import AccessDep, KnownQuery
from statewright.http.inputs import NONBLANK, BodyIn
from statewright.http.jsonbody import JSONBody
from statewright.http.search import SearchBody, search_body

router = APIRouter(prefix="/v1", responses=_ERRORS, dependencies=[KnownQuery], tags=["bulk"])


class BulkFilterIn(BodyIn):
    type: str | None = Field(default=None, max_length=200, description="Only this type.")
    state: str | None = Field(default=None, max_length=200, description="Only this state.")
    version: int | None = Field(default=None, ge=1, description="Only this machine version.")
    older_than: float | None = Field(
        default=None, ge=0, description="Only workflows in their state for longer (seconds)."
    )
    entered_before: float | None = Field(
        default=None,
        allow_inf_nan=False,
        description="Only workflows that entered their state before this time (Unix "
        "seconds). A re-run of a fork or a move passes the first run's (or its dry run's) "
        "`entered_before`, so what that run made or moved is not matched again.",
    )
    entered_after: float | None = Field(
        default=None,
        description="Only workflows that entered their state at or after this "
        "time (Unix seconds).",
    )
    parked: bool = Field(default=False, description="Only workflows parked for an operator.")
    parked_reason: str | None = Field(
        default=None, max_length=200, description="Only workflows parked for this reason."
    )
    search: SearchBody = None
    terminal: bool | None = Field(
        default=False,
        description="false (the default): live workflows only; true: finished ones only "
        "(to fork them, say); null: both.",
    )


class BulkIn(BodyIn):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "action": "cancel",
                    "filter": {"type": "order", "state": "charging", "older_than": 3600},
                    "dry_run": True,
                    "reason": "incident 42",
                    "operation_id": "incident-42",
                }
            ]
        }
    )

    action: Literal["cancel", "resume", "retry", "fork"]
    filter: BulkFilterIn = Field(default_factory=BulkFilterIn)
    reason: str = Field(
        min_length=1, max_length=MAX_REASON, pattern=NONBLANK, description="Why (in each log)."
    )
    dry_run: bool = Field(default=False, description="Count and sample; change nothing.")
    operation_id: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9_.\-]{1,100}$",
        description="Names the operation: sending it again applies nothing twice.",
    )
    batch: int = Field(default=500, ge=1, le=MAX_BATCH)
    sample: int = Field(default=10, ge=0, le=MAX_SAMPLE)


class BulkMoveIn(BulkIn):
    """A bulk move names the state to move the workflows to."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "action": "move",
                    "filter": {"type": "order", "state": "stuck"},
                    "to_state": "retrying",
                    "reason": "handler fixed",
                }
            ]
        }
    )

    action: Literal["move"]  # type: ignore[assignment]
    to_state: str = Field(min_length=1, max_length=200, description="The state to move to.")


class BulkOut(BaseModel):
    operation_id: str
    action: str
    dry_run: bool
    matched: int
    applied: int
    replayed: int
    skipped: int
    failed: int
    sample: list[str]
    errors: dict[str, str]
    entered_before: float | None


@router.post(
    "/bulk",
    response_model=BulkOut,
    summary="Operators: cancel, resume, retry, move or fork every workflow a filter matches",
    description="In the caller's tenant only. `dry_run` counts the matches and samples their "
    "ids, and changes nothing. A real run applies the action to each match with the "
    "idempotency key `bulk:<operation_id>:<action>`: sending the same `operation_id` again "
    "(after an interruption) counts what was done `replayed` and applies it no second time. "
    "Each action is logged with the caller and `reason`. One workflow's refusal is counted "
    "(`skipped`: not allowed now; `failed`), not an error. Needs the operator or admin role "
    "(a bulk `move`: admin).",
)
async def bulk(
    body: Annotated[BulkIn | BulkMoveIn, Field(discriminator="action")], access: AccessDep
) -> Response:
    f = body.filter
    where = BulkFilter(
        type=f.type,
        state=f.state,
        version=f.version,
        entered_before=cutoff(f.entered_before, f.older_than, access.now()),
        entered_after=f.entered_after,
        parked=f.parked,
        parked_reason=f.parked_reason,
        search=search_body(f.search),
        terminal=f.terminal,
    )
    done = await access.bulk(
        body.action,
        where,
        reason=body.reason,
        dry_run=body.dry_run,
        operation_id=body.operation_id,
        to_state=body.to_state if isinstance(body, BulkMoveIn) else None,
        batch=body.batch,
        sample=body.sample,
    )
    return JSONBody(BulkOut.model_validate(done, from_attributes=True).model_dump())
