"""OpenTelemetry across processes: a workflow started inside a traced request (this process)
and run by a real ``statewright worker`` (another process, its SDK configured by ``OTEL_*``
variables alone) yields handler and step spans in that request's trace.

The worker exports to the SDK's in-memory exporter, written to a file at exit
(tests/acceptance/apps/span_file.py), installed as an ``opentelemetry_traces_exporter`` entry
point the way an exporter package is: a ``.dist-info`` directory on the worker's path. The
worker and server processes are forked from the ``cli_forks`` fork server (tests/cli_forks.py):
the SDK is set up from the variables in the child, and the exporter flushes at its exit. The
test without the SDK starts fresh interpreters: what it checks is what one can import.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider

from statewright import Engine, SQLiteStore
from statewright.http import create_app
from statewright.store import store_from_url
from tests.acceptance.apps.span_file import ENV
from tests.acceptance.apps.traced import TYPES
from tests.forkserver import ForkServer

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "tests" / "acceptance" / "apps" / "traced.py"
TIMEOUT = 60.0
PARENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_SPAN = "00f067aa0ba902b7"


def _plugin(tmp: Path) -> Path:
    """A directory holding the span_file exporter's entry point (a dist-info, as pip leaves)."""
    dist = tmp / "plugin" / "statewright_test_spans-0.0.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: statewright-test-spans\nVersion: 0.0\n"
    )
    (dist / "entry_points.txt").write_text(
        "[opentelemetry_traces_exporter]\n"
        "span_file = tests.acceptance.apps.span_file:SpanFileExporter\n"
    )
    return dist.parent


