"""Transactional steps under crashes: the application's rows equal exactly the transitions
that committed, never one without the other, never twice (issue 26, item 1).

Workflows of four states each write one application row in the transaction of each
transition (:mod:`tests.acceptance.crash.tx_worker`). Worker processes are SIGKILLed, from
inside a transactional step (after its insert, before the commit) and from outside at a
random moment; on PostgreSQL the server is also crashed (``pg_ctl stop -m immediate``) and
started again under running workers. In the end every workflow is done along its path, and
the rows of ``app_rows`` are exactly one per committed transition (its workflow, the state
it left and the version it made).

Reproduce a run with ``STATEWRIGHT_CRASH_SEED=<seed>``; ``--torture`` kills ten times more.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from statewright import Engine, store_from_url
from statewright.errors import StoreError
from statewright.store import SQLiteStore
from statewright.store.postgres import PostgresStore
from tests.acceptance.crash.harness import KILLED, crash_seed
from tests.acceptance.crash.tx_worker import PATH, TABLE, make_type
from tests.conftest import start_pgserver, stop_pgserver
from tests.forkserver import ForkServer
from tests.torture import torture_enabled

T = TypeVar("T")
BATCH = 20
KILLS = 12
TORTURE_KILLS = 120
ROUND_TIMEOUT = 60.0


def _never(wid: str, state: str) -> None:
    pass


class App:
    """The test's own engine on the database, and the application's table."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.postgres = url.startswith("postgres")
        self.engine = Engine(store_from_url(url), [make_type(self.postgres, _never)])
        self.ids: list[str] = []

    async def __aenter__(self) -> App:
        await self.engine.open()
        store = self.engine.store
        if isinstance(store, SQLiteStore):
            await store.conn.write(lambda conn: conn.execute(TABLE))
        else:
            assert isinstance(store, PostgresStore)
            await store._rowcount(TABLE, {})
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.engine.close()

    async def start(self, n: int) -> None:
        first = len(self.ids)
        for i in range(first, first + n):
            wid = f"order-{i:04d}"
            await self.engine.start("tx_order", {}, workflow_id=wid)
            self.ids.append(wid)

    async def unfinished(self) -> int:
        rows = [await self.engine.get(wid) for wid in self.ids]
        return sum(1 for r in rows if not r.terminal)

    async def app_rows(self) -> Counter[tuple[str, str, int]]:
        store, sql = self.engine.store, "SELECT wid, state, version FROM app_rows"
        if isinstance(store, SQLiteStore):
            rows = await store.conn.read(lambda conn: conn.execute(sql).fetchall())
            return Counter((r[0], r[1], r[2]) for r in rows)
        assert isinstance(store, PostgresStore)
        return Counter((r["wid"], r["state"], r["version"]) for r in await store._all(sql, {}))

    async def verify(self, tag: str) -> int:
        """Every workflow done along its path; the rows are the transitions; their number."""
        transitions: Counter[tuple[str, str, int]] = Counter()
        for wid in self.ids:
            row = await self.engine.get(wid)
            assert (row.state, row.parked) == ("done", None), f"{tag} {wid}: {row}"
            history = await self.engine.history(wid)
            assert [t.to_state for t in history] == list(PATH), f"{tag} {wid}: {history}"
            assert [t.version for t in history] == list(range(1, len(PATH) + 1)), tag
            for t in history[1:]:
                assert t.from_state is not None
                # The row was written by the handler of the state left, planned on the
                # version before the transition.
                transitions[wid, t.from_state, t.version - 1] += 1
            steps = await self.engine.store.steps(wid)
            assert sorted(s.step for s in steps) == sorted(PATH[:-1]), f"{tag} {steps}"
            assert all(s.status == "done" for s in steps), f"{tag} {steps}"
        rows = await self.app_rows()
        doubled = {k: n for k, n in rows.items() if n > 1}
        assert not doubled, f"{tag} application rows written twice: {doubled}"
        assert rows == transitions, (
            f"{tag} rows without a transition {sorted(rows - transitions)[:10]}, "
            f"transitions without a row {sorted(transitions - rows)[:10]}"
        )
        return sum(rows.values())


def _zygote(tmp: Path) -> ForkServer:
    return ForkServer(
        tmp / "zygote.err",
        "tests.acceptance.crash.tx_worker:child_main",
        preload=(
            "jsonschema",
            "statewright.definition.validate",
            "statewright.store.postgres",
            "statewright.store.sqlite",
        ),
        env={"PYTHONDONTWRITEBYTECODE": "1"},
        name="tx zygote",
    )


class Workers:
    """Worker processes forked by the zygote."""

    def __init__(self, zygote: ForkServer, tmp: Path, url: str, seed: int) -> None:
        self.zygote, self.tmp, self.url, self.seed = zygote, tmp, url, seed
        self.kill_log = tmp / "kills.log"
        self.forked = 0

    def fork(
        self, *, die: float, concurrency: int = 4, lease_seconds: float = 30.0
    ) -> tuple[int, Path, Path]:
        n = self.forked
        self.forked += 1
        ready, err = self.tmp / f"ready-{n}", self.tmp / f"worker-{n}.err"
        argv = [
            *("--db", self.url),
            *("--ready", str(ready)),
            *("--kill-log", str(self.kill_log)),
            *("--die", str(die)),
            *("--seed", str(self.seed * 10_000 + n)),
            *("--concurrency", str(concurrency)),
            *("--lease-seconds", str(lease_seconds)),
        ]
        pid = self.zygote.spawn(argv, self.tmp / f"worker-{n}.out", err)
        return pid, ready, err

    def wait_ready(self, pid: int, ready: Path) -> bool:
        """False if it died first."""
        until = time.monotonic() + 30
        while not ready.exists():
            if self.zygote.status([pid])[pid] is not None:
                return False
            assert time.monotonic() < until, f"worker {pid} never became ready"
            time.sleep(0.002)
        return True

    def self_kills(self) -> int:
        return len(self.kill_log.read_text().splitlines()) if self.kill_log.exists() else 0


