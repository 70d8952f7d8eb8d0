"""A parked workflow pages someone from the moment it parks, on SQLite and PostgreSQL (issue
22, item 11): ``/health/workflows`` answers 503 listing it, ``/v1/stuck`` lists it with its
reason and what to do, its view offers ``resolve_step`` (not ``resume``, which is refused:
409 ``step_unresolved``), the ``workflow_parked`` alert fires and is delivered through the
outbox, and ``statewright_workflows_parked`` counts it by machine, state and reason."""

from __future__ import annotations

import httpx

from statewright import Engine, ManualClock, NotApplied
from statewright.observability.alerts import AlertThresholds, evaluate_alerts
from statewright.observability.delivery import AlertDelivery
from statewright.observability.metrics import attach_metrics
from statewright.types import DeferWrite
from tests.alerting.receiver import receiver
from tests.http.conftest import auth
from tests.http.test_api import error_of, in_state, start, unchanged
from tests.http.test_idempotency import park_with_unknown_step


async def globex_running(engine: Engine, client: httpx.AsyncClient) -> None:
    """``g-1`` of tenant globex (``globex:g-1`` in the store), running."""
    await start(client, "other", wid="g-1")
    await engine.send("globex:g-1", "start", actor="setup")


async def park_fatal(engine: Engine, wid: str, why: str = "fatal_error") -> None:
    row = await engine.get(wid)
    await engine.store.defer(
        DeferWrite(wid, row.version, engine.clock.now(), 0, last_error="boom", parked=why)
    )


async def test_health_is_503_from_the_moment_a_workflow_parks(
    client: httpx.AsyncClient, engine: Engine, clock: ManualClock
) -> None:
    await in_state(engine, client, "t-1", "running")  # running: stuck only after an hour
    await in_state(engine, client, "t-2", "running")
    assert (await client.get("/health/workflows")).status_code == 200
    clock.advance(5)
    await park_with_unknown_step(engine, "t-1")
    r = await client.get("/health/workflows")
    assert r.status_code == 503, r.text
    assert r.json() == {
        "status": "stuck",
        "stuck": 1,
        "by_state": [{"type": "agent_task", "state": "running", "count": 1, "oldest_age": 5}],
        "parked": 1,
        "parked_by_state": [
            {
                "type": "agent_task",
                "state": "running",
                "reason": "step_outcome_unknown",
                "count": 1,
                "oldest_age": 5,
            }
        ],
        "unregistered": 0,
        "unregistered_by_version": [],
    }
    assert "t-1" not in r.text  # counts only, no ids
    # Resolved: it runs on, nobody needs to act any more.
    ok = {"verdict": "not_applied", "reason": "no such charge at the gateway"}
    resolved = await client.post(
        "/v1/workflows/t-1/steps/charge/resolve", json=ok, headers=auth("boss")
    )
    assert resolved.status_code == 200, resolved.text
    r = await client.get("/health/workflows")
    assert r.status_code == 200 and r.json()["stuck"] == 0, r.text


async def test_the_stuck_listing_says_why_and_what_to_do(
    client: httpx.AsyncClient, engine: Engine, clock: ManualClock
) -> None:
    await in_state(engine, client, "t-1", "running")
    await in_state(engine, client, "t-2", "running")
    await in_state(engine, client, "t-3", "running")  # not parked, not old: not stuck
    await globex_running(engine, client)  # another tenant's
    await park_with_unknown_step(engine, "t-1")
    await park_fatal(engine, "t-2")
    await park_fatal(engine, "globex:g-1")
    r = await client.get("/v1/stuck", headers=auth("agent"))
    assert r.status_code == 200, r.text
    items = r.json()["items"]
    assert [
        (s["workflow"]["id"], s["parked"], s["action"], s["step"], s["workflow"]["stuck"])
        for s in items
    ] == [
        ("t-1", "step_outcome_unknown", "resolve_step", "charge", True),
        ("t-2", "fatal_error", "resume", None, True),
    ]
    assert "step 'charge' is unknown" in items[0]["hint"]
    assert items[0]["age"] == 0 and items[0]["threshold"] == 3600
    assert "fix the cause" in items[1]["hint"]
    everyone = (await client.get("/v1/stuck", headers=auth("admin"))).json()["items"]
    assert len(everyone) == 3
    # A workflow past its threshold only is listed too, with nothing parked.
    clock.advance(3601)
    items = (await client.get("/v1/stuck", headers=auth("agent"))).json()["items"]
    assert [(s["workflow"]["id"], s["action"]) for s in items] == [
        ("t-1", "resolve_step"),
        ("t-2", "resume"),
        ("t-3", "investigate"),
    ]
    assert items[2]["parked"] is None and items[2]["step"] is None


