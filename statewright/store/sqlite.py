"""The embedded SQLite store (WAL mode, zero setup).

Every write is a function run on the connection's thread inside a savepoint of a shared
transaction (see :mod:`statewright.store.sqlite_conn` for group commit).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from statewright import jsonvalue, offload
from statewright.errors import (
    IdempotencyKeyReused,
    InvalidInput,
    LeaseLost,
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
from statewright.store.protocol import fork_source_busy
from statewright.store.queries import load_queries, migrations
from statewright.store.schedules import SQLiteSchedules
from statewright.store.sqlite_conn import GroupCommitConnection, Synchronous
from statewright.store.sqlite_probe import Probe
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

Q = load_queries("sqlite")
T = TypeVar("T")

WATCH_INTERVAL = 0.05
"""Seconds between two checks for other processes' commits while anyone waits for work."""


def _data_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA data_version").fetchone()[0])


def _dumps(value: Any) -> str:
    try:
        text = jsonvalue.dumps(value, sort_keys=True, allow_nan=False, ensure_ascii=False)
        # A lone surrogate ("\ud800") would be stored, then break every read of the row as
        # UTF-8: refuse it here, like PostgreSQL's JSONB does.
        text.encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"not JSON-serialisable: {exc}") from exc
    return text


def _cancel(r: sqlite3.Row) -> CancelRequest | None:
    reason = r["cancel_requested"]
    if reason is None:
        return None
    return CancelRequest(
        reason, r["cancel_actor"], r["cancel_at"], r["cancel_version"], r["cancel_key"]
    )


def _workflow(r: sqlite3.Row, context: dict[str, Any] | None = None) -> WorkflowRow:
    return WorkflowRow(
        id=r["id"],
        type=r["type"],
        machine_version=r["machine_version"],
        state=r["state"],
        context=jsonvalue.loads(r["context"]) if context is None else context,
        version=r["version"],
        attempts=r["attempts"],
        terminal=bool(r["terminal"]),
        created_at=r["created_at"],
        updated_at=r["updated_at"],
        state_entered_at=r["state_entered_at"],
        next_due_at=r["next_due_at"],
        lease_owner=r["lease_owner"],
        lease_expires_at=r["lease_expires_at"],
        last_error=r["last_error"],
        cancel=_cancel(r),
        progress=None if r["progress"] is None else jsonvalue.loads(r["progress"]),
        tenant=r["tenant"],
        fence=r["fence"],
        total_attempts=r["total_attempts"],
        parked=r["parked"],
        trace=r["trace"],
    )


def _transition(r: sqlite3.Row) -> TransitionRecord:
    patch = r["context_patch"]
    return TransitionRecord(
        seq=r["seq"],
        workflow_id=r["workflow_id"],
        version=r["version"],
        from_state=r["from_state"],
        to_state=r["to_state"],
        event=r["event"],
        payload=jsonvalue.loads(r["payload"]),
        actor=r["actor"],
        context_patch=None if patch is None else jsonvalue.loads(patch),
        at=r["at"],
        idempotency_key=r["idempotency_key"],
    )


def _step(r: sqlite3.Row) -> StepRecord:
    result = r["result"]
    return StepRecord(
        key=r["key"],
        workflow_id=r["workflow_id"],
        step=r["step"],
        status=r["status"],
        result=None if result is None else jsonvalue.loads(result),
        error=r["error"],
        attempts=r["attempts"],
        started_at=r["started_at"],
        finished_at=r["finished_at"],
        outcome=r["outcome"],
        fence=r["fence"],
    )


def _inbox(r: sqlite3.Row) -> InboxItem:
    return InboxItem(
        id=r["id"],
        workflow_id=r["workflow_id"],
        name=r["name"],
        payload=jsonvalue.loads(r["payload"]),
        posted_at=r["posted_at"],
        consumed_at=r["consumed_at"],
        idempotency_key=r["idempotency_key"],
    )


def _key_used_for_event(workflow_id: str, key: str, used: Any) -> IdempotencyKeyReused:
    """An input posted with a key that an event of the workflow's log already used."""
    return IdempotencyKeyReused(
        workflow_id, key, f"event {used['event']!r} (version {used['version']})"
    )


def _key_used_for_input(workflow_id: str, key: str, item: InboxItem) -> IdempotencyKeyReused:
    """An event sent with a key that an input of the workflow already used."""
    return IdempotencyKeyReused(workflow_id, key, f"input {item.name!r} #{item.id}")


def _timer(r: sqlite3.Row) -> TimerRecord:
    return TimerRecord(
        id=r["id"],
        workflow_id=r["workflow_id"],
        due_at=r["due_at"],
        event=r["event"],
        payload=jsonvalue.loads(r["payload"]),
        key=r["key"],
        every=r["every"],
        keep=bool(r["keep"]),
        scheduled_by=r["scheduled_by"],
    )


def _rejection(r: sqlite3.Row) -> RejectionRecord:
    return RejectionRecord(
        seq=r["seq"],
        workflow_id=r["workflow_id"],
        type=r["type"],
        tenant=r["tenant"],
        state=r["state"],
        event=r["event"],
        code=r["code"],
        actor=r["actor"],
        message=r["message"],
        at=r["at"],
    )


def _statements(script: str) -> list[str]:
    # Split on statement boundaries the way SQLite does (triggers contain ';').
    out: list[str] = []
    buf = ""
    for line in script.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            if buf.strip():
                out.append(buf)
            buf = ""
    if buf.strip() and not all(
        ln.strip().startswith("--") or not ln.strip() for ln in buf.splitlines()
    ):
        raise StoreError(f"incomplete SQL statement in migration: {buf[:80]!r}")
    return out


