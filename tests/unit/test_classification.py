"""Error classification against the real Python HTTP ecosystem.

Every exception that a client library can be made to raise on this machine is produced for
real: local sockets stand in for the remote side (a bound port that does not listen refuses
connections, a listener that never accepts lets requests hang, a listener with a full accept
queue makes connects time out, a raw server drops connections or truncates bodies, and a tiny
HTTP server answers any status), and names under ``.invalid`` never resolve. Only the errors
that cannot be provoked cheaply and deterministically (write timeouts, broken pipes, a few
errnos) are constructed.
"""

from __future__ import annotations

import ast
import asyncio
import email.utils
import errno
import importlib
import socket
import struct
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import FrozenInstanceError
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import httpx2
import pytest
import requests
import requests.exceptions
import urllib3.exceptions

import statewright.engine.retry as retry_module
from statewright.engine.retry import (
    TRANSIENT_STATUS,
    Classification,
    Outcome,
    RetryPolicy,
    classify,
    outcome_of,
    retry_after_of,
)
from statewright.errors import (
    FatalError,
    RequestNotSent,
    StatewrightError,
    StepOutcomeUnknown,
    TransientError,
)

pytestmark = pytest.mark.one_worker  # its servers and timeouts are made once per module


class _Imported:
    """A module imported when a test first uses it: the SDKs take seconds to import, and only
    this module's tests (on one worker) use them."""

    def __init__(self, name: str) -> None:
        self.__name__ = name

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_") or attr.startswith("pytest"):
            # What pytest's collection asks of every name in a module (``__test__``,
            # ``pytestmark``...): not a reason to import the SDK on every worker.
            raise AttributeError(attr)
        return getattr(importlib.import_module(self.__name__), attr)


openai: Any = _Imported("openai")
anthropic: Any = _Imported("anthropic")

Verdict = tuple[Classification, Outcome]
NOT_SENT: Verdict = ("transient", "not_applied")
MAYBE_SENT: Verdict = ("transient", "unknown")
FATAL: Verdict = ("fatal", "unknown")
REFUSED: Verdict = ("fatal", "not_applied")

NXDOMAIN = "http://nonexistent.invalid/"  # RFC 6761: never resolves, fails fast offline
READ_TIMEOUT = 0.2
CONNECT_TIMEOUT = 0.1
# A read timeout only: a connect timeout, were a loaded machine slow to connect to localhost,
# would classify differently and make the read-timeout tests flaky.
HTTPX_READ_TIMEOUT = httpx.Timeout(2, read=READ_TIMEOUT)
HTTPX2_READ_TIMEOUT = httpx2.Timeout(2, read=READ_TIMEOUT)

RETRY_DATE = "Wed, 21 Oct 2065 07:28:00 GMT"
RETRY_DATE_TS = email.utils.parsedate_to_datetime(RETRY_DATE).timestamp()
NOW = RETRY_DATE_TS - 30.0  # the date is 30 s after NOW

# Status -> (classify, outcome_of): what every library's status error must give.
STATUSES: dict[int, Verdict] = {
    400: REFUSED,
    404: REFUSED,
    408: NOT_SENT,
    409: FATAL,
    422: REFUSED,
    425: NOT_SENT,
    429: NOT_SENT,
    500: MAYBE_SENT,
    501: FATAL,
    502: MAYBE_SENT,
    503: MAYBE_SENT,
    504: MAYBE_SENT,
    505: FATAL,
}


def verdict(exc: BaseException) -> Verdict:
    return classify(exc), outcome_of(exc)


def raised(fn: Callable[[], object]) -> BaseException:
    """The exception ``fn`` raises (it must raise)."""
    try:
        fn()
    except BaseException as exc:
        return exc
    raise AssertionError(f"{fn!r} did not raise")


# --- the other side ----------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    """Answers ``/<status>[-date][/anything]`` with that status (and a JSON error body).

    503 carries ``Retry-After: 7``, 429 ``Retry-After: 2``; ``-date`` makes it an HTTP-date.
    """

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        head = self.path.strip("/").split("/")[0].split("?")[0]
        code_text, _, variant = head.partition("-")
        code = int(code_text)
        body = b'{"error": {"message": "test", "type": "test"}}'
        self.send_response(code)
        if variant == "date":
            self.send_header("Retry-After", RETRY_DATE)
        elif code in (503, 429):
            self.send_header("Retry-After", "7" if code == 503 else "2")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def http_base() -> Iterator[str]:
    """An HTTP server answering any status (see ``_Handler``)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture(scope="module")
def refused_url() -> Iterator[str]:
    """A port that is bound but not listening: connecting is refused, deterministically."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/"


@pytest.fixture(scope="module")
def silent_url() -> Iterator[str]:
    """A listener that never accepts: connects succeed (in the kernel), answers never come."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/"


