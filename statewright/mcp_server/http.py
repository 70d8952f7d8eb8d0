"""The MCP server over streamable HTTP, mounted in the service's app at ``/mcp``.

Every HTTP request is authenticated on its own from ``Authorization: Bearer <token>`` with the
app's :class:`~statewright.access.TokenRegistry` (``app.state.tokens``): the principal rides
in the ASGI scope to the tool handlers, so each call acts as the token it came with. A request
without a valid token gets ``401`` before the MCP layer sees it. A session is also bound to
the caller that opened it (the SDK answers another caller's use of its id with 404). In open
mode (no tokens) every caller is :data:`~statewright.access.LOCAL_AGENT`, the ``agent`` role
only (the API and dashboard's local admin is not given to whatever model connects: approvals
need a token with the approver role), and requests must come from a loopback host and origin
(DNS-rebinding protection), as the service then only listens locally.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import FastAPI
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from statewright.access import LOCAL_AGENT, Principal, TokenRegistry
from statewright.engine.core import Engine
from statewright.errors import StatewrightError, Unauthorized
from statewright.mcp_server.server import Context, create_server

PATH = "/mcp"
PRINCIPAL_KEY = "statewright.principal"
"""Where the authenticated caller rides in the request's ASGI scope."""

_LOOPBACK = TransportSecuritySettings(
    enable_dns_rebinding_protection=True,
    allowed_hosts=["127.0.0.1", "127.0.0.1:*", "localhost", "localhost:*", "[::1]", "[::1]:*"],
    allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
)


def principal_of(ctx: Context) -> Principal:
    """The caller of an MCP request that came over HTTP (set by :class:`MCPEndpoint`)."""
    request = ctx.request
    principal = None if request is None else request.scope.get(PRINCIPAL_KEY)
    if not isinstance(principal, Principal):
        raise Unauthorized("no authenticated caller for this request")
    return principal


class MCPEndpoint:
    """ASGI endpoint: authenticate the request, then hand it to the SDK's session manager.

    The session manager runs only inside :meth:`running` (the app's lifespan); a new one is
    made for each run, since the SDK's cannot be restarted.
    """

    def __init__(self, engine: Engine, tokens: Callable[[], TokenRegistry | None]) -> None:
        self.server = create_server(engine, principal_of)
        self._tokens = tokens
        self._manager: StreamableHTTPSessionManager | None = None

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        manager = StreamableHTTPSessionManager(
            app=self.server,
            security_settings=_LOOPBACK if self._tokens() is None else None,
        )
        async with manager.run():
            self._manager = manager
            try:
                yield
            finally:
                self._manager = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        manager = self._manager
        if scope["type"] != "http" or manager is None:
            await _error(send, 503, "unavailable", "the MCP endpoint is not running")
            return
        try:
            principal = self._authenticate(scope)
        except StatewrightError as exc:
            await _error(send, 401, exc.code, exc.message)
            return
        # The SDK binds a session to the caller that opened it ("user" in the scope).
        caller = f"{principal.tenant}/{principal.actor}/{','.join(sorted(principal.roles))}"
        user = AuthenticatedUser(
            AccessToken(token=caller, client_id=caller, scopes=[], subject=principal.actor)
        )
        scope = {**scope, PRINCIPAL_KEY: principal, "user": user}
        await manager.handle_request(scope, receive, send)

    def _authenticate(self, scope: Scope) -> Principal:
        tokens = self._tokens()
        if tokens is None:
            return LOCAL_AGENT
        header = next(
            (v.decode("latin-1") for k, v in scope["headers"] if k == b"authorization"), ""
        )
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer":
            raise Unauthorized("an API token is required (Authorization: Bearer <token>)")
        return tokens.authenticate(token.strip())


def mount(app: FastAPI, engine: Engine, path: str = PATH) -> MCPEndpoint:
    """Serve MCP at ``path`` of ``app`` (tokens from ``app.state.tokens``).

    Run ``app.state.mcp.running()`` in the app's lifespan: the SDK's session manager must run
    while the app serves.
    """
    endpoint = MCPEndpoint(engine, lambda: app.state.tokens)
    # A plain route (an ASGI app as endpoint): no redirect of /mcp to /mcp/ as a mount has.
    route = Route(path, endpoint, methods=["GET", "POST", "DELETE"], include_in_schema=False)
    app.router.routes.append(route)
    app.state.mcp = endpoint
    return endpoint


def running(app: FastAPI) -> contextlib.AbstractAsyncContextManager[None]:
    """The lifespan part of the MCP endpoint of ``app``, if one is mounted."""
    endpoint = getattr(app.state, "mcp", None)
    return endpoint.running() if isinstance(endpoint, MCPEndpoint) else contextlib.nullcontext()


async def _error(send: Send, status: int, code: str, message: str) -> None:
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    headers: list[tuple[bytes, bytes]] = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="statewright"'))
    start: dict[str, Any] = {"type": "http.response.start", "status": status, "headers": headers}
    await send(start)
    await send({"type": "http.response.body", "body": body})
