"""What workers write on PostgreSQL beside transitions: claims (``FOR UPDATE SKIP LOCKED``;
those of limited types in a transaction each, :mod:`statewright.store.core`), leases, the
step ledger, cancel requests, progress reports and definitions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from psycopg.rows import DictRow

from statewright.errors import LeaseLost, StoreError, WorkflowNotFound
from statewright.store import params
from statewright.store.core import CoreSQL
from statewright.store.postgres.base import PostgresBase, Q
from statewright.store.postgres.read import ROWS
from statewright.store.rows import cancel_request
from statewright.types import Lease, StepOpening, StepRecord


class PostgresWorkers(PostgresBase, CoreSQL):
    """Claims, leases, steps, cancel requests, progress and definitions."""

    # -- claims and leases --------------------------------------------------------------------

    def _claim_query(
        self, types: Sequence[str] | None, found: params.Params, *, rest: bool
    ) -> str:
        if types is None:
            return Q["claim_due"]
        found["types"] = list(types)
        # The rest of a claim with limits: not claim_due_of_types, which reads workflows_due
        # in order, past the due backlog of the throttled types ahead.
        return Q["claim_due_of_free_types" if rest else "claim_due_of_types"]

    def _held(self, held: Mapping[str, int]) -> params.Params:
        return {"ids": list(held), "fences": list(held.values())}

    async def _freed(self, sql: str, found: params.Params) -> int:
        row = await self._one(sql, found, write=True)  # the statement notifies
        return 0 if row is None else int(row["n"])

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
        async with self._connection(write=True) as conn:
            row = await (await conn.execute(Q["step_begin"], start)).fetchone()
            if row is not None:
                return ROWS.step(row)
            # Nothing written: the step is done already, or the lease (or workflow) is gone.
            found = await (await conn.execute(Q["step_and_lease"], start)).fetchone()
        if found is not None and found["step"] is not None and found["step"]["status"] == "done":
            return ROWS.step(found["step"])
        if found is None or not found["found"]:
            raise WorkflowNotFound(workflow_id)
        raise LeaseLost(workflow_id)

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
        # With the transitions' group commit: answered once committed, as alone.
        row = await self.batcher.statement("step_open", start, workflow_id)
        if row is None:
            raise WorkflowNotFound(workflow_id)
        if row["begun"] is not None:
            return StepOpening(ROWS.step(row["begun"]), True, None)
        cancel, found = cancel_request(row), row["found"]
        if cancel is None and found is None:
            if not row["held"]:
                raise LeaseLost(workflow_id)
            found = await self._one(Q["get_step"], start)  # inserted meanwhile
        return StepOpening(None if found is None else ROWS.step(found), False, cancel)

    # -- cancel, progress and definitions -----------------------------------------------------

    async def _flag_cancel(self, request: params.Params) -> DictRow | None:
        return await self._one(Q["request_cancel"], request, write=True)

    async def _progress(self, report: params.Params) -> tuple[bool, bool]:
        row = await self._one(Q["record_progress"], report, write=True)
        return (False, False) if row is None else (bool(row["found"]), bool(row["held"]))

    async def _add_definition(self, definition: params.Params) -> tuple[str, Any]:
        for _ in range(3):
            row = await self._one(Q["add_definition"], definition, write=True)
            if row is not None:
                return row["fingerprint"], row["document"]
            # Another opener inserted it concurrently: our INSERT waited for its commit and
            # did nothing, and this statement's snapshot predates that row. A new statement
            # (a new snapshot) sees it.
        name, version = definition["name"], definition["version"]
        raise StoreError(f"could not record the definition of {name!r} version {version}")
