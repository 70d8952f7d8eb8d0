"""Flat cost as the store grows: every operation on 1,000,000 workflows (8,000,000 log rows)
next to the same operation on 1,000 workflows built the same way, in the same run.

    .venv/bin/python bench/bench_scale.py [--workflows 1000000] [--small 1000] [--repeat 20]
                                          [--sqlite-only | --postgres-only] [--dsn DSN]
                                          [--check 200] [--json out.json]

Data. Three workflow types share one machine: live states ``s0`` .. ``s6`` (``s3`` has a
handler, so a workflow there is due for a worker; ``s5`` waits for an approval) and terminal
``done`` and ``failed``; every live state is stuck after an hour. Each workflow has exactly
eight log rows: its start and seven events (``ping``, a self-transition, then ``next`` with an
assign action, then ``finish`` or ``fail`` for ended ones). 60% ended (over 30 days), 10% live
and stuck (1 h to 1 day in their state), 30% live and fresh; ten tenants.

The rows are what the engine writes: each of the 70 paths is first run through the engine
(``Engine.start`` and ``Engine.send`` on a scratch SQLite store, ``ManualClock``), and its
workflow row and log rows become a template; the big stores are filled from the templates with
one ``INSERT ... SELECT`` per table (ids, type, tenant and times substituted; indexes dropped
during the load and created again after, from their own definitions). Then ``Engine.check``
replays a random sample of workflows, and a few workflows are run through the engine again
with their own ids and times and compared column by column with the bulk rows.

Timed (median of ``--repeat`` after two warm-up calls), on both sizes: send (one transition
through ``Engine.send``), get, a worker's claim of 8 (``Store.claim_due``; the leases are given
back between calls, untimed), list by type+state and by state alone (a first page of 20 and the
group's last full page, by keyset), ``Engine.stuck`` (first page), and ``GET /health/workflows``,
``GET /v1/alerts`` and ``GET /metrics`` (ASGI, in process). Target: each within 1.5x of the
small store, and the three endpoints under 50 ms.

PostgreSQL: ``--dsn`` / ``STATEWRIGHT_PG_DSN``, else a throwaway server from ``pgserver``;
``VACUUM ANALYZE`` after the load, as autovacuum would. SQLite files go to a temp folder
(``--dir``). It is a script, not a test: it prints numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import platform
import random
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from statewright import Engine, MachineBuilder, ManualClock, Next, SQLiteStore, WorkflowType
from statewright.definition.machine import Machine
from statewright.http import create_app
from statewright.store import Store
from statewright.types import WorkflowFilter

NOW = 1_800_000_000
TYPES = ["orders", "refunds", "tickets"]
LIVE = [f"s{i}" for i in range(7)]
TENANTS = [f"tenant{i}" for i in range(10)]
PLANS = 70
"""Paths through the machine: plan ``i % 70``, category ``i % 10``, state ``(i // 10) % 7``."""
EVENTS = 7
STEP = 10
"""Seconds between two transitions of one workflow."""
RATIO_TARGET = 1.5
PAGE = 20
"""Rows per page of the paged reads (full pages on both sizes)."""
MS_TARGET = 50.0
WF_COLUMNS = [
    "id", "type", "machine_version", "state", "context", "version", "attempts", "terminal",
    "created_at", "updated_at", "state_entered_at", "next_due_at", "lease_owner",
    "lease_expires_at", "last_error", "cancel_requested", "progress", "tenant", "fence",
    "total_attempts", "cancel_actor", "cancel_at", "cancel_version", "cancel_key", "parked",
]  # fmt: skip
TR_COLUMNS = [
    "workflow_id", "version", "from_state", "to_state", "event", "payload", "actor",
    "context_patch", "at", "idempotency_key",
]  # fmt: skip
TIMES = {"created_at", "updated_at", "state_entered_at", "next_due_at", "lease_expires_at"}


def machine(name: str) -> Machine:
    b = MachineBuilder(name)
    for i, state in enumerate(LIVE):
        b.state(state, initial=i == 0, stuck_after=3600.0)
    b.state("done", terminal=True).state("failed", terminal=True)
    b.event("next", assign={"steps": "(context.steps or 0) + 1"})
    b.event("ping").event("finish").event("fail")
    b.event("approve", roles=["approver"], approval=True)
    for a, z in itertools.pairwise(LIVE):
        b.transition("next", a, z)
    for s in LIVE:
        b.transition("ping", s, s)
    b.transition("approve", "s5", "s6")
    b.transition("finish", "s6", "done")
    b.transition("fail", LIVE, "failed")
    return b.build()


async def _work(run: Any) -> Next:
    return Next("next")


def workflow_types() -> list[WorkflowType]:
    return [WorkflowType(machine(t), handlers={"s3": _work}) for t in TYPES]


def path(plan: int) -> list[str]:
    """The seven events of a plan."""
    category, live = plan % 10, (plan // 10) % 7
    if category < 6 and category % 2 == 0:  # done: through every state
        return ["next"] * 6 + ["finish"]
    if category < 6:  # failed from s<live>
        return ["ping"] * (6 - live) + ["next"] * live + ["fail"]
    return ["ping"] * (EVENTS - live) + ["next"] * live  # live in s<live>


def age_sql(i: str) -> str:
    """Seconds since the last transition of workflow ``i`` (a SQL expression)."""
    return (
        f"(CASE WHEN {i} % 10 < 6 THEN ({i} * 7919) % 2592000"
        f" WHEN {i} % 10 = 6 THEN 3601 + ({i} * 7919) % 86400"
        f" ELSE ({i} * 7919) % 3000 END)"
    )


def age(i: int) -> int:
    c = i % 10
    if c < 6:
        return (i * 7919) % 2592000
    return 3601 + (i * 7919) % 86400 if c == 6 else (i * 7919) % 3000


def ident(i: int) -> tuple[str, str, str]:
    """(id, type, tenant) of workflow ``i``."""
    return f"wf-{i:07d}", TYPES[(i // 700) % 3], TENANTS[(i // 70) % 10]


async def run_plan(
    store: Store, plan: int, wid: str, type_: str, tenant: str, base: float
) -> Engine:
    """Workflow ``wid`` through plan ``plan`` by the engine, starting at ``base``."""
    clock = ManualClock(base)
    engine = Engine(store, workflow_types(), clock=clock)
    await engine.open()
    await engine.start(type_, {"plan": plan}, workflow_id=wid, tenant=tenant, actor="api")
    for n, event in enumerate(path(plan)):
        clock.advance(STEP)
        await engine.send(wid, event, {"n": n}, actor="api")
    return engine


@dataclass
class Templates:
    workflows: list[dict[str, Any]]
    transitions: list[dict[str, Any]]


async def templates(folder: Path) -> Templates:
    """Each plan's rows as the engine writes them, times as offsets from the start."""
    path_ = folder / "templates.db"
    store = SQLiteStore(path_)
    for plan in range(PLANS):
        engine = await run_plan(store, plan, f"p{plan}", TYPES[0], "default", 0.0)
        await engine.close()
        store = SQLiteStore(path_)
    conn = sqlite3.connect(path_)
    conn.row_factory = sqlite3.Row
    wfs = [dict(r) for r in conn.execute("SELECT * FROM workflows ORDER BY created_at, id")]
    trs = [dict(r) for r in conn.execute("SELECT * FROM transitions ORDER BY seq")]
    conn.close()
    for w in wfs:
        w["plan"] = int(w["id"][1:])
        assert w["version"] == EVENTS + 1 and w["lease_owner"] is None
        assert w["updated_at"] == EVENTS * STEP
    for t in trs:
        t["plan"] = int(t["workflow_id"][1:])
    assert len(trs) == PLANS * (EVENTS + 1)
    return Templates(wfs, trs)


# -- bulk load -------------------------------------------------------------------------------


def _literal(v: Any) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, int | float):
        return repr(v)
    return "'" + str(v).replace("'", "''") + "'"


def _values(rows: list[dict[str, Any]], columns: list[str]) -> str:
    return ",\n".join("(" + ", ".join(_literal(r[c]) for c in columns) + ")" for r in rows)


def load_sql(
    t: Templates, count: int, dialect: str, types: dict[str, str] | None = None
) -> list[str]:
    """Statements that fill the store with ``count`` workflows from the templates
    (``types``: PostgreSQL's column types, ``table.column`` -> type, for the casts)."""
    pg = dialect == "postgres"

    def col(table: str, c: str) -> str:
        return f"p.{c}::{types[f'{table}.{c}']}" if pg and types else f"p.{c}"

    w_cols = ["plan"] + [c for c in WF_COLUMNS if c not in ("id", "type", "tenant")]
    t_cols = ["plan"] + [c for c in TR_COLUMNS if c != "workflow_id"]
    trows = [{**r, "terminal": bool(r["terminal"])} if pg else r for r in t.workflows]
    tmp = "TEMP "
    out = [
        f"CREATE {tmp}TABLE plan_w AS SELECT * FROM (VALUES {_values(trows, w_cols)})"
        f" AS v({', '.join(w_cols)})"
        if pg
        else f"CREATE {tmp}TABLE plan_w ({', '.join(w_cols)})",
        f"CREATE {tmp}TABLE plan_t AS SELECT * FROM (VALUES {_values(t.transitions, t_cols)})"
        f" AS v({', '.join(t_cols)})"
        if pg
        else f"CREATE {tmp}TABLE plan_t ({', '.join(t_cols)})",
    ]
    if not pg:
        out.append(f"INSERT INTO plan_w ({', '.join(w_cols)}) VALUES {_values(trows, w_cols)}")
        out.append(
            f"INSERT INTO plan_t ({', '.join(t_cols)}) VALUES {_values(t.transitions, t_cols)}"
        )
    series = (
        f"generate_series(0::bigint, {count - 1}) AS n(i)"
        if pg
        else "(WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s"
        f" WHERE i < {count - 1}) SELECT i FROM s) AS n"
    )
    wid = "'wf-' || lpad(n.i::text, 7, '0')" if pg else "printf('wf-%07d', n.i)"
    type_expr = (
        "(ARRAY['orders','refunds','tickets'])[(n.i / 700) % 3 + 1]"
        if pg
        else ("CASE (n.i / 700) % 3 WHEN 0 THEN 'orders' WHEN 1 THEN 'refunds' ELSE 'tickets' END")
    )
    tenant = "'tenant' || ((n.i / 70) % 10)"
    base = f"({NOW} - {age_sql('n.i')} - {EVENTS * STEP})"
    cast = "::double precision" if pg else ""
    sel = []
    for c in WF_COLUMNS:
        if c == "id":
            sel.append(wid)
        elif c == "type":
            sel.append(type_expr)
        elif c == "tenant":
            sel.append(tenant)
        elif c in TIMES:
            sel.append(f"{base}{cast} + {col('workflows', c)}")
        else:
            sel.append(col("workflows", c))
    out.append(
        f"INSERT INTO workflows ({', '.join(WF_COLUMNS)}) SELECT {', '.join(sel)}"
        f" FROM {series} JOIN plan_w p ON p.plan = n.i % {PLANS} ORDER BY n.i"
    )
    sel = []
    for c in TR_COLUMNS:
        if c == "workflow_id":
            sel.append(wid)
        elif c == "at":
            sel.append(f"{base}{cast} + {col('transitions', c)}")
        else:
            sel.append(col("transitions", c))
    out.append(
        f"INSERT INTO transitions ({', '.join(TR_COLUMNS)}) SELECT {', '.join(sel)}"
        f" FROM {series} JOIN plan_t p ON p.plan = n.i % {PLANS} ORDER BY n.i, p.version"
    )
    out += ["DROP TABLE plan_w", "DROP TABLE plan_t"]
    return out


def load_sqlite(path: Path, t: Templates, count: int) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = OFF")  # loading only; the store reopens it as usual
    conn.execute("PRAGMA cache_size = -400000")
    indexes = conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
        " AND tbl_name IN ('workflows', 'transitions')"
    ).fetchall()
    conn.execute("BEGIN")
    for name, _ in indexes:
        conn.execute(f"DROP INDEX {name}")
    for stmt in load_sql(t, count, "sqlite"):
        conn.execute(stmt)
    for _, sql in indexes:
        conn.execute(sql)
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    os.sync()  # else the load's writeback slows every fsync of the timed writes down


def load_postgres(dsn: str, t: Templates, count: int) -> None:
    import psycopg

    with psycopg.connect(dsn) as conn:
        conn.execute("SET maintenance_work_mem = '512MB'")
        indexes = conn.execute(  # those no constraint (primary key, unique) owns
            "SELECT i.relname, pg_get_indexdef(i.oid) FROM pg_index x"
            " JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid"
            " WHERE t.relname IN ('workflows', 'transitions')"
            " AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.oid)"
        ).fetchall()
        for name, _ in indexes:
            conn.execute(f"DROP INDEX {name}")
        types = {
            f"{table}.{column}": kind
            for table, column, kind in conn.execute(
                "SELECT table_name, column_name, data_type FROM information_schema.columns"
                " WHERE table_schema = 'public' AND table_name IN ('workflows', 'transitions')"
            )
        }
        for stmt in load_sql(t, count, "postgres", types):
            conn.execute(stmt)  # type: ignore[arg-type]
        for _, sql in indexes:
            conn.execute(sql)
        conn.commit()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        conn.execute("CHECKPOINT")
    os.sync()  # else the load's writeback slows every fsync of the timed writes down


# -- checks ----------------------------------------------------------------------------------


async def check_rows(make_store: Callable[[], Store], count: int, sample: int) -> str:
    """Replay a random sample (Engine.check), and compare a few workflows with the engine's
    own rows for the same id, type, tenant and times."""
    rng = random.Random(13)
    picks = rng.sample(range(count), min(sample, count))
    store = make_store()
    engine = Engine(store, workflow_types(), clock=ManualClock(NOW))
    async with engine:
        for i in picks:
            await engine.check(ident(i)[0])
        compared = 0
        for i in picks[:5]:
            wid, type_, tenant = ident(i)
            base = float(NOW - age(i) - EVENTS * STEP)
            scratch = SQLiteStore(":memory:")
            ref = await run_plan(scratch, i % PLANS, wid, type_, tenant, base)
            want, got = await ref.get(wid), await engine.get(wid)
            want_log = [(*_log(r),) for r in await ref.history(wid)]
            got_log = [(*_log(r),) for r in await engine.history(wid)]
            await ref.close()
            assert want == got, f"{wid}: bulk row differs from the engine's\n{want}\n{got}"
            assert want_log == got_log, f"{wid}: bulk log differs from the engine's"
            compared += 1
    return f"check: {len(picks)} replayed (Engine.check), {compared} equal to engine-made rows"


def _log(r: Any) -> tuple[Any, ...]:
    return (r.version, r.from_state, r.to_state, r.event, r.payload, r.actor, r.context_patch,
            r.at, r.idempotency_key)  # fmt: skip


# -- timing ----------------------------------------------------------------------------------


async def timed(fn: Callable[[], Awaitable[Any]], repeat: int) -> tuple[float, Any]:
    for _ in range(2):
        await fn()
    times = []
    result = None
    for _ in range(repeat):
        started = time.perf_counter()
        result = await fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000, result


def describe(result: Any) -> str:
    if isinstance(result, httpx.Response):
        return f"HTTP {result.status_code}, {len(result.content):,} B"
    if isinstance(result, list):
        return f"{len(result)} rows"
    return "1 row" if result is not None else "-"


async def measure(store: Store, count: int, repeat: int) -> dict[str, tuple[float, str]]:
    engine = Engine(store, workflow_types(), clock=ManualClock(float(NOW)))
    await engine.open()
    app = create_app(engine, manage_engine=False)
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://bench")
    # fresh live workflows in s0 (plans 7, 8, 9): one ping each
    pingable = iter([ident(i)[0] for i in range(count) if i % PLANS in (7, 8, 9)])
    rng = random.Random(7)

    async def send() -> Any:
        return await engine.send(next(pingable), "ping", actor="bench")

    async def claim_timed() -> Any:
        rows = await store.claim_due("bench", float(NOW), 30.0, 8)
        claimed.append(rows)
        return rows

    claimed: list[Any] = []

    async def release() -> None:
        while claimed:
            for r in claimed.pop():
                await store.break_leases("bench", [r.id])

    def lister(**kw: Any) -> Callable[[], Awaitable[Any]]:
        return lambda: store.list_workflows(WorkflowFilter(limit=PAGE, **kw))

    async def deepest(**kw: Any) -> tuple[float, str]:
        """The key after which the group's last full page starts (untimed)."""
        rows = await store.list_workflows(WorkflowFilter(limit=count, **kw))
        assert len(rows) > PAGE, f"too few workflows for a deep page: {kw}"
        r = rows[-PAGE - 1]
        return (r.state_entered_at, r.id)

    by_type = await deepest(type="orders", state="s2")
    by_state = await deepest(state="s2")
    cases: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
        ("send (Engine.send)", send),
        ("get (Engine.get)", lambda: engine.get(ident(rng.randrange(count))[0])),
        ("claim of 8 (Store.claim_due)", claim_timed),
        ("list type+state, first page", lister(type="orders", state="s2")),
        ("list type+state, deep page", lister(type="orders", state="s2", after=by_type)),
        ("list by state, first page", lister(state="s2")),
        ("list by state, deep page", lister(state="s2", after=by_state)),
        ("stuck, first page (Engine.stuck)", lambda: engine.stuck(limit=PAGE)),
        ("GET /health/workflows", lambda: client.get("/health/workflows")),
        ("GET /v1/alerts", lambda: client.get("/v1/alerts")),
        ("GET /metrics", lambda: client.get("/metrics")),
    ]
    out: dict[str, tuple[float, str]] = {}
    try:
        for what, fn in cases:
            if fn is claim_timed:
                times = []
                for _ in range(repeat + 2):
                    started = time.perf_counter()
                    rows = await claim_timed()
                    times.append(time.perf_counter() - started)
                    await release()
                out[what] = (statistics.median(times[2:]) * 1000, describe(rows))
                continue
            ms, result = await timed(fn, repeat)
            out[what] = (ms, describe(result))
    finally:
        await client.aclose()
        await engine.close()
    return out


ENDPOINTS = ("GET /health/workflows", "GET /v1/alerts", "GET /metrics")


def report(title: str, small: int, big: int, a: dict[str, Any], b: dict[str, Any]) -> str:
    head = ["operation", f"{small:,} ms", f"{big:,} ms", "ratio", "result (big)", "target"]
    lines = [head]
    for what, (ms_big, got) in b.items():
        ms_small = a[what][0]
        ratio = ms_big / ms_small if ms_small else float("inf")
        ok = ratio <= RATIO_TARGET
        if what in ENDPOINTS:
            ok = ok or ms_big < MS_TARGET  # flat enough when far below the absolute target
            ok = ok and ms_big < MS_TARGET
        lines.append(
            [what, f"{ms_small:.3f}", f"{ms_big:.3f}", f"{ratio:.2f}x", got, "ok" if ok else "NO"]
        )
    widths = [max(len(r[i]) for r in lines) for i in range(len(head))]
    text = [
        "  ".join(c.ljust(w) if i in (0, 4) else c.rjust(w) for i, (c, w) in
                  enumerate(zip(row, widths, strict=True)))
        for row in lines
    ]  # fmt: skip
    text.insert(1, "  ".join("-" * w for w in widths))
    return title + "\n" + "\n".join(text)


# -- the two stores --------------------------------------------------------------------------


async def run_sqlite(args: argparse.Namespace, t: Templates, folder: Path) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for count in (args.small, args.workflows):
        path = folder / f"scale-{count}.db"
        store = SQLiteStore(path)
        await store.open()  # the schema, by the store's migrations
        await store.close()
        started = time.perf_counter()
        load_sqlite(path, t, count)
        mb = sum(f.stat().st_size for f in folder.glob(f"scale-{count}.db*")) / 2**20
        print(
            f"SQLite {sqlite3.sqlite_version}: {count:,} workflows, {count * 8:,} log rows "
            f"loaded in {time.perf_counter() - started:.1f} s ({mb:,.0f} MiB)"
        )
        print("  " + await check_rows(lambda p=path: SQLiteStore(p), count, args.check))
        if count == args.small:  # a first pass warms the process up (imports, caches)
            await measure(SQLiteStore(path), count, args.repeat)
        results[str(count)] = await measure(SQLiteStore(path), count, args.repeat)
    print(
        report(
            f"SQLite, median of {args.repeat} calls",
            args.small,
            args.workflows,
            results[str(args.small)],
            results[str(args.workflows)],
        )
    )
    return results


async def run_postgres(args: argparse.Namespace, t: Templates) -> dict[str, Any]:
    import psycopg
    from psycopg.conninfo import make_conninfo

    from statewright.store.postgres import PostgresStore

    dsn = args.dsn or os.environ.get("STATEWRIGHT_PG_DSN")
    server = None
    if not dsn:
        os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.mkdtemp())
        import pgserver

        server = pgserver.get_server(tempfile.mkdtemp(prefix="sw-bench-pg-"), cleanup_mode="stop")
        dsn = server.get_uri()
    results: dict[str, Any] = {}
    try:
        with psycopg.connect(dsn, autocommit=True) as admin:
            row = admin.execute("SHOW server_version").fetchone()
            version = row[0] if row else "?"
        for count in (args.small, args.workflows):
            name = f"sw_bench_scale_{count}_{os.getpid()}"
            with psycopg.connect(dsn, autocommit=True) as admin:
                admin.execute(f"DROP DATABASE IF EXISTS {name}")
                admin.execute(f"CREATE DATABASE {name}")
            url = make_conninfo(dsn, dbname=name)
            store = PostgresStore(url)
            await store.open()
            await store.close()
            started = time.perf_counter()
            load_postgres(url, t, count)
            print(
                f"PostgreSQL {version}: {count:,} workflows, {count * 8:,} log rows loaded in "
                f"{time.perf_counter() - started:.1f} s (then VACUUM ANALYZE)"
            )
            print("  " + await check_rows(lambda u=url: PostgresStore(u), count, args.check))
            if count == args.small:  # a first pass warms the process up (imports, caches)
                await measure(PostgresStore(url), count, args.repeat)
            results[str(count)] = await measure(PostgresStore(url), count, args.repeat)
            with psycopg.connect(dsn, autocommit=True) as admin:
                admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        print(
            report(
                f"PostgreSQL, median of {args.repeat} calls",
                args.small,
                args.workflows,
                results[str(args.small)],
                results[str(args.workflows)],
            )
        )
        return results
    finally:
        if server is not None:
            server.cleanup()


async def main(args: argparse.Namespace) -> None:
    print(f"{platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    base = Path(args.dir or tempfile.gettempdir())
    folder = Path(tempfile.mkdtemp(prefix="sw-bench-scale-", dir=base))
    out: dict[str, Any] = {"workflows": args.workflows, "small": args.small}
    try:
        t = await templates(folder)
        if not args.postgres_only:
            out["sqlite"] = await run_sqlite(args, t, folder)
            for f in folder.glob("scale-*"):
                f.unlink()
        if not args.sqlite_only:
            print()
            out["postgres"] = await run_postgres(args, t)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workflows", type=int, default=1_000_000)
    parser.add_argument("--small", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--check", type=int, default=200, help="workflows replayed per store")
    parser.add_argument("--sqlite-only", action="store_true")
    parser.add_argument("--postgres-only", action="store_true")
    parser.add_argument("--dsn", default=None, help="PostgreSQL server (else pgserver)")
    parser.add_argument("--dir", default=None, help="where the SQLite files go")
    parser.add_argument("--json", default=None)
    asyncio.run(main(parser.parse_args()))
