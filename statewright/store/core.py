"""The core part (:class:`~statewright.store.protocol.Store`) as both SQL stores implement it:
the methods that are one statement, written once, and the shared half of the others (their
parameters, their answers, their errors) around a hook each dialect writes.

The claim of limited workflow types (``claim_due`` with ``limits``) runs in one transaction
per type (:func:`claim_type_plan`): it first takes the type's row of ``type_limits``
(made on first use; on PostgreSQL the upsert locks it until commit, on SQLite the write
transaction is the only writer anyway), so the claims of one limited type are serialized
across every worker process; then counts the type's live leases (a lapsed lease, from a
frozen or dead worker, does not count), refills the type's token bucket by the time passed
(:func:`allowance`), leases at most what both allow, and writes the bucket back. Unlimited
types keep the one-statement claim untouched.
"""

from __future__ import annotations

import math
import random
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

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
)
from statewright.store import params as p
from statewright.store import sqlbuild
from statewright.store.base import Plan, SQLStore
from statewright.store.protocol import fork_source_busy
from statewright.store.rows import Row, cancel_request
from statewright.types import (
    CancelRequest,
    DeferWrite,
    InboxItem,
    Lease,
    StepFinish,
    StepOutcome,
    StepRecord,
    TimerRecord,
    TimerSpec,
    TransitionRecord,
    TransitionWrite,
    TypeLimit,
    WorkflowRow,
)


def due_order(w: WorkflowRow) -> tuple[float, str]:
    """The order of a claim's rows: by due time, then id."""
    return (w.next_due_at or 0, w.id)


def wakes_workers(w: WorkflowRow) -> bool:
    """Whether a write that left ``w`` should wake the workers: it is due (now or later) and
    no worker holds it. A row whose lease the write kept (a handler chaining to the next
    state's) is its holder's to run; waking every worker for it cost each a claim and a cancel
    check for nothing. (``apply_transition``'s NOTIFY on PostgreSQL says the same in SQL.)"""
    return w.next_due_at is not None and w.lease_owner is None


def other_visit(found: Row, state: str, entered_at: float) -> bool:
    """The workflow ``found`` (a ``timer_visit`` row) is no longer in the visit of ``state``
    entered at ``entered_at`` that a timer was scheduled for (or it finished)."""
    return bool(
        found["terminal"] or found["state"] != state or found["state_entered_at"] != entered_at
    )


def row_refusal(found: Row | None, write: TransitionWrite | DeferWrite) -> StatewrightError | None:
    """Why a compare-and-swap matched nothing, as far as the workflow's row tells (``found``:
    its ``write_refusal`` row): a lost lease first (the worker must stop), then a newer
    version; None when the row refuses nothing (the dialect looks further)."""
    if found is None:
        return WorkflowNotFound(write.workflow_id)
    lease = write.lease
    if lease is not None and (found["lease_owner"], found["fence"]) != (lease.owner, lease.fence):
        return LeaseLost(write.workflow_id)
    if found["version"] != write.expected_version:
        return conflict(found, write)
    return None


def conflict(found: Row, write: TransitionWrite | DeferWrite) -> VersionConflict:
    """The write meets another version than it expected (``found``: the row as it is), or is
    refused for a reason that reading the row again settles."""
    return VersionConflict(write.workflow_id, write.expected_version, found["version"])


def fork_refusal(found: Row | None, fork_of: tuple[str, int]) -> StatewrightError | None:
    """Why a fork may not be created (``found``: its source's ``fork_source`` row, read in the
    creating transaction): the source is gone, or a worker holds it or claimed it since it was
    read at the fence ``fork_of`` names. None: it may."""
    source, fence = fork_of
    if found is None:
        return WorkflowNotFound(source)
    if found["lease_owner"] is not None or found["fence"] != fence:
        return WorkflowBusy(fork_source_busy(source))
    return None


def parent_refusal(found: Row | None, check: p.Params) -> StatewrightError | None:
    """Why a child may not be created (``found``: its parent's ``parent_of_child`` row, read
    in the creating transaction): the parent is gone, has ended, or is no longer held by the
    lease its handler starts the child under. None: it may."""
    parent = check["id"]
    if found is None:
        return WorkflowNotFound(parent)
    if found["terminal"]:
        return WorkflowFinished(parent, found["state"])
    if check["owner"] is not None and (
        found["lease_owner"] != check["owner"] or found["fence"] != check["fence"]
    ):
        return LeaseLost(parent, "its lease ended before the child was started")
    return None


