"""Bulk cancel survives a kill (issue 28, item 3): 10,000 workflows on SQLite (2,000 on
PostgreSQL) are counted by a dry run that changes nothing, then cancelled for real by a
``statewright bulk cancel`` process SIGKILLed half-way, then by the same command again with
the same operation id: every workflow is cancelled, each exactly once (one cancel transition
in its log, carrying the operation's idempotency key, actor and reason)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from statewright import Engine, MachineBuilder, WorkflowType
from statewright.store import store_from_url

ROOT = Path(__file__).resolve().parents[2]
APP = """
from statewright import MachineBuilder, WorkflowType

m = (
    MachineBuilder("order")
    .state("charging", initial=True)
    .state("cancelled", terminal=True)
    .event("cancel")
    .transition("cancel", "charging", "cancelled")
    .build()
)
TYPES = [WorkflowType(m)]
"""
SQL = "SELECT workflow_id, idempotency_key, actor, payload FROM transitions WHERE event = 'cancel'"


def order_type() -> WorkflowType:
    m = (
        MachineBuilder("order")
        .state("charging", initial=True)
        .state("cancelled", terminal=True)
        .event("cancel")
        .transition("cancel", "charging", "cancelled")
        .build()
    )
    return WorkflowType(m)


async def _seed(url: str, n: int) -> None:
    async with Engine(store_from_url(url), [order_type()]) as engine:
        for i in range(n):
            await engine.start("order", {}, workflow_id=f"o{i:05d}")


def _cancels(url: str) -> list[tuple[Any, ...]]:
    """Every cancel transition in the log, read straight from the database."""
    if url.startswith("postgres"):
        import psycopg

        with psycopg.connect(url) as conn:
            return [tuple(r) for r in conn.execute(SQL).fetchall()]
    import sqlite3

    with sqlite3.connect(url) as conn:
        return conn.execute(SQL).fetchall()


def _argv(url: str, app: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "statewright.cli", "--db", url, "--app", str(app), *args]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def test_bulk_cancel_killed_half_way_and_rerun_cancels_each_once(
    store_url: str, tmp_path: Path
) -> None:
    n = 2_000 if store_url.startswith("postgres") else 10_000
    app = tmp_path / "orders_app.py"
    app.write_text(APP)
    asyncio.run(_seed(store_url, n))
    cmd = ("bulk", "cancel", "--type", "order", "--reason", "incident 42", "--actor", "ops")

    dry = subprocess.run(
        _argv(store_url, app, "--json", *cmd, "--dry-run"),
        env=_env(),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    counted = json.loads(dry.stdout)
    assert (counted["matched"], counted["applied"], counted["dry_run"]) == (n, 0, True)
    assert len(counted["sample"]) == 10 and _cancels(store_url) == []

    real = (*cmd, "--operation-id", "incident-42", "--batch", "100")
    child = subprocess.Popen(
        _argv(store_url, app, "--json", *real),
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    try:
        while len(_cancels(store_url)) < n // 3:
            assert child.poll() is None, "the bulk cancel ended before it could be killed"
            assert time.monotonic() < deadline, "the bulk cancel made no progress"
            time.sleep(0.02)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    before = len(_cancels(store_url))
    assert n // 3 <= before < n, f"killed after {before} of {n}: not half-way"

    again = subprocess.run(
        _argv(store_url, app, "--json", *real),
        env=_env(),
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    done = json.loads(again.stdout)
    # What the killed run cancelled is finished, so no longer matched: the rest is applied.
    left = n - before
    assert (done["matched"], done["applied"], done["skipped"], done["failed"]) == (
        left,
        left,
        0,
        0,
    )

    cancels = _cancels(store_url)
    by_workflow = [r[0] for r in cancels]
    assert len(by_workflow) == len(set(by_workflow)) == n, "a workflow cancelled twice, or not"
    assert {(r[1], r[2]) for r in cancels} == {("bulk:incident-42:cancel", "ops")}
    payloads = [json.loads(r[3]) if isinstance(r[3], str) else r[3] for r in cancels]
    assert {p["reason"] for p in payloads} == {"incident 42"}
