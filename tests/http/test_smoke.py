from __future__ import annotations

import httpx

from tests.http.conftest import auth


async def test_start_and_read(client: httpx.AsyncClient) -> None:
    r = await client.post(
        "/v1/workflows", json={"type": "agent_task", "input": {"goal": "x"}}, headers=auth("agent")
    )
    assert r.status_code == 201, r.text
    wid = r.json()["id"]
    r = await client.get(f"/v1/workflows/{wid}", headers=auth("agent"))
    assert r.json()["tenant"] == "acme"
    r = await client.get(f"/v1/workflows/{wid}", headers=auth("other"))
    assert r.status_code == 404
