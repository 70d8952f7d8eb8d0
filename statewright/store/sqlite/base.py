"""The SQLite store's connection, lifecycle and wake-ups, and the ways it runs a statement
that the shared parts use (:class:`~statewright.store.base.SQLStore`).

Every write is a function run on the connection's thread inside a savepoint of a shared
transaction (see :mod:`.conn` for group commit); a read is a function run there too.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from statewright import jsonvalue, offload
from statewright.errors import StoreError
from statewright.store import params
from statewright.store.base import Plan, SQLStore, run_plan
from statewright.store.queries import load_queries, migrations
from statewright.store.rows import Rows
from statewright.store.sqlite.conn import GroupCommitConnection, Synchronous
from statewright.store.sqlite.probe import Probe

Q = load_queries("sqlite")
ROWS = Rows(jsonvalue.loads)
T = TypeVar("T")

WATCH_INTERVAL = 0.05
"""Seconds between two checks for other processes' commits while anyone waits for work."""


def _data_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA data_version").fetchone()[0])


def _statements(script: str) -> list[str]:
    # Split on statement boundaries the way SQLite does (triggers contain ';').
    out: list[str] = []
    buf = ""
    for line in script.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            if buf.strip():
                out.append(buf)
            buf = ""
    if buf.strip() and not all(
        ln.strip().startswith("--") or not ln.strip() for ln in buf.splitlines()
    ):
        raise StoreError(f"incomplete SQL statement in migration: {buf[:80]!r}")
    return out


