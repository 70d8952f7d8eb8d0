"""The built wheel, installed in a fresh virtualenv, runs its commands with no checkout.

Once per module: ``uv build`` from this checkout (the sdist, then the wheel built from it),
``uv venv`` with Python 3.11 in a temporary folder, ``uv pip install`` of the wheel (its
dependencies from the package index, through uv's cache). Then, from a folder outside the
checkout and with no ``PYTHONPATH``, the installed console script runs ``demo`` (the examples
and their fake services come from the wheel), ``serve`` (``/ready``, the dashboard, ``/docs``
and their static files; stopped by SIGTERM), ``worker`` (started and stopped by SIGTERM) and
``mcp`` (the SDK's client over stdio initializes and lists the tools); the extras are the
ones docs/getting-started.md lists, and ``testing`` brings ``check_machine``. Nothing here
skips: a missing uv, Python 3.11 or network fails the test, as an unusable wheel would.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import tarfile
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from tests.serving import wait_until_up

pytestmark = pytest.mark.one_worker

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 60.0
"""A hang, not a slow step (the machine may be busy with other tests)."""
DEMO_FILES = {"order_fulfilment.py", "refund_approval.py", "fake_services.py"}


@dataclass(frozen=True)
class Installed:
    """A fresh virtualenv with the wheel installed, and a folder outside the checkout."""

    sdist: Path
    wheel: Path
    venv: Path
    cwd: Path
    env: dict[str, str]

    @property
    def statewright(self) -> str:
        return str(self.venv / "bin" / "statewright")

    @property
    def python(self) -> str:
        return str(self.venv / "bin" / "python")

    def run(self, *args: str, timeout: float = TIMEOUT) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.statewright, *args],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def _uv() -> str:
    """uv next to the running Python (scripts/_setup.sh installs it into .venv), else on PATH."""
    here = Path(sys.executable).with_name("uv")
    if here.is_file():
        return str(here)
    import shutil

    found = shutil.which("uv")
    assert found, "uv is needed to build and install the wheel (scripts/_setup.sh installs it)"
    return found


def _clean_env(home: Path) -> dict[str, str]:
    """The environment of a user's shell: nothing pointing into this checkout or its .venv."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "PYTHONSTARTUP"}
        and not k.startswith(("STATEWRIGHT_", "PYTEST_", "OTEL_"))
    }
    # uv's cache may be on another filesystem than the temporary folder (tmpfs): copy quietly.
    env["UV_LINK_MODE"] = "copy"
    env["HOME"] = env.get("HOME", str(home))
    return env


