"""The store side of retention (prune, archive, import) for both backends.

A workflow is archived as one *record*: its row and the rows of every table keyed by it
(log, steps, timers, inbox, refused events), each row a dict of its columns, JSON columns as
JSON values and flags as booleans, so a record written by one backend is restored by the other.
Rows are read with ``SELECT *``: a column added by a later migration is archived without a
change here. Generated keys (the log's ``seq``, timers', inputs' and refusals' ids) are left
out: a restored row gets a new one, in the original order.

Deleting goes through the one sanctioned path of the append-only log (migration
``retention``): on SQLite a ``prune_tokens`` row inserted and removed by the deleting
transaction itself, on PostgreSQL ``statewright.prune`` set for that transaction only. The
triggers still refuse any other delete or update of the log, and prune's own delete of the log
of a live workflow.
"""

from __future__ import annotations

import json
import math
import sqlite3
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from statewright import ids, jsonvalue
from statewright.errors import InvalidInput
from statewright.store.queries import load_queries

RELATED = ("transitions", "steps", "timers", "inbox", "rejections")
"""The tables keyed by ``workflow_id`` that a workflow is archived and deleted with."""
TABLES = ("workflows", *RELATED)
GENERATED = {"transitions": "seq", "timers": "id", "inbox": "id", "rejections": "seq"}
"""Keys the database generates: not archived, new ones on restore."""
JSON_COLUMNS = {
    "workflows": frozenset({"context", "progress"}),
    "transitions": frozenset({"payload", "context_patch"}),
    "steps": frozenset({"result"}),
    "timers": frozenset({"payload"}),
    "inbox": frozenset({"payload"}),
    "rejections": frozenset(),
}
BOOL_COLUMNS = {"workflows": frozenset({"terminal"}), "timers": frozenset({"keep"})}
ARCHIVE_FORMAT = 1
"""``format`` of an archive record (import refuses others)."""

Record = dict[str, Any]
Counts = dict[str, int]
PruneKey = tuple[str, int, float]
"""``(id, version, state_entered_at)`` of a workflow prune may delete."""

if TYPE_CHECKING:  # psycopg only for PostgreSQL: an SQLite store does not import it
    from psycopg import AsyncConnection
    from psycopg.rows import DictRow

    PgConn = AsyncConnection[DictRow]

SQ = load_queries("sqlite")
PQ = load_queries("postgres")
_FIRST = (-1e300, "")
"""A page key before every workflow."""


def _by_workflow(ids: Sequence[str], rows: Mapping[str, list[Record]]) -> list[Record]:
    """One record per workflow found, in ``ids`` order."""
    out = []
    for wid in ids:
        row = rows["workflows"]
        found = next((r for r in row if r["id"] == wid), None)
        if found is None:
            continue
        rec: Record = {"format": ARCHIVE_FORMAT, "id": wid, "workflow": found}
        for table in RELATED:
            rec[table] = [r for r in rows[table] if r["workflow_id"] == wid]
        out.append(rec)
    return out


def _normalise(table: str, row: Mapping[str, Any], *, parse_json: bool) -> Record:
    out: Record = {}
    skip = GENERATED.get(table)
    json_cols = JSON_COLUMNS.get(table, frozenset())
    bools = BOOL_COLUMNS.get(table, frozenset())
    for col, value in row.items():
        if col == skip:
            continue
        if parse_json and col in json_cols and isinstance(value, str | bytes):
            value = jsonvalue.loads(value)
        elif col in bools and value is not None:
            value = bool(value)
        out[col] = value
    return out


def check_record(rec: Any, where: str) -> Record:
    """An archive record's shape (what restore needs), else InvalidInput naming ``where``."""
    if not isinstance(rec, dict) or rec.get("format") != ARCHIVE_FORMAT:
        raise InvalidInput(f"{where}: not a statewright archive record (format {ARCHIVE_FORMAT})")
    wf = rec.get("workflow")
    if not isinstance(wf, dict) or not isinstance(wf.get("id"), str) or wf["id"] != rec.get("id"):
        raise InvalidInput(f"{where}: the record has no workflow row with its id")
    for table in RELATED:
        rows = rec.get(table)
        if not isinstance(rows, list) or not all(
            isinstance(r, dict) and r.get("workflow_id") == wf["id"] for r in rows
        ):
            raise InvalidInput(f"{where}: {table!r} must be a list of that workflow's rows")
    return rec


