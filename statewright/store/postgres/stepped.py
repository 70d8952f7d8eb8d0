"""A PostgreSQL group-commit batch that holds writes carrying transactional steps
(:mod:`statewright.store.transactional`).

The ordinary batch (:mod:`.batch`) is pipelined without savepoints: its statements cannot fail
for an ordinary refusal, and one that raises aborts the batch, which is sent again without it.
User code can raise for any reason, and its failure must roll back its own workflow's write
only, so a batch holding such a write is sent differently, statement by statement (only
batches holding one pay for this):

    BEGIN
    -- for each write, in the batch's (lock) order:
    SAVEPOINT w; apply_transition(w); [if it matched: fn1(conn) ... fnk(conn)]; RELEASE w
    COMMIT

(a round trip for each statement but ``RELEASE``, which goes with the next ``SAVEPOINT``;
each step is checked to leave the transaction open and not aborted).

A step that raises has its savepoint rolled back (its transition, the rows it wrote) and its
writer answered :class:`~statewright.errors.TransactionFailed`; a statement of the store that
raises has its savepoint rolled back and its write run alone later (where it reports its own
error, as in the pipelined batch); the others go on and commit together. A broken
connection, a deadlock or a serialization failure (in a statement or a step) fails the batch
as a whole (:class:`BatchFailed`), answered as a pipelined batch's failure is.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow

from statewright.errors import FatalError, TransactionFailed
from statewright.types import TransactionalStep, TransitionWrite

_WHOLE = (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure)


def _store_failed(exc: BaseException) -> bool:
    """The store's connection failed under the step (lost, or the server shutting down or
    starting): a failure of the store, not of the step (nothing committed; retried as a
    store error)."""
    if not isinstance(exc, psycopg.OperationalError):
        return False
    return exc.sqlstate is None or exc.sqlstate.startswith(("08", "57"))


async def run_steps_awaited(conn: Any, steps: Sequence[TransactionalStep]) -> None:
    """Run steps on ``conn``, awaiting what they return; one raising becomes
    TransactionFailed, unless the connection itself failed (raised as it is)."""
    for step in steps:
        try:
            result = step.fn(conn)
            if inspect.isawaitable(result):
                await result
            status = conn.info.transaction_status
            if status != TransactionStatus.INTRANS:
                # An error it caught aborted the transaction (PostgreSQL's COMMIT would then
                # roll back silently), or it ended the transaction itself.
                raise FatalError(
                    "an error of its statements aborted the transaction (catching it does not "
                    "undo that: let it raise, or use a nested conn.transaction())"
                    if status == TransactionStatus.INERROR
                    else "it ended the transaction: a transactional step must not commit or "
                    "roll back its connection"
                )
        except Exception as exc:
            if _store_failed(exc):
                raise
            raise TransactionFailed(step.name, exc) from exc


class RunAlone:
    """The answer of a write whose statement raised: run it alone (its own error)."""


ALONE = RunAlone()

Answer = DictRow | None | TransactionFailed | RunAlone
"""A write's answer: its row (None: its compare-and-swap matched nothing), its steps' failure,
or :data:`ALONE`."""


class BatchFailed(Exception):
    """The batch's transaction failed as a whole: nothing of it committed, unless the COMMIT
    was sent (``commit_sent``) and the connection broke (then nobody knows)."""

    def __init__(self, error: psycopg.Error, commit_sent: bool) -> None:
        super().__init__(str(error))
        self.error = error
        self.commit_sent = commit_sent


def _whole(exc: psycopg.Error) -> bool:
    """The failure ends the batch's transaction, not one write of it."""
    return _store_failed(exc) or isinstance(exc, _WHOLE)


async def send_stepped(
    conn: AsyncConnection[DictRow],
    writes: Sequence[tuple[str, Mapping[str, Any], TransitionWrite | None]],
) -> list[Answer]:
    """Run ``writes`` (statement, parameters, the transition or None) in one transaction,
    each in its savepoint, then COMMIT; the answers in order. Raises :class:`BatchFailed`."""
    answers: list[Answer] = []
    commit_sent = False
    try:
        # One round trip per write for its savepoint: the previous one released and this
        # one taken in one simple query (the first with the BEGIN).
        begin = "BEGIN; SAVEPOINT sw_write"
        for sql, params, write in writes:
            await conn.execute(begin)
            begin = "RELEASE SAVEPOINT sw_write; SAVEPOINT sw_write"
            try:
                row = await (await conn.execute(sql, params)).fetchone()
                if row is not None and write is not None and write.effects:
                    await run_steps_awaited(conn, write.effects)
            except (psycopg.Error, TransactionFailed) as exc:
                cause = exc.error if isinstance(exc, TransactionFailed) else exc
                if isinstance(cause, psycopg.Error) and _whole(cause):
                    raise BatchFailed(cause, False) from exc
                # The savepoint stays (released with the next write's, or by the COMMIT).
                await conn.execute("ROLLBACK TO SAVEPOINT sw_write")
                answers.append(exc if isinstance(exc, TransactionFailed) else ALONE)
                continue
            answers.append(row)
        commit_sent = True
        await conn.execute("COMMIT")
    except psycopg.Error as exc:
        raise BatchFailed(exc, commit_sent) from exc
    return answers