def _tail(err: Path) -> str:
    return err.read_text(errors="replace")[-4000:] if err.exists() else ""


@pytest.mark.acceptance
async def test_sigkill_leaves_exactly_the_rows_of_the_committed_transitions(
    store_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = store_url
    target = TORTURE_KILLS if torture_enabled(request.config) else KILLS
    seed = crash_seed()
    kind = "postgres" if url.startswith("postgres") else "sqlite"
    tag = f"[tx crash, {kind}, seed {seed}]"
    print(f"\n{tag} target={target} kills", flush=True)
    rng = random.Random(seed)
    started = time.monotonic()
    async with App(url) as app:
        await app.start(BATCH)
        outside = clean = rounds = 0
        with _zygote(tmp_path) as zygote:
            workers = Workers(zygote, tmp_path, url, seed)
            while workers.self_kills() + outside < target:
                assert time.monotonic() - started < 240, f"{tag} out of time"
                if await app.unfinished() == 0:
                    await app.start(BATCH)
                external = rounds % 2 == 1
                rounds += 1
                concurrency = rng.choice([1, 4, 8])
                pid, ready, err = workers.fork(
                    die=0.0 if external else 0.1, concurrency=concurrency
                )
                code: int | None
                if external and workers.wait_ready(pid, ready):
                    await asyncio.sleep(rng.uniform(0.02, 0.3))
                    code, was_running = zygote.kill(pid)
                    outside += was_running
                else:
                    code = await asyncio.to_thread(zygote.wait, pid, ROUND_TIMEOUT)
                if code == 0:
                    clean += 1
                assert code in (0, KILLED), f"{tag} worker {pid} ended with {code}{_tail(err)}"
            pid, _, err = workers.fork(die=0.0, concurrency=8)
            code = await asyncio.to_thread(zygote.wait, pid, ROUND_TIMEOUT * 2)
            assert code == 0, f"{tag} the final run ended with {code}{_tail(err)}"
        inside = workers.self_kills()
        assert inside >= 1 and outside >= 1, f"{tag} kills inside {inside}, outside {outside}"
        rows = await app.verify(tag)
    print(
        f"{tag} {inside} SIGKILLs inside a transactional step, {outside} from outside, "
        f"{clean} clean exits, {len(app.ids)} workflows, {rows} rows = transitions, "
        f"{time.monotonic() - started:.1f}s"
    )


# -- PostgreSQL crashed and started again under running workers --------------------------------


@pytest.fixture
async def server(pgserver_env: None) -> AsyncIterator[Any]:
    base = Path(tempfile.mkdtemp(prefix="statewright-pg-tx-"))
    server = await asyncio.to_thread(start_pgserver, base / "data")
    yield server
    await asyncio.to_thread(stop_pgserver, server)
    shutil.rmtree(base, ignore_errors=True)


def _crash(server: Any) -> None:
    """Stop the server the way a crash does: no checkpoint, WAL recovery on the next start."""
    from pgserver._commands import POSTGRES_BIN_PATH

    subprocess.run(
        [
            str(POSTGRES_BIN_PATH / "pg_ctl"),
            "-D",
            str(server.pgdata),
            "-w",
            "-m",
            "immediate",
            "stop",
        ],
        user=server.system_user,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=60,
    )


async def _retried(read: Callable[[], Awaitable[T]]) -> T:
    """``read()``, again while the test's own pool reconnects after a crash of the server."""
    async with asyncio.timeout(20):
        while True:
            try:
                return await read()
            except StoreError:
                await asyncio.sleep(0.1)


@pytest.mark.acceptance
async def test_a_postgres_crash_and_restart_leaves_exactly_the_rows_of_the_transitions(
    server: Any, tmp_path: Path
) -> None:
    seed = crash_seed()
    tag = f"[tx crash, postgres restart, seed {seed}]"
    rng = random.Random(seed)
    url = server.get_uri()
    restarts = 0
    async with App(url) as app:
        await app.start(3 * BATCH)
        with _zygote(tmp_path) as zygote:
            workers = Workers(zygote, tmp_path, url, seed)
            # Short leases: a claim whose write failed while the server was down is taken
            # again once its lease expires.
            forked = [workers.fork(die=0.0, concurrency=8, lease_seconds=2) for _ in range(2)]
            for pid, ready, _ in forked:
                assert workers.wait_ready(pid, ready)
            for _ in range(2):
                await asyncio.sleep(rng.uniform(0.05, 0.3))
                before = sum((await _retried(app.app_rows)).values())
                await asyncio.to_thread(_crash, server)
                restarts += 1
                await asyncio.sleep(rng.uniform(0.1, 0.5))
                await asyncio.to_thread(server.ensure_postgres_running)
                assert before < 4 * len(app.ids), f"{tag} all done before the crash"
            for pid, _, err in forked:
                code = await asyncio.to_thread(zygote.wait, pid, ROUND_TIMEOUT * 2)
                assert code == 0, f"{tag} worker {pid} ended with {code}{_tail(err)}"
        await _retried(app.unfinished)
        rows = await app.verify(tag)
    print(f"{tag} {restarts} crashes of the server, {len(app.ids)} workflows, {rows} rows")
