"""The MCP SDK is loaded by the first request to ``/mcp``, not when ``statewright serve``
starts (it is half the CPU of a start): a real ``serve`` in a fresh interpreter reports the
modules it loaded when it stopped, and the app in process shows the lazy start's edges (an
unused endpoint stops cleanly, a start that fails answers a JSON 500, open mode's loopback
check and the sessions' binding to their caller hold)."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from statewright import Engine, SQLiteStore
from statewright.access import TokenRegistry
from statewright.engine.builtin import agent_task_type
from statewright.http import create_app
from tests.mcp.conftest import (
    APPS,
    FIXED_TOOLS,
    ORDER,
    ROOT,
    TIMEOUT,
    TOKENS,
    Served,
    clean_env,
    data,
    free_port,
    http_client,
    write_tokens,
)
from tests.mcp.test_http import HEADERS as ACCEPT
from tests.mcp.test_http import INIT

SDK = ("mcp", "mcp_types", "httpx2", "statewright.mcp_server.server")
"""What ``/mcp`` needs and nothing else in ``serve`` does."""

PROBE = """
import json, os, sys
from statewright.cli.main import main
sys.argv = ["statewright", *sys.argv[1:]]
try:
    main()
except (SystemExit, KeyboardInterrupt):  # uvicorn re-raises the SIGINT it stopped on
    pass
finally:
    with open(os.environ["PROBE_OUT"], "w") as f:
        json.dump(sorted(sys.modules), f)
