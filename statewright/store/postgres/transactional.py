"""Transactional steps on PostgreSQL (:mod:`statewright.store.transactional`): a step's
``fn`` gets the batch's ``psycopg.AsyncConnection`` inside the transition's savepoint
(:mod:`.stepped`) or transaction (a write alone); it may be ``async def``.

A table qualifies when ``to_regclass`` finds it (so the connection's ``search_path``
applies, and ``schema.table`` names work) as an ordinary or partitioned table: a foreign
table (``postgres_fdw``), whose rows live in another server, or a view, does not.
"""

from __future__ import annotations

from collections.abc import Sequence

from statewright.errors import TransactionUnavailable
from statewright.store.postgres.base import PostgresBase

_KIND = "SELECT c.relkind::text AS kind FROM pg_class c WHERE c.oid = to_regclass(%(name)s)"


class PostgresTransactional(PostgresBase):
    """:class:`~statewright.store.transactional.TransactionalStore` on PostgreSQL."""

    transactions_awaited = True

    async def check_tables(self, tables: Sequence[str]) -> None:
        checked: set[str] = self.__dict__.setdefault("_transaction_tables", set())
        missing: list[str] = []
        for table in tables:
            if table in checked:
                continue
            row = await self._one(_KIND, {"name": table})
            if row is None or row["kind"] not in ("r", "p"):
                missing.append(table)
            else:
                checked.add(table)
        if missing:
            raise TransactionUnavailable(
                f"tables {missing} are not tables of this PostgreSQL store's database "
                f"({self.where}; looked up on its search_path, foreign tables and views "
                "excluded): a transactional step can only write tables that commit with the "
                "transition. Create them there, or write elsewhere with run.step and an "
                "idempotency key (the step's key)",
                tables=missing,
            )
