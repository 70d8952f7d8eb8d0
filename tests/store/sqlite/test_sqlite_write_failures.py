"""SQLite group commit when a statement or the COMMIT fails for want of room: every write is
answered what became of it (ok: in the store; ``store_error``: not; ``outcome_unknown`` only
where SQLite cannot tell).

A tiny ``PRAGMA max_page_count`` makes SQLite answer SQLITE_FULL as a full disk would, without
one; a single-row INSERT that meets it has no statement journal to undo it alone, so SQLite
rolls the whole transaction back by itself. (The real full disk, with worker processes, is
tests/acceptance/test_full_disk.py.)
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from statewright import Engine, MachineBuilder, SQLiteStore
from statewright.errors import OutcomeUnknown, StoreError
from statewright.store.sqlite.conn import GroupCommitConnection

MACHINE = (
    MachineBuilder("blob")
    .state("a", initial=True)
    .state("b", terminal=True)
    .event("go")
    .transition("go", "a", "b")
    .build()
)


async def _held(conn: GroupCommitConnection, queued: int, submit: Callable[[], Any]) -> Any:
    """Run ``submit()`` (which queues ``queued`` operations) while the connection's thread is
    held, so that they all go in one batch when it is let go; the gathered answers."""
    holding, gate = threading.Event(), threading.Event()

    def hold(_: sqlite3.Connection) -> None:
        holding.set()
        gate.wait(10)

    holder = asyncio.ensure_future(conn.write(hold))
    try:
        while not holding.is_set():
            await asyncio.sleep(0.001)
        answers = asyncio.ensure_future(submit())
        deadline = time.monotonic() + 10
        while conn._queue.qsize() < queued:  # every operation is in the queue: one batch
            assert time.monotonic() < deadline, (
                f"the operations never queued: {conn._queue.qsize()}"
            )
            await asyncio.sleep(0.005)
    finally:
        gate.set()
    await holder
    return await answers


async def _conn(path: Path) -> GroupCommitConnection:
    conn = GroupCommitConnection(str(path))
    conn.start()
    await conn.write(lambda c: c.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB)"))
    return conn


def _insert(k: int, size: int) -> Callable[[sqlite3.Connection], int]:
    return lambda c: c.execute("INSERT INTO t VALUES (?, ?)", (k, b"x" * size)).rowcount


async def _cap(conn: GroupCommitConnection, extra_pages: int) -> None:
    """Let the file grow by ``extra_pages`` pages at most: beyond, SQLITE_FULL."""
    pages = await conn.read(lambda c: c.execute("PRAGMA page_count").fetchone()[0])
    await conn.read(lambda c: c.execute(f"PRAGMA max_page_count={pages + extra_pages}"))


async def test_a_write_that_makes_sqlite_roll_the_batch_back_fails_alone(tmp_path: Path) -> None:
    """Regression (issue 22): SQLite rolled the batch's transaction back at the third write;
    the fourth and fifth then ran in autocommit and committed, and all five were answered
    ``store_error`` by the COMMIT that found no transaction."""
    conn = await _conn(tmp_path / "db.sqlite")
    try:
        await _cap(conn, 3)
        sizes = [10, 10, 100_000, 10, 10]
        answers = await _held(
            conn,
            len(sizes),
            lambda: asyncio.gather(
                *(conn.write(_insert(k, n)) for k, n in enumerate(sizes)), return_exceptions=True
            ),
        )
        rows = await conn.read(lambda c: {r[0] for r in c.execute("SELECT k FROM t")})
        assert [not isinstance(a, BaseException) for a in answers] == [k in rows for k in range(5)]
        assert conn.rolled_back == 1  # SQLite did end the transaction itself
        assert answers[:2] == [1, 1] and answers[3:] == [1, 1]
        assert isinstance(answers[2], StoreError) and "full" in str(answers[2])
        assert not isinstance(answers[2], OutcomeUnknown)
    finally:
        conn.stop()


async def test_a_batch_rolled_back_twice_runs_its_writes_one_by_one(tmp_path: Path) -> None:
    """Rolled back again in the fresh transaction, the rest run each alone: every write gets
    its own answer, and the connection is left in no transaction."""
    conn = await _conn(tmp_path / "db.sqlite")
    try:
        await _cap(conn, 3)
        sizes = [10, 100_000, 100_000, 100_000, 100_000, 10]
        answers = await _held(
            conn,
            len(sizes),
            lambda: asyncio.gather(
                *(conn.write(_insert(k, n)) for k, n in enumerate(sizes)), return_exceptions=True
            ),
        )
        rows = await conn.read(lambda c: {r[0] for r in c.execute("SELECT k FROM t")})
        assert [not isinstance(a, BaseException) for a in answers] == [k in rows for k in range(6)]
        assert conn.rolled_back == 2
        assert rows == {0, 5}
        assert all(type(a) is StoreError for a in answers[1:5]), answers
        await conn.read(lambda c: c.execute("PRAGMA max_page_count=1000000"))
        assert await conn.write(_insert(9, 100_000)) == 1
    finally:
        conn.stop()


async def test_a_commit_refused_with_the_transaction_open_applies_nothing(
    tmp_path: Path,
) -> None:
    """COMMIT refused while SQLite keeps the transaction open (a deferred foreign key): it is
    rolled back, and every write of the batch is answered ``store_error``."""
    conn = GroupCommitConnection(str(tmp_path / "db.sqlite"))
    conn.start()
    try:
        await conn.write(lambda c: c.execute("CREATE TABLE p (k INTEGER PRIMARY KEY)"))
        await conn.write(
            lambda c: c.execute(
                "CREATE TABLE t (k INTEGER PRIMARY KEY, p INTEGER"
                " REFERENCES p (k) DEFERRABLE INITIALLY DEFERRED)"
            )
        )
        ops = [
            lambda c: c.execute("INSERT INTO t VALUES (1, NULL)").rowcount,
            lambda c: c.execute("INSERT INTO t VALUES (2, 42)").rowcount,  # no parent 42
            lambda c: c.execute("INSERT INTO t VALUES (3, NULL)").rowcount,
        ]
        answers = await _held(
            conn,
            len(ops),
            lambda: asyncio.gather(*(conn.write(op) for op in ops), return_exceptions=True),
        )
        assert all(type(a) is StoreError for a in answers), answers
        assert await conn.read(lambda c: c.execute("SELECT count(*) FROM t").fetchone()[0]) == 0
        assert await conn.write(lambda c: c.execute("INSERT INTO t VALUES (4, NULL)").rowcount)
    finally:
        conn.stop()


_COMMIT_FAILS = """
import asyncio, json, resource, signal, sys
from statewright.store.sqlite.conn import GroupCommitConnection

