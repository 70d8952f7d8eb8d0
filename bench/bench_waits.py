"""Waits that free the worker: N workflows suspended in ``run.wait_input`` on one worker of
concurrency 8, then an input posted to each, next to the same work with the inputs posted
before the worker starts (no waiting).

    .venv/bin/python bench/bench_waits.py [--store sqlite|postgres] [--workflows 10000]
        [--concurrency 8] [--dsn URL] [--dir DIR] [--json out.json]

Workload: a machine ``asking --finish--> done`` whose handler takes an input (``item = await
run.wait_input("go")``), runs one durable step and returns ``Next("finish")``. Two runs on
fresh databases, each one engine and one ``Worker(concurrency=...)`` in this process:

- **waiting**: the workflows are started, the worker runs until every one of them has
  suspended in ``wait_input`` (its slot and lease freed), then the test posts the N inputs
  (50 posts at a time) and the clock runs from the first post until the last workflow is
  ``done``.
- **ready**: the workflows are started and their inputs posted first; then the worker
  starts. Its time is the posting's plus the worker's (from its start until the last is
  ``done``): the same work, posts and workflows, with no overlap.

Printed (and ``--json``): both times, their ratio, the most handlers in flight at once (never
more than the concurrency), and the process's resident memory (RSS) before the worker ran,
with every workflow suspended, and its peak, in MB. SQLite files go to ``--dir`` (default: a
temporary folder); PostgreSQL comes from ``--dsn`` / ``STATEWRIGHT_BENCH_PG_DSN``, else a
throwaway ``pgserver``. It is a script, not a test (tests/acceptance/test_waits_capacity.py
runs it and checks the figures).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from statewright import (  # noqa: E402
    Engine,
    MachineBuilder,
    Next,
    Run,
    Worker,
    WorkflowType,
    store_from_url,
)
from statewright.engine.hooks import TransitionEvent  # noqa: E402
from statewright.engine.suspend import Suspended  # noqa: E402
from statewright.store.postgres import PostgresStore  # noqa: E402

POLL = 0.02
BATCH = 50


def rss_mb() -> float:
    """This process's resident memory now, in MB (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Tally:
    """What the handlers and transitions of one run did."""

    def __init__(self) -> None:
        self.inflight = 0
        self.most = 0
        self.suspended: set[str] = set()
        self.done = 0

    def on_transition(self, ev: TransitionEvent) -> None:
        if ev.after.state == "done":
            self.done += 1


def workflow_type(tally: Tally) -> WorkflowType:
    machine = (
        MachineBuilder("waiting")
        .state("asking", initial=True)
        .state("done", terminal=True)
        .event("finish")
        .transition("finish", "asking", "done")
        .build()
    )

    def record(key: Any) -> dict[str, bool]:
        return {"ok": True}

    async def asking(run: Run) -> Next:
        tally.inflight += 1
        tally.most = max(tally.most, tally.inflight)
        try:
            try:
                item = await run.wait_input("go")
            except Suspended:
                tally.suspended.add(run.id)
                raise
            assert item is not None
            await run.step("record", record)
            return Next("finish", context={"input": item.id})
        finally:
            tally.inflight -= 1

    return WorkflowType(machine, {"asking": asking})


async def _in_batches(n: int, call: Callable[[int], Awaitable[Any]]) -> None:
    for first in range(0, n, BATCH):
        await asyncio.gather(*(call(i) for i in range(first, min(n, first + BATCH))))


async def _until(check: Callable[[], bool], timeout: float, what: str, peak: list[float]) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not reached within {timeout:g}s")
        peak[0] = max(peak[0], rss_mb())
        await asyncio.sleep(POLL)


