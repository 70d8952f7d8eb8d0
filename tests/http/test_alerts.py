"""Alert rules evaluated from the store, on SQLite and PostgreSQL: each rule fires when it
should and not otherwise (workflows are aged with the ManualClock), and ``GET /v1/alerts``
shows the caller's tenant only."""

from __future__ import annotations

import httpx
import pytest

from statewright import (
    Engine,
    MachineBuilder,
    ManualClock,
    RetryPolicy,
    Run,
    TransientError,
    Worker,
    WorkflowType,
)
from statewright.errors import IllegalTransition, InvalidInput, VersionConflict
from statewright.observability.alerts import RULES, Alert, AlertThresholds, evaluate_alerts
from tests.http.conftest import auth

HOUR = 3600.0


async def fired(engine: Engine, rule: str, **kw: object) -> list[Alert]:
    found = await evaluate_alerts(engine, **kw)  # type: ignore[arg-type]
    return [a for a in found if a.rule == rule]


async def running(engine: Engine, wid: str, tenant: str = "default") -> None:
    await engine.start("agent_task", workflow_id=wid, tenant=tenant)
    await engine.send(wid, "start")


async def test_nothing_fires_on_a_fresh_or_a_healthy_store(engine: Engine) -> None:
    assert await evaluate_alerts(engine) == []
    await running(engine, "t1")
    await engine.send("t1", "complete")
    await running(engine, "t2")
    assert await evaluate_alerts(engine) == []


async def test_running_too_long(engine: Engine, clock: ManualClock) -> None:
    await running(engine, "t1")
    await engine.start("order_fulfilment", {"sku": "x"}, workflow_id="o1")  # has a handler
    await running(engine, "t2")
    await engine.send("t2", "request_approval")  # paused: another rule's business
    await running(engine, "t3")
    await engine.send("t3", "complete")  # ended
    clock.advance(HOUR - 1)
    assert await fired(engine, "running_too_long") == []
    clock.advance(2)
    alerts = await fired(engine, "running_too_long")
    assert [(a.type, a.state, a.count, a.sample_ids, a.severity) for a in alerts] == [
        ("agent_task", "running", 1, ("t1",), "warning"),
        ("order_fulfilment", "created", 1, ("o1",), "warning"),
    ]
    assert alerts[0].value == HOUR + 1 and alerts[0].threshold == HOUR
    assert "more than 1h" in alerts[0].message
    # Moving on ends it; so does a longer threshold.
    await engine.send("t1", "complete")
    longer = AlertThresholds(running_too_long=2 * HOUR)
    assert await fired(engine, "running_too_long", thresholds=longer) == []
    assert [a.type for a in await fired(engine, "running_too_long")] == ["order_fulfilment"]


async def test_paused_abandoned_counts_approval_states_by_event_or_name(
    engine: Engine, clock: ManualClock
) -> None:
    review = (
        MachineBuilder("review")
        .state("drafting", initial=True)
        .state("signing", description="no paused name, but an approval event out of it")
        .state("done", terminal=True)
        .event("submit")
        .event("sign_off", approval=True)
        .transition("submit", "drafting", "signing")
        .transition("sign_off", "signing", "done")
        .build()
    )
    engine.register(review)
    await running(engine, "t1")
    await engine.send("t1", "request_approval")
    await engine.start("review", workflow_id="r1")
    await engine.send("r1", "submit")
    await engine.start("review", workflow_id="r2")  # drafting: not waiting for anyone
    clock.advance(12 * HOUR)
    assert await fired(engine, "paused_abandoned") == []
    clock.advance(1)
    alerts = await fired(engine, "paused_abandoned")
    assert [(a.type, a.state, a.count, a.sample_ids) for a in alerts] == [
        ("agent_task", "paused", 1, ("t1",)),
        ("review", "signing", 1, ("r1",)),
    ]
    await engine.approve("t1", approver="alice")
    assert [a.type for a in await fired(engine, "paused_abandoned")] == ["review"]


async def test_blocked_too_long(engine: Engine, clock: ManualClock) -> None:
    for wid in ("t1", "t2", "t3"):
        await running(engine, wid)
        await engine.send(wid, "block")
        clock.advance(60)
    clock.advance(4 * HOUR - 180)  # t1 blocked for 4h, t2 and t3 for less
    assert await fired(engine, "blocked_too_long") == []
    clock.advance(61)
    [alert] = await fired(engine, "blocked_too_long")
    assert (alert.state, alert.count, alert.sample_ids) == ("blocked", 2, ("t1", "t2"))
    assert alert.value == 4 * HOUR + 61
    assert "for more than 4h (oldest 4h1m)" in alert.message
    assert await fired(engine, "running_too_long") == []  # blocked is not working