def traced_env(tmp: Path, service: str, spans: Path) -> dict[str, str]:
    """A CLI process's environment: OTEL_* variables that export to ``spans``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("STATEWRIGHT_", "OTEL_")) and k != "PYTHONPATH"
    }
    env.update(
        PYTHONPATH=os.pathsep.join([str(ROOT), str(_plugin(tmp))]),
        OTEL_TRACES_EXPORTER="span_file",
        OTEL_SERVICE_NAME=service,
        **{ENV: str(spans)},
    )
    return env


def run_worker(forks: ForkServer, db: str, tmp: Path) -> list[dict[str, Any]]:
    """``statewright worker --until-idle`` with OTEL_* variables, forked from ``forks`` (the
    ``cli_forks`` fixture: the CLI's own entry point in a process of its own, its SDK set up
    by the variables after the fork, its exporter flushed at exit); the spans it exported."""
    spans = tmp / "spans.jsonl"
    env = traced_env(tmp, "order-worker", spans)
    done = forks.run(
        [
            *("--db", db, "--app", str(APP)),
            *("worker", "--until-idle", "--poll-interval", "0.05"),
        ],
        tmp,
        cwd=ROOT,
        env=env,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    assert spans.exists(), f"no spans written: {done.stderr}"
    return [json.loads(line) for line in spans.read_text().splitlines()]


def named(spans: list[dict[str, Any]], workflow_id: str) -> dict[str, dict[str, Any]]:
    return {
        s["name"]: s
        for s in spans
        if s["attributes"].get("statewright.workflow.id") == workflow_id
    }


def check_chain(found: dict[str, dict[str, Any]], trace_id: str, parent_id: str | None) -> None:
    """Handler and step spans of one ``order`` workflow: all in ``trace_id``, the first
    handler a child of ``parent_id`` (None: a root), each step a child of its handler, the
    second handler a child of the first."""
    charging = found["statewright.handler order.charging"]
    charge = found["statewright.step charge"]
    shipping = found["statewright.handler order.shipping"]
    ship = found["statewright.step ship"]
    for span in (charging, charge, shipping, ship):
        assert span["trace_id"] == trace_id, span
        assert span["service"] == "order-worker"
        assert span["status"] == "UNSET"
    assert charging["parent_id"] == parent_id
    assert charging["parent_trace_id"] == (None if parent_id is None else trace_id)
    assert charging["kind"] == "CONSUMER"
    assert charge["parent_id"] == charging["span_id"]
    assert shipping["parent_id"] == charging["span_id"]
    assert ship["parent_id"] == shipping["span_id"]
    assert charge["attributes"]["statewright.step.key"].endswith(":charge")
    assert charge["attributes"]["statewright.outcome"] == "done"
    assert charging["attributes"]["statewright.event"] == "charged"
    assert "statewright.transition" in charging["events"]  # today's span event, kept


@pytest.mark.acceptance
async def test_worker_spans_join_the_trace_of_the_span_that_started_the_workflow(
    pg_dsn: str, tmp_path: Path, cli_forks: ForkServer
) -> None:
    provider = TracerProvider()  # this process's own SDK (not the global one)
    async with Engine(store_from_url(pg_dsn), TYPES) as engine:
        with provider.get_tracer("test").start_as_current_span("POST /orders") as request:
            await engine.start("order", workflow_id="o1")
        await engine.start("order", workflow_id="o2")  # outside any span
        spans = run_worker(cli_forks, pg_dsn, tmp_path)
        assert {(await engine.get(w)).state for w in ("o1", "o2")} == {"done"}
    ctx = request.get_span_context()
    check_chain(named(spans, "o1"), f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}")
    # Started outside a trace: its handler spans form a trace of their own.
    untraced = named(spans, "o2")
    root = untraced["statewright.handler order.charging"]
    assert root["parent_id"] is None and root["trace_id"] != f"{ctx.trace_id:032x}"
    check_chain(untraced, root["trace_id"], None)


@pytest.mark.acceptance
async def test_worker_spans_join_the_trace_of_an_http_request(
    tmp_path: Path, cli_forks: ForkServer
) -> None:
    db = tmp_path / "sw.db"
    async with Engine(SQLiteStore(db), TYPES) as engine:
        app = create_app(engine, manage_engine=False)  # no tracer provider in this process
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://sw") as client:
            r = await client.post(
                "/v1/workflows",
                json={"type": "order", "id": "h1"},
                headers={"traceparent": f"00-{PARENT_TRACE}-{PARENT_SPAN}-01"},
            )
            assert r.status_code == 201, r.text
        spans = run_worker(cli_forks, str(db), tmp_path)
        assert (await engine.get("h1")).state == "done"
    check_chain(named(spans, "h1"), PARENT_TRACE, PARENT_SPAN)


@pytest.mark.acceptance
def test_without_the_sdk_the_worker_warns_and_runs_untraced(tmp_path: Path) -> None:
    # An install without the extra: the SDK's package hidden by one that cannot be imported.
    hidden = tmp_path / "nosdk" / "opentelemetry" / "sdk"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ImportError('opentelemetry-sdk not installed')\n")
    db = tmp_path / "sw.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STATEWRIGHT_", "OTEL_"))}
    env.update(
        PYTHONPATH=os.pathsep.join([str(hidden.parents[1]), str(ROOT)]),
        OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9",
    )
    cli = [sys.executable, "-m", "statewright.cli", "--db", str(db), "--app", str(APP)]
    for args in (["start", "order", "--id", "n1"], ["worker", "--until-idle"]):
        done = subprocess.run(
            [*cli, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT
        )
        assert done.returncode == 0, done.stderr
    assert "OpenTelemetry SDK is not installed" in done.stderr
    assert "statewright[otel]" in done.stderr
    assert "processed 2" in done.stdout


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.mark.acceptance
async def test_a_real_server_and_a_real_worker_share_the_callers_trace(
    tmp_path: Path, cli_forks: ForkServer
) -> None:
    """Three processes: a client sends a traceparent to a real ``serve`` (its SDK configured
    by OTEL_* variables), a real ``worker`` runs the workflow; the server's request spans and
    the worker's handler and step spans are all in the client's trace."""
    db, served = tmp_path / "sw.db", tmp_path / "serve-spans.jsonl"
    port = _free_port()
    log = tmp_path / "serve.log"
    server = cli_forks.popen(
        ["--db", str(db), "--app", str(APP), "serve", "--port", str(port)],
        log,
        cwd=ROOT,
        env=traced_env(tmp_path, "order-api", served),
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + TIMEOUT
        async with httpx.AsyncClient(base_url=base, timeout=5.0) as client:
            while True:
                assert server.poll() is None, log.read_text()
                assert time.monotonic() < deadline, "serve did not come up"
                try:
                    if (await client.get("/livez")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.05)
            r = await client.post(
                "/v1/workflows",
                json={"type": "order", "id": "s1"},
                headers={"traceparent": f"00-{PARENT_TRACE}-{PARENT_SPAN}-01"},
            )
            assert r.status_code == 201, r.text
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(TIMEOUT)
    # uvicorn ends by raising the signal again: -SIGTERM is its clean exit.
    assert server.returncode in (0, -signal.SIGTERM), log.read_text()
    exported = [json.loads(line) for line in served.read_text().splitlines()]
    in_trace = {s["name"]: s for s in exported if s["trace_id"] == PARENT_TRACE}
    # The server's span of the request (FastAPI records one when an SDK is set), a child of
    # the caller's; the start's span event is on the span current in the endpoint.
    request = in_trace["POST /v1/workflows"]
    assert (request["kind"], request["parent_id"]) == ("SERVER", PARENT_SPAN)
    assert request["service"] == "order-api"
    [current] = [s for s in in_trace.values() if "statewright.transition" in s["events"]]
    spans = run_worker(cli_forks, str(db), tmp_path)
    check_chain(named(spans, "s1"), PARENT_TRACE, current["span_id"])
