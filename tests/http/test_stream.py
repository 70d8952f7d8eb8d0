"""``GET /v1/stream`` on both stores: transitions as Server-Sent Events from a cursor, of the
caller's tenant only; resuming with ``Last-Event-ID``; keep-alive pings; and the ways a stream
ends: after ``?limit=``, when the client goes away, when the server shuts down (in process,
and a real ``statewright serve`` sent SIGTERM), and with a ``stream_error`` when the store
fails."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import time
from collections.abc import AsyncIterator, Callable, MutableMapping
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sse_starlette.sse import AppStatus

from statewright import Engine
from statewright.errors import StoreError
from statewright.http import create_app
from tests.forkserver import ForkServer
from tests.http.conftest import TOKENS, auth, registry
from tests.http.test_api import error_of, in_state, start

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 10.0


def events_of(text: str) -> list[dict[str, str]]:
    """Parse an event stream into its events (comments and keep-alives dropped)."""
    events = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            if line and not line.startswith(":"):
                name, _, value = line.partition(": ")
                fields[name] = fields[name] + "\n" + value if name in fields else value
        if fields:
            events.append(fields)
    return events


async def history_rows(client: httpx.AsyncClient, wid: str) -> list[dict[str, Any]]:
    r = await client.get(f"/v1/workflows/{wid}/history", headers=auth("admin"))
    assert r.json()["next_cursor"] is None
    rows: list[dict[str, Any]] = r.json()["items"]
    return rows


class Stream:
    """Drives the app the way a server does: the request, then the response body as it comes
    (no buffering, unlike httpx's ASGI transport), and a disconnect when the test says so."""

    def __init__(self, app: FastAPI, url: str, headers: dict[str, str]) -> None:
        path, _, query = url.partition("?")
        self.app = app
        self.scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "root_path": "",
            "query_string": query.encode(),
            "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
            "client": ("127.0.0.1", 50000),
            "server": ("statewright", 80),
        }
        self.status: int | None = None
        self.text = ""
        self.ended = asyncio.Event()
        self.gone = asyncio.Event()
        self._asked = False

    async def _receive(self) -> dict[str, Any]:
        if not self._asked:
            self._asked = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def _send(self, message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
        elif message["type"] == "http.response.body":
            self.text += message.get("body", b"").decode()
            if not message.get("more_body", False):
                self.ended.set()

    async def __aenter__(self) -> Stream:
        self.task = asyncio.create_task(self.app(self.scope, self._receive, self._send))
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.gone.set()
        await asyncio.wait_for(self.task, TIMEOUT)

    async def until(self, done: Callable[[str], bool]) -> None:
        async with asyncio.timeout(TIMEOUT):
            while not done(self.text):
                await asyncio.sleep(0.01)

    def events(self) -> list[dict[str, str]]:
        return events_of(self.text)


@pytest.fixture
def app(engine: Engine) -> FastAPI:
    served = create_app(engine, registry(), manage_engine=False)
    served.state.stream_poll_interval = 0.02
    return served


@pytest.fixture
async def fast(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """A client on the fast-polling app (the ``client`` fixture polls every 0.5 s)."""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://statewright") as c:
        yield c


async def test_transitions_of_the_callers_tenant_from_a_cursor(
    fast: httpx.AsyncClient, engine: Engine
) -> None:
    await in_state(engine, fast, "t-1", "running")
    await start(fast, "other", wid="g-1")  # globex: between t-1's and t-2's in the log
    await start(fast, wid="t-2")
    expected = await history_rows(fast, "t-1") + await history_rows(fast, "t-2")

    r = await fast.get("/v1/stream?limit=3", headers=auth("agent"))
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")
    assert r.headers["cache-control"] == "no-store"
    events = events_of(r.text)
    assert [e["event"] for e in events] == ["transition"] * 3
    assert [json.loads(e["data"]) for e in events] == expected  # the /history rows, exactly
    assert [int(e["id"]) for e in events] == [row["seq"] for row in expected]

    # From a cursor; Last-Event-ID (a reconnecting EventSource) wins over ?after=.
    second = expected[1]["seq"]
    r = await fast.get(f"/v1/stream?after={second}&limit=1", headers=auth("agent"))
    assert [json.loads(e["data"]) for e in events_of(r.text)] == [expected[2]]
    r = await fast.get(
        "/v1/stream?after=0&limit=1", headers={**auth("agent"), "Last-Event-ID": str(second)}
    )
    assert [json.loads(e["data"]) for e in events_of(r.text)] == [expected[2]]
    # The other tenant's stream: its one transition only; admin's: all of them.
    r = await fast.get("/v1/stream?limit=1", headers=auth("other"))
    assert [json.loads(e["data"])["workflow_id"] for e in events_of(r.text)] == ["g-1"]
    r = await fast.get("/v1/stream?limit=4", headers=auth("admin"))  # store ids (ids)
    assert [json.loads(e["data"])["workflow_id"] for e in events_of(r.text)] == [
        "t-1",
        "t-1",
        "globex:g-1",
        "t-2",
    ]


async def test_live_transitions_arrive_as_they_commit(
    fast: httpx.AsyncClient, engine: Engine
) -> None:
    await start(fast, wid="t-1")
    cursor = (await history_rows(fast, "t-1"))[-1]["seq"]
    reading = asyncio.create_task(
        fast.get(f"/v1/stream?after={cursor}&limit=2", headers=auth("agent"))
    )
    await asyncio.sleep(0.1)  # the stream is now polling an empty tail
    assert not reading.done()
    await start(fast, "other", wid="g-1")  # not for acme's eyes
    await engine.send("globex:g-1", "start", actor="setup")
    r = await fast.post("/v1/workflows/t-1/events", json={"event": "start"}, headers=auth("agent"))
    assert r.status_code == 200
    await start(fast, wid="t-2")
    r = await asyncio.wait_for(reading, TIMEOUT)
    got = [json.loads(e["data"]) for e in events_of(r.text)]
    assert [(t["workflow_id"], t["event"], t["actor"]) for t in got] == [
        ("t-1", "start", "agent-7"),
        ("t-2", "$start", "agent-7"),
    ]


async def test_auth_and_bad_cursors(fast: httpx.AsyncClient, engine: Engine) -> None:
    await start(fast, wid="t-1")
    # EventSource cannot send headers: the token may come as ?access_token=.
    r = await fast.get(f"/v1/stream?limit=1&access_token={TOKENS['agent'][0]}")
    assert r.status_code == 200 and len(events_of(r.text)) == 1
    r = await fast.get("/v1/stream?limit=1&access_token=wrong-token")
    error_of(r, 401, "unauthorized")
    r = await fast.get("/v1/stream?limit=1")
    error_of(r, 401, "unauthorized")
    r = await fast.get("/v1/stream?limit=1", headers={"Authorization": "Bearer wrong"})
    error_of(r, 401, "unauthorized")
    for query, headers in (
        ("after=-1", {}),
        ("after=x", {}),
        ("limit=0", {}),
        ("limit=1&follow=1", {}),
        ("limit=1", {"Last-Event-ID": "abc"}),
        ("limit=1", {"Last-Event-ID": "-3"}),
    ):
        r = await fast.get(f"/v1/stream?{query}", headers={**auth("agent"), **headers})
        error_of(r, 422, "invalid_input")


async def test_keepalive_pings_and_client_disconnect(
    app: FastAPI, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    app.state.stream_ping_interval = 0.05
    polls = 0
    poll = engine.store.transitions_since

    async def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal polls
        polls += 1
        return await poll(*args, **kwargs)

    monkeypatch.setattr(engine.store, "transitions_since", counted)
    await engine.start("agent_task", workflow_id="t-1", tenant="default")
    async with Stream(app, "/v1/stream", auth("agent")) as stream:
        await stream.until(lambda text: "event: transition" in text)
        await stream.until(lambda text: text.count(": ping") >= 2)
        assert stream.status == 200 and len(stream.events()) == 1
        await engine.send("t-1", "start", actor="setup")
        await stream.until(lambda text: len(events_of(text)) == 2)
        stream.gone.set()  # the client goes away
        await asyncio.wait_for(stream.task, TIMEOUT)
    assert stream.task.exception() is None
    after = polls
    await asyncio.sleep(0.2)  # ten poll intervals
    assert polls == after, "the stream kept polling after the client left"


async def test_server_shutdown_ends_open_streams(app: FastAPI, engine: Engine) -> None:
    await engine.start("agent_task", workflow_id="t-1", tenant="default")
    async with Stream(app, "/v1/stream", auth("agent")) as stream:
        await stream.until(lambda text: "event: transition" in text)
        assert not stream.ended.is_set()
        AppStatus.should_exit = True  # what uvicorn's exit handler sets (sse-starlette)
        try:
            await asyncio.wait_for(stream.ended.wait(), TIMEOUT)
            await asyncio.wait_for(stream.task, TIMEOUT)
        finally:
            AppStatus.should_exit = False
    assert stream.task.exception() is None and len(stream.events()) == 1


async def test_store_failure_ends_the_stream_with_an_error_event(
    fast: httpx.AsyncClient, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise StoreError("the database is unreachable")

    monkeypatch.setattr(engine.store, "transitions_since", broken)
    r = await asyncio.wait_for(fast.get("/v1/stream", headers=auth("agent")), TIMEOUT)
    assert r.status_code == 200
    [event] = events_of(r.text)
    assert event["event"] == "stream_error" and "id" not in event
    error = json.loads(event["data"])["error"]
    assert (error["code"], error["message"]) == ("store_error", "the database is unreachable")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def test_sigterm_to_a_real_server_ends_its_streams(
    cli_forks: ForkServer, tmp_path: Path
) -> None:
    """``statewright serve`` (uvicorn) with an open stream exits promptly on SIGTERM: the
    stream ends cleanly instead of holding the shutdown forever. (The server is forked from
    the ``cli_forks`` fork server: the same command line, process and signal, without an
    interpreter start-up.)"""
    token, actor, roles, tenant = TOKENS["agent"]
    tokens = tmp_path / "tokens.json"
    spec = {"token": token, "actor": actor, "roles": roles, "tenant": tenant}
    tokens.write_text(json.dumps({"tokens": [spec]}))
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATEWRIGHT_")}
    argv = ["--db", str(tmp_path / "s.db"), "serve", "--port", str(port), "--tokens", str(tokens)]
    out, err = tmp_path / "serve.out", tmp_path / "serve.err"
    proc = cli_forks.popen(argv, out, err, env=env, cwd=ROOT)

    def output() -> tuple[str, str]:
        """The server's stdout and stderr so far (it creates the files once forked)."""
        stdout, stderr = (p.read_text() if p.exists() else "" for p in (out, err))
        return stdout, stderr

    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=base, headers=auth("agent")) as client:
            deadline = time.monotonic() + 30
            while True:
                try:
                    if (await client.get("/livez")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert proc.poll() is None, output()
                assert time.monotonic() < deadline, "the server did not come up"
                await asyncio.sleep(0.1)
            await start(client, wid="t-1")
            async with client.stream("GET", "/v1/stream") as response:
                assert response.status_code == 200
                lines = response.aiter_lines()
                async with asyncio.timeout(TIMEOUT):
                    async for line in lines:
                        if line.startswith("data: "):
                            assert json.loads(line[6:])["workflow_id"] == "t-1"
                            break
                sent = time.monotonic()
                proc.send_signal(signal.SIGTERM)
                async with asyncio.timeout(TIMEOUT):
                    rest = [line async for line in lines]  # ends: no error, no hang
            assert not [line for line in rest if line.startswith("data: ")]
        code = await asyncio.to_thread(proc.wait, TIMEOUT)
        assert time.monotonic() - sent < 5.0
        _, stderr = output()
        # uvicorn re-raises the signal once it has shut down gracefully.
        assert code in (0, -signal.SIGTERM), stderr
        assert "Traceback" not in stderr and "ERROR" not in stderr, stderr
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