_TEXT = (str,)
_INT = (int,)
_NUM = (int, float)
_BOOL = (bool,)
COLUMN_TYPES: dict[str, dict[str, tuple[tuple[type, ...], bool]]] = {
    # column: (types its value may have, whether it may be null); JSON columns are checked
    # by the engine's limits instead. A column not listed must hold a scalar.
    "workflows": {
        "id": (_TEXT, False),
        "type": (_TEXT, False),
        "machine_version": (_INT, False),
        "state": (_TEXT, False),
        "version": (_INT, False),
        "attempts": (_INT, False),
        "terminal": (_BOOL, False),
        "created_at": (_NUM, False),
        "updated_at": (_NUM, False),
        "state_entered_at": (_NUM, False),
        "next_due_at": (_NUM, True),
        "lease_owner": (_TEXT, True),
        "lease_expires_at": (_NUM, True),
        "last_error": (_TEXT, True),
        "cancel_requested": (_TEXT, True),
        "tenant": (_TEXT, False),
        "fence": (_INT, False),
        "total_attempts": (_INT, False),
        "cancel_actor": (_TEXT, True),
        "cancel_at": (_NUM, True),
        "cancel_version": (_INT, True),
        "cancel_key": (_TEXT, True),
        "parked": (_TEXT, True),
        "trace": (_TEXT, True),
    },
    "transitions": {
        "workflow_id": (_TEXT, False),
        "version": (_INT, False),
        "from_state": (_TEXT, True),
        "to_state": (_TEXT, False),
        "event": (_TEXT, False),
        "actor": (_TEXT, False),
        "at": (_NUM, False),
        "idempotency_key": (_TEXT, True),
    },
    "steps": {
        "key": (_TEXT, False),
        "workflow_id": (_TEXT, False),
        "step": (_TEXT, False),
        "status": (_TEXT, False),
        "error": (_TEXT, True),
        "attempts": (_INT, False),
        "started_at": (_NUM, False),
        "finished_at": (_NUM, True),
        "outcome": (_TEXT, True),
        "fence": (_INT, True),
    },
    "timers": {
        "workflow_id": (_TEXT, False),
        "due_at": (_NUM, False),
        "event": (_TEXT, False),
        "key": (_TEXT, True),
        "every": (_NUM, True),
        "keep": (_BOOL, False),
    },
    "inbox": {
        "workflow_id": (_TEXT, False),
        "name": (_TEXT, False),
        "posted_at": (_NUM, False),
        "consumed_at": (_NUM, True),
        "idempotency_key": (_TEXT, True),
    },
    "rejections": {
        "workflow_id": (_TEXT, False),
        "type": (_TEXT, False),
        "tenant": (_TEXT, False),
        "state": (_TEXT, False),
        "event": (_TEXT, False),
        "code": (_TEXT, False),
        "actor": (_TEXT, False),
        "message": (_TEXT, False),
        "at": (_NUM, False),
    },
}
_REQUIRED_JSON = {"workflows": {"context"}, "transitions": {"payload"}, "timers": {"payload"}}
_MAX_INT = 2**63 - 1
STEP_STATUSES = frozenset({"executing", "done", "failed"})


def _check_columns(table: str, row: Mapping[str, Any], where: str) -> None:
    """Each column of ``row`` holds what its table's column can (a JSON column anything: the
    engine's limits check those); InvalidInput naming the column otherwise."""
    types = COLUMN_TYPES[table]
    json_cols = JSON_COLUMNS[table]
    for col in (
        *(c for c, (_, null) in types.items() if not null),
        *_REQUIRED_JSON.get(table, ()),
    ):
        if row.get(col) is None:
            raise InvalidInput(f"{where}: {table}.{col} is missing")
    for col, value in row.items():
        if col in json_cols or value is None:
            continue
        allowed, _ = types.get(col, ((str, int, float, bool), True))
        if isinstance(value, bool) and bool not in allowed:
            ok = False
        else:
            ok = isinstance(value, allowed)
        if not ok:
            raise InvalidInput(f"{where}: {table}.{col} holds {type(value).__name__}")
        if isinstance(value, float) and not math.isfinite(value):
            raise InvalidInput(f"{where}: {table}.{col} is not a finite number")
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > _MAX_INT:
            raise InvalidInput(f"{where}: {table}.{col} is out of range")


