"""``statewright mcp``: the MCP server over stdio, for desktop agents, IDEs and scripts."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Annotated

import typer

from statewright.cli.loading import build_engine
from statewright.cli.options import Settings
from statewright.errors import InvalidInput, Unauthorized

if TYPE_CHECKING:
    from statewright.access import Principal
    from statewright.engine.core import Engine
    from statewright.engine.worker import Worker

WORKER_GRACE = 5.0
"""Seconds running handlers get to persist when the client goes away (stdin closes)."""


def mcp(
    s: Settings,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            envvar="STATEWRIGHT_TOKEN",
            show_envvar=True,
            help="The caller's API token (checked against --tokens): its roles decide which "
            "event tools exist and its actor is recorded on every transition.",
        ),
    ] = None,
    tokens: Annotated[
        str | None,
        typer.Option(
            "--tokens",
            envvar="STATEWRIGHT_TOKENS_FILE",
            show_envvar=True,
            help="API tokens file (YAML/JSON: token or sha256, actor, roles, tenant). Without "
            "it the server is open: the caller is the local admin and approver.",
        ),
    ] = None,
    worker: Annotated[
        bool,
        typer.Option("--worker", help="Also run a worker in this process (handlers, timers)."),
    ] = False,
    concurrency: Annotated[int, typer.Option(min=1, help="Worker concurrency.")] = 8,
) -> None:
    """Serve the MCP server over stdio (stdin/stdout) until the client disconnects.

    Tools: get_workflow_state, list_workflows, start_workflow, wait_for_state, and one tool
    per event the caller's roles may fire (named <machine>__<event>; approval events only
    for approvers). Resources: each machine's definition (JSON) and Mermaid diagram.
    """
    import asyncio

    principal = _principal(token, tokens)
    engine = build_engine(s)
    asyncio.run(serve_stdio(engine, principal, worker=worker, concurrency=concurrency))


def _principal(token: str | None, tokens_file: str | None) -> Principal:
    from statewright.access import LOCAL, TokenRegistry

    if tokens_file is None:
        if token:
            raise InvalidInput("--token needs --tokens FILE, the tokens it is checked against")
        return LOCAL
    registry = TokenRegistry.from_file(tokens_file)
    if not token:
        raise Unauthorized("--tokens needs the caller's --token (or STATEWRIGHT_TOKEN)")
    return registry.authenticate(token)


async def serve_stdio(
    engine: Engine, principal: Principal, *, worker: bool = False, concurrency: int = 8
) -> None:
    """Open ``engine``, serve MCP on this process's stdin/stdout, close it when they close."""
    # Imported here: the SDK is only needed by this command.
    import asyncio

    from mcp.server.stdio import stdio_server

    from statewright.engine.worker import Worker
    from statewright.mcp_server import create_server

    async with engine:
        running: Worker | None = None
        task: asyncio.Task[None] | None = None
        if worker:
            running = Worker(engine, concurrency=concurrency)
            task = asyncio.create_task(running.run(recover=True))
        try:
            server = create_server(engine, principal)
            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())
        finally:
            if running is not None and task is not None:
                running.stop(WORKER_GRACE)
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await task
