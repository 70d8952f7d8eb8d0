"""Waits that free the worker, under SIGKILL (issue 27, item 3): worker processes on both
stores, killed again and again (at planned points from inside, and from outside at random
moments aimed at service calls in flight), run workflows that do step -> ``run.sleep`` ->
step -> ``run.wait_input`` -> step. The test posts each workflow's input at a random moment
(some before the wait, most while it is suspended). The steps call a service that does **not**
deduplicate. In the end every workflow is ``done``, every step's effect happened exactly once,
every input was consumed, and the workflows did suspend (the marker file says so).

Reproduce a failing run with ``STATEWRIGHT_CRASH_SEED=<seed>``; ``--torture`` kills more.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from pathlib import Path

import pytest

from statewright import Engine, store_from_url
from statewright.types import WorkflowFilter
from tests.acceptance.crash.app import POINTS, Faults, InFlight, Service
from tests.acceptance.crash.harness import (
    Child,
    Files,
    Tally,
    crash_seed,
    kill_from_outside,
    settle,
    store_kind,
    torture_enabled,
    worker_argv,
)
from tests.acceptance.crash.waits import INPUT, STEPS, TYPE, WaitsZygote, make_type

BATCH = 12
KILLS, TORTURE_KILLS = 14, 120
ROUND_TIMEOUT = 30.0
BUDGET, TORTURE_BUDGET = 60.0, 900.0


@pytest.mark.acceptance
async def test_waits_under_sigkill_lose_nothing_and_repeat_nothing(
    tmp_path: Path, store_url: str, request: pytest.FixtureRequest
) -> None:
    torture = torture_enabled(request.config)
    store = store_kind(store_url)
    target = TORTURE_KILLS if torture else KILLS
    seed = crash_seed()
    print(f"\nwaits crash test [{store}] seed={seed} target={target} kills", flush=True)
    rng = random.Random(seed)
    files = Files(tmp_path)
    db = store_url
    service = Service(files.service, mode="count")
    inflight = InFlight(files.inflight(0), create=True)
    started = time.monotonic()
    deadline = started + (TORTURE_BUDGET if torture else BUDGET)
    tally = Tally()
    children: list[Child] = []
    ids: list[str] = []
    unposted: list[str] = []
    engine = Engine(store_from_url(db), [make_type(service, Faults())])
    await engine.open()

    def fail(message: str, child: Child | None = None) -> None:
        tail = child.stderr_tail() if child is not None else ""
        pytest.fail(f"[seed {seed}] {message}{tail}", pytrace=False)

    async def start_batch() -> None:
        for i in range(len(ids), len(ids) + BATCH):
            wid = f"w-{i:04d}"
            await engine.start(TYPE, workflow_id=wid)
            ids.append(wid)
            unposted.append(wid)

    async def post(share: float) -> None:
        for wid in [w for w in unposted if rng.random() < share]:
            await engine.post_input(wid, INPUT, {"from": "test"})
            unposted.remove(wid)

    async def live() -> int:
        rows = await engine.store.list_workflows(WorkflowFilter(terminal=False, limit=10_000))
        return len(rows)

    try:
        with WaitsZygote(tmp_path / "zygote.err") as zygote:

            def fork(plan: str) -> Child:
                n = len(children)
                ready, err = tmp_path / f"ready-{n}", tmp_path / f"worker-{n}.err"
                argv = worker_argv(
                    files,
                    db,
                    mode="count",
                    ready=ready,
                    plan=plan,
                    seed=seed * 10_000 + n,
                    concurrency=rng.choice([2, 4, 8]),
                    slot=0,
                    stall_seconds=20.0,
                )
                pid = zygote.spawn(argv, tmp_path / f"worker-{n}.out", err)
                children.append(Child(n, 0, pid, plan, ready, err))
                return children[-1]

            rounds = 0
            while tally.total < target:
                if time.monotonic() > deadline:
                    fail(f"only {tally.total} kills within the time budget")
                if await live() == 0:
                    await start_batch()
                external = rounds % 3 == 2
                plan = "" if external else f"{POINTS[rounds % len(POINTS)]}:{rng.randint(1, 6)}"
                child = fork(plan)
                await post(0.1)
                if external:
                    kill_from_outside(zygote, child, inflight, rng, spread=0.3)
                else:
                    child.code = zygote.wait(child.pid, 0.8)
                    if child.code is None:
                        await post(1.0)  # the rest: the workflows can all end now
                        child.code = zygote.wait(child.pid, ROUND_TIMEOUT)
                if child.code is None:
                    zygote.kill(child.pid)
                    fail(f"round {rounds} ({plan or 'external'}) hung", child)
                settle(child, files.kill_log, tally, seed)
                rounds += 1
            await post(1.0)
            final = fork("")
            final.code = zygote.wait(final.pid, ROUND_TIMEOUT * 2)
            if final.code != 0:
                fail(f"the final run without faults ended with {final.code}", final)

        # -- every workflow done, every effect once, every input consumed -----------------------
        rows = {wid: await engine.get(wid) for wid in ids}
        not_done = {
            w: (r.state, r.parked, r.last_error) for w, r in rows.items() if r.state != "done"
        }
        assert not not_done, f"[seed {seed}] not done: {not_done}"
        per_key = Counter(e["key"] for e in service.effects())
        expected = {f"{w}:{s}" for w in ids for s in STEPS}
        assert set(per_key) == expected, f"[seed {seed}] effects {set(per_key) ^ expected}"
        doubled = {k: n for k, n in per_key.items() if n != 1}
        assert not doubled, f"[seed {seed}] effects applied more than once: {doubled}"
        for wid, row in rows.items():
            assert [
                e["effect_id"] for e in service.effects() if e["key"].startswith(f"{wid}:")
            ] == row.context["effects"]
            assert await engine.store.next_input(wid) is None, f"[seed {seed}] {wid}: input left"
        marks = Path(str(files.kill_log) + ".waits")
        kinds = Counter(line.split()[0] for line in marks.read_text().splitlines())
        assert kinds["sleep"] >= 1 and kinds["wait"] >= 1, f"[seed {seed}] no suspension: {kinds}"
        print(
            f"waits crash test [{store}] seed={seed}: {len(ids)} workflows, "
            f"{tally.total} kills ({dict(tally.self_kills)} from inside, {tally.external} from "
            f"outside, {tally.external_in_flight} mid-call), {tally.clean_exits} clean exits, "
            f"suspensions {dict(kinds)}, {time.monotonic() - started:.1f}s"
        )
    finally:
        await engine.close()
        inflight.close()
        service.close()