def check_restorable(rec: Record, where: str = "archive record") -> None:
    """What a restored workflow must be, whatever the archive says (checked by the store in
    the transaction that would write it, and by import before): a well-formed record of a
    **finished** workflow that no worker holds and nothing will wake (terminal, unleased, not
    due, no timers), its id a store id consistent with its tenant, each row's columns of
    their types and every step keyed by its workflow. InvalidInput naming what is wrong."""
    check_record(rec, where)
    wf = rec["workflow"]
    wid = wf["id"]
    for table in TABLES:
        for row in [wf] if table == "workflows" else rec[table]:
            _check_columns(table, row, where)
    try:
        ids.check_id(wf["tenant"], "tenant")
        ids.check_ref(wid, wf["tenant"])  # a qualified id names its own tenant
    except InvalidInput as exc:
        raise InvalidInput(f"{where}: {exc.message}") from None
    if any(r["tenant"] != wf["tenant"] for r in rec["rejections"]):
        raise InvalidInput(f"{where}: a refused event of {wid!r} names another tenant")
    if not isinstance(wf["context"], dict):
        raise InvalidInput(f"{where}: the context of {wid!r} is not a JSON object")
    if wf["terminal"] is not True:
        raise InvalidInput(f"{where}: workflow {wid!r} is not finished (prune archives no other)")
    if wf.get("lease_owner") is not None or wf.get("lease_expires_at") is not None:
        raise InvalidInput(f"{where}: workflow {wid!r} is leased by a worker")
    if wf.get("next_due_at") is not None or rec["timers"]:
        raise InvalidInput(f"{where}: workflow {wid!r} is due for a worker or has timers")
    for step in rec["steps"]:
        if step["key"] != f"{wid}:{step['step']}":
            raise InvalidInput(f"{where}: step {step['key']!r} is not keyed by its workflow")
        if step["status"] not in STEP_STATUSES:
            raise InvalidInput(f"{where}: step {step['key']!r} has status {step['status']!r}")


def comparable(rec: Mapping[str, Any], columns: Mapping[str, set[str]]) -> Record:
    """The record's data on the columns both sides have (for an idempotent re-import)."""

    def cut(table: str, row: Mapping[str, Any]) -> Record:
        keep = columns.get(table)
        return {k: v for k, v in row.items() if keep is None or k in keep}

    return {
        "workflow": cut("workflows", rec["workflow"]),
        **{t: [cut(t, r) for r in rec[t]] for t in RELATED},
    }


# -- SQLite (functions run on the store's connection thread, inside its write transaction) ----


def sqlite_prunable(
    conn: sqlite3.Connection,
    before: float,
    tenant: str | None,
    after: tuple[float, str] | None,
    limit: int,
) -> list[PruneKey]:
    since, after_id = after or _FIRST
    params = {"until": before, "since": since, "id": after_id, "limit": limit, "tenant": tenant}
    query = SQ["prunable"] if tenant is None else SQ["prunable_tenant"]
    return [(r[0], int(r[1]), float(r[2])) for r in conn.execute(query, params)]


def sqlite_export(conn: sqlite3.Connection, ids: Sequence[str]) -> list[Record]:
    params = {"ids": json.dumps(list(ids))}
    rows = {
        t: [
            _normalise(t, dict(r), parse_json=True)
            for r in conn.execute(SQ[f"export_{t}"], params)
        ]
        for t in TABLES
    }
    return _by_workflow(ids, rows)


def sqlite_delete(
    conn: sqlite3.Connection, held: Sequence[tuple[str, int]], at: float
) -> tuple[list[str], Counts]:
    token = uuid.uuid4().hex
    conn.execute(SQ["prune_token_add"], {"key": token})
    deleted = []
    for wid, version in held:
        gone = conn.execute(SQ["prune_workflow"], {"id": wid, "version": version}).fetchall()
        if gone:  # its tombstone, in the same transaction: the id is not started again
            tenant, type_ = gone[0]
            conn.execute(
                SQ["add_pruned_id"], {"id": wid, "tenant": tenant, "type": type_, "at": at}
            )
            deleted.append(wid)
    counts: Counts = {"workflows": len(deleted)}
    params = {"ids": json.dumps(deleted)}
    for table in RELATED:
        name = "prune_workflow_rejections" if table == "rejections" else f"prune_{table}"
        counts[table] = conn.execute(SQ[name], params).rowcount if deleted else 0
    conn.execute(SQ["prune_token_drop"], {"key": token})
    return deleted, counts


