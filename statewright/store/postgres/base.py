"""The PostgreSQL store's pool, lifecycle, error translation and wake-ups, and the ways it runs
a statement that the shared parts use (:class:`~statewright.store.base.SQLStore`).

psycopg 3 (async) over a connection pool in autocommit mode, so an operation that is one
statement is one round trip, its commit included.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from abc import abstractmethod
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import psycopg
from psycopg import AsyncConnection
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow, dict_row
from psycopg.types.json import set_json_loads
from psycopg_pool import AsyncConnectionPool, PoolClosed, PoolTimeout

from statewright import jsonvalue
from statewright.errors import InvalidInput, OutcomeUnknown, StatewrightError, StoreError
from statewright.store import params
from statewright.store.base import Plan, SQLStore, run_plan_async
from statewright.store.postgres.batch import GroupCommit
from statewright.store.postgres.listen import Listener
from statewright.store.postgres.read import ROWS, Probe, decode_rows, defer_json
from statewright.store.postgres.searched import QUERIES
from statewright.store.queries import migrations
from statewright.types import DeferWrite, TransitionWrite, WorkflowRow

log = logging.getLogger(__name__)

Q = QUERIES
T = TypeVar("T")
Conn = AsyncConnection[DictRow]


async def _configure(conn: AsyncConnection[Any]) -> None:
    # JSONB comes back through a parser that does not depend on the recursion limit: a value
    # stored before the input limits existed (or under looser ones) stays readable.
    set_json_loads(jsonvalue.loads, conn)


def describe_dsn(dsn: str) -> str:
    """``dbname@host:port`` of a DSN, without credentials (for messages and logs)."""
    try:
        info = conninfo_to_dict(dsn)
    except psycopg.Error:
        return "?"
    host = info.get("host") or "localhost"
    port = f":{info['port']}" if info.get("port") else ""
    return f"{info.get('dbname') or info.get('user') or ''}@{host}{port}"


async def rollback(conn: AsyncConnection[Any]) -> None:
    """End a transaction an exception interrupted (the pool discards a broken connection)."""
    if conn.info.transaction_status in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
        with contextlib.suppress(psycopg.Error):
            await conn.execute("ROLLBACK")


async def migrate(conn: AsyncConnection[Any]) -> list[int]:
    """Apply the migrations not applied yet (one opener at a time); their numbers."""
    applied_now: list[int] = []
    async with conn.transaction():
        # One opener migrates at a time; the others wait here, then find nothing to do.
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext('statewright.migrate'))")
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " version INTEGER PRIMARY KEY, name TEXT NOT NULL,"
            " applied_at DOUBLE PRECISION NOT NULL)"
        )
        cur = await conn.execute("SELECT version FROM schema_migrations")
        done = {r[0] for r in await cur.fetchall()}
        for number, name, sql in migrations("postgres"):
            if number in done:
                continue
            await conn.execute(sql)  # no parameters: may hold many statements
            await conn.execute(
                "INSERT INTO schema_migrations VALUES (%s, %s, %s)",
                (number, name, time.time()),
            )
            applied_now.append(number)
    if applied_now:
        log.info(
            "applied migrations %s",
            applied_now,
            extra={"action": "migrate", "applied": applied_now},
        )
    return applied_now


class PostgresBase(SQLStore):
    """One PostgreSQL database: its pool, probe, listener and group commit."""

    dialect = "postgres"
    queries = Q
    rows = ROWS
    enc = params.POSTGRES

    def __init__(
        self,
        dsn: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        timeout: float = 10.0,
        reconnect_timeout: float = 5.0,
        connect_kwargs: dict[str, Any] | None = None,
        group_commit: bool = True,
    ) -> None:
        self.dsn = dsn
        self.min_size = min_size
        self.max_size = max_size
        self.timeout = timeout
        self.reconnect_timeout = reconnect_timeout
        self.connect_kwargs = dict(connect_kwargs or {})
        self.where = describe_dsn(dsn)
        self._pool: AsyncConnectionPool[Conn] | None = None
        self.listener = Listener(dsn, self.connect_kwargs)
        """Shared by every ``wait_for_work`` of this store: one LISTEN connection."""
        self._pool_check: asyncio.Task[None] | None = None
        self.batcher = GroupCommit(self, enabled=group_commit)
        """Group commit of ``apply_transition`` (see :mod:`.batch`)."""
        self.probe = Probe(dsn, self.connect_kwargs, self.where)
        """Readiness probes' own connection, outside the pool (:meth:`ping`)."""

    def __repr__(self) -> str:
        return f"PostgresStore({self.where!r})"

    # -- the transitions part's, for group commit (:mod:`.transitions`) -----------------------

    @abstractmethod
    async def _apply_alone(self, write: TransitionWrite, params: dict[str, Any]) -> WorkflowRow:
        """One transition as one autocommit statement (``params``: what it binds)."""

    @abstractmethod
    async def _refusal(
        self, conn: Conn, write: TransitionWrite | DeferWrite, *, retryable: bool = False
    ) -> StatewrightError | None:
        """Why a compare-and-swap matched no row; with ``retryable``, None when nothing but
        the statement's snapshot refused it (worth running again)."""

    # -- lifecycle ----------------------------------------------------------------------------

    async def open(self) -> None:
        if self._pool is not None:
            return
        # Migrate on a connection of our own first: a wrong DSN or password then fails with
        # the server's own message rather than a pool timeout.
        try:
            conn = await psycopg.AsyncConnection.connect(
                self.dsn, autocommit=True, **self.connect_kwargs
            )
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to PostgreSQL ({self.where}): {exc}") from exc
        try:
            await migrate(conn)
        except psycopg.Error as exc:
            raise StoreError(f"migrating PostgreSQL ({self.where}) failed: {exc}") from exc
        finally:
            await conn.close()
        pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
            self.dsn,
            connection_class=Conn,
            kwargs={"autocommit": True, "row_factory": dict_row, **self.connect_kwargs},
            min_size=self.min_size,
            max_size=self.max_size,
            timeout=self.timeout,
            reconnect_timeout=self.reconnect_timeout,
            name=f"statewright {self.where}",
            configure=_configure,
            open=False,
        )
        try:
            await pool.open(wait=True, timeout=self.timeout)
        except psycopg.Error as exc:
            await pool.close()
            raise StoreError(
                f"cannot open connections to PostgreSQL ({self.where}): {exc}"
            ) from exc
        self._pool = pool

    async def close(self) -> None:
        await self.probe.close()
        await self.listener.close()
        if self._pool_check is not None:
            self._pool_check.cancel()
            with contextlib.suppress(asyncio.CancelledError, psycopg.Error):
                await self._pool_check
            self._pool_check = None
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    async def ping(self) -> None:
        """Answer once the server answers a trivial query on the probe's own connection:
        never waiting for a pooled connection that reads hold (:mod:`.read`)."""
        if self._pool is None:
            raise StoreError("the PostgreSQL store is not open")
        await self.probe.ping()

    async def wait_for_work(self, timeout: float) -> None:
        await self.listener.wait(timeout)

    def _wake(self) -> None:
        self.listener.wake()

    # -- connections and errors ---------------------------------------------------------------

    @asynccontextmanager
    async def _connection(self, write: bool = False) -> AsyncIterator[Conn]:
        """A pooled connection; driver errors leave as StoreError (InvalidInput for bad data).

        ``write``: the block sends a write. If the connection then breaks, the server may have
        committed it (the COMMIT reached it, its answer did not reach us): OutcomeUnknown,
        never "nothing changed".
        """
        pool = self._pool
        if pool is None:
            raise StoreError("the PostgreSQL store is not open")
        try:
            async with pool.connection() as conn:
                yield conn
        except psycopg.Error as exc:
            raise self._translate(exc, write) from exc

    def _translate(self, exc: psycopg.Error, write: bool = False) -> StatewrightError:
        err: StatewrightError
        if isinstance(exc, psycopg.DataError):
            # e.g. a NUL character, which neither TEXT nor JSONB can hold
            return InvalidInput(f"PostgreSQL rejected a value: {exc}", sqlstate=exc.sqlstate)
        if isinstance(exc, PoolClosed):
            err = StoreError("the PostgreSQL store is closed")
        elif isinstance(exc, PoolTimeout):
            # No connection was had: nothing was sent.
            err = StoreError(f"PostgreSQL ({self.where}) is unavailable: {exc}")
        elif isinstance(exc, psycopg.OperationalError) and write and exc.sqlstate is None:
            # A client-side connection failure (the server reports its own errors with a
            # SQLSTATE, and those roll back): whether the server committed is unknowable here.
            self._check_pool()
            err = OutcomeUnknown(
                f"lost the connection to PostgreSQL ({self.where}) during a write; it may or "
                f"may not have been applied: {exc}"
            )
        elif isinstance(exc, psycopg.OperationalError):
            self._check_pool()
            err = StoreError(f"lost the connection to PostgreSQL ({self.where}): {exc}")
        else:
            err = StoreError(f"PostgreSQL failed: {exc}", sqlstate=exc.sqlstate)
        log.error(
            "persistence failure: %s",
            err.message,
            extra={"action": "persistence_failure", "sqlstate": exc.sqlstate},
        )
        return err

    def _check_pool(self) -> None:
        # One lost connection usually means the server restarted or the network broke: test
        # the idle ones now instead of failing one operation per stale connection later.
        pool = self._pool
        if pool is None or (self._pool_check is not None and not self._pool_check.done()):
            return
        self._pool_check = asyncio.create_task(pool.check(), name="statewright-pool-check")

    # -- running statements -------------------------------------------------------------------

    async def _all(
        self, sql: str, params: Mapping[str, Any], *, write: bool = False
    ) -> list[DictRow]:
        async with self._connection(write) as conn:
            return await (await conn.execute(sql, params)).fetchall()

    async def _one(
        self, sql: str, params: Mapping[str, Any], *, write: bool = False
    ) -> DictRow | None:
        async with self._connection(write) as conn:
            return await (await conn.execute(sql, params)).fetchone()

    async def _rowcount(self, sql: str, params: Mapping[str, Any]) -> int:
        async with self._connection(write=True) as conn:
            return (await conn.execute(sql, params)).rowcount

    async def _read_many(
        self, sql: str, params: Mapping[str, Any], convert: Callable[[DictRow], T]
    ) -> list[T]:
        """Rows fetched with their JSON as text, then converted (decoded) off the event loop
        when they are large (:mod:`.read`)."""
        async with self._connection() as conn:
            rows = await (await defer_json(conn.cursor()).execute(sql, params)).fetchall()
        return await decode_rows(rows, convert)

    async def _reads(self, plan: Plan[T], *, snapshot: bool = False) -> T:
        # One read transaction: on one snapshot, or else without parallel workers (the plans
        # read index ranges, each cheap: starting workers for a UNION of them, which the
        # planner likes on a big table, costs several times the reading itself).
        async with self._connection() as conn:
            try:
                async with conn.transaction():
                    if snapshot:
                        await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                    else:
                        await conn.execute("SET LOCAL max_parallel_workers_per_gather = 0")
                    return await run_plan_async(plan, _fetchall(conn))
            except BaseException:
                await rollback(conn)
                raise

    async def _write_plan(self, make: Callable[[], Plan[T]], *, rows: bool = False) -> T:
        async with self._connection(write=True) as conn:
            try:
                async with conn.transaction():
                    return await run_plan_async(make(), (_rows if rows else _rowcount)(conn))
            except BaseException:
                await rollback(conn)
                raise

    async def _or_else(
        self, sql: str, params: Mapping[str, Any], then: str, then_params: Mapping[str, Any]
    ) -> tuple[DictRow | None, DictRow | None]:
        async with self._connection(write=True) as conn:
            row = await (await conn.execute(sql, params)).fetchone()
            if row is not None:
                return row, None
            return None, await (await conn.execute(then, then_params)).fetchone()


def _fetchall(conn: Conn) -> Callable[[str, Mapping[str, Any]], Any]:
    async def run(sql: str, values: Mapping[str, Any]) -> list[DictRow]:
        return await (await conn.execute(sql, values)).fetchall()

    return run


def _rows(conn: Conn) -> Callable[[str, Mapping[str, Any]], Any]:
    async def run(sql: str, values: Mapping[str, Any]) -> list[DictRow]:
        cur = await conn.execute(sql, values)
        return [] if cur.description is None else await cur.fetchall()

    return run


def _rowcount(conn: Conn) -> Callable[[str, Mapping[str, Any]], Any]:
    async def run(sql: str, values: Mapping[str, Any]) -> int:
        return (await conn.execute(sql, values)).rowcount

    return run
