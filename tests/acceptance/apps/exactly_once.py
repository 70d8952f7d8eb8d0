"""Workflow types for the exactly-once acceptance tests (``--app`` this file).

Every type charges through :class:`Service`, a fake payment service in its own SQLite file
(``EO_SERVICE``) that does **not** deduplicate by default: every call charges. Its mode
(``EO_SERVICE_MODE``): ``count`` (no dedupe), ``fence`` (no dedupe, but refuses a call whose
fencing token is lower than one it has seen for the key), ``dedupe`` (honours the key).

- ``sync_pay``: a *synchronous* handler that blocks ``EO_BLOCK`` seconds, then charges.
- ``slow_action_pay``: an async handler whose *synchronous* step action blocks, then charges.
- ``frozen_pay``: the step action writes a marker (``EO_MARKERS``/in_step-<pid>), waits
  ``EO_WINDOW`` seconds (the test freezes the process with SIGSTOP meanwhile), then charges
  with the claim's fencing token.
- ``inbox_pay``: waits for an input, writes a marker, and (``EO_KILL_AFTER_TAKE=1``, once)
  SIGKILLs itself before the transition that would consume it.
- ``timeout_pay`` / ``timeout_unhooked_pay``: the first call charges, then raises
  ``TimeoutError`` (the answer was lost); the first type has a reconcile hook, the second none.

Every step but ``timeout_unhooked_pay``'s has a reconcile hook asking the service by key.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from statewright import (
    Applied,
    FatalError,
    MachineBuilder,
    Next,
    NotApplied,
    RetryPolicy,
    Run,
    WorkflowType,
)
from statewright.engine.steps import StepKey
from statewright.engine.syncrun import SyncRun
from statewright.engine.workflow_type import Reconciled

BLOCK = float(os.environ.get("EO_BLOCK", "5"))
WINDOW = float(os.environ.get("EO_WINDOW", "1.5"))
MARKERS = Path(os.environ.get("EO_MARKERS", "."))


class StaleFence(FatalError):
    """The service has seen a newer claim of this workflow: the call is refused."""


class Service:
    """The fake payment service (see the module docstring). One short transaction per call."""

    def __init__(self, path: str | Path, mode: str = "count") -> None:
        self.mode = mode
        self.conn = sqlite3.connect(
            str(path), isolation_level=None, timeout=30, check_same_thread=False
        )
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS charges (id INTEGER PRIMARY KEY AUTOINCREMENT,"
            " key TEXT NOT NULL, fence INTEGER, pid INTEGER NOT NULL)"
        )
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS fences (key TEXT PRIMARY KEY, fence INTEGER NOT NULL)"
        )

    def charge(self, key: str) -> dict[str, Any]:
        fence = key.fencing_token if isinstance(key, StepKey) else None
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        try:
            if self.mode == "dedupe":
                found = c.execute(
                    "SELECT id, fence FROM charges WHERE key = ? ORDER BY id LIMIT 1", (key,)
                ).fetchone()
                if found is not None:
                    c.execute("COMMIT")
                    return {"charge_id": found[0], "key": str(key), "fence": found[1]}
            if self.mode == "fence" and fence is not None:
                seen = c.execute("SELECT fence FROM fences WHERE key = ?", (key,)).fetchone()
                if seen is not None and seen[0] > fence:
                    c.execute("COMMIT")
                    raise StaleFence(f"{key}: fencing token {fence} < {seen[0]}")
                c.execute(
                    "INSERT INTO fences VALUES (?, ?) ON CONFLICT (key) DO UPDATE"
                    " SET fence = max(fence, excluded.fence)",
                    (str(key), fence),
                )
            cur = c.execute(
                "INSERT INTO charges (key, fence, pid) VALUES (?, ?, ?)",
                (str(key), fence, os.getpid()),
            )
            c.execute("COMMIT")
        except BaseException:
            if c.in_transaction:
                c.execute("ROLLBACK")
            raise
        return {"charge_id": cur.lastrowid, "key": str(key), "fence": fence}

    def lookup(self, key: str) -> Reconciled:
        found = self.conn.execute(
            "SELECT id, fence FROM charges WHERE key = ? ORDER BY id LIMIT 1", (str(key),)
        ).fetchone()
        if found is None:
            return NotApplied()
        return Applied({"charge_id": found[0], "key": str(key), "fence": found[1]})

    def charges(self) -> list[tuple[int, str, int | None, int]]:
        return self.conn.execute("SELECT id, key, fence, pid FROM charges ORDER BY id").fetchall()

    def close(self) -> None:
        self.conn.close()


def _service() -> Service:
    return Service(os.environ["EO_SERVICE"], os.environ.get("EO_SERVICE_MODE", "count"))


def mark(name: str, **fields: Any) -> None:
    """Write a marker file the test waits for (atomically: write, then rename)."""
    tmp = MARKERS / f".{name}-{os.getpid()}-{threading.get_ident()}.tmp"  # threads mark at once
    tmp.write_text(json.dumps({"pid": os.getpid(), **fields}))
    tmp.rename(MARKERS / f"{name}-{os.getpid()}")


def machine(name: str) -> Any:
    return (
        MachineBuilder(name)
        .state("charging", initial=True)
        .state("done", terminal=True)
        .state("failed", terminal=True)
        .event("charged")
        .event("fatal_error")
        .transition("charged", "charging", "done")
        .transition("fatal_error", "charging", "failed")
        .build()
    )


def sync_charging(run: SyncRun) -> Next:
    service = _service()
    try:
        mark("handler", workflow_id=run.id)
        time.sleep(BLOCK)  # blocking, in a synchronous handler: off the event loop
        result = run.step("charge", service.charge, reconcile=service.lookup)
    finally:
        service.close()
    return Next("charged", context={"charge": result})


async def slow_action_charging(run: Run) -> Next:
    service = _service()

    def blocking_charge(key: StepKey) -> dict[str, Any]:
        mark("action", workflow_id=run.id)
        time.sleep(BLOCK)  # a synchronous action: runs in the worker's thread pool
        return service.charge(key)

    try:
        result = await run.step("charge", blocking_charge, reconcile=service.lookup)
    finally:
        service.close()
    return Next("charged", context={"charge": result})


async def frozen_charging(run: Run) -> Next:
    import asyncio

    service = _service()

    async def charge(key: StepKey) -> dict[str, Any]:
        mark("in_step", workflow_id=run.id, fence=key.fencing_token)
        await asyncio.sleep(WINDOW)  # the test freezes this process now
        return service.charge(key)

    try:
        result = await run.step("charge", charge, reconcile=service.lookup)
    finally:
        service.close()
    return Next("charged", context={"charge": result})


async def inbox_charging(run: Run) -> Next:
    item = await run.wait_input("answer", timeout=60, poll_interval=0.05)
    if item is None:
        raise FatalError("no answer came")
    mark("took", workflow_id=run.id, input_id=item.id)
    if os.environ.get("EO_KILL_AFTER_TAKE") == "1" and not (MARKERS / "killed-once").exists():
        (MARKERS / "killed-once").write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)  # between taking the input and the transition
    return Next("charged", context={"answer": item.payload, "input_id": item.id})


async def timeout_charging(run: Run, hooked: bool = True) -> Next:
    service = _service()

    def charge_then_time_out(key: StepKey) -> dict[str, Any]:
        result = service.charge(key)
        if not (MARKERS / f"timed-out-{run.id}").exists():
            (MARKERS / f"timed-out-{run.id}").write_text(str(os.getpid()))
            raise TimeoutError("the gateway's answer timed out (the charge went through)")
        return result

    try:
        reconcile = service.lookup if hooked else None
        result = await run.step("charge", charge_then_time_out, reconcile=reconcile)
    finally:
        service.close()
    return Next("charged", context={"charge": result})


async def timeout_unhooked_charging(run: Run) -> Next:
    return await timeout_charging(run, hooked=False)


TYPES = [
    WorkflowType(machine("sync_pay"), {"charging": sync_charging}),
    WorkflowType(machine("slow_action_pay"), {"charging": slow_action_charging}),
    WorkflowType(machine("frozen_pay"), {"charging": frozen_charging}),
    WorkflowType(machine("inbox_pay"), {"charging": inbox_charging}),
    WorkflowType(
        machine("timeout_pay"),
        {"charging": timeout_charging},
        retry=RetryPolicy(base_delay=0.2, jitter=0.0),
    ),
    WorkflowType(
        machine("timeout_unhooked_pay"),
        {"charging": timeout_unhooked_charging},
        retry=RetryPolicy(base_delay=0.2, jitter=0.0),
    ),
]
