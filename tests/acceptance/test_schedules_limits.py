"""Schedules and limits with three worker processes on one PostgreSQL.

- A cron schedule fired by three racing workers (a shared clock the test moves, polling every
  20 ms) starts exactly one workflow per tick: tick by tick, and after a jump of half an hour
  (``catch_up="all"``: every missed tick once; ``latest``: the latest only).
- ``max_concurrent=2`` holds across three workers of four slots each: the handlers' own log
  of start and end times never shows more than two running at once.

Each worker process (tests/acceptance/apps/scheduled.py) is forked from a fork server that
imported it once (tests/forkserver.py): a real process of its own, signalled and SIGKILLed as
any, without an interpreter start-up per worker and per respawn.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from statewright import Engine, store_from_url
from statewright.clock import ManualClock
from statewright.types import WorkflowFilter
from tests.acceptance.apps.scheduled import make_types
from tests.forkserver import Child, ForkServer

ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2027, 1, 15, 8, 3, tzinfo=UTC).timestamp()
APP = "tests.acceptance.apps.scheduled:run"


@pytest.fixture(scope="module")
def forks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForkServer]:
    """A fork server of worker processes (tests/forkserver.py): each runs
    ``tests.acceptance.apps.scheduled`` on its arguments, as ``python -m`` would, without an
    interpreter start-up and its imports; the PostgreSQL store's modules are imported once
    here, its connections opened by each child."""
    log = tmp_path_factory.mktemp("scheduled-forks") / "server.log"
    preload = ["statewright.store.postgres"]
    with ForkServer(log, APP, preload=preload, name="scheduled-worker fork server") as server:
        yield server


def _spawn(
    forks: ForkServer, dsn: str, log: Path, clock: Path | None, name: str, *extra: str
) -> Child:
    argv = ["--db", dsn, "--log", str(log), "--hold", "0.25", "--concurrency", "4"]
    if clock is not None:
        argv += ["--clock", str(clock)]
    argv += extra
    err = log.parent / f"{name}.err"
    return forks.popen(argv, Path(os.devnull), err, cwd=ROOT)


def _lines(log: Path) -> list[list[str]]:
    return [ln.split() for ln in log.read_text().splitlines()] if log.exists() else []


def _set_clock(path: Path, at: float) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(repr(at))
    os.replace(tmp, path)  # atomic: a reader sees the old time or the new one


async def _until(what: str, check, procs: list[Child], timeout: float = 30):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        result = await check()
        if result:
            return result
        for p in procs:
            if p.poll() is not None:
                pytest.fail(f"a worker exited ({p.returncode}) while waiting for {what}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def _stop(procs: list[Child]) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _stamp(hh: int, mm: int) -> str:
    return f"20270115T{hh:02d}{mm:02d}00Z"


@pytest.mark.acceptance
async def test_three_workers_start_one_workflow_per_tick(
    pg_dsn: str, tmp_path: Path, forks: ForkServer
) -> None:
    log, clock_file = tmp_path / "log", tmp_path / "clock"
    _set_clock(clock_file, T0)
    engine = Engine(store_from_url(pg_dsn), make_types(str(log), 0.0), clock=ManualClock(T0))
    procs: list[Child] = []
    async with engine:
        await engine.schedule_start("ticked", "* * * * *", schedule_id="minutely", catch_up="all")
        await engine.schedule_start("ticked", "*/5 * * * *", schedule_id="five")
        try:
            procs = [_spawn(forks, pg_dsn, log, clock_file, n) for n in "abc"]

            async def ready() -> bool:
                return sum(1 for ln in _lines(log) if ln[0] == "ready") == 3

            await _until("three workers", ready, procs)

            async def done_count() -> int:
                rows = await engine.list_workflows(WorkflowFilter(terminal=True, limit=1000))
                return len(rows)

            expected = set()
            # Tick by tick: 08:04 ... 08:11, the three workers racing for each.
            for k in range(1, 9):
                _set_clock(clock_file, T0 + 60 * k)
                minute = 3 + k
                expected.add(f"minutely.{_stamp(8, minute)}")
                if minute % 5 == 0:
                    expected.add(f"five.{_stamp(8, minute)}")
                n = len(expected)

                async def caught_up(n: int = n) -> bool:
                    return await done_count() >= n

                await _until(f"the tick at 08:{minute:02d}", caught_up, procs)
            # Half an hour without a tick being fired, then all at once (08:12 ... 08:41).
            _set_clock(clock_file, T0 + 60 * 38)
            expected |= {f"minutely.{_stamp(8, m)}" for m in range(12, 42)}
            expected.add(f"five.{_stamp(8, 40)}")  # catch_up="latest": 08:15..08:35 skipped

            async def all_done() -> bool:
                return await done_count() >= len(expected)

            await _until("the missed ticks", all_done, procs)
            await asyncio.sleep(1.0)  # time for a doubled start to show, if there were one
        finally:
            _stop(procs)
        rows = await engine.list_workflows(WorkflowFilter(limit=1000))
        assert {r.id for r in rows} == expected
        assert all(r.state == "done" for r in rows)
        lines = _lines(log)
        fired = Counter(ln[1] for ln in lines if ln[0] == "fired")
        ran = Counter(ln[1] for ln in lines if ln[0] == "run")
        assert set(fired) == expected and set(fired.values()) == {1}, fired
        assert set(ran) == expected and set(ran.values()) == {1}, ran
        firing_pids = {ln[2] for ln in lines if ln[0] == "fired"}
        print(f"{len(expected)} ticks, fired by {len(firing_pids)} worker processes")
        for schedule in await engine.schedules():
            assert schedule.next_at > T0 + 60 * 38 and schedule.last_error is None


@pytest.mark.acceptance
async def test_max_concurrent_holds_across_three_workers(
    pg_dsn: str, tmp_path: Path, forks: ForkServer
) -> None:
    log = tmp_path / "log"
    engine = Engine(store_from_url(pg_dsn), make_types(str(log), 0.0))
    procs: list[Child] = []
    n = 16
    async with engine:
        for i in range(n):
            await engine.start("limited", {}, workflow_id=f"lim-{i:02d}")
        try:
            procs = [_spawn(forks, pg_dsn, log, None, name) for name in "abc"]

            async def finished() -> bool:
                rows = await engine.list_workflows(WorkflowFilter(terminal=True, limit=100))
                return len(rows) == n

            await _until("every limited workflow", finished, procs, timeout=60)
        finally:
            _stop(procs)
    lines = _lines(log)
    starts = [ln for ln in lines if ln[0] == "start"]
    ends = [ln for ln in lines if ln[0] == "end"]
    assert len(starts) == len(ends) == n
    events = sorted(
        [(float(ln[3]), 1, ln[1]) for ln in starts] + [(float(ln[3]), -1, ln[1]) for ln in ends],
        key=lambda e: (e[0], e[1]),  # at equal times an end counts first
    )
    running = peak = 0
    for _, delta, _ in events:
        running += delta
        peak = max(peak, running)
    pids = {ln[2] for ln in starts}
    print(f"peak {peak} running at once, handlers run by {len(pids)} worker processes")
    assert peak <= 2
    assert peak == 2  # the limit was reached, not merely never tested


@pytest.mark.acceptance
async def test_workers_killed_between_start_and_advance_lose_and_double_no_tick(
    pg_dsn: str, tmp_path: Path, forks: ForkServer
) -> None:
    """Each worker SIGKILLs itself half the times it has just started a tick's workflow,
    before the schedule moved on; it is replaced at once. The next worker starts the same
    tick again (finding the workflow) and advances the schedule."""
    log, clock_file = tmp_path / "log", tmp_path / "clock"
    _set_clock(clock_file, T0)
    engine = Engine(store_from_url(pg_dsn), make_types(str(log), 0.0), clock=ManualClock(T0))
    extra = ("--die-after-fire", "0.5", "--lease-seconds", "2")
    procs: dict[str, Child] = {}
    replaced = 0

    def respawn() -> None:
        nonlocal replaced
        for name in "abc":
            p = procs.get(name)
            if p is not None and p.poll() is None:
                continue
            if p is not None:
                assert p.returncode == -9, f"worker {name} exited {p.returncode}"
                replaced += 1
            procs[name] = _spawn(forks, pg_dsn, log, clock_file, name, *extra)

    async def wait_done(n: int, what: str) -> None:
        deadline = time.monotonic() + 60
        while len(await engine.list_workflows(WorkflowFilter(terminal=True, limit=1000))) < n:
            respawn()
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            await asyncio.sleep(0.05)

    async with engine:
        await engine.schedule_start("ticked", "* * * * *", schedule_id="m", catch_up="all")
        try:
            respawn()
            expected = set()
            for k in range(1, 21):
                _set_clock(clock_file, T0 + 60 * k)
                expected.add(f"m.{_stamp(8, 3 + k)}")
                await wait_done(len(expected), f"tick {k}")
            # Ten missed ticks at once, fired by workers that keep dying.
            _set_clock(clock_file, T0 + 60 * 30)
            expected |= {f"m.{_stamp(8, m)}" for m in range(24, 34)}
            await wait_done(len(expected), "the missed ticks")
            await asyncio.sleep(1.0)
        finally:
            _stop(list(procs.values()))
        rows = await engine.list_workflows(WorkflowFilter(limit=1000))
        assert {r.id for r in rows} == expected
        assert all(r.state == "done" for r in rows)
        lines = _lines(log)
        fired = Counter(ln[1] for ln in lines if ln[0] == "fired")
        kills = sum(1 for ln in lines if ln[0] == "killed")
        assert set(fired) == expected and set(fired.values()) == {1}, fired
        [schedule] = await engine.schedules()
        assert schedule.next_at == T0 + 60 * 31 and schedule.last_error is None
        print(
            f"{len(expected)} ticks, {kills} kills between start and advance, {replaced} respawns"
        )
        assert kills >= 3 and replaced >= kills - 3


@pytest.mark.alone
@pytest.mark.acceptance
async def test_max_per_second_holds_across_three_workers(
    pg_dsn: str, tmp_path: Path, forks: ForkServer
) -> None:
    """Five a second with a burst of one, three workers sharing the bucket: over any stretch
    of t seconds at most 1 + 5t handlers start (one more for the jitter between a claim and
    its handler's first line)."""
    log = tmp_path / "log"
    engine = Engine(store_from_url(pg_dsn), make_types(str(log), 0.0))
    procs: list[Child] = []
    n = 15
    async with engine:
        for i in range(n):
            await engine.start("rated", {}, workflow_id=f"r-{i:02d}")
        try:
            procs = [_spawn(forks, pg_dsn, log, None, name) for name in "abc"]

            async def finished() -> bool:
                rows = await engine.list_workflows(WorkflowFilter(terminal=True, limit=100))
                return len(rows) == n

            await _until("every rated workflow", finished, procs, timeout=60)
        finally:
            _stop(procs)
    starts = sorted(float(ln[3]) for ln in _lines(log) if ln[0] == "rated")
    assert len(starts) == n
    worst = max(
        (j - i + 1) - (1 + 5.0 * (starts[j] - starts[i])) for i in range(n) for j in range(i, n)
    )
    pids = {ln[2] for ln in _lines(log) if ln[0] == "rated"}
    span = starts[-1] - starts[0]
    print(f"{n} starts over {span:.2f}s by {len(pids)} processes; worst excess {worst:.2f}")
    assert worst <= 1.0
    assert span >= (n - 1 - 1) / 5.0  # the bucket, not the workers, set the pace
