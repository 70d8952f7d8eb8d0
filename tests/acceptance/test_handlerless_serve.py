"""A service without the handlers and a worker with them, as separate processes on one store
(issue 22, item 7): ``statewright --app parcel.yaml serve`` (a definition file: no handlers)
takes the start, the event and the input over HTTP; ``statewright --app parcel.py worker``
runs the handlers. The workflow finishes, on SQLite and on PostgreSQL.

Both are ``statewright`` processes forked from this worker's fork server (the ``cli_forks``
fixture, tests/cli_forks.py): the same command lines through the CLI's own entry point,
without an interpreter start-up each."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.forkserver import Child, ForkServer

ROOT = Path(__file__).resolve().parents[2]
APPS = ROOT / "tests" / "acceptance" / "apps"
TIMEOUT = 30.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def _process(forks: ForkServer, argv: list[str], log: Path) -> Iterator[Child]:
    """``statewright ARGV`` (forked), its stdout and stderr in ``log``."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("STATEWRIGHT_")}
    proc = forks.popen(argv, log, env=clean, cwd=ROOT)
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _until(what: str, check: Callable[[], Any], procs: dict[str, Path]) -> Any:
    deadline = time.monotonic() + TIMEOUT
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- {name}\n{log.read_text()}" for name, log in procs.items())
            pytest.fail(f"timed out waiting for {what}\n{logs}")
        time.sleep(0.05)


def test_a_service_with_the_definition_file_and_a_worker_with_the_app_finish_it(
    store_url: str, tmp_path: Path, cli_forks: ForkServer
) -> None:
    db = store_url
    port = _free_port()
    logs = {"serve": tmp_path / "serve.log", "worker": tmp_path / "worker.log"}
    serve = ["--db", db, "--app", str(APPS / "parcel.yaml"), "serve", "--port", str(port)]
    worker = ["--db", db, "--app", str(APPS / "parcel.py"), "worker", "--poll-interval", "0.1"]
    with (
        _process(cli_forks, serve, logs["serve"]) as served,
        _process(cli_forks, worker, logs["worker"]) as working,
        httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=TIMEOUT) as api,
    ):

        def up() -> bool:
            assert served.poll() is None, logs["serve"].read_text()
            assert working.poll() is None, logs["worker"].read_text()
            try:
                return api.get("/livez").status_code == 200
            except httpx.TransportError:
                return False

        _until("the service", up, logs)

        def state() -> str:
            r = api.get("/v1/workflows/p1")
            assert r.status_code == 200, r.text
            return str(r.json()["state"])

        r = api.post("/v1/workflows", json={"type": "parcel", "id": "p1", "input": {"n": 1}})
        assert r.status_code == 201, r.text
        _until("the check", lambda: state() == "awaiting_approval", logs)

        r = api.post("/v1/workflows/p1/events", json={"event": "approve", "payload": {}})
        assert r.status_code == 200, r.text
        assert r.json()["state"] == "packing"

        def ran_idle() -> bool:  # the packing handler ran once and found no label
            r = api.get("/v1/workflows/p1")
            body = r.json()
            return body["leased_by"] is None and body["next_due_at"] is None

        _until("the packing handler to go idle", ran_idle, logs)
        r = api.post("/v1/workflows/p1/inputs", json={"name": "label", "payload": {"code": "L"}})
        assert r.status_code == 201, r.text
        _until("the parcel to ship", lambda: state() == "shipped", logs)

        history = api.get("/v1/workflows/p1/history").json()
        events = [t["event"] for t in history["items"]]
        assert events == ["$start", "checked", "approve", "packed", "sent"]
