"""Compensation under SIGKILL (issue 26, item 3), on both stores: every completed step's undo
happens exactly once, none for a step that never completed.

Sagas (:mod:`tests.acceptance.crash.saga`) complete two or three steps, each calling a fake
external service that deduplicates nothing (``count`` mode: every call is a new effect), then
take a compensating transition, hit a fatal failure, or are cancelled (some while their
handler runs); the type compensates on cancel and on a fatal failure. One worker process at a
time is killed with SIGKILL, at planned points (before a step, between a step's *executing*
record and its call, after the call, after a step, after a transition; inside an undo, before
and after its call) or from outside at a random moment aimed at a call in flight. Meanwhile
the test process cancels the workflows that wait in ``held`` (no worker holds them: the cancel
is handed to a worker) and, at random moments, the ``midcancel`` ones.

After a final run without faults, on SQLite and on PostgreSQL: every workflow reached its final
state, none parked; replay equals the row; the service holds exactly one effect for every step
the ledger has done and none for any other, exactly one undo effect for each of those, and each
key reached the service once (a kill was reconciled, never repeated blindly); the compensating
transition's payload names the undone steps, newest first. ``--torture`` runs many more kills.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from pathlib import Path

import pytest

from statewright import Engine, store_from_url
from statewright.errors import VersionConflict, WorkflowBusy
from tests.acceptance.crash.app import POINTS, InFlight, Service
from tests.acceptance.crash.harness import (
    Child,
    Files,
    Tally,
    crash_seed,
    kill_from_outside,
    read_kills,
    settle,
    store_kind,
    torture_enabled,
    worker_argv,
)
from tests.acceptance.crash.saga import DONE, FINAL, KINDS, STEPS, TYPE, SagaZygote, saga_type

BATCH = 20
KILLS = 30
TORTURE_KILLS = 150
ROUND_TIMEOUT = 30.0
BUDGET = 150.0
UNDO_POINTS = ("before_effect/undo", "during_step/undo")


class Plans:
    """Kill plans cycling through every point and the two inside an undo (n small at first)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.made = 0

    def __call__(self) -> str:
        points = (*POINTS, *UNDO_POINTS)
        i, rng = self.made, self.rng
        self.made += 1
        n = rng.randint(1, 3) if i < 2 * len(points) else rng.randint(1, 10)
        return f"{points[i % len(points)]}:{n}"


async def _start(engine: Engine, first: int, n: int) -> dict[str, str]:
    kinds = {f"saga-{i:04d}": KINDS[i % len(KINDS)] for i in range(first, first + n)}
    for wid, kind in kinds.items():
        await engine.start(TYPE, {"kind": kind}, workflow_id=wid)
    return kinds


async def _cancel_some(
    engine: Engine, kinds: dict[str, str], rng: random.Random, stranded: set[str]
) -> None:
    """Cancel what waits in ``held``, and now and then a ``midcancel`` saga (the test's own
    process: not a worker, never killed), each with its idempotency key.

    A request recorded while a worker held the saga, whose worker then died right after its
    transition into ``held`` (before it delivered the request: ``settle.deliver_pending``),
    must not wait on a row nothing makes due: that transition made the row due, for a claim
    to deliver the request. A request found stranded anyway (unleased, not due, not parked)
    goes into ``stranded`` (the test then fails) and is sent again with its key, as a
    client would."""
    for wid, kind in kinds.items():
        row = await engine.get(wid)
        if row.terminal:
            continue
        key = f"cancel-{wid}"
        if row.cancel is not None:
            if row.lease_owner is not None or row.next_due_at is not None or row.parked:
                continue
            stranded.add(wid)
        elif not (row.state == "held" or (kind == "midcancel" and rng.random() < 0.2)):
            continue
        try:
            await engine.cancel(
                wid, reason="called off", actor="test", idempotency_key=key, if_allowed=True
            )
        except (VersionConflict, WorkflowBusy):
            pass  # moving right now: next time


