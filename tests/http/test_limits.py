"""Request size limits (``statewright.http.limits``) in process, and the 500's
``Connection: close``: a declared body over the limit is refused before one byte is read, a
chunked one as soon as it passes the limit (the app never holds more), headers over their
limit get a JSON 431, and what stays under the limits (the SSE stream and ``/mcp`` included)
works as before. The same with a real ``statewright serve`` is in
tests/integration/test_serve_limits.py."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from statewright import Engine, SQLiteStore
from statewright.engine.builtin import agent_task_type
from statewright.http import create_app
from tests.http.conftest import auth, registry

LIMIT = 4096
HEADER_LIMIT = 2048
CHUNK = 512


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[Engine]:
    async with Engine(SQLiteStore(tmp_path / "limits.db"), [agent_task_type()]) as eng:
        yield eng


@pytest.fixture
def app(engine: Engine) -> FastAPI:
    return create_app(
        engine,
        registry(),
        manage_engine=False,
        max_body_bytes=LIMIT,
        max_header_bytes=HEADER_LIMIT,
    )


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://statewright") as c:
        yield c


class Body:
    """A request body sent in CHUNK-byte pieces, counting how many the app pulled.

    The JSON is an agent_task start padded with spaces to ``size`` bytes, so a body the limit
    lets through is a valid request.
    """

    def __init__(self, size: int | None, wid: str = "w1") -> None:
        self.size = size
        self.wid = wid
        self.pulled = 0

    def data(self, size: int) -> bytes:
        doc = json.dumps({"type": "agent_task", "id": self.wid}).encode()
        return doc + b" " * (size - len(doc))

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self.size is None:  # endless: a client that would never stop
            yield self.data(CHUNK)
            while True:
                self.pulled += 1
                yield b" " * CHUNK
        data = self.data(self.size)
        for i in range(0, len(data), CHUNK):
            self.pulled += 1
            yield data[i : i + CHUNK]


def assert_too_large(r: httpx.Response, limit: int = LIMIT) -> None:
    assert r.status_code == 413, r.text
    assert r.headers["content-type"] == "application/json"
    assert r.json()["error"]["code"] == "payload_too_large"
    assert r.json()["error"]["limit"] == limit
    assert str(limit) in r.json()["error"]["message"]


async def test_a_declared_length_over_the_limit_is_refused_before_the_body_is_read(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    body = Body(LIMIT + 1)
    headers = {**auth("agent"), "Content-Type": "application/json"}
    r = await client.post(
        "/v1/workflows", content=body, headers={**headers, "Content-Length": str(LIMIT + 1)}
    )
    assert_too_large(r)
    assert body.pulled == 0  # answered from the headers alone
    assert await engine.store.get_workflow("w1") is None
    # Up to the limit, the same request goes through.
    body = Body(LIMIT)
    r = await client.post(
        "/v1/workflows", content=body, headers={**headers, "Content-Length": str(LIMIT)}
    )
    assert r.status_code == 201, r.text
    # Any method, any path: the limit is the app's, not an operation's.
    r = await client.request("GET", "/livez", content=b"x" * (LIMIT + 1))
    assert_too_large(r)


async def test_a_chunked_body_is_refused_as_soon_as_it_passes_the_limit(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    headers = {**auth("agent"), "Content-Type": "application/json"}
    body = Body(None)  # no Content-Length: httpx sends it chunked; it never ends
    r = await client.post("/v1/workflows", content=body, headers=headers)
    assert_too_large(r)
    # The app read up to the chunk that passed the limit, and no further.
    assert body.pulled == LIMIT // CHUNK
    assert await engine.store.get_workflow("w1") is None
    # A finite one just over the limit too; one at the limit is taken.
    r = await client.post("/v1/workflows", content=Body(LIMIT + CHUNK), headers=headers)
    assert_too_large(r)
    r = await client.post("/v1/workflows", content=Body(LIMIT), headers=headers)
    assert r.status_code == 201, r.text


async def test_headers_over_the_limit_get_a_json_431(client: httpx.AsyncClient) -> None:
    r = await client.get("/livez", headers={"X-Padding": "a" * HEADER_LIMIT})
    assert r.status_code == 431, r.text
    assert r.headers["content-type"] == "application/json"
    error = r.json()["error"]
    assert (error["code"], error["limit"]) == ("headers_too_large", HEADER_LIMIT)
    # Counted as sent: "name: value\r\n" per field (httpx adds host, accept... of its own).
    r = await client.get("/livez", headers={"X-Padding": "a" * (HEADER_LIMIT // 2)})
    assert r.status_code == 200, r.text


async def test_the_stream_works_and_mcp_bodies_are_limited_too(client: httpx.AsyncClient) -> None:
    r = await client.post(
        "/v1/workflows", json={"type": "agent_task", "id": "s1"}, headers=auth("agent")
    )
    assert r.status_code == 201, r.text
    r = await client.get("/v1/stream", params={"limit": 1}, headers=auth("agent"))
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    assert "event: transition" in r.text and '"workflow_id":"s1"' in r.text.replace(" ", "")
    # /mcp: a JSON-RPC body over the limit is refused like any other, before authentication.
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": "x" * LIMIT}}
    r = await client.post("/mcp", json=rpc, headers={"Accept": "application/json"})
    assert_too_large(r)


async def test_413_is_documented_on_every_operation_that_takes_a_body(app: FastAPI) -> None:
    with_body = [
        (path, method, op)
        for path, item in app.openapi()["paths"].items()
        for method, op in item.items()
        if "requestBody" in op
    ]
    assert len(with_body) >= 5
    for path, method, op in with_body:
        doc = op["responses"].get("413")
        assert doc is not None, f"{method.upper()} {path} does not document 413"
        schema = doc["content"]["application/json"]["schema"]
        assert schema == {"$ref": "#/components/schemas/ErrorOut"}
    assert app.openapi() is app.openapi()  # still built once


def boom_app(engine: Engine) -> FastAPI:
    app = create_app(engine, registry(), manage_engine=False)

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("a bug")

    return app


async def test_an_unexpected_error_answers_500_json_with_connection_close(
    engine: Engine,
) -> None:
    transport = httpx.ASGITransport(app=boom_app(engine), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://statewright") as c:
        r = await c.get("/boom")
    assert r.status_code == 500
    assert r.json()["error"]["code"] == "internal_error"
    assert r.headers["connection"] == "close"


@pytest.fixture
def uvicorn_boom(engine: Engine) -> Iterator[int]:
    """The app with its failing route under a real uvicorn (h11, as ``serve`` runs it), in a
    thread; yields the port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    config = uvicorn.Config(
        boom_app(engine), host="127.0.0.1", port=port, http="h11", log_config=None, lifespan="off"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(10)


def read_response(sock: socket.socket) -> tuple[bytes, bytes]:
    """The response's head and everything after it until the server closes."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def test_the_server_closes_the_connection_after_a_500(uvicorn_boom: int) -> None:
    """The keep-alive connection is not reused: the server closes it after the answer, even
    though the client asked for another request on it."""
    request = b"GET /boom HTTP/1.1\r\nHost: x\r\n\r\nGET /livez HTTP/1.1\r\nHost: x\r\n\r\n"
    with socket.create_connection(("127.0.0.1", uvicorn_boom), timeout=10) as sock:
        sock.sendall(request)
        head, rest = read_response(sock)  # returns: the server closed the connection
    lines = head.decode().split("\r\n")
    assert lines[0] == "HTTP/1.1 500 Internal Server Error"
    assert "connection: close" in [line.lower() for line in lines]
    body: Any = json.loads(rest)
    assert body["error"]["code"] == "internal_error"  # and no second response


async def test_a_body_too_deep_to_parse_is_value_too_deep(engine: Engine) -> None:
    """10,000 levels, well under the default size limit: json.loads gives up on its recursion,
    and the answer is the code of a value too deep, not a parse error or a 500."""
    deep = b'{"a":' * 10_000 + b"1" + b"}" * 10_000
    body = b'{"type": "agent_task", "input": ' + deep + b"}"
    transport = httpx.ASGITransport(app=create_app(engine, registry(), manage_engine=False))
    async with httpx.AsyncClient(transport=transport, base_url="http://statewright") as c:
        r = await c.post(
            "/v1/workflows",
            content=body,
            headers={**auth("agent"), "Content-Type": "application/json"},
        )
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == "value_too_deep"
