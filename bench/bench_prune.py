"""Prune on a big store: how fast finished workflows go, and whether live transitions wait.

    .venv/bin/python bench/bench_prune.py [--workflows 1000000] [--older-than 1d] [--batch 500]
                                          [--sqlite-only | --postgres-only] [--dsn DSN]
                                          [--in-process] [--json out.json]

The store is bench_scale.py's (its builder, reused): ``--workflows`` workflows of eight log
rows each, 60% of them finished over the last 30 days; ``--older-than 1d`` makes about 58% of
all workflows prunable. Timed: ``Engine.send`` (one ``ping`` self-transition on a live
workflow, one client, one after the other) for ``--idle`` sends with nothing else running,
then the same sends while ``Engine.prune`` deletes everything older than the cutoff in another
process (``--in-process``: in this one, on the same event loop and store, as a worker's
periodic prune runs). Printed: the prune's rate (workflows/s) and rows, and p50/p99/max send
latency idle and during the prune, with the ratio of the p99s (target: under 3x).

PostgreSQL: ``--dsn`` / ``STATEWRIGHT_PG_DSN``, else a throwaway server from ``pgserver``.
It is a script, not a test: it prints numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_scale

from statewright import Engine, ManualClock, SQLiteStore
from statewright.engine.retention import parse_duration
from statewright.store import Store

P99_TARGET = 3.0

PRUNE_CHILD = """
import asyncio, json, sys, time
from statewright import Engine, ManualClock, SQLiteStore

async def main(url, older, batch, now):
    if url.startswith("pg:"):
        from statewright.store.postgres import PostgresStore
        store = PostgresStore(url[3:])
    else:
        store = SQLiteStore(url)
    async with Engine(store, clock=ManualClock(now)) as engine:
        report = await engine.prune(older, batch=batch)
    print(json.dumps(report.to_dict()))

asyncio.run(main(sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])))
"""


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


async def sends(
    engine: Engine, ids: Any, n: int | None, until: asyncio.Event | None
) -> list[float]:
    """Latencies (s) of one client's sends, ``n`` of them or until ``until`` is set."""
    out: list[float] = []
    while (n is None or len(out) < n) and (until is None or not until.is_set()):
        started = time.perf_counter()
        await engine.send(next(ids), "ping", actor="bench")
        out.append(time.perf_counter() - started)
    return out


async def run(url: str, make_store: Any, count: int, args: argparse.Namespace) -> dict[str, Any]:
    older = parse_duration(args.older_than)
    now = float(bench_scale.NOW)
    engine = Engine(make_store(), bench_scale.workflow_types(), clock=ManualClock(now))
    await engine.open()
    try:
        live = [
            bench_scale.ident(i)[0] for i in range(count) if i % bench_scale.PLANS in (7, 8, 9)
        ]
        ids = itertools.cycle(live)
        await sends(engine, ids, 200, None)  # warm up
        idle = await sends(engine, ids, args.idle, None)
        done = asyncio.Event()
        started = time.perf_counter()
        if args.in_process:
            pruner = Engine(make_store(), clock=ManualClock(now))
            await pruner.open()

            async def prune() -> dict[str, Any]:
                try:
                    return (await pruner.prune(older, batch=args.batch)).to_dict()
                finally:
                    done.set()
                    await pruner.close()

            task = asyncio.create_task(prune())
            during = await sends(engine, ids, None, done)
            report = await task
        else:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-c", PRUNE_CHILD, url, str(older), str(args.batch), str(now),
                stdout=asyncio.subprocess.PIPE,
            )  # fmt: skip

            async def wait() -> bytes:
                out, _ = await proc.communicate()
                done.set()
                return out

            task = asyncio.create_task(wait())
            during = await sends(engine, ids, None, done)
            report = json.loads((await task).decode())
        wall = time.perf_counter() - started
    finally:
        await engine.close()
    result = {
        "workflows_pruned": report["workflows"],
        "log_rows_pruned": report["transitions"],
        "prune_seconds": report["seconds"],
        "prune_rate": report["workflows"] / report["seconds"] if report["seconds"] else 0.0,
        "wall_seconds": wall,
        "batch": args.batch,
        "idle": {"n": len(idle), "p50": pct(idle, 0.5), "p99": pct(idle, 0.99),
                 "max": max(idle) * 1000},
        "during": {"n": len(during), "p50": pct(during, 0.5), "p99": pct(during, 0.99),
                   "max": max(during) * 1000},
    }  # fmt: skip
    result["p99_ratio"] = result["during"]["p99"] / result["idle"]["p99"]
    return result