@pytest.mark.acceptance
async def test_sigkill_during_compensation_undoes_every_completed_step_once(
    tmp_path: Path, store_url: str, request: pytest.FixtureRequest
) -> None:
    torture = torture_enabled(request.config)
    store = store_kind(store_url)
    target = TORTURE_KILLS if torture else KILLS
    seed = crash_seed()
    print(f"\ncompensation crash test [{store}] seed={seed} target={target} kills", flush=True)
    rng = random.Random(seed)
    files = Files(tmp_path)
    db = store_url
    started = time.monotonic()
    deadline = started + (BUDGET * (8 if torture else 1))
    service = Service(files.service, mode="count")
    engine = Engine(store_from_url(db), [saga_type(service)])
    await engine.open()
    kinds = await _start(engine, 0, BATCH)
    inflight = InFlight(files.inflight(0), create=True)
    plans, tally = Plans(rng), Tally()
    children: list[Child] = []
    stranded: set[str] = set()

    def fail(message: str, child: Child | None = None) -> None:
        tail = child.stderr_tail() if child is not None else ""
        pytest.fail(f"[seed {seed}] {message}{tail}", pytrace=False)

    async def wait(child: Child, timeout: float) -> int | None:
        """Wait for the worker to exit, cancelling what the test cancels meanwhile."""
        until = time.monotonic() + timeout
        while time.monotonic() < until:
            code = zygote.status([child.pid])[child.pid]
            if code is not None:
                return code
            await _cancel_some(engine, kinds, rng, stranded)
            await asyncio.sleep(0.02)
        return None

    try:
        with SagaZygote(tmp_path / "zygote.err") as zygote:

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
                    concurrency=rng.choice([1, 2, 4, 8]),
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
                rows = [await engine.get(w) for w in kinds]
                if all(r.terminal for r in rows):
                    kinds |= await _start(engine, len(kinds), BATCH)
                external = rounds % 4 == 3
                child = fork("" if external else plans())
                if external:
                    kill_from_outside(zygote, child, inflight, rng, spread=0.1)
                if child.code is None:
                    child.code = await wait(child, ROUND_TIMEOUT)
                    if child.code is None:
                        zygote.kill(child.pid)
                        fail(f"round {rounds} ({child.plan or 'external'}) hung", child)
                settle(child, files.kill_log, tally, seed)
                rounds += 1
            final = fork("")
            final.code = await wait(final, ROUND_TIMEOUT * 2)
            if final.code != 0:
                fail(f"the final run without faults ended with {final.code}", final)
        inflight.close()
        elapsed = time.monotonic() - started
        kills = read_kills(files.kill_log)
        assert len(kills) == sum(tally.self_kills.values()), f"[seed {seed}] kill log vs exits"
        in_undo = [k for k in kills if k.detail == "undo"]
        assert in_undo, f"[seed {seed}] no kill inside a compensation: the test would be vacuous"
        assert tally.external >= 1, f"[seed {seed}] no kill from outside landed"
        undone = await _verify(engine, service, kinds, seed)
    finally:
        await engine.close()
        service.close()
    print(
        f"compensation crash test [{store}] seed={seed}: {tally.total} kills in {elapsed:.1f}s "
        f"(self-kills by point {dict(tally.self_kills)}, {len(in_undo)} inside an undo; "
        f"external {tally.external}, {tally.external_in_flight} aimed at a call in flight); "
        f"{len(kinds)} sagas by final state {dict(Counter(FINAL[k] for k in kinds.values()))}; "
        f"{undone} steps undone, each once; stranded cancel requests retried by the client: "
        f"{len(stranded)}"
    )
    assert not stranded, f"[seed {seed}] cancel requests stranded on rows not due: {stranded}"


async def _verify(engine: Engine, service: Service, kinds: dict[str, str], seed: int) -> int:
    """Everything ended as it must; the number of steps undone."""
    tag = f"[seed {seed}]"
    effects = Counter(e["key"] for e in service.effects())
    calls = service.calls()
    undone = 0
    for wid, kind in sorted(kinds.items()):
        row = await engine.get(wid)
        assert row.state == FINAL[kind], f"{tag} {wid} ({kind}): {row}"
        assert row.parked is None and row.lease_owner is None, f"{tag} {row}"
        replayed = await engine.check(wid)  # raises ReplayMismatch on a difference
        assert (replayed.state, replayed.version) == (row.state, row.version), f"{tag} {wid}"
        ledger = {s.step: s for s in await engine.store.steps(wid)}
        done = [s for s in STEPS if s in ledger and ledger[s].status == "done"]
        assert done == list(STEPS[: len(done)]), f"{tag} {wid}: done {done}"
        if kind in DONE:
            assert len(done) == DONE[kind], f"{tag} {wid} ({kind}): done {done}"
        for step in STEPS:
            key, undo = f"{wid}:{step}", f"{wid}:undo.{step}"
            if step in done:
                # Completed: its effect once, its undo once, each call made once.
                assert effects[key] == 1 and effects[undo] == 1, (
                    f"{tag} {wid}/{step}: effects {effects[key]}, undos {effects[undo]}"
                )
                assert calls[key] == 1 and calls[undo] == 1, f"{tag} {wid}/{step} called again"
                assert ledger[f"undo.{step}"].status == "done", f"{tag} {ledger}"
                undone += 1
            else:
                # Never completed: no effect at all, and nothing undone.
                assert effects[key] == 0 and effects[undo] == 0, f"{tag} {wid}/{step} leaked"
                assert f"undo.{step}" not in ledger, f"{tag} {wid}: {ledger}"
        last = (await engine.history(wid))[-1]
        assert last.to_state == FINAL[kind], f"{tag} {last}"
        assert last.payload.get("compensated") == done[::-1], f"{tag} {wid}: {last.payload}"
    unexpected = set(effects) - {
        f"{w}:{p}{s}" for w in kinds for s in STEPS for p in ("", "undo.")
    }
    assert not unexpected, f"{tag} unexpected effects {sorted(unexpected)[:10]}"
    return undone