def _check(proc: subprocess.CompletedProcess[str], what: str) -> str:
    assert proc.returncode == 0, (
        f"{what} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    )
    return proc.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    base = tmp_path_factory.mktemp("wheel")
    env = _clean_env(base)
    uv = _uv()
    dist = base / "dist"

    def uv_run(*args: str) -> str:
        proc = subprocess.run(
            [uv, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
        )
        return _check(proc, f"uv {' '.join(args)}")

    # The sdist, then the wheel built from it (as pip builds one from an sdist).
    uv_run("build", "--out-dir", str(dist), str(ROOT))
    (wheel,) = dist.glob("statewright-*.whl")
    (sdist,) = dist.glob("statewright-*.tar.gz")
    venv = base / "venv"
    uv_run("venv", "--quiet", "--python", "3.11", str(venv))
    uv_run("pip", "install", "--quiet", "--python", str(venv / "bin" / "python"), str(wheel))
    cwd = base / "elsewhere"
    cwd.mkdir()
    return Installed(sdist, wheel, venv, cwd, env)


def test_wheel_carries_what_the_commands_read(installed: Installed) -> None:
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    examples = {n.removeprefix("statewright/_examples/") for n in names if "/_examples/" in n}
    assert examples >= DEMO_FILES
    # Everything the package reads at run time, found through the package's own folder.
    for needed in (
        "statewright/http/static/index.html",
        "statewright/http/static/app.js",
        "statewright/http/static/bulk.js",
        "statewright/store/sql/sqlite/schema.sql",
        "statewright/store/sql/postgres/queries.sql",
        "statewright/definition/formats/machine.schema.json",
        "statewright/py.typed",
    ):
        assert needed in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert not [n for n in names if n.startswith(("tests/", "examples/", "bench/"))]
    with tarfile.open(installed.sdist) as sdist:
        top = {Path(n).parts[1] for n in sdist.getnames() if len(Path(n).parts) > 1}
    assert {"statewright", "examples", "pyproject.toml", "README.md"} <= top, top
    assert not top & {".hypothesis", ".statewright", ".venv", "dist"}, top


def test_installed_package_is_the_wheel(installed: Installed) -> None:
    proc = subprocess.run(
        [installed.python, "-c", "import statewright; print(statewright.__file__)"],
        cwd=installed.cwd,
        env=installed.env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    where = Path(_check(proc, "import statewright").strip())
    assert where.is_relative_to(installed.venv), where
    assert not where.is_relative_to(ROOT) or ROOT.is_relative_to(installed.venv)


def test_demo_runs_from_the_wheel(installed: Installed) -> None:
    out = _check(installed.run("demo"), "statewright demo")
    # What the README says it shows: every workflow finished, each payment charged once,
    # the replayed log equal to the row, where the database is and what to try next.
    assert "SIGKILL" in out or "killed" in out
    assert "exactly once" in out
    assert "replaying each workflow's log gives its stored row" in out
    assert "all checks passed" in out
    assert f"database: {installed.cwd / '.statewright' / 'demo.db'}" in out
    # The suggested commands work: the installed examples are where the demo says they are.
    show = re.search(r"statewright (show order-1001 .*--app (\S+))", out)
    assert show, out
    assert Path(show.group(2)).is_relative_to(installed.venv)
    shown = _check(installed.run(*show.group(1).split()), "statewright show")
    assert "closed" in shown
    listed = _check(installed.run("list", "--db", ".statewright/demo.db"), "statewright list")
    assert "order-1003" in listed and "refund-timeout" in listed


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _catches(pid: int, sig: signal.Signals) -> bool:
    """Whether process ``pid`` has a handler for ``sig`` (its SigCgt mask in /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    raise AssertionError(f"no SigCgt in /proc/{pid}/status")


def _stop(proc: subprocess.Popen[bytes], log: Path, *, codes: tuple[int, ...] = (0,)) -> str:
    """SIGTERM once the process handles it; it must exit with one of ``codes``. Its output."""
    deadline = time.monotonic() + TIMEOUT
    while not _catches(proc.pid, signal.SIGTERM):
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, f"no SIGTERM handler:\n{log.read_text()}"
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    text = log.read_text()
    assert code in codes, f"exit {code} after SIGTERM:\n{text}"
    return text


@pytest.fixture
def started(installed: Installed, tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _popen(
    installed: Installed, log: Path, procs: list[subprocess.Popen[bytes]], *args: str
) -> subprocess.Popen[bytes]:
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [installed.statewright, *args],
            cwd=installed.cwd,
            env=installed.env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    procs.append(proc)
    return proc


def test_serve_answers_and_stops(
    installed: Installed, started: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    log = tmp_path / "serve.log"
    db = str(tmp_path / "serve.db")
    for _ in range(3):  # another process may take the free port first
        port = _free_port()
        proc = _popen(installed, log, started, "--db", db, "serve", "--port", str(port))
        url = f"http://127.0.0.1:{port}"
        if wait_until_up(url, proc, log, path="/ready", timeout=TIMEOUT):
            break
    else:
        pytest.fail(f"serve did not start:\n{log.read_text()}")
    with httpx.Client(base_url=url, timeout=10.0, follow_redirects=True) as client:
        ready = client.get("/ready")
        assert ready.status_code == 200 and ready.json()["status"] == "ok"
        # The dashboard and the API docs pages, from the package's static files.
        page = client.get("/")
        assert page.status_code == 200 and "<html" in page.text.lower()
        assets = re.findall(r'(?:src|href)="([^"#]+\.(?:js|css|svg))"', page.text)
        assert len(assets) >= 3, page.text
        for asset in assets:
            assert client.get(page.url.join(asset)).status_code == 200, asset
        for docs in ("/docs", "/redoc"):
            html = client.get(docs)
            assert html.status_code == 200, docs
            for asset in re.findall(r'(?:src|href)="(/[^"]+\.(?:js|css))"', html.text):
                assert client.get(asset).status_code == 200, asset
        assert client.get("/openapi.json").status_code == 200
    # uvicorn shuts down gracefully, then re-raises the signal (as tests/http/test_stream.py).
    _stop(proc, log, codes=(0, -signal.SIGTERM))


def test_worker_starts_and_stops(
    installed: Installed, started: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    proc = _popen(installed, log, started, "--db", str(tmp_path / "worker.db"), "worker")
    deadline = time.monotonic() + TIMEOUT
    while not log.read_text().startswith("worker "):
        assert proc.poll() is None, f"worker exited:\n{log.read_text()}"
        assert time.monotonic() < deadline, f"no banner:\n{log.read_text()}"
        time.sleep(0.05)
    assert "worker stopped" in _stop(proc, log)


async def test_mcp_over_stdio_lists_tools(installed: Installed, tmp_path: Path) -> None:
    app = installed.venv.glob("lib/python3.*/site-packages/statewright/_examples")
    (examples,) = list(app)
    params = StdioServerParameters(
        command=installed.statewright,
        args=["--db", str(tmp_path / "mcp.db"), "--app", str(examples / "order_fulfilment.py"),
              "mcp"],
        env=installed.env,
        cwd=installed.cwd,
    )  # fmt: skip
    with (tmp_path / "mcp.log").open("w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                init = await session.initialize()
                assert init.server_info.name == "statewright", init.server_info
                tools = {t.name for t in (await session.list_tools()).tools}
    assert {"get_workflow_state", "list_workflows", "start_workflow"} <= tools, tools
    assert any(t.startswith("order_fulfilment__") for t in tools), tools


def test_extras_are_the_readmes(installed: Installed) -> None:
    """The wheel's extras are the ones the docs' table lists, and each brings its package."""
    import tomllib

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = set(declared["optional-dependencies"])
    page = (ROOT / "docs" / "getting-started.md").read_text()
    table = page[page.index("## Installing the package") :].split("\n## ", 1)[0]
    assert set(re.findall(r"^\| `([a-z-]+)` \|", table, flags=re.MULTILINE)) == extras
    with zipfile.ZipFile(installed.wheel) as wheel:
        (meta,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = wheel.read(meta).decode()
    for extra, needs in {
        "postgres": "psycopg-pool",
        "otel": "opentelemetry-sdk",
        "testing": "hypothesis",
        "pydantic-ai": "pydantic-ai-slim",
        "openai-agents": "openai-agents",
    }.items():
        assert f"Provides-Extra: {extra}" in metadata
        assert re.search(rf"^Requires-Dist: {needs}\b.*extra == '{extra}'", metadata, re.M), extra
    assert "Provides-Extra: all" in metadata


def test_testing_extra_brings_check_machine(installed: Installed, tmp_path: Path) -> None:
    """Without the ``testing`` extra ``check_machine`` names it; with it, the docs'
    ``check_machine`` block (docs/guides/testing.md) runs. (Last in this module: it adds the
    extra to the venv.)"""

    def python(code: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [installed.python, "-c", code],
            cwd=installed.cwd,
            env=installed.env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )

    bare = python("from statewright.testing import check_machine")
    assert bare.returncode == 1
    assert "pip install 'statewright[testing]'" in bare.stderr, bare.stderr
    proc = subprocess.run(
        [_uv(), "pip", "install", "--quiet", "--python", installed.python,
         f"{installed.wheel}[testing]"],
        env=installed.env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    _check(proc, "uv pip install the wheel with [testing]")
    page = (ROOT / "docs" / "guides" / "testing.md").read_text()
    (block,) = [
        b
        for b in re.findall(r"```python\n(.*?)```", page, flags=re.DOTALL)
        if "check_machine(" in b and "from hypothesis import settings" in b
    ]
    out = _check(python(block), "the docs' check_machine block")
    assert "submitted --approve--> paying --paid_out--> paid" in out
