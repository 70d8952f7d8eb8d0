"""The SQLite store's readiness probe: a connection and a thread of its own.

Every read and write of the store runs on one connection's thread (:mod:`.sqlite_conn`), in
the order they were asked for: a probe sent there waits behind every large page queued
before it, and answers "slow" when the database is fine. This connection only ever runs one
trivial query (the newest migration applied), in WAL mode alongside the store's own, so it
waits for nothing but the database file itself: a missing or unreadable file, a lock held
past the busy timeout, a hung disk all still fail it (or time it out).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import sqlite3
import threading
from pathlib import Path

from statewright.errors import StoreError
from statewright.store.sqlite_conn import translate

log = logging.getLogger(__name__)

PING = "SELECT max(version) FROM schema_migrations"
"""Reads the store's own table: the file is there, readable, and migrated."""

_Waiter = tuple[asyncio.AbstractEventLoop, "asyncio.Future[None]"]


def _answer(future: asyncio.Future[None], error: BaseException | None) -> None:
    if future.done():  # the probe timed out: nobody waits any more
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)


class ProbeConnection:
    """Opened on the first :meth:`ping` (``mode=rw``: never creates the file), kept open,
    opened again after a failure."""

    def __init__(self, path: str, busy_timeout_ms: int) -> None:
        self.path = path
        self.busy_timeout_ms = busy_timeout_ms
        self._queue: queue.SimpleQueue[_Waiter | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    async def ping(self) -> None:
        """Return once the database answered :data:`PING`; :class:`StoreError` if it failed."""
        if self._thread is None:
            # A daemon thread: a probe stuck on a hung disk must not keep the process alive.
            self._thread = threading.Thread(
                target=self._run, args=(self._queue,), name="statewright-sqlite-probe", daemon=True
            )
            self._thread.start()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._queue.put((loop, future))
        await future

    def close(self) -> None:
        """Close the connection once the pings queued have run (without waiting for them)."""
        if self._thread is not None:
            self._queue.put(None)
            self._queue = queue.SimpleQueue()  # a thread started later has its own
            self._thread = None

    def _connect(self) -> sqlite3.Connection:
        uri = Path(self.path).absolute().as_uri() + "?mode=rw"
        conn = sqlite3.connect(
            uri,
            uri=True,
            isolation_level=None,
            check_same_thread=False,
            timeout=self.busy_timeout_ms / 1000,
        )
        conn.execute("PRAGMA query_only=ON")
        return conn

    def _run(self, waiters: queue.SimpleQueue[_Waiter | None]) -> None:
        conn: sqlite3.Connection | None = None
        try:
            while (waiter := waiters.get()) is not None:
                loop, future = waiter
                error: BaseException | None = None
                try:
                    if conn is None:
                        conn = self._connect()
                    conn.execute(PING).fetchone()
                except sqlite3.Error as exc:
                    error = translate(exc)
                    if conn is not None:
                        conn.close()
                    conn = None  # opened again for the next probe
                except BaseException as exc:
                    error = StoreError(f"the SQLite probe failed: {exc!r}")
                    log.exception("sqlite probe failed", extra={"action": "probe_failed"})
                try:
                    loop.call_soon_threadsafe(_answer, future, error)
                except RuntimeError:  # that loop is closed: nobody is waiting any more
                    pass
        finally:
            if conn is not None:
                conn.close()
