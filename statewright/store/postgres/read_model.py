"""The read model on PostgreSQL: what is not written once for both stores
(:mod:`statewright.store.read_model`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg.rows import DictRow

from statewright.store import sqlbuild
from statewright.store.postgres.base import PostgresBase, Q, rollback
from statewright.store.postgres.read import ROWS, decode_rows, defer_json
from statewright.store.read_model import ReadModelSQL
from statewright.types import TransitionRecord, WorkflowRow


class PostgresReadModel(PostgresBase, ReadModelSQL):
    """The log feed and the stuck listing on PostgreSQL."""

    async def _read_log(self, sql: str, params: dict[str, Any]) -> list[TransitionRecord]:
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
                    cur = await defer_json(conn.cursor()).execute(sql, params)
                rows = await cur.fetchall()
            except BaseException:
                await rollback(conn)
                raise
        return await decode_rows(rows, ROWS.transition)

    async def _stuck_rows(
        self, groups: Sequence[sqlbuild.StuckGroup], page: sqlbuild.StuckPage, limit: int
    ) -> list[WorkflowRow]:
        found: list[DictRow] = []
        async with self._connection() as conn:
            for g in groups:
                if len(found) >= limit:
                    break
                want = limit - len(found)
                rows: list[DictRow] = []
                for s in page.statements(g, want):
                    rows += await (await defer_json(conn.cursor()).execute(*s)).fetchall()
                found += page.take(rows, want)
        return await decode_rows(found, ROWS.workflow)
