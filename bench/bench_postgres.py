"""Durable transitions/s and latency of the engine on PostgreSQL, next to the raw psycopg
ceiling measured in the same run, and worker pickup latency (event committed -> handler starts).

Two raw ceilings: ``raw`` (asyncio, one connection per client, BEGIN + UPDATE + INSERT + COMMIT
pipelined: one round trip) and ``raw threads`` (one thread and one connection per client, the
same CAS UPDATE + log INSERT as one autocommit statement: one round trip, one transaction per
transition; the GIL is released while a thread waits for the server). Group commit on the
engine's side should beat the latter at the same concurrency: it pays one commit for many.

    python bench/bench_postgres.py [--transitions 2000] [--clients 1,8] [--pickups 200]

The server comes from ``--dsn`` / ``STATEWRIGHT_BENCH_PG_DSN``, else a throwaway one is started
with ``pgserver`` (a real PostgreSQL from a wheel; unix socket, fsync on). It is a script, not a
test: it prints numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

from statewright import Engine, MachineBuilder, Next, Run, Worker, WorkflowType
from statewright.store.postgres import PostgresStore

MACHINE = (
    MachineBuilder("pingpong")
    .state("a", initial=True)
    .state("b")
    .state("done", terminal=True)
    .event("go")
    .event("back")
    .event("finish")
    .transition("go", "a", "b")
    .transition("back", "b", "a")
    .transition("finish", ["a", "b"], "done")
    .build()
)
PAYLOAD = {"note": "ping"}

UPDATE = """
UPDATE workflows SET state = %(to)s, context = %(ctx)s::jsonb, version = version + 1,
       attempts = 0, updated_at = %(at)s, state_entered_at = %(at)s, next_due_at = NULL
 WHERE id = %(id)s AND version = %(v)s
"""
INSERT = """
INSERT INTO transitions (workflow_id, version, from_state, to_state, event, payload, actor,
                         context_patch, at)
VALUES (%(id)s, %(v)s + 1, %(frm)s, %(to)s, %(ev)s, %(payload)s::jsonb, 'bench', NULL, %(at)s)
"""

ONE_STATEMENT = """
WITH moved AS (
    UPDATE workflows SET state = %(to)s, context = %(ctx)s::jsonb, version = version + 1,
           attempts = 0, updated_at = %(at)s, state_entered_at = %(at)s, next_due_at = NULL
     WHERE id = %(id)s AND version = %(v)s
    RETURNING id, version
)
INSERT INTO transitions (workflow_id, version, from_state, to_state, event, payload, actor,
                         context_patch, at)
SELECT id, version, %(frm)s, %(to)s, %(ev)s, %(payload)s::jsonb, 'bench', NULL, %(at)s
  FROM moved
