"""Workflows and their log on PostgreSQL: create, transition, defer and the inbox.

Each transition is one statement: CTEs do the compare-and-swap, the log append, the timer
changes, the inbox consumption and the wake-up together (``apply_transition`` in
``sql/postgres/queries.sql``). Concurrent transitions of one store share a round trip and a
commit (group commit, :mod:`.batch`).
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import DictRow

from statewright.errors import (
    StatewrightError,
    StoreError,
    WorkflowFinished,
    WorkflowNotFound,
    WorkflowPruned,
)
from statewright.store import core, params
from statewright.store.postgres.base import Conn, PostgresBase, Q, rollback
from statewright.store.postgres.batch import SNAPSHOT_ROUNDS
from statewright.store.postgres.params import (
    timer_change_params,
    timer_params,
    transition_params,
)
from statewright.store.postgres.read import ROWS
from statewright.store.postgres.searched import create_name, query_name
from statewright.store.postgres.stepped import run_steps_awaited
from statewright.store.postgres.timers import set_next_due
from statewright.types import (
    DeferWrite,
    InboxItem,
    NewWorkflow,
    TransitionRecord,
    TransitionWrite,
    WorkflowRow,
)

ENC = params.POSTGRES
PRUNED_ID = "SWPRU"
"""The SQLSTATE of a start of a pruned workflow's id (migration 0016_pruned_ids)."""


def _steps(new: NewWorkflow) -> dict[str, list[Any]]:
    """A new workflow's done steps (a fork's copies) as parallel arrays."""
    return {
        "step_key": [s.key for s in new.steps],
        "step_name": [s.step for s in new.steps],
        "step_result": [ENC.optional_json(s.result) for s in new.steps],
        "step_attempts": [s.attempts for s in new.steps],
        "step_started": [float(s.started_at) for s in new.steps],
        "step_finished": [params.opt_float(s.finished_at) for s in new.steps],
    }


async def _create_checked(conn: Conn, new: NewWorkflow, values: dict[str, Any]) -> DictRow | None:
    """A fork's or a child's create, after checking (and locking until the commit) that the
    fork's source is still unleased at the fence it was read at (see
    :attr:`NewWorkflow.fork_of`), or that the child's parent is live and held by the lease
    given (:attr:`NewWorkflow.parent`). An existing id is left alone, unchecked."""
    exists = await (await conn.execute(Q["version_of"], values)).fetchone()
    if exists is None and new.fork_of is not None:
        found = await (await conn.execute(Q["fork_source"], {"id": new.fork_of[0]})).fetchone()
        if (refused := core.fork_refusal(found, new.fork_of)) is not None:
            raise refused
    if exists is None and new.parent is not None:
        check = params.parent_check(new)
        found = await (await conn.execute(Q["parent_of_child"], check)).fetchone()
        if (refused := core.parent_refusal(found, check)) is not None:
            raise refused
        if found is not None and not found["has_children"]:
            await conn.execute(Q["mark_parent"], check)
    return await (await conn.execute(Q[create_name(new.search)], values)).fetchone()


async def _notify_parent(conn: Conn, parent_id: str, notice: dict[str, Any]) -> None:
    """Arm a child's end on its live parent (see :attr:`TransitionWrite.notice`), in the
    child's transaction: the parent's row is locked (``timer_visit``) as for a timer
    scheduled on its own, after the child's."""
    timer = notice | {"id": parent_id, "every": None, "keep": True}
    found = await (await conn.execute(Q["timer_visit"], timer)).fetchone()
    if found is None or found["terminal"]:
        return  # the parent ended or is gone: nobody waits for the notice
    old = await (await conn.execute(Q["take_timer_key"], timer)).fetchone()
    await conn.execute(Q["insert_timer"], timer)
    await set_next_due(
        conn, parent_id, found, None if old is None else old["due_at"], timer["due_at"]
    )


