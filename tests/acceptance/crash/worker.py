"""The worker subprocess of the crash test: ``python -m tests.acceptance.crash.worker ...``.

Runs ``Worker.run`` (recovery first) on the test database until every workflow is terminal,
unless its kill plan (or the test, from outside) SIGKILLs it first.

Exit codes: 0 all workflows terminal, or stopped gracefully by SIGTERM (it prints
``{"stopped": true, ...}``); 3 no progress for ``--stall-seconds`` (stuck work); anything else
is a crash of the script itself. The tests treat only 0 and SIGKILL as normal.

``--db`` is a SQLite path or any store URL (``postgresql://...`` for the distributed test).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import sys
import time
from pathlib import Path

from statewright import Engine, Worker, WorkflowFilter, store_from_url
from tests.acceptance.crash.app import Faults, Service, make_type

EXIT_STALLED = 3


def parse_plan(text: str) -> dict[str, int]:
    """``"during_step:3,after_transition:9"`` -> ``{"during_step": 3, ...}``."""
    plan: dict[str, int] = {}
    for part in filter(None, text.split(",")):
        point, _, n = part.partition(":")
        plan[point] = int(n)
    return plan


async def run(args: argparse.Namespace) -> int:
    faults = Faults(
        parse_plan(args.plan),
        args.kill_log,
        random.Random(args.seed),
        max_jitter=args.jitter,
    )
    service = Service(args.service, journal=args.journal)
    store = store_from_url(args.db)
    engine = Engine(store, [make_type(service, faults)])
    engine.observers.transition.append(faults.on_transition)
    try:
        async with engine:
            Path(args.ready).write_text(str(os.getpid()))
            worker = Worker(
                engine,
                concurrency=args.concurrency,
                lease_seconds=args.lease_seconds,
                poll_interval=0.02,
            )
            task = asyncio.create_task(worker.run())
            terminated = asyncio.Event()
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, terminated.set)
            seq, last_progress = 0, time.monotonic()
            while True:
                await asyncio.sleep(0.02)
                if terminated.is_set():  # graceful: finish in-flight work, hand back leases
                    worker.stop()
                    await task
                    print(json.dumps({"stopped": True, "worker": worker.id}))
                    return 0
                if task.done():
                    task.result()
                    raise RuntimeError("Worker.run returned although it was not stopped")
                new = await store.transitions_since(seq, limit=10_000)
                if new:
                    seq, last_progress = new[-1].seq, time.monotonic()
                left = await store.list_workflows(WorkflowFilter(terminal=False, limit=10_000))
                if not left:
                    break
                if time.monotonic() - last_progress > args.stall_seconds:
                    worker.stop()
                    await task
                    stuck = {w.id: (w.state, w.next_due_at, w.lease_owner) for w in left}
                    print(f"stalled; non-terminal: {stuck}", file=sys.stderr)
                    return EXIT_STALLED
            worker.stop()
            await task
            print(json.dumps({"processed": worker.processed, "seen": faults.seen}))
            return 0
    finally:
        service.close()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    p.add_argument("--service", required=True)
    p.add_argument("--ready", required=True, help="file written once the worker starts")
    p.add_argument("--kill-log", required=True)
    p.add_argument("--journal", default=None, help="file for reconcile verdicts")
    p.add_argument("--plan", default="", help="point:n[,point:n]: SIGKILL self at n-th hit")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jitter", type=float, default=0.002)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--lease-seconds", type=float, default=30.0)
    p.add_argument("--stall-seconds", type=float, default=10.0)
    sys.exit(asyncio.run(run(p.parse_args())))


if __name__ == "__main__":
    main()
