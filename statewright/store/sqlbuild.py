"""Statements the stores build from what a call asks for (listings, stuck workflows).

Only the filters given appear in the SQL (never ``:x IS NULL OR ...``, which no index can
serve and which a generic plan cannot drop), so each statement is a range scan of one index,
in that index's order, and stops after its ``LIMIT``:

=============================  ==============================================================
listing filtered by            index (all end in ``state_entered_at, id``, the listing order)
=============================  ==============================================================
type and state                 ``workflows_state_age (type, state, ...)``
state                          ``workflows_state (state, ...)``
tenant                         ``workflows_tenant (tenant, ...)``
terminal, or nothing           ``workflows_terminal_age (terminal, ...)``: without a terminal
                               filter, the two ranges (live, ended) merged
stuck (type, state, cutoff)    ``workflows_state_age``: ``state_entered_at < cutoff``; the
                               parked ones younger than that (stuck from the moment they
                               park) from ``workflows_parked``
parked                         ``workflows_parked (type, state, state_entered_at, id, parked)
                               WHERE parked IS NOT NULL``
retry counter (min_attempts)   ``workflows_retrying (...) WHERE attempts > 0``
search attributes              ``search_attributes_value (name, value, workflow_id)``: the
                               first pair's range, each workflow then by its primary key
                               (further pairs: ``search_attributes``' primary key), the
                               matches sorted (a value many workflows share reads them all)
counts by type and state       ``workflow_counts`` (kept by triggers); with a time range or a
                               tenant, one range of ``workflows_state_age`` per group
log after a cursor             the primary key ``seq``
recent events (flapping)       ``transitions_event_at (event, at)``
rejections since a time        ``rejections_at`` / ``rejections_tenant_at``
=============================  ==============================================================

A listing by type alone reads that type's range of ``workflows_state_age`` and sorts it. On
SQLite, which runs without planner statistics, the index is named (``INDEXED BY``) wherever
another one could look as good to the planner; ``tests/store/test_plans.py`` checks the plan
of every statement here and of every named query on 100,000 workflows.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from statewright.types import StuckCutoff, StuckKey, WorkflowFilter

Dialect = Literal["sqlite", "postgres"]
ORDER = " ORDER BY state_entered_at, id"
GROUPS_PER_STATEMENT = 100
"""Stuck groups counted by one statement (SQLite allows 500 terms in a compound SELECT)."""


class Params:
    """Named parameters for one statement, in the dialect's style."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self.values: dict[str, Any] = {}

    def __call__(self, value: Any) -> str:
        name = f"p{len(self.values)}"
        self.values[name] = value
        return f":{name}" if self.dialect == "sqlite" else f"%({name})s"

    def flag(self, value: bool) -> str:
        return self(int(value) if self.dialect == "sqlite" else bool(value))


