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
of a live workflow. Each dialect's deleting and restoring is in its own package
(``sqlite/retention.py``, ``postgres/retention.py``); what they share is here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from statewright import ids, jsonvalue
from statewright.errors import InvalidInput
from statewright.store.base import Plan, SQLStore

RELATED = ("transitions", "steps", "timers", "inbox", "rejections")
"""The tables keyed by ``workflow_id`` that a workflow is archived and deleted with."""
TABLES = ("workflows", *RELATED)
SEARCH_KEY = "search_attributes"
"""A record's search attributes to write with it (name -> text): set by the engine's import
from the workflow's type, never read from an archive (they are derived from the context)."""
GENERATED = {"transitions": "seq", "timers": "id", "inbox": "id", "rejections": "seq"}
"""Keys the database generates: not archived, new ones on restore."""
JSON_COLUMNS = {
    "workflows": frozenset({"context", "progress"}),
    "transitions": frozenset({"payload", "context_patch", "messages"}),
    "steps": frozenset({"result"}),
    "timers": frozenset({"payload"}),
    "inbox": frozenset({"payload"}),
    "rejections": frozenset(),
}
BOOL_COLUMNS = {
    "workflows": frozenset({"terminal", "has_children"}),
    "timers": frozenset({"keep"}),
}
ARCHIVE_FORMAT = 1
"""``format`` of an archive record (import refuses others)."""

Record = dict[str, Any]
Counts = dict[str, int]
PruneKey = tuple[str, int, float]
"""``(id, version, state_entered_at)`` of a workflow prune may delete."""

T = TypeVar("T")
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
        "parent_id": (_TEXT, True),
        "parent_key": (_TEXT, True),
        "has_children": (_BOOL, False),
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
        "compensation": (_TEXT, True),
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


Check = Callable[[Record], None]
"""The engine's own checks of a record (limits, replay), run by restore in its transaction."""


def checked(rec: Record, check: Check | None) -> Record:
    """``rec`` once :func:`check_restorable` and ``check`` passed (restore runs this in the
    transaction that writes it, before anything is written)."""
    check_restorable(rec)
    if check is not None:
        check(rec)
    return rec


def restore_rows(
    rec: Record, columns: Mapping[str, set[str]], value: Callable[[Any, bool], Any]
) -> Iterator[tuple[str, list[str], list[list[Any]]]]:
    """``(table, columns, rows)`` to insert for a record, the workflow's row first: the
    columns of the record's rows that the table has (a column of a later migration is left
    to its default; one the archive has and the table not, dropped), and each row's values
    in that order as ``value(v, is_json)`` binds them."""
    for table in TABLES:
        rows = [rec["workflow"]] if table == "workflows" else rec[table]
        if rows:
            cols = [c for c in rows[0] if c in columns[table]]
            json_cols = JSON_COLUMNS[table]
            yield table, cols, [[value(r.get(c), c in json_cols) for c in cols] for r in rows]


def search_rows(rec: Record) -> list[dict[str, Any]]:
    """The rows of ``search_attributes`` a restore writes (``put_search_attribute``'s)."""
    found = rec.get(SEARCH_KEY) or {}
    if not isinstance(found, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in found.items()
    ):
        raise InvalidInput("search attributes to restore must map names to text")
    return [{"id": rec["id"], "name": k, "value": v} for k, v in found.items()]


def prune_query(table: str) -> str:
    """The named query deleting a table's rows of the workflows a prune deletes."""
    return "prune_workflow_rejections" if table == "rejections" else f"prune_{table}"


def without_generated(columns: Mapping[str, set[str]]) -> dict[str, set[str]]:
    """Each table's columns, but the keys the database generates."""
    return {t: set(columns[t]) - {GENERATED.get(t)} for t in TABLES}


def export_plan(
    queries: Mapping[str, str], ids: Sequence[str], listed: Any, *, parse_json: bool
) -> Plan[list[Record]]:
    """Read each table's rows of the workflows ``ids`` (``listed``: the ids' parameter), one
    record per workflow found."""
    rows: dict[str, list[Record]] = {}
    for t in TABLES:
        found = yield queries[f"export_{t}"], {"ids": listed}
        rows[t] = [_normalise(t, dict(r), parse_json=parse_json) for r in found]
    return _by_workflow(ids, rows)


class RetentionSQL(SQLStore):
    """Retention over a SQL dialect (its hooks and own methods complete it)."""

    async def prunable(
        self, before: float, *, tenant: str | None, after: tuple[float, str] | None, limit: int
    ) -> list[PruneKey]:
        since, after_id = after or _FIRST
        params = {
            "until": before,
            "since": since,
            "id": after_id,
            "limit": limit,
            "tenant": tenant,
        }
        query = self.queries["prunable"] if tenant is None else self.queries["prunable_tenant"]
        rows = await self._all(query, params)
        return [(r["id"], int(r["version"]), float(r["state_entered_at"])) for r in rows]

    async def export_workflows(self, ids: Sequence[str]) -> list[dict[str, Any]]:
        json_text = self.dialect == "sqlite"  # TEXT columns there, decoded JSON on PostgreSQL
        listed = self.enc.array(ids)
        plan = export_plan(self.queries, ids, listed, parse_json=json_text)
        return await self._reads(plan, snapshot=True)  # a workflow's tables as of one moment

    async def forget_pruned_ids(
        self, before: float, *, tenant: str | None, limit: int, dry_run: bool = False
    ) -> int:
        params = {"until": before, "tenant": tenant, "limit": limit}
        if dry_run:
            return await self._count(self.queries["count_old_pruned_ids"], params)
        return await self._rowcount(self.queries["forget_pruned_ids"], params)

    async def prune_rejections(
        self, before: float, *, tenant: str | None, limit: int, dry_run: bool = False
    ) -> int:
        params = {"until": before, "tenant": tenant, "limit": limit}
        of = "" if tenant is None else "_tenant"
        if dry_run:
            return await self._count(self.queries[f"count_old_rejections{of}"], params)
        return await self._rowcount(self.queries[f"prune_rejections{of}"], params)