async def test_retry_flapping_by_transient_errors_in_a_window(
    engine: Engine, clock: ManualClock
) -> None:
    await running(engine, "t1")
    await running(engine, "t2")

    async def transient(wid: str, attempt: int) -> None:
        await engine.send(wid, "error_transient", {"attempt": attempt, "max_attempts": 5})
        await engine.send(wid, "retry")

    for attempt in (1, 2):
        await transient("t1", attempt)
        await transient("t2", attempt)
        clock.advance(60)
    assert await fired(engine, "retry_flapping") == []
    await transient("t1", 3)
    [alert] = await fired(engine, "retry_flapping")
    assert (alert.type, alert.count, alert.sample_ids, alert.value) == (
        "agent_task",
        1,
        ("t1",),
        3,
    )
    clock.advance(14 * 60)  # the first error of t1 is now out of the 15-minute window
    assert await fired(engine, "retry_flapping") == []
    await engine.send("t1", "error_transient", {"attempt": 4, "max_attempts": 5})
    assert [a.sample_ids for a in await fired(engine, "retry_flapping")] == [("t1",)]
    await engine.send("t1", "fatal_error")  # ended: no longer flapping
    assert await fired(engine, "retry_flapping") == []


async def test_retry_flapping_by_the_retry_counter(engine: Engine, clock: ManualClock) -> None:
    async def failing(run: Run) -> None:
        raise TransientError("503 from upstream")

    engine.register(
        WorkflowType(
            MachineBuilder("sync_job")
            .state("syncing", initial=True)
            .state("synced", terminal=True)
            .event("finish")
            .transition("finish", "syncing", "synced")
            .build(),
            handlers={"syncing": failing},
            retry=RetryPolicy(max_attempts=10, base_delay=1, jitter=0),
            on_transient=None,  # re-run in place: only the counter tells
        )
    )
    await engine.start("sync_job", workflow_id="j1")
    for _ in range(2):
        await Worker(engine, types=["sync_job"]).run_until_idle()
        clock.advance(30)
    assert (await engine.get("j1")).attempts == 2
    assert await fired(engine, "retry_flapping") == []
    await Worker(engine, types=["sync_job"]).run_until_idle()
    [alert] = await fired(engine, "retry_flapping")
    assert (alert.type, alert.sample_ids, alert.value) == ("sync_job", ("j1",), 3)
    assert (
        await fired(engine, "retry_flapping", thresholds=AlertThresholds(retry_attempts=4)) == []
    )


async def test_failure_ratio_over_a_window(engine: Engine, clock: ManualClock) -> None:
    async def end(wid: str, event: str) -> None:
        await running(engine, wid)
        await engine.send(wid, event)

    for i in range(3):
        await end(f"ok{i}", "complete")
    await end("bad0", "fail")
    assert await fired(engine, "failure_ratio") == []  # 4 ended: too few to judge
    await end("ok3", "complete")
    assert await fired(engine, "failure_ratio") == []  # 1 of 5: 20% < 25%
    clock.advance(60)
    await end("bad1", "fail")
    [alert] = await fired(engine, "failure_ratio")
    assert (alert.type, alert.state, alert.count, alert.severity) == (
        "agent_task",
        None,
        2,
        "critical",
    )
    assert alert.value == pytest.approx(2 / 6)
    assert set(alert.sample_ids) == {"bad0", "bad1"}
    assert "2 of 6" in alert.message
    # Live workflows do not count; the ones that ended before the window do not either.
    await running(engine, "live")
    clock.advance(HOUR - 30)  # everything but bad1 ended more than an hour ago
    assert await fired(engine, "failure_ratio") == []
    lenient = AlertThresholds(failure_min_ended=1, failure_ratio=1.0)
    assert [a.count for a in await fired(engine, "failure_ratio", thresholds=lenient)] == [1]
    assert (
        await fired(
            engine,
            "failure_ratio",
            thresholds=AlertThresholds(failure_min_ended=1, failure_states=frozenset({"done"})),
        )
        == []
    )


