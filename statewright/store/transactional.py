"""Transactional steps: user code writing the application's rows in a transition's transaction.

A handler registers ``run.transaction(name, fn, tables=...)``; the transition it returns
carries the steps (:attr:`~statewright.types.TransitionWrite.effects`), and the store calls
each ``fn(conn)`` with its own connection right after the transition's compare-and-swap
matched (the lease fence and the version proven, the row locked), in the same transaction,
in registration order. Both commit or neither does: a step that raises rolls back its
transition whole (log entry, timers, carried step record, the rows it wrote), and only its
own, never the rest of a group commit (a savepoint per write carrying steps), and the
writer gets :class:`~statewright.errors.TransactionFailed`.

A store offers this by implementing :class:`TransactionalStore` (SQLite and PostgreSQL do);
any other store is refused at registration, and tables that are not in the store's own
database before the transition is written, with
:class:`~statewright.errors.TransactionUnavailable`.

What a step may rely on, and must not do:

- ``fn`` may run more than once for one committed transition (SQLite runs a group commit's
  writes again, each in its savepoint, when one of them failed; PostgreSQL sends a batch
  again after a deadlock): only its writes through ``conn`` count, and they are rolled back
  with each run that does not commit. It must not commit, roll back or close ``conn``.
- It runs while the store's writes wait for it (SQLite: on the connection's thread, inside
  the shared transaction): keep it to a few statements, no network calls.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from statewright.errors import FatalError, TransactionFailed
from statewright.types import TransactionalStep


@runtime_checkable
class TransactionalStore(Protocol):
    """A store that runs transactional steps in its transitions' transactions."""

    transactions_awaited: bool
    """True when a step's ``fn`` may be ``async def`` (its result is awaited: PostgreSQL);
    False when it must be synchronous (SQLite, whose connection lives on its own thread)."""

    async def check_tables(self, tables: Sequence[str]) -> None:
        """Raise :class:`~statewright.errors.TransactionUnavailable` unless every table named
        exists in the store's own database (checked once per table and store)."""
        ...


def run_steps(conn: Any, steps: Sequence[TransactionalStep]) -> None:
    """Run synchronous steps on ``conn`` (SQLite); one raising, or ending the transaction,
    becomes TransactionFailed."""
    for step in steps:
        try:
            result = step.fn(conn)
            if inspect.isawaitable(result):
                if inspect.iscoroutine(result):
                    result.close()
                raise TypeError("it returned an awaitable: on SQLite it must be synchronous")
            if not conn.in_transaction:
                # SQLite rolled the transaction back under an error it caught, or it ended
                # the transaction itself: what follows must not run in autocommit.
                raise FatalError(
                    "the transaction ended under it (an error it caught made SQLite roll "
                    "back, or it committed or rolled back the connection itself)"
                )
        except Exception as exc:
            raise TransactionFailed(step.name, exc) from exc


def names(steps: Sequence[TransactionalStep]) -> list[str]:
    """The steps' names, for logs."""
    return [step.name for step in steps]
