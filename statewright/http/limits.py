"""Request size limits, checked before the app (REST API, dashboard, ``/mcp``) sees a request.

A pure ASGI middleware (never Starlette's ``BaseHTTPMiddleware``, which would buffer bodies
and break the SSE stream) with two limits:

- **Headers** (default 16 KiB, counted as sent: ``name: value`` and CRLF per field): a request
  over it is answered ``431`` with code ``headers_too_large``.
- **Body** (default 1 MiB): a request whose ``Content-Length`` is over it is answered ``413``
  with code ``payload_too_large`` before one byte of the body is read; a body of unknown length
  (chunked) is counted as the app reads it, and refused with the same ``413`` as soon as it
  passes the limit, so the app never holds more than the limit. The app then sees the client
  as gone (``http.disconnect``) and whatever it answers is dropped.

Both answers are the API's usual JSON error (``{"error": {"code", "message", "limit"}}``).
What is still sent after a refusal is read and discarded by the server, never buffered; the
connection stays usable (closing it while the client still sends would make the client's
socket reset and lose the answer).

What still gets a plain answer: the server's HTTP parser reads the request line and headers
before any app runs, and refuses a head over its own buffer with a plain-text ``400`` (uvicorn
with h11: "Invalid HTTP request received.", then it closes the connection; a client still
sending may see the connection reset instead). The app never sees such a request, so neither
this module nor the error handlers can shape that answer. ``statewright serve`` pins uvicorn
to h11 (uvicorn has a setting for h11's buffer, none for httptools') and sets that buffer
(``h11_max_incomplete_event_size``) to :func:`parser_limit`, :data:`PARSER_HEADROOM` times
the header limit: heads between the two limits reach the app and get the JSON ``431``, only
heads beyond the parser's limit get the plain ``400``. (h11 measures a head only while it is
incomplete: one that arrives whole in a single read may pass the parser and get the JSON
``431`` too.)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from statewright.http.errors import error_response

log = logging.getLogger("statewright.http")

MAX_BODY_BYTES = 1_048_576
"""1 MiB: far more than any input, payload or step result the API takes needs."""
MAX_HEADER_BYTES = 16_384
"""16 KiB: tokens and idempotency keys are short; browsers send a few KiB of headers."""
PARSER_HEADROOM = 4
"""The server's header buffer is this many times the app's header limit."""


def parser_limit(max_header_bytes: int) -> int:
    """The server parser's buffer for a request's head (request line and headers)."""
    return max(max_header_bytes * PARSER_HEADROOM, 16_384)


def headers_size(scope: Scope) -> int:
    """The size of the request's header fields as sent (``name: value`` plus CRLF each)."""
    return sum(len(name) + len(value) + 4 for name, value in scope.get("headers", ()))


def content_length(scope: Scope) -> int | None:
    """The declared body length; None when absent or not a number (the server refuses a
    malformed one before the app runs; a chunked body has none)."""
    for name, value in scope.get("headers", ()):
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _refuse(
    scope: Scope, receive: Receive, send: Send, status: int, code: str, message: str, limit: int
) -> None:
    """Answer with the API's JSON error, naming the limit."""
    response = error_response(code, message, status, details={"limit": limit})
    await response(scope, receive, send)


def _body_too_large(limit: int) -> tuple[int, str, str, int]:
    return 413, "payload_too_large", f"the request body is over the limit of {limit} bytes", limit


@dataclass
class _BodyGuard:
    """One request's ``receive`` and ``send``, counting the body as the app reads it."""

    scope: Scope
    receive_: Receive
    send_: Send
    limit: int
    received: int = 0
    refused: bool = False
    """The body passed the limit; the app is told the client left."""
    answered: bool = False
    """The 413 went out: nothing the app sends afterwards is forwarded."""
    started: bool = False

    async def receive(self) -> Message:
        if self.refused:
            return {"type": "http.disconnect"}
        message = await self.receive_()
        if message["type"] != "http.request":
            return message
        self.received += len(message.get("body", b""))
        if self.received <= self.limit:
            return message
        self.refused = True
        if not self.started:  # an app that answers before reading gets no 413 in the middle
            self.answered = True
            await _refuse(self.scope, self.receive_, self.send_, *_body_too_large(self.limit))
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        if self.answered:
            return
        if message["type"] == "http.response.start":
            self.started = True
        await self.send_(message)


class RequestLimits:
    """The ASGI middleware (see the module docstring); ``app.add_middleware`` installs it.

    Args:
        app: the app to guard.
        max_body_bytes: the largest request body accepted.
        max_header_bytes: the largest total of request header fields accepted.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_body_bytes: int = MAX_BODY_BYTES,
        max_header_bytes: int = MAX_HEADER_BYTES,
    ) -> None:
        if max_body_bytes < 0 or max_header_bytes < 0:
            raise ValueError("request limits must not be negative")
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.max_header_bytes = max_header_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        size = headers_size(scope)
        if size > self.max_header_bytes:
            limit = self.max_header_bytes
            message = f"the request headers take {size} bytes, over the limit of {limit}"
            await _refuse(scope, receive, send, 431, "headers_too_large", message, limit)
            return
        declared = content_length(scope)
        if declared is not None and declared > self.max_body_bytes:
            await _refuse(scope, receive, send, *_body_too_large(self.max_body_bytes))
            return
        guard = _BodyGuard(scope, receive, send, self.max_body_bytes)
        try:
            await self.app(scope, guard.receive, guard.send)
        except Exception:
            if not guard.answered:
                raise
            # The app failed on the disconnect it was shown after the 413 went out: expected.
            log.debug("request refused mid-body", extra={"path": scope.get("path")})


_TOO_LARGE = {
    "description": "The request body is over the service's size limit (payload_too_large), "
    "or one JSON value in it is over the engine's (value_too_large).",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}},
}


def document(app: FastAPI) -> None:
    """Add the ``413`` every operation that takes a body may answer to the OpenAPI document
    (the routes are declared elsewhere; the limit applies to all of them)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        schema = build()  # FastAPI's, cached on the app after the first call
        for item in schema.get("paths", {}).values():
            for operation in item.values():
                if isinstance(operation, dict) and "requestBody" in operation:
                    operation.setdefault("responses", {}).setdefault("413", _TOO_LARGE)
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
