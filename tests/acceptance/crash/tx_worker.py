"""A worker of the transactional-step crash tests (``tests/acceptance/test_tx_crash.py``),
forked by a fork server (:func:`child_main`).

Workflows go ``s0 -> s1 -> s2 -> s3 -> done``; every handler runs a step (its record carried
by the transition) and registers a transactional step inserting ``(workflow, state,
version)`` into the application's table ``app_rows`` (no unique key: a duplicate would
show). With ``--die`` the step's function SIGKILLs its own process now and then, after its
insert and before the transaction commits (it logs a line to ``--kill-log`` first). Runs
``Worker.run`` (recovery first) until every workflow is terminal; exit 0 then, 4 as soon
as one is parked (nothing should be).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from statewright import (
    Engine,
    MachineBuilder,
    Next,
    RetryPolicy,
    Run,
    Worker,
    WorkflowType,
    store_from_url,
)
from statewright.types import WorkflowFilter

STATES = ("s0", "s1", "s2", "s3")
PATH = (*STATES, "done")
EXIT_PARKED = 4
TABLE = "CREATE TABLE app_rows (wid TEXT NOT NULL, state TEXT NOT NULL, version INTEGER NOT NULL)"


def machine() -> Any:
    b = MachineBuilder("tx_order")
    for i, state in enumerate(STATES):
        b.state(state, initial=i == 0)
    b.state("done", terminal=True).event("next")
    for state, following in zip(STATES, PATH[1:], strict=True):
        b.transition("next", state, following)
    return b.build()


def make_type(postgres: bool, die: Callable[[str, str], None]) -> WorkflowType:
    """The crash app's type; ``die(wid, state)`` runs inside each transactional step."""

    def book(wid: str, state: str, version: int) -> Callable[[Any], Any]:
        values = (wid, state, version)
        if not postgres:

            def fn(conn: Any) -> None:
                conn.execute("INSERT INTO app_rows VALUES (?, ?, ?)", values)
                die(wid, state)

            return fn

        async def afn(conn: Any) -> None:
            await conn.execute("INSERT INTO app_rows VALUES (%s, %s, %s)", values)
            await asyncio.sleep(0)
            die(wid, state)

        return afn

    async def handler(run: Run) -> Next:
        await run.step(run.state, lambda key: {"at": run.state}, safe_to_repeat=True)
        fn = book(run.id, run.state, run.workflow.version)
        run.transaction("book", fn, tables=["app_rows"])
        return Next("next")

    return WorkflowType(
        machine(),
        {state: handler for state in STATES},
        retry=RetryPolicy(
            max_attempts=1000, base_delay=0.02, max_delay=0.2, jitter=0, max_total_attempts=None
        ),
        on_transient=None,
    )


async def run(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    kill_log = Path(args.kill_log)

    def die(wid: str, state: str) -> None:
        if args.die and rng.random() < args.die:
            with kill_log.open("a") as f:
                f.write(f"{wid} {state} {os.getpid()}\n")
            os.kill(os.getpid(), signal.SIGKILL)

    store = store_from_url(args.db)
    engine = Engine(store, [make_type(args.db.startswith("postgres"), die)])
    async with engine:
        Path(args.ready).write_text(str(os.getpid()))
        worker = Worker(
            engine,
            concurrency=args.concurrency,
            poll_interval=0.02,
            lease_seconds=args.lease_seconds,
        )
        task = asyncio.create_task(worker.run())
        while True:
            await asyncio.sleep(0.05)
            if task.done():
                task.result()
                raise RuntimeError("Worker.run returned although it was not stopped")
            try:
                left = await store.list_workflows(WorkflowFilter(terminal=False, limit=1000))
            except Exception as exc:  # the server restarting: ask again
                print(f"list_workflows: {exc!r}", file=sys.stderr)
                continue
            if not left:
                break
            parked = {w.id: w.last_error for w in left if w.parked}
            if parked:
                print(f"parked: {parked}", file=sys.stderr)
                worker.stop()
                await task
                return EXIT_PARKED
        worker.stop()
        await task
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tests.acceptance.crash.tx_worker")
    p.add_argument("--db", required=True)
    p.add_argument("--ready", required=True)
    p.add_argument("--kill-log", required=True)
    p.add_argument("--die", type=float, default=0.0, help="chance of a SIGKILL in a step")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--lease-seconds", type=float, default=30.0)
    return p


def child_main(argv: Sequence[str]) -> int:
    return asyncio.run(run(parser().parse_args(list(argv))))


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
