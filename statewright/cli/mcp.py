"""``statewright mcp``: the MCP server over stdio, for desktop agents, IDEs and scripts.

The process on the other end of stdio is the model. Without credentials it acts for the
``agent`` role only (:data:`~statewright.access.LOCAL_AGENT`: no approval tool, no admin);
more only when granted explicitly: a token (``--tokens`` and ``--token``), or ``--role``,
which adds roles to that caller and says so on stderr at start-up.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Annotated

import typer

from statewright.cli.loading import build_engine
from statewright.cli.options import Settings
from statewright.cli.output import err
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
            "it the caller (the model) has the agent role only, in the default tenant: no "
            "approval tools; --role grants more.",
        ),
    ] = None,
    role: Annotated[
        list[str] | None,
        typer.Option(
            "--role",
            metavar="ROLE",
            help="Without --tokens: also grant this role to the caller (repeatable), e.g. "
            "--role approver to let the model approve. Printed as a warning at start-up.",
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

    Without --tokens the caller has the agent role only (it gets no approval tool); --role
    adds roles.
    """
    import asyncio

    principal = _principal(token, tokens, role or [])
    granted = sorted(principal.roles - {"agent"}) if tokens is None else []
    if granted:
        err.print(_grant_warning(principal, granted), style="yellow", markup=False)
    engine = build_engine(s)
    asyncio.run(serve_stdio(engine, principal, worker=worker, concurrency=concurrency))


def _principal(token: str | None, tokens_file: str | None, roles: list[str]) -> Principal:
    """The caller: a token's principal, or the local agent with the ``--role`` grants."""
    import dataclasses

    from statewright.access import LOCAL_AGENT, TokenRegistry

    if tokens_file is None:
        if token:
            raise InvalidInput("--token needs --tokens FILE, the tokens it is checked against")
        bad = [r for r in roles if not r.strip() or r != r.strip()]
        if bad:
            raise InvalidInput(f"--role needs a role name, got {bad[0]!r}")
        return dataclasses.replace(LOCAL_AGENT, roles=LOCAL_AGENT.roles | frozenset(roles))
    if roles:
        raise InvalidInput(
            "--role grants roles to a caller without a token; with --tokens, the token's "
            "roles apply (give it the roles in the tokens file)"
        )
    registry = TokenRegistry.from_file(tokens_file)
    if not token:
        raise Unauthorized("--tokens needs the caller's --token (or STATEWRIGHT_TOKEN)")
    return registry.authenticate(token)


_MEANS = {
    "approver": "approve and deny (every approval event: the decision this product keeps "
    "for people)",
    "admin": "fire every event that is not an approval",
    "operator": "fire the events that name the operator role",
}


def _grant_warning(principal: Principal, granted: list[str]) -> str:
    what = "; ".join(_MEANS.get(r, f"fire the events that name the {r} role") for r in granted)
    return (
        f"warning: --role {' --role '.join(granted)}: the MCP client (the model on the other "
        f"end of stdio) acts as {principal.actor!r} with the roles "
        f"{', '.join(sorted(principal.roles))} and no token: it may {what}. Without --role it "
        "has the agent role only."
    )


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