def list_workflows(where: WorkflowFilter, dialect: Dialect) -> tuple[str, dict[str, Any]]:
    """``SELECT *`` for :meth:`Store.list_workflows`, ordered by ``(state_entered_at, id)``."""
    p = Params(dialect)
    clauses: list[str] = []
    if where.type is not None:
        clauses.append(f"type = {p(where.type)}")
    if where.state is not None:
        clauses.append(f"state = {p(where.state)}")
    if where.tenant is not None:
        clauses.append(f"tenant = {p(where.tenant)}")
    if where.entered_before is not None:
        clauses.append(f"state_entered_at < {p(float(where.entered_before))}")
    if where.entered_after is not None:
        clauses.append(f"state_entered_at >= {p(float(where.entered_after))}")
    if where.min_attempts is not None:
        clauses.append(f"attempts >= {p(int(where.min_attempts))}")
    if where.after is not None:
        at, wid = where.after
        clauses.append(f"(state_entered_at, id) > ({p(float(at))}, {p(str(wid))})")
    limit, offset = int(where.limit), int(where.offset)
    if where.search:
        return _by_search(where, clauses, p), p.values
    if where.parked:
        # Parked workflows are few: the partial index workflows_parked has them all, by type
        # and state in listing order.
        clauses.insert(0, "parked IS NOT NULL")
        if where.terminal is not None:
            clauses.append(f"terminal = {p.flag(where.terminal)}")
        table = "workflows INDEXED BY workflows_parked" if dialect == "sqlite" else "workflows"
        sql = f"SELECT * FROM {table}" + _where(clauses) + ORDER
        sql += f" LIMIT {p(limit)}" + (f" OFFSET {p(offset)}" if offset else "")
        return sql, p.values
    if where.min_attempts is not None and where.min_attempts >= 1 and where.type is None:
        # Workflows being retried are few: the partial index workflows_retrying has them all,
        # in listing order (SQLite, without statistics, would read a whole range of another).
        clauses.insert(0, "attempts > 0")
        if where.terminal is not None:
            clauses.append(f"terminal = {p.flag(where.terminal)}")
        table = "workflows INDEXED BY workflows_retrying" if dialect == "sqlite" else "workflows"
        sql = f"SELECT * FROM {table}" + _where(clauses) + ORDER
        sql += f" LIMIT {p(limit)}" + (f" OFFSET {p(offset)}" if offset else "")
        return sql, p.values
    if any(v is not None for v in (where.terminal, where.type, where.state, where.tenant)):
        if where.terminal is not None:
            clauses.append(f"terminal = {p.flag(where.terminal)}")
        sql = "SELECT * FROM workflows" + _where(clauses) + ORDER
        sql += f" LIMIT {p(limit)}" + (f" OFFSET {p(offset)}" if offset else "")
        return sql, p.values
    # No index has the listing order over both values of `terminal`; one has it for each.
    n = p(limit + offset)
    branches = [
        f"SELECT * FROM (SELECT * FROM workflows"
        f"{_where([f'terminal = {p.flag(flag)}', *clauses])}{ORDER} LIMIT {n}) AS {alias}"
        for flag, alias in ((False, "live"), (True, "ended"))
    ]
    sql = " UNION ALL ".join(branches) + ORDER + f" LIMIT {p(limit)}"
    return sql + (f" OFFSET {p(offset)}" if offset else ""), p.values


def _by_search(where: WorkflowFilter, clauses: list[str], p: Params) -> str:
    """A listing filtered by search attributes: the first ``(name, value)``'s range of
    ``search_attributes_value`` drives it (SQLite: ``CROSS JOIN`` keeps that order), each of
    its workflows read by primary key and checked for the other filters (every further
    attribute by the primary key of ``search_attributes``), and the matches sorted."""
    (name, value), *more = where.search
    conds = [f"s.name = {p(str(name))}", f"s.value = {p(str(value))}", *clauses]
    conds += [
        "EXISTS (SELECT 1 FROM search_attributes x WHERE x.workflow_id = w.id"
        f" AND x.name = {p(str(n))} AND x.value = {p(str(v))})"
        for n, v in more
    ]
    if where.parked:
        conds.append("parked IS NOT NULL")
    if where.terminal is not None:
        conds.append(f"terminal = {p.flag(where.terminal)}")
    join = "CROSS JOIN" if p.dialect == "sqlite" else "JOIN"
    sql = f"SELECT w.* FROM search_attributes s {join} workflows w ON w.id = s.workflow_id"
    sql += _where(conds) + ORDER + f" LIMIT {p(int(where.limit))}"
    return sql + (f" OFFSET {p(int(where.offset))}" if where.offset else "")


def _where(clauses: Sequence[str]) -> str:
    return " WHERE " + " AND ".join(clauses) if clauses else ""


