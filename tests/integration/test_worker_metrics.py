"""The worker's metrics endpoint (``statewright worker --metrics-port``): ``/livez`` follows the
worker's life and its event loop, ``/metrics`` counts what the worker did.

The stall test blocks the worker's event loop with a handler that calls ``time.sleep``; the
probes come from a thread of the test (the loop cannot answer anything then, which is why the
endpoint serves from threads of its own).
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from statewright import Engine, MachineBuilder, Next, Run, SQLiteStore, WorkflowType
from statewright.engine import Worker
from statewright.errors import InvalidInput
from statewright.observability.metrics import attach_metrics
from statewright.observability.worker_http import WorkerEndpoint
from tests.acceptance.apps.metered import TYPES as METERED
from tests.integration.conftest import Cli

BLOCK = 1.0
THRESHOLD = 0.3

MACHINE = (
    MachineBuilder("blocker")
    .state("blocking", initial=True)
    .state("done", terminal=True)
    .event("finish")
    .transition("finish", "blocking", "done")
    .build()
)


async def _block(run: Run) -> Next:
    time.sleep(BLOCK)  # blocks the event loop on purpose: what /livez must notice
    return Next("finish")


TYPES = [WorkflowType(MACHINE, {"blocking": _block})]


def _get(url: str) -> tuple[int, dict[str, str]]:
    r = httpx.get(url, timeout=5.0)
    return r.status_code, r.json()


def _samples(text: str) -> dict[str, float]:
    return {
        s.name + str(sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def test_livez_follows_the_worker_and_turns_503_while_its_loop_is_blocked(
    tmp_path: Path,
) -> None:
    async with Engine(SQLiteStore(tmp_path / "sw.db"), TYPES) as engine:
        w = Worker(engine, poll_interval=0.02, loop_lag_threshold=THRESHOLD)
        endpoint = WorkerEndpoint(engine, w, port=0)
        host, port = endpoint.start()
        assert (host, port != 0) == ("127.0.0.1", True)
        livez = f"{endpoint.url}/livez"
        try:
            # Blocking calls: the endpoint answers from its own threads (the loop is free).
            assert await asyncio.to_thread(_get, livez) == (
                503,
                {"status": "unavailable", "reason": "starting"},
            )
            endpoint.running(True)
            run = asyncio.create_task(w.run())
            await asyncio.sleep(0.2)
            assert await asyncio.to_thread(_get, livez) == (200, {"status": "ok"})

            seen: list[tuple[int, dict[str, str]]] = []
            stop_probing = threading.Event()

            def probe() -> None:
                while not stop_probing.is_set():
                    seen.append(_get(livez))
                    time.sleep(0.05)

            prober = threading.Thread(target=probe, daemon=True)
            prober.start()
            await engine.start("blocker", workflow_id="b")
            for _ in range(200):
                if (await engine.get("b")).state == "done":
                    break
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.3)  # a few probes after the stall
            stop_probing.set()
            await asyncio.to_thread(prober.join)
            stalled = [body for code, body in seen if code == 503]
            assert stalled, seen
            assert all(b["reason"].startswith("event loop stalled for ") for b in stalled)
            assert seen[-1] == (200, {"status": "ok"})

            text = (await asyncio.to_thread(httpx.get, f"{endpoint.url}/metrics")).text
            got = _samples(text)
            finish = "statewright_transitions_total[('event', 'finish'), ('machine', " + (
                "'blocker'), ('to_state', 'done')]"
            )
            assert got[finish] == 1.0
            assert got["statewright_event_loop_stall_seconds_count[]"] == 1.0
            assert got["statewright_worker_live[]"] == 1.0
            assert got["statewright_store_up[]"] == 1.0
            assert got["statewright_workflows[('machine', 'blocker'), ('state', 'done')]"] == 1.0
            assert got[f"statewright_worker_info[('worker_id', '{w.id}')]"] == 1.0

            w.stop()
            await run
            assert await asyncio.to_thread(_get, livez) == (
                503,
                {"status": "unavailable", "reason": "stopping"},
            )
            endpoint.running(False)
            assert await asyncio.to_thread(_get, livez) == (
                503,
                {"status": "unavailable", "reason": "stopped"},
            )
            other = await asyncio.to_thread(httpx.get, f"{endpoint.url}/other")
            assert other.status_code == 404
            posted = await asyncio.to_thread(httpx.post, livez)
            assert posted.status_code == 405
        finally:
            endpoint.close()
        # Nothing listens on the port any more (SO_REUSEADDR: closed probe connections may
        # linger in TIME_WAIT; a listener would still be refused).
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))


async def test_a_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        async with Engine(SQLiteStore(tmp_path / "sw.db"), TYPES) as engine:
            endpoint = WorkerEndpoint(engine, Worker(engine), port=busy.getsockname()[1])
            with pytest.raises(
                InvalidInput, match=r"cannot serve worker metrics on 127\.0\.0\.1:"
            ):
                endpoint.start()
            # One endpoint per engine: a second would expose the worker's gauges twice.
            with pytest.raises(ValueError, match="Duplicated timeseries"):
                WorkerEndpoint(engine, Worker(engine))


def test_the_cli_worker_refuses_a_port_in_use(cli: Cli) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        result = cli("worker", "--once", "--metrics-port", port, code=2)
    assert "cannot serve worker metrics on 127.0.0.1:" in result.stderr


def test_the_cli_worker_serves_metrics_while_it_runs(cli: Cli) -> None:
    result = cli("worker", "--once", "--metrics-port", "0")
    assert "worker metrics on http://127.0.0.1:" in result.stderr
    assert "/metrics and /livez" in result.stderr


async def test_the_stuck_gauges_count_workflows_past_their_state_threshold(
    tmp_path: Path,
) -> None:
    async with Engine(SQLiteStore(tmp_path / "sw.db"), METERED) as engine:
        metrics = attach_metrics(engine)
        for wid in ("a", "b", "c"):
            await engine.start("metered", workflow_id=wid)
        await engine.send("a", "hold")
        await engine.send("b", "hold")
        await asyncio.sleep(0.05)  # past the paused state's 10 ms
        got = _samples((await metrics.render()).decode())
        key = "[('machine', 'metered'), ('state', 'paused')]"
        assert got["statewright_stuck_workflows" + key] == 2.0
        assert 0.05 <= got["statewright_stuck_oldest_seconds" + key] < 60.0
        assert not any(
            k.startswith("statewright_stuck_workflows[") and "running" in k for k in got
        )
        await engine.send("a", "resume")
        await engine.send("b", "resume")
        got = _samples((await metrics.render()).decode())
        assert not any(k.startswith("statewright_stuck_") for k in got)
