"""Schedules over HTTP, on both stores: operators declare, pause, resume and remove; any
reader of the tenant lists; tenants see only their own (ids scoped like workflow ids); bad
definitions get typed errors and store nothing; a worker then starts the tick's workflow."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import httpx
import pytest

from statewright import Engine, ManualClock, Worker
from statewright.http import create_app
from tests.http.conftest import auth, registry

OPS = {"Authorization": "Bearer globex-ops-token"}
"""An operator bound to tenant globex."""


@pytest.fixture
async def client(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    tokens = registry()
    tokens.add("globex-ops-token", "gina", ["operator"], "globex")
    app = create_app(engine, tokens, manage_engine=False)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://statewright") as c:
        yield c


BODY = {
    "id": "nightly",
    "type": "agent_task",
    "cron": "*/5 * * * *",
    "input": {"goal": "Write the report"},
}


async def test_declare_list_pause_resume_remove(
    client: httpx.AsyncClient, engine: Engine, clock: ManualClock
) -> None:
    r = await client.post("/v1/schedules", json=BODY, headers=auth("boss"))
    assert r.status_code == 201, r.text
    made = r.json()
    assert (made["id"], made["cron"], made["catch_up"], made["timezone"]) == (
        "nightly",
        "*/5 * * * *",
        "latest",
        "UTC",
    )
    assert made["next_at"] == clock.now() + 300 and made["paused"] is False
    r = await client.get("/v1/schedules", headers=auth("viewer"))
    assert r.status_code == 200 and [s["id"] for s in r.json()["items"]] == ["nightly"]
    r = await client.get("/v1/schedules/nightly", headers=auth("agent"))
    assert r.status_code == 200 and r.json()["input"] == {"goal": "Write the report"}

    r = await client.post("/v1/schedules/nightly/pause", headers=auth("boss"))
    assert r.status_code == 200 and r.json()["paused"] is True
    r = await client.post("/v1/schedules/nightly/resume", headers=auth("boss"))
    assert r.status_code == 200 and r.json()["paused"] is False

    # A worker starts the tick's workflow.
    clock.advance(300)
    await Worker(engine).run_until_idle()
    r = await client.get("/v1/schedules/nightly", headers=auth("viewer"))
    started = r.json()["last_workflow_id"]
    assert started == "nightly.20270115T080500Z"
    r = await client.get(f"/v1/workflows/{started}", headers=auth("viewer"))
    assert r.status_code == 200, r.text

    r = await client.delete("/v1/schedules/nightly", headers=auth("boss"))
    assert (r.status_code, r.json()) == (200, {"removed": True})
    r = await client.delete("/v1/schedules/nightly", headers=auth("boss"))
    assert r.status_code == 404 and r.json()["error"]["code"] == "schedule_not_found"
    assert await engine.schedules() == []


async def test_writes_need_an_operator(client: httpx.AsyncClient, engine: Engine) -> None:
    for who in ("agent", "viewer", "system", "other"):
        r = await client.post("/v1/schedules", json=BODY, headers=auth(who))
        assert r.status_code == 403, (who, r.text)
        assert r.json()["error"]["code"] == "forbidden"
    assert await engine.schedules() == []
    r = await client.post("/v1/schedules", json=BODY, headers=auth("admin"))
    assert r.status_code == 201
    for path in ("/v1/schedules/nightly/pause", "/v1/schedules/nightly/resume"):
        r = await client.post(path, headers=auth("agent"))
        assert r.status_code == 403
    r = await client.delete("/v1/schedules/nightly", headers=auth("viewer"))
    assert r.status_code == 403
    assert [s.id for s in await engine.schedules()] == ["nightly"]
    r = await client.get("/v1/schedules")
    assert r.status_code == 401


async def test_tenants_see_only_their_own(
    client: httpx.AsyncClient, engine: Engine, clock: ManualClock
) -> None:
    r = await client.post("/v1/schedules", json=BODY, headers=OPS)
    assert r.status_code == 201, r.text
    assert r.json()["id"] == "nightly" and r.json()["tenant"] == "globex"
    assert [s.id for s in await engine.schedules()] == ["globex:nightly"]
    # The default tenant may have its own "nightly"; neither sees the other's.
    r = await client.post("/v1/schedules", json=BODY, headers=auth("boss"))
    assert r.status_code == 201
    r = await client.get("/v1/schedules", headers=OPS)
    assert [(s["id"], s["tenant"]) for s in r.json()["items"]] == [("nightly", "globex")]
    r = await client.get("/v1/schedules", headers=auth("viewer"))
    assert [(s["id"], s["tenant"]) for s in r.json()["items"]] == [("nightly", "default")]
    r = await client.get("/v1/schedules/globex:nightly", headers=auth("viewer"))
    assert r.status_code == 404
    r = await client.post("/v1/schedules", json={**BODY, "tenant": "acme"}, headers=OPS)
    assert r.status_code == 403
    r = await client.post("/v1/schedules", json={**BODY, "id": "acme:x"}, headers=OPS)
    assert r.status_code == 403
    # Every tenant, for the admin (store ids).
    r = await client.get("/v1/schedules", headers=auth("admin"))
    assert sorted(s["id"] for s in r.json()["items"]) == ["globex:nightly", "nightly"]
    # The globex schedule's workflows are globex's.
    clock.advance(300)
    await Worker(engine).run_until_idle()
    r = await client.get("/v1/schedules/nightly", headers=OPS)
    wid = r.json()["last_workflow_id"]
    assert wid == "nightly.20270115T080500Z"
    row = await engine.get("globex:" + wid)
    assert row.tenant == "globex"


@pytest.mark.parametrize(
    ("change", "status", "code"),
    [
        ({"cron": "61 * * * *"}, 409, "invalid_schedule"),
        ({"cron": "0 0 31 2 *"}, 409, "invalid_schedule"),
        ({"timezone": "Mars/Olympus"}, 409, "invalid_schedule"),
        ({"type": "no_such_type"}, 404, "unknown_workflow_type"),
        ({"cron": "every day"}, 422, "invalid_input"),
        ({"catch_up": "sometimes"}, 422, "invalid_input"),
        ({"input": [1, 2]}, 422, "invalid_input"),
        ({"extra": 1}, 422, "invalid_input"),
    ],
)
async def test_bad_definitions_are_refused_and_store_nothing(
    client: httpx.AsyncClient, engine: Engine, change: dict[str, object], status: int, code: str
) -> None:
    r = await client.post("/v1/schedules", json={**BODY, **change}, headers=auth("boss"))
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code
    assert await engine.schedules() == []


# -- a tick starts its own workflow, on its declarer's behalf (issue 22, items 1 and 2) ------


async def test_an_agent_cannot_take_a_tick_id_first(
    client: httpx.AsyncClient, engine: Engine, clock: ManualClock
) -> None:
    r = await client.post("/v1/schedules", json=BODY, headers=auth("boss"))
    assert r.status_code == 201, r.text
    assert r.json()["created_by"] == "alice"
    # The agent reads when the next tick comes (any reader may) and predicts its id...
    r = await client.get("/v1/schedules/nightly", headers=auth("agent"))
    next_at = r.json()["next_at"]
    tick_id = "nightly." + datetime.fromtimestamp(next_at, UTC).strftime("%Y%m%dT%H%M%SZ")
    # ... then starts that id first, same type, its own input: refused, nothing stored.
    squat = {"type": "agent_task", "id": tick_id, "input": {"goal": "the agent's"}}
    r = await client.post("/v1/workflows", json=squat, headers=auth("agent"))
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == "invalid_input"
    assert "schedules and forks" in r.json()["error"]["message"]
    assert await engine.list_workflows() == []
    # The same in a tenant (its tick ids are the tenant's own) and for a caller of every tenant.
    r = await client.post("/v1/schedules", json=BODY, headers=OPS)
    assert r.status_code == 201, r.text
    for who, wid in ((OPS, tick_id), (auth("admin"), "globex:" + tick_id)):
        r = await client.post("/v1/workflows", json={**squat, "id": wid}, headers=who)
        assert r.status_code == 422, r.text
    assert await engine.list_workflows() == []

    clock.advance(300)
    await Worker(engine).run_until_idle()
    r = await client.get("/v1/schedules/nightly", headers=auth("viewer"))
    ran = r.json()
    assert (ran["last_workflow_id"], ran["last_error"]) == (tick_id, None)
    row = await engine.get(tick_id)
    assert row.context["goal"] == "Write the report"  # the operator's input
    [first, *_] = await engine.history(tick_id)
    assert (first.event, first.actor) == ("$start", "schedule:nightly for alice")
    [first, *_] = await engine.history("globex:" + tick_id)
    assert first.actor == "schedule:globex:nightly for gina"


async def test_schedules_are_listed_a_page_at_a_time(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    for name in ("a", "b", "c"):
        r = await client.post("/v1/schedules", json={**BODY, "id": name}, headers=auth("boss"))
        assert r.status_code == 201, r.text
    r = await client.post("/v1/schedules", json={**BODY, "id": "d"}, headers=OPS)
    assert r.status_code == 201, r.text
    r = await client.get("/v1/schedules", headers=auth("viewer"))
    assert [s["id"] for s in r.json()["items"]] == ["a", "b", "c"]  # as before: all of them
    assert r.json()["next_cursor"] is None
    r = await client.get("/v1/schedules", params={"limit": 2}, headers=auth("viewer"))
    page = r.json()
    assert [s["id"] for s in page["items"]] == ["a", "b"] and page["next_cursor"]
    r = await client.get(
        "/v1/schedules",
        params={"limit": 2, "cursor": page["next_cursor"]},
        headers=auth("viewer"),
    )
    assert ([s["id"] for s in r.json()["items"]], r.json()["next_cursor"]) == (["c"], None)
    r = await client.get("/v1/schedules", params={"limit": 1}, headers=auth("admin"))
    page = r.json()
    r = await client.get(
        "/v1/schedules", params={"limit": 3, "cursor": page["next_cursor"]}, headers=auth("admin")
    )
    assert [s["id"] for s in page["items"] + r.json()["items"]] == ["a", "b", "c", "globex:d"]
    r = await client.get("/v1/schedules", params={"cursor": "bad!"}, headers=auth("viewer"))
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_input"
