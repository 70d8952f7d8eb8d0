"""Child workflows under SIGKILL: worker processes on both stores, killed again and again.

- **Fan-out under kills.** Parents each fan out :data:`CHILDREN` children (at most
  :data:`~tests.acceptance.crash.family.CAP` running at once, so the fan-out handler runs again
  on every child's end) across three worker processes that are SIGKILLed at random moments
  (aimed at service calls in flight) and at planned points from inside (in a child's step,
  in the parent's fan-out right after it created a child, right after any transition), and
  replaced at once: dozens of kills by default, hundreds with ``--torture``. Parents are added
  while the kills go on. The child's step calls a service that does **not** deduplicate
  (every call is an effect), so exactly once can only come from the engine. In the end every
  child exists exactly once, the parent is ``done``, its log has exactly one ``child_done``
  per child (fired by the child's timer), its gathered context holds every child's result
  (the service's effect), every effect exists once, nothing is parked, and replay equals the
  row for every workflow of every tree.
- **Cancel mid-fan-out.** A parent with children running (leased, in a slow handler), waiting
  (in a state without a handler) and not yet started is cancelled while three workers run it:
  within a bounded time no child is live, and no child was created after the parent ended.
  In the variant the process that ended the parent dies right after the parent's cancel
  transition, before it cancels the children: the workers' recovery rounds
  (``cancel_orphans``) must.
- **Cancels mid-fan-out under kills.** Parents of quick, slow and waiting children, each
  cancelled at a random point of its fan-out (by the test, or by a process that dies right
  after the cancel; some workers' plans kill them right after they deliver a parent's cancel),
  while the workers are killed again and again: afterwards no child is live, none was created
  after its parent's end, each was heard at most once (exactly as gathered), each effect
  happened at most once (exactly once, and in the ledger, for a shipped child), and replay
  equals every row.

Reproduce a failing run with ``STATEWRIGHT_CRASH_SEED=<seed>`` (printed, and in every message).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections import Counter
from collections.abc import Collection
from pathlib import Path
from typing import Any

import pytest

from statewright import Engine, store_from_url
from statewright.errors import IllegalTransition, VersionConflict
from statewright.types import WorkflowFilter, WorkflowRow
from tests.acceptance.crash.app import POINTS, InFlight, Service
from tests.acceptance.crash.family import (
    CANCELLED,
    CAP,
    OVER,
    PARENT,
    STEP,
    FamilyZygote,
    make_types,
)
from tests.acceptance.crash.harness import (
    KILLED,
    Child,
    Files,
    Kill,
    Tally,
    crash_seed,
    kill_from_outside,
    read_kills,
    read_verdicts,
    settle,
    torture_enabled,
    worker_argv,
)

STORES = ["sqlite", "postgres"]
SLOTS = 3
CHILDREN = 20
LEASE = 2.0
"""Short, so that the orphans of a worker posing as remote are taken over soon."""
KILLS = 32
"""By default: at least 30 kills per store (a third or so from inside, at planned points; the
rest from outside, most aimed at a call in flight). ``--torture``: hundreds."""
TORTURE_KILLS = 220
KILL_GAP = (0.05, 0.35)
SELF_KILL_SHARE = 0.35
FOREIGN_EVERY = 5
"""Every fifth worker (the second one first) has an id naming another host."""
PARENTS_FIRST, LOW_WATER, TOP_UP = 4, 3, 2
"""Parents started at first; more whenever fewer than LOW_WATER are live."""
BUDGET, TORTURE_BUDGET = 150.0, 1200.0
"""Hard ceilings; a run takes a fraction of them."""
TARGETED = (
    "during_step/start_child",
    "before_step/fan_out",
    "after_step/fan_out",
    "after_transition/shipped",
    "after_transition/fanning",
    "after_transition/done",
)
"""Extra kill points of the family: the parent's fan-out right after it created a child
(before its run ends), right before and after its fan-out, right after a child's end (armed
on the parent in the same transaction), right after the parent heard a child."""


def _db(store: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A SQLite file, or this test's PostgreSQL database (no PostgreSQL: the fixture fails)."""
    if store == "postgres":
        return str(request.getfixturevalue("pg_dsn"))
    return str(tmp_path / "family.db")


class FamilyPlans:
    """Kill plans cycling through every point (n small at first, so that each is reached),
    some with a family point added (whichever comes first)."""

    def __init__(
        self, rng: random.Random, max_n: int = 15, targeted: tuple[str, ...] = TARGETED
    ) -> None:
        self.rng = rng
        self.max_n = max_n
        self.targeted = targeted
        self.made = 0

    def __call__(self) -> str:
        rng, i = self.rng, self.made
        self.made += 1
        n = rng.randint(1, 3) if i < 2 * len(POINTS) else rng.randint(1, self.max_n)
        plan = f"{POINTS[i % len(POINTS)]}:{n}"
        if rng.random() < 0.4:
            plan += f",{rng.choice(self.targeted)}:{rng.randint(1, 3)}"
        return plan


def _short(items: Any, n: int = 8) -> str:
    if isinstance(items, dict):
        items = dict(list(items.items())[:n])
    elif isinstance(items, list | set | tuple):
        items = sorted(items, key=repr)[:n]
    return repr(items)


async def _all_children(engine: Engine, parent: str) -> list[WorkflowRow]:
    rows: list[WorkflowRow] = []
    after = ""
    while True:
        page = await engine.store.children(parent, after=after, limit=500)
        rows += page
        if len(page) < 500:
            return rows
        after = page[-1].id


