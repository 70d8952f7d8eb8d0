"""The workflow the crash test runs, a counting fake external service, and fault injection.

Shared by the test process (which creates the workflows and checks the outcome) and the worker
subprocess (which runs them and gets killed).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from statewright import Applied, MachineBuilder, Next, NotApplied, Run, WorkflowType
from statewright.engine.hooks import TransitionEvent
from statewright.engine.workflow_type import Handler, Reconciled

TYPE = "crash_order"
# (state the handler runs in, step it runs, event it returns); each event leads to the next
# state, the last one to the terminal "done".
STAGES: tuple[tuple[str, str, str], ...] = (
    ("validating", "validate", "validated"),
    ("reserving", "reserve", "reserved"),
    ("charging", "charge", "charged"),
    ("shipping", "ship", "shipped"),
    ("notifying", "notify", "notified"),
)
STEPS = tuple(step for _, step, _ in STAGES)
PATH = (*(state for state, _, _ in STAGES), "done")
"""The states every workflow must pass through, in order."""
SAFE_TO_REPEAT = frozenset({"notify"})
"""Steps without a reconcile hook: re-run blindly, the service's idempotency absorbs it."""
TYPE_LEVEL_RECONCILE = frozenset({"reserve", "ship"})
"""Steps reconciled through ``WorkflowType.reconcilers`` (the rest pass ``reconcile=``)."""

POINTS = ("before_step", "before_effect", "during_step", "after_step", "after_transition")
"""Where the worker can kill itself:

before_step: in the handler, before ``run.step`` (nothing recorded for the step yet).
before_effect: in the action, after the ledger committed *executing*, before the service call.
during_step: in the action, after the service applied the effect, before the action returns.
after_step: in the handler after ``run.step`` returned (ledger *done*), before the handler
    returns its event: between the step and its transition.
after_transition: in a transition observer, right after a transition committed.

A plan may also name ``point/step`` (e.g. ``during_step/notify``) to count only that step's hits.
"""


def machine() -> Any:
    b = MachineBuilder(TYPE)
    for i, (state, _, _) in enumerate(STAGES):
        b.state(state, initial=i == 0)
    b.state("done", terminal=True).state("failed", terminal=True)
    for _, _, event in STAGES:
        b.event(event)
    b.event("fatal_error")
    for i, (state, _, event) in enumerate(STAGES):
        b.transition(event, state, PATH[i + 1])
    # A fatal error (e.g. a step whose outcome is unknown) is visible as a wrong path.
    b.transition("fatal_error", [s for s, _, _ in STAGES], "failed")
    return b.build()


def append_line(path: str | Path, line: str) -> None:
    """Append one line with a single write(2): once it returns, a SIGKILL cannot lose it."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def amount_of(key: str) -> int:
    return sum(key.encode()) % 1000


class Service:
    """A fake external system with its own SQLite file that honours idempotency keys.

    ``apply`` counts every call and records the effect only for a new key, returning the stored
    effect either way; ``lookup`` answers the reconcile question. Each call is one short
    transaction (WAL, synchronous FULL), so a SIGKILL leaves either all of it or none of it.
    """

    def __init__(self, path: str | Path, journal: str | Path | None = None) -> None:
        self.journal = journal
        """A file where every reconcile lookup appends ``key verdict`` (for the test's report)."""
        self.conn = sqlite3.connect(str(path), isolation_level=None, timeout=30)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS effects ("
            " id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL, payload TEXT NOT NULL)"
        )
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, n INTEGER NOT NULL)"
        )

    def close(self) -> None:
        self.conn.close()

    @staticmethod
    def _effect(row: tuple[int, str, str]) -> dict[str, Any]:
        return {"effect_id": row[0], "key": row[1], **json.loads(row[2])}

    def apply(self, key: str, payload: Mapping[str, Any]) -> dict[str, Any]:
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        try:
            c.execute(
                "INSERT INTO calls (key, n) VALUES (?, 1)"
                " ON CONFLICT (key) DO UPDATE SET n = n + 1",
                (key,),
            )
            row = c.execute(
                "SELECT id, key, payload FROM effects WHERE key = ? ORDER BY id LIMIT 1", (key,)
            ).fetchone()
            if row is None:
                text = json.dumps(dict(payload), sort_keys=True)
                cur = c.execute("INSERT INTO effects (key, payload) VALUES (?, ?)", (key, text))
                row = (cur.lastrowid, key, text)
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise
        return self._effect(row)

    def lookup(self, key: str) -> Reconciled:
        row = self.conn.execute(
            "SELECT id, key, payload FROM effects WHERE key = ? ORDER BY id LIMIT 1", (key,)
        ).fetchone()
        verdict: Reconciled = NotApplied() if row is None else Applied(self._effect(row))
        if self.journal is not None:
            append_line(self.journal, f"{key} {type(verdict).__name__}")
        return verdict

    def effects(self) -> list[dict[str, Any]]:
        rows = self.conn.execute("SELECT id, key, payload FROM effects ORDER BY id").fetchall()
        return [self._effect(r) for r in rows]

    def calls(self) -> dict[str, int]:
        return dict(self.conn.execute("SELECT key, n FROM calls").fetchall())


