"""The ASGI app behind ``statewright serve``: REST API, SSE stream, probes, metrics, alerts,
dashboard, API docs and the MCP server (``/mcp``), over any store, with an optional worker in
the same process. Every request passes the size limits of :mod:`statewright.http.limits`
first."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

from fastapi import FastAPI

from statewright._version import __version__
from statewright.access import TokenRegistry
from statewright.engine.core import Engine
from statewright.engine.worker import Worker
from statewright.http import (
    agents,
    api,
    bulk,
    dashboard,
    docs,
    errors,
    family,
    health,
    limits,
    longpoll,
    me,
    operations,
    schedules,
    stream,
    subscriptions,
    workflow_types,
)
from statewright.http import metrics as observability
from statewright.http.routes import add_routes
from statewright.mcp_server import http as mcp_http

log = logging.getLogger("statewright.http")

DESCRIPTION = """Drive and watch durable workflows.

Authenticate with `Authorization: Bearer <token>`. Every error is JSON
`{"error": {"code", "message", ...}}` with a stable `code`; a refused request changes nothing.
"""


@dataclass(frozen=True)
class WorkerOptions:
    """Run a worker inside the service process (``serve --worker``)."""

    concurrency: int = 8
    lease_seconds: float = 30.0
    poll_interval: float = 0.5
    grace: float | None = 30.0


def create_app(
    engine: Engine,
    tokens: TokenRegistry | None = None,
    *,
    worker: WorkerOptions | None = None,
    manage_engine: bool = True,
    max_body_bytes: int = limits.MAX_BODY_BYTES,
    max_header_bytes: int = limits.MAX_HEADER_BYTES,
    metrics_auth: bool = False,
    max_wait: float = longpoll.MAX_WAIT,
) -> FastAPI:
    """Build the app.

    Args:
        engine: the engine to serve (its types are the API's types).
        tokens: API tokens; None is open mode (every caller is a local admin and approver:
            only for a service bound to localhost).
        worker: run a worker in the same process while the app runs.
        manage_engine: open the engine on startup and close it on shutdown (False when the
            caller owns it, e.g. tests that share one engine).
        max_body_bytes: the largest request body taken (413 payload_too_large above it).
        max_header_bytes: the largest total of request headers taken (431 headers_too_large).
        metrics_auth: ``/metrics`` wants a token with the ``ops`` or ``admin`` role (it is
            open by default, for scrapers).
        max_wait: the longest a long-polling ``GET /v1/workflows/{id}`` waits (seconds; a
            larger ``timeout`` is cut to it).
    """

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if manage_engine:
            await engine.open()
        running: Worker | None = None
        try:
            if worker is not None:
                running = Worker(
                    engine,
                    concurrency=worker.concurrency,
                    lease_seconds=worker.lease_seconds,
                    poll_interval=worker.poll_interval,
                )
                app.state.worker_task = asyncio.create_task(running.run(recover=True))
            async with mcp_http.running(app):  # the MCP server's session manager
                yield
        finally:
            task = app.state.worker_task
            if running is not None and task is not None:
                running.stop(worker.grace if worker else None)
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await task
            if manage_engine:
                await engine.close()

    app = FastAPI(
        title="statewright",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,  # docs.install serves both from vendored files, not from a CDN
        redoc_url=None,
    )
    app.state.engine = engine
    app.state.tokens = tokens
    app.state.worker_task = None
    app.state.metrics_auth = metrics_auth
    app.state.max_wait = max_wait
    app.add_middleware(
        limits.RequestLimits, max_body_bytes=max_body_bytes, max_header_bytes=max_header_bytes
    )
    limits.document(app)
    errors.install(app)
    add_routes(app, workflow_types.router)
    add_routes(app, api.router)
    add_routes(app, operations.router)  # (api's routes continued)
    add_routes(app, family.router)
    add_routes(app, agents.router)
    add_routes(app, schedules.router)
    add_routes(app, subscriptions.router)
    add_routes(app, bulk.router)
    add_routes(app, me.router)
    add_routes(app, health.router)
    observability.install(app, engine)  # /metrics, /v1/alerts, transition span events
    dashboard.install(app)  # / and /ui/: the operator dashboard
    docs.install(app)  # /docs and /redoc, their assets under /ui/vendor/
    add_routes(app, stream.router)
    mcp_http.mount(app, engine)  # /mcp: the MCP server over streamable HTTP
    return app