@dataclass
class StuckGroup:
    """The cutoffs of one ``(type, state)``: one range of ``workflows_state_age``."""

    type: str
    state: str
    default: float | None = None
    """The cutoff of versions without their own (None: they are never stuck here)."""
    versions: dict[int, float | None] = field(default_factory=dict)

    @property
    def upper(self) -> float | None:
        """The latest cutoff of any version: the end of the range to read (None: nothing)."""
        cuts = [c for c in (self.default, *self.versions.values()) if c is not None]
        return max(cuts) if cuts else None

    def clause(self, p: Params, tenant: str | None) -> str | None:
        """The WHERE clause of this group's stuck workflows (None: it has none)."""
        upper = self.upper
        if upper is None:
            return None
        parts = [
            f"type = {p(self.type)}",
            f"state = {p(self.state)}",
            f"state_entered_at < {p(upper)}",
        ]
        if tenant is not None:
            parts.append(f"tenant = {p(tenant)}")
        own = {v: c for v, c in self.versions.items() if c != self.default}
        if own:
            # Versions with thresholds of their own: checked on the rows of the range.
            cases = " ".join(f"WHEN {p(v)} THEN {_before(p, c)}" for v, c in sorted(own.items()))
            parts.append(f"(CASE machine_version {cases} ELSE {_before(p, self.default)} END)")
        return " AND ".join(parts)

    def parked_clause(self, p: Params, tenant: str | None) -> str | None:
        """The WHERE clause of this group's parked workflows that :meth:`clause` leaves out
        (not past their threshold yet): a parked workflow is stuck from the moment it parks.
        None when the group has no live state (terminal in every version)."""
        upper = self.upper
        if upper is None:
            return None
        parts = [f"type = {p(self.type)}", f"state = {p(self.state)}", "parked IS NOT NULL"]
        own = {v: c for v, c in self.versions.items() if c != self.default}
        if own:
            cases = " ".join(f"WHEN {p(v)} THEN {_before(p, c)}" for v, c in sorted(own.items()))
            parts.append(
                f"NOT (state_entered_at < {p(upper)}"
                f" AND (CASE machine_version {cases} ELSE {_before(p, self.default)} END))"
            )
        else:
            parts.append(f"state_entered_at >= {p(upper)}")
        if tenant is not None:
            parts.append(f"tenant = {p(tenant)}")
        return " AND ".join(parts)


def _before(p: Params, cutoff: float | None) -> str:
    return "FALSE" if cutoff is None else f"state_entered_at < {p(cutoff)}"


def stuck_groups(cutoffs: Sequence[StuckCutoff]) -> list[StuckGroup]:
    """The cutoffs by ``(type, state)``, in the stuck listing's order."""
    groups: dict[tuple[str, str], StuckGroup] = {}
    for c in cutoffs:
        if c.entered_before is not None and not math.isfinite(c.entered_before):
            raise ValueError(f"stuck cutoff {c!r} is not a finite time")
        g = groups.setdefault((c.type, c.state), StuckGroup(c.type, c.state))
        cut = None if c.entered_before is None else float(c.entered_before)
        if c.machine_version is None:
            g.default = cut
        else:
            g.versions[int(c.machine_version)] = cut
    return [groups[k] for k in sorted(groups)]


def count_stuck(
    groups: Sequence[StuckGroup], dialect: Dialect, tenant: str | None, parked: bool = False
) -> Iterator[tuple[str, dict[str, Any], list[StuckGroup]]]:
    """Statements counting the stuck workflows of the groups, ``GROUPS_PER_STATEMENT`` at a
    time: rows ``(g, n, oldest)``, ``g`` the group's index in the yielded list. With
    ``parked``, a group's parked workflows not yet past its threshold are another row of the
    same ``g`` (from ``workflows_parked``): add them up."""
    live = [g for g in groups if g.upper is not None]
    table = "workflows INDEXED BY workflows_parked" if dialect == "sqlite" else "workflows"
    for start in range(0, len(live), GROUPS_PER_STATEMENT):
        chunk = live[start : start + GROUPS_PER_STATEMENT]
        p = Params(dialect)
        selects = []
        for i, g in enumerate(chunk):
            clause = g.clause(p, tenant)
            selects.append(
                f"SELECT {i} AS g, count(*) AS n, min(state_entered_at) AS oldest"
                f" FROM workflows WHERE {clause}"
            )
            if parked:
                selects.append(
                    f"SELECT {i} AS g, count(*) AS n, min(state_entered_at) AS oldest"
                    f" FROM {table} WHERE {g.parked_clause(p, tenant)}"
                )
        yield " UNION ALL ".join(selects), p.values, chunk