async def _all_rows(engine: Engine) -> list[WorkflowRow]:
    return await engine.store.list_workflows(WorkflowFilter(limit=1_000_000))


async def _verify_fan_out(
    engine: Engine,
    service: Service,
    parents: list[str],
    *,
    kills: list[Any],
    verdicts: Counter[tuple[str, str]],
    seed: int,
) -> dict[str, int]:
    """Every tree complete, every child heard once, every effect once; AssertionError names
    the seed and what is wrong."""
    tag = f"[seed {seed}]"
    everything = {r.id: r for r in await _all_rows(engine)}
    expected_children = {f"{p}.{i}" for p in parents for i in range(CHILDREN)}
    assert set(everything) == set(parents) | expected_children, (
        f"{tag} workflows missing {_short(set(parents) | expected_children - set(everything))}, "
        f"unexpected {_short(set(everything) - set(parents) - expected_children)}"
    )
    not_ended = {
        w: (r.state, r.parked, r.last_error)
        for w, r in everything.items()
        if r.state != ("done" if r.type == PARENT else "shipped")
    }
    assert not not_ended, f"{tag} {len(not_ended)} not ended as they must: {_short(not_ended)}"
    parked = {w: r.parked for w, r in everything.items() if r.parked}
    assert not parked, f"{tag} parked: {_short(parked)}"
    held = {
        w: (r.lease_owner, r.next_due_at)
        for w, r in everything.items()
        if r.lease_owner is not None or r.next_due_at is not None
    }
    assert not held, f"{tag} leased or due after the end: {_short(held)}"

    effects = service.effects()
    by_key = {e["key"]: e for e in effects}
    per_key = Counter(e["key"] for e in effects)
    expected_keys = {f"{c}:{STEP}" for c in expected_children}
    doubled = {k: n for k, n in per_key.items() if n != 1}
    assert not doubled, f"{tag} effects applied more than once: {_short(doubled)}"
    assert set(per_key) == expected_keys, (
        f"{tag} effects missing {_short(expected_keys - set(per_key))}, "
        f"unexpected {_short(set(per_key) - expected_keys)}"
    )
    calls = service.calls()
    repeated = {k: n for k, n in calls.items() if n != 1}
    assert not repeated, f"{tag} the service was called more than once: {_short(repeated)}"
    assert not service.refusals()

    replayed = 0
    for parent in parents:
        row = everything[parent]
        kids = await _all_children(engine, parent)
        ids = [k.id for k in kids]
        assert sorted(ids) == sorted(f"{parent}.{i}" for i in range(CHILDREN)), (
            f"{tag} {parent}'s children: {ids}"
        )
        assert len(set(ids)) == len(ids) == CHILDREN, f"{tag} {parent}: {ids}"
        for kid in kids:
            assert kid.parent == parent and kid.parent_key == kid.id.rpartition(".")[2], (
                f"{tag} {kid.id} linked to {kid.parent}/{kid.parent_key}"
            )
        history = await engine.history(parent)
        heard = Counter(t.payload.get("key") for t in history if t.event.startswith("child_"))
        wrong = {k: n for k, n in heard.items() if n != 1}
        assert not wrong, f"{tag} {parent} heard children more than once: {wrong}"
        assert set(heard) == {str(i) for i in range(CHILDREN)}, (
            f"{tag} {parent} heard {sorted(heard, key=str)}, not every child"
        )
        events = [t.event for t in history]
        assert events == ["$start", *["child_done"] * CHILDREN], f"{tag} {parent}: {events}"
        assert [t.version for t in history] == list(range(1, CHILDREN + 2)), f"{tag} {parent}"
        assert [t.to_state for t in history] == ["fanning"] * CHILDREN + ["done"], parent
        for t in history[1:]:
            cid = f"{parent}.{t.payload['key']}"
            assert t.actor == f"timer for child {cid}", f"{tag} {parent}: {t}"
            assert t.payload["child"] == cid and t.payload["state"] == "shipped", f"{tag} {t}"
            assert t.payload["result"] == {
                "item": int(t.payload["key"]),
                "effect_id": by_key[f"{cid}:{STEP}"]["effect_id"],
            }, f"{tag} {t}"
        gathered = row.context.get("children") or {}
        want = {
            str(i): {
                "state": "shipped",
                "result": {"item": i, "effect_id": by_key[f"{parent}.{i}:{STEP}"]["effect_id"]},
            }
            for i in range(CHILDREN)
        }
        assert gathered == want, f"{tag} {parent} gathered {_short(gathered)}"
        assert not await engine.store.timers(parent), f"{tag} {parent} has timers left"
        for kid in kids:
            kh = await engine.history(kid.id)
            assert [(t.event, t.to_state) for t in kh] == [
                ("$start", "shipping"),
                (STEP, "shipped"),
            ], f"{tag} {kid.id}: {[(t.event, t.to_state, t.actor) for t in kh]}"
            assert kid.context[STEP] == by_key[f"{kid.id}:{STEP}"], f"{tag} {kid.id}"
            ledger = await engine.store.steps(kid.id)
            assert [(s.step, s.status) for s in ledger] == [(STEP, "done")], f"{tag} {ledger}"
            assert ledger[0].result == by_key[f"{kid.id}:{STEP}"], f"{tag} {ledger}"
        for wid in (parent, *ids):
            got = await engine.check(wid)  # raises ReplayMismatch on a difference
            assert (got.state, got.version) == (everything[wid].state, everything[wid].version)
            replayed += 1
    # Each kill inside a child's step had the consequence it must have on the next run.
    for k in kills:
        key = f"{k.workflow_id}:{k.detail}"
        if k.detail != STEP:
            continue
        if k.point == "during_step":
            assert verdicts[key, "Applied"] >= 1, f"{tag} {key} killed after the call: {k}"
        elif k.point == "before_effect":
            assert verdicts[key, "NotApplied"] >= 1, f"{tag} {key} killed before it: {k}"
    return {
        "parents": len(parents),
        "children": len(expected_children),
        "effects": len(effects),
        "replayed": replayed,
        "reruns": sum(1 for e in effects if calls.get(e["key"], 0) > 1),
    }


