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
from statewright.store.params import SQLITE
from statewright.store.retention_sql import (
    GENERATED,
    JSON_COLUMNS,
    RELATED,
    TABLES,
    Check,
    Counts,
    Record,
    RetentionSQL,
    checked,
    restore_rows,
)
from statewright.store.sqlite.base import Q, SQLiteBase


def delete(
    conn: sqlite3.Connection, held: Sequence[tuple[str, int]], at: float
) -> tuple[list[str], Counts]:
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
    counts: Counts = {"workflows": len(deleted)}
    ids = {"ids": SQLITE.array(deleted)}
    for table in RELATED:
        name = "prune_workflow_rejections" if table == "rejections" else f"prune_{table}"
        counts[table] = conn.execute(Q[name], ids).rowcount if deleted else 0
    conn.execute(Q["prune_token_drop"], {"key": token})
    return deleted, counts


def columns(conn: sqlite3.Connection) -> dict[str, set[str]]:
    """Each table's columns, but the generated keys."""
    return {
        t: {r[1] for r in conn.execute(f"PRAGMA table_info({t})")} - {GENERATED.get(t)}
        for t in TABLES  # a constant
    }


def restore(conn: sqlite3.Connection, rec: Record, check: Check | None = None) -> bool:
    """Insert the record's rows, once it passed its checks (:func:`checked`, in this
    transaction, before anything is written); False (nothing written) when the workflow
    exists."""
    checked(rec, check)
    conn.execute(Q["drop_pruned_id"], {"id": rec["id"]})  # the id names a workflow again
    for table, cols, rows in restore_rows(rec, columns(conn)):
        json_cols = JSON_COLUMNS[table]
        text = (
            f"INSERT INTO {table} ({', '.join(cols)}) "  # names from the table's own columns
            f"VALUES ({', '.join('?' for _ in cols)})"
            + (" ON CONFLICT (id) DO NOTHING" if table == "workflows" else "")
        )
        values = [[_value(r.get(c), c in json_cols) for c in cols] for r in rows]
        cur = conn.executemany(text, values)
        if table == "workflows" and cur.rowcount == 0:
            return False
    return True


def _value(value: Any, is_json: bool) -> Any:
    if value is None:
        return None
    if is_json:
        return jsonvalue.dumps(value, allow_nan=False)
    if isinstance(value, bool):
        return int(value)
    return value


class SQLiteRetention(SQLiteBase, RetentionSQL):
    """Deleting and restoring workflows on SQLite."""

    async def delete_workflows(
        self, held: Sequence[tuple[str, int]], at: float | None = None
    ) -> tuple[list[str], dict[str, int]]:
        when = time.time() if at is None else at
        return await self.conn.write(lambda c: delete(c, held, when))

    async def restore_workflow(
        self, record: Mapping[str, Any], check: Check | None = None
    ) -> bool:
        rec = dict(record)
        return await self.conn.write(lambda c: restore(c, rec, check))
