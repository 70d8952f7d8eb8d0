"""The SQLite store's readiness probe: a connection and a thread of its own.

Every read and write of the store runs on one connection's thread (:mod:`.conn`), in
the order they were asked for: a probe sent there waits behind every large page queued
before it, and answers "slow" when the database is fine. A probe here opens a connection of
its own on a thread of its own and runs one trivial query (the newest migration applied), in
WAL mode alongside the store's connection, so it waits for nothing but the database file
itself: a file deleted or replaced under the service, unreadable, locked past the busy timeout,
or on a hung disk still fails it (or times it out). Opening anew each time (about a
millisecond) is what makes it see the file as it is now, not as it was when opened.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import sqlite3
import threading
from pathlib import Path

from statewright.errors import StoreError
from statewright.store.sqlite.conn import translate

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


class Probe:
    """Probes one after the other on a daemon thread, started by the first :meth:`ping`."""

    def __init__(self, path: str, busy_timeout_ms: int) -> None:
        self.path = path
        self.uri = Path(path).absolute().as_uri() + "?mode=rw"
        """``mode=rw``: a probe never creates the file."""
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
        """Stop the thread once the pings queued have run (without waiting for them)."""
        if self._thread is not None:
            self._queue.put(None)
            self._queue = queue.SimpleQueue()  # a thread started later has its own
            self._thread = None

    def _ping(self) -> None:
        conn = sqlite3.connect(
            self.uri, uri=True, isolation_level=None, timeout=self.busy_timeout_ms / 1000
        )
        try:
            conn.execute("PRAGMA query_only=ON")
            conn.execute(PING).fetchone()
        finally:
            conn.close()

    def _run(self, waiters: queue.SimpleQueue[_Waiter | None]) -> None:
        while (waiter := waiters.get()) is not None:
            loop, future = waiter
            error: BaseException | None = None
            try:
                self._ping()
            except sqlite3.Error as exc:
                error = translate(exc)
            except Exception as exc:
                error = StoreError(f"the SQLite probe failed: {exc!r}")
                log.exception("sqlite probe failed", extra={"action": "probe_failed"})
            try:
                loop.call_soon_threadsafe(_answer, future, error)
            except RuntimeError:  # that loop is closed: nobody is waiting any more
                pass
