"""Timers over HTTP, on both stores: list (any reader of the tenant), schedule and cancel
(operators), another tenant's workflow is not found."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from statewright import Engine, ManualClock, Worker
from statewright.http import create_app
from tests.http.conftest import auth, registry
from tests.http.test_api import in_state


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


# -- a timer fires on behalf of whoever scheduled it (issue 22, item 1) ----------------------


@pytest.fixture
async def client(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    """The suite's tokens, plus an operator alone and an admin alone (no approver role)."""
    tokens = registry()
    tokens.add("operator-only-token", "olga", ["operator"])
    tokens.add("admin-only-token", "ada", ["admin"])
    app = create_app(engine, tokens, manage_engine=False)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://statewright") as c:
        yield c


OPERATOR = {"Authorization": "Bearer operator-only-token"}
ADMIN_ONLY = {"Authorization": "Bearer admin-only-token"}
APPROVE_BY_TIMER = {"event": "approval_granted", "at": 0, "payload": {"approver": "nobody"}}


async def test_an_operator_cannot_approve_by_timer(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    # The attack: an operator may not fire approval_granted (nor use /v1/approvals), so it
    # may not schedule a timer that fires it for them either; nor may an admin without the
    # approver role (admin fires every event but approvals).
    await in_state(engine, client, "r-1", "awaiting_approval", who="system")
    for who in (OPERATOR, ADMIN_ONLY):
        r = await client.post("/v1/workflows/r-1/timers", json=APPROVE_BY_TIMER, headers=who)
        assert r.status_code == 403, r.text
        error = r.json()["error"]
        assert error["code"] == "forbidden" and "schedule 'approval_granted'" in error["message"]
    assert [t.event for t in await engine.timers("r-1") if t.key is not None] == []
    await Worker(engine).run_until_idle()
    row = await engine.get("r-1")
    assert row.state == "awaiting_approval"
    assert all(t.event != "approval_granted" for t in await engine.history("r-1"))
    # Events the operator may fire (roles system/operator) it may still schedule.
    r = await client.post(
        "/v1/workflows/r-1/timers",
        json={"event": "approval_reminder", "after": 60},
        headers=OPERATOR,
    )
    assert r.status_code == 201, r.text
    assert r.json()["scheduled_by"] == "olga"


async def test_a_fired_timer_names_who_scheduled_it(
    client: httpx.AsyncClient, engine: Engine, clock: ManualClock
) -> None:
    await in_state(engine, client, "r-2", "awaiting_approval", who="system")
    # alice (boss) is an approver: she may approve, so she may approve by timer.
    r = await client.post("/v1/workflows/r-2/timers", json=APPROVE_BY_TIMER, headers=auth("boss"))
    assert r.status_code == 201, r.text
    assert r.json()["scheduled_by"] == "alice"
    r = await client.get("/v1/workflows/r-2/timers", headers=auth("viewer"))
    by = {t["key"]: t["scheduled_by"] for t in r.json()["items"]}
    assert by["approval_granted"] == "alice"
    assert {by[k] for k in by if k != "approval_granted"} <= {None}  # the state's own
    await Worker(engine).run_until_idle()
    [approved] = [t for t in await engine.history("r-2") if t.event == "approval_granted"]
    assert approved.actor == "timer for alice"
    assert approved.payload == {"approver": "nobody"}
    r = await client.get("/v1/workflows/r-2/history", headers=auth("viewer"))
    assert "timer for alice" in [t["actor"] for t in r.json()["items"]]
    # A timer of the machine's own stays the system's ("timer").
    await in_state(engine, client, "r-3", "awaiting_approval", who="system")
    clock.advance(20 * 3600)
    await Worker(engine).run_until_idle()
    [reminder] = [t for t in await engine.history("r-3") if t.event == "approval_reminder"]
    assert reminder.actor == "timer"


# -- timer keys with '/', timers a page at a time (issue 22, item 9) -------------------------


async def test_a_timer_key_with_a_slash_can_be_cancelled(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    await engine.start("agent_task", {"goal": "x"}, workflow_id="t-4")
    for key in ("remind/1", "remind/2/b"):
        body = {"event": "start", "after": 60, "key": key}
        r = await client.post("/v1/workflows/t-4/timers", json=body, headers=auth("boss"))
        assert r.status_code == 201, r.text
    r = await client.delete("/v1/workflows/t-4/timers/remind/1", headers=auth("boss"))
    assert (r.status_code, r.json()) == (200, {"removed": True})
    r = await client.delete("/v1/workflows/t-4/timers/remind%2F2%2Fb", headers=auth("boss"))
    assert (r.status_code, r.json()) == (200, {"removed": True})
    assert [t.key for t in await engine.timers("t-4")] == []
    # A key a URL cannot carry as it is ('.' or '..' between slashes: clients rewrite them)
    # is refused when scheduled, and nothing is stored.
    for key in ("..", "a/../b", "./x"):
        body = {"event": "start", "after": 60, "key": key}
        r = await client.post("/v1/workflows/t-4/timers", json=body, headers=auth("boss"))
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_input", r.text
    assert await engine.timers("t-4") == []


async def test_timers_are_listed_a_page_at_a_time(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    await engine.start("agent_task", {"goal": "x"}, workflow_id="t-5")
    for i in range(5):
        body = {"event": "start", "after": 60 + (i // 2), "key": f"k{i}"}  # ties on due_at
        r = await client.post("/v1/workflows/t-5/timers", json=body, headers=auth("boss"))
        assert r.status_code == 201, r.text
    r = await client.get("/v1/workflows/t-5/timers", headers=auth("viewer"))
    whole = r.json()
    assert [t["key"] for t in whole["items"]] == ["k0", "k1", "k2", "k3", "k4"]
    assert whole["next_cursor"] is None  # an old client's call: everything, as before
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params: dict[str, str | int] = {"limit": 2}
        if cursor is not None:
            params["cursor"] = cursor
        r = await client.get("/v1/workflows/t-5/timers", params=params, headers=auth("viewer"))
        assert r.status_code == 200, r.text
        page = r.json()
        seen += [t["key"] for t in page["items"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert (seen, pages) == (["k0", "k1", "k2", "k3", "k4"], 3)
    for bad in ("not-a-cursor", "WyJhIiwxXQ", "WzEuNSwxLjVd"):  # junk, ["a",1], [1.5,1.5]
        r = await client.get(
            "/v1/workflows/t-5/timers", params={"cursor": bad}, headers=auth("viewer")
        )
        # Documented characters that no page returned: 409 invalid_cursor (test_paging.py).
        assert r.status_code == 409 and r.json()["error"]["code"] == "invalid_cursor", r.text
