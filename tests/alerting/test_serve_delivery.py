"""``statewright serve --alert-webhook``: a real server process evaluates the alert rules and
delivers FIRING, then RESOLVED, to a real receiver; a restart fires nothing again.

The servers are forked from this worker's fork server of ``statewright`` command lines (the
``cli_forks`` fixture, tests/cli_forks.py): the same command line and process, without an
interpreter start-up."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import time
from pathlib import Path

from statewright import Engine, SQLiteStore
from statewright.engine import agent_task_type
from tests.alerting.receiver import Receiver, receiver
from tests.forkserver import Child, ForkServer
from tests.serving import wait_until_up


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _serve(forks: ForkServer, db: Path, rec: Receiver, log: Path) -> tuple[Child, str]:
    """``statewright serve --alert-webhook`` (forked) and its URL."""
    port = _free_port()
    argv = [
        "--db", str(db), "serve",
        "--port", str(port), "--alert-webhook", rec.url, "--alert-interval", "0.2s",
        "--alert-threshold", "running_too_long=0",
    ]  # fmt: skip
    return forks.popen(argv, log), f"http://127.0.0.1:{port}"


def _wait(rec: Receiver, n: int, proc: Child, log: Path) -> None:
    deadline = time.monotonic() + 30
    while len(rec.requests) < n:
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, (rec.requests, log.read_text()[-3000:])
        time.sleep(0.05)


async def _engine(db: Path, *events: tuple[str, str]) -> None:
    async with Engine(SQLiteStore(db), [agent_task_type()]) as e:
        for wid, event in events:
            if event == "$start":
                await e.start("agent_task", workflow_id=wid)
            else:
                await e.send(wid, event)


def _stop(proc: Child, log: Path) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    # uvicorn re-raises the SIGTERM it handled once it has shut down cleanly
    assert code in (0, -signal.SIGTERM), log.read_text()[-3000:]
    text = log.read_text()
    assert "Traceback" not in text and "failed" not in text, text[-3000:]


def test_serve_delivers_firing_then_resolved(cli_forks: ForkServer, tmp_path: Path) -> None:
    db, log = tmp_path / "serve.db", tmp_path / "serve.log"
    asyncio.run(_engine(db, ("t1", "$start"), ("t1", "start")))
    with receiver() as rec:
        proc, _ = _serve(cli_forks, db, rec, log)
        try:
            _wait(rec, 1, proc, log)
        finally:
            _stop(proc, log)
        [fired] = rec.bodies()
        assert fired["status"] == "firing" and fired["version"] == "4"
        assert fired["commonLabels"]["alertname"] == "running_too_long"
        # A restart: the alert is still firing and recorded so: nothing is sent again.
        proc, url = _serve(cli_forks, db, rec, log)
        try:
            # Up: its delivery runs (started by the app's start-up). Ten evaluations while t1
            # still runs, and nothing sent.
            assert wait_until_up(url, proc, log, timeout=30), log.read_text()[-3000:]
            time.sleep(2)
            assert len(rec.requests) == 1
            asyncio.run(_engine(db, ("t1", "complete")))
            _wait(rec, 2, proc, log)
        finally:
            _stop(proc, log)
        resolved = rec.bodies()[1]
        assert resolved["status"] == "resolved"
        assert resolved["alerts"][0]["fingerprint"] == fired["alerts"][0]["fingerprint"]
        assert len(set(rec.keys())) == 2
