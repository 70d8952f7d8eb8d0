"""``GET /metrics``: what went through the API (and a worker) shows up, on SQLite and
PostgreSQL, parsed with prometheus_client's own parser; label values stay bounded by what the
machines declare whatever callers send; and the token ``/metrics`` may be made to want."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import httpx
import pytest
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from statewright import Engine, ManualClock, Next, RetryPolicy, Run, TransientError, Worker
from statewright.access import OPS
from statewright.definition.builtin.agent_task import agent_task_machine
from statewright.engine.hooks import Rejection, RetryEvent
from statewright.engine.workflow_type import WorkflowType
from statewright.errors import IllegalTransition
from statewright.http import create_app
from statewright.observability.metrics import (
    MAX_STEP_NAMES,
    UNKNOWN,
    EngineMetrics,
    attach_metrics,
)
from statewright.testing import memory_engine
from tests.http.conftest import auth, registry

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(client: httpx.AsyncClient) -> Samples:
    r = await client.get("/metrics")  # no token: scrapers call it
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    out: Samples = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


async def send(
    client: httpx.AsyncClient, wid: str, event: str, who: str = "agent", **payload: object
) -> httpx.Response:
    return await client.post(
        f"/v1/workflows/{wid}/events",
        json={"event": event, "payload": payload},
        headers=auth(who),
    )


async def test_transitions_time_in_state_recovery_rejections_and_workflow_counts(
    client: httpx.AsyncClient, engine: Engine, clock: ManualClock
) -> None:
    for wid in ("t1", "t2"):
        r = await client.post(
            "/v1/workflows", json={"type": "agent_task", "id": wid}, headers=auth("agent")
        )
        assert r.status_code == 201, r.text
        assert (await send(client, wid, "start")).status_code == 200
    assert (await send(client, "t1", "request_approval")).status_code == 200
    clock.advance(120)
    r = await client.post(
        "/v1/approvals", json={"workflow_id": "t1", "decision": "approve"}, headers=auth("boss")
    )
    assert r.json()["state"] == "running", r.text
    clock.advance(30)
    assert (await send(client, "t1", "block")).status_code == 200
    clock.advance(45)
    assert (await send(client, "t1", "dependency_ready")).status_code == 200
    assert (await send(client, "t1", "complete")).json()["state"] == "done"
    # Refused: an event the state does not allow, and a payload its schema rejects.
    assert (await send(client, "t1", "start")).status_code == 409
    assert (await send(client, "t2", "error_transient")).status_code == 422
    # A self-transition leaves no state.
    assert (await send(client, "t2", "request_approval")).status_code == 200
    assert (await send(client, "t2", "approval_reminder", who="system")).status_code == 200

    m = await scrape(client)
    tr = "statewright_transitions_total"
    assert value(m, tr, machine="agent_task", event="$start", to_state="planned") == 2
    assert value(m, tr, machine="agent_task", event="start", to_state="running") == 2
    assert value(m, tr, machine="agent_task", event="approval_granted", to_state="running") == 1
    assert value(m, tr, machine="agent_task", event="complete", to_state="done") == 1
    assert value(m, tr, machine="agent_task", event="approval_reminder", to_state="paused") == 1

    tis = "statewright_time_in_state_seconds"
    assert value(m, f"{tis}_count", machine="agent_task", state="paused") == 1
    assert value(m, f"{tis}_sum", machine="agent_task", state="paused") == 120
    assert value(m, f"{tis}_bucket", machine="agent_task", state="paused", le="60.0") == 0
    assert value(m, f"{tis}_bucket", machine="agent_task", state="paused", le="300.0") == 1
    assert value(m, f"{tis}_sum", machine="agent_task", state="blocked") == 45
    # running: t1 left it three times (to paused, blocked, done) after 0, 30 and 0 seconds,
    # t2 once (to paused) after 120 + 30 + 45 s; planned twice after 0 s.
    assert value(m, f"{tis}_count", machine="agent_task", state="running") == 4
    assert value(m, f"{tis}_sum", machine="agent_task", state="running") == 30 + 195
    assert value(m, f"{tis}_count", machine="agent_task", state="planned") == 2

    rec = "statewright_recovery_seconds"
    assert value(m, f"{rec}_count", machine="agent_task", from_state="paused") == 1
    assert value(m, f"{rec}_sum", machine="agent_task", from_state="paused") == 120
    assert value(m, f"{rec}_sum", machine="agent_task", from_state="blocked") == 45

    rej = "statewright_rejected_transitions_total"
    assert value(m, rej, machine="agent_task", event="start", code="illegal_transition") == 1
    assert (
        value(m, rej, machine="agent_task", event="error_transient", code="invalid_payload") == 1
    )
    # The refusals are in the store's rejections log too, with the caller and its tenant.
    logged = await engine.store.rejections(0.0)
    assert [(r.workflow_id, r.event, r.code, r.actor, r.tenant) for r in logged] == [
        ("t2", "error_transient", "invalid_payload", "agent-7", "default"),
        ("t1", "start", "illegal_transition", "agent-7", "default"),
    ]

    wf = "statewright_workflows"
    assert value(m, wf, machine="agent_task", state="done") == 1
    assert value(m, wf, machine="agent_task", state="paused") == 1
    assert value(m, wf, machine="agent_task", state="running") == 0
    assert value(m, "statewright_store_up") == 1

    # Counters accumulate; the gauge is read from the store on every scrape.
    assert (await send(client, "t2", "approval_granted", who="boss")).status_code == 200
    m = await scrape(client)
    assert value(m, wf, machine="agent_task", state="paused") == 0
    assert value(m, wf, machine="agent_task", state="running") == 1
    assert value(m, tr, machine="agent_task", event="approval_granted", to_state="running") == 2
    assert value(m, f"{rec}_count", machine="agent_task", from_state="paused") == 2


class Flaky:
    """Runs a step, then fails with a transient error ``failures`` times, then completes."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    async def __call__(self, run: Run) -> Next:
        await run.step("charge", lambda key: {"charged": key})
        self.calls += 1
        if self.calls <= self.failures:
            raise TransientError("503 from upstream")
        return Next("complete")


