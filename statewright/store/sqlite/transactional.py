"""Transactional steps on SQLite (:mod:`statewright.store.transactional`): a step's ``fn``
gets the store's own ``sqlite3.Connection``, on its thread, inside the savepoint of the
transition's write in the shared group-commit transaction; so it must be synchronous.

Only tables of the ``main`` database qualify: an ATTACHed database file commits atomically
with it only in rollback-journal mode, not in WAL mode (the store's), so a crash could keep
one and lose the other.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from statewright.errors import TransactionUnavailable
from statewright.store.sqlite.base import SQLiteBase

_TABLE = "SELECT 1 FROM main.sqlite_master WHERE type = 'table' AND name = ?"


def _missing(conn: sqlite3.Connection, tables: Sequence[str]) -> list[str]:
    missing = []
    for table in tables:
        schema, _, name = table.rpartition(".")
        if schema not in ("", "main") or conn.execute(_TABLE, (name,)).fetchone() is None:
            missing.append(table)
    return missing


class SQLiteTransactional(SQLiteBase):
    """:class:`~statewright.store.transactional.TransactionalStore` on SQLite."""

    transactions_awaited = False

    async def check_tables(self, tables: Sequence[str]) -> None:
        checked: set[str] = self.__dict__.setdefault("_transaction_tables", set())
        asked = [t for t in tables if t not in checked]
        if not asked:
            return
        missing = await self.conn.read(lambda conn: _missing(conn, asked))
        if missing:
            raise TransactionUnavailable(
                f"tables {missing} are not in this SQLite store's database ({self.path}, "
                "schema main): a transactional step can only write tables that commit with "
                "the transition. Create them there, or write elsewhere with run.step and an "
                "idempotency key (the step's key)",
                tables=missing,
            )
        checked.update(asked)