class Faults:
    """Kills this process with SIGKILL when a point is reached for the planned n-th time.

    ``plan`` maps a point of :data:`POINTS` to the occurrence (1-based) that kills; the marker
    line goes to ``kill_log`` first so the test can tell the kill happened there.
    """

    def __init__(
        self,
        plan: Mapping[str, int] | None = None,
        kill_log: str | Path | None = None,
        rng: random.Random | None = None,
        max_jitter: float = 0.0,
    ) -> None:
        unknown = {p.partition("/")[0] for p in plan or {}} - set(POINTS)
        if unknown:
            raise ValueError(f"unknown kill points {sorted(unknown)}")
        self.plan = dict(plan or {})
        self.kill_log = kill_log
        self.rng = rng or random.Random()
        self.max_jitter = max_jitter
        self.seen: dict[str, int] = dict.fromkeys(POINTS, 0)

    def hit(self, point: str, workflow_id: str, detail: str) -> None:
        for name in (point, f"{point}/{detail}"):
            self.seen[name] = self.seen.get(name, 0) + 1
            if self.plan.get(name) == self.seen[name]:
                self._die(name, workflow_id, detail)

    def _die(self, name: str, workflow_id: str, detail: str) -> None:
        if self.kill_log is not None:
            line = f"{name} {self.seen[name]} {workflow_id} {detail} pid={os.getpid()}"
            append_line(self.kill_log, line)
        os.kill(os.getpid(), signal.SIGKILL)
        os._exit(99)  # unreachable: SIGKILL cannot be caught

    async def jitter(self) -> None:
        """A short random pause, so that concurrent workflows interleave differently."""
        await asyncio.sleep(self.rng.uniform(0, self.max_jitter) if self.max_jitter else 0)

    def on_transition(self, ev: TransitionEvent) -> None:
        self.hit("after_transition", ev.after.id, ev.after.state)


def _handler(step: str, event: str, service: Service, faults: Faults) -> Handler:
    async def handler(run: Run) -> Next:
        faults.hit("before_step", run.id, step)
        await faults.jitter()

        async def action(key: str) -> dict[str, Any]:
            faults.hit("before_effect", run.id, step)
            await faults.jitter()
            effect = service.apply(key, {"step": step, "amount": amount_of(key)})
            faults.hit("during_step", run.id, step)
            await faults.jitter()
            return effect

        if step in SAFE_TO_REPEAT:
            result = await run.step(step, action, safe_to_repeat=True)
        elif step in TYPE_LEVEL_RECONCILE:
            result = await run.step(step, action)
        else:
            result = await run.step(step, action, reconcile=service.lookup)
        faults.hit("after_step", run.id, step)
        await faults.jitter()
        return Next(event, {"effect_id": result["effect_id"]}, context={step: result})

    return handler


def make_type(service: Service, faults: Faults | None = None) -> WorkflowType:
    faults = faults or Faults()
    return WorkflowType(
        machine(),
        handlers={state: _handler(step, event, service, faults) for state, step, event in STAGES},
        reconcilers={step: service.lookup for step in TYPE_LEVEL_RECONCILE},
    )
