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

The MCP SDK and :mod:`statewright.mcp_server.server` are imported when the first
authenticated request reaches ``/mcp``, not when the app is built: a service that never
serves MCP never loads them. If that start fails, every ``/mcp`` request gets a JSON ``500``
(``internal_error``) and the cause is in the log; the rest of the service is unaffected.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
from fastapi import FastAPI
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from statewright.access import LOCAL_AGENT, Principal, TokenRegistry
from statewright.engine.core import Engine
from statewright.errors import StatewrightError, Unauthorized

if TYPE_CHECKING:
    from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

    from statewright.mcp_server.server import Context

log = logging.getLogger("statewright.mcp")

PATH = "/mcp"
PRINCIPAL_KEY = "statewright.principal"
"""Where the authenticated caller rides in the request's ASGI scope."""

# Importing the MCP SDK (mcp, mcp_types, httpx2, ...) and statewright.mcp_server.server costs
# about 1.1 s of CPU, half of building the app: `statewright serve` starts (the test suite
# starts it dozens of times) without them, and they are imported by the first request to
# /mcp. Every import of them in this module is inside a function; the first one runs in a
# thread, so the event loop (the API, a worker's leases) keeps running meanwhile.
_SDK_MODULES = ("mcp.server.streamable_http_manager", "statewright.mcp_server.server")

_LOOPBACK_HOSTS = ["127.0.0.1", "127.0.0.1:*", "localhost", "localhost:*", "[::1]", "[::1]:*"]
_LOOPBACK_ORIGINS = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]


def principal_of(ctx: Context) -> Principal:
    """The caller of an MCP request that came over HTTP (set by :class:`MCPEndpoint`)."""
    request = ctx.request
    principal = None if request is None else request.scope.get(PRINCIPAL_KEY)
    if not isinstance(principal, Principal):
        raise Unauthorized("no authenticated caller for this request")
    return principal


@dataclass
class _Run:
    """One lifespan of the endpoint: the session manager, started on the first request."""

    wanted: anyio.Event = field(default_factory=anyio.Event)
    """Set by the first request (or by shutdown, with ``stopping``)."""
    ready: anyio.Event = field(default_factory=anyio.Event)
    """Set once the start is over: ``manager`` runs, or ``failed``, or it never will."""
    stopping: anyio.Event = field(default_factory=anyio.Event)
    manager: StreamableHTTPSessionManager | None = None
    failed: bool = False


class MCPEndpoint:
    """ASGI endpoint: authenticate the request, then hand it to the SDK's session manager.

    The session manager runs only inside :meth:`running` (the app's lifespan), in a task
    that lives as long as it: the SDK's must run in one task for its whole life, not in the
    request that starts it. That task waits for the first request to ``/mcp``, imports the
    SDK, builds the server and runs the manager until shutdown. A new one is made for each
    run, since the SDK's cannot be restarted.
    """

    def __init__(self, engine: Engine, tokens: Callable[[], TokenRegistry | None]) -> None:
        self._engine = engine
        self._tokens = tokens
        self._run: _Run | None = None

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        run = _Run()
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._serve, run)
            self._run = run
            try:
                yield
            finally:
                self._run = None
                run.stopping.set()
                run.wanted.set()  # a manager never started: nothing to wait for

    async def _serve(self, run: _Run) -> None:
        """Start the session manager on the first request and run it until shutdown.

        Never raises (but for cancellation): an error would cancel the app's lifespan.
        """
        try:
            await run.wanted.wait()
            if run.stopping.is_set():
                return
            try:
                await anyio.to_thread.run_sync(_import_sdk)
                manager = _manager(self._engine, open_mode=self._tokens() is None)
            except Exception:
                log.exception("the MCP endpoint failed to start")
                run.failed = True
                return
            if run.stopping.is_set():
                return
            try:
                async with manager.run():
                    run.manager = manager
                    run.ready.set()
                    await run.stopping.wait()
            except Exception:
                log.exception("the MCP session manager failed")
                run.failed = True
            finally:
                run.manager = None
        finally:
            run.ready.set()  # no request waits forever, whatever happened

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        run = self._run
        if scope["type"] != "http" or run is None:
            await _error(send, 503, "unavailable", "the MCP endpoint is not running")
            return
        try:
            principal = self._authenticate(scope)
        except StatewrightError as exc:
            await _error(send, 401, exc.code, exc.message)
            return
        run.wanted.set()
        await run.ready.wait()
        manager = run.manager
        if manager is None:
            if run.failed:
                await _error(
                    send, 500, "internal_error", "the MCP endpoint failed; see the server log"
                )
            else:
                await _error(send, 503, "unavailable", "the MCP endpoint is not running")
            return
        scope = {**scope, PRINCIPAL_KEY: principal, "user": _user(principal)}
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


def _import_sdk() -> None:
    """The slow part of the start (in a thread): load the modules :func:`_manager` uses."""
    for name in _SDK_MODULES:
        importlib.import_module(name)


def _manager(engine: Engine, *, open_mode: bool) -> StreamableHTTPSessionManager:
    """The SDK's session manager over a new MCP server of ``engine``."""
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from mcp.server.transport_security import TransportSecuritySettings

    from statewright.mcp_server.server import create_server

    loopback = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=_LOOPBACK_HOSTS,
        allowed_origins=_LOOPBACK_ORIGINS,
    )
    return StreamableHTTPSessionManager(
        app=create_server(engine, principal_of),
        security_settings=loopback if open_mode else None,
    )


def _user(principal: Principal) -> AuthenticatedUser:
    """The SDK binds a session to the caller that opened it (``user`` in the scope)."""
    from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
    from mcp.server.auth.provider import AccessToken

    caller = f"{principal.tenant}/{principal.actor}/{','.join(sorted(principal.roles))}"
    return AuthenticatedUser(
        AccessToken(token=caller, client_id=caller, scopes=[], subject=principal.actor)
    )


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
