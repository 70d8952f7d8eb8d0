"""SQLite benchmark: durable transitions/s and latency of the engine next to the raw-SQL ceiling.

    .venv/bin/python bench/bench_sqlite.py [--transitions N] [--clients 1,8,32]
                                           [--modes FULL,NORMAL] [--json out.json]

Workload: a machine ``a --go--> b --back--> a`` (plus ``b --finish--> done`` so it validates).
One pre-created workflow per client, so clients never conflict; each client sends its events
one after the other with ``engine.send(id, event, payload={...})`` and times every call.
Concurrent clients are asyncio tasks on one engine: that is where group commit shares fsyncs.

Raw ceiling, measured in the same run and the same durability mode: the stdlib ``sqlite3``
driver on a database whose schema was created by ``SQLiteStore.open()`` (identical tables,
indexes and triggers), the same PRAGMAs, and per transition ``BEGIN IMMEDIATE`` + the store's
own CAS ``UPDATE`` + its ``INSERT INTO transitions`` + ``COMMIT`` (one thread, sequential,
``json.dumps`` of the same context and payload). "raw batched" puts C such transitions (one per
workflow) in one commit: the best group commit could do, shown next to the concurrent runs.

Database files go to a temp folder on a real disk: /tmp unless it is tmpfs, else
``<repo>/.statewright/bench`` (git-ignored). ``--dir`` overrides.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from statewright import Engine, MachineBuilder, SQLiteStore, WorkflowType
from statewright.definition.machine import Machine
from statewright.store.queries import load_queries

REPO = Path(__file__).resolve().parent.parent
Q = load_queries("sqlite")
MEMORY_FS = {"tmpfs", "ramfs", "devtmpfs"}
CONTEXT: dict[str, Any] = {"customer": "c-42", "amount": 1999, "currency": "EUR"}
WARMUP = 200  # transitions per configuration, not measured


def payload(i: int) -> dict[str, Any]:
    return {"n": i, "note": "ping"}


def dumps(value: Any) -> str:
    # Exactly what SQLiteStore does to context and payload.
    return json.dumps(value, separators=(",", ":"), sort_keys=True, allow_nan=False)


def machine(schema: bool = False) -> Machine:
    go_schema = (
        {
            "type": "object",
            "properties": {"n": {"type": "integer"}, "note": {"type": "string"}},
            "required": ["n"],
        }
        if schema
        else None
    )
    return (
        MachineBuilder("pingpong")
        .state("a", initial=True)
        .state("b")
        .state("done", terminal=True)
        .event("go", payload_schema=go_schema)
        .event("back", payload_schema=go_schema)
        .event("finish")
        .transition("go", "a", "b")
        .transition("back", "b", "a")
        .transition("finish", "b", "done")
        .build()
    )


# -- results ---------------------------------------------------------------------------------


@dataclass
class Result:
    kind: str  # "engine", "raw", "raw-batched"
    mode: str
    clients: int  # concurrent clients (engine) or transitions per commit (raw-batched)
    transitions: int
    seconds: float
    latencies: list[float] = field(repr=False)
    commits: int | None = None
    writes: int | None = None

    @property
    def ops(self) -> float:
        return self.transitions / self.seconds

    def pct(self, q: float) -> float:
        xs = sorted(self.latencies)
        return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000

    def summary(self) -> dict[str, Any]:
        d = asdict(self)
        del d["latencies"]
        d.update(
            ops_per_s=round(self.ops, 1),
            p50_ms=round(self.pct(0.50), 4),
            p99_ms=round(self.pct(0.99), 4),
        )
        return d


@dataclass
class Figure:
    """One configuration over all rounds: the median of each figure across rounds."""

    kind: str
    mode: str
    clients: int
    runs: list[Result] = field(default_factory=list)

    @property
    def ops(self) -> float:
        return statistics.median(r.ops for r in self.runs)

    def pct(self, q: float) -> float:
        return statistics.median(r.pct(q) for r in self.runs)

    @property
    def commits(self) -> int:
        return sum(r.commits or 0 for r in self.runs)

    @property
    def writes(self) -> int:
        return sum(r.writes or 0 for r in self.runs)

    def summary(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "mode": self.mode,
            "clients": self.clients,
            "ops_per_s": round(self.ops, 1),
            "p50_ms": round(self.pct(0.50), 4),
            "p99_ms": round(self.pct(0.99), 4),
            "commits": self.commits or None,
            "writes": self.writes or None,
            "runs": [r.summary() for r in self.runs],
        }


# -- where the files go ----------------------------------------------------------------------


def filesystem(path: Path) -> tuple[str, str, str]:
    """(mount point, fs type, device) holding ``path``, from /proc/mounts."""
    real = os.path.realpath(path)
    best = ("/", "?", "?")
    try:
        with open("/proc/mounts") as f:
            for line in f:
                dev, mnt, fstype, *_ = line.split()
                mnt = mnt.replace("\\040", " ")
                inside = real == mnt or real.startswith(mnt.rstrip("/") + "/")
                if inside and len(mnt) >= len(best[0]):
                    best = (mnt, fstype, dev)
    except OSError:
        pass
    return best


def bench_dir(explicit: str | None) -> Path:
    if explicit:
        base = Path(explicit)
    else:
        tmp = Path(tempfile.gettempdir())
        base = tmp if filesystem(tmp)[1] not in MEMORY_FS else REPO / ".statewright" / "bench"
    base.mkdir(parents=True, exist_ok=True)
    fstype = filesystem(base)[1]
    if fstype in MEMORY_FS:
        sys.exit(f"{base} is on {fstype}: fsync is free there, pick a disk with --dir")
    return Path(tempfile.mkdtemp(prefix="sw-bench-", dir=base))


# -- set-up shared by both sides -------------------------------------------------------------


def engine_for(path: Path, mode: str, schema: bool) -> tuple[Engine, SQLiteStore]:
    store = SQLiteStore(path, synchronous=mode)  # type: ignore[arg-type]
    # No handler anywhere, and this process says so (runs_here): a state it enters is not
    # due, as in the raw ceiling's UPDATE (a bare type would make each one due for a worker).
    return Engine(store, [WorkflowType(machine(schema), runs_here=True)]), store


async def create_workflows(path: Path, mode: str, count: int) -> list[str]:
    """A fresh database made by the store itself, with ``count`` workflows in state a."""
    engine, _ = engine_for(path, mode, False)
    async with engine:
        ids = [f"wf-{i}" for i in range(count)]
        for wid in ids:
            await engine.start("pingpong", CONTEXT, workflow_id=wid)
    return ids


# -- the raw ceiling -------------------------------------------------------------------------


def raw_connect(path: Path, mode: str) -> sqlite3.Connection:
    # The PRAGMAs GroupCommitConnection sets.
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={mode}")
    conn.execute("PRAGMA busy_timeout=10000")
    conn.execute("PRAGMA foreign_keys=ON")
    return conn


def raw_transition(conn: sqlite3.Connection, wid: str, version: int, state: str, i: int) -> str:
    """The store's CAS UPDATE + log INSERT for one ping-pong step; returns the new state."""
    to, event = ("b", "go") if state == "a" else ("a", "back")
    now = time.time()
    cur = conn.execute(
        Q["cas_update_workflow"],
        {
            "id": wid,
            "expected_version": version,
            "to_state": to,
            "machine_version": None,
            "context": dumps(CONTEXT),
            "attempts": 0,
            "terminal": 0,
            "at": now,
            "run_at": None,
            "last_error": None,
            "release_lease": 0,
            "total_attempts": None,
            "require_unleased": 0,
            "owner": None,
            "fence": None,
            "trace": None,
            # next_due_at from the timers the write leaves: it leaves the state, arms none
            "clear_timers": 1,
            "fired_timer_id": None,
            "drop_keys": None,
            "new_due": None,
        },
    )
    if cur.rowcount != 1:
        raise RuntimeError(f"raw CAS lost on {wid} v{version}")
    conn.execute(
        Q["append_transition"],
        {
            "workflow_id": wid,
            "version": version + 1,
            "from_state": state,
            "to_state": to,
            "event": event,
            "payload": dumps(payload(i)),
            "actor": "system",
            "context_patch": None,
            "at": now,
            "idempotency_key": None,
            "messages": None,
        },
    )
    return to


