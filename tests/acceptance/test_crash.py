"""Crash anywhere, lose nothing: real worker processes killed with SIGKILL, again and again.

A subprocess runs 40 workflows whose five steps call a counting fake external service (its
own SQLite file, honouring idempotency keys). Each round it is killed with SIGKILL at a
different point: before a step, after the ledger says *executing* but before the service call,
after the service applied the effect but before the step returned, between the step and its
transition, right after a transition; and, in some rounds, at a random moment from outside.
After a final clean run (recovery first, as always) every workflow must have reached ``done``
along the machine's path, with no transition lost or doubled, every step's effect applied
exactly once by the service, every ledger entry done with the service's effect as result, and
replay equal to the stored row.

Reproduce a failing run with ``STATEWRIGHT_CRASH_SEED=<seed>`` (the seed is in the message).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest

from statewright import Engine, SQLiteStore
from tests.acceptance.crash.app import (
    PATH,
    POINTS,
    SAFE_TO_REPEAT,
    STAGES,
    STEPS,
    Service,
    amount_of,
    make_type,
)

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = [f"order-{i:03d}" for i in range(40)]
MAX_FAULT_ROUNDS = 32
ROUND_TIMEOUT = 30.0
KILLED = -signal.SIGKILL
"""``Popen.returncode`` of a process that died of SIGKILL."""
TEST_BUDGET = 120.0
"""Hard ceiling; a normal run takes a fraction of it."""


@dataclass
class Round:
    number: int
    plan: str  # "point:n" for a self-kill, "" for none
    external_delay: float | None  # seconds after start-up at which the test kills it
    concurrency: int
    returncode: int | None = None
    logged: int = -1  # transitions in the log after the round


TARGETED = ("during_step/notify", "before_effect/notify", "after_transition/done")
"""Extra kill points for one step or state: re-running the safe_to_repeat step after the
service applied it, and dying right after the final transition."""


def kill_plan(rng: random.Random) -> list[Round]:
    """Cycle through every kill point with varying n; every fourth round a kill from outside.

    Some rounds add a targeted point as well (whichever is reached first kills); the general
    point keeps each round short, so kills keep landing at many different places.
    """
    rounds: list[Round] = []
    inside = 0
    for r in range(MAX_FAULT_ROUNDS):
        concurrency = rng.choice([1, 2, 4, 8])
        if r % 4 == 3:
            rounds.append(Round(r, "", rng.uniform(0.0, 0.25), concurrency))
            continue
        point = POINTS[inside % len(POINTS)]
        # Small n first so every point is surely reached; larger n later.
        n = rng.randint(1, 3) if inside < 2 * len(POINTS) else rng.randint(1, 20)
        plan = f"{point}:{n}"
        if inside >= len(POINTS) and rng.random() < 0.5:
            plan += f",{rng.choice(TARGETED)}:{rng.randint(1, 3)}"
        rounds.append(Round(r, plan, None, concurrency))
        inside += 1
    return rounds


class Harness:
    def __init__(self, tmp: Path, seed: int) -> None:
        self.tmp = tmp
        self.seed = seed
        self.db = tmp / "statewright.db"
        self.service = tmp / "service.db"
        self.kill_log = tmp / "kills.log"
        self.journal = tmp / "reconcile.log"
        self.deadline = time.monotonic() + TEST_BUDGET

    def fail(self, message: str, log: Path | None = None) -> NoReturn:
        tail = ""
        if log is not None and log.exists():
            tail = "\n--- worker stderr (tail) ---\n" + log.read_text()[-6000:]
        pytest.fail(f"[seed {self.seed}] {message}{tail}", pytrace=False)

    def run_worker(self, rnd: Round) -> int:
        """Start a worker subprocess, let it run (and die); returns its exit code."""
        ready = self.tmp / f"ready-{rnd.number}"
        out = self.tmp / f"worker-{rnd.number}.out"
        err = self.tmp / f"worker-{rnd.number}.err"
        cmd = [
            sys.executable,
            "-m",
            "tests.acceptance.crash.worker",
            "--db",
            str(self.db),
            "--service",
            str(self.service),
            "--ready",
            str(ready),
            "--kill-log",
            str(self.kill_log),
            "--journal",
            str(self.journal),
            "--plan",
            rnd.plan,
            "--seed",
            str(self.seed * 1000 + rnd.number),
            "--concurrency",
            str(rnd.concurrency),
        ]
        path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        env = {**os.environ, "PYTHONPATH": path, "PYTHONDONTWRITEBYTECODE": "1"}
        with out.open("wb") as fout, err.open("wb") as ferr:
            proc = subprocess.Popen(cmd, cwd=ROOT, stdout=fout, stderr=ferr, env=env)
            try:
                if rnd.external_delay is not None:
                    self._kill_later(proc, ready, rnd.external_delay, err)
                timeout = min(ROUND_TIMEOUT, max(1.0, self.deadline - time.monotonic()))
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                self.fail(f"round {rnd.number} ({rnd.plan or 'external'}) hung", err)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        rnd.returncode = rc
        if rc not in (0, KILLED):
            self.fail(f"worker of round {rnd.number} ({rnd.plan}) exited with {rc}", err)
        return rc

    def _kill_later(
        self, proc: subprocess.Popen[bytes], ready: Path, delay: float, err: Path
    ) -> None:
        until = time.monotonic() + ROUND_TIMEOUT
        while not ready.exists() and proc.poll() is None:
            if time.monotonic() > until:
                self.fail("worker never became ready", err)
            time.sleep(0.005)
        time.sleep(delay)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)

    def progress(self) -> tuple[int, int]:
        """(workflows not terminal, transitions logged)."""
        with contextlib.closing(sqlite3.connect(self.db, timeout=30)) as conn:
            left = conn.execute("SELECT count(*) FROM workflows WHERE terminal = 0").fetchone()
            logged = conn.execute("SELECT count(*) FROM transitions").fetchone()
            return int(left[0]), int(logged[0])

    def kills(self) -> list[tuple[str, str, str]]:
        """``(point, workflow_id, step or state)`` per self-kill, from the markers."""
        if not self.kill_log.exists():
            return []
        out = []
        for line in self.kill_log.read_text().splitlines():
            name, _, wid, detail, _ = line.split()
            out.append((name.partition("/")[0], wid, detail))
        return out

    def verdicts(self) -> Counter[tuple[str, str]]:
        """``(key, "Applied" | "NotApplied")`` -> how often reconcile answered so."""
        if not self.journal.exists():
            return Counter()
        lines = self.journal.read_text().splitlines()
        return Counter((k, v) for k, v in (ln.split() for ln in lines))


@pytest.mark.acceptance
async def test_sigkill_anywhere_loses_nothing_and_repeats_nothing(tmp_path: Path) -> None:
    seed = int(os.environ.get("STATEWRIGHT_CRASH_SEED") or random.randrange(1 << 30))
    h = Harness(tmp_path, seed)
    started = time.monotonic()

    # -- set up: the store with 40 workflows, and the service's empty database ---------------
    service = Service(h.service)
    try:
        async with Engine(SQLiteStore(h.db, synchronous="FULL"), [make_type(service)]) as engine:
            for wid in WORKFLOWS:
                await engine.start("crash_order", {"customer": wid}, workflow_id=wid)
    finally:
        service.close()

    # -- kill, restart, kill again ----------------------------------------------------------
    rounds = kill_plan(random.Random(seed))
    played: list[Round] = []
    for rnd in rounds:
        if h.progress()[0] == 0:
            break
        h.run_worker(rnd)
        rnd.logged = h.progress()[1]
        played.append(rnd)
    final = Round(len(rounds), "", None, 4)
    if h.run_worker(final) != 0:
        h.fail("the final run without faults was killed")
    elapsed = time.monotonic() - started

    kill_list = h.kills()
    kills = Counter(point for point, _, _ in kill_list)
    external = sum(1 for r in played if r.external_delay is not None and r.returncode == KILLED)
    self_kills = sum(1 for r in played if r.plan and r.returncode == KILLED)
    assert len(kill_list) == self_kills, f"[seed {seed}] kill log vs exit codes: {kill_list}"
    missing = [p for p in POINTS if kills[p] == 0]
    assert not missing, f"[seed {seed}] never killed at {missing}: the test would be vacuous"
    assert external >= 1, f"[seed {seed}] no kill from outside landed while the worker ran"

    # -- everything reached the end, exactly once --------------------------------------------
    service = Service(h.service)
    try:
        effects, calls = service.effects(), service.calls()
        engine = Engine(SQLiteStore(h.db, synchronous="FULL"), [make_type(service)])
        async with engine:
            rows = {wid: await engine.get(wid) for wid in WORKFLOWS}
            not_done = {w: (r.state, r.last_error) for w, r in rows.items() if r.state != "done"}
            assert not not_done, f"[seed {seed}] workflows not done: {not_done}"
            for wid in WORKFLOWS:
                history = await engine.history(wid)
                assert [t.version for t in history] == list(range(1, len(PATH) + 1)), (
                    f"[seed {seed}] {wid}: versions {[t.version for t in history]}"
                )
                assert [t.to_state for t in history] == list(PATH), f"[seed {seed}] {wid}"
                assert [t.from_state for t in history] == [None, *PATH[:-1]], wid
                assert [t.event for t in history] == ["$start", *(e for _, _, e in STAGES)]
                replayed = await engine.check(wid)  # raises ReplayMismatch on a difference
                assert (replayed.state, replayed.version) == ("done", len(PATH))
                row = rows[wid]
                assert row.lease_owner is None and row.next_due_at is None, wid
                ledger = {s.step: s for s in await engine.store.steps(wid)}
                assert set(ledger) == set(STEPS), f"[seed {seed}] {wid} ledger: {ledger}"
                for step, rec in ledger.items():
                    assert rec.status == "done", f"[seed {seed}] {rec}"
                    assert rec.result == row.context[step], f"[seed {seed}] {rec}"
            all_steps = [s for wid in WORKFLOWS for s in await engine.store.steps(wid)]

        expected_keys = {f"{wid}:{step}" for wid in WORKFLOWS for step in STEPS}
        per_key = Counter(e["key"] for e in effects)
        doubled = {k: n for k, n in per_key.items() if n != 1}
        assert not doubled, f"[seed {seed}] effects applied more than once: {doubled}"
        assert set(per_key) == expected_keys, (
            f"[seed {seed}] missing {sorted(expected_keys - set(per_key))[:10]}, "
            f"unexpected {sorted(set(per_key) - expected_keys)[:10]}"
        )
        by_key = {e["key"]: e for e in effects}
        for rec in all_steps:
            # The ledger holds exactly what the service applied (directly or via reconcile).
            assert rec.result == by_key[rec.key], f"[seed {seed}] {rec} vs {by_key[rec.key]}"
            assert rec.result["amount"] == amount_of(rec.key)
        # A reconciled step is never re-run blindly: its action reached the service once.
        # Only the safe_to_repeat step may call again (the idempotency key absorbs it).
        repeated = {k: n for k, n in calls.items() if n > 1}
        blind = {k: n for k, n in repeated.items() if k.split(":")[1] not in SAFE_TO_REPEAT}
        assert not blind, f"[seed {seed}] reconciled steps called again: {blind}"
        assert set(calls) == expected_keys
        # Each kill inside a step had the consequence it must have on the next run.
        verdicts = h.verdicts()
        for point, wid, step in kill_list:
            key = f"{wid}:{step}"
            if point == "during_step" and step in SAFE_TO_REPEAT:
                assert calls[key] >= 2, f"[seed {seed}] {key} applied, killed, never re-run"
            elif point == "during_step":
                assert verdicts[key, "Applied"] >= 1, f"[seed {seed}] {key} not reconciled"
            elif point == "before_effect" and step not in SAFE_TO_REPEAT:
                assert verdicts[key, "NotApplied"] >= 1, f"[seed {seed}] {key} not reconciled"
    finally:
        service.close()

    reruns = sum(1 for s in all_steps if s.attempts > 1)
    report = (
        f"crash test seed={seed}: {len(played)} fault rounds + final run in {elapsed:.1f}s; "
        f"self-kills by point {dict(kills)}, external kills {external}; "
        f"service calls absorbed by idempotency keys {sum(repeated.values()) - len(repeated)} "
        f"on {len(repeated)} keys; ledger entries re-run {reruns}; reconcile verdicts "
        f"{dict(sum((Counter({v: n}) for (_, v), n in verdicts.items()), Counter()))}; "
        f"transitions logged after each round {[r.logged for r in played]}"
    )
    print(report)