async def main():
    conn = GroupCommitConnection(sys.argv[1])
    conn.start()
    await conn.write(lambda c: c.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB)"))
    await conn.read(lambda c: c.execute("PRAGMA cache_size=-65536"))  # no spill: all at COMMIT
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
    def big(c):
        for k in range(8):
            c.execute("INSERT INTO t VALUES (?, zeroblob(400000))", (k,))
        return "ok"
    try:
        print(json.dumps(["ok", await conn.write(big)]))
    except Exception as exc:
        print(json.dumps([type(exc).__name__, str(exc)]))
    conn.stop()

asyncio.run(main())
"""


def test_a_commit_that_fails_writing_the_log_is_answered_outcome_unknown(tmp_path: Path) -> None:
    """COMMIT fails with SQLITE_IOERR (here: the WAL may not grow past RLIMIT_FSIZE) and
    SQLite ends the transaction: whether the commit record reached the file is not known to
    the caller, so the write is ``outcome_unknown``, never ``store_error``."""
    db = tmp_path / "db.sqlite"
    done = subprocess.run(
        [sys.executable, "-c", _COMMIT_FAILS, str(db)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    kind, message = json.loads(done.stdout.strip().splitlines()[-1])
    assert kind == "OutcomeUnknown", (kind, message)
    assert "may or may not" in message


async def test_every_store_write_is_answered_what_became_of_it_when_the_file_cannot_grow(
    tmp_path: Path,
) -> None:
    """Starts and sends with inputs of 200 KB and of a few bytes, queued together in batches
    that spill (a small page cache) and meet SQLITE_FULL: each answered ok is in the store
    (with its log, replaying to the row), each answered ``store_error`` is not."""
    path = tmp_path / "db.sqlite"
    async with Engine(SQLiteStore(path), [MACHINE]) as engine:
        store = engine.store
        assert isinstance(store, SQLiteStore)
        olds = [f"old-{i}" for i in range(8)]
        for wid in olds:
            await engine.start("blob", workflow_id=wid)
        await store.conn.read(lambda c: c.execute("PRAGMA cache_size=8"))
        pages = await store.conn.read(lambda c: c.execute("PRAGMA page_count").fetchone()[0])
        await store.conn.read(lambda c: c.execute(f"PRAGMA max_page_count={pages + 120}"))

        def big(i: int) -> dict[str, str]:
            return {"blob": "x" * 200_000} if i % 3 == 0 else {"n": str(i)}

        news = [f"new-{i}" for i in range(16)]
        starts = [engine.start("blob", big(i), workflow_id=wid) for i, wid in enumerate(news)]
        sends = [engine.send(wid, "go", big(i + 1)) for i, wid in enumerate(olds)]
        answers = await _held(
            store.conn,
            len(starts) + len(sends),
            lambda: asyncio.gather(*starts, *sends, return_exceptions=True),
        )
        outcomes = dict(zip(news + olds, answers, strict=True))
        unexpected = {w: a for w, a in outcomes.items() if isinstance(a, BaseException)}
        assert all(type(a) is StoreError for a in unexpected.values()), unexpected

        await store.conn.read(lambda c: c.execute("PRAGMA max_page_count=1000000"))
        for wid in news:
            found = await store.get_workflow(wid)
            assert (found is not None) == (wid not in unexpected), (wid, outcomes[wid])
        for wid in olds:
            row = await engine.get(wid)
            assert row.state == ("a" if wid in unexpected else "b"), (wid, outcomes[wid])
        assert 0 < len(unexpected) < len(outcomes), outcomes
        assert store.conn.rolled_back >= 1, "SQLite never rolled a batch back: no test"
        for wid in olds + [w for w in news if w not in unexpected]:
            await engine.check(wid)  # raises ReplayMismatch when the log and the row differ


async def test_a_lone_write_that_meets_a_full_file_changes_nothing(tmp_path: Path) -> None:
    async with Engine(SQLiteStore(tmp_path / "db.sqlite"), [MACHINE]) as engine:
        store = engine.store
        assert isinstance(store, SQLiteStore)
        await engine.start("blob", workflow_id="w")
        pages = await store.conn.read(lambda c: c.execute("PRAGMA page_count").fetchone()[0])
        await store.conn.read(lambda c: c.execute(f"PRAGMA max_page_count={pages}"))
        with pytest.raises(StoreError, match="full") as info:
            await engine.send("w", "go", {"blob": "x" * 200_000})
        assert type(info.value) is StoreError
        await store.conn.read(lambda c: c.execute("PRAGMA max_page_count=1000000"))
        assert (await engine.get("w")).state == "a"
        await engine.check("w")
        assert (await engine.send("w", "go", {"blob": "x" * 200_000})).row.state == "b"


async def test_a_write_that_raises_midway_leaves_nothing_and_the_batch_commits_without_it(
    tmp_path: Path,
) -> None:
    """A batch runs without savepoints first; a write that raises after one of its statements
    ran makes the whole batch run again, each write in its savepoint: that write leaves no
    trace, every other one commits once, and each is answered for itself."""
    conn = await _conn(tmp_path / "db.sqlite")
    runs: list[int] = []

    def good(k: int) -> Callable[[sqlite3.Connection], int]:
        def fn(c: sqlite3.Connection) -> int:
            runs.append(k)
            return int(c.execute("INSERT INTO t VALUES (?, x'00')", (k,)).rowcount)

        return fn

    def half(c: sqlite3.Connection) -> int:
        runs.append(2)
        c.execute("INSERT INTO t VALUES (2, x'00')")
        raise StoreError("refused after its first statement")

    try:
        writes = [good(0), good(1), half, good(3)]
        answers = await _held(
            conn,
            len(writes),
            lambda: asyncio.gather(*(conn.write(w) for w in writes), return_exceptions=True),
        )
        rows = await conn.read(lambda c: sorted(r[0] for r in c.execute("SELECT k FROM t")))
        assert rows == [0, 1, 3]
        assert answers[:2] == [1, 1] and answers[3] == 1
        assert isinstance(answers[2], StoreError) and "first statement" in str(answers[2])
        assert conn.retried_batches == 1 and conn.rolled_back == 0
        assert runs == [0, 1, 2, 0, 1, 2, 3]  # the optimistic pass stopped at the failure
        assert not await conn.read(lambda c: c.in_transaction)
    finally:
        conn.stop()
