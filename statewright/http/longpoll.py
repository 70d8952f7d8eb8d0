"""The long-poll of ``GET /v1/workflows/{id}``: ``?wait_for_state=a,b`` and/or
``?after_version=N``, with ``?timeout=`` seconds (default and at most the server's
``max_wait``, :data:`MAX_WAIT` unless ``serve --max-wait`` says otherwise).

``?timeout=`` alone waits for the workflow's next move. The answer is the workflow as the
plain GET gives it, plus ``reached``, ``timed_out`` and ``waited``
(:class:`statewright.access.waits.Waited`): a timeout is a 200 with the workflow as it is
then, never an error. The wait is :func:`statewright.access.waits.wait`, the one MCP's
``wait_for_state`` makes too: no store connection held between reads, nothing blocking the
event loop. A client that goes away ends it (the answer is then dropped).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from dataclasses import dataclass
from typing import Any

from fastapi import Request

from statewright.access import Access
from statewright.access import waits as waiting
from statewright.errors import InvalidInput

MAX_WAIT = 30.0
"""The longest a GET waits by default (seconds): ``create_app(max_wait=...)``, ``serve
--max-wait``. Proxies and clients commonly cut idle requests at 60 s."""
MAX_ASKED = 86_400.0
"""The largest ``timeout`` taken at all (a larger one is a 422); the server's cap clamps it."""


@dataclass(frozen=True)
class WaitQuery:
    """What a GET asked to wait for."""

    states: tuple[str, ...]
    after_version: int | None
    timeout: float | None


STATES_PATTERN = r"^[^,\s]+(,[^,\s]+)*$"
_STATES = re.compile(STATES_PATTERN)
MAX_VERSION = 2**62

PARAMETERS: list[dict[str, Any]] = [
    {
        "name": "wait_for_state",
        "in": "query",
        "required": False,
        "description": "Long-poll: answer once the workflow is in one of these states "
        "(comma-separated; a compound state counts for the states within it), or is finished, "
        "or `timeout` passes. A state its machine lacks: 404 unknown_state.",
        "schema": {"type": "string", "maxLength": 10_000, "pattern": STATES_PATTERN},
    },
    {
        "name": "after_version",
        "in": "query",
        "required": False,
        "description": "Long-poll: answer once the workflow's version is past this one (it "
        "moved since you read it), or it is finished, or `timeout` passes. With "
        "`wait_for_state`, either ends the wait.",
        "schema": {"type": "integer", "minimum": 0, "maximum": MAX_VERSION},
    },
    {
        "name": "timeout",
        "in": "query",
        "required": False,
        "description": "Long-poll: seconds to wait at most; the server caps it (by default "
        f"at {MAX_WAIT:g} s) and defaults to its cap. Alone (without `wait_for_state` or "
        "`after_version`): wait for the workflow's next move. At the timeout the workflow is "
        "returned as it is, with `timed_out: true`: never an error.",
        "schema": {"type": "number", "minimum": 0, "maximum": MAX_ASKED},
    },
]
"""The long-poll's query parameters, for the route's ``openapi_extra`` (and so for
:func:`statewright.http.deps.known_query`). Read by :func:`asked`, not by FastAPI: three
optional parameters validated by FastAPI cost every plain GET a few percent."""
NAMES = frozenset(p["name"] for p in PARAMETERS)


def asked(request: Request) -> WaitQuery | None:
    """What the query asks to wait for, checked as :data:`PARAMETERS` document it (422
    invalid_input otherwise); None for the plain GET."""
    if not request.scope.get("query_string"):
        return None
    query = request.query_params
    states_text = query.get("wait_for_state")
    version_text = query.get("after_version")
    timeout_text = query.get("timeout")
    if states_text is None and version_text is None and timeout_text is None:
        return None
    states: tuple[str, ...] = ()
    if states_text is not None:
        if len(states_text) > 10_000 or not _STATES.match(states_text):
            raise InvalidInput(
                "'wait_for_state' must be state names separated by commas (no spaces)"
            )
        states = tuple(dict.fromkeys(states_text.split(",")))
    after_version = None
    if version_text is not None:
        after_version = _number(version_text, "after_version", int, MAX_VERSION)
    timeout = None
    if timeout_text is not None:
        timeout = _number(timeout_text, "timeout", float, MAX_ASKED)
    return WaitQuery(states, after_version, timeout)


def _number(text: str, name: str, kind: type[int] | type[float], high: float) -> Any:
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not 0 <= value <= high:  # (NaN is not)
        what = "an integer" if kind is int else "a number"
        raise InvalidInput(f"{name!r} must be {what} from 0 to {high:g}")
    return value


def _setting(request: Request, name: str, default: float) -> float:
    value = getattr(request.app.state, name, None)
    return default if value is None else float(value)


async def wait(
    request: Request, access: Access, workflow_id: str, asked: WaitQuery
) -> waiting.Waited | None:
    """The wait ``asked`` for, or None when the client went away first."""
    cap = _setting(request, "max_wait", MAX_WAIT)
    timeout = cap if asked.timeout is None else min(asked.timeout, cap)
    waits = asyncio.ensure_future(
        waiting.wait(
            access,
            workflow_id,
            timeout=timeout,
            states=asked.states or None,
            after_version=asked.after_version,
            poll=_setting(request, "wait_poll_interval", waiting.POLL),
            max_poll=_setting(request, "wait_max_poll_interval", waiting.MAX_POLL),
        )
    )
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({waits, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (gone, waits):
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
    if not waits.done() or waits.cancelled():
        return None
    return waits.result()  # (or its error: not found, invalid input, the store's)


async def _disconnected(request: Request) -> None:
    """Return once the client has gone (the request of a GET has no body to read first)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
