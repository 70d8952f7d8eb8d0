"""A worker of the crash tests: ``python -m tests.acceptance.crash.worker ...``, or forked by
the zygote (:mod:`tests.acceptance.crash.zygote`), which calls :func:`child_main`.

Runs ``Worker.run`` (recovery first) on the test database until every workflow is terminal
(and, with ``--until-file``, that file exists), unless its kill plan (or the test, from
outside) SIGKILLs it first.

Exit codes: 0 all workflows terminal, or stopped gracefully by SIGTERM (it prints
``{"stopped": true, ...}``); 3 no progress for ``--stall-seconds`` (stuck work); anything else
is a crash of the script itself. The tests treat only 0 and SIGKILL as normal.

``--db`` is a SQLite path or any store URL (``postgresql://...`` for the distributed tests).
Every connection (store, service) is opened here, after a fork, never inherited.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from statewright import Engine, Worker, WorkflowType, store_from_url
from statewright.types import WorkflowFilter
from tests.acceptance.crash.app import MODES, Faults, InFlight, Service, make_type

EXIT_STALLED = 3


def parse_plan(text: str) -> dict[str, int]:
    """``"during_step:3,after_transition:9"`` -> ``{"during_step": 3, ...}``."""
    plan: dict[str, int] = {}
    for part in filter(None, text.split(",")):
        point, _, n = part.partition(":")
        plan[point] = int(n)
    return plan


def foreign_worker_id() -> str:
    """A worker id naming another host: when this worker dies, recovery cannot see its pid is
    gone and must wait for its leases to expire (a worker lost with its machine)."""
    return f"{socket.gethostname()}-elsewhere:{os.getpid()}:{uuid.uuid4().hex[:8]}"


TypesFor = Callable[[Service, Faults, argparse.Namespace], list[WorkflowType]]
"""The workflow types a worker process runs, bound to its service and faults."""


def _crash_types(service: Service, faults: Faults, args: argparse.Namespace) -> list[WorkflowType]:
    return [make_type(service, faults)]


async def run(args: argparse.Namespace, types: TypesFor = _crash_types) -> int:
    """One worker process: run until every workflow has ended (or SIGTERM), reporting a
    stall; ``types``: what it runs (the crash app's type by default)."""
    inflight = None
    if args.inflight:
        inflight = InFlight(args.inflight)
        inflight.set(0)  # the previous worker of this slot may have died mid-call
    faults = Faults(
        parse_plan(args.plan),
        args.kill_log,
        random.Random(args.seed),
        max_jitter=args.jitter,
        call_delay=args.call_delay,
        inflight=inflight,
    )
    service = Service(args.service, journal=args.journal, mode=args.mode)
    store = store_from_url(args.db)
    engine = Engine(store, types(service, faults, args))
    engine.observers.transition.append(faults.on_transition)
    until = Path(args.until_file) if args.until_file else None
    try:
        async with engine:
            Path(args.ready).write_text(str(os.getpid()))
            worker = Worker(
                engine,
                concurrency=args.concurrency,
                lease_seconds=args.lease_seconds,
                poll_interval=0.02,
                worker_id=foreign_worker_id() if args.foreign else None,
            )
            task = asyncio.create_task(worker.run())
            terminated = asyncio.Event()
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, terminated.set)
            # Progress: any transition of a live workflow changes this (no log scan needed).
            seen: frozenset[tuple[str, int]] | None = None
            last_progress = time.monotonic()
            while True:
                await asyncio.sleep(args.watch_interval)
                if terminated.is_set():  # graceful: finish in-flight work, hand back leases
                    worker.stop()
                    await task
                    print(json.dumps({"stopped": True, "worker": worker.id}))
                    return 0
                if task.done():
                    task.result()
                    raise RuntimeError("Worker.run returned although it was not stopped")
                left = await store.list_workflows(WorkflowFilter(terminal=False, limit=100_000))
                now_seen = frozenset((w.id, w.version) for w in left)
                if now_seen != seen or not left:
                    seen, last_progress = now_seen, time.monotonic()
                if not left and (until is None or until.exists()):
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
        if inflight is not None:
            inflight.close()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tests.acceptance.crash.worker")
    p.add_argument("--db", required=True)
    p.add_argument("--service", required=True)
    p.add_argument("--mode", choices=MODES, default="dedupe", help="the service's mode")
    p.add_argument("--ready", required=True, help="file written once the worker starts")
    p.add_argument("--kill-log", required=True)
    p.add_argument("--journal", default=None, help="file for reconcile verdicts")
    p.add_argument("--inflight", default=None, help="counter file of actions in flight")
    p.add_argument("--plan", default="", help="point:n[,point:n]: SIGKILL self at n-th hit")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jitter", type=float, default=0.002)
    p.add_argument("--call-delay", type=float, default=0.005, help="max pause around a call")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--lease-seconds", type=float, default=30.0)
    p.add_argument("--stall-seconds", type=float, default=10.0)
    p.add_argument("--watch-interval", type=float, default=0.02)
    p.add_argument(
        "--foreign", action="store_true", help="a worker id of another host (leases must expire)"
    )
    p.add_argument("--until-file", default=None, help="run on (idle) until this file exists")
    return p


def child_main(argv: Sequence[str]) -> int:
    """Run a worker in this process (a fresh one, or a child forked by the zygote)."""
    return asyncio.run(run(parser().parse_args(list(argv))))


def main() -> None:
    sys.exit(child_main(sys.argv[1:]))


if __name__ == "__main__":
    main()
