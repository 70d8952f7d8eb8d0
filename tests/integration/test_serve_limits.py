"""Request limits with a real ``statewright serve`` (uvicorn, h11): a 10 MB body, declared or
chunked, is answered 413 JSON while the server's memory stays flat; headers over the app's
limit get a JSON 431 up to the HTTP parser's own limit, and the parser's plain 400 beyond it;
the serve options and their environment variables set the limits and the /metrics token.

Each server is forked from this worker's fork server of ``statewright`` command lines (the
``cli_forks`` fixture, tests/cli_forks.py): the same command line and process, without an
interpreter start-up; the variables it reads are read by the command at run time (its options'
``envvar``), in the child's own environment."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import yaml

from statewright.http.limits import MAX_BODY_BYTES, MAX_HEADER_BYTES, parser_limit
from tests.forkserver import Child, ForkServer
from tests.serving import wait_until_up

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 60.0
"""A hang, not a slow start or answer (the machine may be busy with other tests)."""
MB = 1024 * 1024


@dataclass(frozen=True)
class Served:
    url: str
    proc: Child
    log: Path

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def rss_kib(self) -> int:
        """The server process's resident memory (VmRSS, KiB)."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS in /proc status")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def serve(
    forks: ForkServer, tmp_path: Path, *options: str, env: dict[str, str] | None = None
) -> Iterator[Served]:
    """``statewright serve`` (forked) on a free port over a fresh SQLite file."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("STATEWRIGHT_")}
    port = _free_port()
    log = tmp_path / "serve.log"
    log.unlink(missing_ok=True)  # the log of this server only (a test may start two)
    argv = ["--db", str(tmp_path / "sw.db"), "serve", "--port", str(port), *options]
    proc = forks.popen(argv, log, env=clean | (env or {}), cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    try:
        assert wait_until_up(url, proc, log, timeout=TIMEOUT), f"serve exited:\n{log.read_text()}"
        yield Served(url, proc, log)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def error_of(r: httpx.Response, status: int) -> dict[str, object]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    error: dict[str, object] = r.json()["error"]
    return error


def chunks(total: int, size: int = 64 * 1024) -> Iterator[bytes]:
    """A body of unknown length (httpx sends a generator chunked)."""
    sent = 0
    while sent < total:
        yield b" " * min(size, total - sent)
        sent += size


def test_a_10_mb_body_is_refused_413_and_the_server_does_not_grow(
    cli_forks: ForkServer, tmp_path: Path
) -> None:
    with (
        serve(cli_forks, tmp_path) as served,
        httpx.Client(base_url=served.url, timeout=TIMEOUT) as api,
    ):
        json_headers = {"Content-Type": "application/json"}
        for _ in range(3):  # warm up: what the first requests import and cache
            assert api.get("/metrics").status_code == 200
            r = api.post("/v1/workflows", json={"type": "nope"})
            assert r.status_code == 404
        before = served.rss_kib()
        for _ in range(3):
            r = api.post("/v1/workflows", content=b"x" * (10 * MB), headers=json_headers)
            error = error_of(r, 413)
            assert (error["code"], error["limit"]) == ("payload_too_large", MAX_BODY_BYTES)
            r = api.post("/v1/workflows", content=chunks(10 * MB), headers=json_headers)
            assert "content-length" not in r.request.headers
            error = error_of(r, 413)
            assert (error["code"], error["limit"]) == ("payload_too_large", MAX_BODY_BYTES)
        grown = served.rss_kib() - before
        assert grown < 50 * 1024, f"the server grew by {grown} KiB"
        # The connection is still good (what the client sent after the 413 was discarded).
        assert api.get("/livez").status_code == 200
        assert api.post("/v1/workflows", json={"type": "nope"}).status_code == 404


def slow_head(port: int, size: int) -> bytes:
    """Send an unfinished request head in small pieces (as a slow client does, so the parser
    sees it incomplete) until it is just over ``size`` bytes, and return what the server
    answers before it closes. Nothing more is sent: data the server never reads would make it
    reset the connection (and the answer could be lost)."""
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
        sock.sendall(b"GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        sent = 0
        while sent <= size:
            line = b"X-Pad-%06d: %s\r\n" % (sent, b"a" * 4000)
            sock.sendall(line)
            sent += len(line)
            time.sleep(0.005)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        return answer


def test_headers_get_a_json_431_up_to_the_parsers_limit(
    cli_forks: ForkServer, tmp_path: Path
) -> None:
    limit = parser_limit(MAX_HEADER_BYTES)
    with (
        serve(cli_forks, tmp_path) as served,
        httpx.Client(base_url=served.url, timeout=TIMEOUT) as api,
    ):
        assert api.get("/livez", headers={"X-Pad": "a" * (MAX_HEADER_BYTES // 2)}).is_success
        for size in (MAX_HEADER_BYTES + 1, limit - 1024):
            error = error_of(api.get("/livez", headers={"X-Pad": "a" * size}), 431)
            assert (error["code"], error["limit"]) == ("headers_too_large", MAX_HEADER_BYTES)
        # Beyond the parser's buffer, the app never sees the request: uvicorn's plain 400.
        answer = slow_head(served.port, limit)
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400 "), answer[:200]
        assert b"content-type: text/plain" in head.lower()
        assert body == b"Invalid HTTP request received."
        assert api.get("/livez").status_code == 200  # and the server goes on


def test_the_limits_and_the_metrics_token_are_serve_options(
    cli_forks: ForkServer, tmp_path: Path
) -> None:
    tokens = tmp_path / "tokens.yaml"
    entries = [
        {"token": "ops-token-1", "actor": "prometheus", "roles": ["ops"]},
        {"token": "agent-token-1", "actor": "agent-7", "roles": ["agent"]},
    ]
    tokens.write_text(yaml.safe_dump({"tokens": entries}))
    options = ("--tokens", str(tokens), "--max-body-bytes", "2000", "--metrics-auth")
    env = {"STATEWRIGHT_MAX_HEADER_BYTES": "4096"}
    with (
        serve(cli_forks, tmp_path, *options, env=env) as served,
        httpx.Client(base_url=served.url, timeout=TIMEOUT) as api,
    ):
        agent = {"Authorization": "Bearer agent-token-1"}
        r = api.post("/v1/workflows", content=b" " * 2001, headers=agent)
        assert error_of(r, 413)["limit"] == 2000
        r = api.get("/livez", headers={"X-Pad": "a" * 4096})
        assert error_of(r, 431)["limit"] == 4096
        assert error_of(api.get("/metrics"), 401)["code"] == "unauthorized"
        assert error_of(api.get("/metrics", headers=agent), 403)["code"] == "forbidden"
        r = api.get("/metrics", headers={"Authorization": "Bearer ops-token-1"})
        assert r.status_code == 200 and "statewright_store_up 1.0" in r.text
    # The variables do the same as the options.
    env = {"STATEWRIGHT_MAX_BODY_BYTES": "3000", "STATEWRIGHT_METRICS_AUTH": "true"}
    with (
        serve(cli_forks, tmp_path, "--tokens", str(tokens), env=env) as served,
        httpx.Client(base_url=served.url, timeout=TIMEOUT) as api,
    ):
        r = api.post("/v1/workflows", content=b" " * 3001, headers=agent)
        assert error_of(r, 413)["limit"] == 3000
        assert api.get("/metrics").status_code == 401