async def test_resume_of_an_unknown_outcome_is_refused_with_what_to_do(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    await in_state(engine, client, "t-1", "running")
    await park_with_unknown_step(engine, "t-1")
    url = "/v1/workflows/t-1/resume"
    async with unchanged(engine):
        r = await client.post(url, json={"reason": "try again"}, headers=auth("boss"))
        error = error_of(r, 409, "step_unresolved")
        assert error["steps"] == ["charge"] and "resolve the step" in error["message"]
        for who in ("agent", "viewer"):  # the role check still comes first
            r = await client.post(url, json={"reason": "x"}, headers=auth(who))
            error_of(r, 403, "forbidden")
        r = await client.post(url, json={"reason": "x", "reconcile": "yes"}, headers=auth("boss"))
        error_of(r, 422, "invalid_input")
    body = {"reason": "the reconcile hook's service is back", "reconcile": True}
    r = await client.post(url, json=body, headers=auth("boss"))
    assert r.status_code == 200, r.text
    assert r.json()["parked"] is None
    last = (await engine.history("t-1"))[-1]
    assert (last.event, last.payload) == ("$resume", body)
    await engine.check("t-1")  # replay understands it


async def test_the_view_offers_resolve_step_to_operators(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    await in_state(engine, client, "t-1", "running")
    await park_with_unknown_step(engine, "t-1")
    wf = (await client.get("/v1/workflows/t-1", headers=auth("boss"))).json()
    assert (wf["operator_actions"], wf["unresolved_steps"]) == (
        ["resolve_step", "fork"],
        ["charge"],
    )
    admin = (await client.get("/v1/workflows/t-1", headers=auth("admin"))).json()
    assert admin["operator_actions"] == ["resolve_step", "fork", "move"]
    agent = (await client.get("/v1/workflows/t-1", headers=auth("agent"))).json()
    assert agent["operator_actions"] == [] and agent["stuck"] is True
    listed = (await client.get("/v1/workflows", headers=auth("boss"))).json()["items"]
    assert [w["operator_actions"] for w in listed] == [["resolve_step", "fork"]]
    # The step answered but the workflow still parked (its resume did not happen): resume is
    # what is left, and it is accepted.
    now = engine.clock.now()
    await engine.store.resolve_step("t-1:charge", "failed", None, "not_applied", "by hand", now)
    wf = (await client.get("/v1/workflows/t-1", headers=auth("boss"))).json()
    assert (wf["operator_actions"], wf["unresolved_steps"]) == (["resume", "fork"], [])
    r = await client.post("/v1/workflows/t-1/resume", json={"reason": "r"}, headers=auth("boss"))
    assert r.status_code == 200, r.text
    # Parked for another reason: resume, and no unresolved steps to show.
    await park_fatal(engine, "t-1")
    wf = (await client.get("/v1/workflows/t-1", headers=auth("boss"))).json()
    assert (wf["operator_actions"], wf.get("unresolved_steps")) == (["resume", "fork"], None)


async def test_workflow_parked_alert_fires_at_once_and_is_delivered(
    client: httpx.AsyncClient, engine: Engine, clock: ManualClock
) -> None:
    await in_state(engine, client, "t-1", "running")
    await in_state(engine, client, "t-2", "running")
    await globex_running(engine, client)
    with receiver() as rec:
        d = AlertDelivery(engine, [rec.url])
        assert await d.evaluate() == []
        await park_with_unknown_step(engine, "t-1")
        await park_fatal(engine, "t-2")
        await park_fatal(engine, "globex:g-1", why="cancel_refused")
        [alert] = [a for a in await evaluate_alerts(engine) if a.rule == "workflow_parked"]
        assert (alert.severity, alert.type, alert.state, alert.count) == (
            "critical",
            "agent_task",
            "running",
            3,
        )
        assert sorted(alert.sample_ids) == ["globex:g-1", "t-1", "t-2"]
        assert "cancel_refused 1, fatal_error 1, step_outcome_unknown 1" in alert.message
        assert "resolve the step" in alert.message
        # One tenant's view: its own only.
        [mine] = await evaluate_alerts(engine, tenant="default", rules=["workflow_parked"])
        assert (mine.count, sorted(mine.sample_ids)) == (2, ["t-1", "t-2"])
        r = await client.get("/v1/alerts", headers=auth("agent"))
        assert [(a["rule"], a["count"]) for a in r.json()["alerts"]] == [("workflow_parked", 2)]
        # A threshold above the count: quiet.
        higher = AlertThresholds(parked_workflows=4)
        assert await evaluate_alerts(engine, higher, rules=["workflow_parked"]) == []

        [fired] = await d.evaluate()
        assert fired.status == "firing" and fired.labels["alertname"] == "workflow_parked"
        assert fired.labels["severity"] == "critical"
        assert len((await d.deliver()).delivered) == 1
        [body] = rec.bodies()
        assert body["status"] == "firing"
        assert body["alerts"][0]["labels"]["alertname"] == "workflow_parked"
        # All three answered: RESOLVED.
        for wid in ("t-2", "globex:g-1"):
            await engine.resume(wid, actor="ops", reason="fixed")
        await engine.resolve_step("t-1", "charge", _not_applied(), actor="ops", reason="none")
        [resolved] = await d.evaluate()
        assert resolved.status == "resolved" and resolved.fingerprint == fired.fingerprint
        assert len((await d.deliver()).delivered) == 1
        assert rec.bodies()[-1]["status"] == "resolved"


def _not_applied() -> NotApplied:
    return NotApplied()


async def test_the_parked_gauge_counts_by_machine_state_and_reason(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    await in_state(engine, client, "t-1", "running")
    await in_state(engine, client, "t-2", "running")
    await in_state(engine, client, "t-3", "paused")
    metrics = attach_metrics(engine)
    text = (await metrics.render()).decode()
    assert "# TYPE statewright_workflows_parked gauge" in text
    assert "statewright_workflows_parked{" not in text
    await park_with_unknown_step(engine, "t-1")
    await park_fatal(engine, "t-2")
    await park_fatal(engine, "t-3", why="<script>made-up</script>")  # a reason nobody declared
    text = (await metrics.render()).decode()
    lines = sorted(
        ln for ln in text.splitlines() if ln.startswith("statewright_workflows_parked{")
    )
    assert lines == [
        'statewright_workflows_parked{machine="agent_task",reason="_unknown",state="paused"} 1.0',
        'statewright_workflows_parked{machine="agent_task",reason="fatal_error",state="running"} '
        "1.0",
        'statewright_workflows_parked{machine="agent_task",reason="step_outcome_unknown",'
        'state="running"} 1.0',
    ]
    # Parked is stuck: the stuck gauge counts them at once.
    assert 'statewright_stuck_workflows{machine="agent_task",state="running"} 2.0' in text
    assert 'statewright_stuck_workflows{machine="agent_task",state="paused"} 1.0' in text
