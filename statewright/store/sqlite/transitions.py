"""Workflows and their log on SQLite: create, transition, defer and the inbox, each one write
run on the connection's thread inside a savepoint of a shared transaction (group commit,
:mod:`.conn`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from statewright import jsonvalue
from statewright.errors import (
    LeaseLost,
    StatewrightError,
    StoreError,
    WorkflowFinished,
    WorkflowNotFound,
    WorkflowPruned,
)
from statewright.store import core, params
from statewright.store.sqlite.base import ROWS, Q, SQLiteBase
from statewright.store.sqlite.timers import add_timers, change_timers, set_next_due
from statewright.store.transactional import run_steps
from statewright.types import (
    CancelRequest,
    DeferWrite,
    InboxItem,
    NewWorkflow,
    StepFinish,
    TransitionRecord,
    TransitionWrite,
    WorkflowRow,
)

ENC = params.SQLITE


def _refusal(conn: sqlite3.Connection, w: TransitionWrite | DeferWrite) -> StatewrightError:
    """Why a compare-and-swap matched nothing (a lost lease first: the worker must stop)."""
    found = conn.execute(Q["write_refusal"], {"id": w.workflow_id}).fetchone()
    return core.row_refusal(found, w) or core.conflict(found, w)


def _consume(conn: sqlite3.Connection, workflow_id: str, ids: Sequence[int], at: float) -> None:
    found = {"id": workflow_id, "ids": ENC.array(ids), "at": at}
    if conn.execute(Q["consume_inputs"], found).rowcount != len(set(ids)):
        # Raised inside the write's savepoint: everything it did rolls back.
        raise StoreError(f"inbox items {list(ids)} of {workflow_id!r} were already consumed")


def _finish_with(
    conn: sqlite3.Connection, workflow_id: str, finish: StepFinish, values: params.Params
) -> None:
    """A step's outcome carried by a transition: the compare-and-swap proved the lease in
    this same transaction, so only the attempt is checked here."""
    if conn.execute(Q["finish_carried_step"], values).rowcount != 1:
        # Raised inside the write's savepoint: the transition rolls back with it.
        raise LeaseLost(
            workflow_id,
            f"step {finish.key!r}: attempt {finish.attempt} is no longer executing",
        )


def _create(conn: sqlite3.Connection, new: NewWorkflow, values: params.Params) -> bool:
    """Insert a new workflow, its first log entry, its steps (a fork's) and its timers;
    False when a workflow of that id exists (left alone)."""
    if conn.execute(Q["is_pruned"], values).fetchone() is not None:
        raise WorkflowPruned(new.id)  # (a tombstone: no row of that id is left)
    if new.fork_of is not None and conn.execute(Q["version_of"], values).fetchone() is None:
        found = conn.execute(Q["fork_source"], {"id": new.fork_of[0]}).fetchone()
        if (refused := core.fork_refusal(found, new.fork_of)) is not None:
            raise refused
    if new.parent is not None and conn.execute(Q["version_of"], values).fetchone() is None:
        check = params.parent_check(new)
        found = conn.execute(Q["parent_of_child"], check).fetchone()
        if (refused := core.parent_refusal(found, check)) is not None:
            raise refused
        if found is not None and not found["has_children"]:
            conn.execute(Q["mark_parent"], check)
    if conn.execute(Q["insert_workflow"], values).rowcount != 1:
        return False
    first = {
        "workflow_id": new.id,
        "version": 1,
        "from_state": None,
        "to_state": new.state,
        "messages": None,
    }
    if values["payload"] is None:
        first["payload"] = values["context"]
    conn.execute(Q["append_transition"], values | first | {"context_patch": values["context"]})
    conn.executemany(
        Q["insert_done_step"],
        [
            {
                "key": step.key,
                "workflow_id": new.id,
                "step": step.step,
                "result": ENC.optional_json(step.result),
                "attempts": step.attempts,
                "started_at": step.started_at,
                "finished_at": step.finished_at,
            }
            for step in new.steps
        ],
    )
    if new.search:
        conn.executemany(Q["put_search_attribute"], params.search_rows(new.id, new.search))
    if new.timers:
        add_timers(conn, new.id, new.timers)
        conn.execute(Q["refresh_next_due"], values)
    return True


def _after(w: TransitionWrite, read: tuple[Any, ...], context: str) -> WorkflowRow:
    """The row after ``w`` applied: what the write set, and the rest as ``after_transition``
    read it back (a tuple, by position: a named ``sqlite3.Row`` costs as much as the read)."""
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
        parent,
        parent_key,
        has_children,
    ) = read
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
        parent=parent,
        parent_key=parent_key,
        has_children=bool(has_children),
    )


def _timer_changes(w: TransitionWrite) -> params.Params:
    """What the compare-and-swap needs to know of the write's timer changes to set
    ``next_due_at`` itself (see ``cas_update_workflow``)."""
    drop = params.dropped_keys(w)
    return {
        "clear_timers": bool(w.clear_timers),
        "fired_timer_id": w.fired_timer_id,
        "drop_keys": ENC.array(drop) if drop else None,
        "new_due": min((float(t.due_at) for t in w.add_timers), default=None),
    }


@dataclass(frozen=True)
class _Bound:
    """A transition's statement parameters, made (and its JSON encoded) before it is queued:
    not on the connection's thread while it holds the write lock, and bad input fails
    before any I/O."""

    values: params.Params
    entry: params.Params
    finish: params.Params | None
    notice: params.Params | None

    @classmethod
    def of(cls, w: TransitionWrite) -> _Bound:
        values = params.transition(w, ENC) | _timer_changes(w)
        entry = params.logged(w, ENC) | values
        entry |= {"workflow_id": w.workflow_id, "version": w.expected_version + 1}
        finish = None if w.step_finish is None else params.step_finish(w.step_finish, ENC)
        notice = None if w.notice is None else params.notice(w, ENC)
        return cls(values, entry, finish, notice)


def _notify_parent(conn: sqlite3.Connection, notice: params.Params) -> None:
    """Arm a child's end on its live parent (see :attr:`TransitionWrite.notice`)."""
    parent = conn.execute(Q["notice_parent"], notice).fetchone()
    if parent is None:
        return  # the parent ended or is gone: nobody waits for the notice
    timer = notice | {"id": parent["id"], "every": None, "keep": 1}
    replaced = conn.execute(Q["take_timer_key"], timer).fetchone()
    conn.execute(Q["insert_timer"], timer)
    removed = None if replaced is None else replaced[0]
    set_next_due(conn, parent["id"], parent, removed, notice["due_at"])


def _apply(conn: sqlite3.Connection, w: TransitionWrite, bound: _Bound) -> tuple[Any, ...]:
    """Apply ``w``; the row's columns as ``after_transition`` reads them back."""
    values, entry = bound.values, bound.entry
    if conn.execute(Q["cas_update_workflow"], values).rowcount != 1:
        raise _refusal(conn, w)
    try:
        conn.execute(Q["append_transition"], entry)
    except sqlite3.IntegrityError as exc:
        if w.idempotency_key is not None and "idempotency_key" in str(exc):
            raise core.key_used_earlier(w) from exc
        raise
    change_timers(conn, w, clear=w.clear_timers, clear_all=w.terminal)
    if w.search:
        conn.executemany(Q["put_search_attribute"], params.search_rows(w.workflow_id, w.search))
    if w.consume_inbox_ids:
        _consume(conn, w.workflow_id, w.consume_inbox_ids, w.at)
    if w.step_finish is not None:
        assert bound.finish is not None
        _finish_with(conn, w.workflow_id, w.step_finish, bound.finish)
    if bound.notice is not None:
        _notify_parent(conn, bound.notice)
    if w.effects:  # transactional steps, in this write's savepoint (raising rolls it back)
        run_steps(conn, w.effects)
    cur = conn.cursor()
    cur.row_factory = None
    read: tuple[Any, ...] = cur.execute(Q["after_transition"], {"id": w.workflow_id}).fetchone()
    return read


class SQLiteTransitions(SQLiteBase, core.CoreSQL):
    """Creating workflows, their transitions and deferrals, and their inbox."""

    async def create_workflow(self, new: NewWorkflow) -> tuple[WorkflowRow, bool]:
        values = params.new_workflow(new, ENC)

        def fn(conn: sqlite3.Connection) -> tuple[sqlite3.Row, bool]:
            created = _create(conn, new, values)
            return conn.execute(Q["get_workflow"], values).fetchone(), created

        row, created = await self.conn.write(fn)
        self._wake()
        return ROWS.workflow(row), created

    async def apply_transition(self, write: TransitionWrite) -> WorkflowRow:
        bound = _Bound.of(write)
        read = await self.conn.write(lambda conn: _apply(conn, write, bound))
        row = _after(write, read, bound.values["context"])
        if bound.notice is not None or core.wakes_workers(row):
            self._wake()
        return row

    async def defer(self, write: DeferWrite) -> WorkflowRow:
        values = params.deferral(write)
        values["wake_skip"] = self.enc.array(write.wake_input[1] if write.wake_input else ())

        def fn(conn: sqlite3.Connection) -> sqlite3.Row:
            # Timers first (the deferral's next_due_at counts them); a refusal below rolls
            # them back with the rest of the savepoint.
            change_timers(conn, write)
            if conn.execute(Q["defer_workflow"], values).rowcount != 1:
                raise _refusal(conn, write)
            if write.consume_inbox_ids:
                _consume(conn, write.workflow_id, write.consume_inbox_ids, write.at)
            row: sqlite3.Row = conn.execute(Q["get_workflow"], values).fetchone()
            return row

        row = ROWS.workflow(await self.conn.write(fn))
        if core.wakes_workers(row):
            self._wake()
        return row

    async def transition_by_key(
        self, workflow_id: str, idempotency_key: str
    ) -> TransitionRecord | None:
        by_key = {"id": workflow_id, "key": idempotency_key}

        def fn(c: sqlite3.Connection) -> tuple[sqlite3.Row | None, sqlite3.Row | None]:
            row = c.execute(Q["transition_by_key"], by_key).fetchone()
            if row is not None:
                return row, None
            return None, c.execute(Q["input_by_key"], by_key).fetchone()

        row, posted = await self.conn.read(fn)
        if posted is not None:
            raise core.key_used_for_input(
                workflow_id, idempotency_key, posted["name"], posted["id"]
            )
        return None if row is None else ROWS.transition(row)

    async def _post(self, values: params.Params) -> tuple[InboxItem, bool]:
        workflow_id, key = values["id"], values["key"]

        def fn(conn: sqlite3.Connection) -> tuple[sqlite3.Row, bool]:
            found = conn.execute(Q["get_workflow_head"], values).fetchone()
            if found is None:
                raise WorkflowNotFound(workflow_id)
            if key is not None:
                earlier = conn.execute(Q["input_by_key"], values).fetchone()
                if earlier is not None:
                    return earlier, False
                used = conn.execute(Q["transition_by_key"], values).fetchone()
                if used is not None:  # in this write transaction: no event can slip in
                    raise core.key_used_for_event(workflow_id, key, used["event"], used["version"])
            if found["terminal"]:
                raise WorkflowFinished(workflow_id, found["state"])
            item = conn.execute(Q["post_input"], values).fetchone()
            if values["wake_state"] is not None:
                conn.execute(Q["wake_for_input"], values)
            return item, True

        item, created = await self.conn.write(fn)
        self._wake()
        return ROWS.inbox(item), created
