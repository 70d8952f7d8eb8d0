"""What the SIGKILL tests share: options, worker command lines, kills, the final verification.

The tests fork their workers from a :class:`~tests.acceptance.crash.zygote.Zygote` and kill
them with SIGKILL, at planned points from inside (:class:`~tests.acceptance.crash.app.Faults`)
and at random moments from outside, aimed at a moment when service calls are in flight
(:class:`~tests.acceptance.crash.app.InFlight`). Then :func:`verify` checks that every workflow
ended ``done`` along the machine's path and every step's effect exists exactly once.
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from statewright import Engine
from statewright.types import StepRecord
from tests.acceptance.crash.app import (
    PATH,
    POINTS,
    SAFE_TO_REPEAT,
    STAGES,
    STEPS,
    InFlight,
    Mode,
    Service,
    amount_of,
)
from tests.acceptance.crash.zygote import Zygote
from tests.torture import torture_enabled

SEED_ENV = "STATEWRIGHT_CRASH_SEED"
KILLED = -9
"""Exit code of a process that died of SIGKILL (as ``Popen.returncode``)."""
TARGETED = ("during_step/notify", "before_effect/notify", "after_transition/done")
"""Extra kill points for one step or state: the last step after (or before) the service
applied it, and dying right after the final transition."""


def store_kind(url: str) -> str:
    """``sqlite`` or ``postgres``: which store ``url`` (a ``store_url``) names, for messages."""
    return "postgres" if url.startswith("postgres") else "sqlite"


def crash_seed() -> int:
    """``STATEWRIGHT_CRASH_SEED`` if set, else a fresh random seed (printed by each test)."""
    text = os.environ.get(SEED_ENV, "").strip()
    return int(text) if text else random.randrange(1 << 30)


@dataclass
class Files:
    """The files of one run, under the test's ``tmp_path``."""

    tmp: Path

    @property
    def service(self) -> Path:
        return self.tmp / "service.db"

    @property
    def kill_log(self) -> Path:
        return self.tmp / "kills.log"

    @property
    def journal(self) -> Path:
        return self.tmp / "reconcile.log"

    @property
    def until(self) -> Path:
        return self.tmp / "finish"

    def inflight(self, slot: int) -> Path:
        return self.tmp / f"inflight-{slot}"


@dataclass
class Child:
    """One worker process forked by the zygote, and what became of it."""

    number: int
    slot: int
    pid: int
    plan: str
    ready: Path
    err: Path
    foreign: bool = False
    started: float = field(default_factory=time.monotonic)
    code: int | None = None
    killed_from_outside: bool = False
    """The test sent SIGKILL while it was running."""
    aimed_in_flight: bool = False
    """...at a moment its in-flight counter said a service call was under way."""
    self_killed: bool = False
    """The kill log has its marker line: it killed itself at a planned point."""

    def stderr_tail(self) -> str:
        text = self.err.read_text(errors="replace")[-6000:] if self.err.exists() else ""
        return f"\n--- worker {self.pid} stderr (tail) ---\n{text}" if text else ""


@dataclass
class Kill:
    """A self-kill, from its marker line in the kill log."""

    name: str  # point or point/detail as planned
    point: str
    workflow_id: str
    detail: str  # the step (or, for after_transition, the state reached)
    pid: int


def read_kills(path: Path) -> list[Kill]:
    if not path.exists():
        return []
    kills = []
    for line in path.read_text().splitlines():
        name, _, wid, detail, pid = line.split()
        point = name.partition("/")[0]
        kills.append(Kill(name, point, wid, detail, int(pid.removeprefix("pid="))))
    return kills


def read_verdicts(path: Path) -> Counter[tuple[str, str]]:
    """``(key, "Applied" | "NotApplied")`` -> how often a reconcile hook answered so."""
    if not path.exists():
        return Counter()
    return Counter((k, v) for k, v in (ln.split() for ln in path.read_text().splitlines()))


def worker_argv(
    files: Files,
    db: str,
    *,
    mode: Mode,
    ready: Path,
    plan: str,
    seed: int,
    concurrency: int,
    slot: int,
    lease_seconds: float = 30.0,
    stall_seconds: float = 10.0,
    watch_interval: float = 0.02,
    until: bool = False,
    foreign: bool = False,
) -> list[str]:
    argv = [
        *("--db", db),
        *("--service", str(files.service)),
        *("--mode", mode),
        *("--ready", str(ready)),
        *("--kill-log", str(files.kill_log)),
        *("--journal", str(files.journal)),
        *("--inflight", str(files.inflight(slot))),
        *("--plan", plan),
        *("--seed", str(seed)),
        *("--concurrency", str(concurrency)),
        *("--lease-seconds", str(lease_seconds)),
        *("--stall-seconds", str(stall_seconds)),
        *("--watch-interval", str(watch_interval)),
        *("--jitter", "0.002"),
        *("--call-delay", "0.005"),
    ]
    if until:
        argv += ["--until-file", str(files.until)]
    if foreign:
        argv.append("--foreign")
    return argv