async def test_retries_by_transition_and_in_place_and_step_durations(
    client: httpx.AsyncClient, engine: Engine, clock: ManualClock
) -> None:
    policy = RetryPolicy(base_delay=10, jitter=0)
    engine.register(
        # on_transient: running -> retrying, then the retry timer: retrying -> running
        WorkflowType(agent_task_machine("flaky"), handlers={"running": Flaky(1)}, retry=policy),
        # no on_transient edge: the handler is re-run in place after the backoff
        WorkflowType(
            agent_task_machine("flaky_in_place"),
            handlers={"running": Flaky(2)},
            retry=policy,
            on_transient=None,
        ),
    )
    for wtype in ("flaky", "flaky_in_place"):
        r = await client.post(
            "/v1/workflows", json={"type": wtype, "id": wtype}, headers=auth("agent")
        )
        assert r.status_code == 201, r.text
        assert (await send(client, wtype, "start")).status_code == 200
    for _ in range(4):
        await Worker(engine).run_until_idle()
        clock.advance(60)
    assert (await engine.get("flaky")).state == "done"
    assert (await engine.get("flaky_in_place")).state == "done"

    m = await scrape(client)
    retries = "statewright_retries_total"
    assert value(m, retries, machine="flaky", state="running", mode="transition") == 1
    assert value(m, retries, machine="flaky_in_place", state="running", mode="in_place") == 2
    assert value(m, retries, machine="flaky", state="running", mode="in_place") == 0
    rec = "statewright_recovery_seconds"
    assert value(m, f"{rec}_count", machine="flaky", from_state="retrying") == 1
    assert value(m, f"{rec}_sum", machine="flaky", from_state="retrying") == 60
    # The step ran once per workflow: its re-runs took the ledger's result.
    steps = "statewright_step_duration_seconds"
    for machine in ("flaky", "flaky_in_place"):
        assert value(m, f"{steps}_count", machine=machine, step="charge") == 1
        assert value(m, f"{steps}_bucket", machine=machine, step="charge", le="+Inf") == 1
    assert value(m, "statewright_workflows", machine="flaky", state="done") == 1


async def test_each_engine_has_its_own_registry_never_the_global_one() -> None:
    async with (
        memory_engine([agent_task_machine()]) as one,
        memory_engine([agent_task_machine()]) as two,
    ):
        first = attach_metrics(one)
        assert attach_metrics(one) is first  # attached once: transitions are counted once
        second = attach_metrics(two)
        assert second.registry is not first.registry
        await one.start("agent_task", workflow_id="a")
        text = (await first.render()).decode()
        assert 'statewright_workflows{machine="agent_task",state="planned"} 1.0' in text
        assert "statewright_workflows{" not in (await second.render()).decode()
    assert not any(name.startswith("statewright") for name in REGISTRY._names_to_collectors)
    # A registry of the caller's own can be given.
    own = CollectorRegistry()
    async with memory_engine([agent_task_machine()]) as three:
        assert EngineMetrics(three, own).registry is own


