"""Heavy readers stay cheap: on 100,000 workflows (and a workflow with 100,000 transitions),
every listing, page and count the API serves is a range of an index, never a full scan, on
both stores. Checked on the plans the databases choose (SQLite ``EXPLAIN QUERY PLAN`` without
statistics, as the store runs; PostgreSQL ``EXPLAIN`` after ``VACUUM ANALYZE``, as autovacuum
leaves it, both as a custom and as a generic plan), and on the pages' contents.

Every named query of both queries.sql files (the names read from the files, so a new one is
checked as soon as it exists) and every statement sqlbuild makes for the product is planned on
the same store and may not read all of ``workflows``, ``transitions`` or ``steps``; a query
that must is listed, with its reason, in :data:`ALLOWED_SCANS`."""

from __future__ import annotations

import json
import re
import sqlite3
import uuid
from collections.abc import AsyncIterator, Iterator
from importlib import resources
from typing import Any

import psycopg
import pytest
from psycopg import sql as pgsql

from statewright.store import SQLiteStore, sqlbuild
from statewright.store.postgres import PostgresStore
from statewright.store.protocol import FullStore as Store
from statewright.store.queries import load_queries
from statewright.types import StuckCutoff, WorkflowFilter
from tests.conftest import _admin, _drop, pg_url, run_async
from tests.store import bulk

pytestmark = pytest.mark.one_worker  # the big store is filled once, by one worker

N = 100_000
HISTORY = 100_000
T0 = 1_800_000_000.0
TYPES = [f"type{i}" for i in range(5)]
STATES = [f"state{i}" for i in range(10)]
TENANTS = [f"tenant{i}" for i in range(20)]
BIG = "big-one"
"""The workflow with HISTORY transitions and 1,000 steps."""


# The rows, made by the database itself (one INSERT ... SELECT each, over a series of numbers):
# 100,000 rows sent from Python (executemany, COPY) cost SQLite 4 times the CPU.
SERIES = {
    "sqlite": "WITH RECURSIVE n(i) AS (SELECT {lo} UNION ALL SELECT i + 1 FROM n WHERE i < {hi}) ",
    "postgres": "WITH n(i) AS (SELECT generate_series({lo}, {hi})) ",
}
PAD = {  # i as six digits (wf-000042)
    "sqlite": "printf('%06d', i)",
    "postgres": "lpad(i::text, 6, '0')",
}
FILL = [
    # Workflow i: type i % 5, state (i // 5) % 10, entered at T0 + i % 5000 (ties on the
    # time), tenant i % 20, every tenth terminal, every thousandth (from 7) parked, the
    # machine's versions 1 and 2 alternating.
    (
        0,
        N - 1,
        "INSERT INTO workflows (id, type, machine_version, state, context, version, attempts,"
        " terminal, created_at, updated_at, state_entered_at, tenant, parked)"
        " SELECT 'wf-' || {pad}, 'type' || (i % 5), 1 + i % 2, 'state' || ((i / 5) % 10), '{{}}',"
        " 1, 0, i % 10 = 9, {t0} + i % 5000, {t0} + i % 5000, {t0} + i % 5000,"
        " 'tenant' || (i % 20), CASE WHEN i % 1000 = 7 THEN 'fatal_error' END FROM n",
    ),
    (
        0,
        0,
        "INSERT INTO workflows (id, type, machine_version, state, context, version, attempts,"
        " terminal, created_at, updated_at, state_entered_at, tenant, parked)"
        " SELECT {big}, 'type0', 1, 'state0', '{{}}', 1, 0, 1 = 0, {t0}, {t0}, {t0}, 'default',"
        " NULL FROM n",
    ),
    # The big one's HISTORY transitions (versions 1...), its 1,000 steps (three a second).
    (
        1,
        HISTORY,
        "INSERT INTO transitions (workflow_id, version, from_state, to_state, event, payload,"
        " actor, at) SELECT {big}, i, CASE WHEN i > 1 THEN 'state0' END, 'state0', 'go', '{{}}',"
        " 't', {t0} + i FROM n",
    ),
    (
        0,
        999,
        "INSERT INTO steps (key, workflow_id, step, status, attempts, started_at)"
        " SELECT {big} || ':s' || substr({pad}, 3), {big}, 's' || i, 'done', 1, {t0} + i / 3"
        " FROM n",
    ),
    # Search attributes: an order number of its own for each workflow, a customer for every
    # hundred (the workflows i with the same i % 1000).
    (
        0,
        N - 1,
        "INSERT INTO search_attributes (workflow_id, name, value)"
        " SELECT 'wf-' || {pad}, 'order_number', 'A-' || {pad} FROM n",
    ),
    (
        0,
        N - 1,
        "INSERT INTO search_attributes (workflow_id, name, value)"
        " SELECT 'wf-' || {pad}, 'customer_id', 'c' || (i % 1000) FROM n",
    ),
    # One step for every other workflow too, as at scale: with the big one's alone the
    # statistics say every step belongs to whichever workflow is asked for, and PostgreSQL
    # rightly plans a scan of the table for prune_steps.
    (
        0,
        N - 1,
        "INSERT INTO steps (key, workflow_id, step, status, attempts, started_at)"
        " SELECT 'wf-' || {pad} || ':s0', 'wf-' || {pad}, 's0', 'done', 1, {t0} + i % 5000"
        " FROM n",
    ),
]


