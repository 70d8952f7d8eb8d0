"""A SQLite connection owned by one thread that commits concurrent writes together.

Why hand-written rather than aiosqlite: aiosqlite hops to its thread once per statement and
commits once per transaction, so N concurrent transitions cost N fsyncs. Here every write
operation queued while the previous commit was in flight runs in the *next* single
transaction, and all of them are acknowledged after that one COMMIT: group commit. When one
of them raises, that transaction is rolled back and the batch runs again with each write
inside its own SAVEPOINT, so that one conflicting transition rolls back alone. A future
resolves only after its data is durable, so nothing is reported done that a crash could lose.

Every answer is true when something fails. A write that raises is rolled back to its
savepoint, the others go on. But SQLite may roll the *whole* transaction back by itself after
a failed statement (SQLITE_FULL when a batch larger than the page cache spills on a full disk,
SQLITE_IOERR, SQLITE_NOMEM): the write that failed is then answered its error, and the others,
never run on in autocommit, run again in a fresh transaction, then each alone if that one is
rolled back too. A COMMIT that fails is answered ``store_error`` (nothing changed) only when
that is known: the transaction still open (rolled back then) or ended with SQLITE_FULL;
otherwise (SQLITE_IOERR from the fsync, say) :class:`OutcomeUnknown`.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from statewright.errors import OutcomeUnknown, StatewrightError, StoreError

log = logging.getLogger(__name__)

T = TypeVar("T")
Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]
MAX_BATCH = 512
LOCK_POLL = 0.0003
"""Seconds between tries for another process's write lock (see ``_begin``)."""


