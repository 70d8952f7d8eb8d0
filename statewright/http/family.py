"""``/v1/workflows/{id}/children``: the workflows a workflow started as its children (see
:mod:`statewright.engine.children`; the read: :meth:`~statewright.access.Access.children`).
``GET /v1/workflows/{id}`` carries the counts and the parent (:mod:`statewright.http.api`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response
from pydantic import BaseModel, Field

from statewright import paging
from statewright.http.api import _ERRORS, Cursor, PageLimit, WorkflowId
from statewright.http.deps import AccessDep, KnownQuery
from statewright.http.pages import budgeted, response
from statewright.http.schemas import NEXT_CURSOR, ChildCounts
from statewright.types import WorkflowRow

router = APIRouter(prefix="/v1", responses=_ERRORS, dependencies=[KnownQuery])


class ChildOut(BaseModel):
    id: str = Field(description="The child's id as the caller knows it (`<parent>.<key>`).")
    key: str | None = Field(description="The key its parent started it under.")
    type: str
    state: str
    terminal: bool
    succeeded: bool | None = Field(
        description="Of an ended child, whether it succeeded (false: it ended failed or "
        "cancelled, and its parent heard `child_failed`); null while it runs."
    )
    parked: str | None = Field(description="Why it waits for an operator, or null.")
    state_entered_at: float


class ChildPage(BaseModel):
    items: list[ChildOut] = Field(description="Children in id order (their keys' order).")
    counts: ChildCounts | None = Field(
        description="How many children there are and how many ended, counted over the first "
        "100 (as GET /v1/workflows/{id} has them); null over a store that keeps no children."
    )
    next_cursor: str | None = Field(description=NEXT_CURSOR)


@router.get(
    "/workflows/{workflow_id}/children",
    response_model=ChildPage,
    summary="The workflows this one started as its children, a page at a time",
    description="In id order (a child's id is its parent's and its key). Each child's state, "
    "and once it ended whether it succeeded; open one with GET /v1/workflows/{id}.",
)
async def children(
    workflow_id: WorkflowId, access: AccessDep, cursor: Cursor = None, limit: PageLimit = 100
) -> Response:
    start = None if cursor is None else paging.child_after(cursor)  # (a bad one: 409 first)
    row = await access.get(workflow_id)

    async def fetch(after: str | None, n: int) -> list[WorkflowRow]:
        # A chunk at a time: each row read holds its whole context.
        return await access.children(workflow_id, after, n, row=row)

    page = await budgeted(fetch, start, _key, access.child_view, limit, None)
    last = page.cursor
    following = paging.child_cursor(last) if page.more and last is not None else None
    counts = await access.child_counts(row)
    rest: dict[str, Any] = {
        "counts": None if counts is None else counts.to_dict(),
        "next_cursor": following,
    }
    return await response(page, rest)


def _key(child: WorkflowRow) -> str | None:
    return child.parent_key
