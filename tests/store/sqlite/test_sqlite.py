"""SQLite-only behaviour: the log's append-only triggers and failing closed under a lock."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from statewright import Engine, IllegalTransition, MachineBuilder, SQLiteStore
from statewright.errors import StoreError
from tests.forkserver import ForkServer
from tests.store.sqlite.opener import PRELOAD

MACHINE = (
    MachineBuilder("pingpong")
    .state("a", initial=True)
    .state("b")
    .state("end", terminal=True)
    .event("go")
    .event("back")
    .event("stop")
    .transition("go", "a", "b")
    .transition("back", "b", "a")
    .transition("stop", ["a", "b"], "end")
    .build()
)


async def test_log_is_append_only(tmp_path: Path) -> None:
    async with Engine(SQLiteStore(tmp_path / "db.sqlite"), [MACHINE]) as engine:
        await engine.start("pingpong", workflow_id="w")
        await engine.send("w", "go")
    raw = sqlite3.connect(tmp_path / "db.sqlite")
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        raw.execute("UPDATE transitions SET event = 'forged'")
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        raw.execute("DELETE FROM transitions")
    raw.close()


async def test_persistence_failure_fails_closed(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    engine = Engine(SQLiteStore(path, busy_timeout=0.05), [MACHINE])
    async with engine:
        await engine.start("pingpong", workflow_id="w")
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        try:
            with pytest.raises(StoreError):
                await engine.send("w", "go")
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        row = await engine.get("w")
        assert (row.state, row.version) == ("a", 1)
        assert len(await engine.history("w")) == 1
        # and it works again once the store is available
        assert (await engine.send("w", "go")).row.state == "b"
        await engine.check("w")


@pytest.mark.alone
async def test_a_write_waiting_for_another_process_lock_goes_soon_after_release(
    tmp_path: Path,
) -> None:
    # The writer polls for the write lock (sqlite.conn._begin) instead of SQLite's busy
    # handler, whose sleeps grow to 100 ms: a write goes within a few ms of the release.
    path = tmp_path / "db.sqlite"
    async with Engine(SQLiteStore(path, busy_timeout=5.0), [MACHINE]) as engine:
        await engine.start("pingpong", workflow_id="w")
        blocker = sqlite3.connect(path, isolation_level=None)
        waits = []
        for event in ["go", "back"] * 3:
            blocker.execute("BEGIN IMMEDIATE")
            send = asyncio.ensure_future(engine.send("w", event))
            await asyncio.sleep(0.4)  # the busy handler would sleep 100 ms between tries now
            assert not send.done()
            blocker.execute("ROLLBACK")
            released = time.monotonic()
            await send
            waits.append(time.monotonic() - released)
        blocker.close()
        assert (await engine.get("w")).version == 7
        median = sorted(waits)[len(waits) // 2]
        assert median < 0.015, f"writes went {[round(w * 1000, 1) for w in waits]} ms late"


async def test_illegal_transition_leaves_the_file_untouched(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    async with Engine(SQLiteStore(path), [MACHINE]) as engine:
        await engine.start("pingpong", workflow_id="w")
        await engine.send("w", "stop")
        before = _rows(path)
        with pytest.raises(IllegalTransition) as info:
            await engine.send("w", "go")
        assert (info.value.state, info.value.event, info.value.reason) == (
            "end",
            "go",
            "terminal state",
        )
        assert _rows(path) == before
        assert len(await engine.history("w")) == 2


def _rows(path: Path) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT * FROM workflows").fetchall()
    finally:
        conn.close()


def test_processes_opening_a_fresh_database_at_once_all_succeed(tmp_path: Path) -> None:
    # Regression: switching a new file to WAL answered "database is locked" at once (no busy
    # wait) when two processes opened it together, e.g. two `statewright mcp` sessions.
    # Four processes of their own, forked (tests/store/sqlite/opener.py) by a server that
    # imported the store once, so that they are up long before the moment they all open it.
    target = "tests.store.sqlite.opener:open_at"
    with ForkServer(tmp_path / "forks.log", target, preload=PRELOAD, name="opener") as forks:
        for round_ in range(3):
            db = tmp_path / f"fresh{round_}.db"
            at = str(time.time() + 0.5)
            errs = [tmp_path / f"open-{round_}-{i}.err" for i in range(4)]
            pids = [forks.spawn([str(db), at], err) for err in errs]
            codes = [forks.wait(pid, 30) for pid in pids]
            errors = [err.read_text() for err in errs]
            assert codes == [0, 0, 0, 0], errors


@pytest.mark.alone
async def test_another_process_commit_wakes_a_waiter_at_once(tmp_path: Path) -> None:
    """SQLite cannot notify across processes; the store notices another connection's commit
    (``PRAGMA data_version``) while someone waits, well within a poll interval."""
    path = tmp_path / "db.sqlite"
    async with Engine(SQLiteStore(path), [MACHINE]) as engine:
        await engine.start("pingpong", workflow_id="w")
        loop = asyncio.get_running_loop()
        waiter = asyncio.create_task(engine.store.wait_for_work(10.0))
        await asyncio.sleep(0.2)  # the waiter has seen the current data_version
        started = loop.time()
        other = subprocess.run(  # another process posts an input
            [
                sys.executable,
                "-c",
                "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]);"
                'c.execute("INSERT INTO inbox (workflow_id, name, payload, posted_at)'
                " VALUES ('w', 'doc', '{}', 0)\"); c.commit()",
                str(path),
            ],
            timeout=20,
        )
        assert other.returncode == 0
        await asyncio.wait_for(waiter, 2.0)
        assert loop.time() - started < 1.0