def key_used_earlier(write: TransitionWrite) -> IdempotencyKeyReused:
    """A transition whose idempotency key an earlier entry of the workflow's log has."""
    assert write.idempotency_key is not None
    return IdempotencyKeyReused(write.workflow_id, write.idempotency_key, "an earlier transition")


def key_used_for_event(
    workflow_id: str, key: str, event: str, version: int
) -> IdempotencyKeyReused:
    """An input posted with a key that an event of the workflow's log already used."""
    return IdempotencyKeyReused(workflow_id, key, f"event {event!r} (version {version})")


def key_used_for_input(workflow_id: str, key: str, name: str, item: int) -> IdempotencyKeyReused:
    """An event sent with a key that an input of the workflow already used."""
    return IdempotencyKeyReused(workflow_id, key, f"input {name!r} #{item}")


def step_refused(finish: StepFinish, current: Row | None) -> StatewrightError:
    """Why a step attempt's outcome was not recorded (``current``: the ledger's entry)."""
    if current is None:
        return StoreError(f"no step {finish.key!r} in the ledger")
    return LeaseLost(
        current["workflow_id"],
        f"step {finish.key!r}: attempt {finish.attempt} may no longer record its outcome (the "
        f"ledger has attempt {current['attempts']}, {current['status']}, or the lease is gone)",
    )


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


def claim_type_plan(
    queries: Mapping[str, str], limit: TypeLimit, claim: p.Params
) -> Plan[list[Row]]:
    """One limited type's claim (``claim``: its parameters, with ``type``), run in a
    transaction of its own: take the type's bucket row (made on first use), count its live
    leases, lease at most what both allow, and write the bucket back (see the module)."""
    (bucket,) = yield queries["limit_bucket"], {**claim, "burst": bucket_size(limit)}
    leased = 0
    if limit.max_concurrent is not None:
        counted = yield queries["limit_leased"], claim
        leased = int(counted[0]["n"]) if counted else 0
    n, tokens, refilled = allowance(
        limit, claim["limit"], claim["now"], bucket["tokens"], bucket["refilled_at"], leased
    )
    if n <= 0:
        return []
    got: list[Row] = yield queries["claim_due_of_type"], {**claim, "limit": n}
    if limit.max_per_second is not None:
        refill = {"type": claim["type"], "tokens": tokens - len(got), "refilled_at": refilled}
        yield queries["limit_refill"], refill
    return got


def split_limited(
    types: Sequence[str] | None, limits: Mapping[str, TypeLimit]
) -> tuple[list[str], list[str]]:
    """The limited types of a claim (in random order: none always first), and the others."""
    if types is None:
        raise InvalidInput("a claim with limits names the types it claims")
    limited = [t for t in types if t in limits]
    random.shuffle(limited)
    return limited, [t for t in types if t not in limits]