async def one_run(url: str, n: int, concurrency: int, *, waiting: bool) -> dict[str, Any]:
    """One run (see the module docstring): its figures."""
    tally = Tally()
    # A PostgreSQL conninfo ("user=... dbname=...") is no URL store_from_url would know.
    store = PostgresStore(url) if "dbname=" in url else store_from_url(url)
    engine = Engine(store, [workflow_type(tally)])
    engine.observers.transition.append(tally.on_transition)
    timeout = 60.0 + n * 0.05
    async with engine:
        ids = [f"w{i:06d}" for i in range(n)]

        async def start(i: int) -> None:
            await engine.start("waiting", workflow_id=ids[i])

        async def post(i: int) -> None:
            await engine.post_input(ids[i], "go", {"n": i})

        await _in_batches(n, start)
        posting = 0.0
        if not waiting:
            posted = time.monotonic()
            await _in_batches(n, post)
            posting = time.monotonic() - posted
        before = rss_mb()
        peak = [before]
        worker = Worker(engine, concurrency=concurrency, poll_interval=0.05)
        started = time.monotonic()
        task = asyncio.create_task(worker.run())
        try:
            suspended_mb = None
            if waiting:
                await _until(
                    lambda: len(tally.suspended) == n and tally.inflight == 0,
                    timeout,
                    "every workflow suspended",
                    peak,
                )
                await asyncio.sleep(0.2)  # the last suspensions' writes
                suspended_mb = rss_mb()
                started = time.monotonic()
                await _in_batches(n, post)
            await _until(lambda: tally.done == n, timeout, "every workflow done", peak)
            elapsed = time.monotonic() - started + posting
        finally:
            worker.stop()
            await task
    return {
        "seconds": round(elapsed, 3),
        "posting_seconds": round(posting, 3),
        "most_in_flight": tally.most,
        "suspended": len(tally.suspended),
        "rss_before_mb": round(before, 1),
        "rss_suspended_mb": None if suspended_mb is None else round(suspended_mb, 1),
        "rss_peak_mb": round(peak[0], 1),
        "rss_growth_mb": round(peak[0] - before, 1),
    }


def _server(dsn: str | None) -> tuple[str, Any]:
    """The PostgreSQL server to use: ``dsn``, or a throwaway ``pgserver`` (and its handle)."""
    dsn = dsn or os.environ.get("STATEWRIGHT_BENCH_PG_DSN")
    if dsn:
        return dsn, None
    os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.mkdtemp())
    import pgserver

    server = pgserver.get_server(tempfile.mkdtemp(prefix="sw-bench-pg-"), cleanup_mode="stop")
    return server.get_uri(), server


def _database(dsn: str, name: str, *, drop_only: bool = False) -> str:
    """A fresh database ``name`` on the server of ``dsn`` (dropped first); its URL."""
    import psycopg
    from psycopg.conninfo import make_conninfo

    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name}")
        if not drop_only:
            admin.execute(f"CREATE DATABASE {name}")
    return make_conninfo(dsn, dbname=name)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    runs: dict[str, Any] = {}
    folder = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="sw-bench-waits-"))
    folder.mkdir(parents=True, exist_ok=True)
    dsn, server = _server(args.dsn) if args.store == "postgres" else ("", None)
    try:
        for kind, waiting in (("ready", False), ("waiting", True)):
            name = f"sw_bench_waits_{kind}_{os.getpid()}"
            if args.store == "sqlite":
                path = folder / f"{name}.db"
                for old in folder.glob(f"{path.name}*"):
                    old.unlink()
                url = str(path)
            else:
                url = _database(dsn, name)
            try:
                runs[kind] = await one_run(url, args.workflows, args.concurrency, waiting=waiting)
            finally:
                if args.store == "postgres":
                    _database(dsn, name, drop_only=True)
    finally:
        if server is not None:
            server.cleanup()
    ready, waiting_run = runs["ready"], runs["waiting"]
    return {
        "store": args.store,
        "workflows": args.workflows,
        "concurrency": args.concurrency,
        "ready": ready,
        "waiting": waiting_run,
        "ratio": round(waiting_run["seconds"] / max(ready["seconds"], 1e-9), 2),
    }


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--workflows", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--dsn", default=None, help="PostgreSQL server (else pgserver)")
    parser.add_argument("--dir", default=None, help="where SQLite files go")
    parser.add_argument("--json", default=None, help="write the figures here")
    args = parser.parse_args()
    figures = asyncio.run(main(args))
    for kind in ("ready", "waiting"):
        f = figures[kind]
        print(
            f"{kind:8s} {figures['workflows']} workflows on {figures['store']}, 1 worker of "
            f"concurrency {figures['concurrency']}: {f['seconds']:.2f}s "
            + (
                "from the first post to the last done; "
                if kind == "waiting"
                else f"(posting {f['posting_seconds']:.2f}s, then the worker); "
            )
            + f"most in flight {f['most_in_flight']}; RSS {f['rss_before_mb']} MB before, "
            f"peak {f['rss_peak_mb']} MB (+{f['rss_growth_mb']})"
            + (f", {f['rss_suspended_mb']} MB all suspended" if kind == "waiting" else "")
        )
    print(f"waiting / ready: {figures['ratio']:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    cli()