def run_raw(path: Path, mode: str, n: int, per_commit: int) -> Result:
    """``n`` transitions, ``per_commit`` of them (on as many workflows) per transaction."""
    ids = asyncio.run(create_workflows(path, mode, per_commit))
    conn = raw_connect(path, mode)
    states = dict.fromkeys(ids, "a")
    versions = dict.fromkeys(ids, 1)
    latencies: list[float] = []
    rounds = n // per_commit
    warm = max(1, WARMUP // per_commit)
    start = 0.0
    for r in range(warm + rounds):
        if r == warm:
            start = time.perf_counter()
            latencies.clear()
        t0 = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        for wid in ids:
            states[wid] = raw_transition(conn, wid, versions[wid], states[wid], r)
            versions[wid] += 1
        conn.execute("COMMIT")
        took = time.perf_counter() - t0
        latencies.extend([took] * per_commit)  # every transition waits for its commit
    seconds = time.perf_counter() - start
    conn.close()
    kind = "raw" if per_commit == 1 else "raw-batched"
    return Result(kind, mode, per_commit, rounds * per_commit, seconds, latencies)


# -- the engine ------------------------------------------------------------------------------


async def run_engine_async(path: Path, mode: str, clients: int, n: int, schema: bool) -> Result:
    engine, store = engine_for(path, mode, schema)
    async with engine:
        ids = [f"wf-{i}" for i in range(clients)]
        for wid in ids:
            await engine.start("pingpong", CONTEXT, workflow_id=wid)
        states = dict.fromkeys(ids, "a")

        async def client(wid: str, count: int, out: list[float]) -> None:
            state = states[wid]
            for i in range(count):
                event = "go" if state == "a" else "back"
                t0 = time.perf_counter()
                row = (await engine.send(wid, event, payload(i))).row
                out.append(time.perf_counter() - t0)
                state = row.state
            states[wid] = state

        warm = max(1, WARMUP // clients)
        await asyncio.gather(*(client(wid, warm, []) for wid in ids))

        per_client = n // clients
        lats: list[list[float]] = [[] for _ in ids]
        commits0, writes0 = store.conn.commits, store.conn.batched_writes
        t0 = time.perf_counter()
        await asyncio.gather(
            *(client(wid, per_client, lat) for wid, lat in zip(ids, lats, strict=True))
        )
        seconds = time.perf_counter() - t0
        commits = store.conn.commits - commits0
        writes = store.conn.batched_writes - writes0

        # The figures count real transitions: every one is in the log and replays.
        for wid in ids[:2]:
            replayed = await engine.check(wid)
            assert replayed.version == 1 + warm + per_client, (wid, replayed.version)
    latencies = [x for lat in lats for x in lat]
    return Result(
        "engine", mode, clients, per_client * clients, seconds, latencies, commits, writes
    )


def run_engine(path: Path, mode: str, clients: int, n: int, schema: bool) -> Result:
    return asyncio.run(run_engine_async(path, mode, clients, n, schema))


# -- report ----------------------------------------------------------------------------------


def table(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def report(results: list[Figure], modes: list[str], rounds: str = "") -> str:
    raw = {r.mode: r for r in results if r.kind == "raw"}
    batched = {(r.mode, r.clients): r for r in results if r.kind == "raw-batched"}
    head = ("mode", "clients", "engine ops/s", "p50 ms", "p99 ms")
    main = [[*head, "raw ops/s", "raw p50", "raw p99", "engine/raw"]]
    counted = ("mode", "clients", "commits", "writes", "writes/commit")
    group = [[*counted, "raw batched ops/s", "batched p50", "batched p99", "engine/batched"]]
    for mode in modes:
        base = raw[mode]
        for r in (r for r in results if r.kind == "engine" and r.mode == mode):
            main.append([mode, str(r.clients), *figures(r), *figures(base), pct(r, base)])
            if r.clients > 1 and r.commits:
                b = batched.get((mode, r.clients))
                writes = r.writes
                counts = [str(r.commits), str(writes), f"{writes / r.commits:.1f}"]
                vs = [*figures(b), pct(r, b)] if b else ["-"] * 4
                group.append([mode, str(r.clients), *counts, *vs])
    out = [
        "engine vs raw ceiling (raw = stdlib sqlite3, BEGIN IMMEDIATE + CAS UPDATE + INSERT +"
        f" COMMIT, one transition per commit, one thread{rounds})",
        table(main),
    ]
    verdicts = [
        f"{mode} {100 * r.ops / raw[mode].ops:.0f}%"
        for mode in modes
        for r in results
        if r.kind == "engine" and r.mode == mode and r.clients == 1
    ]
    if verdicts:
        out.append(
            "one client, one transition per commit on both sides: engine/raw = "
            + ", ".join(verdicts)
            + " (target >= 50%)"
        )
    if len(group) > 1:
        out += [
            "",
            "group commit in the concurrent runs (commits/writes = SQLiteStore.conn counters;"
            " raw batched = C transitions per COMMIT, one thread; its latency = the batch's)",
            table(group),
        ]
    return "\n".join(out)


def figures(r: Figure) -> list[str]:
    return [f"{r.ops:,.0f}", f"{r.pct(0.5):.3f}", f"{r.pct(0.99):.3f}"]


def pct(r: Figure, base: Figure) -> str:
    return f"{100 * r.ops / base.ops:.0f}%"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--transitions", type=int, default=4000, help="per run (4000)")
    p.add_argument("--repeat", type=int, default=3, help="rounds; figures are medians (3)")
    p.add_argument("--clients", default="1,8,32", help="comma-separated client counts (1,8,32)")
    p.add_argument("--modes", default="FULL,NORMAL", help="synchronous modes (FULL,NORMAL)")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    p.add_argument("--dir", help="folder for the database files (default: see above)")
    p.add_argument("--keep", action="store_true", help="keep the database files")
    p.add_argument("--no-raw-batched", action="store_true", help="skip the raw batched runs")
    p.add_argument(
        "--schema", action="store_true", help="give go/back a JSON Schema for their payload"
    )
    args = p.parse_args(argv)
    clients = [int(c) for c in args.clients.split(",") if c.strip()]
    modes = [m.strip().upper() for m in args.modes.split(",") if m.strip()]
    for m in modes:
        if m not in {"OFF", "NORMAL", "FULL", "EXTRA"}:
            p.error(f"unknown synchronous mode {m!r}")

    folder = bench_dir(args.dir)
    mnt, fstype, dev = filesystem(folder)
    print(
        f"statewright SQLite bench: python {platform.python_version()}, "
        f"sqlite {sqlite3.sqlite_version}, {os.cpu_count()} CPUs, "
        f"{args.transitions} transitions per run, warm-up {WARMUP}, {args.repeat} round(s)"
        f"{', payload schema' if args.schema else ''}"
    )
    print(f"files in {folder} ({fstype} on {dev}, mounted at {mnt})\n", flush=True)

    figures: dict[tuple[str, str, int], Figure] = {}
    started = time.perf_counter()
    try:
        for round_ in range(1, args.repeat + 1):
            if args.repeat > 1:
                print(f"round {round_}/{args.repeat}")
            for mode in modes:
                plan: list[tuple[str, str, int]] = [("raw", "raw", 1)]
                for c in clients:
                    plan.append((f"engine x{c}", "engine", c))
                    if c > 1 and not args.no_raw_batched:
                        plan.append((f"raw batched x{c}", "raw", c))
                for label, kind, c in plan:
                    db = folder / f"{mode.lower()}-{kind}-{c}-{round_}.db"
                    if kind == "raw":
                        r = run_raw(db, mode, args.transitions, c)
                    else:
                        r = run_engine(db, mode, c, args.transitions, args.schema)
                    figures.setdefault((r.kind, mode, c), Figure(r.kind, mode, c)).runs.append(r)
                    print(
                        f"  {mode:<6} {label:<16} {r.ops:>9,.0f} ops/s  p50 {r.pct(0.5):7.3f} ms"
                        f"  p99 {r.pct(0.99):7.3f} ms",
                        flush=True,
                    )
                    if not args.keep:
                        for f in folder.glob(db.name + "*"):
                            f.unlink()
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    results = list(figures.values())
    rounds = f", median of {args.repeat} rounds" if args.repeat > 1 else ""
    print(f"\n{report(results, modes, rounds)}\n\ntotal {time.perf_counter() - started:.0f} s")

    if args.json:
        doc = {
            "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version,
            "cpus": os.cpu_count(),
            "filesystem": {"type": fstype, "device": dev, "mount": mnt},
            "transitions": args.transitions,
            "repeat": args.repeat,
            "schema": args.schema,
            "results": [r.summary() for r in results],
        }
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
