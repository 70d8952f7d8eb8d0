"""What workers write on SQLite beside transitions: claims (those of limited types in a
transaction each, :mod:`statewright.store.core`), leases, the step ledger, cancel requests,
progress reports and definitions."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from statewright import jsonvalue
from statewright.errors import LeaseLost, WorkflowNotFound
from statewright.store import params
from statewright.store.core import CoreSQL
from statewright.store.queries import compact
from statewright.store.rows import cancel_request
from statewright.store.sqlite.base import ROWS, Q, SQLiteBase
from statewright.types import Lease, StepOpening, StepRecord

ENC = params.SQLITE
_OF_TYPES = "AND terminal = 0 AND type IN (SELECT value FROM json_each(:types))"


def _insert_step(conn: sqlite3.Connection, start: params.Params) -> StepRecord:
    """Record a new step executing at attempt 1; what the INSERT wrote, not read back."""
    conn.execute(Q["insert_step"], start)
    return _executing(start)


def _executing(start: params.Params) -> StepRecord:
    """The record of a step just inserted executing at attempt 1."""
    return StepRecord(
        key=start["key"],
        workflow_id=start["workflow_id"],
        step=start["step"],
        status="executing",
        result=None,
        error=None,
        attempts=1,
        started_at=start["at"],
        finished_at=None,
        fence=start["fence"],
        compensation=start["compensation"],
    )


class SQLiteWorkers(SQLiteBase, CoreSQL):
    """Claims, leases, steps, cancel requests, progress and definitions."""

    # -- claims and leases --------------------------------------------------------------------

    def _claim_query(
        self, types: Sequence[str] | None, found: params.Params, *, rest: bool
    ) -> str:
        if types is None:
            return Q["claim_due"]
        found["types"] = ENC.array(types)
        return Q["claim_due"].replace(compact("AND terminal = 0"), _OF_TYPES)

    def _held(self, held: Mapping[str, int]) -> params.Params:
        return {"held": ENC.array([[k, v] for k, v in held.items()])}

    async def _freed(self, sql: str, found: params.Params) -> int:
        return await self._rowcount(sql, found)

    # -- step ledger --------------------------------------------------------------------------

    async def step_begin(
        self,
        key: str,
        workflow_id: str,
        step: str,
        at: float,
        lease: Lease | None = None,
        compensation: str | None = None,
    ) -> StepRecord:
        start = params.step_start(key, workflow_id, step, at, lease, compensation)

        def fn(conn: sqlite3.Connection) -> StepRecord:
            row = conn.execute(Q["get_step"], start).fetchone()
            if row is not None and row["status"] == "done":
                return ROWS.step(row)  # finished (here or elsewhere): its result stands
            if conn.execute(Q["lease_holds"], start).fetchone() is None:
                if conn.execute(Q["version_of"], {"id": workflow_id}).fetchone() is None:
                    raise WorkflowNotFound(workflow_id)
                raise LeaseLost(workflow_id)
            if row is None:
                return _insert_step(conn, start)
            conn.execute(Q["restart_step"], start)
            return ROWS.step(conn.execute(Q["get_step"], start).fetchone())

        return await self.conn.write(fn)

    async def step_open(
        self,
        key: str,
        workflow_id: str,
        step: str,
        at: float,
        lease: Lease | None = None,
        compensation: str | None = None,
    ) -> StepOpening:
        start = params.step_start(key, workflow_id, step, at, lease, compensation)

        def fn(conn: sqlite3.Connection) -> StepOpening | None:
            if conn.execute(Q["step_open_insert"], start).rowcount == 1:
                return None  # the usual case: recorded executing (the record is made below)
            wf = conn.execute(Q["step_open_workflow"], start).fetchone()
            if wf is None:
                raise WorkflowNotFound(workflow_id)
            cancel = cancel_request(wf)
            row = conn.execute(Q["get_step"], start).fetchone()
            if cancel is not None or row is not None:
                return StepOpening(None if row is None else ROWS.step(row), False, cancel)
            # Neither a cancel request nor a ledger entry stopped the insert, in this same
            # transaction: the fence did.
            raise LeaseLost(workflow_id)

        opened = await self.conn.write(fn)
        return StepOpening(_executing(start), True, None) if opened is None else opened

    # -- cancel, progress and definitions -----------------------------------------------------

    async def _flag_cancel(self, request: params.Params) -> sqlite3.Row | None:
        def fn(conn: sqlite3.Connection) -> sqlite3.Row | None:
            conn.execute(Q["request_cancel"], request)
            row: sqlite3.Row | None = conn.execute(Q["get_workflow"], request).fetchone()
            return row

        return await self.conn.write(fn)

    async def _progress(self, report: params.Params) -> tuple[bool, bool]:
        def fn(conn: sqlite3.Connection) -> tuple[bool, bool]:
            if conn.execute(Q["record_progress"], report).rowcount == 1:
                return True, True
            return conn.execute(Q["version_of"], report).fetchone() is not None, False

        return await self.conn.write(fn)

    async def _add_definition(self, definition: params.Params) -> tuple[str, Any]:
        def fn(conn: sqlite3.Connection) -> tuple[str, Any]:
            conn.execute(Q["add_definition"], definition)
            row = conn.execute(Q["get_definition"], definition).fetchone()
            return row["fingerprint"], jsonvalue.loads(row["document"])

        return await self.conn.write(fn)