class _Crew:
    """Three worker slots, each running a worker forked by the zygote, killed (from outside,
    or by its own plan) and replaced at once: the loop of ``test_distributed``."""

    def __init__(
        self,
        zygote: FamilyZygote,
        files: Files,
        db: str,
        rng: random.Random,
        seed: int,
        *,
        stall_seconds: float = 30.0,
        targeted: tuple[str, ...] = TARGETED,
    ) -> None:
        self.zygote = zygote
        self.files = files
        self.db = db
        self.rng = rng
        self.seed = seed
        self.stall_seconds = stall_seconds
        self.plans = FamilyPlans(rng, targeted=targeted)
        self.tally = Tally()
        self.children: list[Child] = []
        self.family_kills: Counter[str] = Counter()
        """Self-kills by ``point/detail``."""
        self.inflight = [InFlight(files.inflight(slot), create=True) for slot in range(SLOTS)]
        self.live: dict[int, Child] = {}
        self.next_kill = 0.0

    def fail(self, message: str, child: Child | None = None) -> None:
        tail = child.stderr_tail() if child is not None else ""
        pytest.fail(f"[seed {self.seed}] {message}{tail}", pytrace=False)

    def fork(self, slot: int, plan: str, *, final: bool = False) -> Child:
        n = len(self.children)
        tmp = self.files.tmp
        ready, err = tmp / f"ready-{n}", tmp / f"worker-{n}.err"
        foreign = not final and n % FOREIGN_EVERY == 1
        argv = worker_argv(
            self.files,
            self.db,
            mode="count",
            ready=ready,
            plan=plan,
            seed=self.seed * 10_000 + n,
            concurrency=self.rng.choice([2, 4, 8]),
            slot=slot,
            lease_seconds=LEASE,
            stall_seconds=self.stall_seconds,
            watch_interval=0.1,
            until=True,
            foreign=foreign,
        )
        argv += ["--cap", str(CAP)]
        pid = self.zygote.spawn(argv, tmp / f"worker-{n}.out", err)
        self.children.append(Child(n, slot, pid, plan, ready, err, foreign=foreign))
        return self.children[-1]

    def replacement_plan(self) -> str:
        return self.plans() if self.rng.random() < SELF_KILL_SHARE else ""

    def account(self, child: Child) -> None:
        settle(child, self.files.kill_log, self.tally, self.seed)
        kill = next((k for k in read_kills(self.files.kill_log) if k.pid == child.pid), None)
        if kill is not None:
            self.family_kills[f"{kill.point}/{kill.detail}"] += 1

    def start(self) -> None:
        self.live = {slot: self.fork(slot, self.replacement_plan()) for slot in range(SLOTS)}
        self.next_kill = time.monotonic() + self.rng.uniform(*KILL_GAP)

    def step(self) -> None:
        """Replace the workers that died (of their plans); kill one from outside when due."""
        codes = self.zygote.status([c.pid for c in self.live.values()])
        for slot, child in list(self.live.items()):
            if codes[child.pid] is not None:
                child.code = codes[child.pid]
                if child.code == 0:
                    self.fail("a worker exited although the test had not finished", child)
                self.account(child)
                self.live[slot] = self.fork(slot, self.replacement_plan())
        if time.monotonic() >= self.next_kill:
            slot = self.rng.randrange(SLOTS)
            victim = self.live[slot]
            kill_from_outside(
                self.zygote, victim, self.inflight[slot], self.rng, spread=0.02, aim_for=0.3
            )
            if victim.code is None:
                victim.code = self.zygote.wait(victim.pid, 5.0)
            self.account(victim)
            self.live[slot] = self.fork(slot, self.replacement_plan())
            self.next_kill = time.monotonic() + self.rng.uniform(*KILL_GAP)

    async def finish(self, engine: Engine, timeout: float = 120.0) -> float:
        """Let the workers finish (every workflow terminal): the killed ones are replaced by
        workers without a plan. How long it took."""
        self.files.until.touch()
        began = time.monotonic()
        finished: set[int] = set()
        while len(finished) < SLOTS:
            if time.monotonic() - began > timeout:
                stuck = [
                    (r.id, r.state, r.lease_owner, r.next_due_at, r.parked, r.cancel)
                    for r in await engine.store.list_workflows(
                        WorkflowFilter(terminal=False, limit=20)
                    )
                ]
                self.fail(
                    f"the workers did not finish in {timeout}s; non-terminal: {stuck}"
                    + _undelivered(stuck)
                )
            codes = self.zygote.status([c.pid for s, c in self.live.items() if s not in finished])
            for slot, child in self.live.items():
                if slot in finished or codes[child.pid] is None:
                    continue
                child.code = codes[child.pid]
                self.account(child)
                if child.code == 0:
                    finished.add(slot)
                else:
                    self.live[slot] = self.fork(slot, "", final=True)
            await asyncio.sleep(0.02)
        return time.monotonic() - began

    def check_kills(self, others: Collection[int] = ()) -> list[Kill]:
        """The self-kills of the workers (``others``: pids of other processes that may have
        written the kill log); checks the log against what the test saw."""
        seed, tally = self.seed, self.tally
        kills = [k for k in read_kills(self.files.kill_log) if k.pid not in others]
        assert len(kills) == sum(tally.self_kills.values()), f"[seed {seed}] kill log vs exits"
        assert tally.external_in_flight >= 1, f"[seed {seed}] no kill landed while calls ran"
        assert sum(1 for c in self.children if c.code == KILLED) == tally.total
        return kills

    def summary(self) -> str:
        t = self.tally
        return (
            f"self-kills {dict(self.family_kills)}; external {t.external}, "
            f"{t.external_in_flight} aimed while a call was in flight; of workers posing as "
            f"remote {t.foreign}; {self.zygote.spawned} processes forked, {t.clean_exits} "
            "workers exited cleanly"
        )

    def close(self) -> None:
        for counter in self.inflight:
            counter.close()


