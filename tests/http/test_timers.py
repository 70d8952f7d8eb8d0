"""Timers over HTTP, on both stores: list (any reader of the tenant), schedule and cancel
(operators), another tenant's workflow is not found."""

from __future__ import annotations

import httpx

from statewright import Engine
from tests.http.conftest import auth


async def test_schedule_list_and_cancel_a_timer(client: httpx.AsyncClient, engine: Engine) -> None:
    await engine.start("agent_task", {"goal": "x"}, workflow_id="t-1")
    body = {"event": "start", "after": 60, "key": "kick", "payload": {}}
    r = await client.post("/v1/workflows/t-1/timers", json=body, headers=auth("boss"))
    assert r.status_code == 201, r.text
    made = r.json()
    assert (made["key"], made["event"], made["keep"], made["every"]) == (
        "kick",
        "start",
        False,
        None,
    )
    assert made["due_at"] == engine.clock.now() + 60
    r = await client.get("/v1/workflows/t-1/timers", headers=auth("viewer"))
    assert r.status_code == 200, r.text
    assert [t["key"] for t in r.json()["items"]] == ["kick"]

    r = await client.delete("/v1/workflows/t-1/timers/kick", headers=auth("boss"))
    assert (r.status_code, r.json()) == (200, {"removed": True})
    r = await client.delete("/v1/workflows/t-1/timers/kick", headers=auth("boss"))
    assert r.status_code == 404 and r.json()["error"]["code"] == "timer_not_found"
    assert await engine.timers("t-1") == []


async def test_timer_writes_need_an_operator_and_the_right_tenant(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    await engine.start("agent_task", {"goal": "x"}, workflow_id="t-2")
    body = {"event": "start", "after": 60}
    for who in ("viewer", "agent"):
        r = await client.post("/v1/workflows/t-2/timers", json=body, headers=auth(who))
        assert r.status_code == 403, (who, r.text)
        r = await client.delete("/v1/workflows/t-2/timers/start", headers=auth(who))
        assert r.status_code == 403, (who, r.text)
    for method, url in (
        ("POST", "/v1/workflows/t-2/timers"),
        ("GET", "/v1/workflows/t-2/timers"),
        ("DELETE", "/v1/workflows/t-2/timers/start"),
    ):
        r = await client.request(
            method, url, json=body if method == "POST" else None, headers=auth("other")
        )
        assert r.status_code == 404, (method, r.text)
        assert r.json()["error"]["code"] == "workflow_not_found"
    assert await engine.timers("t-2") == []


async def test_schedule_refusals_are_typed(client: httpx.AsyncClient, engine: Engine) -> None:
    await engine.start("agent_task", {"goal": "x"}, workflow_id="t-3")
    cases = [
        ({"event": "start"}, 422, "invalid_input"),  # neither after nor at
        ({"event": "start", "after": 1, "at": 2}, 422, "invalid_input"),
        ({"event": "no_such_event", "after": 1}, 409, "illegal_transition"),
        ({"event": "start", "after": -1}, 422, None),
    ]
    for body, status, code in cases:
        r = await client.post("/v1/workflows/t-3/timers", json=body, headers=auth("boss"))
        assert r.status_code == status, (body, r.text)
        if code is not None:
            assert r.json()["error"]["code"] == code, (body, r.text)
    await engine.cancel("t-3", reason="done with it", actor="op")
    r = await client.post(
        "/v1/workflows/t-3/timers", json={"event": "start", "after": 1}, headers=auth("admin")
    )
    assert r.status_code == 409 and r.json()["error"]["code"] == "workflow_finished", r.text