"""
"""``statewright ARGS`` that writes the modules it loaded when it stops."""


def loaded(modules: set[str]) -> list[str]:
    return sorted(n for n in SDK if any(m == n or m.startswith(n + ".") for m in modules))


class Probed:
    def __init__(self, served: Served) -> None:
        self.served = served
        self.modules: set[str] = set()


@contextmanager
def serve(base: Path) -> Iterator[Probed]:
    """``statewright serve --worker --tokens ...`` in a fresh interpreter; ``modules`` is
    set when it has stopped (SIGINT), cleanly."""
    port = free_port()
    db, log, out = base / "sw.db", base / "serve.log", base / "modules.json"
    tokens = write_tokens(base / "tokens.yaml")
    args = ["--db", str(db), "--app", APPS, "serve", "--worker", "--tokens", str(tokens)]
    with log.open("w") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-c", PROBE, *args, "--port", str(port)],
            cwd=ROOT,
            env=clean_env(PROBE_OUT=str(out)),
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
        probed = Probed(Served(f"http://127.0.0.1:{port}", db, log))
        try:
            deadline = time.monotonic() + TIMEOUT
            while True:
                assert proc.poll() is None, f"serve exited early:\n{log.read_text()}"
                assert time.monotonic() < deadline, f"serve did not start:\n{log.read_text()}"
                try:
                    if httpx.get(f"{probed.served.url}/livez", timeout=1.0).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.05)
            yield probed
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise
    text = log.read_text()
    assert "Traceback" not in text and "ERROR" not in text, text
    assert out.exists(), text
    probed.modules = set(json.loads(out.read_text()))


def test_serve_starts_without_the_mcp_sdk(tmp_path: Path) -> None:
    with serve(tmp_path) as probed:
        url = probed.served.url
        assert httpx.get(f"{url}/health").status_code == 200
        # Refused before the MCP layer: a caller without a token does not load it either.
        r = httpx.post(f"{url}/mcp", json=INIT, headers=ACCEPT)
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
    assert "statewright.http.app" in probed.modules  # the probe saw the service
    assert loaded(probed.modules) == []


async def test_the_first_mcp_request_loads_the_sdk_and_a_session_works(tmp_path: Path) -> None:
    with serve(tmp_path) as probed:
        async with http_client(probed.served, "ops") as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            assert FIXED_TOOLS <= tools
            started = {"type": "order_fulfilment", "input": ORDER}
            wid = data(await client.call_tool("start_workflow", started))["workflow_id"]
            assert data(await client.call_tool("get_workflow_state", {"workflow_id": wid}))
    assert loaded(probed.modules) == sorted(SDK)


# -- in process: the lifespan and the lazy start's edges -----------------------------------------


@asynccontextmanager
async def app_running(tmp_path: Path, tokens: TokenRegistry | None) -> AsyncIterator[FastAPI]:
    """The app with its lifespan running (the engine on an SQLite file)."""
    engine = Engine(SQLiteStore(tmp_path / "sw.db"), [agent_task_type()])
    app = create_app(engine, tokens)
    async with app.router.lifespan_context(app):
        yield app


def client(app: FastAPI, host: str = "127.0.0.1") -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url=f"http://{host}", timeout=TIMEOUT
    )


def registry() -> TokenRegistry:
    r = TokenRegistry()
    for token, actor, roles, tenant in TOKENS.values():
        r.add(token, actor, roles, tenant)
    return r


def bearer(who: str) -> dict[str, str]:
    return {**ACCEPT, "Authorization": f"Bearer {TOKENS[who][0]}"}


async def test_an_endpoint_never_called_stops_cleanly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with app_running(tmp_path, registry()) as app:
        async with client(app) as c:
            assert (await c.get("/livez")).status_code == 200
    # Nothing left running (a pending task would also warn, and warnings are errors here).
    assert asyncio.all_tasks() == {asyncio.current_task()}
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    async with client(app) as c:  # out of the lifespan: not running, as before
        r = await c.post("/mcp", json=INIT, headers=bearer("agent"))
        assert r.status_code == 503 and r.json()["error"]["code"] == "unavailable"


async def test_a_start_that_fails_answers_500_and_is_logged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The SDK cannot be imported (None in sys.modules: `import` raises ModuleNotFoundError).
    monkeypatch.setitem(sys.modules, "mcp.server.streamable_http_manager", None)
    async with app_running(tmp_path, registry()) as app:
        async with client(app) as c:
            # Concurrent first requests: every one gets the error, none waits forever.
            first = await asyncio.wait_for(
                asyncio.gather(
                    *(c.post("/mcp", json=INIT, headers=bearer("agent")) for _ in range(3))
                ),
                TIMEOUT,
            )
            again = await c.post("/mcp", json=INIT, headers=bearer("agent"))
            for r in (*first, again):
                assert r.status_code == 500, r.text
                assert r.json()["error"]["code"] == "internal_error"
            assert (await c.get("/livez")).status_code == 200  # the rest still serves
    failed = [r for r in caplog.records if r.name == "statewright.mcp"]
    assert [(r.levelno, r.getMessage()) for r in failed] == [
        (logging.ERROR, "the MCP endpoint failed to start")
    ]
    assert failed[0].exc_info and isinstance(failed[0].exc_info[1], ModuleNotFoundError)
    assert asyncio.all_tasks() == {asyncio.current_task()}


async def test_open_mode_takes_only_loopback_hosts_and_origins(tmp_path: Path) -> None:
    async with app_running(tmp_path, None) as app:
        async with client(app, "evil.example") as c:
            r = await c.post("/mcp", json=INIT, headers=ACCEPT)
            assert r.status_code == 421, r.text
        async with client(app) as c:
            r = await c.post(
                "/mcp", json=INIT, headers={**ACCEPT, "Origin": "http://evil.example"}
            )
            assert r.status_code == 403, r.text
            r = await c.post("/mcp", json=INIT, headers={**ACCEPT, "Origin": "http://127.0.0.1:1"})
            assert r.status_code == 200, r.text


async def test_a_session_is_bound_to_the_caller_that_opened_it(tmp_path: Path) -> None:
    async with app_running(tmp_path, registry()) as app:
        async with client(app) as c:
            r = await c.post("/mcp", json=INIT, headers=bearer("agent"))
            assert r.status_code == 200, r.text
            session = {"Mcp-Session-Id": r.headers["mcp-session-id"]}
            ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
            r = await c.post("/mcp", json=ping, headers={**bearer("agent"), **session})
            assert r.status_code == 200, r.text
            r = await c.post("/mcp", json=ping, headers={**bearer("boss"), **session})
            assert r.status_code == 404, r.text
            r = await c.post("/mcp", json=ping, headers={**ACCEPT, **session})
            assert r.status_code == 401, r.text
