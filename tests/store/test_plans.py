"""Heavy readers stay cheap: on 100,000 workflows (and a workflow with 100,000 transitions),
every listing, page and count the API serves is a range of an index, never a full scan, on
both stores. Checked on the plans the databases choose (SQLite ``EXPLAIN QUERY PLAN`` without
statistics, as the store runs; PostgreSQL ``EXPLAIN`` after ``VACUUM ANALYZE``, as autovacuum
leaves it, both as a custom and as a generic plan), and on the pages' contents."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql as pgsql

from statewright.store import SQLiteStore, Store, sqlbuild
from statewright.store.postgres import PostgresStore
from statewright.store.queries import load_queries
from statewright.types import StuckCutoff, WorkflowFilter
from tests.conftest import _admin, _drop, pg_url, run_async
from tests.store import bulk

N = 100_000
HISTORY = 100_000
T0 = 1_800_000_000.0
TYPES = [f"type{i}" for i in range(5)]
STATES = [f"state{i}" for i in range(10)]
TENANTS = [f"tenant{i}" for i in range(20)]
BIG = "big-one"
"""The workflow with HISTORY transitions and 1,000 steps."""


def _workflows() -> list[tuple[Any, ...]]:
    rows = []
    for i in range(N):
        rows.append(
            bulk.workflow(
                f"wf-{i:06d}",
                TYPES[i % 5],
                STATES[(i // 5) % 10],
                T0 + i % 5000,  # ties on the time entered
                tenant=TENANTS[i % 20],
                terminal=i % 10 == 9,
                parked="fatal_error" if i % 1000 == 7 else None,
                machine_version=1 + i % 2,
            )
        )
    rows.append(bulk.workflow(BIG, "type0", "state0", T0))
    return rows


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
    try:
        started = time.perf_counter()
        await bulk.insert(store, "workflows", bulk.WORKFLOW_COLUMNS, _workflows())
        await bulk.insert(
            store,
            "transitions",
            bulk.TRANSITION_COLUMNS,
            (
                (BIG, v, None if v == 1 else "state0", "state0", "go", "{}", "t", T0 + v)
                for v in range(1, HISTORY + 1)
            ),
        )
        await bulk.insert(
            store,
            "steps",
            bulk.STEP_COLUMNS,
            ((f"{BIG}:s{i:04d}", BIG, f"s{i}", "done", 1, T0 + i // 3) for i in range(1000)),
        )
        await bulk.analyze(store)
        assert time.perf_counter() - started < 60
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
        custom = await (await conn.execute("EXPLAIN " + sql, params)).fetchall()
        general = await (await conn.execute("EXPLAIN (GENERIC_PLAN) " + generic)).fetchall()
    return [f"[custom] {r[0]}" for r in custom] + [f"[generic] {r[0]}" for r in general]


FULL_SCAN = {
    "sqlite": re.compile(r"^SCAN (workflows|transitions|steps)\b(?! USING (COVERING )?INDEX)"),
    "postgres": re.compile(r"Seq Scan on (workflows|transitions|steps)\b"),
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
    by_version = next(g for g in groups if (g.type, g.state) == ("type1", "state2"))
    for what, group, key in (
        ("stuck page", groups[0], None),
        ("stuck next page", groups[7], ("type0", "state7", T0 + 10, "wf-000035")),
        ("stuck page, versions with own thresholds", by_version, None),
    ):
        page = sqlbuild.stuck_page(group, d, None, key, 100)
        assert page is not None
        out.append((what, *page, True, age))
    parked = "workflows_parked"
    out.append(("parked counts", *sqlbuild.count_parked(d, None), False, parked))
    out.append(("parked counts of a tenant", *sqlbuild.count_parked(d, "tenant3"), False, parked))

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
        if any(FULL_SCAN[d].search(line.split("] ", 1)[-1].strip()) for line in plan):
            problems.append(f"{what}: a full scan\n{text}")
        if ordered and any(SORTED_AFTER[d].search(line) for line in plan):
            problems.append(f"{what}: sorted after reading (the index order is lost)\n{text}")
        if not re.search(rf"\b{index}\b", text):
            problems.append(f"{what}: not on {index}\n{text}")
    assert not problems, "\n\n".join(problems)


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
    assert sum(n for _, _, n in parked) == N // 1000