async def test_invalid_transition_spike(engine: Engine, clock: ManualClock) -> None:
    await engine.start("agent_task", workflow_id="t1")
    await engine.start("agent_task", workflow_id="t2")
    for i in range(19):
        with pytest.raises(IllegalTransition):
            await engine.send("t1" if i % 2 else "t2", "complete")
    # A lost race is not an invalid attempt: not logged.
    with pytest.raises(VersionConflict):
        await engine.send("t1", "start", expected_version=7)
    assert await fired(engine, "invalid_transition_spike") == []
    with pytest.raises(InvalidInput):  # refused before the engine looks: not a transition
        await engine.send("t1", "bad event!")
    await engine.send("t1", "start")
    with pytest.raises(Exception, match="attempt"):
        await engine.send("t1", "error_transient", {})  # invalid payload: counts
    [alert] = await fired(engine, "invalid_transition_spike")
    assert (alert.type, alert.count, alert.value) == ("agent_task", 20, 20)
    assert alert.sample_ids == ("t1", "t2")  # latest first
    assert "illegal_transition 19" in alert.message and "invalid_payload 1" in alert.message
    clock.advance(301)
    assert await fired(engine, "invalid_transition_spike") == []


async def test_rules_can_be_chosen_and_thresholds_overridden(engine: Engine) -> None:
    th = AlertThresholds().with_overrides(
        {"running_too_long": "60", "retry_attempts": "7", "paused_states": "waiting, held"}
    )
    assert (th.running_too_long, th.retry_attempts) == (60.0, 7)
    assert th.paused_states == frozenset({"waiting", "held"})
    with pytest.raises(InvalidInput, match="unknown alert threshold 'nope'"):
        AlertThresholds().with_overrides({"nope": "1"})
    with pytest.raises(InvalidInput, match="not a number"):
        AlertThresholds().with_overrides({"samples": "many"})
    with pytest.raises(InvalidInput):
        AlertThresholds(failure_ratio=2)
    with pytest.raises(InvalidInput, match="unknown alert rule"):
        await evaluate_alerts(engine, rules=["nope"])
    with pytest.raises(InvalidInput, match="parked_workflows"):
        AlertThresholds(parked_workflows=0)
    assert AlertThresholds().with_overrides({"parked_workflows": "3"}).parked_workflows == 3
    assert len(RULES) == 7


async def test_http_alerts_are_scoped_to_the_callers_tenant(
    client: httpx.AsyncClient, engine: Engine, clock: ManualClock
) -> None:
    await running(engine, "a1", tenant="default")
    await running(engine, "g1", tenant="globex")
    await running(engine, "g2", tenant="globex")
    r = await client.get("/v1/alerts", headers=auth("viewer"))
    assert r.status_code == 200 and r.json() == {"status": "ok", "alerts": []}
    clock.advance(2 * HOUR)

    r = await client.get("/v1/alerts", headers=auth("viewer"))
    body = r.json()
    assert body["status"] == "firing"
    [alert] = body["alerts"]
    assert alert["rule"] == "running_too_long"
    assert (alert["count"], alert["sample_ids"], alert["state"]) == (1, ["a1"], "running")
    assert alert["severity"] == "warning" and alert["value"] == 2 * HOUR
    other = (await client.get("/v1/alerts", headers=auth("other"))).json()["alerts"]
    assert [(a["count"], a["sample_ids"]) for a in other] == [(2, ["g1", "g2"])]
    everyone = (await client.get("/v1/alerts", headers=auth("admin"))).json()["alerts"]
    assert [a["count"] for a in everyone] == [3]

    assert (await client.get("/v1/alerts")).status_code == 401
    schema = (await client.get("/openapi.json")).json()
    ref = schema["paths"]["/v1/alerts"]["get"]["responses"]["200"]["content"]["application/json"][
        "schema"
    ]["$ref"]
    assert ref.endswith("/AlertsOut")
    assert "sample_ids" in schema["components"]["schemas"]["AlertOut"]["properties"]
    assert "/metrics" in schema["paths"]


async def test_http_alerts_name_workflows_by_the_ids_the_caller_knows(
    client: httpx.AsyncClient, engine: Engine, clock: ManualClock
) -> None:
    r = await client.post(
        "/v1/workflows", json={"type": "agent_task", "id": "g-1"}, headers=auth("other")
    )
    assert r.status_code == 201
    await engine.send("globex:g-1", "start")  # its store id (statewright.ids)
    clock.advance(2 * HOUR)
    [alert] = (await client.get("/v1/alerts", headers=auth("other"))).json()["alerts"]
    assert alert["sample_ids"] == ["g-1"]
    [alert] = (await client.get("/v1/alerts", headers=auth("admin"))).json()["alerts"]
    assert alert["sample_ids"] == ["globex:g-1"]
