"""Real MCP clients (the SDK's) against real servers on an SQLite file: ``statewright mcp``
over stdio (a new process: the SDK's client spawns it with pipes) and ``statewright serve`` over
streamable HTTP (a process forked by the ``cli_forks`` fixture).

Tokens (tenant ``acme`` unless named): ``agent`` (roles agent), ``ops`` (system, operator:
the warehouse and carrier integration), ``boss`` (approver, operator), ``viewer`` (viewer),
``other`` (agent, operator in tenant ``globex``).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import httpx2
import mcp_types as types
import pytest
import yaml
from mcp import Client, ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from statewright import SQLiteStore, ids
from statewright.types import TransitionRecord
from tests.forkserver import ForkServer
from tests.serving import wait_until_up

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
APPS = ",".join(
    str(p)
    for p in (
        EXAMPLES / "order_fulfilment.py",
        EXAMPLES / "refund_approval.py",
        ROOT / "tests" / "mcp" / "report_app.py",
    )
)
TIMEOUT = 60.0
"""A hang, not a slow start or answer (the machine may be busy with other tests)."""

TOKENS = {
    "agent": ("agent-token-1", "agent-7", ["agent"], "acme"),
    "ops": ("ops-token-1", "warehouse", ["system", "operator"], "acme"),
    "boss": ("boss-token-1", "alice", ["approver", "operator"], "acme"),
    "viewer": ("viewer-token-1", "auditor", ["viewer"], "acme"),
    "other": ("other-token-1", "mallory", ["agent", "operator"], "globex"),
}
FIXED_TOOLS = {
    "get_workflow_state",
    "list_workflows",
    "start_workflow",
    "wait_for_state",
    "post_input",
}
WRITING_TOOLS = {"start_workflow", "post_input"}
"""The fixed tools a read-only caller does not get."""
APPROVAL_EVENTS = ("approval_granted", "approval_denied")
ORDER = {"sku": "BOOK-42", "quantity": 1, "amount_cents": 2_599}


def write_tokens(path: Path) -> Path:
    entries = [
        {"token": token, "actor": actor, "roles": roles, "tenant": tenant}
        for token, actor, roles, tenant in TOKENS.values()
    ]
    path.write_text(yaml.safe_dump({"tokens": entries}))
    return path


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without STATEWRIGHT_* (the suite must not depend on the caller's)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATEWRIGHT_")}
    return {**env, **extra}


def data(result: types.CallToolResult) -> dict[str, Any]:
    """A successful tool result's JSON (the structured content, also its text)."""
    assert not result.is_error, result.content
    body = result.structured_content
    assert isinstance(body, dict)
    assert isinstance(result.content[0], types.TextContent)
    assert json.loads(result.content[0].text) == body
    return body


def tool_error(result: types.CallToolResult) -> dict[str, Any]:
    """A refused call's structured error."""
    assert result.is_error, result.structured_content
    assert isinstance(result.content[0], types.TextContent)
    body = json.loads(result.content[0].text)
    assert body == result.structured_content
    error = body["error"]
    assert isinstance(error, dict)
    return error


def approval_tools(names: set[str]) -> set[str]:
    return {n for n in names if n.endswith(tuple(f"__{e}" for e in APPROVAL_EVENTS))}


async def history(db: Path, workflow_id: str, tenant: str = "acme") -> list[TransitionRecord]:
    """The log of ``tenant``'s workflow ``workflow_id`` (the id its callers know it by: the
    store keys it ``tenant:id``, see statewright.ids), read from the SQLite file the server
    writes."""
    store = SQLiteStore(db)
    await store.open()
    try:
        return await store.history(ids.qualify(tenant, workflow_id))
    finally:
        await store.close()


