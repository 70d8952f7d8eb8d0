"""A worker process for the schedules and limits acceptance tests.

``python -m tests.acceptance.apps.scheduled --db DSN --log FILE [--clock FILE]``, or
:func:`run` with those arguments in a process forked from a fork server (tests/forkserver.py)
that imported this module: what tests/acceptance/test_schedules_limits.py does.

Runs a :class:`~statewright.Worker` over two types:

- ``ticked``: started by a cron schedule; its handler appends ``run <id> <pid>`` to the log.
- ``rated`` (``max_per_second=5``, ``burst=1``): its handler appends ``rated <id> <pid>
  <time>``.
- ``limited`` (``max_concurrent=2``): its handler appends ``start <id> <pid> <time>``, sleeps
  ``--hold`` seconds, then appends ``end <id> <pid> <time>`` (wall-clock times, comparable
  across processes on this machine).

Every workflow this process's worker starts from a schedule is logged as ``fired <id> <pid>``.
With ``--die-after-fire P`` the process SIGKILLs itself with probability P right after a
start it made from a schedule, before the schedule moves on (logged ``killed - <pid>``).
With ``--clock FILE`` the engine's clock is the number in that file (a clock the test moves
for every process at once: :class:`FileClock`); otherwise the wall clock.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
import signal
import time
from pathlib import Path

from statewright import Engine, MachineBuilder, Next, Run, Worker, WorkflowType, store_from_url
from statewright.clock import Clock, SystemClock


class FileClock:
    """Now is the float in a file the test rewrites (atomically, with ``os.replace``)."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def now(self) -> float:
        return float(self.path.read_text())


def _append(path: str, line: str) -> None:
    # One write of a short line with O_APPEND: lines of several processes never interleave.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def _machine(name: str):  # type: ignore[no-untyped-def]
    return (
        MachineBuilder(name)
        .state("running", initial=True)
        .state("done", terminal=True)
        .event("finish")
        .transition("finish", "running", "done")
        .build()
    )


def make_types(log: str, hold: float) -> list[WorkflowType]:
    async def ticked(run: Run) -> Next:
        _append(log, f"run {run.id} {os.getpid()}")
        return Next("finish")

    async def limited(run: Run) -> Next:
        _append(log, f"start {run.id} {os.getpid()} {time.time():.6f}")
        await asyncio.sleep(hold)
        _append(log, f"end {run.id} {os.getpid()} {time.time():.6f}")
        return Next("finish")

    async def rated(run: Run) -> Next:
        _append(log, f"rated {run.id} {os.getpid()} {time.time():.6f}")
        return Next("finish")

    return [
        WorkflowType(_machine("ticked"), handlers={"running": ticked}),
        WorkflowType(_machine("limited"), handlers={"running": limited}, max_concurrent=2),
        WorkflowType(_machine("rated"), handlers={"running": rated}, max_per_second=5.0, burst=1),
    ]


class _Fired(logging.Handler):
    """Logs each workflow this process started from a schedule; with ``die`` > 0, SIGKILLs
    the process with that probability right then: after the start committed, before the
    schedule's next tick moved (the one instant where a second start of the tick is tried)."""

    def __init__(self, log: str, die: float) -> None:
        super().__init__()
        self.log = log
        self.die = die

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "action", None) == "schedule_fired":
            _append(self.log, f"fired {getattr(record, 'workflow_id', '?')} {os.getpid()}")
            if random.random() < self.die:
                _append(self.log, f"killed - {os.getpid()}")
                os.kill(os.getpid(), signal.SIGKILL)


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--clock")
    parser.add_argument("--hold", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--lease-seconds", type=float, default=30.0)
    parser.add_argument("--die-after-fire", type=float, default=0.0)
    args = parser.parse_args(argv)
    fired = logging.getLogger("statewright.engine.schedules")
    fired.setLevel(logging.INFO)
    fired.addHandler(_Fired(args.log, args.die_after_fire))
    clock: Clock = FileClock(args.clock) if args.clock else SystemClock()
    engine = Engine(store_from_url(args.db), make_types(args.log, args.hold), clock=clock)
    async with engine:
        worker = Worker(
            engine,
            concurrency=args.concurrency,
            poll_interval=0.02,
            lease_seconds=args.lease_seconds,
        )
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, worker.stop, 5.0)
        _append(args.log, f"ready - {os.getpid()}")
        await worker.run()


def run(argv: list[str]) -> None:
    """The process's work, on its command line's arguments ``argv``: a fork server's target."""
    asyncio.run(main(argv))


if __name__ == "__main__":
    asyncio.run(main())
