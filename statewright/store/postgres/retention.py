"""Retention on PostgreSQL: deleting finished workflows through the log's one sanctioned path
(``statewright.prune`` set for the deleting transaction only), and restoring archive records
(:mod:`statewright.store.retention_sql`)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from psycopg import sql

from statewright.store import retention_sql as r
from statewright.store.params import POSTGRES
from statewright.store.postgres.base import Conn, PostgresBase, Q


async def delete(
    conn: Conn, held: Sequence[tuple[str, int]], at: float
) -> tuple[list[str], r.Counts]:
    counts: r.Counts = {}
    async with conn.transaction():
        await conn.execute(Q["prune_begin"])
        cur = await conn.execute(  # and their tombstones: their ids are not started again
            Q["prune_workflows"],
            {"ids": [h[0] for h in held], "versions": [h[1] for h in held], "at": at},
        )
        deleted = [row["id"] for row in await cur.fetchall()]
        counts["workflows"] = len(deleted)
        versions = dict(held)
        keyed = {"ids": deleted, "versions": [versions[w] for w in deleted]}
        for table in r.RELATED:
            query = Q[r.prune_query(table)]
            counts[table] = (await conn.execute(query, keyed)).rowcount if deleted else 0
        if deleted:  # derived from the context: not archived, not counted
            await conn.execute(Q["prune_search_attributes"], keyed)
    return deleted, counts


async def columns(conn: Conn) -> dict[str, set[str]]:
    """Each table's columns, but the generated keys."""
    cur = await conn.execute(
        "SELECT table_name, column_name FROM information_schema.columns"
        " WHERE table_schema = current_schema() AND table_name = ANY(%(t)s::text[])",
        {"t": list(r.TABLES)},
    )
    out: dict[str, set[str]] = {t: set() for t in r.TABLES}
    for row in await cur.fetchall():
        out[row["table_name"]].add(row["column_name"])
    return r.without_generated(out)


async def restore(conn: Conn, rec: r.Record, check: r.Check | None = None) -> bool:
    """Insert the record's rows in one transaction, once it passed its checks
    (:func:`~.retention_sql.checked`, in it, before anything is written); False (nothing
    written) when the workflow exists."""
    found = await columns(conn)
    async with conn.transaction():
        r.checked(rec, check)
        # The id names a workflow again (before the insert, whose trigger refuses a pruned id).
        await conn.execute(Q["drop_pruned_id"], {"id": rec["id"]})
        for table, cols, values in r.restore_rows(rec, found, _value):
            json_cols = r.JSON_COLUMNS[table]
            query = sql.SQL("INSERT INTO {} ({}) VALUES ({}){}").format(
                sql.Identifier(table),
                sql.SQL(", ").join(sql.Identifier(c) for c in cols),
                sql.SQL(", ").join(sql.SQL("%s::jsonb" if c in json_cols else "%s") for c in cols),
                sql.SQL(" ON CONFLICT (id) DO NOTHING" if table == "workflows" else ""),
            )
            if table == "workflows":
                if (await conn.execute(query, values[0])).rowcount == 0:
                    return False
            else:
                async with conn.cursor() as c:
                    await c.executemany(query, values)
        if rows := r.search_rows(rec):
            async with conn.cursor() as c:
                await c.executemany(Q["put_search_attribute"], rows)
    return True


def _value(value: Any, is_json: bool) -> Any:
    return POSTGRES.json(value) if is_json and value is not None else value


class PostgresRetention(PostgresBase, r.RetentionSQL):
    """Deleting and restoring workflows on PostgreSQL."""

    async def delete_workflows(
        self, held: Sequence[tuple[str, int]], at: float | None = None
    ) -> tuple[list[str], dict[str, int]]:
        when = time.time() if at is None else at
        async with self._connection(write=True) as conn:
            return await delete(conn, held, when)

    async def restore_workflow(
        self, record: Mapping[str, Any], check: r.Check | None = None
    ) -> bool:
        async with self._connection(write=True) as conn:
            return await restore(conn, dict(record), check)