def add_counts(
    rows: Iterable[tuple[int, int, float | None]], groups: Sequence[StuckGroup]
) -> list[tuple[str, str, int, float]]:
    """``(type, state, n, oldest)`` per group with some, from the rows of :func:`count_stuck`
    (``(g, n, oldest)``; a group may have two)."""
    found: dict[int, tuple[int, float]] = {}
    for g, n, oldest in rows:
        if n:
            assert oldest is not None
            seen = found.get(g)
            found[g] = (n, oldest) if seen is None else (seen[0] + n, min(seen[1], oldest))
    return [(groups[g].type, groups[g].state, n, at) for g, (n, at) in sorted(found.items())]


def stuck_page(
    group: StuckGroup, dialect: Dialect, tenant: str | None, after: StuckKey | None, limit: int
) -> tuple[str, dict[str, Any]] | None:
    """One group's share of a stuck page: its stuck workflows after ``after`` in the order
    ``(type, state, state_entered_at, id)`` (None: the group has nothing after it)."""
    if after is not None and (group.type, group.state) < (after[0], after[1]):
        return None
    p = Params(dialect)
    clause = group.clause(p, tenant)
    if clause is None:
        return None
    if after is not None and (group.type, group.state) == (after[0], after[1]):
        clause += f" AND (state_entered_at, id) > ({p(float(after[2]))}, {p(str(after[3]))})"
    return f"SELECT * FROM workflows WHERE {clause}{ORDER} LIMIT {p(int(limit))}", p.values


def stuck_parked_page(
    group: StuckGroup, dialect: Dialect, tenant: str | None, after: StuckKey | None, limit: int
) -> tuple[str, dict[str, Any]] | None:
    """The other share of a group's stuck page: its parked workflows not yet past the
    threshold (:meth:`StuckGroup.parked_clause`), after ``after``, in the same order, from
    ``workflows_parked``. Merged with :func:`stuck_page`'s rows (the two never overlap)."""
    if after is not None and (group.type, group.state) < (after[0], after[1]):
        return None
    p = Params(dialect)
    clause = group.parked_clause(p, tenant)
    if clause is None:
        return None
    if after is not None and (group.type, group.state) == (after[0], after[1]):
        clause += f" AND (state_entered_at, id) > ({p(float(after[2]))}, {p(str(after[3]))})"
    table = "workflows INDEXED BY workflows_parked" if dialect == "sqlite" else "workflows"
    return f"SELECT * FROM {table} WHERE {clause}{ORDER} LIMIT {p(int(limit))}", p.values


@dataclass(frozen=True)
class StuckPage:
    """What a page of stuck workflows asks for, whatever the group: each group's share of
    it is read by :meth:`statements`, merged by :meth:`take`."""

    dialect: Dialect
    tenant: str | None
    after: StuckKey | None
    parked: bool

    def statements(self, group: StuckGroup, want: int) -> list[tuple[str, dict[str, Any]]]:
        """The group's stuck workflows after ``after`` (and, with ``parked``, its parked
        ones: :func:`stuck_parked_page`), ``want`` of each at most."""
        pages = [stuck_page(group, self.dialect, self.tenant, self.after, want)]
        if self.parked:
            pages.append(stuck_parked_page(group, self.dialect, self.tenant, self.after, want))
        return [page for page in pages if page is not None]

    @staticmethod
    def take(rows: list[Any], want: int) -> list[Any]:
        """The first ``want`` of a group's rows in the listing's order."""
        rows.sort(key=lambda r: (r["state_entered_at"], r["id"]))
        return rows[:want]


def count_parked(dialect: Dialect, tenant: str | None) -> tuple[str, dict[str, Any]]:
    """Parked workflows by ``(type, state, parked)``, with the oldest one's time entered (from
    the partial index ``workflows_parked``)."""
    p = Params(dialect)
    clauses = ["parked IS NOT NULL"]
    if tenant is not None:
        clauses.append(f"tenant = {p(tenant)}")
    # SQLite, without statistics, would rather read a tenant's whole range of its index.
    table = "workflows INDEXED BY workflows_parked" if dialect == "sqlite" else "workflows"
    sql = (
        f"SELECT type, state, parked, count(*) AS n, min(state_entered_at) AS oldest"
        f" FROM {table}"
        + _where(clauses)
        + " GROUP BY type, state, parked ORDER BY type, state, parked"
    )
    return sql, p.values


