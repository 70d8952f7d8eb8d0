"""What ``GET /v1/types`` tells a caller about its rights on a type, which the dashboard
uses to show or hide its Start panel and Cancel button (the API checks the roles again on
each action): ``may_start`` (any writer), ``cancel_event`` (the event a cancel fires) and each
event's ``may_fire``."""

from __future__ import annotations

import httpx

from tests.http.conftest import auth


async def test_types_say_who_may_start_and_what_cancel_fires(client: httpx.AsyncClient) -> None:
    for who, may in (("agent", True), ("boss", True), ("admin", True), ("viewer", False)):
        r = await client.get("/v1/types/refund_approval", headers=auth(who))
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["may_start"] is may, who
        assert body["cancel_event"] == "cancel"
    r = await client.post(
        "/v1/workflows",
        json={"type": "refund_approval", "input": {}},
        headers=auth("viewer"),
    )
    assert r.status_code == 403, r.text
    listed = await client.get("/v1/types", headers=auth("viewer"))
    assert all(t["may_start"] is False for t in listed.json())
    assert all(not e["may_fire"] for t in listed.json() for e in t["events"])