async def test_a_failing_store_makes_store_up_0_not_a_failed_scrape() -> None:
    engine = memory_engine([agent_task_machine()])
    async with engine:
        metrics = attach_metrics(engine)
        await engine.start("agent_task", workflow_id="a")
    text = (await metrics.render()).decode()  # the store is closed now
    assert "statewright_store_up 0.0" in text
    assert 'statewright_transitions_total{event="$start",machine="agent_task"' in text


@pytest.mark.parametrize("engine", ["sqlite"], indirect=True)
async def test_refused_event_names_nobody_declared_share_one_label(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    """1,000 refusals of distinct made-up event names: one series, not 1,000."""
    r = await client.post(
        "/v1/workflows", json={"type": "agent_task", "id": "w"}, headers=auth("agent")
    )
    assert r.status_code == 201, r.text
    assert (await send(client, "w", "start")).status_code == 200
    assert (await send(client, "w", "start")).status_code == 409  # a declared event, refused
    before = len((await client.get("/metrics")).content)
    names = [f"made_up_{i}" for i in range(1000)]
    for batch in range(0, len(names), 100):
        sent = await asyncio.gather(*(send(client, "w", n) for n in names[batch : batch + 100]))
        assert {r.status_code for r in sent} == {409}
    text = (await client.get("/metrics")).text
    grown = len(text.encode()) - before
    assert grown < 10_000, f"/metrics grew by {grown} bytes"
    assert "made_up_" not in text
    m = await scrape(client)
    rej = "statewright_rejected_transitions_total"
    assert value(m, rej, machine="agent_task", event=UNKNOWN, code="illegal_transition") == 1000
    assert value(m, rej, machine="agent_task", event="start", code="illegal_transition") == 1


async def test_labels_come_only_from_what_the_registered_machines_declare() -> None:
    async with memory_engine([agent_task_machine()]) as engine:
        metrics = attach_metrics(engine)
        row = (await engine.start("agent_task", workflow_id="a")).row
        ghost = replace(row, type="ghost")  # a type this process has not registered
        odd = replace(row, state="nowhere")  # a state the machine does not declare
        refused = IllegalTransition("planned", "start")
        metrics.on_rejection(Rejection("a", ghost.state, "start", refused, ghost))
        metrics.on_rejection(Rejection("a", "planned", "cancel", refused, None))
        metrics.on_retry(RetryEvent(odd, odd, 1.0))  # in place: same version
        for i in range(MAX_STEP_NAMES + 50):  # step names come from code: the first are kept
            metrics.on_step(row, f"step-{i}", 0.01)
        metrics.on_step(ghost, "charge", 0.01)
        text = (await metrics.render()).decode()
    m: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            m[(s.name, frozenset(s.labels.items()))] = s.value
    rej = "statewright_rejected_transitions_total"
    assert value(m, rej, machine=UNKNOWN, event=UNKNOWN, code="illegal_transition") == 2
    assert "ghost" not in text and "nowhere" not in text
    retries = "statewright_retries_total"
    assert value(m, retries, machine="agent_task", state=UNKNOWN, mode="in_place") == 1
    steps = "statewright_step_duration_seconds_count"
    assert value(m, steps, machine="agent_task", step="step-0") == 1
    assert value(m, steps, machine="agent_task", step=f"step-{MAX_STEP_NAMES - 1}") == 1
    assert value(m, steps, machine="agent_task", step=UNKNOWN) == 50
    assert value(m, steps, machine=UNKNOWN, step=UNKNOWN) == 1
    assert f'step="step-{MAX_STEP_NAMES}"' not in text


async def test_metrics_can_want_an_ops_or_admin_token(engine: Engine) -> None:
    tokens = registry()
    tokens.add("ops-token-1", "prometheus", [OPS], "acme")
    app = create_app(engine, tokens, manage_engine=False, metrics_auth=True)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://statewright") as c:
        r = await c.get("/metrics")
        assert r.status_code == 401, r.text
        assert r.json()["error"]["code"] == "unauthorized"
        assert r.headers["www-authenticate"] == "Bearer"
        r = await c.get("/metrics", headers={"Authorization": "Bearer not-a-token"})
        assert r.status_code == 401, r.text
        for who in ("agent", "boss", "viewer"):
            r = await c.get("/metrics", headers=auth(who))
            assert r.status_code == 403, r.text
            assert r.json()["error"]["code"] == "forbidden"
            assert "ops or admin" in r.json()["error"]["message"]
        for headers in (auth("admin"), {"Authorization": "Bearer ops-token-1"}):
            r = await c.get("/metrics", headers=headers)
            assert r.status_code == 200, r.text
            assert "statewright_store_up 1.0" in r.text
    # Open mode: the local caller is an admin.
    app = create_app(engine, None, manage_engine=False, metrics_auth=True)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://statewright") as c:
        assert (await c.get("/metrics")).status_code == 200
