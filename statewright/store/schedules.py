"""The stores' part of schedules and per-type limits: the ``schedules`` table, and the claim
of limited workflow types (``claim_due`` with ``limits``).

Mixed into :class:`~statewright.store.SQLiteStore` and
:class:`~statewright.store.postgres.PostgresStore` (their own modules stay about workflows).

**The claim of a limited type** runs in one transaction per type: it first takes the type's
row of ``type_limits`` (made on first use; on PostgreSQL the upsert locks it until commit, on
SQLite the write transaction is the only writer anyway), so the claims of one limited type are
serialized across every worker process; then counts the type's live leases (a lapsed lease,
from a frozen or dead worker, does not count), refills the type's token bucket by the time
passed, leases at most what both allow, and writes the bucket back. Unlimited types keep the
one-statement claim (``claim_due``) untouched.
"""

from __future__ import annotations

import json
import math
import random
import sqlite3
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

from statewright.errors import InvalidInput
from statewright.store.queries import load_queries
from statewright.types import ScheduleRecord, TypeLimit, WorkflowRow

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg.rows import DictRow

    from statewright.store.sqlite_conn import GroupCommitConnection

QS = load_queries("sqlite")
QP = load_queries("postgres")


def _schedule(r: Mapping[str, Any]) -> ScheduleRecord:
    raw = r["input"]
    return ScheduleRecord(
        id=r["id"],
        type=r["type"],
        cron=r["cron"],
        timezone=r["timezone"],
        catch_up=r["catch_up"],
        input=json.loads(raw) if isinstance(raw, str) else dict(raw),
        tenant=r["tenant"],
        paused=bool(r["paused"]),
        next_at=float(r["next_at"]),
        created_at=float(r["created_at"]),
        updated_at=float(r["updated_at"]),
        last_tick=None if r["last_tick"] is None else float(r["last_tick"]),
        last_workflow_id=r["last_workflow_id"],
        last_error=r["last_error"],
        created_by=r["created_by"],
    )


def _put_params(s: ScheduleRecord, dumps: Any) -> dict[str, Any]:
    return {
        "id": s.id,
        "type": s.type,
        "cron": s.cron,
        "timezone": s.timezone,
        "catch_up": s.catch_up,
        "input": dumps(s.input),
        "tenant": s.tenant,
        "paused": s.paused,
        "next_at": float(s.next_at),
        "at": float(s.updated_at),
        "created_by": s.created_by,
    }


def _advance_params(
    schedule_id: str,
    expected_next_at: float,
    next_at: float,
    at: float,
    last_tick: float | None,
    last_workflow_id: str | None,
    error: str | None,
) -> dict[str, Any]:
    return {
        "id": schedule_id,
        "expected_next_at": float(expected_next_at),
        "next_at": float(next_at),
        "last_tick": None if last_tick is None else float(last_tick),
        "last_workflow_id": last_workflow_id,
        "message": error,
        "at": float(at),
    }


def allowance(
    limit: TypeLimit, want: int, now: float, tokens: float, refilled_at: float, leased: int
) -> tuple[int, float, float]:
    """How many of a limited type a claim may lease now, and the bucket as it is now
    ``(n, tokens, refilled_at)`` (the caller takes ``n`` tokens off what it leased)."""
    n = want
    if limit.max_concurrent is not None:
        n = min(n, limit.max_concurrent - leased)
    if limit.max_per_second is not None:
        burst = bucket_size(limit)
        # A clock behind the last refill (another worker's) adds nothing, takes nothing.
        tokens = min(burst, tokens + max(0.0, now - refilled_at) * limit.max_per_second)
        refilled_at = max(now, refilled_at)
        n = min(n, math.floor(tokens + 1e-9))
    return max(0, n), tokens, refilled_at


def bucket_size(limit: TypeLimit) -> float:
    """The burst a rate limit allows (default: one second's worth, at least 1)."""
    if limit.burst is not None:
        return float(limit.burst)
    return max(1.0, float(limit.max_per_second or 1.0))


def _split(
    types: Sequence[str] | None, limits: Mapping[str, TypeLimit]
) -> tuple[list[str], list[str]]:
    if types is None:
        raise InvalidInput("a claim with limits names the types it claims")
    limited = [t for t in types if t in limits]
    random.shuffle(limited)  # no limited type always first
    return limited, [t for t in types if t not in limits]


