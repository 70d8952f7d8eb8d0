"""Worker processes share one PostgreSQL and get killed.

- Three workers: one is SIGKILLed, one SIGTERMed mid-run. Every workflow still finishes, each
  idempotency key's effect happens once, no transition is lost or doubled, and the dead
  worker's work is taken over within the lease time.
- Three workers against a service that does **not** deduplicate, killed again and again (at
  random moments aimed at service calls in flight, and at planned points from inside) and
  replaced at once, dozens of times by default, hundreds with ``--torture``: every step's
  effect still exists exactly once, nothing is parked, every workflow ends ``done``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import signal
import statistics
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from statewright import Engine, store_from_url
from statewright.types import WorkflowFilter
from tests.acceptance.crash.app import (
    PATH,
    POINTS,
    STAGES,
    STEPS,
    TYPE,
    InFlight,
    Service,
    make_type,
)
from tests.acceptance.crash.harness import (
    KILLED,
    Child,
    Files,
    PlanMaker,
    Tally,
    crash_seed,
    kill_from_outside,
    read_kills,
    read_verdicts,
    report,
    settle,
    torture_enabled,
    verify,
    worker_argv,
)
from tests.acceptance.crash.zygote import Zygote
from tests.forkserver import Child as ForkedChild

WORKFLOWS = 120
"""Enough that each worker holds its eight leases when killed (a fifth of the work done, 96
workflows left) and that worker c has half the work to finish alone after b's SIGTERM."""
LEASE = 3.0
WATCH = 0.1
"""Seconds between a worker's looks at the store (is everything terminal? a SIGTERM?)."""


def _spawn(zygote: Zygote, dsn: str, tmp: Path, name: str) -> ForkedChild:
    """A worker (tests/acceptance/crash/worker.py) forked by the zygote: a process of its own,
    as ``python -m tests.acceptance.crash.worker`` would be, without its imports."""
    argv = [
        *("--db", dsn),
        *("--service", str(tmp / "service.db")),
        *("--ready", str(tmp / f"{name}.ready")),
        *("--kill-log", str(tmp / "kills.log")),
        *("--concurrency", "8"),
        *("--lease-seconds", str(LEASE)),
        *("--stall-seconds", "30"),
        *("--watch-interval", str(WATCH)),
        *("--jitter", "0.004"),
    ]
    return zygote.popen(argv, tmp / f"{name}.out", tmp / f"{name}.err")


def _stderr(tmp: Path, name: str) -> str:
    return (tmp / f"{name}.err").read_text(errors="replace")[-6000:]