class Progress:
    """A progress callback that keeps what it receives."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, float | None, str | None]] = []

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.seen.append((progress, total, message))

    @property
    def messages(self) -> list[str]:
        return [m or "" for _, _, m in self.seen]


# -- stdio -------------------------------------------------------------------------------------


@asynccontextmanager
async def stdio_session(
    db: Path,
    tokens: Path | None,
    who: str | None,
    errlog: TextIO,
    *,
    worker: bool = False,
    roles: tuple[str, ...] = (),
) -> AsyncIterator[ClientSession]:
    """A client session with a ``statewright mcp`` subprocess (``who``'s token; ``roles``:
    given with ``--role``)."""
    args = ["-m", "statewright.cli", "--db", str(db), "--app", APPS, "mcp"]
    if tokens is not None:
        args += ["--tokens", str(tokens)]
    if worker:
        args.append("--worker")
    for role in roles:
        args += ["--role", role]
    env = {"STATEWRIGHT_TOKEN": TOKENS[who][0]} if who else {}
    params = StdioServerParameters(command=sys.executable, args=args, env=env, cwd=ROOT)
    async with stdio_client(params, errlog=errlog) as (read, write):
        async with ClientSession(read, write, read_timeout_seconds=TIMEOUT) as session:
            await session.initialize()
            yield session


# -- streamable HTTP ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Served:
    """A running ``statewright serve --worker``."""

    url: str
    db: Path
    log: Path

    @property
    def mcp(self) -> str:
        return f"{self.url}/mcp"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, cli_forks: ForkServer) -> Iterator[Served]:
    base = tmp_path_factory.mktemp("serve")
    yield from _serve(cli_forks, base, write_tokens(base / "tokens.yaml"))


@pytest.fixture(scope="module")
def served_open(
    tmp_path_factory: pytest.TempPathFactory, cli_forks: ForkServer
) -> Iterator[Served]:
    """``statewright serve --worker`` without tokens (open mode, on loopback)."""
    yield from _serve(cli_forks, tmp_path_factory.mktemp("serve-open"), None)


def _serve(forks: ForkServer, base: Path, tokens: Path | None) -> Iterator[Served]:
    """``statewright serve --worker``, forked from this worker's fork server of ``statewright``
    command lines (the ``cli_forks`` fixture): the same command line and process, without an
    interpreter start-up. The MCP server package is not preloaded there: the service imports
    it at its first MCP request, as it does in a process of its own."""
    port = free_port()
    db, log = base / "sw.db", base / "serve.log"
    auth = () if tokens is None else ("--tokens", str(tokens))
    argv = ["--db", str(db), "--app", APPS, "serve", "--worker", *auth, "--port", str(port)]
    proc = forks.popen(argv, log, env=clean_env(), cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    try:
        up = wait_until_up(url, proc, log, timeout=TIMEOUT)
        assert up, f"serve exited early:\n{log.read_text()}"
        yield Served(url, db, log)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
    # The MCP session manager runs inside the app's lifespan: the service still stops
    # cleanly (uvicorn re-raises the SIGTERM it handled once it has shut down).
    text = log.read_text()
    assert code in (0, -signal.SIGTERM), text
    assert "Traceback" not in text and "ERROR" not in text, text


def _http(who: str | None) -> httpx2.AsyncClient:
    """An HTTP client sending ``who``'s bearer token (None: no token, for open mode)."""
    headers = {} if who is None else {"Authorization": f"Bearer {TOKENS[who][0]}"}
    return httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(TIMEOUT))


@asynccontextmanager
async def http_session(served: Served, who: str | None) -> AsyncIterator[ClientSession]:
    """A session of the initialize handshake (2025-11-25) with ``who``'s bearer token."""
    async with _http(who) as http:
        async with streamable_http_client(served.mcp, http_client=http) as (read, write):
            async with ClientSession(read, write, read_timeout_seconds=TIMEOUT) as session:
                await session.initialize()
                yield session


@asynccontextmanager
async def http_client(served: Served, who: str | None) -> AsyncIterator[Client]:
    """The SDK's high-level client (negotiates the newest protocol: per-request exchanges)."""
    async with _http(who) as http:
        async with Client(
            streamable_http_client(served.mcp, http_client=http), read_timeout_seconds=TIMEOUT
        ) as client:
            yield client
