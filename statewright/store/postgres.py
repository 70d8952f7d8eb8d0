"""The PostgreSQL store: any number of processes on any number of hosts share one database.

psycopg 3 (async) over a connection pool in autocommit mode, so an operation that is one
statement is one round trip, its commit included. Each transition is such a statement: CTEs do
the compare-and-swap, the log append, the timer changes, the inbox consumption and the
wake-up together (``apply_transition`` in ``sql/postgres/queries.sql``). Concurrent transitions
of one store share a round trip and a commit (group commit, :mod:`.postgres_batch`). Workers
claim with ``FOR UPDATE SKIP LOCKED`` and wake up on LISTEN/NOTIFY (:mod:`.postgres_listen`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
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
from statewright.errors import (
    IdempotencyKeyReused,
    InvalidInput,
    LeaseLost,
    OutcomeUnknown,
    StatewrightError,
    StepDone,
    StepNotFound,
    StoreError,
    VersionConflict,
    WorkflowBusy,
    WorkflowFinished,
    WorkflowNotFound,
    WorkflowPruned,
)
from statewright.store import retention_sql, sqlbuild, timerdue
from statewright.store.alert_outbox import (
    AlertChange,
    AlertStateRecord,
    OutboxRecord,
    enqueue_params,
    finish_query,
    outbox_record,
    state_write,
)
from statewright.store.postgres_batch import GroupCommit
from statewright.store.postgres_listen import Listener
from statewright.store.postgres_read import Probe, decode_rows, defer_json
from statewright.store.postgres_rows import (
    cancel_request,
    dumps,
    inbox_item,
    lease_params,
    step_record,
    timer_change_params,
    timer_params,
    timer_record,
    transition_record,
    workflow_row,
)
from statewright.store.protocol import fork_source_busy
from statewright.store.queries import load_queries, migrations
from statewright.store.schedules import PostgresSchedules
from statewright.types import (
    CancelRequest,
    DeferWrite,
    InboxItem,
    Lease,
    NewWorkflow,
    RejectionRecord,
    StepFinish,
    StepOpening,
    StepOutcome,
    StepRecord,
    StuckCutoff,
    StuckKey,
    TimerRecord,
    TimerSpec,
    TransitionRecord,
    TransitionWrite,
    TypeLimit,
    WorkflowFilter,
    WorkflowRow,
)

log = logging.getLogger(__name__)

Q = load_queries("postgres")
T = TypeVar("T")


_SNAPSHOT_ROUNDS = 4
"""Runs of a timer-changing write whose snapshot missed a concurrent update of its row."""
Conn = AsyncConnection[DictRow]
PRUNED_ID = "SWPRU"
"""The SQLSTATE of a start of a pruned workflow's id (migration 0016_pruned_ids)."""


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


def _step_params(
    key: str, workflow_id: str, step: str, at: float, lease: Lease | None
) -> dict[str, Any]:
    """The parameters of step_begin and step_open."""
    return {"key": key, "workflow_id": workflow_id, "step": step, "at": float(at)} | lease_params(
        lease
    )