def steps(
    workflow_id: str, dialect: Dialect, after: tuple[float, str] | None, limit: int | None
) -> tuple[str, dict[str, Any]]:
    """A workflow's step ledger in ``(started_at, key)`` order, after a keyset."""
    p = Params(dialect)
    sql = f"SELECT * FROM steps WHERE workflow_id = {p(workflow_id)}"
    if after is not None:
        sql += f" AND (started_at, key) > ({p(float(after[0]))}, {p(str(after[1]))})"
    sql += " ORDER BY started_at, key"
    if limit is not None:
        sql += f" LIMIT {p(int(limit))}"
    return sql, p.values


def model_steps(workflow_id: str, dialect: Dialect) -> tuple[str, dict[str, Any]]:
    """A workflow's steps whose result is an object with the key ``"$llm"`` (a model call's
    usage envelope, :mod:`statewright.engine.llm_usage`), in ``(started_at, key)`` order: the
    workflow's index range, filtered by the database (the results of other steps are neither
    sent nor decoded)."""
    p = Params(dialect)
    has = (
        """result LIKE '%"$llm"%' AND json_type(result, '$."$llm"') = 'object'"""
        if dialect == "sqlite"
        else "jsonb_typeof(result -> '$llm') = 'object'"
    )
    sql = (
        f"SELECT * FROM steps WHERE workflow_id = {p(workflow_id)} AND {has}"
        " ORDER BY started_at, key"
    )
    return sql, p.values


# -- counts by (type, state) -------------------------------------------------------------------


@dataclass(frozen=True)
class CountGroup:
    """One ``(type, state)`` of ``workflow_counts`` to count over a range of
    ``workflows_state_age`` (``terminal``: the flag to check on the rows, None when every row
    of the group has the wanted one)."""

    type: str
    state: str
    terminal: bool | None = None


def kept_counts(
    rows: Sequence[tuple[str, str, Any, int]], terminal: bool | None
) -> list[tuple[str, str, int]]:
    """``(type, state, n)`` from the rows of the ``workflow_counts`` query (``(type, state,
    terminal, n)``, the kept counts), of live or ended workflows when ``terminal`` is given."""
    out: dict[tuple[str, str], int] = {}
    for type_, state, ended, n in rows:
        if terminal is None or bool(ended) == terminal:
            out[(type_, state)] = out.get((type_, state), 0) + int(n)
    return [(t, s, n) for (t, s), n in sorted(out.items()) if n > 0]


def count_groups(
    rows: Sequence[tuple[str, str, Any, int]], terminal: bool | None
) -> list[CountGroup]:
    """The groups whose rows a filtered count must read (from the kept counts): those with
    workflows of the wanted ``terminal`` flag; the flag is checked on the rows only where the
    group has both."""
    flags: dict[tuple[str, str], set[bool]] = {}
    for type_, state, ended, n in rows:
        if int(n) > 0:
            flags.setdefault((type_, state), set()).add(bool(ended))
    out = []
    for (type_, state), seen in sorted(flags.items()):
        if terminal is None:
            out.append(CountGroup(type_, state))
        elif terminal in seen:
            out.append(CountGroup(type_, state, terminal if len(seen) > 1 else None))
    return out


def count_in_groups(
    groups: Sequence[CountGroup],
    dialect: Dialect,
    tenant: str | None,
    after: float | None,
    before: float | None,
) -> Iterator[tuple[str, dict[str, Any], list[CountGroup]]]:
    """Statements counting each group's workflows entered in ``[after, before)`` (of one
    tenant), ``GROUPS_PER_STATEMENT`` groups at a time: rows ``(g, n)``. Each count is a range
    of ``workflows_state_age (type, state, state_entered_at)``, read from the index alone
    unless a tenant or a terminal flag must be checked on the rows."""
    table = "workflows INDEXED BY workflows_state_age" if dialect == "sqlite" else "workflows"
    for start in range(0, len(groups), GROUPS_PER_STATEMENT):
        chunk = list(groups[start : start + GROUPS_PER_STATEMENT])
        p = Params(dialect)
        selects = []
        for i, g in enumerate(chunk):
            parts = [f"type = {p(g.type)}", f"state = {p(g.state)}"]
            if after is not None:
                parts.append(f"state_entered_at >= {p(float(after))}")
            if before is not None:
                parts.append(f"state_entered_at < {p(float(before))}")
            if tenant is not None:
                parts.append(f"tenant = {p(tenant)}")
            if g.terminal is not None:
                parts.append(f"terminal = {p.flag(g.terminal)}")
            selects.append(f"SELECT {i} AS g, count(*) AS n FROM {table}{_where(parts)}")
        yield " UNION ALL ".join(selects), p.values, chunk


