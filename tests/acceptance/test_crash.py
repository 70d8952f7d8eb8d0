"""Crash anywhere, lose nothing, repeat nothing: one worker process killed with SIGKILL, again
and again (dozens of times by default, hundreds with ``--torture``).

Workflows of five steps call a fake external service (its own SQLite file). In ``count`` mode
the service does **not** deduplicate: every call records a new effect, so exactly once can
only come from the engine (the step ledger, and a reconcile hook on every step). In ``dedupe``
mode it honours idempotency keys, and one step is ``safe_to_repeat`` instead of reconciled.

Each round the zygote forks a fresh worker (recovery first, as always) that kills itself at a
planned point: before a step, after the ledger says *executing* but before the service call,
after the service applied the effect but before the step returned, between the step and its
transition, right after a transition; or the test kills it from outside at a random moment,
aimed at a service call in flight (a random 0-5 ms pause precedes and follows every call).
Workflows are added whenever all are finished, until the run has its number of kills. After
a final clean run every workflow must be ``done`` along the machine's path, with no transition
lost or doubled, replay equal to the stored row, every step's effect recorded exactly once by
the service, every ledger entry done with the service's effect as result, nothing parked.

Reproduce a failing run with ``STATEWRIGHT_CRASH_SEED=<seed>`` (the seed is printed and is in
every message). ``--torture`` (or ``STATEWRIGHT_TORTURE=1``) runs at least 200 kills per run.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from statewright import (
    Engine,
    MachineBuilder,
    Next,
    NotApplied,
    Run,
    SQLiteStore,
    WorkflowType,
)
from statewright.clock import ManualClock
from statewright.engine.recovery import recover
from statewright.engine.steps import StepKey
from statewright.errors import LeaseLost
from tests.acceptance.crash.app import (
    POINTS,
    FencedOff,
    InFlight,
    Mode,
    Service,
    make_type,
)
from tests.acceptance.crash.harness import (
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

BATCH = 40
"""Workflows added whenever all are terminal."""
KILLS = {"dedupe": 24, "count": 40}
"""By default: dozens of kills, two thirds of them from inside (the plans cycle through every
point, each reached several times) and a third from outside; more where the service does not
deduplicate. The long run (``--torture``) has hundreds."""
TORTURE_KILLS = 220
ROUND_TIMEOUT = 30.0
BUDGET = 150.0
TORTURE_BUDGET = 1200.0
"""Hard ceilings; a run takes a fraction of them."""


def _unfinished(db: Path) -> int:
    with contextlib.closing(sqlite3.connect(db, timeout=30)) as conn:
        left = conn.execute("SELECT count(*) FROM workflows WHERE terminal = 0").fetchone()
        return int(left[0])


async def _start(db: Path, service: Service, first: int, n: int) -> list[str]:
    ids = [f"order-{i:04d}" for i in range(first, first + n)]
    async with Engine(SQLiteStore(db, synchronous="FULL"), [make_type(service)]) as engine:
        for wid in ids:
            await engine.start("crash_order", {"customer": wid}, workflow_id=wid)
    return ids


@pytest.mark.acceptance
@pytest.mark.parametrize("mode", ["dedupe", "count"])
async def test_sigkill_anywhere_loses_nothing_and_repeats_nothing(
    tmp_path: Path, mode: Mode, request: pytest.FixtureRequest
) -> None:
    torture = torture_enabled(request.config)
    target = TORTURE_KILLS if torture else KILLS[mode]
    seed = crash_seed()
    print(f"\ncrash test [sqlite, {mode}] seed={seed} target={target} kills", flush=True)
    rng = random.Random(seed)
    files = Files(tmp_path)
    db = tmp_path / "statewright.db"
    started = time.monotonic()
    deadline = started + (TORTURE_BUDGET if torture else BUDGET)

    service = Service(files.service, mode=mode)
    ids = await _start(db, service, 0, BATCH)
    inflight = InFlight(files.inflight(0), create=True)
    plans = PlanMaker(rng)
    tally = Tally()
    children: list[Child] = []

    def fail(message: str, child: Child | None = None) -> None:
        tail = child.stderr_tail() if child is not None else ""
        pytest.fail(f"[seed {seed}] {message}{tail}", pytrace=False)

    with Zygote(tmp_path / "zygote.err") as zygote:

        def fork(plan: str) -> Child:
            n = len(children)
            ready, err = tmp_path / f"ready-{n}", tmp_path / f"worker-{n}.err"
            argv = worker_argv(
                files,
                str(db),
                mode=mode,
                ready=ready,
                plan=plan,
                seed=seed * 10_000 + n,
                concurrency=rng.choice([1, 2, 4, 8]),
                slot=0,
            )
            pid = zygote.spawn(argv, tmp_path / f"worker-{n}.out", err)
            children.append(Child(n, 0, pid, plan, ready, err))
            return children[-1]

        # -- kill, restart, kill again ------------------------------------------------------
        rounds = 0
        while tally.total < target:
            if time.monotonic() > deadline:
                fail(f"only {tally.total} kills within the time budget")
            if _unfinished(db) == 0:
                ids += await _start(db, service, len(ids), BATCH)
            external = rounds % 3 == 2
            child = fork("" if external else plans())
            if external:
                kill_from_outside(zygote, child, inflight, rng, spread=0.1)
            if child.code is None:
                child.code = zygote.wait(child.pid, ROUND_TIMEOUT)
                if child.code is None:
                    zygote.kill(child.pid)
                    fail(f"round {rounds} ({child.plan or 'external'}) hung", child)
            settle(child, files.kill_log, tally, seed)
            rounds += 1

        final = fork("")
        final.code = zygote.wait(final.pid, ROUND_TIMEOUT * 2)
        if final.code != 0:
            fail(f"the final run without faults ended with {final.code}", final)
        forks, preload = zygote.spawned, zygote.preload
    inflight.close()
    elapsed = time.monotonic() - started

    kills = read_kills(files.kill_log)
    assert len(kills) == sum(tally.self_kills.values()), f"[seed {seed}] kill log vs exits"
    missing = [p for p in POINTS if tally.self_kills[p] == 0]
    assert not missing, f"[seed {seed}] never killed at {missing}: the test would be vacuous"
    assert tally.external >= 1, f"[seed {seed}] no kill from outside landed while a worker ran"
    assert tally.external_in_flight >= 1, f"[seed {seed}] no kill landed while calls were out"

    # -- everything reached the end, exactly once ---------------------------------------------
    try:
        async with Engine(SQLiteStore(db, synchronous="FULL"), [make_type(service)]) as engine:
            verified = await verify(
                engine,
                service,
                ids,
                mode=mode,
                kills=kills,
                verdicts=read_verdicts(files.journal),
                seed=seed,
            )
    finally:
        service.close()
    if mode == "count":
        assert verified.verdicts["Applied"] >= 1 and verified.verdicts["NotApplied"] >= 1
    print(
        report(
            f"crash test [sqlite, {mode}, 1 worker at a time]",
            seed,
            tally,
            verified,
            elapsed,
            f"{rounds} fault rounds + final run, {forks} workers forked "
            f"(zygote imports {preload:.2f}s once)",
        )
    )


def test_count_mode_records_every_call(tmp_path: Path) -> None:
    service = Service(tmp_path / "s.db", mode="count")
    try:
        first = service.apply("wf:a", {"amount": 1}, token=1)
        second = service.apply("wf:a", {"amount": 1}, token=1)
        assert first["effect_id"] != second["effect_id"]
        assert [e["key"] for e in service.effects()] == ["wf:a", "wf:a"]
        assert service.calls() == {"wf:a": 2}
        assert service.lookup("wf:a") == service.lookup("wf:a")  # the first effect
        assert isinstance(service.lookup("wf:b"), NotApplied)
    finally:
        service.close()


def test_fence_mode_refuses_a_lower_token(tmp_path: Path) -> None:
    service = Service(tmp_path / "s.db", mode="fence")
    try:
        service.apply("wf:a", {"amount": 1}, token=3)
        with pytest.raises(FencedOff):
            service.apply("wf:a", {"amount": 1}, token=2)  # a worker that lost its claim
        service.apply("wf:a", {"amount": 1}, token=3)  # no dedupe by key: recorded again
        service.apply("wf:a", {"amount": 1}, token=4)
        service.apply("wf:b", {"amount": 1}, token=1)  # the token is per key
        assert [e["key"] for e in service.effects()] == ["wf:a", "wf:a", "wf:a", "wf:b"]
        assert service.refusals() == [("wf:a", 2, 3)]
        with pytest.raises(ValueError, match="fencing token"):
            service.apply("wf:a", {"amount": 1})
    finally:
        service.close()


@pytest.mark.parametrize("hook", ["step_hook", "type_level_hook"])
async def test_fence_mode_refuses_the_late_call_of_a_lost_claim(tmp_path: Path, hook: str) -> None:
    """Worker A's call is in flight (a frozen process, a slow network) when its lease expires;
    B claims the workflow, reconciles the step (NotApplied: A's call has not landed), and only
    then A's call lands, before B's own. The service must refuse A's call (lower token)."""
    service = Service(tmp_path / "service.db", mode="fence")
    pay = (
        MachineBuilder("pay")
        .state("charging", initial=True)
        .state("done", terminal=True)
        .event("charged")
        .transition("charged", "charging", "done")
        .build()
    )
    type_level = {"charge": service.lookup} if hook == "type_level_hook" else {}
    wtype = WorkflowType(
        pay, handlers={"charging": lambda run: Next("charged")}, reconcilers=type_level
    )
    clock = ManualClock()
    entered, gate, landed = threading.Event(), threading.Event(), threading.Event()

    def late_call(key: StepKey) -> dict[str, Any]:  # A's: held until B has reconciled
        entered.set()
        gate.wait(10)
        try:
            return service.apply(key, {"amount": 1}, token=key.fencing_token)
        finally:
            landed.set()

    def call(key: StepKey) -> dict[str, Any]:  # B's: lets A's call land first
        gate.set()
        landed.wait(10)
        return service.apply(key, {"amount": 1}, token=key.fencing_token)

    try:
        async with Engine(SQLiteStore(tmp_path / "sw.db"), [wtype], clock=clock) as engine:
            await engine.start("pay", {}, workflow_id="wf")
            [row_a] = await engine.store.claim_due("remote-a:1:a", clock.now(), 10, 1)
            run_a = Run(engine.runtime, wtype, row_a)
            task_a = asyncio.create_task(run_a.step("charge", late_call))
            await asyncio.to_thread(entered.wait, 10)
            clock.advance(11)  # A's lease expires (a remote host: no pid to check)
            await recover(engine, worker_id="remote-b:2:b")
            [row_b] = await engine.store.claim_due("remote-b:2:b", clock.now(), 10, 1)
            assert row_b.fence > row_a.fence
            run_b = Run(engine.runtime, wtype, row_b)
            # Either way the hook gets the asking claim's fencing token with the key.
            own = service.lookup if not type_level else None
            result = await run_b.step("charge", call, reconcile=own)
            with pytest.raises(LeaseLost):
                await task_a  # A may no longer record anything
            effects = service.effects()
            assert [e["effect_id"] for e in effects] == [result["effect_id"]], effects
            assert service.refusals() == [("wf:charge", row_a.fence, row_b.fence)]
    finally:
        gate.set()
        service.close()
