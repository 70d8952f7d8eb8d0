"""The demo's crash: a real ``statewright worker`` process SIGKILLed in a payment step.

The worker runs the order example in a child process, with the fake payment gateway slowed
down so that its answer comes back long after the charge was made. As soon as a charge is
recorded by the gateway and the step that made it is still *executing* in the step ledger,
the child is killed with SIGKILL: the worst moment, money taken and nobody told. Recovery
then runs in this process.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statewright.engine import Engine, Recovered, Worker, recover
from statewright.errors import DemoWorkerFailed

CAPTURE_LATENCY = 60.0
"""Seconds the gateway's capture answer takes in the child: it is always killed first."""
WAIT_FOR_PAYMENT = 30.0
"""Give up waiting for a payment in flight after this long (a very slow machine)."""


@dataclass
class Crash:
    """What the kill interrupted."""

    pid: int
    log: Path
    mid_step: bool
    """A capture step was executing with its charge already made when the kill landed."""
    executing: list[str] = field(default_factory=list)
    """Step keys found *executing* in the ledger right after the kill."""
    charged: list[str] = field(default_factory=list)
    """Gateway keys charged before the kill."""
    states: dict[str, str] = field(default_factory=dict)
    leases: dict[str, str] = field(default_factory=dict)


def worker_command(db: str, orders_file: Path) -> list[str]:
    return [
        sys.executable, "-m", "statewright.cli", "worker",
        "--db", db, "--app", str(orders_file),
        "--concurrency", "2", "--poll-interval", "0.05", "--log-level", "info",
    ]  # fmt: skip


async def run_and_kill(
    engine: Engine,
    gateway: Any,
    ids: list[str],
    *,
    db: str,
    orders_file: Path,
    services: Path,
    log: Path,
) -> Crash:
    """Start the worker process, SIGKILL it mid-payment, and report what it left behind."""
    env = {
        **os.environ,
        "STATEWRIGHT_EXAMPLE_PAYMENTS_DB": str(services),
        "STATEWRIGHT_EXAMPLE_PAYMENTS_LATENCY": str(CAPTURE_LATENCY),
    }
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            worker_command(db, orders_file), stdout=sink, stderr=subprocess.STDOUT, env=env
        )
    try:
        mid_step = await _payment_in_flight(engine, gateway, ids, proc, log)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()  # reaped: recovery can see at once that its pid is gone
    crash = Crash(proc.pid, log, mid_step, charged=[c["key"] for c in gateway.charges()])
    for wid in ids:
        row = await engine.get(wid)
        crash.states[wid] = row.state
        if row.lease_owner:
            crash.leases[wid] = row.lease_owner
        crash.executing += [s.key for s in await engine.steps(wid) if s.status == "executing"]
    return crash


async def _payment_in_flight(
    engine: Engine, gateway: Any, ids: list[str], proc: subprocess.Popen[bytes], log: Path
) -> bool:
    deadline = time.monotonic() + WAIT_FOR_PAYMENT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:]
            raise DemoWorkerFailed(
                f"the worker process exited with code {proc.returncode} before the kill; "
                f"its log ({log}) ends with:\n{tail}"
            )
        charged = {c["key"] for c in gateway.charges()}
        for wid in ids:
            for s in await engine.steps(wid):
                if s.status == "executing" and s.key in charged:
                    return True
        await asyncio.sleep(0.05)
    return False


async def recover_and_finish(engine: Engine) -> tuple[list[Recovered], int]:
    """What a restarted worker does: recover the dead worker's work, then run it all."""
    recovered = await recover(engine)
    processed = await Worker(engine, poll_interval=0.05).run_until_idle()
    return recovered, processed