# -- the log and the rejections ----------------------------------------------------------------


def transitions_since(
    seq: int, limit: int, tenant: str | None, dialect: Dialect
) -> tuple[str, dict[str, Any]]:
    """The global log after a cursor in ``seq`` order (a range of the primary key), of one
    tenant's workflows when given (each entry's workflow looked up by its key). On PostgreSQL
    only up to the session's log horizon (see ``log_horizon`` in its queries.sql)."""
    p = Params(dialect)
    clauses = [f"seq > {p(int(seq))}"]
    if dialect == "postgres":
        clauses.append("seq <= current_setting('statewright.log_horizon')::bigint")
    if tenant is not None:
        clauses.append(
            "EXISTS (SELECT 1 FROM workflows w"
            f" WHERE w.id = t.workflow_id AND w.tenant = {p(tenant)})"
        )
    sql = f"SELECT * FROM transitions t{_where(clauses)} ORDER BY seq LIMIT {p(int(limit))}"
    return sql, p.values


def live_event_counts(
    since: float, events: Sequence[str], tenant: str | None, dialect: Dialect
) -> tuple[str, dict[str, Any]] | None:
    """How often each live workflow took some events since a time: ranges of
    ``transitions_event_at (event, at)``, each entry's workflow looked up by its key (None: no
    events, nothing to count)."""
    if not events:
        return None
    p = Params(dialect)
    if dialect == "sqlite":
        # CROSS JOIN keeps the log as the outer loop (SQLite would otherwise rather read every
        # live workflow and look its log up).
        source = "transitions t INDEXED BY transitions_event_at CROSS JOIN workflows w"
        names = ", ".join(p(e) for e in events)
        clauses = [f"t.event IN ({names})", "w.terminal = 0"]
    else:
        source = "transitions t JOIN workflows w ON w.id = t.workflow_id"
        clauses = [f"t.event = ANY({p(list(events))}::text[])", "NOT w.terminal"]
    clauses.insert(1, f"t.at >= {p(float(since))}")
    if dialect == "sqlite":
        clauses.append("w.id = t.workflow_id")
    if tenant is not None:
        clauses.append(f"w.tenant = {p(tenant)}")
    sql = (
        f"SELECT w.id AS workflow_id, w.type, t.event, count(*) AS n FROM {source}"
        f"{_where(clauses)} GROUP BY w.id, w.type, t.event ORDER BY w.id, t.event"
    )
    return sql, p.values


def _rejections_where(p: Params, since: float, tenant: str | None) -> str:
    index = "rejections_at" if tenant is None else "rejections_tenant_at"
    table = f"rejections INDEXED BY {index}" if p.dialect == "sqlite" else "rejections"
    clauses = [] if tenant is None else [f"tenant = {p(tenant)}"]
    clauses.append(f"at >= {p(float(since))}")
    return table + _where(clauses)


def count_rejections(
    since: float, tenant: str | None, dialect: Dialect
) -> tuple[str, dict[str, Any]]:
    """Refused events per ``(type, code)`` since a time: a range of ``rejections_at`` (or, of
    one tenant, ``rejections_tenant_at``)."""
    p = Params(dialect)
    table = _rejections_where(p, since, tenant)
    sql = f"SELECT type, code, count(*) AS n FROM {table} GROUP BY type, code ORDER BY type, code"
    return sql, p.values


def rejections(
    since: float, tenant: str | None, limit: int, dialect: Dialect
) -> tuple[str, dict[str, Any]]:
    """The latest refused events since a time, newest first (the same range, sorted)."""
    p = Params(dialect)
    table = _rejections_where(p, since, tenant)
    return f"SELECT * FROM {table} ORDER BY seq DESC LIMIT {p(int(limit))}", p.values
