"""The exactly-once contract with real processes, real PostgreSQL and a payment service that
does not deduplicate (every call charges): blocking user code never loses its lease, a worker
frozen mid-step (SIGSTOP) past its lease can write nothing, an input taken by a worker killed
before its transition is delivered again, ``/livez`` answers while a sync handler blocks.

The workers and the server are ``statewright`` processes forked from this worker's fork server
(the ``cli_forks`` fixture, tests/cli_forks.py): the same command lines through the CLI's own
entry point, without an interpreter start-up each; SIGSTOP, SIGCONT and SIGKILL reach them as
they would any process. The app reads its ``EO_*`` variables when the child imports it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from statewright import Engine, store_from_url
from tests.acceptance.apps.exactly_once import TYPES, Service
from tests.forkserver import Child, ForkServer

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "tests" / "acceptance" / "apps" / "exactly_once.py"


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STATEWRIGHT_", "EO_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(EO_SERVICE=str(tmp / "service.db"), EO_MARKERS=str(tmp))
    return {**env, **extra}


@contextmanager
def processes() -> Iterator[list[Child]]:
    """Processes forked in the block; killed at the end whatever happens (continued first, in
    case the test froze one; signals are sent by the fork server, to its own child)."""
    procs: list[Child] = []
    try:
        yield procs
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
            p.wait(timeout=10)


def _worker_argv(db: str, *args: str) -> list[str]:
    argv = ["--db", db, "--app", str(APP), "worker", "--concurrency", "4"]
    return [*argv, "--poll-interval", "0.05", *args]


def fork_worker(forks: ForkServer, db: str, tmp: Path, name: str, *args: str, **env: str) -> Child:
    """``statewright worker`` on the exactly-once app, forked from ``forks`` (the
    ``cli_forks`` fixture: tests/cli_forks.py), its stderr in ``tmp/NAME.err``; the app reads
    its ``EO_*`` variables when the child imports it, after the fork."""
    return _fork(forks, _worker_argv(db, *args), tmp, name, _env(tmp, **env))


def _fork(forks: ForkServer, argv: list[str], tmp: Path, name: str, env: dict[str, str]) -> Child:
    err = tmp / f"{name}.err"
    return forks.popen(argv, Path(os.devnull), err, env=env, cwd=ROOT)


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def markers(tmp: Path, name: str) -> list[dict[str, object]]:
    return [json.loads(p.read_text()) for p in sorted(tmp.glob(f"{name}-*"))]


async def all_done(engine: Engine, ids: list[str]) -> bool:
    rows = [await engine.get(i) for i in ids]
    return all(r.terminal for r in rows)


async def check_charged_once(engine: Engine, service: Service, wid: str) -> None:
    """One charge for the workflow; ledger, context and log agree; replay equals the row."""
    row = await engine.get(wid)
    assert row.state == "done", (row.state, row.last_error)
    charges = [c for c in service.charges() if c[1] == f"{wid}:charge"]
    assert len(charges) == 1, f"{wid} charged {len(charges)} times: {charges}"
    [step] = await engine.store.steps(wid)
    assert step.status == "done" and step.result["charge_id"] == charges[0][0]
    assert row.context["charge"] == step.result
    assert [t.event for t in await engine.history(wid)] == ["$start", "charged"]
    await engine.check(wid)


@pytest.mark.acceptance
async def test_blocking_sync_code_keeps_its_lease_across_two_workers(
    pg_dsn: str, tmp_path: Path, cli_forks: ForkServer
) -> None:
    """Lease 2 s, user code blocks 5 s: the heartbeat keeps renewing (user code runs in the
    worker's threads), so the other worker never takes over and nothing is charged twice."""
    engine = Engine(store_from_url(pg_dsn), TYPES)
    service = Service(tmp_path / "service.db")
    async with engine:
        ids = [
            (await engine.start("sync_pay", workflow_id="sync-handler")).row.id,
            (await engine.start("slow_action_pay", workflow_id="sync-action")).row.id,
        ]
        with processes() as procs:
            for name in ("a", "b"):
                procs.append(
                    fork_worker(
                        cli_forks, pg_dsn, tmp_path, name, "--lease-seconds", "2", EO_BLOCK="5"
                    )
                )
            await eventually(lambda: all_done(engine, ids), 40, "both workflows")
        for wid in ids:
            await check_charged_once(engine, service, wid)
            history = await engine.history(wid)
            assert history[-1].actor.startswith("worker:")
    service.close()


@pytest.mark.acceptance
@pytest.mark.parametrize("mode", ["fence", "dedupe"])
async def test_a_worker_frozen_mid_step_can_write_nothing_and_the_workflow_finishes_once(
    pg_dsn: str, tmp_path: Path, mode: str, cli_forks: ForkServer
) -> None:
    """SIGSTOP for 5 s (lease 2 s) in the middle of a step, then SIGCONT: the other worker has
    taken over (reconciled, charged under a newer fencing token, finished); the frozen one's
    writes are refused and the service refuses its late call (a stale fencing token) or
    absorbs it (the same idempotency key)."""
    engine = Engine(store_from_url(pg_dsn), TYPES)
    service = Service(tmp_path / "service.db", mode)
    async with engine:
        wid = (await engine.start("frozen_pay", workflow_id="frozen")).row.id
        with processes() as procs:
            for name in ("a", "b"):
                procs.append(
                    fork_worker(
                        cli_forks,
                        pg_dsn,
                        tmp_path,
                        name,
                        "--lease-seconds",
                        "2",
                        EO_WINDOW="1.0",
                        EO_SERVICE_MODE=mode,
                    )
                )

            async def in_step() -> bool:
                return bool(markers(tmp_path, "in_step"))

            await eventually(in_step, 20, "a worker inside the step")
            [first] = markers(tmp_path, "in_step")
            frozen_pid = int(str(first["pid"]))
            frozen = next(p for p in procs if p.pid == frozen_pid)
            frozen.send_signal(signal.SIGSTOP)
            frozen_at = time.monotonic()
            await eventually(lambda: all_done(engine, [wid]), 20, "the other worker to finish")
            taken_over_after = time.monotonic() - frozen_at
            await asyncio.sleep(max(0.0, 5.0 - (time.monotonic() - frozen_at)))
            frozen.send_signal(signal.SIGCONT)
            await asyncio.sleep(2.5)  # its late call and refused writes happen now
            assert frozen.poll() is None, "the thawed worker crashed"
            for p in procs:
                p.send_signal(signal.SIGTERM)
            for p in procs:
                assert p.wait(timeout=20) == 0
        assert taken_over_after < 8, "the lapsed lease was not taken over"
        await check_charged_once(engine, service, wid)
        [step] = await engine.store.steps(wid)
        fence = int(str(first["fence"]))
        assert (
            step.attempts == 2
            and step.fence == fence + 1
            and step.result["fence"] == (fence + 1 if mode == "fence" else step.result["fence"])
        )
        charged_by = {c[3] for c in service.charges()}
        assert frozen_pid not in charged_by, "the frozen worker's late call was applied"
        errors = (tmp_path / ("a.err" if procs[0].pid == frozen_pid else "b.err")).read_text()
        assert "lease" in errors.lower(), errors[-2000:]
    service.close()


@pytest.mark.acceptance
async def test_a_call_that_timed_out_after_charging_is_reconciled_or_parked_never_repeated(
    pg_dsn: str, tmp_path: Path, cli_forks: ForkServer
) -> None:
    """The action charges, then raises TimeoutError. With a reconcile hook: charged once, the
    hook is asked and the workflow finishes with the charge. Without a hook (and not safe to
    repeat): no second call; the workflow is parked for an operator, visibly."""
    engine = Engine(store_from_url(pg_dsn), TYPES)
    service = Service(tmp_path / "service.db")
    async with engine:
        hooked = (await engine.start("timeout_pay", workflow_id="hooked")).row.id
        unhooked = (await engine.start("timeout_unhooked_pay", workflow_id="unhooked")).row.id

        async def settled() -> bool:
            a, b = await engine.get(hooked), await engine.get(unhooked)
            return a.terminal and b.parked is not None

        with processes() as procs:
            procs.append(fork_worker(cli_forks, pg_dsn, tmp_path, "a"))
            await eventually(settled, 30, "the hooked one done and the other parked")
            await asyncio.sleep(1.0)  # nothing more happens to the parked one
        await check_charged_once(engine, service, hooked)
        [step] = await engine.store.steps(hooked)
        assert step.attempts == 2  # the failed attempt, then the reconciled one
        row = await engine.get(unhooked)
        assert (row.state, row.parked, row.lease_owner, row.next_due_at) == (
            "charging",
            "step_outcome_unknown",
            None,
            None,
        )
        assert len([c for c in service.charges() if c[1] == "unhooked:charge"]) == 1
        [step] = await engine.store.steps(unhooked)
        assert (step.status, step.outcome) == ("failed", "unknown")
    service.close()


@pytest.mark.acceptance
async def test_an_input_taken_by_a_killed_worker_is_delivered_again(
    tmp_path: Path, cli_forks: ForkServer
) -> None:
    db = str(tmp_path / "inbox.db")
    engine = Engine(store_from_url(db), TYPES)
    async with engine:
        wid = (await engine.start("inbox_pay", workflow_id="inbox")).row.id
        posted = (await engine.post_input(wid, "answer", {"approved": True})).item.id
        with processes() as procs:
            procs.append(fork_worker(cli_forks, db, tmp_path, "a", EO_KILL_AFTER_TAKE="1"))
            assert procs[0].wait(timeout=30) == -signal.SIGKILL
            assert markers(tmp_path, "took")[0]["input_id"] == posted
            row = await engine.get(wid)
            assert row.state == "charging" and await engine.store.next_input(wid) is not None
            procs.append(fork_worker(cli_forks, db, tmp_path, "b", EO_KILL_AFTER_TAKE="1"))
            await eventually(lambda: all_done(engine, [wid]), 30, "the workflow")
        row = await engine.get(wid)
        assert (row.state, row.context["input_id"]) == ("done", posted)
        assert [m["input_id"] for m in markers(tmp_path, "took")] == [posted, posted]
        assert await engine.store.next_input(wid) is None  # consumed with the transition


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.alone
@pytest.mark.acceptance
async def test_livez_answers_within_100ms_while_a_sync_handler_blocks(
    tmp_path: Path, cli_forks: ForkServer
) -> None:
    db = str(tmp_path / "serve.db")
    port = _free_port()
    argv = ["--db", db, "--app", str(APP), "serve", "--worker", "--port", str(port)]
    with processes() as procs:
        procs.append(_fork(cli_forks, argv, tmp_path, "serve", _env(tmp_path, EO_BLOCK="3")))
        base = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(base_url=base, timeout=5) as client:
            deadline = time.monotonic() + 20
            while True:
                try:
                    if (await client.get("/livez")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, (tmp_path / "serve.err").read_text()
                await asyncio.sleep(0.05)
            r = await client.post("/v1/workflows", json={"type": "sync_pay", "id": "blocked"})
            assert r.status_code == 201, r.text

            async def blocking() -> bool:
                return bool(markers(tmp_path, "handler"))

            await eventually(blocking, 10, "the sync handler to start blocking")
            latencies = []
            for _ in range(30):  # 1.5 s of probes inside the 3 s the handler blocks
                started = time.perf_counter()
                r = await client.get("/livez")
                latencies.append(time.perf_counter() - started)
                assert r.status_code == 200
                await asyncio.sleep(0.05)
            state = (await client.get("/v1/workflows/blocked")).json()["state"]
            assert state == "charging", "the handler was not blocking during the probes"
        assert max(latencies) < 0.1, f"/livez latencies (s): {sorted(latencies)[-5:]}"