class PlanMaker:
    """Kill plans cycling through every point, with n small at first (so every point is
    surely reached) and larger later; some add a targeted point (whichever comes first)."""

    def __init__(self, rng: random.Random, max_n: int = 12) -> None:
        self.rng = rng
        self.max_n = max_n
        self.made = 0

    def __call__(self) -> str:
        rng, i = self.rng, self.made
        self.made += 1
        point = POINTS[i % len(POINTS)]
        n = rng.randint(1, 3) if i < 2 * len(POINTS) else rng.randint(1, self.max_n)
        plan = f"{point}:{n}"
        if i >= len(POINTS) and rng.random() < 0.4:
            plan += f",{rng.choice(TARGETED)}:{rng.randint(1, 3)}"
        return plan


def kill_from_outside(
    zygote: Zygote,
    child: Child,
    inflight: InFlight,
    rng: random.Random,
    *,
    spread: float = 0.05,
    aim_for: float = 0.5,
) -> None:
    """SIGKILL ``child`` at a random moment once it runs, aimed at a service call in flight:
    after a random pause, wait (up to ``aim_for`` seconds) until its in-flight counter is up."""
    until = time.monotonic() + 30
    while not child.ready.exists():
        if zygote.status([child.pid])[child.pid] is not None:
            return  # died (killed itself) before it was ready
        if time.monotonic() > until:
            raise AssertionError(f"worker {child.pid} never became ready{child.stderr_tail()}")
        time.sleep(0.002)
    time.sleep(rng.uniform(0.0, spread))
    aim_until = time.monotonic() + aim_for
    while inflight.value <= 0 and time.monotonic() < aim_until:
        time.sleep(0.0003)
    aimed = inflight.value > 0
    code, was_running = zygote.kill(child.pid)
    child.code = code
    if was_running:
        child.killed_from_outside = True
        child.aimed_in_flight = aimed


@dataclass
class Tally:
    """The kills of a run so far."""

    self_kills: Counter[str] = field(default_factory=Counter)  # by point
    external: int = 0
    external_in_flight: int = 0
    foreign: int = 0
    clean_exits: int = 0

    @property
    def total(self) -> int:
        return sum(self.self_kills.values()) + self.external


def settle(child: Child, kill_log: Path, tally: Tally, seed: int) -> None:
    """Account for an exited child: a kill from inside or outside, or a clean exit."""
    code = child.code
    if code == 0:
        tally.clean_exits += 1
        return
    if code != KILLED:
        pytest.fail(
            f"[seed {seed}] worker {child.pid} (plan {child.plan!r}) exited with {code}"
            f"{child.stderr_tail()}",
            pytrace=False,
        )
    kill = next((k for k in read_kills(kill_log) if k.pid == child.pid), None)
    if kill is not None:
        child.self_killed = True
        tally.self_kills[kill.point] += 1
    elif child.killed_from_outside:
        tally.external += 1
        tally.external_in_flight += child.aimed_in_flight
    else:
        pytest.fail(f"[seed {seed}] worker {child.pid} died of SIGKILL sent by nobody known")
    if child.foreign:
        tally.foreign += 1


@dataclass
class Verified:
    workflows: int
    effects: int
    calls: int
    doubled: int
    reruns: int
    absorbed: int
    verdicts: Counter[str]


def _short(items: Any, n: int = 10) -> str:
    if isinstance(items, dict):
        items = dict(list(items.items())[:n])
    elif isinstance(items, list | set | tuple):
        items = sorted(items)[:n]
    return repr(items)


