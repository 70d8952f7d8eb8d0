"""Group commit on PostgreSQL: concurrent writes share a round trip and a commit.

A transition alone is one statement, ``apply_transition``, in autocommit: one round trip with its
commit (``_apply_alone`` in :mod:`.transitions`). Under concurrency that costs one commit
record, one WAL flush wait and one round trip per transition. Here, as in SQLite's group commit
(:mod:`statewright.store.sqlite.conn`), a write that arrives while the store's writes are in
flight (``in_flight`` slots, 2 by default, so that Python's work on one batch's answers
overlaps the server's work on the next) queues, and everything queued goes out together as
the next **batch**: on one connection, in pipeline mode,

    BEGIN; apply_transition(w1); ...; apply_transition(wn); COMMIT   -- then one Sync

so the batch costs one round trip and one commit however many writes it holds, and every
caller gets its own answer. A step's start (``step_open``, its *executing* record) rides in the
same batches (:meth:`GroupCommit.statement`): alone, every state of a worker cost one commit
of its own on top of the transitions' shared ones (1.7 commits per state, now 0.4).

- **A lone writer pays nothing extra**: with a slot free and nothing queued the write runs at
  once by the one-statement path, unchanged (no BEGIN, no pipeline, no task hop). A slot whose
  queue ran dry waits one turn of the event loop before it is freed, so the writers it just
  answered, writing again at once, form the next batch instead of one of them going alone.
- **Failure isolation without savepoints.** The statement cannot raise for an ordinary refusal:
  a compare-and-swap that matches nothing (stale version, lost lease, consumed inbox item,
  fired timer gone, a snapshot that missed a concurrent update) returns no row, and the
  others go on. Those are asked why *after* the COMMIT (``_refusal``, one more round trip per
  refused write, on failure only), so the answer is read from committed state exactly as the
  one-statement path reads it; one refused only by the snapshot's row version (xmin)
  check is queued again for a later batch, up to the same number of runs. A statement that
  does raise (an idempotency key already in the log, a value the server rejects) aborts the
  transaction, so nothing of the batch committed: it is rolled back, the failing write is
  marked to run **alone** (the one-statement path, which reports its own error exactly as
  before) and the others are queued again, in their order of arrival. That costs extra round
  trips only when something fails; savepoints would cost a statement (and a subtransaction)
  per write on every batch, and in pipeline mode an error skips everything up to the next
  Sync anyway.
- **Two writes of one workflow in one batch** run in their order of arrival (the sort below
  is stable) in one transaction, so the second sees the first: planned on the same version,
  it fails its compare-and-swap (VersionConflict, as if it had come second on its own);
  planned on the first's result, it applies.
- **Lock order and deadlocks.** A batch locks many workflow rows until its COMMIT, so two
  processes' batches could wait for each other. Writes are sorted by workflow id, so all
  batches take row locks in one order. A ``DeadlockDetected`` or ``SerializationFailure``
  that happens anyway (a lock taken in another order by some other statement) rolls the whole
  batch back (nothing of it committed) and queues every write of it again; after a few such
  rounds a write runs alone.
- **Outcome.** Every write of a batch is answered only after the COMMIT's answer. If the
  connection breaks after the COMMIT was handed to the connection, whether the server
  committed is unknowable: every writer of the batch gets :class:`OutcomeUnknown` (retry with
  an idempotency key). If it breaks before (no COMMIT sent) or the server refuses the COMMIT,
  nothing committed: :class:`StoreError`. A caller cancelled while queued is dropped before
  its write is sent; one cancelled later has its write applied or not, unanswered.

Counters: ``commits`` (transactions that carried transitions, a batch or a lone write counting
once), ``batched_writes`` (writes they carried), ``batches`` (transactions of more than one
write), ``batches_sent`` (those sent, committed or not), ``largest`` (the most writes in one
that committed), ``deadlocks`` (batches rolled back by a deadlock or serialization failure and
sent again).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import psycopg
from psycopg import AsyncConnection
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow
from psycopg_pool import AsyncConnectionPool

from statewright.errors import OutcomeUnknown, StatewrightError, StoreError, TransactionFailed
from statewright.store.core import wakes_workers
from statewright.store.postgres.listen import Listener
from statewright.store.postgres.params import transition_params
from statewright.store.postgres.read import ROWS
from statewright.store.postgres.searched import QUERIES, query_name
from statewright.store.postgres.stepped import BatchFailed, RunAlone, send_stepped
from statewright.types import DeferWrite, TransitionWrite, WorkflowRow

Q = QUERIES

MAX_BATCH = 128
"""Writes per transaction at most (the rest wait for the next batch)."""
IN_FLIGHT = 2
"""Writes or batches of one store in flight at once: while one is at the server the next one
gathers and goes (Python's work on the results and the server's on the next batch overlap)."""
SNAPSHOT_ROUNDS = 4
"""Runs of a write refused by the snapshot check alone (a transition or deferral sent alone
too: a timer-changing write whose snapshot missed a concurrent update of its row)."""
ABORT_ROUNDS = 3
"""Batches a write may see rolled back by deadlocks or serialization failures before it runs
alone."""
_RETRYABLE = (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure)
_order = itertools.count()


class Writer(Protocol):
    """What group commit uses of its store (:class:`~statewright.store.postgres.PostgresStore`)."""

    where: str
    listener: Listener
    _pool: AsyncConnectionPool[AsyncConnection[DictRow]] | None

    def _translate(self, exc: psycopg.Error, write: bool = False) -> StatewrightError: ...

    async def _apply_alone(
        self, write: TransitionWrite, params: dict[str, Any]
    ) -> WorkflowRow: ...

    async def _one(
        self, sql: str, params: Mapping[str, Any], *, write: bool = False
    ) -> DictRow | None: ...

    async def _refusal(
        self,
        conn: AsyncConnection[DictRow],
        write: TransitionWrite | DeferWrite,
        *,
        retryable: bool = False,
    ) -> StatewrightError | None: ...


@dataclass(eq=False)
class _Pending:
    write: TransitionWrite | None
    """The transition; None for a plain statement (:meth:`GroupCommit.statement`)."""
    params: dict[str, Any]
    future: asyncio.Future[Any] | None
    """Set when it queues (a write sent at once has none)."""
    workflow_id: str
    """Its workflow: batches take row locks in this order."""
    query: str = "apply_transition"
    """The statement's name in ``queries.sql``."""
    seq: int = field(default_factory=lambda: next(_order))
    rounds: int = 0
    """Batches that refused it by the snapshot (xmin) check alone."""
    aborts: int = 0
    """Batches rolled back under it by a deadlock or a serialization failure."""
    alone: bool = False
    """Run it in a transaction of its own (the one-statement path)."""


