"""The PostgreSQL store: any number of processes on any number of hosts share one database.

psycopg 3 (async) over a connection pool in autocommit mode, so an operation that is one
statement is one round trip, its commit included. Each transition is such a statement: CTEs do
the compare-and-swap, the log append, the timer changes, the inbox consumption and the
wake-up together (``apply_transition`` in ``sql/postgres/queries.sql``). Workers claim with
``FOR UPDATE SKIP LOCKED`` and wake up on LISTEN/NOTIFY (:mod:`.postgres_listen`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool, PoolClosed, PoolTimeout

from statewright.errors import (
    InvalidInput,
    StatewrightError,
    StoreError,
    VersionConflict,
    WorkflowNotFound,
)
from statewright.store.postgres_listen import Listener
from statewright.store.postgres_rows import (
    dumps,
    inbox_item,
    step_record,
    timer_params,
    transition_params,
    transition_record,
    workflow_row,
)
from statewright.store.queries import load_queries, migrations
from statewright.types import (
    InboxItem,
    NewWorkflow,
    RejectionRecord,
    StepRecord,
    TimerRecord,
    TransitionRecord,
    TransitionWrite,
    WorkflowFilter,
    WorkflowRow,
)

log = logging.getLogger(__name__)

Q = load_queries("postgres")
Conn = AsyncConnection[DictRow]


def describe_dsn(dsn: str) -> str:
    """``dbname@host:port`` of a DSN, without credentials (for messages and logs)."""
    try:
        info = conninfo_to_dict(dsn)
    except psycopg.Error:
        return "?"
    host = info.get("host") or "localhost"
    port = f":{info['port']}" if info.get("port") else ""
    return f"{info.get('dbname') or info.get('user') or ''}@{host}{port}"


class PostgresStore:
    """The :class:`~statewright.store.protocol.Store` on PostgreSQL.

    Args:
        dsn: a libpq connection string or ``postgresql://`` URL.
        min_size: connections the pool keeps open.
        max_size: connections the pool opens at most (concurrent operations beyond it queue).
        timeout: seconds an operation waits for a connection before failing with
            :class:`~statewright.errors.StoreError` (fail closed while the server is down).
        reconnect_timeout: seconds the pool keeps retrying a lost connection in the background
            (with a doubling delay) before leaving it to the next operation to open one. Short,
            so the store recovers within seconds of the server's return instead of after a
            backoff as long as the outage.
        connect_kwargs: extra arguments for every connection (``psycopg.AsyncConnection``).
    """

    dialect = "postgres"

    def __init__(
        self,
        dsn: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        timeout: float = 10.0,
        reconnect_timeout: float = 5.0,
        connect_kwargs: dict[str, Any] | None = None,
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

    def __repr__(self) -> str:
        return f"PostgresStore({self.where!r})"

    # -- lifecycle ---------------------------------------------------------------------------

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
            await self._migrate(conn)
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
        await self.listener.close()
        if self._pool_check is not None:
            self._pool_check.cancel()
            with contextlib.suppress(asyncio.CancelledError, psycopg.Error):
                await self._pool_check
            self._pool_check = None
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    @staticmethod
    async def _migrate(conn: AsyncConnection[Any]) -> list[int]:
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

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[Conn]:
        """A pooled connection; driver errors leave as StoreError (InvalidInput for bad data)."""
        pool = self._pool
        if pool is None:
            raise StoreError("the PostgreSQL store is not open")
        try:
            async with pool.connection() as conn:
                yield conn
        except psycopg.Error as exc:
            raise self._translate(exc) from exc

    def _translate(self, exc: psycopg.Error) -> StatewrightError:
        err: StatewrightError
        if isinstance(exc, psycopg.DataError):
            # e.g. a NUL character, which neither TEXT nor JSONB can hold
            return InvalidInput(f"PostgreSQL rejected a value: {exc}", sqlstate=exc.sqlstate)
        if isinstance(exc, PoolClosed):
            err = StoreError("the PostgreSQL store is closed")
        elif isinstance(exc, PoolTimeout):
            err = StoreError(f"PostgreSQL ({self.where}) is unavailable: {exc}")
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

    async def wait_for_work(self, timeout: float) -> None:
        await self.listener.wait(timeout)

    # -- workflows and transitions -----------------------------------------------------------

    async def create_workflow(self, new: NewWorkflow) -> tuple[WorkflowRow, bool]:
        params = {
            "id": new.id,
            "type": new.type,
            "machine_version": new.machine_version,
            "state": new.state,
            "context": dumps(new.context),
            "terminal": bool(new.terminal),
            "at": float(new.at),
            "run_at": None if new.run_at is None else float(new.run_at),
            "actor": new.actor,
            "tenant": new.tenant,
            **timer_params(new.timers),
        }
        async with self._connection() as conn:
            row = await (await conn.execute(Q["create_workflow"], params)).fetchone()
            if row is None:
                # Another transaction created it after this statement's snapshot was taken.
                cur = await conn.execute(Q["get_workflow"], {"id": new.id})
                row = await cur.fetchone()
                if row is None:
                    raise StoreError(f"workflow {new.id!r} could be neither created nor read")
        result = workflow_row(row)
        created = bool(row.get("created"))
        if created and result.next_due_at is not None:
            self.listener.wake()
        return result, created

    async def get_workflow(self, workflow_id: str) -> WorkflowRow | None:
        async with self._connection() as conn:
            row = await (await conn.execute(Q["get_workflow"], {"id": workflow_id})).fetchone()
        return None if row is None else workflow_row(row)

    async def apply_transition(self, write: TransitionWrite) -> WorkflowRow:
        params = transition_params(write)
        async with self._connection() as conn:
            row = await (await conn.execute(Q["apply_transition"], params)).fetchone()
            if row is None:
                raise await self._refusal(conn, write)
        after = workflow_row(row)
        if after.next_due_at is not None:
            self.listener.wake()
        return after

    async def apply_event(
        self, workflow_id: str, plan: Callable[[WorkflowRow], TransitionWrite]
    ) -> tuple[WorkflowRow, WorkflowRow]:
        # Two round trips: BEGIN + lock the row, then (after planning) the transition
        # statement + COMMIT, each pair pipelined. The lock makes concurrent events on one
        # workflow queue up instead of conflicting.
        async with self._connection() as conn:
            try:
                async with conn.pipeline():
                    await conn.execute("BEGIN")
                    cur = await conn.execute(Q["lock_workflow"], {"id": workflow_id})
                    found = await cur.fetchone()
                    if found is None:
                        raise WorkflowNotFound(workflow_id)
                    before = workflow_row(found)
                    write = plan(before)
                    applied = await conn.execute(Q["apply_transition"], transition_params(write))
                    await conn.execute("COMMIT")
                row = await applied.fetchone()
            except BaseException:
                await _rollback(conn)
                raise
            if row is None:
                if write.workflow_id != before.id:
                    raise await self._refusal(conn, write)
                raise self._refused(write, before.version)
        after = workflow_row(row)
        if after.next_due_at is not None:
            self.listener.wake()
        return before, after

    async def _refusal(self, conn: Conn, write: TransitionWrite) -> StatewrightError:
        """Why the compare-and-swap matched no row (one more round trip, on failure only)."""
        found = await (await conn.execute(Q["version_of"], {"id": write.workflow_id})).fetchone()
        if found is None:
            return WorkflowNotFound(write.workflow_id)
        return self._refused(write, found["version"])

    @staticmethod
    def _refused(write: TransitionWrite, version: int) -> StatewrightError:
        if version != write.expected_version:
            return VersionConflict(write.workflow_id, write.expected_version, version)
        return StoreError(f"inbox item {write.consume_inbox_id} was already consumed")

    async def history(
        self, workflow_id: str, after_version: int = 0, limit: int | None = None
    ) -> list[TransitionRecord]:
        params = {"id": workflow_id, "after": after_version, "limit": limit}
        return [transition_record(r) for r in await self._fetchall(Q["history"], params)]

    async def transitions_since(
        self, seq: int, limit: int = 500, tenant: str | None = None
    ) -> list[TransitionRecord]:
        # seq is taken before commit, so seq order is not commit order: with two writers, 8
        # can commit while 7 is still in flight, and a reader that took 8 and moved its cursor
        # past 7 would never see 7. So read only up to a horizon below which every seq is
        # final: taken under the log lock, which waits for the appends in flight (they hold it
        # shared) and is released at once. One round trip: everything is pipelined.
        async with self._connection() as conn:
            try:
                async with conn.pipeline():
                    await conn.execute("BEGIN")
                    await conn.execute(Q["log_lock"])
                    await conn.execute(Q["log_horizon"])
                    await conn.execute("COMMIT")
                    cur = await conn.execute(
                        Q["transitions_since"], {"seq": seq, "limit": limit, "tenant": tenant}
                    )
                rows = await cur.fetchall()
            except BaseException:
                await _rollback(conn)
                raise
        return [transition_record(r) for r in rows]

    async def list_workflows(self, where: WorkflowFilter) -> list[WorkflowRow]:
        params = {
            "type": where.type,
            "state": where.state,
            "terminal": where.terminal,
            "before": None if where.entered_before is None else float(where.entered_before),
            "after": None if where.entered_after is None else float(where.entered_after),
            "min_attempts": where.min_attempts,
            "limit": where.limit,
            "offset": where.offset,
            "tenant": where.tenant,
        }
        return [workflow_row(r) for r in await self._fetchall(Q["list_workflows"], params)]

    async def count_by_state(
        self,
        terminal: bool | None = None,
        tenant: str | None = None,
        *,
        entered_after: float | None = None,
        entered_before: float | None = None,
    ) -> list[tuple[str, str, int]]:
        params = {
            "terminal": terminal,
            "tenant": tenant,
            "after": None if entered_after is None else float(entered_after),
            "before": None if entered_before is None else float(entered_before),
        }
        rows = await self._fetchall(Q["count_by_state"], params)
        return [(r["type"], r["state"], r["n"]) for r in rows]

    async def live_event_counts(
        self, since: float, events: Sequence[str], tenant: str | None = None
    ) -> list[tuple[str, str, str, int]]:
        params = {"since": float(since), "events": list(events), "tenant": tenant}
        rows = await self._fetchall(Q["live_event_counts"], params)
        return [(r["workflow_id"], r["type"], r["event"], r["n"]) for r in rows]

    # -- rejections log ----------------------------------------------------------------------

    async def record_rejection(
        self,
        *,
        workflow_id: str,
        type: str,
        tenant: str,
        state: str,
        event: str,
        code: str,
        actor: str,
        message: str,
        at: float,
    ) -> None:
        params = {
            "workflow_id": workflow_id,
            "type": type,
            "tenant": tenant,
            "state": state,
            "event": event,
            "code": code,
            "actor": actor,
            "message": message,
            "at": float(at),
        }
        await self._rowcount(Q["record_rejection"], params)

    async def count_rejections(
        self, since: float, tenant: str | None = None
    ) -> list[tuple[str, str, int]]:
        rows = await self._fetchall(
            Q["count_rejections"], {"since": float(since), "tenant": tenant}
        )
        return [(r["type"], r["code"], r["n"]) for r in rows]

    async def rejections(
        self, since: float, tenant: str | None = None, limit: int = 100
    ) -> list[RejectionRecord]:
        params = {"since": float(since), "tenant": tenant, "limit": limit}
        return [RejectionRecord(**r) for r in await self._fetchall(Q["rejections"], params)]

    async def _fetchall(self, query: str, params: dict[str, Any]) -> list[DictRow]:
        async with self._connection() as conn:
            return await (await conn.execute(query, params)).fetchall()

    async def _fetchone(self, query: str, params: dict[str, Any]) -> DictRow | None:
        async with self._connection() as conn:
            return await (await conn.execute(query, params)).fetchone()

    async def _rowcount(self, query: str, params: dict[str, Any]) -> int:
        async with self._connection() as conn:
            return (await conn.execute(query, params)).rowcount

    # -- workers -----------------------------------------------------------------------------

    async def claim_due(
        self,
        worker_id: str,
        now: float,
        lease_seconds: float,
        limit: int,
        types: Sequence[str] | None = None,
    ) -> list[WorkflowRow]:
        params: dict[str, Any] = {
            "worker": worker_id,
            "until": float(now + lease_seconds),
            "now": float(now),
            "limit": limit,
        }
        query = Q["claim_due"]
        if types is not None:
            query, params["types"] = Q["claim_due_of_types"], list(types)
        rows = await self._fetchall(query, params)
        return sorted((workflow_row(r) for r in rows), key=lambda w: (w.next_due_at or 0, w.id))

    async def renew_leases(self, worker_id: str, ids: Sequence[str], until: float) -> int:
        params = {"worker": worker_id, "ids": list(ids), "until": float(until)}
        return await self._rowcount(Q["renew_leases"], params)

    async def release_lease(self, workflow_id: str, worker_id: str) -> None:
        await self._rowcount(Q["release_lease"], {"id": workflow_id, "worker": worker_id})

    async def defer(
        self,
        workflow_id: str,
        expected_version: int,
        *,
        attempts: int,
        next_due_at: float | None,
        last_error: str | None,
        at: float,
    ) -> WorkflowRow:
        params = {
            "id": workflow_id,
            "expected_version": expected_version,
            "attempts": attempts,
            "next_due_at": None if next_due_at is None else float(next_due_at),
            "last_error": last_error,
            "at": float(at),
        }
        async with self._connection() as conn:
            row = await (await conn.execute(Q["defer_workflow"], params)).fetchone()
            if row is None:
                found = await (await conn.execute(Q["version_of"], {"id": workflow_id})).fetchone()
                if found is None:
                    raise WorkflowNotFound(workflow_id)
                raise VersionConflict(workflow_id, expected_version, found["version"])
        return workflow_row(row)

    async def expired_leases(self, now: float, limit: int = 100) -> list[WorkflowRow]:
        rows = await self._fetchall(Q["expired_leases"], {"now": float(now), "limit": limit})
        return [workflow_row(r) for r in rows]

    async def leased_by(self, owner: str) -> list[WorkflowRow]:
        return [workflow_row(r) for r in await self._fetchall(Q["leased_by"], {"owner": owner})]

    async def lease_owners(self) -> list[str]:
        return [r["lease_owner"] for r in await self._fetchall(Q["lease_owners"], {})]

    async def break_leases(self, owner: str, ids: Sequence[str] | None = None) -> int:
        if ids is None:
            row = await self._fetchone(Q["break_leases"], {"owner": owner})
        else:
            row = await self._fetchone(Q["break_leases_of"], {"owner": owner, "ids": list(ids)})
        n = 0 if row is None else int(row["n"])
        if n:
            self.listener.wake()
        return n

    # -- cancel and progress -----------------------------------------------------------------

    async def request_cancel(self, workflow_id: str, reason: str, at: float) -> WorkflowRow:
        params = {"id": workflow_id, "reason": reason, "at": float(at)}
        row = await self._fetchone(Q["request_cancel"], params)
        if row is None:
            raise WorkflowNotFound(workflow_id)
        self.listener.wake()
        return workflow_row(row)

    async def cancel_requests(self, ids: Sequence[str]) -> dict[str, str]:
        rows = await self._fetchall(Q["cancel_requests"], {"ids": list(ids)})
        return {r["id"]: r["cancel_requested"] for r in rows}

    async def record_progress(self, workflow_id: str, progress: dict[str, Any], at: float) -> None:
        params = {"id": workflow_id, "progress": dumps(progress)}
        if await self._rowcount(Q["record_progress"], params) != 1:
            raise WorkflowNotFound(workflow_id)

    # -- timers ------------------------------------------------------------------------------

    async def timers(self, workflow_id: str) -> list[TimerRecord]:
        rows = await self._fetchall(Q["timers"], {"id": workflow_id})
        return [
            TimerRecord(r["id"], r["workflow_id"], r["due_at"], r["event"], r["payload"])
            for r in rows
        ]

    # -- step ledger -------------------------------------------------------------------------

    async def step_begin(self, key: str, workflow_id: str, step: str, at: float) -> StepRecord:
        params = {"key": key, "workflow_id": workflow_id, "step": step, "at": float(at)}
        async with self._connection() as conn:
            row = await (await conn.execute(Q["step_begin"], params)).fetchone()
            if row is None:  # done already: returned unchanged
                row = await (await conn.execute(Q["get_step"], {"key": key})).fetchone()
                if row is None:
                    raise StoreError(f"step {key!r} vanished from the ledger")
        return step_record(row)

    async def step_finish(
        self, key: str, status: str, result: Any, error: str | None, at: float
    ) -> StepRecord:
        params = {
            "key": key,
            "status": status,
            "result": None if result is None else dumps(result),
            "error": error,
            "at": float(at),
        }
        row = await self._fetchone(Q["finish_step"], params)
        if row is None:
            raise StoreError(f"no step {key!r} in the ledger")
        return step_record(row)

    async def get_step(self, key: str) -> StepRecord | None:
        row = await self._fetchone(Q["get_step"], {"key": key})
        return None if row is None else step_record(row)

    async def steps(self, workflow_id: str) -> list[StepRecord]:
        return [step_record(r) for r in await self._fetchall(Q["steps"], {"id": workflow_id})]

    # -- inbox -------------------------------------------------------------------------------

    async def post_input(
        self, workflow_id: str, name: str, payload: dict[str, Any], at: float
    ) -> InboxItem:
        params = {"id": workflow_id, "name": name, "payload": dumps(payload), "at": float(at)}
        row = await self._fetchone(Q["post_input"], params)
        if row is None:
            raise WorkflowNotFound(workflow_id)
        self.listener.wake()
        return inbox_item(row)

    async def next_input(self, workflow_id: str, name: str | None = None) -> InboxItem | None:
        row = await self._fetchone(Q["next_input"], {"id": workflow_id, "name": name})
        return None if row is None else inbox_item(row)

    async def consume_input(self, item_id: int, at: float) -> bool:
        params = {"item_id": item_id, "at": float(at)}
        return await self._rowcount(Q["consume_input"], params) == 1


async def _rollback(conn: Conn) -> None:
    """End a transaction an exception interrupted (the pool discards a broken connection)."""
    if conn.info.transaction_status in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
        with contextlib.suppress(psycopg.Error):
            await conn.execute("ROLLBACK")