class SQLiteSchedules:
    """Schedules and limited claims on SQLite (mixed into ``SQLiteStore``)."""

    if TYPE_CHECKING:
        conn: GroupCommitConnection

        async def claim_due(
            self,
            worker_id: str,
            now: float,
            lease_seconds: float,
            limit: int,
            types: Sequence[str] | None = None,
            limits: Mapping[str, TypeLimit] | None = None,
        ) -> list[WorkflowRow]: ...

    async def put_schedule(self, schedule: ScheduleRecord) -> ScheduleRecord:
        from statewright.store.sqlite import _dumps

        params = _put_params(schedule, _dumps)
        params["paused"] = int(schedule.paused)
        row = await self.conn.write(lambda c: c.execute(QS["schedule_put"], params).fetchone())
        return _schedule(row)

    async def get_schedule(self, schedule_id: str) -> ScheduleRecord | None:
        row = await self.conn.read(
            lambda c: c.execute(QS["schedule_get"], {"id": schedule_id}).fetchone()
        )
        return None if row is None else _schedule(row)

    async def list_schedules(
        self, tenant: str | None = None, *, after: str | None = None, limit: int | None = None
    ) -> list[ScheduleRecord]:
        if after is None and limit is None:
            query: str = QS["schedule_list"]
            params: dict[str, Any] = {"tenant": tenant}
        else:
            query = QS["schedule_page"]
            params = {"tenant": tenant, "after": after, "limit": -1 if limit is None else limit}
        rows = await self.conn.read(lambda c: c.execute(query, params).fetchall())
        return [_schedule(r) for r in rows]

    async def delete_schedule(self, schedule_id: str) -> bool:
        n: int = await self.conn.write(
            lambda c: c.execute(QS["schedule_delete"], {"id": schedule_id}).rowcount
        )
        return n > 0

    async def due_schedules(self, now: float, limit: int = 100) -> list[ScheduleRecord]:
        params = {"now": now, "limit": limit}
        rows = await self.conn.read(lambda c: c.execute(QS["schedule_due"], params).fetchall())
        return [_schedule(r) for r in rows]

    async def advance_schedule(
        self,
        schedule_id: str,
        expected_next_at: float,
        next_at: float,
        *,
        at: float,
        last_tick: float | None = None,
        last_workflow_id: str | None = None,
        error: str | None = None,
    ) -> bool:
        params = _advance_params(
            schedule_id, expected_next_at, next_at, at, last_tick, last_workflow_id, error
        )
        n: int = await self.conn.write(
            lambda c: c.execute(QS["schedule_advance"], params).rowcount
        )
        return n == 1

    async def pause_schedule(
        self, schedule_id: str, paused: bool, next_at: float, at: float
    ) -> ScheduleRecord | None:
        params = {"id": schedule_id, "paused": int(paused), "next_at": next_at, "at": at}
        row = await self.conn.write(lambda c: c.execute(QS["schedule_pause"], params).fetchone())
        return None if row is None else _schedule(row)

    async def _claim_limited(
        self,
        worker_id: str,
        now: float,
        lease_seconds: float,
        limit: int,
        types: Sequence[str] | None,
        limits: Mapping[str, TypeLimit],
    ) -> list[WorkflowRow]:
        from statewright.store.sqlite import _workflow

        limited, free = _split(types, limits)
        rows: list[WorkflowRow] = []
        for name in limited:
            if len(rows) >= limit:
                break
            lim = limits[name]
            want = limit - len(rows)

            def fn(
                c: sqlite3.Connection, name: str = name, lim: TypeLimit = lim, want: int = want
            ) -> list[Any]:
                base = {"type": name, "now": now}
                bucket = c.execute(
                    QS["limit_bucket"], {**base, "burst": bucket_size(lim)}
                ).fetchone()
                leased = 0
                if lim.max_concurrent is not None:
                    leased = c.execute(QS["limit_leased"], base).fetchone()["n"]
                n, tokens, refilled = allowance(
                    lim, want, now, bucket["tokens"], bucket["refilled_at"], leased
                )
                if n <= 0:
                    return []
                got = c.execute(
                    QS["claim_due_of_type"],
                    {**base, "worker": worker_id, "until": now + lease_seconds, "limit": n},
                ).fetchall()
                if lim.max_per_second is not None:
                    c.execute(
                        QS["limit_refill"],
                        {"type": name, "tokens": tokens - len(got), "refilled_at": refilled},
                    )
                return got

            rows += [_workflow(r) for r in await self.conn.write(fn)]
        if free and len(rows) < limit:
            rows += await self.claim_due(worker_id, now, lease_seconds, limit - len(rows), free)
        return sorted(rows, key=lambda w: (w.next_due_at or 0, w.id))


