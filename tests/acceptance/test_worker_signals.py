"""A real ``statewright worker`` process and signals, cancel and inputs from other processes.

SIGTERM while a handler runs: the process stops claiming, lets the handler finish and persist
its transition, releases its leases and exits 0. A second signal cancels the handler instead.
``statewright cancel`` from another process reaches the running handler.

Every ``statewright`` process is forked from this worker's fork server (the ``cli_forks``
fixture, tests/cli_forks.py): the same command lines through the CLI's own entry point,
without an interpreter start-up each; the signals are real signals to that process.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from statewright import Engine, SQLiteStore
from statewright.types import WorkflowRow
from tests.acceptance.apps.slow import TYPES
from tests.forkserver import ForkServer

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "tests" / "acceptance" / "apps" / "slow.py"
TIMEOUT = 60.0
"""A hang, not a slow start or answer (the machine may be busy with other tests)."""


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATEWRIGHT_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return {**env, **extra}


def _cli(forks: ForkServer, db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``statewright --db DB --app slow.py ARGS`` (forked), run to its end."""
    argv = ["--db", str(db), "--app", str(APP), *args]
    return forks.run(argv, db.parent, cwd=ROOT, env=_env(), timeout=TIMEOUT)


class Proc:
    """A forked ``statewright worker``: its output in files, read once it has exited."""

    def __init__(self, forks: ForkServer, argv: list[str], env: dict[str, str], tmp: Path):
        self.out, self.err = tmp / "worker.out", tmp / "worker.err"
        self.child = forks.popen(argv, self.out, self.err, env=env, cwd=ROOT)

    def poll(self) -> int | None:
        return self.child.poll()

    def send_signal(self, sig: int) -> None:
        self.child.send_signal(sig)

    def output(self) -> tuple[str, str]:
        return self.out.read_text(), self.err.read_text()


@asynccontextmanager
async def worker(
    forks: ForkServer, db: Path, *args: str, seconds: float = 1.5
) -> AsyncIterator[Proc]:
    argv = ["--db", str(db), "--app", str(APP), "worker", "--concurrency", "1"]
    argv += ["--poll-interval", "0.05", *args]
    proc = Proc(forks, argv, _env(SLOW_SECONDS=str(seconds)), db.parent)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.child.kill()
        proc.child.wait(TIMEOUT)


async def _until(check: Callable[[], Awaitable[bool]], proc: Proc) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not await check():
        assert proc.poll() is None, f"the worker exited early: {proc.output()}"
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def _handler_running(engine: Engine, wid: str, proc: Proc) -> WorkflowRow:
    async def running() -> bool:
        return (await engine.get(wid)).progress is not None

    await _until(running, proc)
    return await engine.get(wid)


def _exit(proc: Proc) -> tuple[int, str, str]:
    code = proc.child.wait(TIMEOUT)
    assert code is not None
    return (code, *proc.output())


@pytest.mark.acceptance
async def test_sigterm_lets_the_running_handler_persist_then_exits_0(
    tmp_path: Path, cli_forks: ForkServer
) -> None:
    db = tmp_path / "sw.db"
    async with Engine(SQLiteStore(db), TYPES) as engine:
        await engine.start("slow", workflow_id="first")
        await engine.start("slow", workflow_id="second")  # not claimed: concurrency 1
        async with worker(cli_forks, db, seconds=1.0) as proc:
            running = await _handler_running(engine, "first", proc)
            assert running.lease_owner is not None and running.state == "working"
            t0 = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            code, out, err = _exit(proc)
            took = time.monotonic() - t0
        assert code == 0, err
        assert "worker stopped" in out and "processed 1" in out
        assert 0.2 < took < 1.0 + 5.0  # waited for the handler, not for a lease to expire
        first, second = await engine.get("first"), await engine.get("second")
        assert (first.state, first.context) == ("done", {"slept": 1.0})
        assert [r.event for r in await engine.history("first")] == ["$start", "finish"]
        assert (second.state, second.version, second.lease_owner) == ("working", 1, None)
        assert await engine.store.lease_owners() == []
        await engine.check("first")


@pytest.mark.acceptance
async def test_a_second_signal_cancels_the_handler_and_leaves_the_workflow(
    tmp_path: Path, cli_forks: ForkServer
) -> None:
    db = tmp_path / "sw.db"
    async with Engine(SQLiteStore(db), TYPES) as engine:
        await engine.start("slow", workflow_id="long")
        async with worker(cli_forks, db, seconds=60.0) as proc:
            await _handler_running(engine, "long", proc)
            proc.send_signal(signal.SIGTERM)
            await asyncio.sleep(0.3)
            assert proc.poll() is None  # still waiting for the handler
            proc.send_signal(signal.SIGINT)
            code, _, err = _exit(proc)
        assert code == 0, err
        row = await engine.get("long")
        assert (row.state, row.version, row.lease_owner) == ("working", 1, None)
        [step] = await engine.store.steps("long")
        assert step.status == "executing"  # reconciled by the next worker that runs it
        assert await engine.store.lease_owners() == []


@pytest.mark.acceptance
async def test_cancel_and_show_from_another_process_reach_the_running_handler(
    tmp_path: Path, cli_forks: ForkServer
) -> None:
    db = tmp_path / "sw.db"
    async with Engine(SQLiteStore(db), TYPES) as engine:
        await engine.start("slow", workflow_id="job")
        async with worker(cli_forks, db, "--cancel-grace", "0.2", seconds=60.0) as proc:
            await _handler_running(engine, "job", proc)
            shown = _cli(cli_forks, db, "show", "job")
            assert shown.returncode == 0 and "progress" in shown.stdout
            assert "stage" in shown.stdout and "sleeping" in shown.stdout
            posted = _cli(cli_forks, db, "input", "job", "note", "--payload", '{"text": "hi"}')
            assert posted.returncode == 0, posted.stderr
            asked = _cli(
                cli_forks, db, "cancel", "job", "--reason", "not needed", "--actor", "dana"
            )
            assert asked.returncode == 0 and "cancel requested" in asked.stdout

            async def cancelled() -> bool:
                return (await engine.get("job")).state == "cancelled"

            await _until(cancelled, proc)
            proc.send_signal(signal.SIGTERM)
            code, _, err = _exit(proc)
        assert code == 0, err
        row = await engine.get("job")
        assert row.context == {"started": True} and row.cancel_requested is None
        last = (await engine.history("job"))[-1]
        assert (last.event, last.actor, last.payload) == (
            "cancel",
            "dana",
            {"reason": "not needed"},
        )
        assert (await engine.store.next_input("job")) is not None  # nobody consumed it
        refused = _cli(cli_forks, db, "cancel", "job", "--reason", "again")
        assert refused.returncode == 2 and "illegal_transition" in refused.stderr
