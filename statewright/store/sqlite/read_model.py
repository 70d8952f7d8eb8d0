"""The read model on SQLite: what is not written once for both stores
(:mod:`statewright.store.read_model`)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from statewright.store import sqlbuild
from statewright.store.read_model import ReadModelSQL
from statewright.store.sqlite.base import ROWS, SQLiteBase
from statewright.types import TransitionRecord, WorkflowRow


class SQLiteReadModel(SQLiteBase, ReadModelSQL):
    """The log feed and the stuck listing on SQLite."""

    async def _read_log(self, sql: str, params: dict[str, Any]) -> list[TransitionRecord]:
        return await self._read_many(sql, params, ROWS.transition)

    async def _stuck_rows(
        self, groups: Sequence[sqlbuild.StuckGroup], page: sqlbuild.StuckPage, limit: int
    ) -> list[WorkflowRow]:
        def fn(conn: sqlite3.Connection) -> list[sqlite3.Row]:
            found: list[sqlite3.Row] = []
            for g in groups:
                if len(found) >= limit:
                    break
                want = limit - len(found)
                rows = [r for s in page.statements(g, want) for r in conn.execute(*s).fetchall()]
                found += page.take(rows, want)
            return found

        return await self._read_rows(fn, ROWS.workflow)