class _Progress:
    """Transitions logged so far, read incrementally (the log since the last look only)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.seq = 0
        self.count = 0

    async def __call__(self) -> int:
        new = await self.engine.store.transitions_since(self.seq, limit=100_000)
        if new:
            self.seq = new[-1].seq
            self.count += len(new)
        return self.count


async def _wait_for(
    progress: _Progress, count: int, procs: dict[str, ForkedChild], tmp: Path
) -> None:
    deadline = time.monotonic() + 90
    while await progress() < count:
        for name, p in procs.items():
            if p.poll() not in (None, 0):
                pytest.fail(f"worker {name} exited {p.returncode}: {_stderr(tmp, name)}")
        assert time.monotonic() < deadline, "the workers made no progress"
        await asyncio.sleep(0.05)


@pytest.mark.alone
@pytest.mark.acceptance
async def test_three_workers_one_killed_one_terminated(pg_dsn: str, tmp_path: Path) -> None:
    service = Service(tmp_path / "service.db")
    engine = Engine(store_from_url(pg_dsn), [make_type(service)])
    async with engine:
        for i in range(WORKFLOWS):
            await engine.start(TYPE, {"n": i}, workflow_id=f"wf-{i:03d}")
        with Zygote(tmp_path / "zygote.err") as zygote:  # SIGKILLs what still runs, at the end
            procs = {name: _spawn(zygote, pg_dsn, tmp_path, name) for name in ("a", "b", "c")}
            progress = _Progress(engine)
            total = WORKFLOWS * len(PATH)
            await _wait_for(progress, WORKFLOWS + total // 5, procs, tmp_path)

            # SIGKILL worker a: whatever it held is orphaned until recovery takes it over.
            victim = procs["a"]
            owner_prefix = f":{victim.pid}:"
            held = [
                r
                for r in await engine.store.list_workflows(WorkflowFilter(limit=10_000))
                if r.lease_owner and owner_prefix in r.lease_owner
            ]
            assert held, "worker a held no leases when killed: the takeover check would be vacuous"
            victim.send_signal(signal.SIGKILL)
            killed_at = time.monotonic()
            assert victim.wait(timeout=10) == -signal.SIGKILL

            # SIGTERM worker b: it finishes its in-flight handlers, hands back its leases.
            await _wait_for(
                progress, WORKFLOWS + total // 2, {n: procs[n] for n in ("b", "c")}, tmp_path
            )
            polite = procs["b"]
            polite.send_signal(signal.SIGTERM)
            assert polite.wait(timeout=60) == 0, _stderr(tmp_path, "b")
            out = (tmp_path / "b.out").read_text()
            assert json.loads(out.strip().splitlines()[-1])["stopped"] is True
            assert not [o for o in await engine.store.lease_owners() if f":{polite.pid}:" in o]

            # The orphans were taken over within the lease time (plus a poll's slack): the dead
            # worker's leases broken by the others' recovery (processing them comes later, in
            # claim order: how soon depends on the machine's speed, not on recovery).
            deadline = killed_at + LEASE * 2 + 5
            for row in held:
                while (await engine.get(row.id)).lease_owner == row.lease_owner:
                    assert time.monotonic() < deadline, f"{row.id} orphaned past the lease"
                    await asyncio.sleep(0.05)

            assert procs["c"].wait(timeout=120) == 0, _stderr(tmp_path, "c")

        rows = await engine.store.list_workflows(WorkflowFilter(limit=10_000))
        assert len(rows) == WORKFLOWS
        assert {r.state for r in rows} == {"done"}
        for r in rows:
            history = await engine.history(r.id)
            assert [t.version for t in history] == list(range(1, len(PATH) + 1)), r.id
            assert [t.to_state for t in history] == list(PATH), r.id
            assert [t.event for t in history] == ["$start", *(e for _, _, e in STAGES)]
            await engine.check(r.id)
            assert r.lease_owner is None
        keys = Counter(e["key"] for e in service.effects())
        assert not [k for k, n in keys.items() if n > 1], "an effect was applied twice"
        assert set(keys) == {f"wf-{i:03d}:{s}" for i in range(WORKFLOWS) for s in STEPS}
    service.close()


# -- three workers, killed again and again, against a service that does not deduplicate ------

SLOTS = 3
TORTURE_LEASE = 2.0
"""Short, so that the orphans of a worker posing as remote are taken over soon."""
KILLS = 24
"""By default: two dozen kills (about a quarter from inside, at planned points; the rest from
outside, most aimed at a call in flight), enough for every check below; the long run
(``--torture``) has hundreds."""
TORTURE_KILLS = 220
KILL_GAP = (0.05, 0.35)
"""Seconds between kills from outside (each aimed at a call in flight)."""
SELF_KILL_SHARE = 0.35
"""Share of the replacement workers that get a plan to kill themselves at a point."""
FOREIGN_EVERY = 5
"""Every fifth worker (the second one first) has an id naming another host: its death is seen
only when its leases expire, not from its pid. Every fifth rather than a fifth at random: a
short run surely has some."""
LOW_WATER, TOP_UP = 40, 40
BUDGET, TORTURE_BUDGET = 150.0, 1200.0


@dataclass
class Orphans:
    """The workflows a dead worker held leases on, not yet taken over."""

    foreign: bool
    since: float
    owner: str
    pending: set[str]


def _spread(seconds: list[float]) -> str:
    if not seconds:
        return "-"
    return f"{statistics.median(seconds):.2f}s/{max(seconds):.2f}s of {len(seconds)}"


@pytest.mark.alone
@pytest.mark.acceptance
async def test_three_workers_killed_again_and_again_exactly_once(
    pg_dsn: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    torture = torture_enabled(request.config)
    target = TORTURE_KILLS if torture else KILLS
    seed = crash_seed()
    print(f"\ncrash test [postgres, count, 3 workers] seed={seed} target={target}", flush=True)
    rng = random.Random(seed)
    files = Files(tmp_path)
    started = time.monotonic()
    deadline = started + (TORTURE_BUDGET if torture else BUDGET)
    service = Service(files.service, mode="count")
    inflight = [InFlight(files.inflight(slot), create=True) for slot in range(SLOTS)]
    plans = PlanMaker(rng, max_n=15)
    tally = Tally()
    children: list[Child] = []
    ids: list[str] = []
    orphans: list[Orphans] = []
    takeover: dict[bool, list[float]] = {False: [], True: []}  # by foreign: seconds

    def fail(message: str, child: Child | None = None) -> None:
        tail = child.stderr_tail() if child is not None else ""
        pytest.fail(f"[seed {seed}] {message}{tail}", pytrace=False)

    engine = Engine(store_from_url(pg_dsn), [make_type(service)])

    async def orphaned(child: Child) -> None:
        """Note the leases a dead worker left, to time their takeover."""
        if child.code != KILLED:
            return
        for owner in await engine.store.lease_owners():
            if f":{child.pid}:" in owner:
                held = {r.id for r in await engine.store.leased_by(owner)}
                orphans.append(Orphans(child.foreign, time.monotonic(), owner, held))

    async def taken_over() -> None:
        for o in list(orphans):
            # One query per dead owner: what it still holds (a workflow it no longer holds was
            # taken over, or is gone), not one per workflow.
            still = {r.id for r in await engine.store.leased_by(o.owner)}
            for wid in o.pending - still:
                o.pending.discard(wid)
                takeover[o.foreign].append(time.monotonic() - o.since)
            if not o.pending:
                orphans.remove(o)

    async with engine, contextlib.AsyncExitStack() as stack:
        zygote = stack.enter_context(Zygote(tmp_path / "zygote.err"))

        async def top_up(n: int) -> None:
            for i in range(len(ids), len(ids) + n):
                wid = f"wf-{i:05d}"
                await engine.start(TYPE, {"n": i}, workflow_id=wid)
                ids.append(wid)

        def fork(slot: int, plan: str, *, final: bool = False) -> Child:
            n = len(children)
            ready, err = tmp_path / f"ready-{n}", tmp_path / f"worker-{n}.err"
            foreign = not final and n % FOREIGN_EVERY == 1
            argv = worker_argv(
                files,
                pg_dsn,
                mode="count",
                ready=ready,
                plan=plan,
                seed=seed * 10_000 + n,
                concurrency=rng.choice([2, 4, 8]),
                slot=slot,
                lease_seconds=TORTURE_LEASE,
                stall_seconds=30.0,
                watch_interval=0.1,
                until=True,
                foreign=foreign,
            )
            pid = zygote.spawn(argv, tmp_path / f"worker-{n}.out", err)
            children.append(Child(n, slot, pid, plan, ready, err, foreign=foreign))
            return children[-1]

        def replacement_plan() -> str:
            return plans() if rng.random() < SELF_KILL_SHARE else ""

        await top_up(2 * TOP_UP)
        live = {slot: fork(slot, replacement_plan()) for slot in range(SLOTS)}
        next_kill = time.monotonic() + rng.uniform(*KILL_GAP)
        next_top_up = 0.0

        # -- kill, replace, kill again ----------------------------------------------------------
        while tally.total < target:
            now = time.monotonic()
            if now > deadline:
                fail(f"only {tally.total} kills within the time budget")
            codes = zygote.status([c.pid for c in live.values()])
            for slot, child in list(live.items()):
                if codes[child.pid] is not None:
                    child.code = codes[child.pid]
                    if child.code == 0:
                        fail("a worker exited although the test had not finished", child)
                    settle(child, files.kill_log, tally, seed)
                    await orphaned(child)
                    live[slot] = fork(slot, replacement_plan())
            if now >= next_kill:
                slot = rng.randrange(SLOTS)
                victim = live[slot]
                kill_from_outside(zygote, victim, inflight[slot], rng, spread=0.02, aim_for=0.3)
                if victim.code is None:
                    victim.code = zygote.wait(victim.pid, 5.0)
                settle(victim, files.kill_log, tally, seed)
                await orphaned(victim)
                live[slot] = fork(slot, replacement_plan())
                next_kill = time.monotonic() + rng.uniform(*KILL_GAP)
            await taken_over()
            if now >= next_top_up:
                left = await engine.store.list_workflows(
                    WorkflowFilter(terminal=False, limit=LOW_WATER)
                )
                if len(left) < LOW_WATER:
                    await top_up(TOP_UP)
                next_top_up = now + 0.25
            await asyncio.sleep(0.02)

        # -- then let the workers finish: replace the killed ones by workers without a plan ----
        files.until.touch()
        finished: set[int] = set()
        final_deadline = time.monotonic() + 120
        while len(finished) < SLOTS:
            if time.monotonic() > final_deadline:
                stuck = [
                    (r.id, r.state, r.lease_owner, r.parked)
                    for r in await engine.store.list_workflows(
                        WorkflowFilter(terminal=False, limit=20)
                    )
                ]
                fail(f"the workers did not finish; non-terminal: {stuck}")
            codes = zygote.status([c.pid for s, c in live.items() if s not in finished])
            for slot, child in live.items():
                if slot in finished or codes[child.pid] is None:
                    continue
                child.code = codes[child.pid]
                settle(child, files.kill_log, tally, seed)
                await orphaned(child)
                if child.code == 0:
                    finished.add(slot)
                else:
                    live[slot] = fork(slot, "", final=True)
            await taken_over()
            await asyncio.sleep(0.02)
        forks = zygote.spawned
        elapsed = time.monotonic() - started

        kills = read_kills(files.kill_log)
        assert len(kills) == sum(tally.self_kills.values()), f"[seed {seed}] kill log vs exits"
        assert tally.external_in_flight >= 1, f"[seed {seed}] no kill landed while calls ran"
        assert sum(1 for c in children if c.code == KILLED) == tally.total
        verified = await verify(
            engine,
            service,
            ids,
            mode="count",
            kills=kills,
            verdicts=read_verdicts(files.journal),
            seed=seed,
        )
        points = [p for p in POINTS if tally.self_kills[p]]
    service.close()
    for counter in inflight:
        counter.close()
    assert verified.verdicts["Applied"] >= 1 and verified.verdicts["NotApplied"] >= 1
    # A dead worker on this host is seen from its pid at once, not when its leases expire.
    assert takeover[False] and max(takeover[False]) < TORTURE_LEASE, (
        f"[seed {seed}] orphans of local workers taken over after {_spread(takeover[False])}"
    )
    assert takeover[True], f"[seed {seed}] no orphans of workers posing as remote"
    print(
        report(
            "crash test [postgres, count, 3 workers]",
            seed,
            tally,
            verified,
            elapsed,
            f"{forks} workers forked, self-kill points reached {points}; orphans taken over "
            f"after (median/max) {_spread(takeover[False])} from workers seen dead by pid, "
            f"{_spread(takeover[True])} from workers posing as remote (lease {TORTURE_LEASE}s)",
        )
    )