def _resolve(p: _Pending, row: WorkflowRow | DictRow | None) -> None:
    assert p.future is not None, "a queued write has its future"
    if not p.future.done():  # else the caller was cancelled: nobody is waiting
        p.future.set_result(row)


def _fail(p: _Pending, exc: BaseException) -> None:
    assert p.future is not None, "a queued write has its future"
    if not p.future.done():
        p.future.set_exception(exc)


class GroupCommit:
    """Queues concurrent ``apply_transition`` calls of one store into shared transactions.

    Args:
        store: the store whose pool, refusal query and listener it uses.
        enabled: False runs every write alone (as before group commit).
        max_batch: writes per transaction at most.
    """

    def __init__(
        self,
        store: Writer,
        *,
        enabled: bool = True,
        max_batch: int = MAX_BATCH,
        in_flight: int = IN_FLIGHT,
    ) -> None:
        self.store = store
        self.enabled = enabled
        self.max_batch = max(1, max_batch)
        self.in_flight = max(1, in_flight)
        self._queue: deque[_Pending] = deque()
        self._running = 0
        """Writes or batches in flight (at most ``in_flight``); beyond that, writes queue."""
        self._flushers: set[asyncio.Task[None]] = set()
        self.commits = 0
        self.batched_writes = 0
        self.batches = 0
        self.batches_sent = 0
        self.deadlocks = 0
        self.largest = 0

    async def apply(self, write: TransitionWrite) -> WorkflowRow:
        params = transition_params(write)  # InvalidInput before any I/O
        query = query_name(write.search)
        row: WorkflowRow = await self._submit(
            _Pending(write, params, None, write.workflow_id, query)
        )
        return row

    async def statement(
        self, query: str, params: dict[str, Any], workflow_id: str
    ) -> DictRow | None:
        """Run the named write statement, sharing a batch's transaction with the writes queued
        with it; its row (None: it returned none). It must not raise for an ordinary outcome
        (the way :meth:`apply` reports a refusal as no row), must lock rows of
        ``workflow_id`` only, and is answered after its COMMIT: a step's *executing* record
        (``step_open``) is durable before its action runs, as alone."""
        row: DictRow | None = await self._submit(_Pending(None, params, None, workflow_id, query))
        return row

    async def _submit(self, p: _Pending) -> Any:
        if not self.enabled:
            return await self._alone(p)
        if self._running < self.in_flight and not self._queue:
            # A free slot: this write goes now, by the one-statement path (no extra round
            # trip or task hop for a lone writer); whatever queues meanwhile goes next.
            self._running += 1
            try:
                return await self._alone(p)
            finally:
                self._next()
        p.future = asyncio.get_running_loop().create_future()
        self._queue.append(p)
        if self._running < self.in_flight:
            self._running += 1
            self._start()
        return await p.future

    # -- scheduling --------------------------------------------------------------------------

    def _next(self) -> None:
        """A lone write is done: its slot sends what queued meanwhile, or is freed."""
        if self._queue:
            self._start()
        else:
            self._running -= 1

    def _start(self) -> None:
        """Send the queue's batches in a task that holds one slot until the queue is empty."""
        task = asyncio.get_running_loop().create_task(
            self._flush(), name="statewright-pg-group-commit"
        )
        self._flushers.add(task)
        task.add_done_callback(self._flushers.discard)

    async def _flush(self) -> None:
        batch: list[_Pending] = []
        try:
            while True:
                if not self._queue:
                    # Let the writers just answered run first: those that write again at once
                    # (a client's next send, a worker's next step) join this slot's next batch
                    # instead of going alone and splitting it. One turn of the event loop.
                    await asyncio.sleep(0)
                    if not self._queue:
                        break
                batch = self._take()
                if len(batch) == 1:
                    await self._run_alone(batch[0])
                elif batch:
                    await self._run_batch(batch)
                batch = []
        except BaseException as exc:
            # Cancelled (the event loop is shutting down) or a bug: the runs answer every
            # error themselves. Answer the writes this slot was running (perhaps sent), and
            # the queue if no other slot is left to send it.
            unknown = OutcomeUnknown(f"group commit interrupted: {exc!r}")
            for p in batch:
                _fail(p, unknown)
            if self._running <= 1:
                err = StoreError(f"group commit interrupted: {exc!r}")
                while self._queue:
                    _fail(self._queue.popleft(), err)
            raise
        finally:
            self._running -= 1

    def _take(self) -> list[_Pending]:
        """The next batch: queued writes in order, up to one that must run alone."""
        batch: list[_Pending] = []
        while self._queue and len(batch) < self.max_batch:
            p = self._queue[0]
            if p.future is not None and p.future.done():  # cancelled while queued: never sent
                self._queue.popleft()
                continue
            if p.alone and batch:
                break
            batch.append(self._queue.popleft())
            if p.alone:
                break
        return batch

    def _requeue(self, pending: Iterable[_Pending]) -> None:
        """Put writes back at the front, in their order of arrival (ahead of later ones)."""
        self._queue.extendleft(sorted(pending, key=lambda p: p.seq, reverse=True))

    # -- running -----------------------------------------------------------------------------

    async def _alone(self, p: _Pending) -> Any:
        if p.write is None:
            row = await self.store._one(Q[p.query], p.params, write=True)
            self._count(1)
            return row
        return await self._transition_alone(p.write, p.params)

    async def _transition_alone(
        self, write: TransitionWrite, params: dict[str, Any]
    ) -> WorkflowRow:
        try:
            row = await self.store._apply_alone(write, params)
        except StoreError:
            raise  # not committed, or not known to be
        except StatewrightError:
            self._count(1)  # refused: its statement committed, changing nothing
            raise
        self._count(1)
        return row

    def _count(self, writes: int) -> None:
        self.commits += 1
        self.batched_writes += writes
        self.largest = max(self.largest, writes)

    async def _run_alone(self, p: _Pending) -> None:
        try:
            row = await self._alone(p)
        except Exception as exc:
            _fail(p, exc)
        else:
            _resolve(p, row)

    async def _run_batch(self, batch: list[_Pending]) -> None:
        # One lock order for every batch of every process: by workflow id (stable, so the
        # writes of one workflow keep their order of arrival).
        batch.sort(key=lambda p: p.workflow_id)
        pool = self.store._pool
        if pool is None:
            for p in batch:
                _fail(p, StoreError("the PostgreSQL store is not open"))
            return
        try:
            async with pool.connection() as conn:
                await self._send(conn, batch)
        except psycopg.Error as exc:
            # No connection was had (pool timeout, closed pool): nothing was sent.
            err = self.store._translate(exc)
            for p in batch:
                _fail(p, err)

    async def _send(self, conn: AsyncConnection[DictRow], batch: list[_Pending]) -> None:
        if any(p.write is not None and p.write.effects for p in batch):
            await self._send_stepped(conn, batch)
            return
        cursors: list[psycopg.AsyncCursor[DictRow]] = []
        commit_sent = False
        self.batches_sent += 1
        try:
            async with conn.pipeline():
                await conn.execute("BEGIN")
                for p in batch:
                    cursors.append(await conn.execute(Q[p.query], p.params))
                commit_sent = True
                await conn.execute("COMMIT")
            rows = [await cur.fetchone() for cur in cursors]
        except psycopg.Error as exc:
            await self._failed(conn, batch, cursors, exc, commit_sent)
            return
        except BaseException:
            await self._interrupted(conn, batch)
            raise
        await self._answer(conn, batch, rows)

    async def _send_stepped(self, conn: AsyncConnection[DictRow], batch: list[_Pending]) -> None:
        """A batch holding writes with transactional steps: each write in its savepoint
        (:mod:`.stepped`); a step that raised fails its own write only."""
        self.batches_sent += 1
        try:
            answers = await send_stepped(conn, [(Q[p.query], p.params, p.write) for p in batch])
        except BatchFailed as failed:
            await self._failed(conn, batch, None, failed.error, failed.commit_sent)
            return
        except BaseException:
            await self._interrupted(conn, batch)
            raise
        done: list[_Pending] = []
        rows: list[DictRow | None] = []
        alone: list[_Pending] = []
        for p, answer in zip(batch, answers, strict=True):
            if isinstance(answer, TransactionFailed):
                _fail(p, answer)  # its savepoint was rolled back: nothing of it committed
            elif isinstance(answer, RunAlone):
                p.alone = True
                alone.append(p)
            else:
                done.append(p)
                rows.append(answer)
        self._requeue(alone)
        await self._answer(conn, done, rows)

    async def _interrupted(self, conn: AsyncConnection[DictRow], batch: list[_Pending]) -> None:
        """Cancelled mid-flight (the store is closing): the COMMIT may have been sent."""
        err = OutcomeUnknown(
            f"a write to PostgreSQL ({self.store.where}) was interrupted; it may or may "
            "not have been applied"
        )
        for p in batch:
            _fail(p, err)
        await _rollback(conn)

    async def _answer(
        self, conn: AsyncConnection[DictRow], batch: list[_Pending], rows: list[DictRow | None]
    ) -> None:
        """Answer a committed batch's writers from their statements' rows."""
        self._count(len(batch))
        self.batches += 1
        refused: list[_Pending] = []
        due = False
        for p, row in zip(batch, rows, strict=True):
            if p.write is None:  # a plain statement: its row is its answer
                _resolve(p, row)
                continue
            if row is None:
                refused.append(p)
                continue
            after = ROWS.workflow(row)
            due = due or wakes_workers(after)
            _resolve(p, after)
        if due:
            self.store.listener.wake()
        if refused:
            await self._refused(conn, refused)

    async def _refused(self, conn: AsyncConnection[DictRow], refused: list[_Pending]) -> None:
        """Why each of these matched nothing, read after the COMMIT (as the one-statement path
        reads it after its own); those refused by the snapshot alone run again later."""
        again: list[_Pending] = []
        for i, p in enumerate(refused):
            assert p.write is not None, "only a transition is refused by no row"
            retry = p.rounds < SNAPSHOT_ROUNDS - 1
            try:
                refusal = await self.store._refusal(conn, p.write, retryable=retry)
            except psycopg.Error as exc:
                # A read: these writes were refused (nothing of them applied) either way.
                err = self.store._translate(exc)
                for q in refused[i:]:
                    _fail(q, err)
                break
            if refusal is None:
                p.rounds += 1
                again.append(p)
            else:
                _fail(p, refusal)
        self._requeue(again)

    async def _failed(
        self,
        conn: AsyncConnection[DictRow],
        batch: list[_Pending],
        cursors: list[psycopg.AsyncCursor[DictRow]] | None,
        exc: psycopg.Error,
        commit_sent: bool,
    ) -> None:
        if isinstance(exc, psycopg.OperationalError) and exc.sqlstate is None:
            # The connection broke. With the COMMIT handed over, it may have been applied:
            # OutcomeUnknown for every writer of the batch; before that, nothing could commit.
            err = self.store._translate(exc, write=commit_sent)
            for p in batch:
                _fail(p, err)
            await _rollback(conn)  # if it is still open (the pool drops a broken one)
            return
        # The server (or the driver, before sending) refused something: the transaction is
        # aborted or unfinished, nothing of the batch committed.
        await _rollback(conn)
        if isinstance(exc, _RETRYABLE):
            self.deadlocks += 1
            for p in batch:
                p.aborts += 1
                p.alone = p.aborts >= ABORT_ROUNDS
            self._requeue(batch)
            return
        # The first statement without a result is the one that failed (the server skipped
        # those after it); all have one: the COMMIT failed.
        # (None: a stepped batch, whose writes' own failures were answered already.)
        if cursors is None:
            failed = len(batch)
        else:
            failed = next(
                (i for i, cur in enumerate(cursors) if cur.pgresult is None), len(cursors)
            )
        if failed >= len(batch):
            err = self.store._translate(exc)
            for p in batch:
                _fail(p, err)
            return
        # Run the failing write alone: it reports its own error exactly as a lone write does
        # (IdempotencyKeyReused, InvalidInput, ...); the others go again without it.
        batch[failed].alone = True
        self._requeue(batch)


async def _rollback(conn: AsyncConnection[Any]) -> None:
    if conn.info.transaction_status in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
        with contextlib.suppress(psycopg.Error):
            await conn.execute("ROLLBACK")