def migrate(conn: sqlite3.Connection) -> list[int]:
    """Apply the migrations not applied yet (one process at a time); their numbers."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
    )
    applied_now = []
    conn.execute("BEGIN IMMEDIATE")  # one process migrates at a time
    try:
        done = {r[0] for r in conn.execute("SELECT version FROM schema_migrations")}
        for number, name, sql in migrations("sqlite"):
            if number in done:
                continue
            for stmt in _statements(sql):
                conn.execute(stmt)
            conn.execute(
                "INSERT INTO schema_migrations VALUES (?, ?, ?)", (number, name, time.time())
            )
            applied_now.append(number)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return applied_now


class SQLiteBase(SQLStore):
    """One SQLite file (or ``:memory:``): its connection, probe and waiting workers."""

    dialect = "sqlite"
    queries = Q
    rows = ROWS
    enc = params.SQLITE

    def __init__(
        self,
        path: str | Path = "statewright.db",
        synchronous: Synchronous = "FULL",
        busy_timeout: float = 10.0,
    ) -> None:
        self.path = str(path)
        self.conn = GroupCommitConnection(self.path, synchronous, int(busy_timeout * 1000))
        self.probe = Probe(self.path, int(busy_timeout * 1000))
        """Readiness probes' own connection and thread (:meth:`ping`)."""
        self._wakeups: set[asyncio.Event] = set()
        self._watcher: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"

    # -- lifecycle ----------------------------------------------------------------------------

    async def open(self) -> None:
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self.conn.start()
        await self.conn.read(migrate)

    async def close(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, RuntimeError):
                await self._watcher
            self._watcher = None
        self.probe.close()
        self.conn.stop()

    async def ping(self) -> None:
        """Answer once the database answers a trivial query, on a connection and thread of its
        own: never queued behind the store's reads and writes (:mod:`.probe`). An in-memory
        database has no second connection: there the store's own answers."""
        if not self.conn.alive:
            raise StoreError("the SQLite store is not open")
        if self.path == ":memory:":
            await self.conn.read(lambda c: c.execute("SELECT 1").fetchone())
        else:
            await self.probe.ping()

    # -- waiting for work ---------------------------------------------------------------------

    def _wake(self) -> None:
        # Wakes this process's waiters after a write that may have made work due (or posted
        # an input, or asked for a cancel); other processes' writes are seen by _watch.
        for event in self._wakeups:
            event.set()

    async def wait_for_work(self, timeout: float) -> None:
        event = asyncio.Event()
        self._wakeups.add(event)
        self._ensure_watcher()
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            pass
        finally:
            self._wakeups.discard(event)

    def _ensure_watcher(self) -> None:
        if self.path == ":memory:" or (self._watcher is not None and not self._watcher.done()):
            return
        self._watcher = asyncio.create_task(self._watch(), name="statewright-sqlite-watch")

    async def _watch(self) -> None:
        """Wake this process's waiters when another process commits.

        SQLite has no notifications across processes. ``PRAGMA data_version`` on our own
        connection changes exactly when another connection committed, and costs one short
        read on the connection's thread: checked every :data:`WATCH_INTERVAL` while anyone
        waits, it brings another process's input, cancel request or due work to a waiting
        worker within that interval instead of a whole poll interval.
        """
        last: int | None = None
        while self._wakeups:
            try:
                version = await self.conn.read(_data_version)
            except StoreError:
                return  # closed or broken: waiters fall back to their timeouts
            if last is not None and version != last:
                self._wake()
            last = version
            await asyncio.sleep(WATCH_INTERVAL)

    # -- running statements -------------------------------------------------------------------

    async def _all(
        self, sql: str, params: Mapping[str, Any], *, write: bool = False
    ) -> list[sqlite3.Row]:
        def fn(c: sqlite3.Connection) -> list[sqlite3.Row]:
            return c.execute(sql, params).fetchall()

        return await (self.conn.write(fn) if write else self.conn.read(fn))

    async def _one(
        self, sql: str, params: Mapping[str, Any], *, write: bool = False
    ) -> sqlite3.Row | None:
        def fn(c: sqlite3.Connection) -> sqlite3.Row | None:
            row: sqlite3.Row | None = c.execute(sql, params).fetchone()
            return row

        return await (self.conn.write(fn) if write else self.conn.read(fn))

    async def _rowcount(self, sql: str, params: Mapping[str, Any]) -> int:
        return await self.conn.write(lambda c: c.execute(sql, params).rowcount)

    async def _read_many(
        self, sql: str, params: Mapping[str, Any], convert: Callable[[sqlite3.Row], T]
    ) -> list[T]:
        return await self._read_rows(lambda c: c.execute(sql, params).fetchall(), convert)

    async def _read_rows(
        self,
        read: Callable[[sqlite3.Connection], list[sqlite3.Row]],
        convert: Callable[[sqlite3.Row], T],
    ) -> list[T]:
        """Rows read on the connection's thread, then converted (their JSON decoded) off the
        event loop when they are large (:mod:`statewright.offload`)."""

        def fn(conn: sqlite3.Connection) -> tuple[list[sqlite3.Row], int]:
            rows = read(conn)
            return rows, offload.text_size(rows)

        rows, size = await self.conn.read(fn)
        return await offload.convert(rows, convert, size)

    async def _reads(self, plan: Plan[T], *, snapshot: bool = False) -> T:
        # One read on the connection's thread: nothing writes between its statements.
        return await self.conn.read(lambda c: run_plan(plan, lambda *s: c.execute(*s).fetchall()))

    async def _write_plan(self, make: Callable[[], Plan[T]], *, rows: bool = False) -> T:
        def fn(c: sqlite3.Connection) -> T:
            if rows:
                return run_plan(make(), lambda *s: c.execute(*s).fetchall())
            return run_plan(make(), lambda *s: c.execute(*s).rowcount)

        return await self.conn.write(fn)

    async def _or_else(
        self, sql: str, params: Mapping[str, Any], then: str, then_params: Mapping[str, Any]
    ) -> tuple[sqlite3.Row | None, sqlite3.Row | None]:
        def fn(c: sqlite3.Connection) -> tuple[sqlite3.Row | None, sqlite3.Row | None]:
            row = c.execute(sql, params).fetchone()
            if row is not None:
                return row, None
            return None, c.execute(then, then_params).fetchone()

        return await self.conn.write(fn)