class CoreSQL(SQLStore):
    """The core part over a SQL dialect (the dialect's own methods and hooks complete it)."""

    # -- the dialect's hooks ------------------------------------------------------------------

    @abstractmethod
    def _claim_query(self, types: Sequence[str] | None, params: p.Params, *, rest: bool) -> str:
        """The claim of the due workflows of ``types`` (all: None), setting what it binds
        in ``params``; ``rest``: the unlimited types of a claim with limits."""

    @abstractmethod
    def _held(self, held: Mapping[str, int]) -> p.Params:
        """``renew_leases``'s parameters for the leases held (workflow id -> fence)."""

    @abstractmethod
    async def _freed(self, sql: str, params: p.Params) -> int:
        """Run a ``break_leases`` statement; how many leases it cleared."""

    @abstractmethod
    async def _flag_cancel(self, params: p.Params) -> Row | None:
        """Record a cancel request; the workflow's row after it (None: no such workflow)."""

    @abstractmethod
    async def _progress(self, params: p.Params) -> tuple[bool, bool]:
        """Record a progress report: ``(found, held)`` (the workflow exists; the lease held
        and the report was written)."""

    @abstractmethod
    async def _add_definition(self, params: p.Params) -> tuple[str, Any]:
        """Record a definition unless one is; the recorded ``(fingerprint, document)``."""

    @abstractmethod
    async def _arm_timer(
        self, params: p.Params, visit: tuple[str, float], at: float
    ) -> Row | None:
        """Arm the timer of ``params`` (see :meth:`schedule_timer`); None when the workflow
        left the visit ``(state, entered_at)``."""

    @abstractmethod
    async def _post(self, params: p.Params) -> tuple[InboxItem, bool]:
        """Post an input (see :meth:`post_input`), waking this process's workers."""

    # -- workflows and their log --------------------------------------------------------------

    async def get_workflow(self, workflow_id: str) -> WorkflowRow | None:
        row = await self._one(self.queries["get_workflow"], {"id": workflow_id})
        return None if row is None else self.rows.workflow(row)

    async def children(
        self, parent_id: str, *, after: str = "", limit: int = 100
    ) -> list[WorkflowRow]:
        values = {"parent": parent_id, "after": after, "limit": limit}
        return [self.rows.workflow(r) for r in await self._all(self.queries["children"], values)]

    async def orphans(
        self, limit: int = 100, after: tuple[str, str] | None = None
    ) -> list[WorkflowRow]:
        parent, wid = after or ("", "")
        values = {"limit": limit, "after_parent": parent, "after_id": wid}
        rows = await self._all(self.queries["orphans"], values)
        return [self.rows.workflow(r) for r in rows]

    async def history(
        self, workflow_id: str, after_version: int = 0, limit: int | None = None
    ) -> list[TransitionRecord]:
        params = {"id": workflow_id, "after": after_version, "limit": self.enc.limit(limit)}
        return await self._read_many(self.queries["history"], params, self.rows.transition)

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
        await self._rowcount(self.queries["record_rejection"], params)

    # -- workers: claims, leases and recovery -------------------------------------------------

    async def claim_due(
        self,
        worker_id: str,
        now: float,
        lease_seconds: float,
        limit: int,
        types: Sequence[str] | None = None,
        limits: Mapping[str, TypeLimit] | None = None,
    ) -> list[WorkflowRow]:
        if limits:  # limited types: one serialized claim each
            return await self._claim_limited(worker_id, now, lease_seconds, limit, types, limits)
        params = p.claim(worker_id, now, lease_seconds, limit)
        rows = await self._all(self._claim_query(types, params, rest=False), params, write=True)
        return sorted(map(self.rows.workflow, rows), key=due_order)

    async def _claim_limited(
        self,
        worker_id: str,
        now: float,
        lease_seconds: float,
        limit: int,
        types: Sequence[str] | None,
        limits: Mapping[str, TypeLimit],
    ) -> list[WorkflowRow]:
        limited, free = split_limited(types, limits)
        rows: list[WorkflowRow] = []
        for name in limited:
            if len(rows) >= limit:
                break
            params = p.claim(worker_id, now, lease_seconds, limit - len(rows)) | {"type": name}
            plan = partial(claim_type_plan, self.queries, limits[name], params)
            rows += map(self.rows.workflow, await self._write_plan(plan, rows=True))
        if free and len(rows) < limit:
            params = p.claim(worker_id, now, lease_seconds, limit - len(rows))
            sql = self._claim_query(free, params, rest=True)
            rows += map(self.rows.workflow, await self._all(sql, params, write=True))
        return sorted(rows, key=due_order)

    async def renew_leases(
        self, worker_id: str, held: Mapping[str, int], until: float
    ) -> list[str]:
        params = {"worker": worker_id, "until": float(until), **self._held(held)}
        rows = await self._all(self.queries["renew_leases"], params, write=True)
        return [r["id"] for r in rows]

    async def release_lease(self, workflow_id: str, lease: Lease) -> None:
        params = {"id": workflow_id, "worker": lease.owner, "fence": lease.fence}
        await self._rowcount(self.queries["release_lease"], params)

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
            "expired_before": p.opt_float(expired_before),
        }
        row = await self._one(self.queries["take_over"], params, write=True)
        return None if row is None else self.rows.workflow(row)

    async def expired_leases(self, now: float, limit: int = 100) -> list[WorkflowRow]:
        rows = await self._all(self.queries["expired_leases"], {"now": float(now), "limit": limit})
        return [self.rows.workflow(r) for r in rows]

    async def leased_by(self, owner: str) -> list[WorkflowRow]:
        rows = await self._all(self.queries["leased_by"], {"owner": owner})
        return [self.rows.workflow(r) for r in rows]

    async def lease_owners(self) -> list[str]:
        return [r["lease_owner"] for r in await self._all(self.queries["lease_owners"], {})]

    async def break_leases(
        self,
        owner: str,
        ids: Sequence[str] | None = None,
        *,
        expired_before: float | None = None,
    ) -> int:
        params: p.Params = {"owner": owner, "expired_before": p.opt_float(expired_before)}
        if ids is None:
            n = await self._freed(self.queries["break_leases"], params)
        else:
            params["ids"] = self.enc.array(ids)
            n = await self._freed(self.queries["break_leases_of"], params)
        if n:
            self._wake()
        return n

    # -- cancel, progress and definitions -----------------------------------------------------

    async def request_cancel(self, workflow_id: str, request: CancelRequest) -> WorkflowRow:
        row = await self._flag_cancel(p.cancel(workflow_id, request))
        if row is None:
            raise WorkflowNotFound(workflow_id)
        self._wake()
        return self.rows.workflow(row)

    async def cancel_requests(self, ids: Sequence[str]) -> dict[str, CancelRequest]:
        rows = await self._all(self.queries["cancel_requests"], {"ids": self.enc.array(ids)})
        return {r["id"]: request for r in rows if (request := cancel_request(r)) is not None}

    async def record_progress(
        self, workflow_id: str, progress: dict[str, Any], at: float, lease: Lease | None = None
    ) -> None:
        found, held = await self._progress(p.progress(workflow_id, progress, lease, self.enc))
        if not found:
            raise WorkflowNotFound(workflow_id)
        if not held:
            raise LeaseLost(workflow_id)

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
            "document": self.enc.json(document),
            "at": at,
        }
        if not replace:
            return await self._add_definition(params)
        await self._rowcount(self.queries["replace_definition"], params)
        return fingerprint, dict(document)

    # -- timers -------------------------------------------------------------------------------

    async def timers(
        self,
        workflow_id: str,
        *,
        after: tuple[float, int] | None = None,
        limit: int | None = None,
    ) -> list[TimerRecord]:
        if after is None and limit is None:
            rows = await self._all(self.queries["timers"], {"id": workflow_id})
        else:
            params = {
                "id": workflow_id,
                "after_due": None if after is None else float(after[0]),
                "after_id": None if after is None else int(after[1]),
                "limit": self.enc.limit(limit),
            }
            rows = await self._all(self.queries["timers_page"], params)
        return [self.rows.timer(r) for r in rows]

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
        params = p.timer(workflow_id, timer, scheduled_by, self.enc)
        armed = await self._arm_timer(params, (state, entered_at), at)
        if armed is None:
            return None
        self._wake()
        return self.rows.timer(armed)

    # -- step ledger --------------------------------------------------------------------------

    async def step_finish(self, finish: StepFinish, lease: Lease | None = None) -> StepRecord:
        params = p.step_finish(finish, self.enc) | p.lease(lease)
        row, current = await self._or_else(
            self.queries["finish_step"], params, self.queries["get_step"], {"key": finish.key}
        )
        if row is None:
            raise step_refused(finish, current)
        return self.rows.step(row)

    async def resolve_step(
        self,
        key: str,
        status: str,
        result: Any,
        outcome: StepOutcome | None,
        note: str,
        at: float,
    ) -> StepRecord:
        params = p.step_verdict(key, status, result, outcome, note, at, self.enc)
        row, current = await self._or_else(
            self.queries["resolve_step"], params, self.queries["get_step"], {"key": key}
        )
        if row is not None:
            return self.rows.step(row)
        if current is None:
            raise StepNotFound(f"no step {key!r} in the ledger", key=key)
        if current["status"] == "done":
            raise StepDone(f"step {key!r} is done already: its result stands", key=key)
        raise WorkflowBusy(f"a worker holds the workflow of step {key!r}: try again later")

    async def get_step(self, key: str) -> StepRecord | None:
        row = await self._one(self.queries["get_step"], {"key": key})
        return None if row is None else self.rows.step(row)

    async def steps(
        self,
        workflow_id: str,
        after: tuple[float, str] | None = None,
        limit: int | None = None,
    ) -> list[StepRecord]:
        sql, params = sqlbuild.steps(workflow_id, self.dialect, after, limit)
        return await self._read_many(sql, params, self.rows.step)

    # -- inbox --------------------------------------------------------------------------------

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
            "payload": self.enc.json(payload),
            "at": float(at),
            "key": idempotency_key,
            "wake_state": wake_in_state,
        }
        return await self._post(params)

    async def input_by_key(self, workflow_id: str, idempotency_key: str) -> InboxItem | None:
        row = await self._one(
            self.queries["input_by_key"], {"id": workflow_id, "key": idempotency_key}
        )
        return None if row is None else self.rows.inbox(row)

    async def next_input(
        self, workflow_id: str, name: str | None = None, skip: Sequence[int] = ()
    ) -> InboxItem | None:
        params = {"id": workflow_id, "name": name, "skip": self.enc.array(skip)}
        row = await self._one(self.queries["next_input"], params)
        return None if row is None else self.rows.inbox(row)
