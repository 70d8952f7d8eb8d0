"""``GET /v1/stream``: the transition log as Server-Sent Events, from a cursor.

Each event is one transition of the caller's tenant, in commit order::

    id: 42
    event: transition
    data: {"seq": 42, "workflow_id": "...", ...}   (the shape of /history rows)

The cursor is ``?after=<seq>``, or the ``Last-Event-ID`` header (which wins): a browser's
``EventSource`` sends it back when it reconnects, so it resumes exactly after the last event it
got. ``EventSource`` cannot send an ``Authorization`` header, so this endpoint also takes the
token as ``?access_token=``. The stream polls the store (``app.state.stream_poll_interval``
seconds, default 0.5), sends keep-alive comments (``app.state.stream_ping_interval``, default
15 s), and ends on client disconnect, on server shutdown, after ``?limit=`` events, or when the
store fails (after an ``event: stream_error`` whose data is the usual error JSON); an
``EventSource`` then reconnects from where it was.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Header, Query, Request
from sse_starlette import EventSourceResponse, ServerSentEvent

from statewright.access import Access
from statewright.errors import StatewrightError
from statewright.http.deps import KnownQuery, StreamAccessDep
from statewright.http.inputs import not_null
from statewright.http.pages import FIRST_CHUNK, budgeted
from statewright.http.schemas import ErrorOut

log = logging.getLogger("statewright.http")

POLL_INTERVAL = 0.5
PING_INTERVAL = 15.0
SHUTDOWN_GRACE = 1.0
BATCH = 200
BATCH_BYTES = 1024 * 1024
"""A batch of events stops once their data passes this many bytes: what one stream holds."""
MAX_SEQ = 2**62

_EXAMPLE = (
    "id: 42\n"
    "event: transition\n"
    'data: {"seq": 42, "workflow_id": "order-1001", "version": 3, '
    '"from_state": "inventory_reserved", "to_state": "payment_authorized", '
    '"event": "authorize_payment", "payload": {}, "actor": "worker-1", '
    '"context_patch": null, "at": 1800000000.0}\n\n'
)
_OK: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "An endless `text/event-stream`: one `transition` event per transition "
        "of the caller's tenant (`id` is its `seq`, `data` a TransitionOut as JSON), "
        "keep-alive comments, and a `stream_error` event (data: the error JSON) before it ends "
        "on a store failure.",
        "content": {
            "text/event-stream": {
                # OpenAPI 3.2 style (as FastAPI's own SSE): each event, parsed.
                "itemSchema": {
                    "type": "object",
                    "required": ["data"],
                    "properties": {
                        "id": {"type": "string", "pattern": "^[0-9]+$"},
                        "event": {"type": "string", "enum": ["transition", "stream_error"]},
                        "data": {
                            "type": "string",
                            "contentMediaType": "application/json",
                            "contentSchema": {
                                "anyOf": [
                                    {"$ref": "#/components/schemas/TransitionOut"},
                                    {"$ref": "#/components/schemas/ErrorOut"},
                                ]
                            },
                        },
                    },
                },
                "example": _EXAMPLE,
            }
        },
    },
}

_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorOut, "description": "No or unknown API token (code unauthorized)."},
    422: {"model": ErrorOut, "description": "A malformed cursor or limit (invalid_input)."},
}
router = APIRouter(prefix="/v1", responses=_ERRORS, dependencies=[KnownQuery])


def _setting(request: Request, name: str, default: float) -> float:
    value = getattr(request.app.state, name, None)
    return default if value is None else float(value)


@router.get(
    "/stream",
    summary="The transition log as Server-Sent Events, from a cursor",
    response_class=EventSourceResponse,
    responses=_OK,
)
async def stream(
    request: Request,
    access: StreamAccessDep,
    after: Annotated[
        int, Query(ge=0, le=MAX_SEQ, description="Send the transitions after this seq.")
    ] = 0,
    limit: Annotated[
        int | None,
        Query(
            ge=1,
            le=10**6,
            description="End the stream after this many events.",
            json_schema_extra=not_null,
        ),
    ] = None,
    last_event_id: Annotated[
        int | None,
        Header(
            alias="Last-Event-ID",
            ge=0,
            le=MAX_SEQ,
            description="Set by a reconnecting EventSource; wins over `after`.",
            json_schema_extra=not_null,
        ),
    ] = None,
) -> EventSourceResponse:
    stop = anyio.Event()  # set by sse-starlette when the server shuts down
    events = _events(
        access,
        after if last_event_id is None else last_event_id,
        limit,
        _setting(request, "stream_poll_interval", POLL_INTERVAL),
        stop,
    )
    return EventSourceResponse(
        events,
        ping=_setting(request, "stream_ping_interval", PING_INTERVAL),
        shutdown_event=stop,
        shutdown_grace_period=SHUTDOWN_GRACE,
    )


async def _events(
    access: Access, cursor: int, limit: int | None, poll: float, stop: anyio.Event
) -> AsyncIterator[ServerSentEvent]:
    sent = 0
    first = FIRST_CHUNK  # a batch's first read: as many as the last batch held, if it was full
    while not stop.is_set():
        want = BATCH if limit is None else min(BATCH, limit - sent)
        try:
            # Read and encoded as a page is (off the event loop, a bounded number at once);
            # serialised without pydantic: a stored payload of any depth streams (jsonbody).
            batch = await budgeted(
                access.transitions_since,
                cursor,
                lambda r: r.seq,
                access.transition_view,
                want,
                BATCH_BYTES,
                first,
            )
        except StatewrightError as exc:
            log.warning("stream ended: the store failed", extra={"error": exc.message})
            body = json.dumps({"error": exc.to_dict()}, default=str)
            yield ServerSentEvent(body, event="stream_error")
            return
        for seq, data in zip(batch.keys, batch.texts, strict=True):
            yield ServerSentEvent(data, event="transition", id=str(seq))
            cursor = seq
            sent += 1
        if limit is not None and sent >= limit:
            return
        first = len(batch.texts) + 1 if batch.more else FIRST_CHUNK
        if not batch.more:  # caught up: wait for more (or for shutdown)
            with anyio.move_on_after(poll):
                await stop.wait()
