"""Subscriptions over HTTP, on both stores: an admin (or an operator that sees every tenant)
declares, lists, pauses, resumes and removes; a tenant-bound operator and a viewer may not;
secrets and header values are never shown; bad input gets a typed error and stores nothing."""

from __future__ import annotations

import httpx

from statewright import Engine
from tests.http.conftest import auth

BODY = {
    "name": "failures",
    "url": "https://hooks.example.com/sw",
    "filter": {"states": ["failed"], "types": ["order"]},
    "headers": {"Authorization": "Bearer hook-secret"},
    "secret": "s3cret",
}


async def test_declare_list_pause_resume_remove(client: httpx.AsyncClient, engine: Engine) -> None:
    r = await client.post("/v1/subscriptions", json=BODY, headers=auth("admin"))
    assert r.status_code == 201, r.text
    made = r.json()
    assert made["name"] == "failures" and made["signed"] is True
    assert made["headers"] == ["Authorization"] and "s3cret" not in r.text
    assert "hook-secret" not in r.text
    assert made["filter"] == {"types": ["order"], "states": ["failed"]}
    listed = (await client.get("/v1/subscriptions", headers=auth("admin"))).json()["items"]
    assert [s["name"] for s in listed] == ["failures"]
    r = await client.post("/v1/subscriptions/failures/pause", headers=auth("admin"))
    assert r.json()["paused"] is True
    r = await client.post("/v1/subscriptions/failures/resume", headers=auth("admin"))
    assert r.json()["paused"] is False
    stored = await engine.subscription("failures")
    assert stored.subscription.secret == "s3cret"
    r = await client.delete("/v1/subscriptions/failures", headers=auth("admin"))
    assert r.json() == {"removed": True}
    r = await client.get("/v1/subscriptions/failures", headers=auth("admin"))
    assert r.status_code == 404 and r.json()["error"]["code"] == "subscription_not_found"


async def test_only_operators_that_see_every_tenant(client: httpx.AsyncClient) -> None:
    for who in ("boss", "viewer", "agent", "other"):  # tenant-bound operator, others
        r = await client.post("/v1/subscriptions", json=BODY, headers=auth(who))
        assert r.status_code == 403, (who, r.text)
        r = await client.get("/v1/subscriptions", headers=auth(who))
        assert r.status_code == 403, (who, r.text)
    r = await client.get("/v1/subscriptions", headers=auth("admin"))
    assert r.json() == {"items": []}


async def test_bad_input_stores_nothing(client: httpx.AsyncClient, engine: Engine) -> None:
    for bad in (
        {**BODY, "url": "ftp://x"},
        {**BODY, "url": None},  # neither a url nor a consumer
        {**BODY, "name": "no spaces"},
        {**BODY, "filter": {"colour": ["red"]}},
        {**BODY, "consumer": True},  # both
    ):
        r = await client.post("/v1/subscriptions", json=bad, headers=auth("admin"))
        assert r.status_code in (409, 422), (bad, r.text)
    assert await engine.subscriptions() == []