async def verify(
    engine: Engine,
    service: Service,
    workflow_ids: Iterable[str],
    *,
    mode: Mode,
    kills: list[Kill],
    verdicts: Counter[tuple[str, str]],
    seed: int,
) -> Verified:
    """Everything reached ``done`` exactly once; raises AssertionError naming the seed."""
    ids = sorted(workflow_ids)
    tag = f"[seed {seed}]"
    effects, calls = service.effects(), service.calls()
    rows = {wid: await engine.get(wid) for wid in ids}
    not_done = {w: (r.state, r.parked, r.last_error) for w, r in rows.items() if r.state != "done"}
    assert not not_done, f"{tag} {len(not_done)} workflows not done: {_short(not_done)}"
    parked = {w: r.parked for w, r in rows.items() if r.parked}
    assert not parked, f"{tag} parked workflows: {_short(parked)}"
    all_steps: list[StepRecord] = []
    for wid in ids:
        history = await engine.history(wid)
        versions = [t.version for t in history]
        assert versions == list(range(1, len(PATH) + 1)), f"{tag} {wid}: versions {versions}"
        assert [t.to_state for t in history] == list(PATH), f"{tag} {wid}"
        assert [t.from_state for t in history] == [None, *PATH[:-1]], f"{tag} {wid}"
        assert [t.event for t in history] == ["$start", *(e for _, _, e in STAGES)], wid
        replayed = await engine.check(wid)  # raises ReplayMismatch on a difference
        assert (replayed.state, replayed.version) == ("done", len(PATH)), f"{tag} {wid}"
        row = rows[wid]
        assert row.lease_owner is None and row.next_due_at is None, f"{tag} {row}"
        ledger = {s.step: s for s in await engine.store.steps(wid)}
        assert set(ledger) == set(STEPS), f"{tag} {wid} ledger: {ledger}"
        for step, rec in ledger.items():
            assert rec.status == "done", f"{tag} {rec}"
            assert rec.result == row.context[step], f"{tag} {rec} vs context {row.context}"
        # The search attribute was written with the transition that set it: a kill cannot
        # separate them.
        found = await engine.store.search_attributes(wid)
        assert found == {"last_step": row.context["last_step"]} == {"last_step": STEPS[-1]}, (
            f"{tag} {wid} search attributes {found} vs context {row.context}"
        )
        all_steps.extend(ledger.values())

    expected_keys = {f"{wid}:{step}" for wid in ids for step in STEPS}
    per_key = Counter(e["key"] for e in effects)
    doubled = {k: n for k, n in per_key.items() if n != 1}
    assert not doubled, f"{tag} effects applied more than once: {_short(doubled)}"
    missing, unexpected = expected_keys - set(per_key), set(per_key) - expected_keys
    assert not missing and not unexpected, (
        f"{tag} effects missing {_short(missing)}, unexpected {_short(unexpected)}"
    )
    by_key = {e["key"]: e for e in effects}
    for rec in all_steps:
        # The ledger holds exactly what the service applied (directly or via reconcile).
        assert rec.result == by_key[rec.key], f"{tag} {rec} vs {by_key[rec.key]}"
        assert rec.result["amount"] == amount_of(rec.key), f"{tag} {rec}"
    assert set(calls) == expected_keys, f"{tag} calls for {_short(set(calls) ^ expected_keys)}"
    repeated = {k: n for k, n in calls.items() if n > 1}
    if mode == "dedupe":
        # A reconciled step is never re-run blindly: its action reached the service once.
        # Only the safe_to_repeat step may call again (the idempotency key absorbs it).
        blind = {k: n for k, n in repeated.items() if k.split(":")[1] not in SAFE_TO_REPEAT}
        assert not blind, f"{tag} reconciled steps called again: {_short(blind)}"
    else:
        # Nothing absorbs a second call: every key reached the service exactly once.
        assert not repeated, f"{tag} service called more than once: {_short(repeated)}"
        assert not service.refusals(), f"{tag} calls refused: {service.refusals()[:10]}"
    # Each kill inside a step had the consequence it must have on the next run.
    for k in kills:
        key = f"{k.workflow_id}:{k.detail}"
        blind_ok = mode == "dedupe" and k.detail in SAFE_TO_REPEAT
        if k.point == "during_step" and blind_ok:
            assert calls[key] >= 2, f"{tag} {key} applied, killed, never re-run"
        elif k.point == "during_step":
            assert verdicts[key, "Applied"] >= 1, f"{tag} {key} killed after the call: {k}"
        elif k.point == "before_effect" and not blind_ok:
            assert verdicts[key, "NotApplied"] >= 1, f"{tag} {key} killed before the call: {k}"
    by_verdict: Counter[str] = Counter()
    for (_, verdict), n in verdicts.items():
        by_verdict[verdict] += n
    return Verified(
        workflows=len(ids),
        effects=len(effects),
        calls=int(sum(calls.values())),
        doubled=len(doubled),
        reruns=sum(1 for s in all_steps if s.attempts > 1),
        absorbed=sum(repeated.values()) - len(repeated),
        verdicts=by_verdict,
    )


def report(
    name: str, seed: int, tally: Tally, v: Verified, elapsed: float, extra: str = ""
) -> str:
    inside = dict(sorted(tally.self_kills.items(), key=lambda kv: POINTS.index(kv[0])))
    return (
        f"{name} seed={seed}: {tally.total} kills in {elapsed:.1f}s "
        f"(self-kills by point {inside}; external {tally.external}, "
        f"{tally.external_in_flight} aimed while a call was in flight"
        + (f"; of workers posing as remote {tally.foreign}" if tally.foreign else "")
        + f"); {tally.clean_exits} workers exited cleanly; reconcile verdicts "
        f"{dict(v.verdicts)}; {v.workflows} workflows, service calls {v.calls}, effects "
        f"{v.effects}, doubled effects {v.doubled}, calls absorbed by idempotency keys "
        f"{v.absorbed}; ledger entries re-run {v.reruns}" + (f"; {extra}" if extra else "")
    )


__all__ = [
    "KILLED",
    "Child",
    "Files",
    "Kill",
    "PlanMaker",
    "Tally",
    "Verified",
    "crash_seed",
    "kill_from_outside",
    "read_kills",
    "read_verdicts",
    "report",
    "settle",
    "torture_enabled",
    "verify",
    "worker_argv",
]