class PostgresTransitions(PostgresBase, core.CoreSQL):
    """Creating workflows, their transitions and deferrals, and their inbox."""

    async def create_workflow(self, new: NewWorkflow) -> tuple[WorkflowRow, bool]:
        values = params.new_workflow(new, ENC) | _steps(new) | timer_params(new.timers)
        async with self._connection(write=True) as conn:
            try:
                if new.fork_of is None and new.parent is None:
                    row = await (await conn.execute(Q[create_name(new.search)], values)).fetchone()
                else:
                    async with conn.transaction():
                        row = await _create_checked(conn, new, values)
            except psycopg.Error as exc:
                if exc.sqlstate == PRUNED_ID:  # its trigger (migration 0016_pruned_ids)
                    raise WorkflowPruned(new.id) from None
                raise
            if row is None:
                # Another transaction created it after this statement's snapshot was taken.
                row = await (await conn.execute(Q["get_workflow"], values)).fetchone()
                if row is None:
                    raise StoreError(f"workflow {new.id!r} could be neither created nor read")
        result = ROWS.workflow(row)
        created = bool(row.get("created"))
        if created and result.next_due_at is not None:
            self._wake()
        return result, created

    async def apply_transition(self, write: TransitionWrite) -> WorkflowRow:
        if write.notice is not None:
            return await self._apply_with_notice(write)
        # Alone, one statement; concurrent ones share a transaction (see .batch).
        return await self.batcher.apply(write)

    async def _apply_alone(self, write: TransitionWrite, values: dict[str, Any]) -> WorkflowRow:
        if write.effects:
            return await self._apply_stepped(write, values)
        async with self._connection(write=True) as conn:
            row = await self._cas(conn, write, values)
            return await self._written(conn, row, write)

    async def _apply_stepped(self, write: TransitionWrite, values: dict[str, Any]) -> WorkflowRow:
        """A transition with transactional steps, alone: the statement and the steps in one
        transaction (a step raising rolls it back: TransactionFailed)."""
        async with self._connection(write=True) as conn:
            try:
                async with conn.transaction():
                    row = await self._cas(conn, write, values)
                    if row is not None:
                        await run_steps_awaited(conn, write.effects)
            except BaseException:
                await rollback(conn)
                raise
            return await self._written(conn, row, write)

    async def _cas(
        self, conn: Conn, write: TransitionWrite, values: dict[str, Any]
    ) -> DictRow | None:
        """``apply_transition``'s row, or None when its compare-and-swap matched nothing."""
        for _ in range(SNAPSHOT_ROUNDS):
            try:
                query = Q[query_name(write.search)]
                row = await (await conn.execute(query, values)).fetchone()
            except psycopg.errors.UniqueViolation as exc:
                diag = exc.diag.constraint_name or ""
                if write.idempotency_key is not None and "idempotency" in diag:
                    raise core.key_used_earlier(write) from exc
                raise
            if row is not None:
                break
            # Refused by the row-version check alone (a concurrent update of the row,
            # e.g. a timer scheduled on its own, since this statement's snapshot)? Then
            # run it again on a fresh snapshot; any other refusal is reported.
            if await self._refusal(conn, write, retryable=True) is not None:
                break
        return row

    async def _apply_with_notice(self, write: TransitionWrite) -> WorkflowRow:
        """A child's terminal transition and its notice to the parent, in one transaction
        (rare: once per child, so outside the group commit). Its row lock comes before the
        parent's; a deadlock with a writer that took them the other way is run again."""
        values = transition_params(write)
        notice = params.notice(write, ENC)
        for round_ in range(SNAPSHOT_ROUNDS):
            try:
                async with self._connection(write=True) as conn:
                    try:
                        async with conn.transaction():
                            row = await self._cas(conn, write, values)
                            if row is not None and row["parent_id"] is not None:
                                await _notify_parent(conn, row["parent_id"], notice)
                            if row is not None and write.effects:
                                await run_steps_awaited(conn, write.effects)
                    except BaseException:
                        await rollback(conn)
                        raise
                    after = await self._written(conn, row, write)
            except psycopg.errors.DeadlockDetected:
                if round_ == SNAPSHOT_ROUNDS - 1:
                    raise
                continue
            self._wake()
            return after
        raise AssertionError("unreachable")

    async def defer(self, write: DeferWrite) -> WorkflowRow:
        values = params.deferral(write) | timer_change_params(write)
        values["inbox_ids"] = list(write.consume_inbox_ids)
        values["wake_skip"] = list(write.wake_input[1]) if write.wake_input else []
        async with self._connection(write=True) as conn:
            if write.wake_input is None:
                row = await self._defer(conn, write, values)
            else:
                # A suspended wait: the row locked first, so that the deferral's own snapshot
                # sees an input whose post held the row (post_input locks it) when it found it
                # leased; a post after the lock waits, then finds it released and wakes it.
                async with conn.transaction():
                    await conn.execute(Q["lock_for_wake"], values)
                    row = await self._defer(conn, write, values)
            return await self._written(conn, row, write)

    async def _defer(self, conn: Conn, write: DeferWrite, values: params.Params) -> DictRow | None:
        row: DictRow | None = None
        for _ in range(SNAPSHOT_ROUNDS):
            row = await (await conn.execute(Q["defer_workflow"], values)).fetchone()
            if row is not None:
                break
            if await self._refusal(conn, write, retryable=True) is not None:
                break
        return row

    async def _written(
        self, conn: Conn, row: DictRow | None, write: TransitionWrite | DeferWrite
    ) -> WorkflowRow:
        """The row a compare-and-swap returned, or why it matched nothing; wakes the workers
        of this process when the workflow is due."""
        if row is None:
            refusal = await self._refusal(conn, write)
            assert refusal is not None
            raise refusal
        after = ROWS.workflow(row)
        if core.wakes_workers(after):
            self._wake()
        return after

    async def _refusal(
        self, conn: Conn, write: TransitionWrite | DeferWrite, *, retryable: bool = False
    ) -> StatewrightError | None:
        """Why a compare-and-swap matched no row (one more round trip, on failure only); a
        lost lease first: the worker must stop. With ``retryable``, None when nothing but
        the statement's snapshot refused it (worth running again)."""
        workflow_id, inbox_ids = write.workflow_id, write.consume_inbox_ids
        asked = {
            "id": workflow_id,
            "inbox_ids": list(inbox_ids),
            "fired_timer_id": write.fired_timer_id,
        }
        found = await (await conn.execute(Q["write_refusal"], asked)).fetchone()
        if (refused := core.row_refusal(found, write)) is not None:
            return refused
        assert found is not None
        if found["unconsumed"] != len(set(inbox_ids)):
            return StoreError(f"inbox items {list(inbox_ids)} of {workflow_id!r} were consumed")
        if not found["fired_pending"]:
            # The timer it fires was replaced or cancelled meanwhile: read the timers again.
            return core.conflict(found, write)
        if retryable:
            return None
        # Nothing we can see refused it: a concurrent writer moved and restored it? Report a
        # conflict so the caller re-reads.
        return core.conflict(found, write)

    async def transition_by_key(
        self, workflow_id: str, idempotency_key: str
    ) -> TransitionRecord | None:
        by_key = {"id": workflow_id, "key": idempotency_key}
        rows = await self._all(Q["transition_by_key"], by_key)
        for row in rows:
            if row["seq"] is not None:
                return ROWS.transition(row)
        for row in rows:  # the key posted an input instead: it names that request
            raise core.key_used_for_input(
                workflow_id, idempotency_key, row["input_name"], row["input_id"]
            )
        return None

    async def _post(self, values: params.Params) -> tuple[InboxItem, bool]:
        workflow_id, key = values["id"], values["key"]
        async with self._connection(write=True) as conn:
            row = await (await conn.execute(Q["post_input"], values)).fetchone()
            if row is not None and row["used_event"] is not None and key:
                raise core.key_used_for_event(
                    workflow_id, key, row["used_event"], row["used_version"]
                )
            if row is not None and row["item"] is None and key is not None:
                # A concurrent post with the same key won the insert after our snapshot.
                raced = await (await conn.execute(Q["input_by_key"], values)).fetchone()
                if raced is not None:
                    return ROWS.inbox(raced), False
        if row is None:
            raise WorkflowNotFound(workflow_id)
        if row["item"] is None:
            raise WorkflowFinished(workflow_id, row["state"])
        if row["created"]:
            self._wake()
        return ROWS.inbox(row["item"]), bool(row["created"])
