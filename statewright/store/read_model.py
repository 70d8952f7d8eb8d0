"""The read model (:class:`~statewright.store.protocol.ReadModel`) as both SQL stores implement
it, over the statements of :mod:`statewright.store.sqlbuild`.

The counts read several statements in one go: they are written here as a *plan*, a generator
that yields each statement and is sent its rows, and each dialect runs the plan its way
(:meth:`~statewright.store.base.SQLStore._reads`: on SQLite one read on the connection's
thread, on PostgreSQL one read transaction without parallel workers).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import Any, TypeVar

from statewright.store import sqlbuild
from statewright.store.base import Plan, SQLStore
from statewright.types import (
    RejectionRecord,
    StepRecord,
    StuckCutoff,
    StuckKey,
    TransitionRecord,
    WorkflowFilter,
    WorkflowRow,
)

T = TypeVar("T")


def stuck_plan(
    groups: Sequence[sqlbuild.StuckGroup],
    dialect: sqlbuild.Dialect,
    tenant: str | None,
    parked: bool,
) -> Plan[list[tuple[str, str, int, float]]]:
    out: list[tuple[str, str, int, float]] = []
    for sql, params, chunk in sqlbuild.count_stuck(groups, dialect, tenant, parked):
        rows = yield sql, params
        out += sqlbuild.add_counts(((r["g"], r["n"], r["oldest"]) for r in rows), chunk)
    return out


def counts_plan(
    terminal: bool | None,
    tenant: str | None,
    after: float | None,
    before: float | None,
    dialect: sqlbuild.Dialect,
    kept_query: str,
) -> Plan[list[tuple[str, str, int]]]:
    # The kept counts (workflow_counts); with a time range or a tenant, one range of an index
    # per (type, state) they name.
    rows = yield kept_query, {}
    kept = [(r["type"], r["state"], r["terminal"], r["n"]) for r in rows]
    if tenant is None and after is None and before is None:
        return sqlbuild.kept_counts(kept, terminal)
    out = []
    groups = sqlbuild.count_groups(kept, terminal)
    for sql, params, chunk in sqlbuild.count_in_groups(groups, dialect, tenant, after, before):
        for r in (yield sql, params):
            if r["n"]:
                out.append((chunk[r["g"]].type, chunk[r["g"]].state, r["n"]))
    return out


class ReadModelSQL(SQLStore):
    """The read model over a SQL dialect (its hooks complete it)."""

    @abstractmethod
    async def _read_log(self, sql: str, params: dict[str, Any]) -> list[TransitionRecord]:
        """The log entries of a :func:`sqlbuild.transitions_since` statement."""

    @abstractmethod
    async def _stuck_rows(
        self,
        groups: Sequence[sqlbuild.StuckGroup],
        page: sqlbuild.StuckPage,
        limit: int,
    ) -> list[WorkflowRow]:
        """The stuck workflows of ``groups`` in order, up to ``limit``: each group's
        statements (:meth:`sqlbuild.StuckPage.statements`) read until there are enough."""

    async def transitions_since(
        self, seq: int, limit: int = 500, tenant: str | None = None
    ) -> list[TransitionRecord]:
        return await self._read_log(*sqlbuild.transitions_since(seq, limit, tenant, self.dialect))

    async def model_steps(self, workflow_id: str) -> list[StepRecord]:
        sql, params = sqlbuild.model_steps(workflow_id, self.dialect)
        return await self._read_many(sql, params, self.rows.step)

    async def list_workflows(self, where: WorkflowFilter) -> list[WorkflowRow]:
        sql, params = sqlbuild.list_workflows(where, self.dialect)
        return await self._read_many(sql, params, self.rows.workflow)

    async def search_attributes(self, workflow_id: str) -> dict[str, str]:
        rows = await self._all(self.queries["search_attributes_of"], {"id": workflow_id})
        return {r["name"]: r["value"] for r in rows}

    async def count_stuck(
        self, cutoffs: Sequence[StuckCutoff], tenant: str | None = None, *, parked: bool = False
    ) -> list[tuple[str, str, int, float]]:
        groups = sqlbuild.stuck_groups(cutoffs)
        return await self._reads(stuck_plan(groups, self.dialect, tenant, parked))

    async def stuck_workflows(
        self,
        cutoffs: Sequence[StuckCutoff],
        *,
        after: StuckKey | None = None,
        limit: int = 100,
        tenant: str | None = None,
        parked: bool = False,
    ) -> list[WorkflowRow]:
        page = sqlbuild.StuckPage(self.dialect, tenant, after, parked)
        return await self._stuck_rows(sqlbuild.stuck_groups(cutoffs), page, limit)

    async def count_parked(
        self, tenant: str | None = None
    ) -> list[tuple[str, str, str, int, float]]:
        rows = await self._all(*sqlbuild.count_parked(self.dialect, tenant))
        return [(r["type"], r["state"], r["parked"], r["n"], r["oldest"]) for r in rows]

    async def unresolved_steps(self, workflow_ids: Sequence[str]) -> list[StepRecord]:
        if not workflow_ids:
            return []
        params = {"ids": self.enc.array(workflow_ids)}
        rows = await self._all(self.queries["unresolved_steps"], params)
        found = [self.rows.step(r) for r in rows]
        return sorted(found, key=lambda s: (s.workflow_id, s.started_at, s.key))

    async def count_by_state(
        self,
        terminal: bool | None = None,
        tenant: str | None = None,
        *,
        entered_after: float | None = None,
        entered_before: float | None = None,
    ) -> list[tuple[str, str, int]]:
        kept = self.queries["workflow_counts"]
        plan = counts_plan(terminal, tenant, entered_after, entered_before, self.dialect, kept)
        return await self._reads(plan)

    async def live_event_counts(
        self, since: float, events: Sequence[str], tenant: str | None = None
    ) -> list[tuple[str, str, str, int]]:
        built = sqlbuild.live_event_counts(since, events, tenant, self.dialect)
        if built is None:
            return []
        rows = await self._all(*built)
        return [(r["workflow_id"], r["type"], r["event"], r["n"]) for r in rows]

    async def live_versions_between(
        self, workflow_type: str, lo: int, hi: int
    ) -> list[tuple[int, int]]:
        params = {"type": workflow_type, "lo": lo, "hi": hi}
        rows = await self._all(self.queries["live_versions_between"], params)
        return [(r["machine_version"], r["n"]) for r in rows]

    async def count_rejections(
        self, since: float, tenant: str | None = None
    ) -> list[tuple[str, str, int]]:
        rows = await self._all(*sqlbuild.count_rejections(since, tenant, self.dialect))
        return [(r["type"], r["code"], r["n"]) for r in rows]

    async def rejections(
        self, since: float, tenant: str | None = None, limit: int = 100
    ) -> list[RejectionRecord]:
        rows = await self._all(*sqlbuild.rejections(since, tenant, limit, self.dialect))
        return [self.rows.rejection(r) for r in rows]
