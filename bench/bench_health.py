"""Heavy readers on a big store: /health/workflows, stuck pages and listings on 1,000,000
workflows, next to a ceiling measured in the same run.

    .venv/bin/python bench/bench_health.py [--workflows 1000000] [--repeat 30]
                                           [--postgres [--dsn DSN]] [--json out.json]

Data (bulk-inserted with raw SQL, then opened by the store): three workflow types of eight
live states and two terminal ones; 60% of the workflows ended, 40% live, of which a quarter
(10% of all) sat in their state past its threshold (an hour): stuck, spread over every type
and state, times entered spread over a day so pages cross many values; 0.1% parked; ten
tenants.

Timed through the store and engine API (rows decoded included), each the median and p95 of
``--repeat`` calls after two warm-up calls:

- ceiling: ``store.get_workflow`` (a primary-key read of one row) and a ``SELECT 1`` on the
  store's own connection: the cost of one round trip through the store;
- health: what ``/health/workflows`` asks the store (``Engine.stuck_counts`` and
  ``Engine.parked_counts``: true counts from aggregates over index ranges), and the whole
  endpoint in process (ASGI, no network);
- stuck page: ``Engine.stuck(limit=100)`` first, and after a key in the middle of the stuck
  set (a deep page);
- listing pages of 100: by state without type, live ones, all of them (the two ranges of the
  terminal index merged), first and deep (keyset); and, for comparison, ``offset=10000``.

What the indexes cost writers (``--write-cost N``, SQLite, ``synchronous=NORMAL`` so fsync
does not hide it): N transitions ``a -> b -> a`` one after the other through ``Engine.send``
(each changes the state, so every index on the state and its time is updated), on a store of
100,000 workflows, with this schema's indexes and with the indexes before migration 0006
(narrower ``workflows_state_age`` and ``workflows_tenant``; no ``workflows_state``,
``workflows_terminal_age``, ``workflows_parked``), alternating, three rounds each.

PostgreSQL (``--postgres``): ``--dsn`` / ``STATEWRIGHT_BENCH_PG_DSN``, else a throwaway server
from ``pgserver``; ``VACUUM ANALYZE`` after the load, as autovacuum would. SQLite files go to a
temp folder (``--dir`` overrides). It is a script, not a test: it prints numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import platform
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from statewright import Engine, MachineBuilder, ManualClock, SQLiteStore, WorkflowType
from statewright.definition.machine import Machine
from statewright.http import create_app
from statewright.store import Store
from statewright.types import WorkflowFilter

TYPES = ["orders", "refunds", "tickets"]
LIVE = [f"step{i}" for i in range(8)]
ENDED = ["done", "failed"]
TENANTS = [f"tenant{i}" for i in range(10)]
THRESHOLD = 3600.0
NOW = 1_800_000_000.0
COLUMNS = (
    "id, type, machine_version, state, context, version, attempts, terminal, created_at, "
    "updated_at, state_entered_at, tenant, parked"
)
TARGET_MS = 50.0


def machine(name: str) -> Machine:
    b = MachineBuilder(name)
    for i, state in enumerate(LIVE):
        b.state(state, initial=i == 0, stuck_after=THRESHOLD)
    for state in ENDED:
        b.state(state, terminal=True)
    b.event("next").event("finish").event("fail")
    for a, z in itertools.pairwise(LIVE):
        b.transition("next", a, z)
    b.transition("finish", LIVE[-1], "done")
    b.transition("fail", LIVE, "failed")
    return b.build()


def rows(count: int) -> Iterator[tuple[Any, ...]]:
    """60% ended, 30% live and fresh, 10% stuck; 0.1% parked."""
    for i in range(count):
        kind = i % 10
        type_ = TYPES[i % 3]
        if kind < 6:
            state, terminal = ENDED[(i // 3) % 2], True
            entered = NOW - (i * 7919) % (30 * 86400)
        elif kind == 6:  # stuck: past the hour, spread over a day
            state, terminal = LIVE[(i // 30) % 8], False
            entered = NOW - THRESHOLD - 1 - (i * 7919) % 86400
        else:
            state, terminal = LIVE[(i // 30) % 8], False
            entered = NOW - (i * 7919) % int(THRESHOLD - 60)
        parked = "fatal_error" if i % 1000 == 7 else None
        yield (
            f"wf-{i:07d}",
            type_,
            1,
            state,
            "{}",
            1,
            0,
            terminal,
            entered,
            entered,
            entered,
            TENANTS[i % 10],
            parked,
        )


# -- loading ---------------------------------------------------------------------------------


def load_sqlite(path: Path, count: int) -> None:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = OFF")  # loading only; the store reopens it as usual
    marks = ", ".join("?" for _ in COLUMNS.split(","))
    sql = f"INSERT INTO workflows ({COLUMNS}) VALUES ({marks})"
    with conn:
        conn.executemany(sql, ((*r[:7], int(r[7]), *r[8:]) for r in rows(count)))
    conn.close()


def load_postgres(dsn: str, count: int) -> None:
    import psycopg

    with psycopg.connect(dsn) as conn:
        with conn.cursor() as cur, cur.copy(f"COPY workflows ({COLUMNS}) FROM STDIN") as copy:
            for r in rows(count):
                copy.write_row(r)
        conn.commit()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE workflows")


# -- timing ----------------------------------------------------------------------------------


async def timed(fn: Callable[[], Awaitable[Any]], repeat: int) -> tuple[float, float, Any]:
    """(median ms, p95 ms, the last result) of ``repeat`` calls after two warm-up calls."""
    for _ in range(2):
        await fn()
    times = []
    result = None
    for _ in range(repeat):
        started = time.perf_counter()
        result = await fn()
        times.append(time.perf_counter() - started)
    times.sort()
    return (
        statistics.median(times) * 1000,
        times[min(len(times) - 1, int(0.95 * len(times)))] * 1000,
        result,
    )


def size(result: Any) -> str:
    if isinstance(result, httpx.Response):
        body = result.json()
        return f"{body['stuck']:,} stuck ({result.status_code})"
    if isinstance(result, tuple):  # health: (stuck groups, parked)
        groups, parked = result
        total = sum(g.count for g in groups)
        return f"{total:,} stuck, {sum(n for *_, n in parked):,} parked"
    if isinstance(result, list):
        return f"{len(result)} rows"
    return "1 row" if result is not None else "-"


async def measure(store: Store, count: int, repeat: int) -> list[dict[str, Any]]:
    engine = Engine(store, [WorkflowType(machine(t)) for t in TYPES], clock=ManualClock(NOW))
    await engine.open()
    app = create_app(engine, manage_engine=False)
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://bench")
    mid = f"wf-{count // 2:07d}"

    async def select_1() -> Any:
        if isinstance(store, SQLiteStore):
            return await store.conn.read(lambda c: c.execute("SELECT 1").fetchone())
        async with store._connection() as conn:  # type: ignore[attr-defined]
            return await (await conn.execute("SELECT 1")).fetchone()

    async def health_queries() -> Any:
        return await engine.stuck_counts(), await engine.parked_counts()

    async def list_(**kw: Any) -> Any:
        return await store.list_workflows(WorkflowFilter(limit=100, **kw))

    deep_stuck = (TYPES[1], LIVE[4], NOW - THRESHOLD - 43200, "")
    half_day = (NOW - 43200, "")
    recent = (NOW - THRESHOLD / 2, "")
    cases: list[tuple[str, str, Callable[[], Awaitable[Any]]]] = [
        ("ceiling", "get_workflow (primary key)", lambda: store.get_workflow(mid)),
        ("ceiling", "SELECT 1 (one round trip)", select_1),
        ("health", "stuck_counts + parked_counts", health_queries),
        ("health", "GET /health/workflows (ASGI)", lambda: client.get("/health/workflows")),
        ("stuck", "first page of 100", lambda: engine.stuck(limit=100)),
        ("stuck", "deep page of 100 (keyset)", lambda: engine.stuck(limit=100, after=deep_stuck)),
        ("list", "by state, first page", lambda: list_(state=LIVE[3])),
        ("list", "by state, deep page", lambda: list_(state=LIVE[3], after=recent)),
        ("list", "live, first page", lambda: list_(terminal=False)),
        ("list", "live, deep page", lambda: list_(terminal=False, after=recent)),
        ("list", "all, first page", lambda: list_()),
        ("list", "all, deep page", lambda: list_(after=half_day)),
        (
            "list",
            "by type+state, deep page",
            lambda: list_(type=TYPES[2], state=LIVE[5], after=recent),
        ),
        ("list", "by tenant, deep page", lambda: list_(tenant=TENANTS[4], after=half_day)),
        ("compare", "by state, offset 10,000", lambda: list_(state=LIVE[3], offset=10_000)),
    ]

    out = []
    try:
        for group, what, fn in cases:
            p50, p95, result = await timed(fn, repeat)
            out.append(
                {"group": group, "what": what, "p50_ms": p50, "p95_ms": p95, "got": size(result)}
            )
    finally:
        await client.aclose()
        await engine.close()
    return out


def report(title: str, results: list[dict[str, Any]]) -> str:
    ceiling = next(r["p50_ms"] for r in results if r["what"].startswith("get_workflow"))
    head = ["what", "p50 ms", "p95 ms", "x ceiling", "result", f"< {TARGET_MS:g} ms"]
    lines = [head]
    for r in results:
        ok = (
            ""
            if r["group"] in ("ceiling", "compare")
            else ("yes" if r["p95_ms"] < TARGET_MS else "NO")
        )
        lines.append(
            [
                f"{r['group']}: {r['what']}",
                f"{r['p50_ms']:.3f}",
                f"{r['p95_ms']:.3f}",
                f"{r['p50_ms'] / ceiling:.1f}",
                r["got"],
                ok,
            ]
        )
    widths = [max(len(row[i]) for row in lines) for i in range(len(head))]
    text = [
        "  ".join(
            c.ljust(w) if i in (0, 4) else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in lines
    ]
    text.insert(1, "  ".join("-" * w for w in widths))
    return title + "\n" + "\n".join(text)


BEFORE_0006 = """
DROP INDEX workflows_state;
DROP INDEX workflows_terminal_age;
DROP INDEX workflows_parked;
DROP INDEX workflows_state_age;
CREATE INDEX workflows_state_age ON workflows (type, state, state_entered_at);
DROP INDEX workflows_tenant;
CREATE INDEX workflows_tenant ON workflows (tenant, state_entered_at);
"""
PINGPONG = (
    MachineBuilder("pingpong")
    .state("a", initial=True)
    .state("b")
    .state("done", terminal=True)
    .event("go")
    .event("back")
    .event("finish")
    .transition("go", "a", "b")
    .transition("back", "b", "a")
    .transition("finish", "b", "done")
    .build()
)


async def transitions_per_second(path: Path, old_indexes: bool, count: int) -> float:
    store = SQLiteStore(path, synchronous="NORMAL")
    await store.open()
    await store.close()
    load_sqlite(path, 100_000)
    if old_indexes:
        conn = sqlite3.connect(path)
        conn.executescript(BEFORE_0006)
        conn.close()
    # runs_here: no handler anywhere, so the states it enters are not due (as before).
    pingpong = WorkflowType(PINGPONG, runs_here=True)
    engine = Engine(SQLiteStore(path, synchronous="NORMAL"), [pingpong])
    async with engine:
        for i in range(8):
            await engine.start("pingpong", workflow_id=f"pp-{i}", actor="bench")
        started = time.perf_counter()
        for n in range(count):
            event = "go" if (n // 8) % 2 == 0 else "back"
            await engine.send(f"pp-{n % 8}", event, actor="bench")
        return count / (time.perf_counter() - started)


async def write_cost(count: int, folder: Path) -> dict[str, list[float]]:
    got: dict[str, list[float]] = {"new": [], "old": []}
    for r in range(3):
        for kind in ("new", "old") if r % 2 == 0 else ("old", "new"):
            path = folder / f"write-{kind}-{r}.db"
            got[kind].append(await transitions_per_second(path, kind == "old", count))
            for f in folder.glob(f"write-{kind}-{r}.db*"):
                f.unlink()
    new, old = statistics.median(got["new"]), statistics.median(got["old"])
    print(
        f"index write cost (SQLite NORMAL, {count:,} sequential transitions on 100,000 "
        f"workflows, median of 3): {new:,.0f} transitions/s with the 0006 indexes, "
        f"{old:,.0f} with those before ({new / old - 1:+.1%})"
    )
    return got


async def run_sqlite(args: argparse.Namespace) -> list[dict[str, Any]]:
    base = Path(args.dir or tempfile.gettempdir())
    folder = Path(tempfile.mkdtemp(prefix="sw-bench-health-", dir=base))
    path = folder / "health.db"
    try:
        store = SQLiteStore(path)
        await store.open()  # the schema, by the store's migrations
        await store.close()
        started = time.perf_counter()
        load_sqlite(path, args.workflows)
        loaded = time.perf_counter() - started
        mb = sum(f.stat().st_size for f in folder.iterdir()) / 2**20
        print(
            f"SQLite {sqlite3.sqlite_version}: {args.workflows:,} workflows loaded in "
            f"{loaded:.1f} s ({mb:,.0f} MiB), no ANALYZE (as the store runs)"
        )
        results = await measure(SQLiteStore(path), args.workflows, args.repeat)
        print(
            report(f"SQLite, {args.workflows:,} workflows, median of {args.repeat} calls", results)
        )
        if args.write_cost:
            print()
            await write_cost(args.write_cost, folder)
        return results
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)


async def run_postgres(args: argparse.Namespace) -> list[dict[str, Any]]:
    import psycopg
    from psycopg.conninfo import make_conninfo

    from statewright.store.postgres import PostgresStore

    dsn = args.dsn or os.environ.get("STATEWRIGHT_BENCH_PG_DSN")
    server = None
    if not dsn:
        os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.mkdtemp())
        import pgserver

        server = pgserver.get_server(tempfile.mkdtemp(prefix="sw-bench-pg-"), cleanup_mode="stop")
        dsn = server.get_uri()
    try:
        name = f"sw_bench_health_{os.getpid()}"
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name}")
            admin.execute(f"CREATE DATABASE {name}")
            version = admin.execute("SHOW server_version").fetchone()
        url = make_conninfo(dsn, dbname=name)
        store = PostgresStore(url)
        await store.open()
        await store.close()
        started = time.perf_counter()
        load_postgres(url, args.workflows)
        print(
            f"PostgreSQL {version[0] if version else '?'}: {args.workflows:,} workflows loaded "
            f"in {time.perf_counter() - started:.1f} s (COPY, then VACUUM ANALYZE)"
        )
        results = await measure(PostgresStore(url), args.workflows, args.repeat)
        print(
            report(
                f"PostgreSQL, {args.workflows:,} workflows, median of {args.repeat} calls", results
            )
        )
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        return results
    finally:
        if server is not None:
            server.cleanup()


async def main(args: argparse.Namespace) -> None:
    print(f"{platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    out: dict[str, Any] = {"workflows": args.workflows, "repeat": args.repeat}
    out["sqlite"] = await run_sqlite(args)
    if args.postgres:
        print()
        out["postgres"] = await run_postgres(args)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workflows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--postgres", action="store_true", help="also on PostgreSQL")
    parser.add_argument("--dsn", default=None, help="PostgreSQL server (else pgserver)")
    parser.add_argument("--dir", default=None, help="where the SQLite file goes")
    parser.add_argument("--keep", action="store_true", help="keep the SQLite file")
    parser.add_argument("--json", default=None)
    parser.add_argument(
        "--write-cost", type=int, default=0, help="transitions for the index write cost (0: skip)"
    )
    asyncio.run(main(parser.parse_args()))
