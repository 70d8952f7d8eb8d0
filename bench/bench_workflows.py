"""Whole workflows/s through real worker processes, next to the raw write ceiling of the same
work measured in the same run.

    .venv/bin/python bench/bench_workflows.py [--stores sqlite,postgres] [--states 10]
        [--workflows 3000] [--processes 2] [--concurrency 32] [--json out.json]

Workload: a machine ``s0 --next--> s1 --next--> ... s{K-1} --next--> done`` where every
state has an ``async def`` handler that runs one durable step (``await run.step(state,
action)``, the action returns a small dict) and returns ``Next("next")``. ``--workflows``
workflows are started beforehand (all due at once); then ``--processes`` worker processes
(``multiprocessing``, spawned: each its own interpreter, engine, store connection and
``Worker(concurrency=...)``, as ``statewright worker`` runs them) are released together, and
the clock stops when the last workflow is terminal (the parent polls the store with raw SQL
every 20 ms). workflows/s = workflows / that wall time; steps/s = K x workflows/s.

Raw ceiling ("raw"), measured in the same run on the same database server or disk: the
fewest durable writes the same work needs when a step's *executing* record must commit
before its call (that is what makes reconcile possible) and everything else can share the
transition's commit. Per workflow: one claim (UPDATE of the row), then per state one commit
with the step's *executing* INSERT and one commit with the transition (CAS UPDATE of the
row, log INSERT, step *done* UPDATE). No engine, no Python per workflow beyond binding
parameters. SQLite: stdlib ``sqlite3``, one thread, the same PRAGMAs, ``--concurrency``
workflows advanced together in each commit (what group commit at that concurrency could do at
best). PostgreSQL: ``--concurrency`` threads, each its own autocommit psycopg connection and
its own workflows, one statement (one round trip, one commit) per write.

Next to each run: commits per workflow and per state, next to the raw runs' (SQLite: the
store's own count; PostgreSQL: the database's ``xact_commit``, every transaction the workers'
connections committed, reads included), SQL statements per state (on PostgreSQL outside
pipeline mode, a round trip each), the engine's share of the raw batched ceiling on PostgreSQL
(issue 24's measure), and the client CPU per state (every thread of the worker processes,
engine and store, over the states of the run). At the end, the Python CPU per state of the
engine and a worker in this one process over SQLite ``:memory:`` (no disk, no other process).

SQLite files go to /tmp unless it is tmpfs (then ``<repo>/.statewright/bench``); PostgreSQL
comes from ``--dsn`` / ``STATEWRIGHT_PG_DSN``, else a throwaway ``pgserver`` is started (a real
PostgreSQL from a wheel; unix socket, fsync on). It is a script, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import multiprocessing as mp
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
MEMORY_FS = {"tmpfs", "ramfs", "devtmpfs"}
POLL = 0.02


def server_cpu() -> float | None:
    """CPU seconds used so far by this machine's PostgreSQL processes (``/proc``), or None
    when there are none here (a remote server)."""
    total, found = 0, False
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :]
        if name == "postgres":
            fields = rest.split()
            total += int(fields[11]) + int(fields[12])  # utime, stime (clock ticks)
            found = True
    return total / os.sysconf("SC_CLK_TCK") if found else None


def per_state(cpu_before: float | None, args: argparse.Namespace) -> float | None:
    """Server CPU microseconds per state since ``cpu_before``."""
    after = server_cpu()
    if cpu_before is None or after is None:
        return None
    return float((after - cpu_before) / (args.workflows * args.states) * 1e6)


# -- the workload ----------------------------------------------------------------------------


def workflow_type(states: int) -> Any:
    from statewright import MachineBuilder, Next, Run, WorkflowType

    builder = MachineBuilder("chain")
    for i in range(states):
        builder.state(f"s{i}", initial=i == 0)
    builder.state("done", terminal=True).event("next")
    for i in range(states):
        builder.transition("next", f"s{i}", f"s{i + 1}" if i + 1 < states else "done")

    async def action(key: str) -> dict[str, Any]:
        return {"ok": True}

    async def handler(run: Run) -> Next:
        await run.step(run.state, action)
        return Next("next")

    return WorkflowType(builder.build(), {f"s{i}": handler for i in range(states)})


def open_store(kind: str, where: str, pool: int = 4) -> Any:
    if kind == "sqlite":
        from statewright import SQLiteStore

        return SQLiteStore(where)
    from statewright.store.postgres import PostgresStore

    return PostgresStore(where, max_size=pool)


def seed(args: argparse.Namespace, kind: str, where: str, prefix: str) -> list[str]:
    """Start ``--workflows`` workflows through the engine (the schema and the rows as it makes
    them), ids ``<prefix>0000000``...; their ids."""
    from statewright import Engine

    ids = [f"{prefix}{i:07d}" for i in range(args.workflows)]

    async def go() -> None:
        async with Engine(open_store(kind, where), [workflow_type(args.states)]) as engine:
            for i, wid in enumerate(ids):
                await engine.start("chain", {"n": i}, workflow_id=wid)

    asyncio.run(go())
    return ids


class Statements:
    """SQL statements this process sends while ``on``: every ``execute`` of an sqlite3 cursor
    or connection opened after :meth:`install` and of a psycopg cursor (``executemany``: one
    per parameter set; a trigger's statements are not counted: sqlite3's trace callback reports
    each trigger run with its parent statement's text, so it cannot tell them apart). On
    PostgreSQL outside pipeline mode a statement is a round trip to the server; in pipeline
    mode (the store's batches, the raw batched ceiling) several share one. Written here, not
    taken from a library: neither driver counts, and ``pg_stat_statements`` needs the server
    restarted with it preloaded."""

    def __init__(self) -> None:
        self.count = 0
        self.on = False
        self.last = 0
        """Statements of the last raw ceiling's timed part."""
        self.lock = threading.Lock()

    def install(self) -> Statements:
        real_connect = sqlite3.connect
        tally = self._tally

        class Cursor(sqlite3.Cursor):
            def execute(self, sql: str, parameters: Any = (), /) -> Cursor:
                return super().execute(sql, tally(parameters, many=False))

            def executemany(self, sql: str, seq: Any, /) -> Cursor:
                return super().executemany(sql, tally(seq, many=True))

        class Connection(sqlite3.Connection):
            # Its execute, as sqlite3's: a new cursor's (which counts it).
            def cursor(self, factory: Any = Cursor) -> Any:
                return super().cursor(factory)

            def execute(self, sql: str, parameters: Any = (), /) -> Any:
                return self.cursor().execute(sql, parameters)

            def executemany(self, sql: str, seq: Any, /) -> Any:
                return self.cursor().executemany(sql, seq)

        def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
            kwargs.setdefault("factory", Connection)
            conn: sqlite3.Connection = real_connect(*args, **kwargs)
            return conn

        sqlite3.connect = connect  # type: ignore[assignment]
        try:
            import psycopg
        except ImportError:
            return self

        def counted(real: Any, many: bool) -> Any:
            if inspect.iscoroutinefunction(real):

                async def run_async(cur: Any, query: Any, params: Any = None, **kw: Any) -> Any:
                    return await real(cur, query, tally(params, many), **kw)

                return run_async

            def run(cur: Any, query: Any, params: Any = None, **kw: Any) -> Any:
                return real(cur, query, tally(params, many), **kw)

            return run

        for cls in (psycopg.Cursor, psycopg.AsyncCursor):
            for name, many in (("execute", False), ("executemany", True)):
                setattr(cls, name, counted(getattr(cls, name), many))
        return self

    def _tally(self, params: Any, many: bool) -> Any:
        """Count one statement (``many``: one per parameter set); the parameters to run."""
        if many:
            params = list(params)
        with self.lock:  # the raw ceiling's clients are threads
            self.count += (len(params) if many else 1) * self.on
        return params

    def counting(self, on: bool) -> int:
        """Turn counting on or off; the count so far."""
        self.on = on
        return self.count


STATEMENTS = Statements()


def worker_main(
    kind: str, where: str, states: int, concurrency: int, ready: Any, go: Any, stop: Any, out: Any
) -> None:
    """One worker process: an engine and a Worker, released by ``go``, stopped by ``stop``."""

    async def main() -> None:
        from statewright import Engine, Worker

        STATEMENTS.install()
        store = open_store(kind, where, pool=max(4, concurrency // 4))
        async with Engine(store, [workflow_type(states)]) as engine:
            worker = Worker(engine, concurrency=concurrency, poll_interval=0.1)
            ready.put(os.getpid())
            while not go.is_set():
                await asyncio.sleep(0.005)
            cpu = time.process_time()  # every thread of this process: engine, writer, pool
            sent = STATEMENTS.counting(True)
            task = asyncio.create_task(worker.run())
            while not stop.is_set():
                await asyncio.sleep(0.05)
            worker.stop()
            await task
            sent = STATEMENTS.counting(False) - sent
            cpu = time.process_time() - cpu
            commits = getattr(getattr(store, "conn", None), "commits", None)
            out.put(
                {
                    "pid": os.getpid(),
                    "processed": worker.processed,
                    "commits": commits,
                    "cpu": cpu,
                    "statements": sent,
                }
            )

    asyncio.run(main())


def pg_commits(dsn: str) -> int:
    """Transactions committed so far in the database of ``dsn`` (``pg_stat_database``; a
    backend reports its own when it ends, or at most once a second). Two of them are this
    function's own."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    return int(row[0]) if row else 0


def python_cpu(args: argparse.Namespace) -> float:
    """CPU microseconds per state of one process running the engine and a worker over SQLite
    ``:memory:`` (no disk, no other process): the Python the engine spends per state. Process
    CPU time is far less sensitive to a loaded machine than wall time."""

    async def go() -> float:
        from statewright import Engine, SQLiteStore, Worker

        async with Engine(SQLiteStore(":memory:"), [workflow_type(args.states)]) as engine:
            for i in range(args.workflows):
                await engine.start("chain", {"n": i}, workflow_id=f"m{i:07d}")
            worker = Worker(engine, concurrency=args.concurrency, poll_interval=0.05)
            cpu = time.process_time()
            task = asyncio.create_task(worker.run())
            while worker.processed < args.workflows * args.states:
                await asyncio.sleep(0.02)
            cpu = time.process_time() - cpu
            worker.stop()
            await task
        return float(cpu / (args.workflows * args.states) * 1e6)

    return asyncio.run(go())


def terminal_count(kind: str, where: str, conn: Any) -> int:
    sql = "SELECT count(*) FROM workflows WHERE terminal" + (" = 1" if kind == "sqlite" else "")
    return int(conn.execute(sql).fetchone()[0])


def engine_run(args: argparse.Namespace, kind: str, where: str) -> dict[str, Any]:
    seed(args, kind, where, "w")
    ctx = mp.get_context("spawn")
    ready, out = ctx.Queue(), ctx.Queue()
    go, stop = ctx.Event(), ctx.Event()
    procs = [
        ctx.Process(
            target=worker_main,
            args=(kind, where, args.states, args.concurrency, ready, go, stop, out),
        )
        for _ in range(args.processes)
    ]
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=120)
    if kind == "sqlite":
        watch: Any = sqlite3.connect(where, isolation_level=None)
    else:
        import psycopg

        watch = psycopg.connect(where, autocommit=True)
    cpu_before = server_cpu() if kind == "postgres" else None
    commits_before = pg_commits(where) if kind == "postgres" else 0
    started = time.perf_counter()
    go.set()
    deadline = started + args.timeout
    done = polls = 0
    while done < args.workflows:
        if time.perf_counter() > deadline:
            stop.set()
            raise SystemExit(f"timed out: {done}/{args.workflows} workflows finished")
        time.sleep(POLL)
        done = terminal_count(kind, where, watch)
        polls += 1
    elapsed = time.perf_counter() - started
    server_us = per_state(cpu_before, args)
    stop.set()
    reports = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    watch.close()
    commits = [r["commits"] for r in reports]
    if kind == "postgres":
        # A backend reports its commits when it ends: the workers' and the watch's have ended
        # (the pause lets them report). Less the watch's polls and the two transactions of the
        # first pg_commits call (the second's are reported only when its backend ends).
        time.sleep(0.5)
        commits = [pg_commits(where) - commits_before - polls - 2]
    client_cpu = sum(r["cpu"] for r in reports)
    return {
        "seconds": elapsed,
        "workflows_per_s": args.workflows / elapsed,
        "steps_per_s": args.workflows * args.states / elapsed,
        "commits": None if None in commits else sum(commits),
        "processed": sum(r["processed"] for r in reports),
        "client_cpu_us_per_state": client_cpu / (args.workflows * args.states) * 1e6,
        "statements_per_state": sum(r["statements"] for r in reports)
        / (args.workflows * args.states),
        **({"server_cpu_us_per_state": server_us} if server_us is not None else {}),
    }


# -- the raw ceiling -------------------------------------------------------------------------

SQLITE_CLAIM = """UPDATE workflows SET lease_owner = 'raw', lease_expires_at = :until,
       fence = fence + 1 WHERE id = :id"""
SQLITE_STEP_BEGIN = """INSERT INTO steps (key, workflow_id, step, status, attempts, started_at)
VALUES (:key, :id, :step, 'executing', 1, :at)"""
SQLITE_MOVE = """UPDATE workflows SET state = :to, context = :ctx, version = version + 1,
       attempts = 0, updated_at = :at, state_entered_at = :at, next_due_at = :due,
       terminal = :terminal, lease_owner = CASE WHEN :terminal THEN NULL ELSE lease_owner END
 WHERE id = :id AND version = :v"""
SQLITE_LOG = """INSERT INTO transitions (workflow_id, version, from_state, to_state, event,
       payload, actor, context_patch, at)
VALUES (:id, :v + 1, :frm, :to, 'next', '{}', 'raw', NULL, :at)"""
SQLITE_STEP_DONE = """UPDATE steps SET status = 'done', result = :result, finished_at = :at
 WHERE key = :key AND status = 'executing' AND attempts = 1"""


def sqlite_raw(args: argparse.Namespace, path: str) -> float:
    """Workflows/s of the fewest commits the work needs, ``concurrency`` workflows a commit."""
    ids = seed(args, "sqlite", path, "r")
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA foreign_keys=ON")
    ctx = json.dumps({"n": 0}, separators=(",", ":"), sort_keys=True)
    result = json.dumps({"ok": True}, separators=(",", ":"), sort_keys=True)
    started, sent = time.perf_counter(), STATEMENTS.counting(True)
    for b in range(0, len(ids), args.concurrency):
        batch = ids[b : b + args.concurrency]
        now = time.time()
        conn.execute("BEGIN IMMEDIATE")
        for wid in batch:
            conn.execute(SQLITE_CLAIM, {"id": wid, "until": now + 30})
        conn.execute("COMMIT")
        for s in range(args.states):
            frm, to = f"s{s}", f"s{s + 1}" if s + 1 < args.states else "done"
            terminal = int(to == "done")
            conn.execute("BEGIN IMMEDIATE")
            for wid in batch:
                conn.execute(
                    SQLITE_STEP_BEGIN, {"key": f"{wid}:{frm}", "id": wid, "step": frm, "at": now}
                )
            conn.execute("COMMIT")
            conn.execute("BEGIN IMMEDIATE")
            for wid in batch:
                p = {"id": wid, "v": s + 1, "frm": frm, "to": to, "at": now, "ctx": ctx}
                p.update(due=None if terminal else now, terminal=terminal)
                assert conn.execute(SQLITE_MOVE, p).rowcount == 1
                conn.execute(SQLITE_LOG, p)
                conn.execute(
                    SQLITE_STEP_DONE, {"key": f"{wid}:{frm}", "result": result, "at": now}
                )
            conn.execute("COMMIT")
    elapsed = time.perf_counter() - started
    STATEMENTS.last = STATEMENTS.counting(False) - sent
    conn.close()
    return len(ids) / elapsed


PG_CLAIM = """UPDATE workflows SET lease_owner = 'raw', lease_expires_at = %(until)s,
       fence = fence + 1 WHERE id = %(id)s"""
PG_STEP_BEGIN = """INSERT INTO steps (key, workflow_id, step, status, attempts, started_at)
VALUES (%(key)s, %(id)s, %(step)s, 'executing', 1, %(at)s)"""
PG_MOVE = """WITH moved AS (
    UPDATE workflows SET state = %(to)s, context = %(ctx)s::jsonb, version = version + 1,
           attempts = 0, updated_at = %(at)s, state_entered_at = %(at)s,
           next_due_at = %(due)s::float8, terminal = %(terminal)s,
           lease_owner = CASE WHEN %(terminal)s THEN NULL ELSE lease_owner END
     WHERE id = %(id)s AND version = %(v)s
    RETURNING id, version
), logged AS (
    INSERT INTO transitions (workflow_id, version, from_state, to_state, event, payload, actor,
                             context_patch, at)
    SELECT id, version, %(frm)s, %(to)s, 'next', '{}'::jsonb, 'raw', NULL, %(at)s FROM moved
)
UPDATE steps SET status = 'done', result = %(result)s::jsonb, finished_at = %(at)s
 WHERE key = %(key)s AND status = 'executing' AND EXISTS (SELECT 1 FROM moved)"""


def pg_raw(args: argparse.Namespace, dsn: str) -> tuple[float, float | None]:
    """Workflows/s of the fewest commits the work needs: ``concurrency`` threads, each with
    its own connection and workflows, one autocommit statement per write; and the server's
    CPU microseconds per state meanwhile."""
    import psycopg

    ids = seed(args, "postgres", dsn, "r")
    conns = [psycopg.connect(dsn, autocommit=True) for _ in range(args.concurrency)]
    barrier = threading.Barrier(args.concurrency + 1)
    ctx, result = json.dumps({"n": 0}), json.dumps({"ok": True})

    def client(c: int) -> None:
        conn = conns[c]
        barrier.wait()
        for wid in ids[c :: args.concurrency]:
            now = time.time()
            conn.execute(PG_CLAIM, {"id": wid, "until": now + 30})
            for s in range(args.states):
                frm, to = f"s{s}", f"s{s + 1}" if s + 1 < args.states else "done"
                terminal = to == "done"
                key = f"{wid}:{frm}"
                conn.execute(PG_STEP_BEGIN, {"key": key, "id": wid, "step": frm, "at": now})
                p = {"id": wid, "v": s + 1, "frm": frm, "to": to, "at": now, "ctx": ctx}
                p.update(due=None if terminal else now, terminal=terminal, key=key, result=result)
                assert conn.execute(PG_MOVE, p).rowcount == 1

    threads = [threading.Thread(target=client, args=(c,)) for c in range(args.concurrency)]
    for t in threads:
        t.start()
    cpu_before = server_cpu()
    sent = STATEMENTS.counting(True)
    barrier.wait()
    started = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    STATEMENTS.last = STATEMENTS.counting(False) - sent
    server_us = per_state(cpu_before, args)
    for conn in conns:
        conn.close()
    return len(ids) / elapsed, server_us


def pg_raw_batched(args: argparse.Namespace, dsn: str) -> tuple[float, float | None]:
    """The best group commit could do: one connection in pipeline mode, ``concurrency``
    workflows advanced together in each transaction (the claim, then per state one commit of
    all the executing records and one of all the transitions), as the SQLite ceiling does;
    and the server's CPU microseconds per state meanwhile."""
    import psycopg

    ids = seed(args, "postgres", dsn, "b")
    ctx, result = json.dumps({"n": 0}), json.dumps({"ok": True})
    conn = psycopg.connect(dsn)
    cpu_before = server_cpu()
    started, sent = time.perf_counter(), STATEMENTS.counting(True)
    with conn.pipeline():
        for b in range(0, len(ids), args.concurrency):
            batch = ids[b : b + args.concurrency]
            now = time.time()
            with conn.cursor() as cur:
                cur.executemany(PG_CLAIM, [{"id": wid, "until": now + 30} for wid in batch])
            conn.commit()
            for s in range(args.states):
                frm, to = f"s{s}", f"s{s + 1}" if s + 1 < args.states else "done"
                terminal = to == "done"
                with conn.cursor() as cur:
                    cur.executemany(
                        PG_STEP_BEGIN,
                        [{"key": f"{w}:{frm}", "id": w, "step": frm, "at": now} for w in batch],
                    )
                conn.commit()
                moves = [
                    {"id": w, "v": s + 1, "frm": frm, "to": to, "at": now, "ctx": ctx}
                    | {"due": None if terminal else now, "terminal": terminal}
                    | {"key": f"{w}:{frm}", "result": result}
                    for w in batch
                ]
                with conn.cursor() as cur:
                    cur.executemany(PG_MOVE, moves)
                conn.commit()
    elapsed = time.perf_counter() - started
    STATEMENTS.last = STATEMENTS.counting(False) - sent
    server_us = per_state(cpu_before, args)
    done = conn.execute("SELECT count(*) FROM workflows WHERE terminal").fetchone()
    conn.close()
    assert done is not None and done[0] == len(ids), f"raw batched finished {done}"
    return len(ids) / elapsed, server_us


# -- places ----------------------------------------------------------------------------------


def disk_dir(given: str | None) -> Path:
    if given:
        return Path(given)
    fs = ""
    try:
        with open("/proc/mounts") as mounts:
            best = ""
            for line in mounts:
                parts = line.split()
                if "/tmp".startswith(parts[1]) and len(parts[1]) > len(best):
                    best, fs = parts[1], parts[2]
    except OSError:
        pass
    if fs in MEMORY_FS:
        path = REPO / ".statewright" / "bench"
        path.mkdir(parents=True, exist_ok=True)
        return path
    return Path(tempfile.gettempdir())


class Postgres:
    """The server to use: ``--dsn``, ``STATEWRIGHT_PG_DSN``, or a throwaway pgserver; a fresh
    database per run."""

    def __init__(self, dsn: str | None) -> None:
        self.server: Any = None
        if not dsn:
            os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.mkdtemp())
            import pgserver

            self.server = pgserver.get_server(  # type: ignore[attr-defined]
                tempfile.mkdtemp(prefix="sw-bench-pg-"), cleanup_mode="stop"
            )
            dsn = self.server.get_uri()
        self.dsn = dsn
        self.n = 0

    def fresh(self) -> str:
        import psycopg
        from psycopg.conninfo import make_conninfo

        self.n += 1
        name = f"sw_bench_wf_{os.getpid()}_{self.n}"
        with psycopg.connect(self.dsn, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name}")
            admin.execute(f"CREATE DATABASE {name}")
        return make_conninfo(self.dsn, dbname=name)

    def describe(self) -> str:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as admin:
            got = [admin.execute(f"SHOW {s}").fetchone() for s in ("server_version", "fsync")]
        return f"PostgreSQL {got[0][0] if got[0] else '?'}, fsync={got[1][0] if got[1] else '?'}"


def raw_figures(result: dict[str, Any], figure: str) -> str:
    """``figure`` of the raw runs of ``result`` ("raw 2.10, raw batched 0.07"), or "-"."""
    found = [
        f"{label} {result[prefix + figure]:.2f}"
        for label, prefix in (("raw", "raw_"), ("raw batched", "raw_batched_"))
        if prefix + figure in result
    ]
    return ", ".join(found) or "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--states", type=int, default=10)
    parser.add_argument("--workflows", type=int, default=3000)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=1, help="rounds; medians are printed")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--dsn", default=os.environ.get("STATEWRIGHT_PG_DSN"))
    parser.add_argument("--dir", default=None, help="where SQLite files go")
    parser.add_argument("--no-raw", action="store_true", help="skip the raw ceiling")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    import statewright

    STATEMENTS.install()
    print(
        f"statewright from {Path(statewright.__file__).parent}, Python "
        f"{sys.version.split()[0]}, SQLite {sqlite3.sqlite_version}, {os.cpu_count()} CPUs"
    )
    print(
        f"{args.workflows} workflows of {args.states} states (one step each), "
        f"{args.processes} worker processes x concurrency {args.concurrency}"
    )
    results: list[dict[str, Any]] = []
    pg: Postgres | None = None
    for kind in args.stores.split(","):
        rounds: list[dict[str, Any]] = []
        if kind == "postgres":
            pg = Postgres(args.dsn)
            print(pg.describe())
        for _ in range(args.repeat):
            tmp = tempfile.mkdtemp(prefix="sw-bench-wf-", dir=disk_dir(args.dir))
            try:
                where = f"{tmp}/engine.db" if kind == "sqlite" else pg.fresh()  # type: ignore[union-attr]
                figure = engine_run(args, kind, where)
                if not args.no_raw:
                    states = args.workflows * args.states
                    # The raw runs' commits, by their construction: a claim, then two per
                    # state, for each workflow (one statement each) or each batch of them.
                    batches = -(-args.workflows // args.concurrency)
                    batched_commits = batches * (1 + 2 * args.states) / states
                    if kind == "sqlite":
                        figure["raw_workflows_per_s"] = sqlite_raw(args, f"{tmp}/raw.db")
                        figure["raw_statements_per_state"] = STATEMENTS.last / states
                        figure["raw_commits_per_state"] = batched_commits
                    else:
                        assert pg is not None
                        rate, server_us = pg_raw(args, pg.fresh())
                        figure["raw_workflows_per_s"] = rate
                        figure["raw_statements_per_state"] = STATEMENTS.last / states
                        figure["raw_commits_per_state"] = (1 + 2 * args.states) / args.states
                        if server_us is not None:
                            figure["raw_server_cpu_us_per_state"] = server_us
                        rate, server_us = pg_raw_batched(args, pg.fresh())
                        figure["raw_batched_workflows_per_s"] = rate
                        figure["raw_batched_statements_per_state"] = STATEMENTS.last / states
                        figure["raw_batched_commits_per_state"] = batched_commits
                        if server_us is not None:
                            figure["raw_batched_server_cpu_us_per_state"] = server_us
                rounds.append(figure)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            print(f"  round: {json.dumps({k: v for k, v in figure.items()}, default=str)}")
        med = {
            k: statistics.median(r[k] for r in rounds)
            for k in rounds[0]
            if all(isinstance(r[k], int | float) for r in rounds)
        }
        med["store"] = kind
        results.append(med)
    head = (
        f"{'store':>8}  {'workflows/s':>11}  {'steps/s':>8}  {'commits/wf':>10}  "
        f"{'client CPU/state':>16}  {'raw wf/s':>8}  {'raw steps/s':>11}  {'engine/raw':>10}"
    )
    print(
        "\nengine vs raw ceiling (raw = claim + per state: step executing commit, then "
        "transition + log + step done commit)"
    )
    print(head)
    print("-" * len(head))
    for r in results:
        raw = r.get("raw_workflows_per_s")
        commits = r.get("commits")
        per_wf = "-" if commits is None else f"{commits / args.workflows:.2f}"
        raw_wf = "-" if raw is None else f"{raw:,.0f}"
        raw_steps = "-" if raw is None else f"{raw * args.states:,.0f}"
        ratio = "-" if raw is None else f"{r['workflows_per_s'] / raw:.0%}"
        print(
            f"{r['store']:>8}  {r['workflows_per_s']:>11,.0f}  {r['steps_per_s']:>8,.0f}  "
            f"{per_wf:>10}  {r['client_cpu_us_per_state']:>13,.0f} us  {raw_wf:>8}  "
            f"{raw_steps:>11}  {ratio:>10}"
        )
    print(
        "\nSQL statements per state (what sqlite3's and psycopg's cursors execute: SQLite's "
        "BEGIN and COMMIT too, not psycopg's own)"
    )
    for r in results:
        raws = raw_figures(r, "statements_per_state")
        print(f"  {r['store']:>8}: engine {r['statements_per_state']:.2f}; {raws}")
    print("\ncommits per state (SQLite: the store's COMMITs; PostgreSQL: every transaction")
    print("the workers' connections committed, reads included)")
    for r in results:
        commits = r.get("commits")
        engine = "-" if commits is None else f"{commits / (args.workflows * args.states):.2f}"
        print(f"  {r['store']:>8}: engine {engine}; {raw_figures(r, 'commits_per_state')}")
    for r in results:
        if "raw_batched_workflows_per_s" not in r:
            continue
        cpus = os.cpu_count() or 1
        print(
            f"\npostgres, the best group commit could do (raw batched: one connection, "
            f"{args.concurrency} workflows per commit, no engine): "
            f"{r['raw_batched_workflows_per_s']:,.0f} workflows/s; the engine did "
            f"{r['workflows_per_s'] / r['raw_batched_workflows_per_s']:.0%} of it"
        )
        for label, key in (
            ("engine", "server_cpu_us_per_state"),
            ("raw", "raw_server_cpu_us_per_state"),
            ("raw batched", "raw_batched_server_cpu_us_per_state"),
        ):
            if key not in r:
                continue
            if r[key] <= 0:  # a run shorter than the clock's tick (10 ms) measures nothing
                print(f"  server CPU per state, {label:>11}: too short a run to measure")
                continue
            # The server alone, with every core to itself and no client: an upper bound.
            bound = cpus / (r[key] * 1e-6) / args.states
            print(
                f"  server CPU per state, {label:>11}: {r[key]:6,.0f} us "
                f"(at most {bound:,.0f} workflows/s on {cpus} cores with no client at all)"
            )
    python_us = python_cpu(args)
    print(
        f"\nPython CPU per state, the engine and a worker in one process on SQLite :memory:: "
        f"{python_us:,.0f} us"
    )
    if args.json:
        summary = {"args": vars(args), "results": results, "python_cpu_us_per_state": python_us}
        Path(args.json).write_text(json.dumps(summary, indent=2))
    if pg is not None and pg.server is not None:
        pg.server.cleanup()


if __name__ == "__main__":
    main()