def show(title: str, r: dict[str, Any]) -> None:
    print(
        f"{title}: pruned {r['workflows_pruned']:,} workflows ({r['log_rows_pruned']:,} log "
        f"rows) in {r['prune_seconds']:.1f} s = {r['prune_rate']:,.0f} workflows/s "
        f"(batch {r['batch']})"
    )
    for what in ("idle", "during"):
        d = r[what]
        print(
            f"  send {what:6}: {d['n']:6,} sends, p50 {d['p50']:.2f} ms, p99 {d['p99']:.2f} ms, "
            f"max {d['max']:.1f} ms"
        )
    ok = "ok" if r["p99_ratio"] < P99_TARGET else "NO"
    print(f"  p99 during / idle: {r['p99_ratio']:.2f}x (target < {P99_TARGET:.0f}x) {ok}")


async def main(args: argparse.Namespace) -> None:
    print(f"{platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    where = "in this process" if args.in_process else "in another process"
    print(f"prune of finished workflows older than {args.older_than}, {where}")
    base = Path(args.dir or tempfile.gettempdir())
    folder = Path(tempfile.mkdtemp(prefix="sw-bench-prune-", dir=base))
    out: dict[str, Any] = {"workflows": args.workflows, "older_than": args.older_than}
    count = args.workflows
    try:
        t = await bench_scale.templates(folder)
        if not args.postgres_only:
            path = folder / "prune.db"
            store: Store = SQLiteStore(path)
            await store.open()
            await store.close()
            started = time.perf_counter()
            bench_scale.load_sqlite(path, t, count)
            print(f"SQLite: {count:,} workflows loaded in {time.perf_counter() - started:.1f} s")
            out["sqlite"] = await run(str(path), lambda: SQLiteStore(path), count, args)
            show("SQLite", out["sqlite"])
        if not args.sqlite_only:
            out["postgres"] = await run_postgres(args, t, count)
            show("PostgreSQL", out["postgres"])
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


async def run_postgres(args: argparse.Namespace, t: Any, count: int) -> dict[str, Any]:
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
    name = f"sw_bench_prune_{os.getpid()}"
    try:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name}")
            admin.execute(f"CREATE DATABASE {name}")
        url = make_conninfo(dsn, dbname=name)
        store = PostgresStore(url)
        await store.open()
        await store.close()
        started = time.perf_counter()
        bench_scale.load_postgres(url, t, count)
        print(f"PostgreSQL: {count:,} workflows loaded in {time.perf_counter() - started:.1f} s")
        return await run("pg:" + url, lambda: PostgresStore(url), count, args)
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        if server is not None:
            server.cleanup()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workflows", type=int, default=1_000_000)
    parser.add_argument("--older-than", default="1d")
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--idle", type=int, default=2000, help="sends timed before the prune")
    parser.add_argument("--in-process", action="store_true")
    parser.add_argument("--sqlite-only", action="store_true")
    parser.add_argument("--postgres-only", action="store_true")
    parser.add_argument("--dsn", default=None, help="PostgreSQL server (else pgserver)")
    parser.add_argument("--dir", default=None, help="where the SQLite file goes")
    parser.add_argument("--json", default=None)
    asyncio.run(main(parser.parse_args()))