def sqlite_prune_rejections(
    conn: sqlite3.Connection, before: float, tenant: str | None, limit: int, dry_run: bool
) -> int:
    params = {"until": before, "tenant": tenant, "limit": limit}
    if dry_run:
        query = SQ["count_old_rejections"] if tenant is None else SQ["count_old_rejections_tenant"]
        return int(conn.execute(query, params).fetchone()[0])
    query = SQ["prune_rejections"] if tenant is None else SQ["prune_rejections_tenant"]
    return conn.execute(query, params).rowcount


def sqlite_forget_pruned_ids(
    conn: sqlite3.Connection, before: float, tenant: str | None, limit: int, dry_run: bool
) -> int:
    params = {"until": before, "tenant": tenant, "limit": limit}
    if dry_run:
        return int(conn.execute(SQ["count_old_pruned_ids"], params).fetchone()[0])
    return conn.execute(SQ["forget_pruned_ids"], params).rowcount


def sqlite_prune_alert_notifications(
    conn: sqlite3.Connection, before: float, limit: int, dry_run: bool
) -> int:
    params = {"until": before, "limit": limit}
    if dry_run:
        return int(conn.execute(SQ["count_old_alert_notifications"], params).fetchone()[0])
    return conn.execute(SQ["prune_alert_notifications"], params).rowcount


def _sqlite_columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]  # table: a constant


def sqlite_columns(conn: sqlite3.Connection) -> dict[str, set[str]]:
    return {t: set(_sqlite_columns(conn, t)) - {GENERATED.get(t)} for t in TABLES}


Check = Callable[[Record], None]
"""The engine's own checks of a record (limits, replay), run by restore in its transaction."""


def sqlite_restore(conn: sqlite3.Connection, rec: Record, check: Check | None = None) -> bool:
    """Insert the record's rows, once :func:`check_restorable` and ``check`` passed (in this
    transaction, before anything is written); False (nothing written) when the workflow
    exists."""
    check_restorable(rec)
    if check is not None:
        check(rec)
    conn.execute(SQ["drop_pruned_id"], {"id": rec["id"]})  # the id names a workflow again
    columns = sqlite_columns(conn)
    for table in TABLES:
        rows = [rec["workflow"]] if table == "workflows" else rec[table]
        if not rows:
            continue
        cols = [c for c in rows[0] if c in columns[table]]
        json_cols = JSON_COLUMNS[table]
        text = (
            f"INSERT INTO {table} ({', '.join(cols)}) "  # names from the table's own columns
            f"VALUES ({', '.join('?' for _ in cols)})"
            + (" ON CONFLICT (id) DO NOTHING" if table == "workflows" else "")
        )
        values = [[_sqlite_value(r.get(c), c in json_cols) for c in cols] for r in rows]
        cur = conn.executemany(text, values)
        if table == "workflows" and cur.rowcount == 0:
            return False
    return True


def _sqlite_value(value: Any, is_json: bool) -> Any:
    if value is None:
        return None
    if is_json:
        return jsonvalue.dumps(value, allow_nan=False)
    if isinstance(value, bool):
        return int(value)
    return value


# -- PostgreSQL ------------------------------------------------------------------------------


async def pg_prunable(
    conn: PgConn, before: float, tenant: str | None, after: tuple[float, str] | None, limit: int
) -> list[PruneKey]:
    since, after_id = after or _FIRST
    params = {"until": before, "since": since, "id": after_id, "limit": limit, "tenant": tenant}
    query = PQ["prunable"] if tenant is None else PQ["prunable_tenant"]
    cur = await conn.execute(query, params)
    return [
        (r["id"], int(r["version"]), float(r["state_entered_at"])) for r in await cur.fetchall()
    ]


async def pg_export(conn: PgConn, ids: Sequence[str]) -> list[Record]:
    params = {"ids": list(ids)}
    rows: dict[str, list[Record]] = {}
    async with conn.transaction():  # one snapshot for the row and its tables
        await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        for t in TABLES:
            cur = await conn.execute(PQ[f"export_{t}"], params)
            rows[t] = [_normalise(t, r, parse_json=False) for r in await cur.fetchall()]
    return _by_workflow(ids, rows)


