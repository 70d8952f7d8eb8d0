"""A real ``statewright serve --worker`` process and a real Chromium for the dashboard tests.

Chromium must be at ``/usr/bin/chromium`` (``./scripts/test`` installs it); without it the
tests fail, they never skip. Playwright cannot download browsers here, so it launches that one.

One Playwright and one Chromium, with one browser profile, serve every test of this package
(``profile``: a test opens new pages in it, each with an empty sessionStorage, where the
dashboard keeps its token), and one open-mode service the tests that only add their own
workflows to it (``open_server``); a test that counts what the service holds gets a service of
its own (``server``, ``ops_server``), on the same port as the one before it (``service_port``).
The package's tests run on one pytest-xdist worker, one after the other (``BROWSER_GROUP``), so
that these are started once per run rather than once per test. They are package-scoped, not
session-scoped: Playwright's sync API marks an event loop as running in this thread while it
is started (``asyncio.run`` then fails: the helpers that use a store run it in a thread of its
own), so it is stopped as soon as the worker leaves the package.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from playwright.sync_api import BrowserContext, expect, sync_playwright

from tests.forkserver import Child, ForkServer
from tests.serving import wait_until_up

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
APPS = [
    ROOT / "examples" / "refund_approval.py",
    Path(__file__).with_name("support_ticket.yaml"),
    Path(__file__).with_name("payment.yaml"),
    Path(__file__).with_name("desk_order.yaml"),
    ROOT / "tests" / "family_app.py",
    ROOT / "tests" / "agents_app.py",
    ROOT / "examples" / "refund_agent.py",
]
START_TIMEOUT = 60.0
"""A hang, not a slow start: `serve` imports for seconds on a busy 2-core machine."""
STOP_TIMEOUT = 10.0
EXPECT_TIMEOUT = 15.0
"""Seconds an ``expect`` waits for the page (Playwright's default is 5): a click's request,
the server's answer and the page's refresh share two cores with the rest of the parallel
suite; what is expected is the same, only a slow page is no longer a failure."""
expect.set_options(timeout=EXPECT_TIMEOUT * 1000)
BROWSER_GROUP = pytest.mark.xdist_group("browser")
"""Every module of the package is marked with it: one worker runs them all (tests/conftest.py),
with one Chromium and one open-mode service."""


@dataclass(frozen=True)
class Caller:
    token: str
    actor: str
    roles: tuple[str, ...]

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


APPROVER = Caller("approver-token-maria", "maria", ("approver", "operator"))
AGENT = Caller("agent-token-agent-7", "agent-7", ("agent",))
ADMIN = Caller("admin-token-root", "root", ("admin",))
VIEWER = Caller("viewer-token-vic", "vic", ("viewer",))


@dataclass(frozen=True)
class Server:
    url: str
    proc: Child
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture(scope="session")
def chromium() -> str:
    """The browser's path; fails the test (never skips) when it is not installed."""
    if not (CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK)):
        pytest.fail(
            f"the dashboard browser test needs Chromium at {CHROMIUM}, which is missing: "
            "install it (apt-get install chromium; ./scripts/test does it when it may)",
            pytrace=False,
        )
    return str(CHROMIUM)


@pytest.fixture(scope="package")
def profile(chromium: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrowserContext]:
    """One headless Chromium with one profile on disk for the package's tests, which open
    pages (tabs) in it."""
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            tmp_path_factory.mktemp("chromium-profile"),
            executable_path=chromium,
            headless=True,
            viewport={"width": 1440, "height": 1000},
        )
        try:
            yield context
        finally:
            context.close()


def _free_port(preferred: int = 0) -> int:
    """``preferred`` when nothing listens on it (as the service binds: SO_REUSEADDR, so a
    closed connection of an earlier service there is no hindrance), else any free port."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", preferred))
        except OSError:
            s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="package")
def service_port() -> int:
    """The port of the package's services of one test each, taken one after the other: the
    browser profile keeps the code it compiled for a script by the script's URL, so the
    dashboard's Mermaid (3.5 MB, 1-2 s of a core to compile) is compiled for the first of them
    only. A service finds it taken by another process now and then: it takes another one."""
    return _free_port()


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATEWRIGHT_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def _stop(proc: Child) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(STOP_TIMEOUT)


def _wait_ready(url: str, proc: Child, log: Path) -> bool:
    """True once /ready answers 200; False if the process exited (e.g. the port was taken)."""
    try:
        return wait_until_up(url, proc, log, path="/ready", timeout=START_TIMEOUT, every=0.1)
    except TimeoutError as exc:
        _stop(proc)
        pytest.fail(f"statewright serve was not ready: {exc}")


@contextmanager
def serve(
    forks: ForkServer, tmp_path: Path, callers: tuple[Caller, ...] | None, port: int = 0
) -> Iterator[Server]:
    """``statewright serve --worker`` on a free port (``port`` if it is free) over a fresh
    SQLite file, with a tokens file for ``callers`` (None: open mode, no tokens); forked from
    this worker's fork server of ``statewright`` command lines (the ``cli_forks`` fixture):
    the same command line and process, without an interpreter start-up."""
    options = []
    if callers is not None:
        tokens = tmp_path / "tokens.yaml"
        entries = [
            {"token": c.token, "actor": c.actor, "roles": list(c.roles), "tenant": "default"}
            for c in callers
        ]
        tokens.write_text(yaml.safe_dump({"tokens": entries}))
        options = ["--tokens", str(tokens)]
    log = tmp_path / "serve.log"
    for attempt in range(3):  # another process may take the free port before we bind it
        port = _free_port(port if attempt == 0 else 0)
        argv = [
            "--db",
            str(tmp_path / "dashboard.db"),
            "--app",
            ",".join(str(p) for p in APPS),
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            *options,
            "--worker",
        ]
        log.unlink(missing_ok=True)  # this attempt's output only
        proc = forks.popen(argv, log, env=_env(), cwd=ROOT)
        url = f"http://127.0.0.1:{port}"
        if _wait_ready(url, proc, log):
            break
    else:
        pytest.fail(f"statewright serve did not start:\n{log.read_text()}")
    try:
        yield Server(url, proc, log)
    finally:
        _stop(proc)


@pytest.fixture
def server(tmp_path: Path, service_port: int, cli_forks: ForkServer) -> Iterator[Server]:
    """The service with two tokens: an approver's and an agent's."""
    with serve(cli_forks, tmp_path, (APPROVER, AGENT), service_port) as running:
        yield running


@pytest.fixture
def ops_server(tmp_path: Path, service_port: int, cli_forks: ForkServer) -> Iterator[Server]:
    """The service with an operator's (maria: approver and operator), an agent's, an
    admin's and a viewer's (read-only) token."""
    with serve(cli_forks, tmp_path, (APPROVER, AGENT, ADMIN, VIEWER), service_port) as running:
        yield running


@pytest.fixture(scope="package")
def open_server(
    tmp_path_factory: pytest.TempPathFactory, cli_forks: ForkServer
) -> Iterator[Server]:
    """The service in open mode (no tokens: every local caller is an admin and approver),
    shared by the tests that use it: each starts workflows of its own ids and looks at those
    only (none counts what the service holds)."""
    with serve(cli_forks, tmp_path_factory.mktemp("open_server"), None) as running:
        yield running