def _primary(exc: sqlite3.Error) -> int | None:
    """The primary SQLite result code of a driver error (None if the driver gave none)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return None if code is None else int(code) & 0xFF


def _busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return "locked" in str(exc) or "busy" in str(exc)


@dataclass
class _Op(Generic[T]):
    fn: Callable[[sqlite3.Connection], T]
    write: bool
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[T]


_Outcome = tuple[_Op[Any], Any, BaseException | None]


def _resolve_all(outcomes: list[_Outcome]) -> None:
    for op, result, error in outcomes:
        if op.future.done():  # the awaiting task was cancelled
            continue
        if error is not None:
            op.future.set_exception(error)
        else:
            op.future.set_result(result)


def _wake(outcomes: list[_Outcome]) -> None:
    # One call_soon_threadsafe per event loop and batch, not per operation: each call takes
    # the GIL and wakes the loop's selector, which at 32 clients cost a third of throughput.
    by_loop: dict[asyncio.AbstractEventLoop, list[_Outcome]] = {}
    for outcome in outcomes:
        by_loop.setdefault(outcome[0].loop, []).append(outcome)
    for loop, items in by_loop.items():
        try:
            loop.call_soon_threadsafe(_resolve_all, items)
        except RuntimeError:  # that loop is closed: nobody is waiting any more
            pass


def translate(exc: BaseException) -> StatewrightError:
    """Driver errors become StoreError (the original stays as ``__cause__``)."""
    if isinstance(exc, StatewrightError):
        return exc
    err = StoreError(f"SQLite failed: {exc}")
    err.__cause__ = exc
    return err


class GroupCommitConnection:
    """One SQLite connection on a dedicated thread, with group commit for writes."""

    def __init__(self, path: str, synchronous: Synchronous = "FULL", busy_timeout_ms: int = 10000):
        self.path = path
        self.synchronous = synchronous
        self.busy_timeout_ms = busy_timeout_ms
        self._queue: queue.SimpleQueue[_Op[Any] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._open_error: BaseException | None = None
        self.commits = 0
        """Number of COMMITs issued (a group commit counts once)."""
        self.batched_writes = 0
        self.rolled_back = 0
        """Batch transactions SQLite rolled back by itself after a failed statement."""
        self.retried_batches = 0
        """Batches run again, each write in its savepoint, because one write failed."""

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="statewright-sqlite", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._open_error is not None:
            raise translate(self._open_error)

    def stop(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None

    @property
    def alive(self) -> bool:
        """The connection's thread runs (started, not stopped, not dead)."""
        return self._thread is not None and self._thread.is_alive()

    # -- submitting work ---------------------------------------------------------------------

    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await self._submit(fn, write=False)

    async def write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` inside a transaction (a savepoint of a shared one) and commit.

        ``fn`` may run more than once (again in a fresh transaction when SQLite rolled back the
        one it shared): it acts only through the connection it is given."""
        return await self._submit(fn, write=True)

    async def _submit(self, fn: Callable[[sqlite3.Connection], T], write: bool) -> T:
        if self._thread is None:
            raise StoreError("the SQLite store is not open")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue.put(_Op(fn, write, loop, future))
        return await future

    # -- the thread --------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path,
            isolation_level=None,
            check_same_thread=False,
            timeout=self.busy_timeout_ms / 1000,
        )
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_ms)}")
        if self.path != ":memory:":
            self._enable_wal(conn)
        conn.execute(f"PRAGMA synchronous={self.synchronous}")
        conn.execute("PRAGMA foreign_keys=ON")
        return conn

    def _enable_wal(self, conn: sqlite3.Connection) -> None:
        # Switching a new file to WAL needs an exclusive lock; when several processes open a
        # fresh database at once SQLite answers "locked" at once instead of calling the busy
        # handler (waiting could deadlock), so retry here until the busy timeout.
        self._retry_locked(conn, "PRAGMA journal_mode=WAL", 0.005)

    def _retry_locked(self, conn: sqlite3.Connection, statement: str, pause: float) -> None:
        """Run ``statement``, trying again every ``pause`` seconds while the database is
        locked by another connection, up to the busy timeout."""
        deadline = time.monotonic() + self.busy_timeout_ms / 1000
        while True:
            try:
                conn.execute(statement)
                return
            except sqlite3.OperationalError as exc:
                if not _busy(exc) or time.monotonic() >= deadline:
                    raise
            time.sleep(pause)

    def _run(self) -> None:
        try:
            conn = self._connect()
        except BaseException as exc:
            self._open_error = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            while True:
                first = self._queue.get()
                if first is None:
                    return
                batch: list[_Op[Any]] = [first]
                stop = False
                while len(batch) < MAX_BATCH:
                    try:
                        op = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if op is None:
                        stop = True
                        break
                    batch.append(op)
                self._run_batch(conn, batch)
                if stop:
                    return
        finally:
            conn.close()

    def _run_batch(self, conn: sqlite3.Connection, batch: list[_Op[Any]]) -> None:
        # Reads are answered before the writes' transaction begins: a read queued with this
        # batch was submitted before these writes were acknowledged, so it may not see them,
        # and it need not wait for their COMMIT (and fsync).
        reads = [self._call(conn, op) for op in batch if not op.write]
        if reads:
            _wake(reads)
        writes = [op for op in batch if op.write]
        if writes:
            _wake(self._run_writes(conn, writes))

    @staticmethod
    def _call(conn: sqlite3.Connection, op: _Op[Any]) -> _Outcome:
        try:
            return op, op.fn(conn), None
        except BaseException as exc:
            return op, None, translate(exc)

    def _begin(self, conn: sqlite3.Connection) -> None:
        """BEGIN IMMEDIATE, waiting for another process's write lock by polling every
        ``LOCK_POLL`` seconds up to the busy timeout.

        Why not SQLite's busy handler: it sleeps 1, 2, 5, 10, 15, 20, 25... ms between tries,
        so while another process's group commits hold the lock back to back (each a few ms)
        the waiter wakes too late, again and again: two worker processes on one file did no
        better than one, with the CPU half idle. The handler stays on for every other
        statement (a read meeting a checkpoint, say); only this wait is polled."""
        conn.execute("PRAGMA busy_timeout=0")
        try:
            self._retry_locked(conn, "BEGIN IMMEDIATE", LOCK_POLL)
        finally:
            conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_ms)}")

    def _run_writes(self, conn: sqlite3.Connection, ops: list[_Op[Any]]) -> list[_Outcome]:
        answered, again = self._transaction(conn, ops)
        if again:
            # SQLite rolled the batch's transaction back (see _undo): the others once more in
            # a fresh one, then, if that is rolled back too, each alone, so that each is
            # answered for itself as a write alone is (all on failure only).
            outcomes, again = self._transaction(conn, again)
            answered += outcomes
            for op in again:
                answered += self._transaction(conn, [op])[0]
        return answered

    def _transaction(
        self, conn: sqlite3.Connection, ops: list[_Op[Any]]
    ) -> tuple[list[_Outcome], list[_Op[Any]]]:
        """Run ``ops`` in one transaction: the answers, and the ops to run again (not
        answered) because SQLite rolled the transaction back under them; none for one op."""
        try:
            self._begin(conn)
        except sqlite3.Error as exc:
            err = translate(exc)
            return [(op, None, err) for op in ops], []
        if len(ops) == 1:  # alone in its transaction: no savepoint needed to isolate it
            op = ops[0]
            try:
                result = op.fn(conn)
            except BaseException as exc:
                self._rollback(conn)
                return [(op, None, translate(exc))], []
            return self._commit(conn, [(op, result, None)]), []
        optimistic = self._optimistic(conn, ops)
        if optimistic is not None:
            return self._commit(conn, optimistic), []
        try:  # one of them failed: the whole batch again, each in its savepoint
            self._begin(conn)
        except sqlite3.Error as exc:
            err = translate(exc)
            return [(op, None, err) for op in ops], []
        return self._isolated(conn, ops)

    def _optimistic(self, conn: sqlite3.Connection, ops: list[_Op[Any]]) -> list[_Outcome] | None:
        """Run ``ops`` in the open transaction without savepoints; their answers, or None
        (the transaction rolled back) when one raised.

        Why: a write almost never fails, and each savepoint costs two statements per write
        (``SAVEPOINT`` and ``RELEASE``, a tenth of a transition's SQL time). When one does
        fail, the statements of that write that ran before the failing one cannot be undone
        alone, so the whole transaction is rolled back and the batch runs again, each write
        in its savepoint (:meth:`_isolated`): a write may run twice, which ``write`` allows."""
        done: list[_Outcome] = []
        try:
            for op in ops:
                done.append((op, op.fn(conn), None))
        except BaseException:
            self.retried_batches += 1
            self._rollback(conn)
            return None
        return done

    def _isolated(
        self, conn: sqlite3.Connection, ops: list[_Op[Any]]
    ) -> tuple[list[_Outcome], list[_Op[Any]]]:
        """Run ``ops`` in the open transaction, each in its savepoint (see
        :meth:`_transaction`)."""
        done: list[_Outcome] = []
        for i, op in enumerate(ops):
            try:
                conn.execute("SAVEPOINT op")
                result = op.fn(conn)
                conn.execute("RELEASE op")
                done.append((op, result, None))
            except BaseException as exc:
                error = translate(exc)
                if not self._undo(conn):
                    # Nothing of this transaction committed: this write is answered its
                    # error, the others (rolled back with it, or not run yet) go again.
                    self.rolled_back += 1
                    log.error(
                        "SQLite rolled back a group commit's transaction",
                        extra={"action": "persistence_failure", "error": str(error)},
                    )
                    return [(op, None, error)], [o for o, _, _ in done] + ops[i + 1 :]
                done.append((op, None, error))
        return self._commit(conn, done), []

    def _undo(self, conn: sqlite3.Connection) -> bool:
        """After a write failed inside its savepoint: roll the savepoint back, and say whether
        the batch's transaction still holds every earlier write of it.

        Only paid on failure. SQLite may have rolled the *whole* transaction back by itself
        (SQLITE_FULL from a cache spill, SQLITE_IOERR, SQLITE_NOMEM, ...: see "Response To
        Errors Within A Transaction" in its documentation). Then the connection is in
        autocommit mode, and the rest of the batch must not run there: each write's SAVEPOINT
        would open a transaction of its own and its RELEASE commit it, unseen by the batch's
        final COMMIT. When the savepoint cannot be rolled back alone, the whole transaction
        is, so that nothing of the failed write can be committed with the others."""
        if not conn.in_transaction:
            return False
        try:
            conn.execute("ROLLBACK TO op")
            conn.execute("RELEASE op")
            return True
        except sqlite3.Error:
            log.exception("rollback to savepoint failed", extra={"action": "rollback"})
        self._rollback(conn)
        return False

    @staticmethod
    def _rollback(conn: sqlite3.Connection) -> None:
        """End the open transaction, if SQLite did not end it already."""
        if not conn.in_transaction:
            return
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            log.exception("rollback failed", extra={"action": "rollback"})

    def _commit(self, conn: sqlite3.Connection, done: list[_Outcome]) -> list[_Outcome]:
        try:
            conn.execute("COMMIT")
            self.commits += 1
            self.batched_writes += len(done)
        except sqlite3.Error as exc:
            return self._commit_failed(conn, done, exc)
        return done

    def _commit_failed(
        self, conn: sqlite3.Connection, done: list[_Outcome], exc: sqlite3.Error
    ) -> list[_Outcome]:
        """Answer every write of a batch whose COMMIT failed, with what is known of it.

        Still in the transaction (SQLITE_BUSY, a deferred constraint): nothing committed; it is
        rolled back. Ended by SQLite with SQLITE_FULL: a write to the WAL (or journal) failed
        before the commit record was whole, nothing committed. Ended with any other error
        (SQLITE_IOERR from the fsync after the commit record was written, say): the commit
        record may be in the file, and a restart would then find the transaction committed:
        :class:`OutcomeUnknown` for the writes that ran (those that failed inside their
        savepoint changed nothing either way)."""
        log.error("commit failed", extra={"action": "persistence_failure", "error": str(exc)})
        err = translate(exc)
        if conn.in_transaction:
            self._rollback(conn)
        elif _primary(exc) != sqlite3.SQLITE_FULL:
            unknown = OutcomeUnknown(
                f"SQLite failed to commit ({exc}); the write may or may not have been applied"
            )
            unknown.__cause__ = exc
            return [(op, None, unknown if error is None else err) for op, _, error in done]
        return [(op, None, err) for op, _, _ in done]