"""


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


async def timed_clients(
    clients: int, per_client: int, one: Callable[[int, int], Awaitable[None]]
) -> tuple[float, list[float]]:
    latencies: list[float] = []

    async def client(c: int) -> None:
        for i in range(per_client):
            t = time.perf_counter()
            await one(c, i)
            latencies.append(time.perf_counter() - t)

    started = time.perf_counter()
    await asyncio.gather(*(client(c) for c in range(clients)))
    return len(latencies) / (time.perf_counter() - started), latencies


async def engine_run(
    dsn: str, clients: int, total: int
) -> tuple[float, list[float], tuple[int, int] | None]:
    """Sends of ``clients`` tasks on one engine; with the (commits, writes) of the store's
    group commit, when it has one."""
    store = PostgresStore(dsn, max_size=max(2, clients))
    # No handler anywhere, and this process says so (runs_here): a state it enters is not
    # due, as in the raw UPDATE (a bare type would make each one due for a worker).
    async with Engine(store, [WorkflowType(MACHINE, runs_here=True)]) as engine:
        for c in range(clients):
            await engine.start("pingpong", workflow_id=f"e{clients}-{c}")

        async def one(c: int, i: int) -> None:
            await engine.send(f"e{clients}-{c}", "go" if i % 2 == 0 else "back", PAYLOAD)

        batcher = getattr(store, "batcher", None)  # absent before group commit
        before = (0, 0) if batcher is None else (batcher.commits, batcher.batched_writes)
        ops, latencies = await timed_clients(clients, total // clients, one)
        counts = None
        if batcher is not None:
            counts = (batcher.commits - before[0], batcher.batched_writes - before[1])
        return ops, latencies, counts


async def raw_run(dsn: str, clients: int, total: int) -> tuple[float, list[float]]:
    """Same CAS UPDATE + log INSERT, one transaction each, pipelined: one round trip."""
    conns = [await psycopg.AsyncConnection.connect(dsn) for _ in range(clients)]
    async with Engine(PostgresStore(dsn), [MACHINE]) as engine:  # creates the rows + schema
        for c in range(clients):
            await engine.start("pingpong", workflow_id=f"r{clients}-{c}")
    versions = [1] * clients
    payload = json.dumps(PAYLOAD)

    async def one(c: int, i: int) -> None:
        frm, to = ("a", "b") if i % 2 == 0 else ("b", "a")
        p = {
            "id": f"r{clients}-{c}",
            "v": versions[c],
            "to": to,
            "frm": frm,
            "at": time.time(),
            "ctx": "{}",
            "ev": "go" if i % 2 == 0 else "back",
            "payload": payload,
        }
        conn = conns[c]
        async with conn.transaction(), conn.pipeline():
            cur = await conn.execute(UPDATE, p)
            await conn.execute(INSERT, p)
        assert cur.rowcount == 1
        versions[c] += 1

    try:
        return await timed_clients(clients, total // clients, one)
    finally:
        for conn in conns:
            await conn.close()


async def raw_threads_run(dsn: str, clients: int, total: int) -> tuple[float, list[float]]:
    """The ceiling of one transaction per transition at this concurrency: ``clients`` threads,
    each on its own connection, each transition one autocommit statement (CAS UPDATE + log
    INSERT in one CTE): one round trip and one commit per transition."""
    async with Engine(PostgresStore(dsn), [MACHINE]) as engine:  # creates the rows + schema
        for c in range(clients):
            await engine.start("pingpong", workflow_id=f"t{clients}-{c}")
    per_client = total // clients
    payload = json.dumps(PAYLOAD)
    latencies: list[list[float]] = [[] for _ in range(clients)]
    conns = [psycopg.connect(dsn, autocommit=True) for _ in range(clients)]
    start = threading.Barrier(clients + 1)

    def client(c: int) -> None:
        conn, mine = conns[c], latencies[c]
        found = conn.execute("SELECT version FROM workflows WHERE id = %s", (f"t{clients}-{c}",))
        version = found.fetchone()[0]  # type: ignore[index]
        if version % 2 == 0:  # in state b: one step back first, untimed
            conn.execute(
                ONE_STATEMENT,
                {
                    "id": f"t{clients}-{c}",
                    "v": version,
                    "to": "a",
                    "frm": "b",
                    "at": time.time(),
                    "ctx": "{}",
                    "ev": "back",
                    "payload": payload,
                },
            )
            version += 1
        start.wait()
        for i in range(per_client):
            frm, to = ("a", "b") if i % 2 == 0 else ("b", "a")
            p = {
                "id": f"t{clients}-{c}",
                "v": version,
                "to": to,
                "frm": frm,
                "at": time.time(),
                "ctx": "{}",
                "ev": "go" if i % 2 == 0 else "back",
                "payload": payload,
            }
            t = time.perf_counter()
            cur = conn.execute(ONE_STATEMENT, p)
            mine.append(time.perf_counter() - t)
            assert cur.rowcount == 1
            version += 1

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for thread in threads:
        thread.start()
    try:
        start.wait()
        started = time.perf_counter()

        def join_all() -> None:
            for thread in threads:
                thread.join()

        await asyncio.to_thread(join_all)
        elapsed = time.perf_counter() - started
    finally:
        for conn in conns:
            conn.close()
    flat = [x for mine in latencies for x in mine]
    return len(flat) / elapsed, flat


async def pickup_run(dsn: str, n: int, sync: bool) -> list[float]:
    """Event committed (send returned) -> the handler of the target state starts.

    ``sync``: a plain ``def`` handler, which runs in the worker's thread pool (one hop to a
    thread more than an ``async def`` handler, which runs on the event loop).
    """
    committed: dict[str, float] = {}
    started: dict[str, float] = {}
    done = asyncio.Event()
    machine = (
        MachineBuilder("pickup")
        .state("idle", initial=True)
        .state("work")
        .state("end", terminal=True)
        .event("go")
        .event("finish")
        .transition("go", "idle", "work")
        .transition("finish", "work", "end")
        .build()
    )

    def sync_handler(run: Run) -> Next:
        started[run.id] = time.perf_counter()
        if len(started) == n:
            loop.call_soon_threadsafe(done.set)
        return Next("finish")

    async def async_handler(run: Run) -> Next:
        started[run.id] = time.perf_counter()
        if len(started) == n:
            done.set()
        return Next("finish")

    loop = asyncio.get_running_loop()
    wtype = WorkflowType(machine, {"work": sync_handler if sync else async_handler})
    async with (
        Engine(PostgresStore(dsn), [wtype]) as client,
        Engine(PostgresStore(dsn), [wtype]) as served,
    ):
        worker = Worker(served, concurrency=4, poll_interval=5.0)  # wake-ups, not polling
        task = asyncio.create_task(worker.run())
        await asyncio.sleep(0.5)
        for i in range(n):
            wid = f"{'s' if sync else 'a'}{i}"
            await client.start("pickup", workflow_id=wid)
            await client.send(wid, "go")
            committed[wid] = time.perf_counter()
            await asyncio.sleep(0.01)
        await asyncio.wait_for(done.wait(), 60)
        worker.stop()
        await task
    return [started[w] - committed[w] for w in committed]


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'clients':>7}  {'engine ops/s':>12}  {'p50 ms':>7}  {'p99 ms':>7}  "
        f"{'raw ops/s':>9}  {'raw p50':>7}  {'raw p99':>7}  {'engine/raw':>10}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['clients']:>7}  {r['engine_ops']:>12,.0f}  {r['engine_p50']:>7.3f}  "
            f"{r['engine_p99']:>7.3f}  {r['raw_ops']:>9,.0f}  {r['raw_p50']:>7.3f}  "
            f"{r['raw_p99']:>7.3f}  {r['ratio']:>9.0%}"
        )
    return "\n".join(lines)


def ceiling_table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'clients':>7}  {'engine ops/s':>12}  {'threads ops/s':>13}  {'thr p50':>7}  "
        f"{'thr p99':>7}  {'engine/threads':>14}  {'commits':>7}  {'writes':>6}  "
        f"{'writes/commit':>13}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        counts = r.get("group_commit")
        commits, writes, per = ("-", "-", "-")
        if counts is not None:
            commits, writes = f"{counts[0]:,}", f"{counts[1]:,}"
            per = f"{counts[1] / counts[0]:.1f}" if counts[0] else "-"
        lines.append(
            f"{r['clients']:>7}  {r['engine_ops']:>12,.0f}  {r['threads_ops']:>13,.0f}  "
            f"{r['threads_p50']:>7.3f}  {r['threads_p99']:>7.3f}  "
            f"{r['threads_ratio']:>13.0%}  {commits:>7}  {writes:>6}  {per:>13}"
        )
    return "\n".join(lines)


async def main(args: argparse.Namespace) -> None:
    dsn = args.dsn or os.environ.get("STATEWRIGHT_BENCH_PG_DSN")
    server = None
    if not dsn:
        os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.mkdtemp())
        import pgserver

        server = pgserver.get_server(tempfile.mkdtemp(prefix="sw-bench-pg-"), cleanup_mode="stop")
        dsn = server.get_uri()
    with psycopg.connect(dsn, autocommit=True) as admin:
        version = admin.execute("SHOW server_version").fetchone()
        fsync = admin.execute("SHOW fsync").fetchone()
        sync = admin.execute("SHOW synchronous_commit").fetchone()
    print(
        f"PostgreSQL {version[0] if version else '?'}, fsync={fsync[0] if fsync else '?'}, "
        f"synchronous_commit={sync[0] if sync else '?'}"
    )
    rows = []
    for clients in [int(c) for c in args.clients.split(",")]:
        e_ops, e_lat, counts = await engine_run(dsn, clients, args.transitions)
        r_ops, r_lat = await raw_run(dsn, clients, args.transitions)
        t_ops, t_lat = await raw_threads_run(dsn, clients, args.transitions)
        rows.append(
            {
                "clients": clients,
                "engine_ops": e_ops,
                "engine_p50": pct(e_lat, 0.5),
                "engine_p99": pct(e_lat, 0.99),
                "raw_ops": r_ops,
                "raw_p50": pct(r_lat, 0.5),
                "raw_p99": pct(r_lat, 0.99),
                "ratio": e_ops / r_ops,
                "threads_ops": t_ops,
                "threads_p50": pct(t_lat, 0.5),
                "threads_p99": pct(t_lat, 0.99),
                "threads_ratio": e_ops / t_ops,
                "group_commit": counts,
            }
        )
    print(
        "engine vs raw psycopg (raw = the same CAS UPDATE + log INSERT, one transaction each, "
        "pipelined; one connection per client)"
    )
    print(table(rows))
    print(
        "engine vs the one-transaction-per-transition ceiling at the same concurrency (raw "
        "threads = one thread and connection per client, CAS UPDATE + log INSERT as one "
        "autocommit statement; commits/writes = the store's group commit, '-' without one)"
    )
    print(ceiling_table(rows))
    pickups: dict[str, list[float]] = {}
    for kind in ("async", "sync") if args.pickups else ():
        pickups[kind] = found = await pickup_run(dsn, args.pickups, sync=kind == "sync")
        print(
            f"worker pickup latency, {kind} def handler (committed -> handler starts, "
            f"LISTEN/NOTIFY, poll 5 s): p50 {pct(found, 0.5):.2f} ms  "
            f"p99 {pct(found, 0.99):.2f} ms  max {max(found) * 1000:.2f} ms  "
            f"(n={len(found)}, mean {statistics.mean(found) * 1000:.2f} ms)"
        )
    if args.json:
        with open(args.json, "w") as f:
            pickup_ms = {k: [p * 1000 for p in v] for k, v in pickups.items()}
            json.dump({"rows": rows, "pickup_ms": pickup_ms}, f)
    if server is not None:
        server.cleanup()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=None)
    parser.add_argument("--transitions", type=int, default=2000)
    parser.add_argument("--clients", default="1,8")
    parser.add_argument("--pickups", type=int, default=200)
    parser.add_argument("--json", default=None)
    asyncio.run(main(parser.parse_args()))
