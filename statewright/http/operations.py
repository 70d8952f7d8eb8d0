"""The REST API's operator routes under ``/v1``: a workflow's timers, fork and move, and the
feeds (``/stuck``, ``/transitions``). Kept apart from :mod:`statewright.http.api` (whose
helpers they use) by concern and size; routed right after it, in the same order as before.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Response

from statewright import paging
from statewright.http.api import (
    _ERRORS,
    Cursor,
    IdempotencyKey,
    PageLimit,
    WorkflowId,
    _body,
    _first,
    _replay_doc,
    _second,
    _view,
)
from statewright.http.deps import AccessDep, KnownQuery
from statewright.http.inputs import TIMER_KEY_PATTERN, ForkIn, MoveIn, TimerIn
from statewright.http.pages import budgeted, response
from statewright.http.schemas import (
    StuckPage,
    TimerList,
    TimerOut,
    TimerRemoved,
    TransitionPage,
    WorkflowOut,
)
from statewright.types import StuckKey, TimerRecord

router = APIRouter(prefix="/v1", responses=_ERRORS, dependencies=[KnownQuery])


def _timer(t: TimerRecord) -> dict[str, Any]:
    return {
        "id": t.id,
        "key": t.key,
        "event": t.event,
        "due_at": t.due_at,
        "payload": t.payload,
        "every": t.every,
        "keep": t.keep,
        "scheduled_by": t.scheduled_by,
    }


@router.get(
    "/workflows/{workflow_id}/timers",
    response_model=TimerList,
    summary="A workflow's pending timers, earliest first, a page at a time",
)
async def timers(
    workflow_id: WorkflowId, access: AccessDep, limit: PageLimit = 100, cursor: Cursor = None
) -> Response:
    found = await access.timers(
        workflow_id,
        after=None if cursor is None else paging.timer_after(cursor),
        limit=limit + 1,  # one more: is there a next page?
    )
    page = found[:limit]
    last = page[-1] if page else None
    return _body(
        {
            "items": [_timer(t) for t in page],
            "next_cursor": (
                paging.timer_cursor(last.due_at, last.id)
                if last is not None and len(found) > limit
                else None
            ),
        }
    )


@router.post(
    "/workflows/{workflow_id}/timers",
    response_model=TimerOut,
    status_code=201,
    summary="Operators: schedule a durable timer on a workflow",
    description="Fires `event` after `after` seconds or at `at` (exactly one). The same "
    "`key` (default: the event) replaces the pending timer. Cleared when the workflow leaves "
    "its current state unless `keep`. Needs the operator or admin role, and a role that may "
    "fire `event` now (403 otherwise: a timer fires it on the caller's behalf, and its "
    "transition is logged as `timer for <caller>`); 409 for a finished workflow or an event "
    "the state cannot take.",
)
async def schedule_timer(workflow_id: WorkflowId, body: TimerIn, access: AccessDep) -> Response:
    record = await access.schedule(
        workflow_id,
        body.event,
        after=body.after,
        at=body.at,
        payload=body.payload,
        key=body.key,
        keep=body.keep,
    )
    return _body(_timer(record), 201)


@router.delete(
    "/workflows/{workflow_id}/timers/{key:path}",
    response_model=TimerRemoved,
    summary="Operators: cancel a workflow's pending timer by its key",
    description="404 `timer_not_found` when it has none of that key. A key may hold `/` "
    "(the rest of the path is the key; `%2F` works too). Needs the operator or admin role.",
)
async def cancel_timer(
    workflow_id: WorkflowId,
    key: Annotated[
        str,
        Path(
            min_length=1, max_length=200, pattern=TIMER_KEY_PATTERN, description="The timer's key."
        ),
    ],
    access: AccessDep,
) -> Response:
    await access.cancel_timer(workflow_id, key)
    return _body({"removed": True})


@router.post(
    "/workflows/{workflow_id}/fork",
    response_model=WorkflowOut,
    status_code=201,
    summary="Operators: start a new workflow from a past version of this one",
    description="The new workflow is in the state, with the context, that the log gives at "
    "`version` (default: the latest), and has the results of the steps done by then (they do "
    "not run again); its first log entry is `$fork` with the source, version, reason and "
    "caller. Forking the same version to the same id again returns that fork. **Steps done "
    "after `version` run again in the fork, under its own keys**: refused (409 "
    "`steps_would_rerun`, naming them) unless `rerun_steps` is true. Refused (409) while a "
    "worker holds the workflow (`workflow_busy`: a step may be in flight) and while a step "
    "of it has an unknown outcome (`step_unresolved`: resolve it first). Needs the operator "
    "or admin role.",
)
async def fork(workflow_id: WorkflowId, body: ForkIn, access: AccessDep) -> Response:
    row = await access.fork(
        workflow_id,
        reason=body.reason,
        version=body.version,
        new_id=body.id,
        rerun_steps=body.rerun_steps,
    )
    return _body(_view(access, row), 201)


@router.post(
    "/workflows/{workflow_id}/move",
    response_model=WorkflowOut,
    summary="Admins: move a workflow to a named state, as one logged transition",
    description="Outside the machine's edges: logged as a `$move` transition with the caller "
    "as actor and the reason; the target state is entered as by any transition (its timers "
    "armed, its handler due; a terminal state finishes the workflow). Needs the admin role; "
    "409 for a finished workflow, 404 `unknown_state` for a state the workflow's machine "
    "version lacks.",
    responses=_replay_doc("The workflow after the move (or as it is now, for a retry)."),
)
async def move(
    workflow_id: WorkflowId, body: MoveIn, access: AccessDep, key: IdempotencyKey = None
) -> Response:
    row = await access.move_to(
        workflow_id,
        body.state,
        reason=body.reason,
        expected_version=body.expected_version,
        idempotency_key=key,
    )
    return _body(_view(access, row))


@router.get(
    "/stuck",
    response_model=StuckPage,
    summary="Stuck workflows (parked, or past their state's threshold), a page at a time",
    description="Ordered by type, state, time entered the state (so within a state the "
    "oldest first) and id; each page reads ranges of indexes. A workflow parked for an "
    "operator is here from the moment it parks, with its reason and what to do (`action`, "
    "`step`, `hint`). `/health/workflows` has the counts.",
)
async def stuck(access: AccessDep, cursor: Cursor = None, limit: PageLimit = 100) -> Response:
    start = None if cursor is None else paging.stuck_after(cursor)

    async def fetch(after: StuckKey | None, n: int) -> list[tuple[StuckKey, dict[str, Any]]]:
        # A chunk at a time: each row read holds its whole context.
        found = await access.stuck(after=after, limit=n)
        return [
            (
                s.key,
                {
                    "workflow": _view(access, s.workflow),
                    "age": s.age,
                    "threshold": s.threshold,
                    "parked": s.parked,
                    "action": s.action,
                    "step": s.step,
                    "hint": s.hint,
                },
            )
            for s in found
        ]

    page = await budgeted(fetch, start, _first, _second, limit, None)
    last = page.cursor
    following = paging.stuck_cursor(last) if page.more and last is not None else None
    return await response(page, {"next_cursor": following})


@router.get(
    "/transitions",
    response_model=TransitionPage,
    summary="The transition log after a cursor, in commit order",
)
async def transitions(
    access: AccessDep,
    after: Annotated[int, Query(ge=0, le=2**62)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Response:
    page = await budgeted(
        access.transitions_since, after, lambda r: r.seq, access.transition_view, limit
    )
    return await response(page, {"cursor": page.cursor})