class PostgresStore(PostgresSchedules):
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
        group_commit: concurrent transitions share one round trip and one commit
            (:mod:`.postgres_batch`; counters on ``batcher``). False sends each alone.
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
        """Group commit of ``apply_transition`` (see :mod:`.postgres_batch`)."""
        self.probe = Probe(dsn, self.connect_kwargs, self.where)
        """Readiness probes' own connection, outside the pool (:meth:`ping`)."""

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

    async def wait_for_work(self, timeout: float) -> None:
        await self.listener.wait(timeout)

    async def ping(self) -> None:
        """Answer once the server answers a trivial query on the probe's own connection:
        never waiting for a pooled connection that reads hold (:mod:`.postgres_read`)."""
        if self._pool is None:
            raise StoreError("the PostgreSQL store is not open")
        await self.probe.ping()

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
            "event": new.event,
            "payload": None if new.payload is None else dumps(new.payload),
            "step_key": [s.key for s in new.steps],
            "step_name": [s.step for s in new.steps],
            "step_result": [None if s.result is None else dumps(s.result) for s in new.steps],
            "step_attempts": [s.attempts for s in new.steps],
            "step_started": [float(s.started_at) for s in new.steps],
            "step_finished": [
                None if s.finished_at is None else float(s.finished_at) for s in new.steps
            ],
            "tenant": new.tenant,
            "idempotency_key": new.idempotency_key,
            "trace": new.trace,
            **timer_params(new.timers),
        }
        async with self._connection(write=True) as conn:
            try:
                if new.fork_of is None:
                    row = await (await conn.execute(Q["create_workflow"], params)).fetchone()
                else:
                    async with conn.transaction():
                        row = await self._create_fork(conn, new.fork_of, params)
            except psycopg.Error as exc:
                if exc.sqlstate == PRUNED_ID:  # its trigger (migration 0016_pruned_ids)
                    raise WorkflowPruned(new.id) from None
                raise
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

    @staticmethod
    async def _create_fork(
        conn: Conn, fork_of: tuple[str, int], params: dict[str, Any]
    ) -> DictRow | None:
        """The fork's create, after checking (and locking until the commit) that its source
        is still unleased at the fence it was read at (see :attr:`NewWorkflow.fork_of`)."""
        exists = await (await conn.execute(Q["version_of"], {"id": params["id"]})).fetchone()
        if exists is None:
            source, fence = fork_of
            cur = await conn.execute(Q["fork_source"], {"id": source})
            found = await cur.fetchone()
            if found is None:
                raise WorkflowNotFound(source)
            if found["lease_owner"] is not None or found["fence"] != fence:
                raise WorkflowBusy(fork_source_busy(source))
        return await (await conn.execute(Q["create_workflow"], params)).fetchone()

    async def get_workflow(self, workflow_id: str) -> WorkflowRow | None:
        async with self._connection() as conn:
            row = await (await conn.execute(Q["get_workflow"], {"id": workflow_id})).fetchone()
        return None if row is None else workflow_row(row)

    async def apply_transition(self, write: TransitionWrite) -> WorkflowRow:
        # Alone, one statement; concurrent ones share a transaction (see postgres_batch).
        return await self.batcher.apply(write)

    async def _apply_alone(self, write: TransitionWrite, params: dict[str, Any]) -> WorkflowRow:
        """One transition as one autocommit statement (``params``: its transition_params)."""
        async with self._connection(write=True) as conn:
            for _ in range(_SNAPSHOT_ROUNDS):
                try:
                    row = await (await conn.execute(Q["apply_transition"], params)).fetchone()
                except psycopg.errors.UniqueViolation as exc:
                    diag = exc.diag.constraint_name or ""
                    if write.idempotency_key is not None and "idempotency" in diag:
                        raise IdempotencyKeyReused(
                            write.workflow_id, write.idempotency_key, "an earlier transition"
                        ) from exc
                    raise
                if row is not None or not params["timers_exact"]:
                    break
                # Refused by the row-version check alone (a concurrent update of the row,
                # e.g. a timer scheduled on its own, since this statement's snapshot)? Then
                # run it again on a fresh snapshot; any other refusal is reported.
                if await self._refusal(conn, write, retryable=True) is not None:
                    break
            return await self._written(conn, row, write)

    async def _written(
        self, conn: Conn, row: DictRow | None, write: TransitionWrite | DeferWrite
    ) -> WorkflowRow:
        """The row a compare-and-swap returned, or why it matched nothing; wakes the workers
        of this process when the workflow is due."""
        if row is None:
            refusal = await self._refusal(conn, write)
            assert refusal is not None
            raise refusal
        after = workflow_row(row)
        if after.next_due_at is not None:
            self.listener.wake()
        return after

    async def transition_by_key(
        self, workflow_id: str, idempotency_key: str
    ) -> TransitionRecord | None:
        rows = await self._fetchall(
            Q["transition_by_key"], {"id": workflow_id, "key": idempotency_key}
        )
        for row in rows:
            if row["seq"] is not None:
                return transition_record(row)
        for row in rows:  # the key posted an input instead: it names that request
            raise IdempotencyKeyReused(
                workflow_id, idempotency_key, f"input {row['input_name']!r} #{row['input_id']}"
            )
        return None

    @staticmethod
    async def _refusal(
        conn: Conn, write: TransitionWrite | DeferWrite, *, retryable: bool = False
    ) -> StatewrightError | None:
        """Why a compare-and-swap matched no row (one more round trip, on failure only); a
        lost lease first: the worker must stop. With ``retryable``, None when nothing but
        the statement's snapshot refused it (worth running again)."""
        workflow_id, expected_version = write.workflow_id, write.expected_version
        lease, inbox_ids = write.lease, write.consume_inbox_ids
        params = {
            "id": workflow_id,
            "inbox_ids": list(inbox_ids),
            "fired_timer_id": write.fired_timer_id,
        }
        found = await (await conn.execute(Q["write_refusal"], params)).fetchone()
        if found is None:
            return WorkflowNotFound(workflow_id)
        if lease is not None and (found["lease_owner"], found["fence"]) != (
            lease.owner,
            lease.fence,
        ):
            return LeaseLost(workflow_id)
        if found["version"] != expected_version:
            return VersionConflict(workflow_id, expected_version, found["version"])
        if found["unconsumed"] != len(set(inbox_ids)):
            return StoreError(f"inbox items {list(inbox_ids)} of {workflow_id!r} were consumed")
        if not found["fired_pending"]:
            # The timer it fires was replaced or cancelled meanwhile: read the timers again.
            return VersionConflict(workflow_id, expected_version, found["version"])
        if retryable:
            return None
        # Nothing we can see refused it: a concurrent writer moved and restored it? Report a
        # conflict so the caller re-reads.
        return VersionConflict(workflow_id, expected_version, found["version"])

    async def history(
        self, workflow_id: str, after_version: int = 0, limit: int | None = None
    ) -> list[TransitionRecord]:
        params = {"id": workflow_id, "after": after_version, "limit": limit}
        return await self._read_many(Q["history"], params, transition_record)

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
                    since = sqlbuild.transitions_since(seq, limit, tenant, "postgres")
                    cur = await defer_json(conn.cursor()).execute(*since)
                rows = await cur.fetchall()
            except BaseException:
                await _rollback(conn)
                raise
        return await decode_rows(rows, transition_record)

    async def list_workflows(self, where: WorkflowFilter) -> list[WorkflowRow]:
        sql, params = sqlbuild.list_workflows(where, "postgres")
        return await self._read_many(sql, params, workflow_row)

    async def count_stuck(
        self, cutoffs: Sequence[StuckCutoff], tenant: str | None = None, *, parked: bool = False
    ) -> list[tuple[str, str, int, float]]:
        groups = sqlbuild.stuck_groups(cutoffs)
        out = []
        async with self._serial() as conn:
            for sql, params, chunk in sqlbuild.count_stuck(groups, "postgres", tenant, parked):
                rows = await (await conn.execute(sql, params)).fetchall()
                out += sqlbuild.add_counts(((r["g"], r["n"], r["oldest"]) for r in rows), chunk)
        return out

    @asynccontextmanager
    async def _serial(self) -> AsyncIterator[Conn]:
        """A connection in a read transaction without parallel workers, for the counts over
        index ranges: each range is cheap, and starting workers for a UNION of them (which
        the planner likes on a big table) costs several times the counting itself."""
        async with self._connection() as conn:
            try:
                async with conn.transaction():
                    await conn.execute("SET LOCAL max_parallel_workers_per_gather = 0")
                    yield conn
            except BaseException:
                await _rollback(conn)
                raise

    async def stuck_workflows(
        self,
        cutoffs: Sequence[StuckCutoff],
        *,
        after: StuckKey | None = None,
        limit: int = 100,
        tenant: str | None = None,
        parked: bool = False,
    ) -> list[WorkflowRow]:
        found: list[DictRow] = []
        async with self._connection() as conn:
            for g in sqlbuild.stuck_groups(cutoffs):
                if len(found) >= limit:
                    break
                want = limit - len(found)
                pages = [sqlbuild.stuck_page(g, "postgres", tenant, after, want)]
                if parked:
                    pages.append(sqlbuild.stuck_parked_page(g, "postgres", tenant, after, want))
                rows: list[DictRow] = []
                for page in pages:
                    if page is not None:
                        rows += await (await defer_json(conn.cursor()).execute(*page)).fetchall()
                rows.sort(key=lambda r: (r["state_entered_at"], r["id"]))
                found += rows[:want]
        return await decode_rows(found, workflow_row)

    async def count_parked(
        self, tenant: str | None = None
    ) -> list[tuple[str, str, str, int, float]]:
        sql, params = sqlbuild.count_parked("postgres", tenant)
        return [
            (r["type"], r["state"], r["parked"], r["n"], r["oldest"])
            for r in await self._fetchall(sql, params)
        ]

    async def unresolved_steps(self, workflow_ids: Sequence[str]) -> list[StepRecord]:
        if not workflow_ids:
            return []
        rows = await self._fetchall(Q["unresolved_steps"], {"ids": list(workflow_ids)})
        found = [step_record(r) for r in rows]
        return sorted(found, key=lambda s: (s.workflow_id, s.started_at, s.key))

    async def count_by_state(
        self,
        terminal: bool | None = None,
        tenant: str | None = None,
        *,
        entered_after: float | None = None,
        entered_before: float | None = None,
    ) -> list[tuple[str, str, int]]:
        # The kept counts (workflow_counts); with a time range or a tenant, one range of an
        # index per (type, state) they name.
        async with self._serial() as conn:
            cur = await conn.execute(Q["workflow_counts"])
            kept = [(r["type"], r["state"], r["terminal"], r["n"]) for r in await cur.fetchall()]
            if tenant is None and entered_after is None and entered_before is None:
                return sqlbuild.kept_counts(kept, terminal)
            out = []
            groups = sqlbuild.count_groups(kept, terminal)
            for sql, params, chunk in sqlbuild.count_in_groups(
                groups, "postgres", tenant, entered_after, entered_before
            ):
                for r in await (await conn.execute(sql, params)).fetchall():
                    if r["n"]:
                        out.append((chunk[r["g"]].type, chunk[r["g"]].state, r["n"]))
        return out

    async def live_event_counts(
        self, since: float, events: Sequence[str], tenant: str | None = None
    ) -> list[tuple[str, str, str, int]]:
        built = sqlbuild.live_event_counts(since, events, tenant, "postgres")
        if built is None:
            return []
        rows = await self._fetchall(*built)
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
        rows = await self._fetchall(*sqlbuild.count_rejections(since, tenant, "postgres"))
        return [(r["type"], r["code"], r["n"]) for r in rows]

    async def rejections(
        self, since: float, tenant: str | None = None, limit: int = 100
    ) -> list[RejectionRecord]:
        built = sqlbuild.rejections(since, tenant, limit, "postgres")
        return [RejectionRecord(**r) for r in await self._fetchall(*built)]

    async def _fetchall(self, query: str, params: dict[str, Any]) -> list[DictRow]:
        async with self._connection() as conn:
            return await (await conn.execute(query, params)).fetchall()

    async def _read_many(
        self, query: str, params: dict[str, Any], convert: Callable[[DictRow], T]
    ) -> list[T]:
        """Rows fetched with their JSON as text, then converted (decoded) off the event loop
        when they are large (:mod:`.postgres_read`)."""
        async with self._connection() as conn:
            rows = await (await defer_json(conn.cursor()).execute(query, params)).fetchall()
        return await decode_rows(rows, convert)

    async def _fetchone(
        self, query: str, params: dict[str, Any], *, write: bool = False
    ) -> DictRow | None:
        async with self._connection(write) as conn:
            return await (await conn.execute(query, params)).fetchone()

    async def _rowcount(self, query: str, params: dict[str, Any]) -> int:
        async with self._connection(write=True) as conn:
            return (await conn.execute(query, params)).rowcount

    # -- workers -----------------------------------------------------------------------------

    async def claim_due(
        self,
        worker_id: str,
        now: float,
        lease_seconds: float,
        limit: int,
        types: Sequence[str] | None = None,
        limits: Mapping[str, TypeLimit] | None = None,
    ) -> list[WorkflowRow]:
        if limits:  # limited types: one serialized claim each (statewright.store.schedules)
            return await self._claim_limited(worker_id, now, lease_seconds, limit, types, limits)
        params: dict[str, Any] = {
            "worker": worker_id,
            "until": float(now + lease_seconds),
            "now": float(now),
            "limit": limit,
        }
        query = Q["claim_due"]
        if types is not None:
            query, params["types"] = Q["claim_due_of_types"], list(types)
        async with self._connection(write=True) as conn:
            rows = await (await conn.execute(query, params)).fetchall()
        return sorted((workflow_row(r) for r in rows), key=lambda w: (w.next_due_at or 0, w.id))

    async def renew_leases(
        self, worker_id: str, held: Mapping[str, int], until: float
    ) -> list[str]:
        params = {
            "worker": worker_id,
            "ids": list(held),
            "fences": list(held.values()),
            "until": float(until),
        }
        async with self._connection(write=True) as conn:
            rows = await (await conn.execute(Q["renew_leases"], params)).fetchall()
        return [r["id"] for r in rows]

    async def release_lease(self, workflow_id: str, lease: Lease) -> None:
        params = {"id": workflow_id, "worker": lease.owner, "fence": lease.fence}
        async with self._connection(write=True) as conn:
            await conn.execute(Q["release_lease"], params)

    async def defer(self, write: DeferWrite) -> WorkflowRow:
        params = {
            "id": write.workflow_id,
            "expected_version": write.expected_version,
            "attempts": write.attempts,
            "total_attempts": write.total_attempts,
            "next_due_at": None if write.next_due_at is None else float(write.next_due_at),
            "last_error": write.last_error,
            "parked": write.parked,
            "at": float(write.at),
            "inbox_ids": list(write.consume_inbox_ids),
            **lease_params(write.lease),
            **timer_change_params(write, False),
        }
        async with self._connection(write=True) as conn:
            for _ in range(_SNAPSHOT_ROUNDS):
                row = await (await conn.execute(Q["defer_workflow"], params)).fetchone()
                if row is not None or not params["timers_exact"]:
                    break
                if await self._refusal(conn, write, retryable=True) is not None:
                    break
            return await self._written(conn, row, write)

    async def take_over(
        self,
        workflow_id: str,
        owner: str,
        worker_id: str,
        until: float,
        *,
        expired_before: float | None = None,
    ) -> WorkflowRow | None:
        params = {
            "id": workflow_id,
            "owner": owner,
            "worker": worker_id,
            "until": float(until),
            "expired_before": None if expired_before is None else float(expired_before),
        }
        row = await self._fetchone(Q["take_over"], params, write=True)
        return None if row is None else workflow_row(row)

    async def expired_leases(self, now: float, limit: int = 100) -> list[WorkflowRow]:
        rows = await self._fetchall(Q["expired_leases"], {"now": float(now), "limit": limit})
        return [workflow_row(r) for r in rows]

    async def leased_by(self, owner: str) -> list[WorkflowRow]:
        return [workflow_row(r) for r in await self._fetchall(Q["leased_by"], {"owner": owner})]

    async def lease_owners(self) -> list[str]:
        return [r["lease_owner"] for r in await self._fetchall(Q["lease_owners"], {})]

    async def break_leases(
        self,
        owner: str,
        ids: Sequence[str] | None = None,
        *,
        expired_before: float | None = None,
    ) -> int:
        params: dict[str, Any] = {
            "owner": owner,
            "expired_before": None if expired_before is None else float(expired_before),
        }
        if ids is None:
            row = await self._fetchone(Q["break_leases"], params, write=True)
        else:
            params["ids"] = list(ids)
            row = await self._fetchone(Q["break_leases_of"], params, write=True)
        n = 0 if row is None else int(row["n"])
        if n:
            self.listener.wake()
        return n

    # -- cancel and progress -----------------------------------------------------------------

    async def request_cancel(self, workflow_id: str, request: CancelRequest) -> WorkflowRow:
        params = {
            "id": workflow_id,
            "reason": request.reason,
            "actor": request.actor,
            "at": None if request.at is None else float(request.at),
            "version": request.version,
            "key": request.idempotency_key,
        }
        row = await self._fetchone(Q["request_cancel"], params, write=True)
        if row is None:
            raise WorkflowNotFound(workflow_id)
        self.listener.wake()
        return workflow_row(row)

    async def cancel_requests(self, ids: Sequence[str]) -> dict[str, CancelRequest]:
        rows = await self._fetchall(Q["cancel_requests"], {"ids": list(ids)})
        return {r["id"]: request for r in rows if (request := cancel_request(r)) is not None}

    async def record_progress(
        self, workflow_id: str, progress: dict[str, Any], at: float, lease: Lease | None = None
    ) -> None:
        params = {"id": workflow_id, "progress": dumps(progress), **lease_params(lease)}
        row = await self._fetchone(Q["record_progress"], params, write=True)
        if row is None or not row["found"]:
            raise WorkflowNotFound(workflow_id)
        if not row["held"]:
            raise LeaseLost(workflow_id)

    # -- alert delivery ----------------------------------------------------------------------

    async def alert_states(self) -> list[AlertStateRecord]:
        rows = await self._fetchall(Q["alert_states"], {})
        return [
            AlertStateRecord(
                fingerprint=r["fingerprint"],
                rule=r["rule"],
                labels=r["labels"],
                annotations=r["annotations"],
                starts_at=r["starts_at"],
            )
            for r in rows
        ]

    async def record_alert_changes(
        self, changes: Sequence[AlertChange], receivers: Sequence[str], at: float
    ) -> list[AlertChange]:
        took = []
        async with self._connection(write=True) as conn:
            try:
                async with conn.transaction():
                    for ch in changes:
                        name, params = state_write(ch, dumps)
                        if (await conn.execute(Q[name], params)).rowcount != 1:
                            continue
                        took.append(ch)
                        for receiver in receivers:
                            enqueue = enqueue_params(ch, receiver, at, dumps)
                            await conn.execute(Q["alert_enqueue"], enqueue)
            except BaseException:
                await _rollback(conn)
                raise
        return took

    async def claim_alert_notifications(
        self, claim: str, now: float, until: float, limit: int
    ) -> list[OutboxRecord]:
        params = {"claim": claim, "now": now, "until": until, "limit": limit}
        async with self._connection(write=True) as conn:
            rows = await (await conn.execute(Q["alert_claim"], params)).fetchall()
        return sorted((outbox_record(r, r["alert"]) for r in rows), key=lambda r: r.id)

    async def finish_alert_notification(
        self,
        outbox_id: int,
        claim: str,
        *,
        at: float,
        delivered: bool,
        retry_at: float | None = None,
        error: str | None = None,
    ) -> bool:
        name = finish_query(delivered, retry_at)
        params = {"nid": outbox_id, "claim": claim, "at": at, "due_at": retry_at, "message": error}
        return bool(await self._rowcount(Q[name], params))

    async def alert_notifications(self, after: int = 0, limit: int = 1000) -> list[OutboxRecord]:
        rows = await self._fetchall(Q["alert_outbox"], {"after": after, "limit": limit})
        return [outbox_record(r, r["alert"]) for r in rows]

    # -- timers ------------------------------------------------------------------------------

    async def live_versions_between(
        self, workflow_type: str, lo: int, hi: int
    ) -> list[tuple[int, int]]:
        params = {"type": workflow_type, "lo": lo, "hi": hi}
        rows = await self._fetchall(Q["live_versions_between"], params)
        return [(r["machine_version"], r["n"]) for r in rows]

    async def record_definition(
        self,
        name: str,
        version: int,
        fingerprint: str,
        document: Mapping[str, Any],
        at: float,
        *,
        replace: bool = False,
    ) -> tuple[str, Any]:
        params = {
            "name": name,
            "version": version,
            "fingerprint": fingerprint,
            "document": dumps(document),
            "at": at,
        }
        if replace:
            await self._rowcount(Q["replace_definition"], params)
            return fingerprint, dict(document)
        for _ in range(3):
            row = await self._fetchone(Q["add_definition"], params, write=True)
            if row is not None:
                return row["fingerprint"], row["document"]
            # Another opener inserted it concurrently: our INSERT waited for its commit and
            # did nothing, and this statement's snapshot predates that row. A new statement
            # (a new snapshot) sees it.
        raise StoreError(f"could not record the definition of {name!r} version {version}")

    async def timers(
        self,
        workflow_id: str,
        *,
        after: tuple[float, int] | None = None,
        limit: int | None = None,
    ) -> list[TimerRecord]:
        if after is None and limit is None:
            rows = await self._fetchall(Q["timers"], {"id": workflow_id})
        else:
            params = {
                "id": workflow_id,
                "after_due": None if after is None else float(after[0]),
                "after_id": None if after is None else int(after[1]),
                "limit": limit,
            }
            rows = await self._fetchall(Q["timers_page"], params)
        return [timer_record(r) for r in rows]

    async def schedule_timer(
        self,
        workflow_id: str,
        timer: TimerSpec,
        *,
        state: str,
        entered_at: float,
        at: float,
        scheduled_by: str | None = None,
    ) -> TimerRecord | None:
        timer_arrays = timer_params([timer])
        params: dict[str, Any] = {
            "id": workflow_id,
            "due_at": timer_arrays["timer_due"][0],
            "event": timer.event,
            "payload": timer_arrays["timer_payload"][0],
            "key": timer.key,
            "every": timer_arrays["timer_every"][0],
            "keep": bool(timer.keep),
            "scheduled_by": scheduled_by,
        }
        async with self._connection(write=True) as conn:
            try:
                async with conn.transaction():
                    found = await (await conn.execute(Q["timer_visit"], params)).fetchone()
                    if found is None:
                        raise WorkflowNotFound(workflow_id)
                    if (
                        found["terminal"]
                        or found["state"] != state
                        or found["state_entered_at"] != entered_at
                    ):
                        return None  # another visit of the workflow: the caller reads again
                    removed: float | None = None
                    if timer.key is not None:
                        old = await (await conn.execute(Q["take_timer_key"], params)).fetchone()
                        removed = None if old is None else old["due_at"]
                    armed = await (await conn.execute(Q["insert_timer"], params)).fetchone()
                    assert armed is not None
                    await self._set_next_due(conn, workflow_id, found, removed, at)
            except BaseException:
                await _rollback(conn)
                raise
        self.listener.wake()
        return timer_record(armed)

    async def cancel_timer(self, workflow_id: str, key: str, *, at: float) -> bool:
        params = {"id": workflow_id, "key": key}
        async with self._connection(write=True) as conn:
            try:
                async with conn.transaction():
                    found = await (await conn.execute(Q["timer_visit"], params)).fetchone()
                    if found is None:
                        raise WorkflowNotFound(workflow_id)
                    old = await (await conn.execute(Q["take_timer_key"], params)).fetchone()
                    if old is None:
                        return False
                    await self._set_next_due(conn, workflow_id, found, old["due_at"], at)
            except BaseException:
                await _rollback(conn)
                raise
        return True

    @staticmethod
    async def _set_next_due(
        conn: Conn, workflow_id: str, found: DictRow, removed: float | None, at: float
    ) -> None:
        first = await (await conn.execute(Q["first_timer"], {"id": workflow_id})).fetchone()
        due = timerdue.next_due(
            found["next_due_at"],
            removed,
            None if first is None else first["first"],
            now=at,
            attempts=found["attempts"],
            parked=found["parked"],
        )
        await conn.execute(Q["set_next_due"], {"id": workflow_id, "next_due_at": due})

    # -- step ledger -------------------------------------------------------------------------

    async def step_begin(
        self, key: str, workflow_id: str, step: str, at: float, lease: Lease | None = None
    ) -> StepRecord:
        params = _step_params(key, workflow_id, step, at, lease)
        async with self._connection(write=True) as conn:
            row = await (await conn.execute(Q["step_begin"], params)).fetchone()
            if row is not None:
                return step_record(row)
            # Nothing written: the step is done already, or the lease (or workflow) is gone.
            cur = await conn.execute(Q["step_and_lease"], params)
            found = await cur.fetchone()
        if found is not None and found["step"] is not None and found["step"]["status"] == "done":
            return step_record(found["step"])
        if found is None or not found["found"]:
            raise WorkflowNotFound(workflow_id)
        raise LeaseLost(workflow_id)

    async def step_open(
        self, key: str, workflow_id: str, step: str, at: float, lease: Lease | None = None
    ) -> StepOpening:
        params = _step_params(key, workflow_id, step, at, lease)
        row = await self._fetchone(Q["step_open"], params, write=True)
        if row is None:
            raise WorkflowNotFound(workflow_id)
        if row["begun"] is not None:
            return StepOpening(step_record(row["begun"]), True, None)
        cancel, found = cancel_request(row), row["found"]
        if cancel is None and found is None:
            if not row["held"]:
                raise LeaseLost(workflow_id)
            found = await self._fetchone(Q["get_step"], {"key": key})  # inserted meanwhile
        return StepOpening(None if found is None else step_record(found), False, cancel)

    async def step_finish(self, finish: StepFinish, lease: Lease | None = None) -> StepRecord:
        params = {
            "key": finish.key,
            "attempt": finish.attempt,
            "status": finish.status,
            "result": None if finish.result is None else dumps(finish.result),
            "error": finish.error,
            "outcome": finish.outcome,
            "at": float(finish.at),
            **lease_params(lease),
        }
        async with self._connection(write=True) as conn:
            row = await (await conn.execute(Q["finish_step"], params)).fetchone()
            if row is not None:
                return step_record(row)
            current = await (await conn.execute(Q["get_step"], {"key": finish.key})).fetchone()
        if current is None:
            raise StoreError(f"no step {finish.key!r} in the ledger")
        raise LeaseLost(
            current["workflow_id"],
            f"step {finish.key!r}: attempt {finish.attempt} may no longer record its outcome "
            f"(the ledger has attempt {current['attempts']}, {current['status']}, or the lease "
            "is gone)",
        )

    async def resolve_step(
        self,
        key: str,
        status: str,
        result: Any,
        outcome: StepOutcome | None,
        note: str,
        at: float,
    ) -> StepRecord:
        params = {
            "key": key,
            "status": status,
            "result": None if result is None else dumps(result),
            "outcome": outcome,
            "error": note,
            "at": float(at),
        }
        async with self._connection(write=True) as conn:
            row = await (await conn.execute(Q["resolve_step"], params)).fetchone()
            if row is not None:
                return step_record(row)
            current = await (await conn.execute(Q["get_step"], {"key": key})).fetchone()
        if current is None:
            raise StepNotFound(f"no step {key!r} in the ledger", key=key)
        if current["status"] == "done":
            raise StepDone(f"step {key!r} is done already: its result stands", key=key)
        raise WorkflowBusy(f"a worker holds the workflow of step {key!r}: try again later")

    async def get_step(self, key: str) -> StepRecord | None:
        row = await self._fetchone(Q["get_step"], {"key": key})
        return None if row is None else step_record(row)

    async def steps(
        self,
        workflow_id: str,
        after: tuple[float, str] | None = None,
        limit: int | None = None,
    ) -> list[StepRecord]:
        sql, params = sqlbuild.steps(workflow_id, "postgres", after, limit)
        return await self._read_many(sql, params, step_record)

    # -- inbox -------------------------------------------------------------------------------

    async def post_input(
        self,
        workflow_id: str,
        name: str,
        payload: dict[str, Any],
        at: float,
        *,
        idempotency_key: str | None = None,
        wake_in_state: str | None = None,
    ) -> tuple[InboxItem, bool]:
        params = {
            "id": workflow_id,
            "name": name,
            "payload": dumps(payload),
            "at": float(at),
            "key": idempotency_key,
            "wake_state": wake_in_state,
        }
        async with self._connection(write=True) as conn:
            row = await (await conn.execute(Q["post_input"], params)).fetchone()
            if row is not None and row["used_event"] is not None and idempotency_key:
                raise IdempotencyKeyReused(
                    workflow_id,
                    idempotency_key,
                    f"event {row['used_event']!r} (version {row['used_version']})",
                )
            if row is not None and row["item"] is None and idempotency_key is not None:
                # A concurrent post with the same key won the insert after our snapshot.
                cur = await conn.execute(
                    Q["input_by_key"], {"id": workflow_id, "key": idempotency_key}
                )
                raced = await cur.fetchone()
                if raced is not None:
                    return inbox_item(raced), False
        if row is None:
            raise WorkflowNotFound(workflow_id)
        if row["item"] is None:
            raise WorkflowFinished(workflow_id, row["state"])
        if row["created"]:
            self.listener.wake()
        return inbox_item(row["item"]), bool(row["created"])

    async def next_input(
        self, workflow_id: str, name: str | None = None, skip: Sequence[int] = ()
    ) -> InboxItem | None:
        params = {"id": workflow_id, "name": name, "skip": list(skip)}
        row = await self._fetchone(Q["next_input"], params)
        return None if row is None else inbox_item(row)

    # -- retention (the SQL in statewright.store.retention_sql) -------------------------------

    async def prunable(
        self, before: float, *, tenant: str | None, after: tuple[float, str] | None, limit: int
    ) -> list[tuple[str, int, float]]:
        async with self._connection() as conn:
            return await retention_sql.pg_prunable(conn, before, tenant, after, limit)

    async def export_workflows(self, ids: Sequence[str]) -> list[dict[str, Any]]:
        async with self._connection() as conn:
            return await retention_sql.pg_export(conn, ids)

    async def delete_workflows(
        self, held: Sequence[tuple[str, int]], at: float | None = None
    ) -> tuple[list[str], dict[str, int]]:
        when = time.time() if at is None else at
        async with self._connection(write=True) as conn:
            return await retention_sql.pg_delete(conn, held, when)

    async def forget_pruned_ids(
        self, before: float, *, tenant: str | None, limit: int, dry_run: bool = False
    ) -> int:
        async with self._connection(write=not dry_run) as conn:
            return await retention_sql.pg_forget_pruned_ids(conn, before, tenant, limit, dry_run)

    async def prune_rejections(
        self, before: float, *, tenant: str | None, limit: int, dry_run: bool = False
    ) -> int:
        async with self._connection(write=not dry_run) as conn:
            return await retention_sql.pg_prune_rejections(conn, before, tenant, limit, dry_run)

    async def prune_alert_notifications(
        self, before: float, *, limit: int, dry_run: bool = False
    ) -> int:
        async with self._connection(write=not dry_run) as conn:
            return await retention_sql.pg_prune_alert_notifications(conn, before, limit, dry_run)

    async def restore_workflow(
        self, record: Mapping[str, Any], check: retention_sql.Check | None = None
    ) -> bool:
        async with self._connection(write=True) as conn:
            return await retention_sql.pg_restore(conn, dict(record), check)


async def _rollback(conn: Conn) -> None:
    """End a transaction an exception interrupted (the pool discards a broken connection)."""
    if conn.info.transaction_status in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
        with contextlib.suppress(psycopg.Error):
            await conn.execute("ROLLBACK")
