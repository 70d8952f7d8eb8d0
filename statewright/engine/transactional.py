"""``run.transaction``: registering a handler's transactional steps.

A transactional step writes the application's own rows in the transaction that applies the
handler's transition (see :mod:`statewright.store.transactional` for what the store does).
Registering checks at once what needs no I/O (the name, the function, the store's capability);
that the tables named are in the store's database is checked (:func:`check`, once per table
and store) before the transition that carries the step is written, so ``run.transaction`` is
a plain call like ``run.schedule`` and ``run.emit``. The step rides with the transition the
handler returns, and only with it: a run that ends
without a transition (it raised, was cancelled, lost its lease) applies none of its steps,
and one that returns None (idle) with steps registered fails with a
:class:`~statewright.errors.FatalError` (idle writes no transition to commit them with).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from statewright.engine.usercalls import is_async
from statewright.errors import FatalError, InvalidInput, TransactionUnavailable
from statewright.store.transactional import TransactionalStore
from statewright.types import TransactionalStep

_TABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*(\.[A-Za-z_][A-Za-z0-9_$]*)?")
"""A table, optionally schema-qualified (unquoted identifiers only)."""


def register(
    store: object,
    registered: tuple[TransactionalStep, ...],
    name: str,
    fn: Callable[[Any], Any],
    tables: Iterable[str],
) -> TransactionalStep:
    """The step to add to a run's ``registered`` ones, once it is checked: InvalidInput for a
    bad name, function or table name; TransactionUnavailable when ``store`` cannot run it
    (no such capability, an ``async def`` on a store that cannot await it). Its tables are
    checked by :func:`check`, before the transition is written.
    """
    if not isinstance(name, str) or not name:
        raise InvalidInput(f"a transactional step needs a non-empty name, not {name!r}")
    if any(step.name == name for step in registered):
        raise InvalidInput(f"transactional step {name!r} is already registered in this run")
    if not callable(fn):
        raise InvalidInput(f"transactional step {name!r}: {fn!r} is not callable")
    if isinstance(tables, str):
        tables = (tables,)
    named = tuple(tables)
    for table in named:
        if not isinstance(table, str) or not _TABLE.fullmatch(table):
            raise InvalidInput(
                f"transactional step {name!r}: {table!r} is not a table name "
                "(an identifier, optionally schema-qualified)"
            )
    if not isinstance(store, TransactionalStore):
        raise TransactionUnavailable(
            f"transactional step {name!r}: the store ({type(store).__name__}) cannot run user "
            "code in its transactions; write with run.step and an idempotency key (the step's "
            "key) instead",
            step=name,
        )
    if not store.transactions_awaited and is_async(fn):
        raise TransactionUnavailable(
            f"transactional step {name!r}: its function is async, but this store "
            f"({type(store).__name__}) calls it on its own connection's thread, inside the "
            "transaction: give a synchronous function",
            step=name,
        )
    return TransactionalStep(name, fn, named)


async def check(store: object, steps: tuple[TransactionalStep, ...]) -> None:
    """Before the transition carrying ``steps`` is written: TransactionUnavailable unless every
    table they name is in ``store``'s own database (the store caches what it found)."""
    assert isinstance(store, TransactionalStore)  # (registration refused any other store)
    tables = tuple(dict.fromkeys(table for step in steps for table in step.tables))
    if tables:
        await store.check_tables(tables)


def idle_with_steps(state: str, registered: tuple[TransactionalStep, ...]) -> FatalError:
    """The failure of a handler that registered steps and returned no event."""
    names = [step.name for step in registered]
    return FatalError(
        f"the handler of {state!r} registered transactional steps {names} and returned no "
        "event: they commit only with the transition the handler returns"
    )