async def pg_delete(
    conn: PgConn, held: Sequence[tuple[str, int]], at: float
) -> tuple[list[str], Counts]:
    counts: Counts = {}
    async with conn.transaction():
        await conn.execute(PQ["prune_begin"])
        cur = await conn.execute(  # and their tombstones: their ids are not started again
            PQ["prune_workflows"],
            {"ids": [h[0] for h in held], "versions": [h[1] for h in held], "at": at},
        )
        deleted = [r["id"] for r in await cur.fetchall()]
        counts["workflows"] = len(deleted)
        versions = dict(held)
        params = {"ids": deleted, "versions": [versions[w] for w in deleted]}
        for table in RELATED:
            name = "prune_workflow_rejections" if table == "rejections" else f"prune_{table}"
            if deleted:
                cur = await conn.execute(PQ[name], params)
                counts[table] = cur.rowcount
            else:
                counts[table] = 0
    return deleted, counts


async def pg_prune_rejections(
    conn: PgConn, before: float, tenant: str | None, limit: int, dry_run: bool
) -> int:
    params = {"until": before, "tenant": tenant, "limit": limit}
    if dry_run:
        query = PQ["count_old_rejections"] if tenant is None else PQ["count_old_rejections_tenant"]
        row = await (await conn.execute(query, params)).fetchone()
        return 0 if row is None else int(row["n"])
    query = PQ["prune_rejections"] if tenant is None else PQ["prune_rejections_tenant"]
    return (await conn.execute(query, params)).rowcount


async def pg_forget_pruned_ids(
    conn: PgConn, before: float, tenant: str | None, limit: int, dry_run: bool
) -> int:
    params = {"until": before, "tenant": tenant, "limit": limit}
    if dry_run:
        row = await (await conn.execute(PQ["count_old_pruned_ids"], params)).fetchone()
        return 0 if row is None else int(row["n"])
    return (await conn.execute(PQ["forget_pruned_ids"], params)).rowcount


async def pg_prune_alert_notifications(
    conn: PgConn, before: float, limit: int, dry_run: bool
) -> int:
    params = {"until": before, "limit": limit}
    if dry_run:
        row = await (await conn.execute(PQ["count_old_alert_notifications"], params)).fetchone()
        return 0 if row is None else int(row["n"])
    return (await conn.execute(PQ["prune_alert_notifications"], params)).rowcount


async def pg_columns(conn: PgConn) -> dict[str, set[str]]:
    cur = await conn.execute(
        "SELECT table_name, column_name FROM information_schema.columns"
        " WHERE table_schema = current_schema() AND table_name = ANY(%(t)s::text[])",
        {"t": list(TABLES)},
    )
    out: dict[str, set[str]] = {t: set() for t in TABLES}
    for r in await cur.fetchall():
        out[r["table_name"]].add(r["column_name"])
    for t, col in GENERATED.items():
        out[t].discard(col)
    return out


async def pg_restore(conn: PgConn, rec: Record, check: Check | None = None) -> bool:
    """Insert the record's rows in one transaction, once :func:`check_restorable` and
    ``check`` passed (in it, before anything is written); False (nothing written) when the
    workflow exists."""
    from psycopg import sql

    from statewright.store.postgres_rows import dumps

    columns = await pg_columns(conn)
    async with conn.transaction():
        check_restorable(rec)
        if check is not None:
            check(rec)
        # The id names a workflow again (before the insert, whose trigger refuses a pruned id).
        await conn.execute(PQ["drop_pruned_id"], {"id": rec["id"]})
        for table in TABLES:
            rows = [rec["workflow"]] if table == "workflows" else rec[table]
            if not rows:
                continue
            cols = [c for c in rows[0] if c in columns[table]]
            json_cols = JSON_COLUMNS[table]
            query = sql.SQL("INSERT INTO {} ({}) VALUES ({}){}").format(
                sql.Identifier(table),
                sql.SQL(", ").join(sql.Identifier(c) for c in cols),
                sql.SQL(", ").join(sql.SQL("%s::jsonb" if c in json_cols else "%s") for c in cols),
                sql.SQL(" ON CONFLICT (id) DO NOTHING" if table == "workflows" else ""),
            )
            values = [
                [
                    dumps(r.get(c)) if c in json_cols and r.get(c) is not None else r.get(c)
                    for c in cols
                ]
                for r in rows
            ]
            if table == "workflows":
                cur = await conn.execute(query, values[0])
                if cur.rowcount == 0:
                    return False
            else:
                async with conn.cursor() as c:
                    await c.executemany(query, values)
    return True