class PostgresSchedules:
    """Schedules and limited claims on PostgreSQL (mixed into ``PostgresStore``)."""

    if TYPE_CHECKING:

        def _connection(
            self, write: bool = False
        ) -> AbstractAsyncContextManager[AsyncConnection[DictRow]]: ...

        async def claim_due(
            self,
            worker_id: str,
            now: float,
            lease_seconds: float,
            limit: int,
            types: Sequence[str] | None = None,
            limits: Mapping[str, TypeLimit] | None = None,
        ) -> list[WorkflowRow]: ...

    async def _pg_one(
        self, query: str, params: dict[str, Any], write: bool = False
    ) -> DictRow | None:
        async with self._connection(write) as conn:
            return await (await conn.execute(query, params)).fetchone()

    async def _pg_rows(self, query: str, params: dict[str, Any]) -> AsyncIterator[DictRow]:
        async with self._connection() as conn:
            for r in await (await conn.execute(query, params)).fetchall():
                yield r

    async def put_schedule(self, schedule: ScheduleRecord) -> ScheduleRecord:
        from statewright.store.postgres_rows import dumps

        row = await self._pg_one(QP["schedule_put"], _put_params(schedule, dumps), write=True)
        assert row is not None
        return _schedule(row)

    async def get_schedule(self, schedule_id: str) -> ScheduleRecord | None:
        row = await self._pg_one(QP["schedule_get"], {"id": schedule_id})
        return None if row is None else _schedule(row)

    async def list_schedules(
        self, tenant: str | None = None, *, after: str | None = None, limit: int | None = None
    ) -> list[ScheduleRecord]:
        if after is None and limit is None:
            query: str = QP["schedule_list"]
            params: dict[str, Any] = {"tenant": tenant}
        else:
            query = QP["schedule_page"]
            params = {"tenant": tenant, "after": after, "limit": limit}
        return [_schedule(r) async for r in self._pg_rows(query, params)]

    async def delete_schedule(self, schedule_id: str) -> bool:
        async with self._connection(write=True) as conn:
            cur = await conn.execute(QP["schedule_delete"], {"id": schedule_id})
            return cur.rowcount > 0

    async def due_schedules(self, now: float, limit: int = 100) -> list[ScheduleRecord]:
        params = {"now": float(now), "limit": limit}
        return [_schedule(r) async for r in self._pg_rows(QP["schedule_due"], params)]

    async def advance_schedule(
        self,
        schedule_id: str,
        expected_next_at: float,
        next_at: float,
        *,
        at: float,
        last_tick: float | None = None,
        last_workflow_id: str | None = None,
        error: str | None = None,
    ) -> bool:
        params = _advance_params(
            schedule_id, expected_next_at, next_at, at, last_tick, last_workflow_id, error
        )
        async with self._connection(write=True) as conn:
            cur = await conn.execute(QP["schedule_advance"], params)
            return cur.rowcount == 1

    async def pause_schedule(
        self, schedule_id: str, paused: bool, next_at: float, at: float
    ) -> ScheduleRecord | None:
        params = {"id": schedule_id, "paused": paused, "next_at": float(next_at), "at": float(at)}
        row = await self._pg_one(QP["schedule_pause"], params, write=True)
        return None if row is None else _schedule(row)

    async def _claim_limited(
        self,
        worker_id: str,
        now: float,
        lease_seconds: float,
        limit: int,
        types: Sequence[str] | None,
        limits: Mapping[str, TypeLimit],
    ) -> list[WorkflowRow]:
        from statewright.store.postgres_rows import workflow_row

        limited, free = _split(types, limits)
        rows: list[WorkflowRow] = []
        now = float(now)
        for name in limited:
            if len(rows) >= limit:
                break
            lim = limits[name]
            base: dict[str, Any] = {"type": name, "now": now}
            async with self._connection(write=True) as conn, conn.transaction():
                cur = await conn.execute(QP["limit_bucket"], {**base, "burst": bucket_size(lim)})
                bucket = await cur.fetchone()
                assert bucket is not None
                leased = 0
                if lim.max_concurrent is not None:
                    counted = await (await conn.execute(QP["limit_leased"], base)).fetchone()
                    leased = int(counted["n"]) if counted is not None else 0
                n, tokens, refilled = allowance(
                    lim, limit - len(rows), now, bucket["tokens"], bucket["refilled_at"], leased
                )
                if n <= 0:
                    continue
                params = {**base, "worker": worker_id, "until": now + lease_seconds, "limit": n}
                got = await (await conn.execute(QP["claim_due_of_type"], params)).fetchall()
                if lim.max_per_second is not None:
                    await conn.execute(
                        QP["limit_refill"],
                        {"type": name, "tokens": tokens - len(got), "refilled_at": refilled},
                    )
            rows += [workflow_row(r) for r in got]
        if free and len(rows) < limit:
            # Not claim_due_of_types: that one reads workflows_due in order, past the due
            # backlog of the throttled types ahead.
            params = {
                "worker": worker_id,
                "until": now + lease_seconds,
                "now": now,
                "limit": limit - len(rows),
                "types": free,
            }
            async with self._connection(write=True) as conn:
                got = await (await conn.execute(QP["claim_due_of_free_types"], params)).fetchall()
            rows += [workflow_row(r) for r in got]
        return sorted(rows, key=lambda w: (w.next_due_at or 0, w.id))
