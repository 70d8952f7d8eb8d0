"""Retention on SQLite: deleting finished workflows through the log's one sanctioned path (a
``prune_tokens`` row the deleting transaction inserts and removes itself), and restoring
archive records (:mod:`statewright.store.retention_sql`)."""

from __future__ import annotations

import sqlite3
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from statewright import jsonvalue
from statewright.store import retention_sql as r
from statewright.store.params import SQLITE
from statewright.store.sqlite.base import Q, SQLiteBase


def delete(
    conn: sqlite3.Connection, held: Sequence[tuple[str, int]], at: float
) -> tuple[list[str], r.Counts]:
    token = uuid.uuid4().hex
    conn.execute(Q["prune_token_add"], {"key": token})
    deleted = []
    for wid, version in held:
        gone = conn.execute(Q["prune_workflow"], {"id": wid, "version": version}).fetchall()
        if gone:  # its tombstone, in the same transaction: the id is not started again
            tenant, type_ = gone[0]
            conn.execute(
                Q["add_pruned_id"], {"id": wid, "tenant": tenant, "type": type_, "at": at}
            )
            deleted.append(wid)
    counts: r.Counts = {"workflows": len(deleted)}
    ids = {"ids": SQLITE.array(deleted)}
    for table in r.RELATED:
        counts[table] = conn.execute(Q[r.prune_query(table)], ids).rowcount if deleted else 0
    if deleted:  # derived from the context: not archived, not counted
        conn.execute(Q["prune_search_attributes"], ids)
    conn.execute(Q["prune_token_drop"], {"key": token})
    return deleted, counts


def columns(conn: sqlite3.Connection) -> dict[str, set[str]]:
    """Each table's columns, but the generated keys."""
    found = {t: {c[1] for c in conn.execute(f"PRAGMA table_info({t})")} for t in r.TABLES}
    return r.without_generated(found)  # (the tables' names: constants)


def restore(conn: sqlite3.Connection, rec: r.Record, check: r.Check | None = None) -> bool:
    """Insert the record's rows, once it passed its checks (:func:`~.retention_sql.checked`,
    in this transaction, before anything is written); False (nothing written) when the
    workflow exists."""
    r.checked(rec, check)
    conn.execute(Q["drop_pruned_id"], {"id": rec["id"]})  # the id names a workflow again
    for table, cols, values in r.restore_rows(rec, columns(conn), _value):
        text = (
            f"INSERT INTO {table} ({', '.join(cols)}) "  # names from the table's own columns
            f"VALUES ({', '.join('?' for _ in cols)})"
            + (" ON CONFLICT (id) DO NOTHING" if table == "workflows" else "")
        )
        cur = conn.executemany(text, values)
        if table == "workflows" and cur.rowcount == 0:
            return False
    conn.executemany(Q["put_search_attribute"], r.search_rows(rec))
    return True


def _value(value: Any, is_json: bool) -> Any:
    if value is None:
        return None
    if is_json:
        return jsonvalue.dumps(value, allow_nan=False)
    if isinstance(value, bool):
        return int(value)
    return value


class SQLiteRetention(SQLiteBase, r.RetentionSQL):
    """Deleting and restoring workflows on SQLite."""

    async def delete_workflows(
        self, held: Sequence[tuple[str, int]], at: float | None = None
    ) -> tuple[list[str], dict[str, int]]:
        when = time.time() if at is None else at
        return await self.conn.write(lambda c: delete(c, held, when))

    async def restore_workflow(
        self, record: Mapping[str, Any], check: r.Check | None = None
    ) -> bool:
        rec = dict(record)
        return await self.conn.write(lambda c: restore(c, rec, check))