def _undelivered(rows: list[tuple[Any, ...]]) -> str:
    """A note on the rows ``(id, state, lease_owner, next_due_at, parked, cancel)`` that hold
    a cancel request no worker will deliver (no lease, nothing due)."""
    lost = [r[0] for r in rows if r[5] is not None and r[2] is None and r[3] is None]
    if not lost:
        return ""
    return (
        f"\n{lost}: a cancel request is recorded, but no worker holds them and nothing is due:"
        " nobody will deliver it, and cancel_orphans skips rows with a request (the request "
        "landed as its worker let go, and the canceller's retry took its own request for one "
        "pending with the worker: statewright/engine/cancel.py, _replayed)"
    )


def _by_verdict(verdicts: Counter[tuple[str, str]]) -> Counter[str]:
    by: Counter[str] = Counter()
    for (_, verdict), n in verdicts.items():
        by[verdict] += n
    return by


@pytest.mark.alone
@pytest.mark.acceptance
@pytest.mark.parametrize("store", STORES)
async def test_fan_out_under_sigkill_every_child_once_heard_once(
    store: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    torture = torture_enabled(request.config)
    target = TORTURE_KILLS if torture else KILLS
    seed = crash_seed()
    name = f"children crash test [{store}, count, {SLOTS} workers]"
    print(f"\n{name} seed={seed} target={target}", flush=True)
    rng = random.Random(seed)
    db = _db(store, tmp_path, request)
    files = Files(tmp_path)
    started = time.monotonic()
    deadline = started + (TORTURE_BUDGET if torture else BUDGET)
    service = Service(files.service, mode="count")
    parents: list[str] = []

    engine = Engine(store_from_url(db), make_types(service))
    async with engine, contextlib.AsyncExitStack() as stack:
        zygote = stack.enter_context(FamilyZygote(tmp_path / "zygote.err"))
        crew = _Crew(zygote, files, db, rng, seed)
        stack.callback(crew.close)

        async def top_up(n: int) -> None:
            for _ in range(n):
                pid = f"fam-{len(parents):04d}"
                await engine.start(PARENT, {OVER: list(range(CHILDREN))}, workflow_id=pid)
                parents.append(pid)

        await top_up(PARENTS_FIRST)
        crew.start()
        next_top_up = 0.0

        # -- kill, replace, kill again; add parents as they end ---------------------------
        while crew.tally.total < target:
            now = time.monotonic()
            if now > deadline:
                crew.fail(f"only {crew.tally.total} kills within the time budget")
            crew.step()
            if now >= next_top_up:
                left = await engine.store.list_workflows(
                    WorkflowFilter(type=PARENT, terminal=False, limit=LOW_WATER)
                )
                if len(left) < LOW_WATER:
                    await top_up(TOP_UP)
                next_top_up = now + 0.25
            await asyncio.sleep(0.02)
        killing = time.monotonic() - started

        # -- then let the workers finish ------------------------------------------------
        await crew.finish(engine)
        elapsed = time.monotonic() - started
        kills = crew.check_kills()
        verdicts = read_verdicts(files.journal)
        verified = await _verify_fan_out(
            engine, service, parents, kills=kills, verdicts=verdicts, seed=seed
        )
    service.close()
    by_verdict = _by_verdict(verdicts)
    assert by_verdict["Applied"] >= 1 and by_verdict["NotApplied"] >= 1, (
        f"[seed {seed}] reconcile never saw both answers: {dict(by_verdict)}"
    )
    print(
        f"{name} seed={seed}: {crew.tally.total} kills in {killing:.1f}s, {elapsed:.1f}s in "
        f"all ({crew.summary()}); reconcile verdicts {dict(by_verdict)}; "
        f"{verified['parents']} parents x {CHILDREN} children (cap {CAP}), "
        f"{verified['effects']} effects, each once; {verified['replayed']} workflows replayed "
        "equal to their rows"
    )


# -- cancel mid-fan-out ----------------------------------------------------------------------

CANCEL_CHILDREN = 20
CANCEL_AFTER = 10
"""Cancel the parent once this many children exist."""
HOLD = 0.5
"""Seconds a running child's handler takes (checking for a cancel) before its step."""
SETTLE_BOUND = 3 * LEASE + 5
"""Seconds after the parent's end within which no child may be live: a recovery round comes
every lease (a worker's first at once), and a leased child's request reaches its handler
within its hold loop's 0.05 s."""


def _cancel_parcels() -> list[dict[str, Any]]:
    """Every fourth child (1, 5, 9, ...) goes to ``waiting`` (no handler: only a cancel ends
    it); the others hold :data:`HOLD` seconds in their handler, then ship. With the cap, the
    waiting ones pile up and the fan-out keeps starting the next."""
    return [
        {"item": i, "wait": True} if i % 4 == 1 else {"item": i, "hold": HOLD}
        for i in range(CANCEL_CHILDREN)
    ]


@pytest.mark.alone
@pytest.mark.acceptance
@pytest.mark.parametrize("store", STORES)
@pytest.mark.parametrize("who", ["cascade", "canceller_dies"])
async def test_cancel_mid_fan_out_leaves_no_live_child(
    store: str, who: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    seed = crash_seed()
    name = f"children cancel test [{store}, {who}]"
    print(f"\n{name} seed={seed}", flush=True)
    rng = random.Random(seed)
    db = _db(store, tmp_path, request)
    files = Files(tmp_path)
    service = Service(files.service, mode="count")
    die = who == "canceller_dies"
    # With "canceller_dies" whichever process applies the parent's cancel (the canceller, or a
    # worker delivering the request when the parent was leased) SIGKILLs itself right after.
    plan = f"after_transition/{CANCELLED}:1" if die else ""
    children: list[Child] = []
    parent = "cancel-me"

    def fail(message: str) -> None:
        tails = "".join(c.stderr_tail() for c in children)
        pytest.fail(f"[seed {seed}] {message}{tails}", pytrace=False)

    engine = Engine(store_from_url(db), make_types(service))
    async with engine, contextlib.AsyncExitStack() as stack:
        zygote = stack.enter_context(FamilyZygote(tmp_path / "zygote.err"))

        crew = _Crew(zygote, files, db, rng, seed, stall_seconds=120.0)
        children = crew.children

        def fork(slot: int) -> Child:
            return crew.fork(slot, plan, final=True)  # final: never posing as remote

        await engine.start(PARENT, {OVER: _cancel_parcels()}, workflow_id=parent)
        live = {slot: fork(slot) for slot in range(SLOTS)}

        # -- let the fan-out get going: some children waiting, some running ----------------
        until = time.monotonic() + 60
        while True:
            kids = await _all_children(engine, parent)
            waiting = [k for k in kids if k.state == "waiting"]
            running = [k for k in kids if k.state == "shipping" and k.lease_owner]
            if len(kids) >= CANCEL_AFTER and waiting and running:
                break
            if time.monotonic() > until:
                fail(f"the fan-out did not get going: {[(k.id, k.state) for k in kids]}")
            codes = zygote.status([c.pid for c in live.values()])
            if any(code is not None for code in codes.values()):
                fail(f"a worker exited before the cancel: {codes}")
            await asyncio.sleep(0.01)
        before = {k.id: k.state for k in kids}

        # -- cancel the parent -------------------------------------------------------------
        canceller: Child | None = None
        if die:
            n = len(children)
            err = tmp_path / f"canceller-{n}.err"
            argv = ["cancel", "--db", db, "--service", str(files.service)]
            argv += ["--kill-log", str(files.kill_log), "--parent", parent, "--die"]
            pid = zygote.spawn(argv, tmp_path / f"canceller-{n}.out", err)
            canceller = Child(n, -1, pid, "cancel --die", tmp_path / "none", err)
            canceller.code = zygote.wait(pid, 30.0)
            if canceller.code not in (0, KILLED):
                fail(f"the canceller exited {canceller.code}{canceller.stderr_tail()}")
        else:
            await engine.cancel(parent, reason="called off by the test", actor="test")
        cancelled_at = time.monotonic()

        # -- the parent ends; within the bound, no child is live ----------------------------
        ended_row: WorkflowRow | None = None
        while True:
            row = await engine.get(parent)
            if row.terminal and ended_row is None:
                ended_row = row
                ended_seen = time.monotonic()
            kids = await _all_children(engine, parent)
            live_kids = [k for k in kids if not k.terminal]
            if ended_row is not None and not live_kids:
                break
            if time.monotonic() - (ended_seen if ended_row else cancelled_at) > SETTLE_BOUND:
                stuck = [
                    (k.id, k.state, k.lease_owner, k.next_due_at, k.parked, k.cancel)
                    for k in live_kids
                ]
                fail(
                    f"parent {row.state} (ended: {ended_row is not None}); live children "
                    f"{stuck} {SETTLE_BOUND}s after" + _undelivered(stuck)
                )
            # A worker that died (the one that applied the cancel) is replaced at once.
            codes = zygote.status([c.pid for c in live.values()])
            for slot, child in list(live.items()):
                if codes[child.pid] is not None:
                    child.code = codes[child.pid]
                    if child.code != KILLED or not die:
                        fail(f"worker {child.pid} exited {child.code}")
                    live[slot] = fork(slot)
            await asyncio.sleep(0.02)
        settled_after = time.monotonic() - ended_seen
        assert ended_row is not None and ended_row.state == CANCELLED, ended_row

        # -- no child is created after the end, however long the workers run on ------------
        count_at_end = len(kids)
        await asyncio.sleep(2 * LEASE)
        later = await _all_children(engine, parent)
        assert len(later) == count_at_end and all(k.terminal for k in later), (
            f"[seed {seed}] after the parent's end: {count_at_end} children, then "
            f"{[(k.id, k.state) for k in later]}"
        )
        files.until.touch()
        for child in live.values():
            code = zygote.wait(child.pid, 60.0)
            # With "canceller_dies", the worker that made the last child's cancel transition
            # (the one that let the loop above end) may die of its plan just after it.
            if code != 0 and not (die and code == KILLED):
                fail(f"worker {child.pid} ended with {code} after the test")
            child.code = code

        history = await engine.history(parent)
        end = history[-1]
        assert (end.event, end.to_state) == ("cancel", CANCELLED), f"[seed {seed}] {end}"
        starts: dict[str, int] = {}  # log order (seq), not the clock: see _verify_cancelled
        cancelled: list[str] = []
        shipped: list[str] = []
        by_reason: Counter[str] = Counter()
        for kid in later:
            kh = await engine.history(kid.id)
            starts[kid.id] = kh[0].seq
            if kid.state == "cancelled":
                cancelled.append(kid.id)
                reason = kh[-1].payload.get("reason", "")
                assert kh[-1].event == "cancel" and reason.startswith(f"parent {parent} ended"), (
                    f"[seed {seed}] {kid.id} cancelled by {kh[-1]}"
                )
                by_reason[reason] += 1
            else:
                assert kid.state == "shipped", f"[seed {seed}] {kid.id} ended {kid.state}"
                shipped.append(kid.id)
        late = {k: seq for k, seq in starts.items() if seq > end.seq}
        assert not late, (
            f"[seed {seed}] children created after the parent ended as #{end.seq}: {late}"
        )
        waited = [k for k, s in before.items() if s == "waiting"]
        assert set(waited) <= set(cancelled), f"[seed {seed}] waiting children not cancelled"
        assert len(cancelled) >= 2, f"[seed {seed}] only {cancelled} cancelled"
        # Those the parent heard of ended before it; none twice.
        heard = Counter(t.payload["key"] for t in history if t.event.startswith("child_"))
        assert all(n == 1 for n in heard.values()), f"[seed {seed}] heard twice: {heard}"
        assert {f"{parent}.{k}" for k in heard} <= {k.id for k in later}
        assert not await engine.store.timers(parent), f"[seed {seed}] timers left on the parent"
        # Effects once each, for the children that shipped (and reached their step).
        per_key = Counter(e["key"] for e in service.effects())
        assert all(n == 1 for n in per_key.values()), f"[seed {seed}] doubled: {per_key}"
        assert {f"{k}:{STEP}" for k in shipped} <= set(per_key)
        for wid in (parent, *(k.id for k in later)):
            await engine.check(wid)  # replay equals the row

        kills = read_kills(files.kill_log)
        if die:
            # The process that applied the parent's cancel died right after it, before it
            # could cancel a child: every child's cancel came from a recovery round.
            assert [(k.point, k.workflow_id, k.detail) for k in kills] == [
                ("after_transition", parent, CANCELLED)
            ], f"[seed {seed}] kills {kills}"
            assert set(by_reason) == {f"parent {parent} ended"}, by_reason
            who_died = "the canceller" if canceller and canceller.code == KILLED else "a worker"
        else:
            assert not kills
            who_died = "nobody"
        summary = {
            "created": len(later),
            "before cancel": dict(Counter(before.values())),
            "cancelled": len(cancelled),
            "shipped": len(shipped),
            "heard": len(heard),
            "reasons": dict(by_reason),
        }
    service.close()
    for counter in crew.inflight:
        counter.close()
    print(
        f"{name} seed={seed}: {json.dumps(summary)}; died after applying the cancel: "
        f"{who_died}; no child live {settled_after:.2f}s after the parent's end was seen"
    )


# -- cancels mid-fan-out while workers are killed --------------------------------------------

MIXED_CHILDREN = 20
CANCEL_KILLS = 30
DIE_SHARE = 1 / 3
"""Share of the parents cancelled by a process of their own that dies right after the
parent's cancel transition (its children left to the workers' recovery rounds)."""
CANCEL_BY = 4.0
"""A parent not cancelled this many seconds after it started is cancelled then."""


def _mixed_parcels(rng: random.Random) -> list[dict[str, Any]]:
    """Children of three kinds: quick (ship at once), slow (hold up to 0.3 s in their handler,
    checking for a cancel), waiting (ship, then wait in a state without a handler until a
    cancel). Child 1 always waits, so no parent can end but by its cancel."""
    parcels: list[dict[str, Any]] = []
    for i in range(MIXED_CHILDREN):
        kind = "wait" if i == 1 else rng.choice(["quick", "slow", "wait", "quick"])
        if kind == "wait":
            parcels.append({"item": i, "wait": True})
        elif kind == "slow":
            parcels.append({"item": i, "hold": round(rng.uniform(0.05, 0.3), 3)})
        else:
            parcels.append({"item": i})
    return parcels


async def _verify_cancelled(
    engine: Engine,
    service: Service,
    parents: dict[str, list[dict[str, Any]]],
    *,
    kills: list[Kill],
    verdicts: Counter[tuple[str, str]],
    seed: int,
) -> dict[str, Any]:
    """Every parent ended by its cancel, none of its children live or created after its end,
    every child heard at most once, every effect at most once, replay equal to every row."""
    tag = f"[seed {seed}]"
    everything = {r.id: r for r in await _all_rows(engine)}
    effects = service.effects()
    per_key = Counter(e["key"] for e in effects)
    doubled = {k: n for k, n in per_key.items() if n != 1}
    assert not doubled, f"{tag} effects applied more than once: {_short(doubled)}"
    repeated = {k: n for k, n in service.calls().items() if n != 1}
    assert not repeated, f"{tag} the service was called more than once: {_short(repeated)}"
    by_key = {e["key"]: e for e in effects}
    stats: Counter[str] = Counter()
    live = {w: (r.state, r.lease_owner, r.cancel) for w, r in everything.items() if not r.terminal}
    assert not live, f"{tag} live after the end: {_short(live)}"
    parked = {w: r.parked for w, r in everything.items() if r.parked}
    assert not parked, f"{tag} parked: {_short(parked)}"
    known = set(parents)
    for parent, parcels in parents.items():
        row = everything[parent]
        assert row.state == CANCELLED, f"{tag} {parent} ended {row.state}"
        history = await engine.history(parent)
        end = history[-1]
        assert (end.event, end.to_state) == ("cancel", CANCELLED), f"{tag} {parent}: {end}"
        kids = await _all_children(engine, parent)
        known.update(k.id for k in kids)
        # fan_out starts children in list order: those that exist are a prefix of the list.
        ids = [k.id for k in kids]
        assert sorted(ids) == sorted(f"{parent}.{i}" for i in range(len(kids))), (
            f"{tag} {parent}'s children are not a prefix of its list: {ids}"
        )
        stats["children"] += len(kids)
        heard = [t for t in history if t.event.startswith("child_")]
        keys = Counter(t.payload["key"] for t in heard)
        assert all(n == 1 for n in keys.values()), f"{tag} {parent} heard twice: {keys}"
        stats["heard"] += len(heard)
        for kid in kids:
            assert kid.parent == parent, f"{tag} {kid.id} linked to {kid.parent}"
            kh = await engine.history(kid.id)
            # In the log's order (seq), not by the clock: a record's `at` is read when its
            # command is built, and the parent's end may wait on the row lock a child's create
            # holds (parent_of_child), so an end ordered after a create can carry an earlier
            # time. What must hold is that no child is written after its parent's end.
            assert kh[0].seq < end.seq, (
                f"{tag} {kid.id} created as #{kh[0].seq}, after its parent ended as #{end.seq}"
            )
            parcel = parcels[int(kid.parent_key or -1)]
            key = f"{kid.id}:{STEP}"
            ledger = {s.step: s for s in await engine.store.steps(kid.id)}
            if kid.state == "cancelled":
                reason = kh[-1].payload.get("reason", "")
                assert kh[-1].event == "cancel" and reason.startswith(f"parent {parent} ended"), (
                    f"{tag} {kid.id} cancelled by {kh[-1]}"
                )
                stats[f"cancelled in {kh[-1].from_state}"] += 1
                stats[
                    "cancelled by recovery"
                    if reason == f"parent {parent} ended"
                    else "cancelled by the cascade"
                ] += 1
            else:
                assert kid.state == "shipped" and not parcel.get("wait"), (
                    f"{tag} {kid.id} ({parcel}) ended {kid.state}"
                )
                assert key in per_key, f"{tag} {kid.id} shipped without its effect"
                stats["shipped"] += 1
            rec = ledger.get(STEP)
            if key in per_key and kid.state == "cancelled" and rec and rec.status == "executing":
                # Its worker died after the call; the child was cancelled before a run could
                # reconcile the step: the effect happened once, the ledger never learnt it.
                stats["cancelled with an applied step left executing"] += 1
            elif key in per_key:
                assert rec is not None and rec.status == "done", (
                    f"{tag} {kid.id}: the service applied {key}, its ledger says {rec}"
                )
                assert rec.result == by_key[key], f"{tag} {rec} vs {by_key[key]}"
            else:
                assert STEP not in ledger or ledger[STEP].status != "done", f"{tag} {ledger}"
        for t in heard:
            cid = f"{parent}.{t.payload['key']}"
            kid_row = everything[cid]
            assert t.payload["state"] == kid_row.state, f"{tag} {parent} heard {t.payload}"
            assert t.payload["child"] == cid and t.actor == f"timer for child {cid}", t
        gathered = row.context.get("children") or {}
        assert set(gathered) == set(keys), f"{tag} {parent} gathered {sorted(gathered)}"
        assert not await engine.store.timers(parent), f"{tag} {parent} has timers left"
    assert set(everything) == known, f"{tag} unexpected: {_short(set(everything) - known)}"
    for wid in sorted(known):
        got = await engine.check(wid)  # raises ReplayMismatch on a difference
        assert (got.state, got.version) == (everything[wid].state, everything[wid].version)
    for k in kills:
        key = f"{k.workflow_id}:{k.detail}"
        if k.detail != STEP or everything[k.workflow_id].state == "cancelled":
            continue  # a child cancelled before it ran again never asked
        if k.point == "during_step":
            assert verdicts[key, "Applied"] >= 1, f"{tag} {key} killed after the call: {k}"
        elif k.point == "before_effect":
            assert verdicts[key, "NotApplied"] >= 1, f"{tag} {key} killed before it: {k}"
    stats["workflows"] = len(known)
    stats["effects"] = len(effects)
    return dict(stats)


@pytest.mark.alone
@pytest.mark.acceptance
@pytest.mark.parametrize("store", STORES)
async def test_cancels_mid_fan_out_under_sigkill_leave_no_live_child(
    store: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Parents of quick, slow and waiting children, each cancelled at a random point of its
    fan-out (by the test, or by a process that dies right after the cancel), while the
    workers are killed again and again; some workers' plans kill them right after they
    deliver a parent's cancel. Afterwards no child is live, none was created after its
    parent's end, each was heard at most once, each effect happened at most once (exactly
    once for a shipped child), and replay equals every row."""
    torture = torture_enabled(request.config)
    target = TORTURE_KILLS if torture else CANCEL_KILLS
    seed = crash_seed()
    name = f"children cancel crash test [{store}, count, {SLOTS} workers]"
    print(f"\n{name} seed={seed} target={target}", flush=True)
    rng = random.Random(seed)
    db = _db(store, tmp_path, request)
    files = Files(tmp_path)
    started = time.monotonic()
    deadline = started + (TORTURE_BUDGET if torture else BUDGET)
    service = Service(files.service, mode="count")
    parents: dict[str, list[dict[str, Any]]] = {}
    threshold: dict[str, tuple[int, float]] = {}  # parent -> (children to wait for, by when)
    asked: set[str] = set()
    cancellers: dict[int, Child] = {}
    died_cancelling = 0
    by_test = 0

    engine = Engine(store_from_url(db), make_types(service))
    async with engine, contextlib.AsyncExitStack() as stack:
        zygote = stack.enter_context(FamilyZygote(tmp_path / "zygote.err"))
        # Plans also aim at a worker's delivery of a parent's cancel (it dies right after).
        targeted = (*TARGETED, f"after_transition/{CANCELLED}")
        crew = _Crew(zygote, files, db, rng, seed, targeted=targeted)
        stack.callback(crew.close)

        async def top_up(n: int) -> None:
            for _ in range(n):
                pid = f"fam-{len(parents):04d}"
                parcels = _mixed_parcels(rng)
                await engine.start(PARENT, {OVER: parcels}, workflow_id=pid)
                parents[pid] = parcels
                threshold[pid] = (rng.randint(0, 12), time.monotonic() + CANCEL_BY)

        def spawn_canceller(parent: str) -> None:
            n = len(crew.children) + len(cancellers)
            err = tmp_path / f"canceller-{n}.err"
            argv = ["cancel", "--db", db, "--service", str(files.service)]
            argv += ["--kill-log", str(files.kill_log), "--parent", parent, "--die"]
            pid = zygote.spawn(argv, tmp_path / f"canceller-{n}.out", err)
            cancellers[pid] = Child(n, -1, pid, f"cancel {parent}", tmp_path / "none", err)

        def reap_cancellers() -> None:
            nonlocal died_cancelling
            running = [p for p, c in cancellers.items() if c.code is None]
            if not running:
                return
            for pid, code in zygote.status(running).items():
                if code is None:
                    continue
                c = cancellers[pid]
                c.code = code
                if code == KILLED:
                    assert any(k.pid == pid for k in read_kills(files.kill_log)), c.plan
                    died_cancelling += 1
                elif code != 0:
                    crew.fail(f"canceller ({c.plan}) exited {code}", c)

        async def cancel_due() -> None:
            nonlocal by_test
            for parent, (n, by) in threshold.items():
                if parent in asked:
                    continue
                kids = await engine.store.children(parent, limit=MIXED_CHILDREN + 1)
                if len(kids) < n and time.monotonic() < by:
                    continue
                asked.add(parent)
                if rng.random() < DIE_SHARE:
                    spawn_canceller(parent)
                    continue
                try:
                    await engine.cancel(parent, reason="called off by the test", actor="test")
                except IllegalTransition as exc:
                    row = await engine.get(parent)
                    last = (await engine.history(parent))[-1]
                    crew.fail(
                        f"engine.cancel({parent!r}) raised {exc!r}, yet the parent is now "
                        f"{row.state} by {last.event} {last.payload} from {last.actor!r}: the "
                        "cancel request this call recorded was delivered while it looked again "
                        "(see the report on statewright/engine/cancel.py)"
                    )
                except VersionConflict:  # busy: try again at the next look
                    asked.discard(parent)
                    continue
                by_test += 1

        await top_up(PARENTS_FIRST)
        crew.start()
        next_look = 0.0
        while crew.tally.total < target:
            now = time.monotonic()
            if now > deadline:
                crew.fail(f"only {crew.tally.total} kills within the time budget")
            crew.step()
            reap_cancellers()
            if now >= next_look:
                await cancel_due()
                left = [p for p in parents if p not in asked]
                if len(left) < LOW_WATER:
                    await top_up(TOP_UP)
                next_look = now + 0.1
            await asyncio.sleep(0.02)
        killing = time.monotonic() - started
        # Cancel what is left, then let the workers finish (recovery rounds included).
        for parent in parents:
            threshold[parent] = (0, 0.0)
        await cancel_due()
        while any(c.code is None for c in cancellers.values()):
            reap_cancellers()
            await asyncio.sleep(0.02)
        finishing = await crew.finish(engine, timeout=25.0)
        elapsed = time.monotonic() - started
        kills = crew.check_kills(others=set(cancellers))
        verdicts = read_verdicts(files.journal)
        stats = await _verify_cancelled(
            engine, service, parents, kills=kills, verdicts=verdicts, seed=seed
        )
    service.close()
    print(
        f"{name} seed={seed}: {crew.tally.total} kills in {killing:.1f}s, all terminal "
        f"{finishing:.1f}s after the last cancel, {elapsed:.1f}s in all ({crew.summary()}); "
        f"{len(parents)} parents cancelled ({by_test} by the test, {len(cancellers)} by "
        f"cancellers of which {died_cancelling} died right after the cancel); {stats}"
    )