@pytest.fixture(scope="module")
def pg_module_dsn(pg_server: str, pg_template: str) -> Iterator[str]:
    """A migrated PostgreSQL database for this module's tests (filled once)."""
    name = f"statewright_plans_{uuid.uuid4().hex[:10]}"
    _admin(
        pg_server,
        pgsql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
            pgsql.Identifier(name), pgsql.Identifier(pg_template)
        ),
    )
    yield pg_url(pg_server, name)
    _drop(pg_server, name)


def _open(where: str) -> Store:
    return PostgresStore(where) if where.startswith("postgresql:") else SQLiteStore(where)


async def _fill(where: str) -> None:
    store = _open(where)
    await store.open()
    d = "sqlite" if isinstance(store, SQLiteStore) else "postgres"
    statements = [
        SERIES[d].format(lo=lo, hi=hi) + insert.format(pad=PAD[d], t0=repr(T0), big=f"'{BIG}'")
        for lo, hi, insert in FILL
    ]
    try:
        if isinstance(store, SQLiteStore):

            def fill(conn: sqlite3.Connection) -> None:
                for statement in statements:
                    conn.execute(statement)

            await store.conn.write(fill)
        else:
            assert isinstance(store, PostgresStore)
            async with await psycopg.AsyncConnection.connect(store.dsn) as conn:
                for statement in statements:
                    await conn.execute(statement.encode())  # (no parameters: % is modulo)
                await conn.commit()
        await bulk.analyze(store)
    finally:
        await store.close()


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def filled(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """Where the big store is (a SQLite path or a PostgreSQL URL), filled once per module."""
    if request.param == "sqlite":
        where = str(tmp_path_factory.mktemp("plans") / "plans.db")
    else:
        where = request.getfixturevalue("pg_module_dsn")
    run_async(lambda: _fill(where))
    return where


@pytest.fixture
async def big_store(filled: str) -> AsyncIterator[Store]:
    store = _open(filled)
    await store.open()
    yield store
    await store.close()


async def _plan(store: Store, sql: str, params: dict[str, Any]) -> list[str]:
    """The plan's lines (SQLite: the details; PostgreSQL: the custom, then the generic plan)."""
    if isinstance(store, SQLiteStore):
        rows = await store.conn.read(
            lambda c: c.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()
        )
        return [r[3] for r in rows]
    assert isinstance(store, PostgresStore)
    numbers: dict[str, int] = {}

    def number(m: re.Match[str]) -> str:
        return f"${numbers.setdefault(m.group(1), len(numbers) + 1)}"

    # The generic plan (what a prepared statement may switch to after five runs) is planned
    # without the values.
    generic = re.sub(r"%\((\w+)\)s", number, sql)
    async with await psycopg.AsyncConnection.connect(store.dsn, autocommit=True) as conn:
        # what the store sets before reading the log (transitions_since reads up to it)
        await conn.execute("SELECT set_config('statewright.log_horizon', '0', false)")
        custom = await (await conn.execute("EXPLAIN " + sql, params)).fetchall()
        general = await (await conn.execute("EXPLAIN (GENERIC_PLAN) " + generic)).fetchall()
    return [f"[custom] {r[0]}" for r in custom] + [f"[generic] {r[0]}" for r in general]


FULL_SCAN = {
    "sqlite": re.compile(
        r"^SCAN (workflows|transitions|steps|search_attributes)\b(?! USING (COVERING )?INDEX)"
    ),
    "postgres": re.compile(r"Seq Scan on (workflows|transitions|steps|search_attributes)\b"),
}
SORTED_AFTER = {
    "sqlite": re.compile(r"USE TEMP B-TREE FOR (RIGHT PART OF )?ORDER BY"),
    "postgres": re.compile(r"\bSort\b"),
}


Query = tuple[str, str, dict[str, Any], bool, str]


def _queries(store: Store) -> list[Query]:
    """``(what, sql, params, in index order, index)``: every statement a page or count runs,
    and the index it should read."""
    d: sqlbuild.Dialect = "sqlite" if isinstance(store, SQLiteStore) else "postgres"
    out: list[Query] = []

    def listing(what: str, where: WorkflowFilter, index: str, ordered: bool = True) -> None:
        out.append((what, *sqlbuild.list_workflows(where, d), ordered, index))

    after = (T0 + 2500, "wf-050000")
    by_state = "workflows_state"
    listing("list by state without type", WorkflowFilter(state="state3"), by_state)
    listing("list by state, next page", WorkflowFilter(state="state3", after=after), by_state)
    listing("list by tenant", WorkflowFilter(tenant="tenant7"), "workflows_tenant")
    listing(
        "list by tenant, next page",
        WorkflowFilter(tenant="tenant7", after=after),
        "workflows_tenant",
    )
    listing(
        "list by type and state",
        WorkflowFilter(type="type1", state="state3", after=after),
        "workflows_state_age",
    )
    terminal = "workflows_terminal_age"
    listing("list live", WorkflowFilter(terminal=False, after=after), terminal)
    listing("list ended", WorkflowFilter(terminal=True, after=after), terminal)
    # Without a filter the two ranges of workflows_terminal_age are merged: sorted, but
    # each side stops after its LIMIT.
    listing("list everything", WorkflowFilter(), terminal, ordered=False)
    listing("list everything, next page", WorkflowFilter(after=after), terminal, False)
    listing("list old ones", WorkflowFilter(entered_before=T0 + 10, after=after), terminal, False)
    # A bulk action's pages (statewright.engine.bulk): before the run's start; live ones
    # (with a state, checked on each row: BulkFilter.listing).
    cut = T0 + 4000
    listing(
        "bulk over a type and state",
        WorkflowFilter(
            type="type1", state="state3", terminal=False, entered_before=cut, after=after
        ),
        "workflows_state_age",
    )
    listing(
        "bulk over a state",
        WorkflowFilter(state="state3", entered_before=cut, after=after),
        by_state,
    )
    listing(
        "bulk over a type",
        WorkflowFilter(type="type1", terminal=False, entered_before=cut, after=after),
        terminal,
    )

    # By search attributes: the first pair's range of search_attributes_value, each workflow
    # by its primary key, the (few) matches sorted.
    by_search = "search_attributes_value"
    order = (("order_number", "A-000123"),)
    listing("list by a search attribute", WorkflowFilter(search=order), by_search, False)
    customer = (("customer_id", "c123"),)
    listing(
        "list by a search attribute, next page",
        WorkflowFilter(search=customer, after=after),
        by_search,
        False,
    )
    listing(
        "list by two search attributes, a type, live ones",
        WorkflowFilter(search=customer + order, type="type3", terminal=False),
        by_search,
        False,
    )
    listing(
        "bulk by a search attribute",
        WorkflowFilter(search=customer, terminal=False, entered_before=cut, after=after),
        by_search,
        False,
    )
    listing(
        "list parked by a search attribute",
        WorkflowFilter(search=customer, parked=True),
        by_search,
        False,
    )

    cutoffs = [
        StuckCutoff(t, s, T0 + 500 * (1 + i % 3)) for t in TYPES for i, s in enumerate(STATES)
    ]
    cutoffs += [StuckCutoff("type1", "state2", T0 + 4000, machine_version=2)]
    groups = sqlbuild.stuck_groups(cutoffs)
    age = "workflows_state_age"
    for sql, params, _ in sqlbuild.count_stuck(groups, d, None):
        out.append(("stuck counts", sql, params, False, age))
    for sql, params, _ in sqlbuild.count_stuck(groups, d, "tenant3"):
        out.append(("stuck counts of a tenant", sql, params, False, age))
    parked = "workflows_parked"
    # With the parked ones (stuck from the moment they park): each group's range of
    # workflows_state_age, plus its parked ones from workflows_parked.
    for sql, params, _ in sqlbuild.count_stuck(groups, d, None, parked=True):
        out.append(("stuck counts with the parked", sql, params, False, age))
        out.append(("stuck counts with the parked", sql, params, False, parked))
    for sql, params, _ in sqlbuild.count_stuck(groups, d, "tenant3", parked=True):
        out.append(("stuck counts of a tenant with the parked", sql, params, False, parked))
    by_version = next(g for g in groups if (g.type, g.state) == ("type1", "state2"))
    for what, group, key in (
        ("stuck page", groups[0], None),
        ("stuck next page", groups[7], ("type0", "state7", T0 + 10, "wf-000035")),
        ("stuck page, versions with own thresholds", by_version, None),
    ):
        page = sqlbuild.stuck_page(group, d, None, key, 100)
        assert page is not None
        out.append((what, *page, True, age))
        page = sqlbuild.stuck_parked_page(group, d, None, key, 100)
        assert page is not None
        out.append((f"{what}: the parked ones", *page, True, parked))
    page = sqlbuild.stuck_parked_page(groups[3], d, "tenant3", None, 100)
    assert page is not None
    out.append(("stuck page of a tenant: the parked ones", *page, True, parked))
    out.append(("parked counts", *sqlbuild.count_parked(d, None), False, parked))
    out.append(("parked counts of a tenant", *sqlbuild.count_parked(d, "tenant3"), False, parked))
    listing(
        "list parked of a type and state",
        WorkflowFilter(type="type1", state="state3", parked=True, after=after),
        parked,
    )
    listing(
        "list parked of a tenant",
        WorkflowFilter(type="type1", state="state3", parked=True, tenant="tenant3"),
        parked,
    )

    history = load_queries(d)["history"]
    params = {"id": BIG, "after": 50_000, "limit": 1000}
    out.append(("history page", history, params, True, "transitions_workflow_version"))
    steps = sqlbuild.steps(BIG, d, (T0 + 100, f"{BIG}:s0300"), 100)
    out.append(("steps page", *steps, True, "steps_workflow"))
    return out


async def test_every_page_and_count_is_an_index_range(big_store: Store) -> None:
    d = "sqlite" if isinstance(big_store, SQLiteStore) else "postgres"
    problems = []
    for what, sql, params, ordered, index in _queries(big_store):
        plan = await _plan(big_store, sql, params)
        text = "\n".join(plan)
        full = (FULL_SCAN[d].search(line.split("] ", 1)[-1].strip()) for line in plan)
        if any(full) or _scan(d, sql, plan):  # (the latter: under an alias too)
            problems.append(f"{what}: a full scan\n{text}")
        if ordered and any(SORTED_AFTER[d].search(line) for line in plan):
            problems.append(f"{what}: sorted after reading (the index order is lost)\n{text}")
        if not re.search(rf"\b{index}\b", text):
            problems.append(f"{what}: not on {index}\n{text}")
    assert not problems, "\n\n".join(problems)


async def test_search_listings_of_a_big_store_are_exact(big_store: Store) -> None:
    # workflow 123: customer c123, with workflows 1123, 2123, ... (100 in all)
    found = await big_store.list_workflows(WorkflowFilter(search=(("order_number", "A-000123"),)))
    assert [r.id for r in found] == ["wf-000123"]
    customer = (("customer_id", "c123"),)
    every = await big_store.list_workflows(WorkflowFilter(search=customer, limit=1000))
    assert sorted(r.id for r in every) == [f"wf-{i:06d}" for i in range(123, N, 1000)]
    assert [(r.state_entered_at, r.id) for r in every] == sorted(
        (r.state_entered_at, r.id) for r in every
    )
    first = await big_store.list_workflows(WorkflowFilter(search=customer, limit=30))
    rest = await big_store.list_workflows(
        WorkflowFilter(
            search=customer, limit=1000, after=(first[-1].state_entered_at, first[-1].id)
        )
    )
    assert [r.id for r in first + rest] == [r.id for r in every]
    both = (*customer, ("order_number", "A-001123"))
    assert [r.id for r in await big_store.list_workflows(WorkflowFilter(search=both))] == [
        "wf-001123"
    ]
    live = await big_store.list_workflows(WorkflowFilter(search=customer, terminal=True))
    assert live == []  # i % 10 == 3 for them all: none of them is terminal


async def test_pages_of_a_big_store_are_exact(big_store: Store) -> None:
    # A workflow with 100,000 transitions, read in pages of 1,000.
    versions: list[int] = []
    after = 0
    while True:
        page = await big_store.history(BIG, after_version=after, limit=1000)
        versions += [e.version for e in page]
        if len(page) < 1000:
            break
        after = page[-1].version
    assert versions == list(range(1, HISTORY + 1))
    # Listings far from the start cost what the first page does, and are exact.
    where = WorkflowFilter(state="state3", limit=50)
    first = await big_store.list_workflows(where)
    assert len(first) == 50
    deep = await big_store.list_workflows(
        WorkflowFilter(state="state9", limit=50, after=(T0 + 4999, "wf-0"))
    )
    assert [r.state_entered_at for r in deep] == [T0 + 4999] * len(deep) and deep
    # True counts of everything stuck, however many.
    cutoffs = [StuckCutoff(t, s, T0 + 1000) for t in TYPES for s in STATES]
    counted = await big_store.count_stuck(cutoffs)
    # entered before T0 + 1000: i % 5000 < 1000, i.e. 20% of N, plus the big one
    assert sum(n for _, _, n, _ in counted) == N // 5 + 1
    parked = await big_store.count_parked()
    assert sum(n for _, _, _, n, _ in parked) == N // 1000
    # With the parked ones: those entered at or after the cutoff too (i % 5000 >= 1000 among
    # i % 1000 == 7: 80 of the 100), each once.
    counted = await big_store.count_stuck(cutoffs, parked=True)
    assert sum(n for _, _, n, _ in counted) == N // 5 + 1 + 80


# -- every named query, and every statement sqlbuild makes for the product ---------------------

ALLOWED_SCANS: dict[tuple[str, str], str] = {
    # (dialect, query name): why this statement may read a whole table. None must: an entry
    # here needs a reason, and one that no longer scans fails the test (remove it).
}
EXPECTED_INDEX: dict[str, str] = {
    # Named queries whose plan must use one index, not merely avoid a full scan: a search of
    # the wrong index (all live workflows, by `terminal`) costs as much as a scan.
    "claim_due": "workflows_due",
    "expired_leases": "workflows_lease",
    "claim_due_of_type": "workflows_type_due",
    "claim_due_of_free_types": "workflows_type_due",
    "limit_leased": "workflows_lease",
    "schedule_due": "schedules_due",
}
_ID = "wf-000123"
PARAM_VALUES: dict[str, Any] = {
    "id": _ID,
    "workflow_id": _ID,
    "key": "k",
    "seq": 0,
    "limit": 100,
    "after": 0,
    "since": T0,
    "now": T0 + 10,
    "until": T0 + 100,
    "at": T0,
    "due_at": T0,
    "worker": "w1",
    "owner": "w1",
    "fence": 1,
    "attempt": 1,
    "expected_version": 1,
    "version": 1,
    "machine_version": 1,
    "state": "state1",
    "to_state": "state1",
    "from_state": "state0",
    "wake_state": "state1",
    "type": "type1",
    "event": "go",
    "payload": "{}",
    "context": "{}",
    "context_patch": "{}",
    "progress": "{}",
    "tenant": "tenant1",
    "terminal": False,
    "attempts": 0,
    "timer_id": 1,
    "fired_timer_id": 1,
    "actor": "a",
    "code": "illegal_transition",
    "message": "m",
    "name": "n",
    "step": "s",
    "status": "done",
    "reason": "r",
    "release_lease": False,
    "require_unleased": False,
    "clear_timers": False,
    "all": False,
    "keep": False,
}
LIST_VALUES: dict[str, list[Any]] = {
    # parameters that are lists (PostgreSQL arrays; JSON text on SQLite)
    "ids": ["wf-000001", "wf-000002"],
    "keys": ["k"],
    "held": [["wf-000001", 1]],
    "skip": [],
    "inbox_ids": [],
    "drop_keys": [],
    "types": ["type1"],
    "fences": [1],
    "events": ["go"],
}
_PARAM = {"sqlite": re.compile(r"(?<!:):(\w+)"), "postgres": re.compile(r"%\((\w+)\)s")}


def _value(name: str, dialect: str) -> Any:
    if name in LIST_VALUES:
        value = LIST_VALUES[name]
        return json.dumps(value) if dialect == "sqlite" else value
    if name.startswith("timer_"):  # the arrays of timers to arm
        return "[]" if dialect == "sqlite" else []
    param = PARAM_VALUES.get(name)  # anything else: NULL (an optional value)
    return int(param) if dialect == "sqlite" and isinstance(param, bool) else param


def _scan(dialect: str, sql: str, plan: list[str]) -> list[str]:
    """The plan lines that read all of workflows, transitions, steps or search_attributes
    (under any alias)."""
    if dialect == "postgres":
        return [ln for ln in plan if FULL_SCAN["postgres"].search(ln)]
    names = {"workflows", "transitions", "steps", "search_attributes"}
    for _table, alias in re.findall(
        r"\b(workflows|transitions|steps|search_attributes)\s+(?:AS\s+)?([a-z_]\w*)",
        sql,
        re.IGNORECASE,
    ):
        if alias.upper() not in _KEYWORDS:
            names.add(alias)
    scan = re.compile(rf"^SCAN ({'|'.join(sorted(names))})\b(?! USING (COVERING )?INDEX)")
    return [ln for ln in plan if scan.search(ln.strip())]


_KEYWORDS = {
    "WHERE", "SET", "ON", "USING", "INDEXED", "VALUES", "JOIN", "CROSS", "LEFT", "INNER", "GROUP",
    "ORDER", "LIMIT", "UNION", "RETURNING", "AND", "OR", "WITH", "SELECT", "FROM", "AS", "FOR",
}  # fmt: skip


def _named(dialect: str) -> list[str]:
    """Every ``-- name:`` of the dialect's queries.sql, read from the file itself."""
    text = resources.files("statewright.store").joinpath(f"sql/{dialect}/queries.sql")
    return re.findall(r"^-- name: (\w+)\s*$", text.read_text(), re.MULTILINE)


async def test_every_named_query_reads_indexes_only(big_store: Store) -> None:
    d = "sqlite" if isinstance(big_store, SQLiteStore) else "postgres"
    queries = load_queries(d)
    names = _named(d)
    assert names and sorted(names) == sorted(queries), "queries.sql and load_queries disagree"
    problems, scanned = [], set()
    for name in names:
        sql = queries[name]
        params = {p: _value(p, d) for p in _PARAM[d].findall(sql)}
        plan = await _plan(big_store, sql, params)
        text = "\n".join(plan)
        if _scan(d, sql, plan):
            scanned.add(name)
            if (d, name) not in ALLOWED_SCANS:
                problems.append(f"{name}: a full scan\n{text}")
        index = EXPECTED_INDEX.get(name)
        if index is not None and not re.search(rf"\b{index}\b", text):
            problems.append(f"{name}: not on {index}\n{text}")
    stale = {n for (dd, n) in ALLOWED_SCANS if dd == d} - scanned
    assert not stale, f"allowed to scan but no longer does (remove the entries): {stale}"
    assert not problems, "\n\n".join(problems)


def _built(d: sqlbuild.Dialect) -> list[tuple[str, str, dict[str, Any]]]:
    """``(what, sql, params)``: every shape of statement sqlbuild makes for the product, beyond
    the listings and stuck reads of :func:`_queries`."""
    out: list[tuple[str, str, dict[str, Any]]] = []
    for tenant in (None, "tenant3"):
        since = sqlbuild.transitions_since(10, 500, tenant, d)
        out.append((f"transitions since, tenant {tenant}", *since))
        out.append((f"rejections, tenant {tenant}", *sqlbuild.rejections(T0, tenant, 200, d)))
        counted = sqlbuild.count_rejections(T0, tenant, d)
        out.append((f"count rejections, tenant {tenant}", *counted))
        # the last 15 minutes (the big workflow's log runs to T0 + HISTORY)
        built = sqlbuild.live_event_counts(T0 + HISTORY - 900, ["err", "go"], tenant, d)
        assert built is not None
        out.append((f"live event counts, tenant {tenant}", *built))
        retrying = WorkflowFilter(terminal=False, min_attempts=3, tenant=tenant, limit=1000)
        out.append((f"retrying, tenant {tenant}", *sqlbuild.list_workflows(retrying, d)))
        samples = WorkflowFilter(
            type="type1", state="state3", terminal=False, tenant=tenant, entered_before=T0 + 9,
            limit=5,
        )  # fmt: skip
        out.append((f"alert samples, tenant {tenant}", *sqlbuild.list_workflows(samples, d)))
        kept = [(t, s, flag, 1) for t in TYPES for s in STATES for flag in (0, 1)]
        for terminal, after, before in ((False, None, T0 + 9), (True, T0 + 9, None)):
            groups = sqlbuild.count_groups(kept, terminal)
            for sql, params, _ in sqlbuild.count_in_groups(groups, d, tenant, after, before):
                out.append((f"counts of terminal={terminal}, tenant {tenant}", sql, params))
    return out


async def test_every_built_statement_reads_indexes_only(big_store: Store) -> None:
    d: sqlbuild.Dialect = "sqlite" if isinstance(big_store, SQLiteStore) else "postgres"
    problems = []
    for what, sql, params in _built(d):
        plan = await _plan(big_store, sql, params)
        if _scan(d, sql, plan):
            problems.append(f"{what}: a full scan\n" + "\n".join(plan))
    assert not problems, "\n\n".join(problems)


async def test_kept_counts_match_the_rows(big_store: Store) -> None:
    # The triggers kept workflow_counts through the bulk insert: what /metrics reads.
    counted = await big_store.count_by_state()
    assert sum(n for *_, n in counted) == N + 1
    assert ("type1", "state3", N // 50) in counted
    ended = await big_store.count_by_state(terminal=True, entered_after=T0 + 4990)
    recent = sum(1 for i in range(N) if i % 10 == 9 and i % 5000 >= 4990)
    assert sum(n for *_, n in ended) == recent