@pytest.fixture(scope="module")
def blackhole_url() -> Iterator[str]:
    """A listener whose accept queue is full: new connects get no SYN-ACK and time out."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(0)
        address = sock.getsockname()
        fillers = [socket.socket() for _ in range(3)]
        try:
            for filler in fillers:
                filler.setblocking(False)
                try:
                    filler.connect(address)
                except BlockingIOError:
                    pass
            with socket.socket() as probe:
                probe.settimeout(CONNECT_TIMEOUT)
                try:
                    probe.connect(address)
                except TimeoutError:
                    pass
                else:
                    pytest.skip("this kernel accepts connects beyond a full accept queue")
            yield f"http://{address[0]}:{address[1]}/"
        finally:
            for filler in fillers:
                filler.close()


def _httpx_pool_timeout(base: str) -> BaseException:
    limits = httpx.Limits(max_connections=1)
    timeout = httpx.Timeout(2, pool=CONNECT_TIMEOUT)
    with httpx.Client(trust_env=False, limits=limits, timeout=timeout) as client:
        with client.stream("GET", f"{base}/200"):  # holds the only connection
            return raised(lambda: client.get(f"{base}/200"))


async def _httpx_async_read_timeout(url: str) -> BaseException:
    async with httpx.AsyncClient(trust_env=False, timeout=HTTPX_READ_TIMEOUT) as client:
        try:
            await client.get(url)
        except BaseException as exc:
            return exc
    raise AssertionError(f"GET {url} did not raise")


@pytest.fixture(scope="module")
def timeouts(silent_url: str, blackhole_url: str, http_base: str) -> dict[str, BaseException]:
    """Every error that needs a timeout to expire, produced concurrently (keeps tests fast)."""
    silent_port = int(silent_url.rsplit(":", 1)[1].strip("/"))

    def socket_read() -> None:
        with socket.create_connection(("127.0.0.1", silent_port), timeout=2) as sock:
            sock.settimeout(0.05)
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            sock.recv(1024)

    scenarios: dict[str, Callable[[], object]] = {
        "socket-read": socket_read,
        "httpx-read": lambda: _httpx_get(silent_url, timeout=HTTPX_READ_TIMEOUT),
        "httpx-connect": lambda: _httpx_get(
            blackhole_url, timeout=httpx.Timeout(2, connect=CONNECT_TIMEOUT)
        ),
        "httpx-pool": lambda: _raise(_httpx_pool_timeout(http_base)),
        "httpx-async-read": lambda: _raise(asyncio.run(_httpx_async_read_timeout(silent_url))),
        "requests-read": lambda: _requests_get(silent_url, timeout=(2, READ_TIMEOUT)),
        "requests-connect": lambda: _requests_get(blackhole_url, timeout=(CONNECT_TIMEOUT, 2)),
        "aiohttp-sock-read": lambda: _raise(
            asyncio.run(_aiohttp_raised(silent_url, sock_read=READ_TIMEOUT))
        ),
        "aiohttp-total": lambda: _raise(
            asyncio.run(_aiohttp_raised(silent_url, total=READ_TIMEOUT))
        ),
        "aiohttp-connect": lambda: _raise(
            asyncio.run(_aiohttp_raised(blackhole_url, connect=CONNECT_TIMEOUT))
        ),
        "openai-read": lambda: _openai_call(silent_url, timeout=HTTPX2_READ_TIMEOUT),
        "anthropic-read": lambda: _anthropic_call(silent_url, timeout=HTTPX2_READ_TIMEOUT),
    }
    with ThreadPoolExecutor(len(scenarios)) as pool:
        futures = {name: pool.submit(raised, fn) for name, fn in scenarios.items()}
        return {name: future.result() for name, future in futures.items()}


def _raise(exc: BaseException) -> None:
    raise exc


class RawServer:
    """Reads each request's head, then misbehaves according to its path.

    ``/close``: closes without answering. ``/reset``: closes with a TCP RST. ``/truncated``:
    starts a chunked body and closes in the middle of it.
    """

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.02)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run)
        self.base = f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                try:
                    self._serve(conn)
                except OSError:
                    pass  # the client gave up first: fine

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(2)
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = conn.recv(65536)
            if not chunk:
                return
            head += chunk
        path = head.split(b" ", 2)[1]
        if path.startswith(b"/reset"):
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        elif path.startswith(b"/truncated"):
            conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nhalf")

    def __enter__(self) -> RawServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        self.sock.close()


@pytest.fixture(scope="module")
def raw_base() -> Iterator[str]:
    with RawServer() as server:
        yield server.base


# --- builtins ------------------------------------------------------------------------------------


def test_dns_failure_is_transient_and_not_applied() -> None:
    exc = raised(lambda: socket.getaddrinfo("nonexistent.invalid", 80))
    assert isinstance(exc, socket.gaierror)
    assert verdict(exc) == NOT_SENT


def test_connection_refused_is_transient_and_not_applied(refused_url: str) -> None:
    port = int(refused_url.rsplit(":", 1)[1].strip("/"))
    exc = raised(lambda: socket.create_connection(("127.0.0.1", port), timeout=1).close())
    assert isinstance(exc, ConnectionRefusedError)
    assert verdict(exc) == NOT_SENT


def test_connection_reset_is_transient_and_unknown(raw_base: str) -> None:
    port = int(raw_base.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
        sock.sendall(b"GET /reset HTTP/1.1\r\nHost: x\r\n\r\n")
        exc = raised(lambda: sock.recv(1024) or sock.recv(1024))
    assert isinstance(exc, ConnectionResetError)
    assert verdict(exc) == MAYBE_SENT


def test_socket_read_timeout_is_transient_and_unknown(
    timeouts: dict[str, BaseException],
) -> None:
    exc = timeouts["socket-read"]
    assert type(exc) is TimeoutError
    assert verdict(exc) == MAYBE_SENT


async def test_asyncio_timeout_is_transient_and_unknown() -> None:
    async def wait() -> None:
        async with asyncio.timeout(0.001):
            await asyncio.sleep(1)

    with pytest.raises(TimeoutError) as info:
        await wait()
    assert verdict(info.value) == MAYBE_SENT


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (BrokenPipeError(errno.EPIPE, "Broken pipe"), MAYBE_SENT),
        (ConnectionAbortedError(errno.ECONNABORTED, "aborted"), MAYBE_SENT),
        (OSError(errno.ENETUNREACH, "Network is unreachable"), NOT_SENT),
        (OSError(errno.EHOSTUNREACH, "No route to host"), NOT_SENT),
        (OSError(errno.ENETDOWN, "Network is down"), NOT_SENT),
        (OSError(errno.EHOSTDOWN, "Host is down"), NOT_SENT),
        (OSError(errno.ECONNREFUSED, "Connection refused"), NOT_SENT),
        (OSError(errno.ECONNRESET, "Connection reset by peer"), MAYBE_SENT),
        (OSError(errno.ETIMEDOUT, "Connection timed out"), MAYBE_SENT),
        (OSError(errno.EPIPE, "Broken pipe"), MAYBE_SENT),
        (OSError(errno.ECONNABORTED, "Software caused connection abort"), MAYBE_SENT),
        (OSError("no errno"), FATAL),
        (PermissionError(errno.EACCES, "Permission denied"), FATAL),
    ],
    ids=repr,
)
def test_os_errors_by_errno(exc: BaseException, expected: Verdict) -> None:
    assert verdict(exc) == expected


def test_file_not_found_is_fatal() -> None:
    exc = raised(lambda: open("/nonexistent/statewright/file").close())
    assert isinstance(exc, FileNotFoundError)
    assert verdict(exc) == FATAL


@pytest.mark.parametrize("exc", [KeyError("id"), ValueError("bad json"), RuntimeError("x")])
def test_unknown_plain_exceptions_are_fatal_and_unknown(exc: BaseException) -> None:
    assert verdict(exc) == FATAL


# --- httpx -------------------------------------------------------------------------------------


def _httpx_get(url: str, **client: Any) -> httpx.Response:
    with httpx.Client(trust_env=False, **client) as c:
        response = c.get(url)
        response.raise_for_status()
        return response


def test_httpx_connect_refused(refused_url: str) -> None:
    exc = raised(lambda: _httpx_get(refused_url))
    assert isinstance(exc, httpx.ConnectError)
    assert verdict(exc) == NOT_SENT


def test_httpx_dns_failure() -> None:
    exc = raised(lambda: _httpx_get(NXDOMAIN, timeout=2))
    assert isinstance(exc, httpx.ConnectError)
    assert verdict(exc) == NOT_SENT


def test_httpx_connect_timeout(timeouts: dict[str, BaseException]) -> None:
    exc = timeouts["httpx-connect"]
    assert isinstance(exc, httpx.ConnectTimeout)
    assert verdict(exc) == NOT_SENT


def test_httpx_pool_timeout(timeouts: dict[str, BaseException]) -> None:
    exc = timeouts["httpx-pool"]
    assert isinstance(exc, httpx.PoolTimeout)
    assert verdict(exc) == NOT_SENT


@pytest.mark.parametrize("name", ["httpx-read", "httpx-async-read"])
def test_httpx_read_timeout(timeouts: dict[str, BaseException], name: str) -> None:
    exc = timeouts[name]
    assert isinstance(exc, httpx.ReadTimeout)
    assert verdict(exc) == MAYBE_SENT


@pytest.mark.parametrize(
    ("path", "error"),
    [
        ("/close", httpx.RemoteProtocolError),
        ("/reset", httpx.ReadError),
        ("/truncated", httpx.RemoteProtocolError),
    ],
)
def test_httpx_broken_mid_request(raw_base: str, path: str, error: type[Exception]) -> None:
    exc = raised(lambda: _httpx_get(raw_base + path, timeout=2))
    assert isinstance(exc, error)
    assert verdict(exc) == MAYBE_SENT


def test_httpx_unsupported_protocol_is_fatal_not_applied() -> None:
    exc = raised(lambda: _httpx_get("ftp://example.invalid/"))
    assert isinstance(exc, httpx.UnsupportedProtocol)
    assert verdict(exc) == REFUSED


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (httpx.WriteTimeout("write timed out"), MAYBE_SENT),
        (httpx.WriteError("broken pipe"), MAYBE_SENT),
        (httpx.CloseError("close failed"), MAYBE_SENT),
        (httpx.ProxyError("proxy said no"), MAYBE_SENT),
        (httpx.LocalProtocolError("bad header"), FATAL),
        (httpx.TooManyRedirects("loop"), FATAL),
        (httpx.DecodingError("bad gzip"), FATAL),
        (httpx2.ConnectError("refused"), NOT_SENT),
        (httpx2.ReadTimeout("timed out"), MAYBE_SENT),
    ],
    ids=repr,
)
def test_httpx_constructed(exc: BaseException, expected: Verdict) -> None:
    assert verdict(exc) == expected


@pytest.mark.parametrize(("status", "expected"), STATUSES.items())
def test_httpx_status(http_base: str, status: int, expected: Verdict) -> None:
    exc = raised(lambda: _httpx_get(f"{http_base}/{status}"))
    assert isinstance(exc, httpx.HTTPStatusError)
    assert verdict(exc) == expected


def test_httpx_retry_after(http_base: str) -> None:
    exc = raised(lambda: _httpx_get(f"{http_base}/503"))
    assert retry_after_of(exc) == 7.0
    exc = raised(lambda: _httpx_get(f"{http_base}/503-date"))
    assert retry_after_of(exc, now=NOW) == pytest.approx(30.0)
    assert verdict(exc) == MAYBE_SENT


async def test_httpx_async(refused_url: str, http_base: str, raw_base: str) -> None:
    async with httpx.AsyncClient(trust_env=False, timeout=2) as client:
        with pytest.raises(httpx.ConnectError) as refused:
            await client.get(refused_url)
        with pytest.raises(httpx.ConnectError) as nxdomain:
            await client.get(NXDOMAIN)
        with pytest.raises(httpx.RemoteProtocolError) as closed:
            await client.get(f"{raw_base}/close")
        response = await client.get(f"{http_base}/429")
        with pytest.raises(httpx.HTTPStatusError) as status:
            response.raise_for_status()
    assert verdict(refused.value) == NOT_SENT
    assert verdict(nxdomain.value) == NOT_SENT
    assert verdict(closed.value) == MAYBE_SENT
    assert verdict(status.value) == NOT_SENT
    assert retry_after_of(status.value) == 2.0


# --- requests ----------------------------------------------------------------------------------


def _requests_get(url: str, timeout: float | tuple[float, float] = 2) -> requests.Response:
    with requests.Session() as session:
        session.trust_env = False
        with session.get(url, timeout=timeout) as response:
            response.raise_for_status()
            return response


def test_requests_connect_refused(refused_url: str) -> None:
    exc = raised(lambda: _requests_get(refused_url))
    assert type(exc) is requests.ConnectionError
    assert isinstance(exc.args[0], urllib3.exceptions.MaxRetryError)
    assert isinstance(exc.args[0].reason, urllib3.exceptions.NewConnectionError)
    assert verdict(exc) == NOT_SENT


def test_requests_dns_failure() -> None:
    exc = raised(lambda: _requests_get(NXDOMAIN))
    assert type(exc) is requests.ConnectionError
    assert isinstance(exc.args[0].reason, urllib3.exceptions.NameResolutionError)
    assert verdict(exc) == NOT_SENT


def test_requests_connect_timeout(timeouts: dict[str, BaseException]) -> None:
    exc = timeouts["requests-connect"]
    assert isinstance(exc, requests.ConnectTimeout)
    assert verdict(exc) == NOT_SENT


def test_requests_read_timeout(timeouts: dict[str, BaseException]) -> None:
    exc = timeouts["requests-read"]
    assert isinstance(exc, requests.ReadTimeout)
    assert verdict(exc) == MAYBE_SENT


@pytest.mark.parametrize(
    ("path", "error"),
    [
        ("/close", requests.ConnectionError),
        ("/reset", requests.ConnectionError),
        ("/truncated", requests.exceptions.ChunkedEncodingError),
    ],
)
def test_requests_broken_mid_request(raw_base: str, path: str, error: type[Exception]) -> None:
    exc = raised(lambda: _requests_get(raw_base + path))
    assert type(exc) is error
    assert verdict(exc) == MAYBE_SENT


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (requests.Timeout("timed out"), MAYBE_SENT),
        (requests.ConnectionError("no urllib3 error inside"), MAYBE_SENT),
        (requests.HTTPError("no response attached"), FATAL),
        (requests.exceptions.InvalidURL("bad url"), FATAL),
    ],
    ids=repr,
)
def test_requests_constructed(exc: BaseException, expected: Verdict) -> None:
    assert verdict(exc) == expected


@pytest.mark.parametrize(("status", "expected"), STATUSES.items())
def test_requests_status(http_base: str, status: int, expected: Verdict) -> None:
    exc = raised(lambda: _requests_get(f"{http_base}/{status}"))
    assert isinstance(exc, requests.HTTPError)
    assert verdict(exc) == expected


def test_requests_retry_after(http_base: str) -> None:
    exc = raised(lambda: _requests_get(f"{http_base}/503"))
    assert retry_after_of(exc) == 7.0
    exc = raised(lambda: _requests_get(f"{http_base}/503-date"))
    assert retry_after_of(exc, now=NOW) == pytest.approx(30.0)


def test_urllib3_direct() -> None:
    reason = urllib3.exceptions.NewConnectionError(None, "refused")  # type: ignore[arg-type]
    assert verdict(urllib3.exceptions.MaxRetryError(None, "/", reason)) == NOT_SENT  # type: ignore[arg-type]
    read = urllib3.exceptions.ReadTimeoutError(None, "/", "read timed out")  # type: ignore[arg-type]
    assert verdict(read) == MAYBE_SENT
    assert verdict(urllib3.exceptions.MaxRetryError(None, "/", read)) == MAYBE_SENT  # type: ignore[arg-type]


# --- urllib (stdlib) -----------------------------------------------------------------------------


def test_urllib(refused_url: str, http_base: str) -> None:
    refused = raised(lambda: urllib.request.urlopen(refused_url, timeout=2).close())
    assert isinstance(refused, urllib.error.URLError)
    assert verdict(refused) == NOT_SENT
    status = raised(lambda: urllib.request.urlopen(f"{http_base}/503", timeout=2).close())
    assert isinstance(status, urllib.error.HTTPError)
    try:
        assert verdict(status) == MAYBE_SENT
        assert retry_after_of(status) == 7.0  # an email.message.Message header object
    finally:
        status.close()


# --- aiohttp ---------------------------------------------------------------------------------


async def _aiohttp_get(url: str, **timeout: float) -> bytes:
    client_timeout = aiohttp.ClientTimeout(**({"total": 2.0} | timeout))
    async with (
        aiohttp.ClientSession(trust_env=False, timeout=client_timeout) as session,
        session.get(url, raise_for_status=True) as response,
    ):
        return await response.read()


async def _aiohttp_raised(url: str, **timeout: float) -> BaseException:
    try:
        await _aiohttp_get(url, **timeout)
    except BaseException as exc:
        return exc
    raise AssertionError(f"GET {url} did not raise")


async def test_aiohttp_connect_refused(refused_url: str) -> None:
    exc = await _aiohttp_raised(refused_url)
    assert type(exc) is aiohttp.ClientConnectorError
    assert verdict(exc) == NOT_SENT


async def test_aiohttp_dns_failure() -> None:
    exc = await _aiohttp_raised(NXDOMAIN)
    assert isinstance(exc, aiohttp.ClientConnectorDNSError)
    assert verdict(exc) == NOT_SENT


def test_aiohttp_connect_timeout(timeouts: dict[str, BaseException]) -> None:
    exc = timeouts["aiohttp-connect"]
    assert isinstance(exc, aiohttp.ConnectionTimeoutError)
    assert verdict(exc) == NOT_SENT


def test_aiohttp_read_timeouts(timeouts: dict[str, BaseException]) -> None:
    sock_read = timeouts["aiohttp-sock-read"]
    assert isinstance(sock_read, aiohttp.SocketTimeoutError)
    assert verdict(sock_read) == MAYBE_SENT
    total = timeouts["aiohttp-total"]
    assert type(total) is TimeoutError  # asyncio.TimeoutError
    assert verdict(total) == MAYBE_SENT


@pytest.mark.parametrize(
    ("path", "error"),
    [
        ("/close", aiohttp.ServerDisconnectedError),
        ("/reset", aiohttp.ClientConnectionError),
        ("/truncated", aiohttp.ClientPayloadError),
    ],
)
async def test_aiohttp_broken_mid_request(
    raw_base: str, path: str, error: type[Exception]
) -> None:
    exc = await _aiohttp_raised(raw_base + path)
    assert isinstance(exc, error)
    assert verdict(exc) == MAYBE_SENT


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (aiohttp.ClientOSError(errno.ECONNRESET, "reset"), MAYBE_SENT),
        (aiohttp.ServerTimeoutError("timeout"), MAYBE_SENT),
        (aiohttp.ClientConnectionError("closed"), MAYBE_SENT),
        (aiohttp.InvalidURL("not a url"), FATAL),
    ],
    ids=repr,
)
def test_aiohttp_constructed(exc: BaseException, expected: Verdict) -> None:
    assert verdict(exc) == expected


async def test_aiohttp_status(http_base: str) -> None:
    for status, expected in STATUSES.items():
        exc = await _aiohttp_raised(f"{http_base}/{status}")
        assert isinstance(exc, aiohttp.ClientResponseError)
        assert (status, verdict(exc)) == (status, expected)


async def test_aiohttp_retry_after(http_base: str) -> None:
    exc = await _aiohttp_raised(f"{http_base}/503")
    assert retry_after_of(exc) == 7.0  # CIMultiDictProxy on exc.headers
    exc = await _aiohttp_raised(f"{http_base}/503-date")
    assert retry_after_of(exc, now=NOW) == pytest.approx(30.0)


# --- OpenAI and Anthropic SDKs -------------------------------------------------------------------


def _request(lib: Any = httpx) -> Any:
    return lib.Request("POST", "https://api.example.invalid/v1/messages")


def _make_response(status: int, headers: dict[str, str] | None = None, lib: Any = httpx) -> Any:
    return lib.Response(status, headers=headers, json={"error": "x"}, request=_request(lib))


SDKS = [openai, anthropic]
# The SDKs take httpx objects; their current versions are built on httpx2: try both.
HTTP_LIBS = [httpx, httpx2]


@pytest.mark.parametrize("lib", HTTP_LIBS, ids=lambda m: m.__name__)
@pytest.mark.parametrize("sdk", SDKS, ids=lambda m: m.__name__)
def test_sdk_status_errors_built_from_real_responses(sdk: Any, lib: Any) -> None:
    def response(status: int, headers: dict[str, str] | None = None) -> Any:
        return _make_response(status, headers, lib)

    rate = sdk.RateLimitError("slow down", response=response(429, {"retry-after": "3"}), body={})
    assert verdict(rate) == NOT_SENT
    assert retry_after_of(rate) == 3.0
    # The SDKs' finer-grained header wins.
    ms = sdk.RateLimitError(
        "x", response=response(429, {"retry-after-ms": "1500", "retry-after": "3"}), body={}
    )
    assert retry_after_of(ms) == 1.5
    assert verdict(sdk.InternalServerError("x", response=response(500), body=None)) == MAYBE_SENT
    assert verdict(sdk.APIStatusError("x", response=response(503), body=None)) == MAYBE_SENT
    assert verdict(sdk.BadRequestError("x", response=response(400), body=None)) == REFUSED
    assert verdict(sdk.ConflictError("x", response=response(409), body=None)) == FATAL
    assert verdict(sdk.AuthenticationError("x", response=response(401), body=None)) == REFUSED


@pytest.mark.parametrize("lib", HTTP_LIBS, ids=lambda m: m.__name__)
@pytest.mark.parametrize("sdk", SDKS, ids=lambda m: m.__name__)
def test_sdk_connection_errors_follow_their_cause(sdk: Any, lib: Any) -> None:
    def wrapped(cause: BaseException | None, error: Callable[..., BaseException]) -> BaseException:
        try:
            raise error(request=_request(lib)) from cause  # as the SDKs do
        except BaseException as exc:
            return exc

    connection, timeout = sdk.APIConnectionError, sdk.APITimeoutError
    assert verdict(wrapped(None, connection)) == MAYBE_SENT
    assert verdict(wrapped(httpx.ConnectError("refused"), connection)) == NOT_SENT
    assert verdict(wrapped(httpx2.ConnectError("refused"), connection)) == NOT_SENT
    assert verdict(wrapped(httpx.ReadError("reset"), connection)) == MAYBE_SENT
    assert verdict(wrapped(httpx.ConnectTimeout("slow"), timeout)) == NOT_SENT
    assert verdict(wrapped(httpx.PoolTimeout("busy"), timeout)) == NOT_SENT
    assert verdict(wrapped(httpx.ReadTimeout("slow"), timeout)) == MAYBE_SENT


def _openai_call(base_url: str, timeout: float | httpx2.Timeout = 2) -> Any:
    with (
        httpx2.Client(trust_env=False) as http,
        openai.OpenAI(
            api_key="test", base_url=base_url, max_retries=0, timeout=timeout, http_client=http
        ) as client,
    ):
        return client.models.list()


def _anthropic_call(base_url: str, timeout: float | httpx2.Timeout = 2) -> Any:
    with (
        httpx2.Client(trust_env=False) as http,
        anthropic.Anthropic(
            api_key="test", base_url=base_url, max_retries=0, timeout=timeout, http_client=http
        ) as client,
    ):
        return client.models.list()


@pytest.mark.parametrize(
    ("sdk", "call"),
    [(openai, _openai_call), (anthropic, _anthropic_call)],
    ids=["openai", "anthropic"],
)
def test_sdk_real_calls(
    sdk: Any,
    call: Callable[..., Any],
    refused_url: str,
    http_base: str,
    timeouts: dict[str, BaseException],
) -> None:
    refused = raised(lambda: call(refused_url))
    assert type(refused) is sdk.APIConnectionError
    assert verdict(refused) == NOT_SENT
    timeout = timeouts[f"{sdk.__name__}-read"]
    assert type(timeout) is sdk.APITimeoutError
    assert verdict(timeout) == MAYBE_SENT
    limited = raised(lambda: call(f"{http_base}/429"))
    assert type(limited) is sdk.RateLimitError
    assert verdict(limited) == NOT_SENT
    assert retry_after_of(limited) == 2.0
    busy = raised(lambda: call(f"{http_base}/503-date"))
    assert verdict(busy) == MAYBE_SENT
    assert retry_after_of(busy, now=NOW) == pytest.approx(30.0)
    invalid = raised(lambda: call(f"{http_base}/422"))
    assert verdict(invalid) == REFUSED


# --- statewright's own errors ----------------------------------------------------------------


def test_statewright_errors() -> None:
    assert verdict(TransientError("flaky")) == MAYBE_SENT
    assert verdict(FatalError("bad data")) == FATAL
    assert verdict(StepOutcomeUnknown("charge")) == FATAL
    assert verdict(StatewrightError("other")) == FATAL


def test_request_not_sent() -> None:
    exc = RequestNotSent()
    assert isinstance(exc, TransientError)
    assert exc.code == "request_not_sent"
    assert exc.message == (
        "The request never reached the other side: nothing was applied, "
        "so the step may simply run again."
    )
    assert verdict(exc) == NOT_SENT

    def mark() -> None:
        try:
            raise httpx.ReadTimeout("slow")
        except httpx.ReadTimeout as cause:
            raise RequestNotSent("pool exhausted", retry_after=4) from cause

    # The user's word wins over a cause that alone would say "unknown".
    wrapped = raised(mark)
    assert isinstance(wrapped, RequestNotSent)
    assert verdict(wrapped) == NOT_SENT
    assert retry_after_of(wrapped) == 4.0
    assert wrapped.to_dict()["code"] == "request_not_sent"


def test_chains() -> None:
    def chained(cause: BaseException, make: Callable[[], BaseException]) -> BaseException:
        try:
            try:
                raise cause
            except BaseException:
                raise make()  # noqa: B904 (an implicit __context__ is what is tested)
        except BaseException as exc:
            return exc
        raise AssertionError  # pragma: no cover

    # A parse error after a connect failure: retried, but the outcome is not proven.
    after_connect = chained(httpx.ConnectError("refused"), lambda: KeyError("id"))
    assert verdict(after_connect) == MAYBE_SENT
    after_timeout = chained(httpx.ReadTimeout("slow"), lambda: ValueError("x"))
    assert verdict(after_timeout) == MAYBE_SENT

    class Wrapper(Exception):
        pass

    def wrap() -> None:
        raise Wrapper("upstream failed") from httpx.ConnectError("refused")

    def disown() -> None:
        try:
            raise httpx.ConnectError("refused")
        except httpx.ConnectError:
            raise Wrapper("config is wrong") from None

    assert verdict(raised(wrap)) == MAYBE_SENT  # only RequestNotSent says "not applied"
    assert verdict(raised(disown)) == FATAL  # the context was disowned
    fatal_cause = chained(httpx.ConnectError("x"), lambda: FatalError("no"))
    assert verdict(fatal_cause) == FATAL  # its own class decides first

    # A cycle must not hang.
    a, b = ValueError("a"), ValueError("b")
    a.__context__, b.__context__ = b, a
    assert verdict(a) == FATAL


def test_exception_groups() -> None:
    transient = ExceptionGroup("all", [httpx.ConnectError("a"), httpx.ReadTimeout("b")])
    assert verdict(transient) == MAYBE_SENT
    only_refused = ExceptionGroup("all", [httpx.ConnectError("a"), ConnectionRefusedError()])
    assert verdict(only_refused) == MAYBE_SENT  # a sibling may have succeeded
    mixed = ExceptionGroup("some", [httpx.ConnectError("a"), KeyError("b")])
    assert verdict(mixed) == FATAL


def test_status_attributes_on_any_exception() -> None:
    class ApiError(Exception):
        def __init__(self, **attrs: Any) -> None:
            super().__init__("api")
            self.__dict__.update(attrs)

    assert verdict(ApiError(status_code=503)) == MAYBE_SENT
    assert verdict(ApiError(status=429)) == NOT_SENT
    assert verdict(ApiError(status_code=403)) == REFUSED
    assert verdict(ApiError(status_code=True)) == FATAL  # a bool is no status
    assert verdict(ApiError(status=0)) == FATAL  # nor is an int outside 100-599
    assert verdict(ApiError(status="503")) == FATAL  # nor text


def test_transient_status_table() -> None:
    assert {408, 425, 429, 500, 502, 503, 504, 599} <= TRANSIENT_STATUS
    assert not {400, 404, 409, 422, 501, 505} & TRANSIENT_STATUS


# --- Retry-After ---------------------------------------------------------------------------------


class _Carrier(Exception):
    def __init__(self, *, retry_after: object = None, headers: object = None) -> None:
        super().__init__("carrier")
        self.retry_after = retry_after
        self.headers = headers


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("7", 7.0),
        (" 1.5 ", 1.5),
        ("-5", 0.0),
        ("soon", None),
        ("nan", None),
        ("inf", None),
        ("", None),
        (RETRY_DATE, 30.0),
        ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),  # in the past: no wait
        ("Wed, 21 Oct 2065 07:28:00 -0000", 30.0),  # tz-less: UTC
        ("Wed, 99 Foo 2065 07:28:00 GMT", None),
    ],
)
def test_retry_after_header_values(value: str, expected: float | None) -> None:
    exc = _Carrier(headers={"retry-after": value})
    result = retry_after_of(exc, now=NOW)
    assert result == (None if expected is None else pytest.approx(expected))


def test_retry_after_sources() -> None:
    assert retry_after_of(_Carrier(retry_after=4)) == 4.0
    assert retry_after_of(_Carrier(retry_after="4.5")) == 4.5
    assert retry_after_of(_Carrier(retry_after=-1)) == 0.0
    assert retry_after_of(_Carrier(retry_after=True)) is None
    assert retry_after_of(_Carrier(headers={"RETRY-AFTER": "9"})) == 9.0  # a plain dict
    assert retry_after_of(_Carrier(headers={"X-Other": "9"})) is None
    assert retry_after_of(_Carrier(headers=object())) is None
    assert retry_after_of(TransientError("busy", retry_after=12)) == 12.0
    assert retry_after_of(KeyError("x")) is None
    # Without ``now``, the clock is read.
    seconds = retry_after_of(_Carrier(headers={"Retry-After": RETRY_DATE}))
    assert seconds == pytest.approx(RETRY_DATE_TS - time.time(), abs=5)


def test_retry_after_follows_the_cause() -> None:
    status = httpx.HTTPStatusError(
        "busy", request=_request(), response=_make_response(503, {"Retry-After": "11"})
    )

    def wrap() -> None:
        raise TransientError("upstream busy") from status

    assert retry_after_of(raised(wrap)) == 11.0


# --- RetryPolicy ---------------------------------------------------------------------------------


class AppError(Exception):
    pass


class AppSubError(AppError):
    pass


def test_policy_defaults_and_delay_are_unchanged() -> None:
    policy = RetryPolicy()
    assert (policy.max_attempts, policy.base_delay, policy.max_delay) == (5, 1.0, 300.0)
    assert (policy.multiplier, policy.jitter, policy.max_retry_after) == (2.0, 0.5, 3600.0)
    assert policy.max_total_attempts == 50
    assert policy.transient_errors == policy.fatal_errors == policy.not_applied_errors == ()
    assert policy.classifier is None
    exact = RetryPolicy(jitter=0)
    assert [exact.delay(n) for n in (1, 2, 3)] == [1.0, 2.0, 4.0]
    assert exact.delay(30) == 300.0
    assert exact.delay(1, retry_after=7.0) == 7.0
    assert exact.delay(1, retry_after=99999.0) == 3600.0
    assert 0.5 <= policy.delay(1) <= 1.0
    with pytest.raises(FrozenInstanceError):
        policy.max_attempts = 3  # type: ignore[misc]


def test_policy_defaults_match_module_functions() -> None:
    policy = RetryPolicy()
    for exc in (httpx.ConnectError("x"), KeyError("x"), TransientError(), RequestNotSent()):
        assert (policy.classify(exc), policy.outcome(exc)) == verdict(exc)


def test_policy_overrides() -> None:
    policy = RetryPolicy(transient_errors=(AppError,))
    assert policy.classify(AppSubError()) == "transient"
    assert policy.outcome(AppSubError()) == "unknown"

    policy = RetryPolicy(fatal_errors=(httpx.ReadTimeout,))
    assert policy.classify(httpx.ReadTimeout("x")) == "fatal"
    assert policy.classify(httpx.ConnectError("x")) == "transient"

    policy = RetryPolicy(not_applied_errors=(AppError,))
    assert (policy.classify(AppError()), policy.outcome(AppError())) == NOT_SENT


def test_policy_precedence() -> None:
    def classifier(exc: BaseException) -> Classification | None:
        if isinstance(exc, KeyError):
            return "transient"
        if isinstance(exc, LookupError):
            return "fatal"
        return None

    # classifier -> fatal_errors -> transient_errors / not_applied_errors -> default
    policy = RetryPolicy(
        classifier=classifier,
        fatal_errors=(KeyError, AppError, TimeoutError),
        transient_errors=(AppError, ValueError),
        not_applied_errors=(TimeoutError,),
    )
    assert policy.classify(KeyError()) == "transient"  # classifier beats fatal_errors
    assert policy.classify(IndexError()) == "fatal"  # classifier beats the default
    assert policy.classify(AppError()) == "fatal"  # fatal_errors beats transient_errors
    assert policy.classify(ValueError()) == "transient"  # transient_errors beats the default
    assert policy.classify(httpx.ReadError("x")) == "transient"  # None: the default
    assert policy.classify(RuntimeError()) == "fatal"
    # fatal_errors overrides the transient that not_applied_errors implies; the outcome stays.
    assert policy.classify(TimeoutError()) == "fatal"
    assert policy.outcome(TimeoutError()) == "not_applied"
    # Overrides of classify never change the outcome.
    assert policy.outcome(KeyError()) == "unknown"
    assert policy.outcome(httpx.ConnectError("x")) == "not_applied"


def test_policy_validation() -> None:
    with pytest.raises(TypeError, match="fatal_errors"):
        RetryPolicy(fatal_errors=KeyError)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="transient_errors"):
        RetryPolicy(transient_errors=("KeyError",))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_total_attempts"):
        RetryPolicy(max_total_attempts=0)
    assert RetryPolicy(max_total_attempts=None).max_total_attempts is None


def test_control_flow_exceptions_are_fatal_whatever_they_interrupted() -> None:
    def interrupted(make: Callable[[], BaseException]) -> BaseException:
        def fn() -> None:
            try:
                raise httpx.ConnectError("refused")
            except httpx.ConnectError:
                raise make()  # noqa: B904 (the implicit __context__ is the point)

        return raised(fn)

    for make in (KeyboardInterrupt, asyncio.CancelledError, SystemExit):
        exc = interrupted(make)
        assert verdict(exc) == FATAL
        assert RetryPolicy().classify(exc) == "fatal"


def test_retry_module_imports_no_http_library() -> None:
    """Classification is by name: the engine must not import (or need) any client library."""
    tree = ast.parse(Path(retry_module.__file__).read_text(encoding="utf-8"))
    imported = {
        name.split(".")[0]
        for node in ast.walk(tree)
        for name in (
            [alias.name for alias in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
    }
    assert imported - {"__future__", "statewright"} <= sys.stdlib_module_names