class SQLiteStore(SQLiteSchedules):
    """The :class:`~statewright.store.protocol.Store` on one SQLite file (or ``:memory:``).

    Args:
        path: database file; created with its folder when missing.
        synchronous: ``FULL`` (fsync every commit: durable against power loss) or ``NORMAL``
            (WAL fsyncs at checkpoints: durable against process crashes).
    """

    dialect = "sqlite"

    def __init__(
        self,
        path: str | Path = "statewright.db",
        synchronous: Synchronous = "FULL",
        busy_timeout: float = 10.0,
    ) -> None:
        self.path = str(path)
        self.conn = GroupCommitConnection(self.path, synchronous, int(busy_timeout * 1000))
        self.probe = Probe(self.path, int(busy_timeout * 1000))
        """Readiness probes' own connection and thread (:meth:`ping`)."""
        self._wakeups: set[asyncio.Event] = set()
        self._watcher: asyncio.Task[None] | None = None

    def _wake(self) -> None:
        # Wakes this process's waiters after a write that may have made work due (or posted
        # an input, or asked for a cancel); other processes' writes are seen by _watch.
        for event in self._wakeups:
            event.set()

    async def wait_for_work(self, timeout: float) -> None:
        event = asyncio.Event()
        self._wakeups.add(event)
        self._ensure_watcher()
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            pass
        finally:
            self._wakeups.discard(event)

    def _ensure_watcher(self) -> None:
        if self.path == ":memory:" or (self._watcher is not None and not self._watcher.done()):
            return
        self._watcher = asyncio.create_task(self._watch(), name="statewright-sqlite-watch")

    async def _watch(self) -> None:
        """Wake this process's waiters when another process commits.

        SQLite has no notifications across processes. ``PRAGMA data_version`` on our own
        connection changes exactly when another connection committed, and costs one short
        read on the connection's thread: checked every :data:`WATCH_INTERVAL` while anyone
        waits, it brings another process's input, cancel request or due work to a waiting
        worker within that interval instead of a whole poll interval.
        """
        last: int | None = None
        while self._wakeups:
            try:
                version = await self.conn.read(_data_version)
            except StoreError:
                return  # closed or broken: waiters fall back to their timeouts
            if last is not None and version != last:
                self._wake()
            last = version
            await asyncio.sleep(WATCH_INTERVAL)

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"

    # -- lifecycle ---------------------------------------------------------------------------

    async def open(self) -> None:
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self.conn.start()
        await self.conn.read(self._migrate)

    async def close(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, RuntimeError):
                await self._watcher
            self._watcher = None
        self.probe.close()
        self.conn.stop()

    async def ping(self) -> None:
        """Answer once the database answers a trivial query, on a connection and thread of its
        own: never queued behind the store's reads and writes (:mod:`.sqlite_probe`). An
        in-memory database has no second connection: there the store's own answers."""
        if not self.conn.alive:
            raise StoreError("the SQLite store is not open")
        if self.path == ":memory:":
            await self.conn.read(lambda c: c.execute("SELECT 1").fetchone())
        else:
            await self.probe.ping()

    async def _read_many(
        self,
        read: Callable[[sqlite3.Connection], list[sqlite3.Row]],
        convert: Callable[[sqlite3.Row], T],
    ) -> list[T]:
        """Rows read on the connection's thread, then converted (their JSON decoded) off the
        event loop when they are large (:mod:`statewright.offload`)."""

        def fn(conn: sqlite3.Connection) -> tuple[list[sqlite3.Row], int]:
            rows = read(conn)
            return rows, offload.text_size(rows)

        rows, size = await self.conn.read(fn)
        return await offload.convert(rows, convert, size)

    @staticmethod
    def _migrate(conn: sqlite3.Connection) -> list[int]:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
        )
        applied_now = []
        conn.execute("BEGIN IMMEDIATE")  # one process migrates at a time
        try:
            done = {r[0] for r in conn.execute("SELECT version FROM schema_migrations")}
            for number, name, sql in migrations("sqlite"):
                if number in done:
                    continue
                for stmt in _statements(sql):
                    conn.execute(stmt)
                conn.execute(
                    "INSERT INTO schema_migrations VALUES (?, ?, ?)", (number, name, time.time())
                )
                applied_now.append(number)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return applied_now

    # -- workflows and transitions -----------------------------------------------------------

    async def create_workflow(self, new: NewWorkflow) -> tuple[WorkflowRow, bool]:
        def fn(conn: sqlite3.Connection) -> tuple[WorkflowRow, bool]:
            if conn.execute(Q["is_pruned"], {"id": new.id}).fetchone() is not None:
                raise WorkflowPruned(new.id)  # (a tombstone: no row of that id is left)
            if new.fork_of is not None and (
                conn.execute(Q["version_of"], {"id": new.id}).fetchone() is None
            ):
                source, fence = new.fork_of
                found = conn.execute(Q["fork_source"], {"id": source}).fetchone()
                if found is None:
                    raise WorkflowNotFound(source)
                if found["lease_owner"] is not None or found["fence"] != fence:
                    raise WorkflowBusy(fork_source_busy(source))
            context = _dumps(new.context)
            cur = conn.execute(
                Q["insert_workflow"],
                {
                    "id": new.id,
                    "type": new.type,
                    "machine_version": new.machine_version,
                    "state": new.state,
                    "context": context,
                    "terminal": int(new.terminal),
                    "at": new.at,
                    "next_due_at": new.run_at,
                    "tenant": new.tenant,
                    "trace": new.trace,
                },
            )
            created = cur.rowcount == 1
            if created:
                conn.execute(
                    Q["append_transition"],
                    {
                        "workflow_id": new.id,
                        "version": 1,
                        "from_state": None,
                        "to_state": new.state,
                        "event": new.event,
                        "payload": context if new.payload is None else _dumps(new.payload),
                        "actor": new.actor,
                        "context_patch": context,
                        "at": new.at,
                        "idempotency_key": new.idempotency_key,
                    },
                )
                for step in new.steps:
                    conn.execute(
                        Q["insert_done_step"],
                        {
                            "key": step.key,
                            "workflow_id": new.id,
                            "step": step.step,
                            "result": None if step.result is None else _dumps(step.result),
                            "attempts": step.attempts,
                            "started_at": step.started_at,
                            "finished_at": step.finished_at,
                        },
                    )
                if new.timers:
                    self._add_timers(conn, new.id, new.timers)
                    conn.execute(Q["refresh_next_due"], {"id": new.id, "run_at": new.run_at})
            row = conn.execute(Q["get_workflow"], {"id": new.id}).fetchone()
            return _workflow(row), created

        result = await self.conn.write(fn)
        self._wake()
        return result

    @staticmethod
    def _add_timers(
        conn: sqlite3.Connection,
        workflow_id: str,
        timers: Sequence[Any],
        scheduled_by: str | None = None,
    ) -> None:
        conn.executemany(
            Q["insert_timer"],
            [
                {
                    "id": workflow_id,
                    "due_at": t.due_at,
                    "event": t.event,
                    "payload": _dumps(t.payload),
                    "key": t.key,
                    "every": t.every,
                    "keep": int(t.keep),
                    "scheduled_by": scheduled_by,
                }
                for t in timers
            ],
        )

    @classmethod
    def _change_timers(
        cls,
        conn: sqlite3.Connection,
        w: TransitionWrite | DeferWrite,
        *,
        clear: bool = False,
        clear_all: bool = False,
    ) -> bool:
        """Apply a write's timer changes (inside its savepoint); whether any were asked.

        The timer a fire read must still be pending (a schedule may have replaced it since):
        otherwise the write is refused as a conflict and the worker reads the timers again.
        """
        wid = w.workflow_id
        fired = w.fired_timer_id
        if fired is not None:
            if conn.execute(Q["timer_exists"], {"id": wid, "timer_id": fired}).fetchone() is None:
                raise VersionConflict(wid, w.expected_version, None)
        touched = False
        if clear:
            cleared = conn.execute(Q["delete_timers"], {"id": wid, "all": int(clear_all)})
            touched = cleared.rowcount > 0
        elif fired is not None:
            conn.execute(Q["delete_timer"], {"id": wid, "timer_id": fired})
            touched = True
        keys = [*w.cancel_timer_keys, *(t.key for t in w.add_timers if t.key is not None)]
        if keys:
            conn.execute(Q["delete_timer_keys"], {"id": wid, "keys": json.dumps(keys)})
            touched = True
        if w.add_timers:
            cls._add_timers(conn, wid, w.add_timers)
            touched = True
        return touched

    async def get_workflow(self, workflow_id: str) -> WorkflowRow | None:
        def fn(conn: sqlite3.Connection) -> WorkflowRow | None:
            row = conn.execute(Q["get_workflow"], {"id": workflow_id}).fetchone()
            return None if row is None else _workflow(row)

        return await self.conn.read(fn)

    async def apply_transition(self, write: TransitionWrite) -> WorkflowRow:
        row = await self.conn.write(lambda conn: self._apply(conn, write))
        if row.next_due_at is not None:
            self._wake()
        return row

    async def transition_by_key(
        self, workflow_id: str, idempotency_key: str
    ) -> TransitionRecord | None:
        params = {"id": workflow_id, "key": idempotency_key}

        def fn(c: sqlite3.Connection) -> tuple[sqlite3.Row | None, sqlite3.Row | None]:
            row = c.execute(Q["transition_by_key"], params).fetchone()
            if row is not None:
                return row, None
            return None, c.execute(Q["input_by_key"], params).fetchone()

        row, posted = await self.conn.read(fn)
        if posted is not None:
            raise _key_used_for_input(workflow_id, idempotency_key, _inbox(posted))
        return None if row is None else _transition(row)

    @staticmethod
    def _refusal(
        conn: sqlite3.Connection, workflow_id: str, expected_version: int, lease: Lease | None
    ) -> StatewrightError:
        """Why a compare-and-swap matched nothing (a lost lease first: the worker must stop)."""
        found = conn.execute(Q["write_refusal"], {"id": workflow_id}).fetchone()
        if found is None:
            return WorkflowNotFound(workflow_id)
        if lease is not None and (found["lease_owner"], found["fence"]) != (
            lease.owner,
            lease.fence,
        ):
            return LeaseLost(workflow_id)
        return VersionConflict(workflow_id, expected_version, found["version"])

    @staticmethod
    def _consume(
        conn: sqlite3.Connection, workflow_id: str, ids: Sequence[int], at: float
    ) -> None:
        params = {"id": workflow_id, "ids": json.dumps(list(ids)), "at": at}
        if conn.execute(Q["consume_inputs"], params).rowcount != len(set(ids)):
            # Raised inside the write's savepoint: everything it did rolls back.
            raise StoreError(f"inbox items {list(ids)} of {workflow_id!r} were already consumed")

    def _apply(self, conn: sqlite3.Connection, w: TransitionWrite) -> WorkflowRow:
        context = _dumps(w.context)
        lease = w.lease
        moved = conn.execute(
            Q["cas_update_workflow"],
            {
                "id": w.workflow_id,
                "expected_version": w.expected_version,
                "to_state": w.to_state,
                "machine_version": w.machine_version,
                "context": context,
                "attempts": w.attempts,
                "total_attempts": w.total_attempts,
                "terminal": int(w.terminal),
                "at": w.at,
                "run_at": w.run_at,
                "last_error": w.last_error,
                "release_lease": int(w.release_lease),
                "require_unleased": int(w.require_unleased),
                "owner": None if lease is None else lease.owner,
                "fence": None if lease is None else lease.fence,
                "trace": w.trace,
            },
        )
        if moved.rowcount != 1:
            raise self._refusal(conn, w.workflow_id, w.expected_version, lease)
        try:
            conn.execute(
                Q["append_transition"],
                {
                    "workflow_id": w.workflow_id,
                    "version": w.expected_version + 1,
                    "from_state": w.from_state,
                    "to_state": w.to_state,
                    "event": w.event,
                    "payload": _dumps(w.payload),
                    "actor": w.actor,
                    "context_patch": None if w.context_patch is None else _dumps(w.context_patch),
                    "at": w.at,
                    "idempotency_key": w.idempotency_key,
                },
            )
        except sqlite3.IntegrityError as exc:
            if w.idempotency_key is not None and "idempotency_key" in str(exc):
                raise IdempotencyKeyReused(
                    w.workflow_id, w.idempotency_key, "an earlier transition"
                ) from exc
            raise
        touched_timers = self._change_timers(conn, w, clear=w.clear_timers, clear_all=w.terminal)
        # Leaving a state for a live one may keep timers (``keep``): next_due_at counts them.
        if touched_timers or not w.clear_timers or not w.terminal:
            conn.execute(Q["refresh_next_due"], {"id": w.workflow_id, "run_at": w.run_at})
        if w.consume_inbox_ids:
            self._consume(conn, w.workflow_id, w.consume_inbox_ids, w.at)
        if w.step_finish is not None:
            self._finish_with(conn, w.workflow_id, w.step_finish)
        return self._after(conn, w, context)

    @staticmethod
    def _finish_with(conn: sqlite3.Connection, workflow_id: str, finish: StepFinish) -> None:
        """A step's outcome carried by a transition: the compare-and-swap above proved the
        lease in this same transaction, so only the attempt is checked here."""
        params = {
            "key": finish.key,
            "attempt": finish.attempt,
            "status": finish.status,
            "result": None if finish.result is None else _dumps(finish.result),
            "error": finish.error,
            "outcome": finish.outcome,
            "at": finish.at,
        }
        if conn.execute(Q["finish_carried_step"], params).rowcount != 1:
            # Raised inside the write's savepoint: the transition rolls back with it.
            raise LeaseLost(
                workflow_id,
                f"step {finish.key!r}: attempt {finish.attempt} is no longer executing",
            )

    @staticmethod
    def _after(conn: sqlite3.Connection, w: TransitionWrite, context: str) -> WorkflowRow:
        """The row after ``w`` applied: what the write set, and the rest read back (tuples,
        by position: a named ``sqlite3.Row`` costs as much as the read)."""
        cur = conn.cursor()
        cur.row_factory = None
        (
            wid,
            type_,
            machine_version,
            created_at,
            state_entered_at,
            next_due_at,
            lease_owner,
            lease_expires_at,
            reason,
            cancel_actor,
            cancel_at,
            cancel_version,
            cancel_key,
            progress,
            tenant,
            fence,
            total_attempts,
            trace,
        ) = cur.execute(Q["after_transition"], {"id": w.workflow_id}).fetchone()
        return WorkflowRow(
            id=wid,
            type=type_,
            machine_version=machine_version,
            state=w.to_state,
            context=jsonvalue.loads(context),
            version=w.expected_version + 1,
            attempts=w.attempts,
            terminal=w.terminal,
            created_at=created_at,
            updated_at=w.at,
            state_entered_at=state_entered_at,
            next_due_at=next_due_at,
            lease_owner=lease_owner,
            lease_expires_at=lease_expires_at,
            last_error=w.last_error,
            cancel=None
            if reason is None
            else CancelRequest(reason, cancel_actor, cancel_at, cancel_version, cancel_key),
            progress=None if progress is None else jsonvalue.loads(progress),
            tenant=tenant,
            fence=fence,
            total_attempts=total_attempts,
            parked=None,
            trace=trace,
        )

    async def history(
        self, workflow_id: str, after_version: int = 0, limit: int | None = None
    ) -> list[TransitionRecord]:
        params = {
            "id": workflow_id,
            "after": after_version,
            "limit": -1 if limit is None else limit,
        }
        return await self._read_many(
            lambda c: c.execute(Q["history"], params).fetchall(), _transition
        )

    async def transitions_since(
        self, seq: int, limit: int = 500, tenant: str | None = None
    ) -> list[TransitionRecord]:
        sql, params = sqlbuild.transitions_since(seq, limit, tenant, "sqlite")
        return await self._read_many(lambda c: c.execute(sql, params).fetchall(), _transition)

    async def list_workflows(self, where: WorkflowFilter) -> list[WorkflowRow]:
        sql, params = sqlbuild.list_workflows(where, "sqlite")
        return await self._read_many(lambda c: c.execute(sql, params).fetchall(), _workflow)

    async def count_stuck(
        self, cutoffs: Sequence[StuckCutoff], tenant: str | None = None, *, parked: bool = False
    ) -> list[tuple[str, str, int, float]]:
        groups = sqlbuild.stuck_groups(cutoffs)
        statements = list(sqlbuild.count_stuck(groups, "sqlite", tenant, parked))

        def fn(conn: sqlite3.Connection) -> list[tuple[str, str, int, float]]:
            out = []
            for sql, params, chunk in statements:
                rows = conn.execute(sql, params).fetchall()
                out += sqlbuild.add_counts(((r["g"], r["n"], r["oldest"]) for r in rows), chunk)
            return out

        return await self.conn.read(fn)

    async def stuck_workflows(
        self,
        cutoffs: Sequence[StuckCutoff],
        *,
        after: StuckKey | None = None,
        limit: int = 100,
        tenant: str | None = None,
        parked: bool = False,
    ) -> list[WorkflowRow]:
        groups = sqlbuild.stuck_groups(cutoffs)

        def fn(conn: sqlite3.Connection) -> list[sqlite3.Row]:
            found: list[sqlite3.Row] = []
            for g in groups:
                if len(found) >= limit:
                    break
                want = limit - len(found)
                pages = [sqlbuild.stuck_page(g, "sqlite", tenant, after, want)]
                if parked:
                    pages.append(sqlbuild.stuck_parked_page(g, "sqlite", tenant, after, want))
                rows = [r for page in pages if page for r in conn.execute(*page).fetchall()]
                rows.sort(key=lambda r: (r["state_entered_at"], r["id"]))
                found += rows[:want]
            return found

        return await self._read_many(fn, _workflow)

    async def count_parked(
        self, tenant: str | None = None
    ) -> list[tuple[str, str, str, int, float]]:
        sql, params = sqlbuild.count_parked("sqlite", tenant)
        rows = await self.conn.read(lambda c: c.execute(sql, params).fetchall())
        return [(r["type"], r["state"], r["parked"], r["n"], r["oldest"]) for r in rows]

    async def unresolved_steps(self, workflow_ids: Sequence[str]) -> list[StepRecord]:
        if not workflow_ids:
            return []
        params = {"ids": json.dumps(list(workflow_ids))}
        rows = await self.conn.read(lambda c: c.execute(Q["unresolved_steps"], params).fetchall())
        return [_step(r) for r in rows]

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
        ranged = tenant is not None or entered_after is not None or entered_before is not None

        def fn(conn: sqlite3.Connection) -> list[tuple[str, str, int]]:
            kept = [tuple(r) for r in conn.execute(Q["workflow_counts"]).fetchall()]
            if not ranged:
                return sqlbuild.kept_counts(kept, terminal)
            out = []
            groups = sqlbuild.count_groups(kept, terminal)
            for sql, params, chunk in sqlbuild.count_in_groups(
                groups, "sqlite", tenant, entered_after, entered_before
            ):
                for r in conn.execute(sql, params).fetchall():
                    if r["n"]:
                        out.append((chunk[r["g"]].type, chunk[r["g"]].state, r["n"]))
            return out

        return await self.conn.read(fn)

    async def live_event_counts(
        self, since: float, events: Sequence[str], tenant: str | None = None
    ) -> list[tuple[str, str, str, int]]:
        built = sqlbuild.live_event_counts(since, events, tenant, "sqlite")
        if built is None:
            return []
        rows = await self.conn.read(lambda c: c.execute(*built).fetchall())
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
            "at": at,
        }
        await self.conn.write(lambda c: c.execute(Q["record_rejection"], params))

    async def count_rejections(
        self, since: float, tenant: str | None = None
    ) -> list[tuple[str, str, int]]:
        sql, params = sqlbuild.count_rejections(since, tenant, "sqlite")
        rows = await self.conn.read(lambda c: c.execute(sql, params).fetchall())
        return [(r["type"], r["code"], r["n"]) for r in rows]

    async def rejections(
        self, since: float, tenant: str | None = None, limit: int = 100
    ) -> list[RejectionRecord]:
        sql, params = sqlbuild.rejections(since, tenant, limit, "sqlite")
        rows = await self.conn.read(lambda c: c.execute(sql, params).fetchall())
        return [_rejection(r) for r in rows]

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
        sql = Q["claim_due"]
        params: dict[str, Any] = {
            "worker": worker_id,
            "until": now + lease_seconds,
            "now": now,
            "limit": limit,
        }
        if types is not None:
            sql = sql.replace(
                "AND terminal = 0",
                "AND terminal = 0 AND type IN (SELECT value FROM json_each(:types))",
            )
            params["types"] = json.dumps(list(types))
        rows = await self.conn.write(lambda c: c.execute(sql, params).fetchall())
        return sorted((_workflow(r) for r in rows), key=lambda w: (w.next_due_at or 0, w.id))

    async def renew_leases(
        self, worker_id: str, held: Mapping[str, int], until: float
    ) -> list[str]:
        params = {
            "worker": worker_id,
            "held": json.dumps([[k, v] for k, v in held.items()]),
            "until": until,
        }
        rows = await self.conn.write(lambda c: c.execute(Q["renew_leases"], params).fetchall())
        return [r[0] for r in rows]

    async def release_lease(self, workflow_id: str, lease: Lease) -> None:
        params = {"id": workflow_id, "worker": lease.owner, "fence": lease.fence}
        await self.conn.write(lambda c: c.execute(Q["release_lease"], params))

    async def defer(self, write: DeferWrite) -> WorkflowRow:
        lease = write.lease

        def fn(conn: sqlite3.Connection) -> WorkflowRow:
            # Timers first (the deferral's next_due_at counts them); a refusal below rolls
            # them back with the rest of the savepoint.
            self._change_timers(conn, write)
            cur = conn.execute(
                Q["defer_workflow"],
                {
                    "id": write.workflow_id,
                    "expected_version": write.expected_version,
                    "attempts": write.attempts,
                    "total_attempts": write.total_attempts,
                    "next_due_at": write.next_due_at,
                    "last_error": write.last_error,
                    "parked": write.parked,
                    "at": write.at,
                    "owner": None if lease is None else lease.owner,
                    "fence": None if lease is None else lease.fence,
                },
            )
            if cur.rowcount != 1:
                raise self._refusal(conn, write.workflow_id, write.expected_version, lease)
            if write.consume_inbox_ids:
                self._consume(conn, write.workflow_id, write.consume_inbox_ids, write.at)
            return _workflow(conn.execute(Q["get_workflow"], {"id": write.workflow_id}).fetchone())

        row = await self.conn.write(fn)
        if row.next_due_at is not None:
            self._wake()
        return row

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
            "until": until,
            "expired_before": expired_before,
        }
        row = await self.conn.write(lambda c: c.execute(Q["take_over"], params).fetchone())
        return None if row is None else _workflow(row)

    async def expired_leases(self, now: float, limit: int = 100) -> list[WorkflowRow]:
        params = {"now": now, "limit": limit}
        rows = await self.conn.read(lambda c: c.execute(Q["expired_leases"], params).fetchall())
        return [_workflow(r) for r in rows]

    async def leased_by(self, owner: str) -> list[WorkflowRow]:
        rows = await self.conn.read(
            lambda c: c.execute(Q["leased_by"], {"owner": owner}).fetchall()
        )
        return [_workflow(r) for r in rows]

    async def lease_owners(self) -> list[str]:
        rows = await self.conn.read(lambda c: c.execute(Q["lease_owners"]).fetchall())
        return [r[0] for r in rows]

    async def break_leases(
        self,
        owner: str,
        ids: Sequence[str] | None = None,
        *,
        expired_before: float | None = None,
    ) -> int:
        params: dict[str, Any] = {"owner": owner, "expired_before": expired_before}
        if ids is None:
            sql = Q["break_leases"]
        else:
            sql, params["ids"] = Q["break_leases_of"], json.dumps(list(ids))
        n: int = await self.conn.write(lambda c: c.execute(sql, params).rowcount)
        if n:
            self._wake()
        return n

    # -- cancel and progress -----------------------------------------------------------------

    async def request_cancel(self, workflow_id: str, request: CancelRequest) -> WorkflowRow:
        params = {
            "id": workflow_id,
            "reason": request.reason,
            "actor": request.actor,
            "at": request.at,
            "version": request.version,
            "key": request.idempotency_key,
        }

        def fn(conn: sqlite3.Connection) -> WorkflowRow:
            conn.execute(Q["request_cancel"], params)
            row = conn.execute(Q["get_workflow"], {"id": workflow_id}).fetchone()
            if row is None:
                raise WorkflowNotFound(workflow_id)
            return _workflow(row)

        row = await self.conn.write(fn)
        self._wake()
        return row

    async def cancel_requests(self, ids: Sequence[str]) -> dict[str, CancelRequest]:
        params = {"ids": json.dumps(list(ids))}
        rows = await self.conn.read(lambda c: c.execute(Q["cancel_requests"], params).fetchall())
        return {r["id"]: request for r in rows if (request := _cancel(r)) is not None}

    async def record_progress(
        self, workflow_id: str, progress: dict[str, Any], at: float, lease: Lease | None = None
    ) -> None:
        params = {
            "id": workflow_id,
            "progress": _dumps(progress),
            "owner": None if lease is None else lease.owner,
            "fence": None if lease is None else lease.fence,
        }

        def fn(conn: sqlite3.Connection) -> None:
            if conn.execute(Q["record_progress"], params).rowcount != 1:
                if conn.execute(Q["version_of"], {"id": workflow_id}).fetchone() is None:
                    raise WorkflowNotFound(workflow_id)
                raise LeaseLost(workflow_id)

        await self.conn.write(fn)

    async def live_versions_between(
        self, workflow_type: str, lo: int, hi: int
    ) -> list[tuple[int, int]]:
        params = {"type": workflow_type, "lo": lo, "hi": hi}
        rows = await self.conn.read(
            lambda c: c.execute(Q["live_versions_between"], params).fetchall()
        )
        return [(r["machine_version"], r["n"]) for r in rows]

    # -- definitions -------------------------------------------------------------------------

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
            "document": _dumps(document),
            "at": at,
        }

        def fn(conn: sqlite3.Connection) -> tuple[str, Any]:
            conn.execute(Q["replace_definition" if replace else "add_definition"], params)
            if replace:
                return fingerprint, dict(document)
            row = conn.execute(Q["get_definition"], params).fetchone()
            return row["fingerprint"], jsonvalue.loads(row["document"])

        return await self.conn.write(fn)

    # -- alert delivery ----------------------------------------------------------------------

    async def alert_states(self) -> list[AlertStateRecord]:
        rows = await self.conn.read(lambda c: c.execute(Q["alert_states"]).fetchall())
        return [
            AlertStateRecord(
                fingerprint=r["fingerprint"],
                rule=r["rule"],
                labels=json.loads(r["labels"]),
                annotations=json.loads(r["annotations"]),
                starts_at=r["starts_at"],
            )
            for r in rows
        ]

    async def record_alert_changes(
        self, changes: Sequence[AlertChange], receivers: Sequence[str], at: float
    ) -> list[AlertChange]:
        def fn(conn: sqlite3.Connection) -> list[AlertChange]:
            took = []
            for ch in changes:
                name, params = state_write(ch, _dumps)
                n = conn.execute(Q[name], params).rowcount
                if n != 1:
                    continue
                took.append(ch)
                for receiver in receivers:
                    conn.execute(Q["alert_enqueue"], enqueue_params(ch, receiver, at, _dumps))
            return took

        return await self.conn.write(fn)

    async def claim_alert_notifications(
        self, claim: str, now: float, until: float, limit: int
    ) -> list[OutboxRecord]:
        params = {"claim": claim, "now": now, "until": until, "limit": limit}
        rows = await self.conn.write(lambda c: c.execute(Q["alert_claim"], params).fetchall())
        found = [outbox_record(r, json.loads(r["alert"])) for r in rows]
        return sorted(found, key=lambda r: r.id)

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
        n = await self.conn.write(lambda c: c.execute(Q[name], params).rowcount)
        return bool(n)

    async def alert_notifications(self, after: int = 0, limit: int = 1000) -> list[OutboxRecord]:
        params = {"after": after, "limit": limit}
        rows = await self.conn.read(lambda c: c.execute(Q["alert_outbox"], params).fetchall())
        return [outbox_record(r, json.loads(r["alert"])) for r in rows]

    # -- timers ------------------------------------------------------------------------------

    async def timers(
        self,
        workflow_id: str,
        *,
        after: tuple[float, int] | None = None,
        limit: int | None = None,
    ) -> list[TimerRecord]:
        query: str = Q["timers"]
        params: dict[str, Any] = {"id": workflow_id}
        if after is not None or limit is not None:
            query = Q["timers_page"]
            params = {
                "id": workflow_id,
                "after_due": None if after is None else float(after[0]),
                "after_id": None if after is None else int(after[1]),
                "limit": -1 if limit is None else limit,
            }
        rows = await self.conn.read(lambda c: c.execute(query, params).fetchall())
        return [_timer(r) for r in rows]

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
        def fn(conn: sqlite3.Connection) -> TimerRecord | None:
            row = conn.execute(Q["timer_visit"], {"id": workflow_id}).fetchone()
            if row is None:
                raise WorkflowNotFound(workflow_id)
            if row["terminal"] or row["state"] != state or row["state_entered_at"] != entered_at:
                return None  # another visit of the workflow: the caller reads it again
            removed: float | None = None
            if timer.key is not None:
                by_key = {"id": workflow_id, "key": timer.key}
                old = conn.execute(Q["timer_by_key"], by_key).fetchone()
                if old is not None:
                    removed = old["due_at"]
                    conn.execute(Q["delete_timer"], {"id": workflow_id, "timer_id": old["id"]})
            self._add_timers(conn, workflow_id, [timer], scheduled_by)
            new_id = conn.execute("SELECT last_insert_rowid()").fetchone()[0]
            self._set_next_due(conn, workflow_id, row, removed, at)
            return _timer(conn.execute("SELECT * FROM timers WHERE id = ?", (new_id,)).fetchone())

        record = await self.conn.write(fn)
        if record is not None:
            self._wake()
        return record

    async def cancel_timer(self, workflow_id: str, key: str, *, at: float) -> bool:
        def fn(conn: sqlite3.Connection) -> bool:
            row = conn.execute(Q["timer_visit"], {"id": workflow_id}).fetchone()
            if row is None:
                raise WorkflowNotFound(workflow_id)
            old = conn.execute(Q["timer_by_key"], {"id": workflow_id, "key": key}).fetchone()
            if old is None:
                return False
            conn.execute(Q["delete_timer"], {"id": workflow_id, "timer_id": old["id"]})
            self._set_next_due(conn, workflow_id, row, old["due_at"], at)
            return True

        return await self.conn.write(fn)

    @staticmethod
    def _set_next_due(
        conn: sqlite3.Connection,
        workflow_id: str,
        row: sqlite3.Row,
        removed: float | None,
        at: float,
    ) -> None:
        first = conn.execute(Q["first_timer"], {"id": workflow_id}).fetchone()[0]
        due = timerdue.next_due(
            row["next_due_at"],
            removed,
            first,
            now=at,
            attempts=row["attempts"],
            parked=row["parked"],
        )
        conn.execute(Q["set_next_due"], {"id": workflow_id, "next_due_at": due})

    # -- step ledger -------------------------------------------------------------------------

    @staticmethod
    def _fenced(workflow_id: str, lease: Lease | None) -> dict[str, Any]:
        """The parameters of a query fenced by ``lease`` (``lease_holds``)."""
        return {
            "workflow_id": workflow_id,
            "owner": None if lease is None else lease.owner,
            "fence": None if lease is None else lease.fence,
        }

    @staticmethod
    def _insert_step(
        conn: sqlite3.Connection,
        key: str,
        workflow_id: str,
        step: str,
        at: float,
        lease: Lease | None,
    ) -> StepRecord:
        """Record a new step executing at attempt 1; what the INSERT wrote, not read back."""
        fence = None if lease is None else lease.fence
        params = {"key": key, "workflow_id": workflow_id, "step": step, "at": at, "fence": fence}
        conn.execute(Q["insert_step"], params)
        return StepRecord(
            key=key,
            workflow_id=workflow_id,
            step=step,
            status="executing",
            result=None,
            error=None,
            attempts=1,
            started_at=at,
            finished_at=None,
            fence=fence,
        )

    async def step_begin(
        self, key: str, workflow_id: str, step: str, at: float, lease: Lease | None = None
    ) -> StepRecord:
        fenced = self._fenced(workflow_id, lease)

        def fn(conn: sqlite3.Connection) -> StepRecord:
            row = conn.execute(Q["get_step"], {"key": key}).fetchone()
            if row is not None and row["status"] == "done":
                return _step(row)  # finished (here or elsewhere): its result stands
            if conn.execute(Q["lease_holds"], fenced).fetchone() is None:
                if conn.execute(Q["version_of"], {"id": workflow_id}).fetchone() is None:
                    raise WorkflowNotFound(workflow_id)
                raise LeaseLost(workflow_id)
            if row is None:
                return self._insert_step(conn, key, workflow_id, step, at, lease)
            conn.execute(Q["restart_step"], {"key": key, "at": at, "fence": fenced["fence"]})
            return _step(conn.execute(Q["get_step"], {"key": key}).fetchone())

        return await self.conn.write(fn)

    async def step_open(
        self, key: str, workflow_id: str, step: str, at: float, lease: Lease | None = None
    ) -> StepOpening:
        fenced = self._fenced(workflow_id, lease)

        def fn(conn: sqlite3.Connection) -> StepOpening:
            wf = conn.execute(Q["step_open_workflow"], fenced).fetchone()
            if wf is None:
                raise WorkflowNotFound(workflow_id)
            cancel = _cancel(wf)
            row = conn.execute(Q["get_step"], {"key": key}).fetchone()
            if cancel is not None or row is not None:
                return StepOpening(None if row is None else _step(row), False, cancel)
            if not wf["held"]:
                raise LeaseLost(workflow_id)
            begun = self._insert_step(conn, key, workflow_id, step, at, lease)
            return StepOpening(begun, True, None)

        return await self.conn.write(fn)

    async def step_finish(self, finish: StepFinish, lease: Lease | None = None) -> StepRecord:
        params = {
            "key": finish.key,
            "attempt": finish.attempt,
            "status": finish.status,
            "result": None if finish.result is None else _dumps(finish.result),
            "error": finish.error,
            "outcome": finish.outcome,
            "at": finish.at,
            "owner": None if lease is None else lease.owner,
            "fence": None if lease is None else lease.fence,
        }

        def fn(conn: sqlite3.Connection) -> StepRecord:
            row = conn.execute(Q["finish_step"], params).fetchone()
            if row is not None:
                return _step(row)
            current = conn.execute(Q["get_step"], {"key": finish.key}).fetchone()
            if current is None:
                raise StoreError(f"no step {finish.key!r} in the ledger")
            raise LeaseLost(
                current["workflow_id"],
                f"step {finish.key!r}: attempt {finish.attempt} may no longer record its "
                f"outcome (the ledger has attempt {current['attempts']}, "
                f"{current['status']}, or the lease is gone)",
            )

        return await self.conn.write(fn)

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
            "result": None if result is None else _dumps(result),
            "outcome": outcome,
            "error": note,
            "at": at,
        }

        def fn(conn: sqlite3.Connection) -> StepRecord:
            row = conn.execute(Q["resolve_step"], params).fetchone()
            if row is not None:
                return _step(row)
            current = conn.execute(Q["get_step"], {"key": key}).fetchone()
            if current is None:
                raise StepNotFound(f"no step {key!r} in the ledger", key=key)
            if current["status"] == "done":
                raise StepDone(f"step {key!r} is done already: its result stands", key=key)
            raise WorkflowBusy(f"a worker holds the workflow of step {key!r}: try again later")

        return await self.conn.write(fn)

    async def get_step(self, key: str) -> StepRecord | None:
        row = await self.conn.read(lambda c: c.execute(Q["get_step"], {"key": key}).fetchone())
        return None if row is None else _step(row)

    async def steps(
        self,
        workflow_id: str,
        after: tuple[float, str] | None = None,
        limit: int | None = None,
    ) -> list[StepRecord]:
        sql, params = sqlbuild.steps(workflow_id, "sqlite", after, limit)
        return await self._read_many(lambda c: c.execute(sql, params).fetchall(), _step)

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
        text = _dumps(payload)

        def fn(conn: sqlite3.Connection) -> tuple[InboxItem, bool]:
            found = conn.execute(Q["get_workflow_head"], {"id": workflow_id}).fetchone()
            if found is None:
                raise WorkflowNotFound(workflow_id)
            if idempotency_key is not None:
                by_key = {"id": workflow_id, "key": idempotency_key}
                earlier = conn.execute(Q["input_by_key"], by_key).fetchone()
                if earlier is not None:
                    return _inbox(earlier), False
                used = conn.execute(Q["transition_by_key"], by_key).fetchone()
                if used is not None:  # in this write transaction: no event can slip in
                    raise _key_used_for_event(workflow_id, idempotency_key, used)
            if found["terminal"]:
                raise WorkflowFinished(workflow_id, found["state"])
            params: dict[str, Any] = {
                "id": workflow_id,
                "name": name,
                "payload": text,
                "at": at,
                "key": idempotency_key,
            }
            item = _inbox(conn.execute(Q["post_input"], params).fetchone())
            if wake_in_state is not None:
                conn.execute(
                    Q["wake_for_input"], {"id": workflow_id, "state": wake_in_state, "at": at}
                )
            return item, True

        result = await self.conn.write(fn)
        self._wake()
        return result

    async def next_input(
        self, workflow_id: str, name: str | None = None, skip: Sequence[int] = ()
    ) -> InboxItem | None:
        params = {"id": workflow_id, "name": name, "skip": json.dumps(list(skip))}
        row = await self.conn.read(lambda c: c.execute(Q["next_input"], params).fetchone())
        return None if row is None else _inbox(row)

    # -- retention (the SQL in statewright.store.retention_sql) -------------------------------

    async def prunable(
        self, before: float, *, tenant: str | None, after: tuple[float, str] | None, limit: int
    ) -> list[tuple[str, int, float]]:
        return await self.conn.read(
            lambda c: retention_sql.sqlite_prunable(c, before, tenant, after, limit)
        )

    async def export_workflows(self, ids: Sequence[str]) -> list[dict[str, Any]]:
        return await self.conn.read(lambda c: retention_sql.sqlite_export(c, ids))

    async def delete_workflows(
        self, held: Sequence[tuple[str, int]], at: float | None = None
    ) -> tuple[list[str], dict[str, int]]:
        when = time.time() if at is None else at
        return await self.conn.write(lambda c: retention_sql.sqlite_delete(c, held, when))

    async def forget_pruned_ids(
        self, before: float, *, tenant: str | None, limit: int, dry_run: bool = False
    ) -> int:
        def go(c: sqlite3.Connection) -> int:
            return retention_sql.sqlite_forget_pruned_ids(c, before, tenant, limit, dry_run)

        return await (self.conn.read(go) if dry_run else self.conn.write(go))

    async def prune_rejections(
        self, before: float, *, tenant: str | None, limit: int, dry_run: bool = False
    ) -> int:
        fn = lambda c: retention_sql.sqlite_prune_rejections(c, before, tenant, limit, dry_run)  # noqa: E731
        return await (self.conn.read(fn) if dry_run else self.conn.write(fn))

    async def prune_alert_notifications(
        self, before: float, *, limit: int, dry_run: bool = False
    ) -> int:
        def go(c: sqlite3.Connection) -> int:
            return retention_sql.sqlite_prune_alert_notifications(c, before, limit, dry_run)

        return await (self.conn.read(go) if dry_run else self.conn.write(go))

    async def restore_workflow(
        self, record: Mapping[str, Any], check: retention_sql.Check | None = None
    ) -> bool:
        rec = dict(record)
        return await self.conn.write(lambda c: retention_sql.sqlite_restore(c, rec, check))
