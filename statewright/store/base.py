"""What the two SQL stores share: a dialect gives its queries, row mapping, encoding and four
ways to run a statement; the parts written once (:mod:`.core`, :mod:`.read_model`,
:mod:`.schedules`, :mod:`.alert_outbox`, :mod:`.retention_sql`) build on those.

A method whose work is one named statement (a read, or a write that is one statement) is
written once, over :meth:`SQLStore._all`, :meth:`~SQLStore._one`, :meth:`~SQLStore._rowcount`
and :meth:`~SQLStore._read_many`; several statements run in one go are written once as a
:data:`Plan`. What else takes more than one statement, or a transaction, is each dialect's
own (its package: :mod:`statewright.store.sqlite`, :mod:`statewright.store.postgres`),
behind a hook the shared method calls.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Generator, Mapping
from typing import Any, ClassVar, TypeVar

from statewright.store.params import Encoding
from statewright.store.rows import Row, Rows
from statewright.store.sqlbuild import Dialect

T = TypeVar("T")
Plan = Generator[tuple[str, Mapping[str, Any]], Any, T]
"""Statements run in one go: yields ``(sql, params)``, is sent what each gave (its rows, or
for writes its row count), returns the answer. Each dialect runs a plan its way (on
SQLite in one operation on the connection's thread, on PostgreSQL on one connection)."""


def run_plan(plan: Plan[T], execute: Callable[[str, Mapping[str, Any]], Any]) -> T:
    """Drive ``plan`` with a synchronous ``execute(sql, params)``."""
    try:
        statement = next(plan)
        while True:
            statement = plan.send(execute(*statement))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def run_plan_async(
    plan: Plan[T], execute: Callable[[str, Mapping[str, Any]], Awaitable[Any]]
) -> T:
    """Drive ``plan`` with an asynchronous ``execute(sql, params)``."""
    try:
        statement = next(plan)
        while True:
            statement = plan.send(await execute(*statement))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


class SQLStore(ABC):
    """A SQL dialect, as the shared parts of the store use it."""

    dialect: ClassVar[Dialect]
    queries: ClassVar[Mapping[str, str]]
    """The dialect's named queries (``sql/<dialect>/queries.sql``)."""
    rows: ClassVar[Rows]
    enc: ClassVar[Encoding]

    @abstractmethod
    async def _all(self, sql: str, params: Mapping[str, Any], *, write: bool = False) -> list[Any]:
        """The rows of one statement (``write``: it writes, and commits)."""

    @abstractmethod
    async def _one(self, sql: str, params: Mapping[str, Any], *, write: bool = False) -> Any:
        """The first row of one statement, or None."""

    @abstractmethod
    async def _rowcount(self, sql: str, params: Mapping[str, Any]) -> int:
        """Run one writing statement; the rows it changed."""

    @abstractmethod
    async def _read_many(
        self, sql: str, params: Mapping[str, Any], convert: Callable[[Row], T]
    ) -> list[T]:
        """The rows of one read, converted: off the event loop when they are large
        (:mod:`statewright.offload`)."""

    @abstractmethod
    async def _reads(self, plan: Plan[T], *, snapshot: bool = False) -> T:
        """Run a plan of reads in one go: on one snapshot with ``snapshot``, else each read as
        cheaply as it can (on PostgreSQL without parallel workers: ranges of an index)."""

    @abstractmethod
    async def _write_plan(self, make: Callable[[], Plan[T]], *, rows: bool = False) -> T:
        """Run the plan ``make()`` of writes in one transaction, sent each statement's row
        count (with ``rows``: its rows, none for a statement that returns none); ``make`` may
        be called again when the transaction is run again."""

    @abstractmethod
    async def _or_else(
        self, sql: str, params: Mapping[str, Any], then: str, then_params: Mapping[str, Any]
    ) -> tuple[Any, Any]:
        """A writing statement's row; when it returned none, the row the statement ``then``
        reads right after it (in the same transaction on SQLite, connection on PostgreSQL)."""

    @abstractmethod
    def _wake(self) -> None:
        """Wake this process's waiters (``wait_for_work``): work may have become due."""

    async def _count(self, sql: str, params: Mapping[str, Any]) -> int:
        """A count read (a statement returning ``n``)."""
        row = await self._one(sql, params)
        return 0 if row is None else int(row["n"])
