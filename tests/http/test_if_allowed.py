"""``POST /v1/workflows/{id}/events?if_allowed=true`` on both stores: a late webhook gets 200
``applied: false`` (in the shape of every answer: the workflow, ``applied`` and, when not
applied, the ``refusal``) and changes nothing (version, log, rejections log), counted apart from
refusals; without the flag it is still a 409."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from statewright import Engine
from statewright.http.errors import IDEMPOTENCY_KEY, REPLAYED
from tests.http.conftest import auth


async def metric(client: httpx.AsyncClient, name: str, **labels: str) -> float:
    text = (await client.get("/metrics")).text
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return 0.0


async def test_a_late_webhook_gets_200_not_applied(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    r = await client.post(
        "/v1/workflows", json={"type": "agent_task", "id": "t1"}, headers=auth("agent")
    )
    assert r.status_code == 201, r.text
    url = "/v1/workflows/t1/events"
    # Applied: the usual body, plus applied: true.
    r = await client.post(url, json={"event": "start"}, headers=auth("agent"))
    assert r.status_code == 200, r.text
    assert r.json()["applied"] is True and r.json()["state"] == "running"
    r = await client.post(url, json={"event": "complete"}, headers=auth("agent"))
    assert r.json()["state"] == "done"
    before = (await client.get("/v1/workflows/t1", headers=auth("agent"))).json()
    history = (await client.get("/v1/workflows/t1/history", headers=auth("agent"))).json()

    r = await client.post(
        f"{url}?if_allowed=true", json={"event": "complete"}, headers=auth("agent")
    )
    assert r.status_code == 200, r.text
    body = r.json()
    # One shape, applied or not: the workflow's fields at the top (its state and allowed
    # events among them), with applied and, when not, the refusal.
    assert body.pop("applied") is False
    assert body.pop("refusal") == {"event": "complete", "reason": "terminal state"}
    assert (body["state"], body["allowed_events"]) == ("done", [])
    assert body["version"] == before["version"]
    # (The children counts are GET /v1/workflows/{id}'s alone.)
    assert before.pop("children")["total"] == 0
    assert body == {**before, "stuck": body["stuck"]}
    # Nothing changed, nothing logged as a rejection, counted apart.
    assert (await client.get("/v1/workflows/t1/history", headers=auth("agent"))).json() == history
    assert await engine.store.rejections(0.0) == []
    assert (
        await metric(
            client, "statewright_events_not_applied_total", machine="agent_task", event="complete"
        )
        == 1
    )
    assert await metric(client, "statewright_rejected_transitions_total", event="complete") == 0

    # The same without if_allowed: still a 409, logged as a rejection.
    r = await client.post(url, json={"event": "complete"}, headers=auth("agent"))
    assert r.status_code == 409 and r.json()["error"]["code"] == "illegal_transition"
    assert len(await engine.store.rejections(0.0)) == 1


async def test_if_allowed_with_idempotency_keys_roles_and_bad_requests(
    client: httpx.AsyncClient,
) -> None:
    await client.post(
        "/v1/workflows", json={"type": "agent_task", "id": "t1"}, headers=auth("agent")
    )
    url = "/v1/workflows/t1/events?if_allowed=true"
    key = {IDEMPOTENCY_KEY: "hook-1"}
    r = await client.post(url, json={"event": "start"}, headers={**auth("agent"), **key})
    assert r.status_code == 200 and r.json()["applied"] is True
    # The webhook's retry: replayed, as always.
    r = await client.post(url, json={"event": "start"}, headers={**auth("agent"), **key})
    assert r.status_code == 200 and r.headers[REPLAYED] == "true"
    assert r.json()["applied"] is True and r.json()["version"] == 2
    # Not allowed now (no edge from running), with a new key: not applied.
    r = await client.post(
        url, json={"event": "start"}, headers={**auth("agent"), IDEMPOTENCY_KEY: "hook-2"}
    )
    assert r.status_code == 200 and r.json()["applied"] is False
    assert r.json()["refusal"] == {"event": "start", "reason": None}
    assert r.json()["state"] == "running" and "complete" in r.json()["allowed_events"]
    # Still refused: an unknown event, a role that may not fire it, a stale version.
    r = await client.post(url, json={"event": "nope"}, headers=auth("agent"))
    assert r.status_code == 409 and r.json()["error"]["code"] == "illegal_transition"
    r = await client.post(url, json={"event": "approval_granted"}, headers=auth("agent"))
    assert r.status_code == 403
    r = await client.post(
        url, json={"event": "complete", "expected_version": 1}, headers=auth("agent")
    )
    assert r.status_code == 409 and r.json()["error"]["code"] == "version_conflict"
    r = await client.post(
        "/v1/workflows/t1/events?if_allowed=maybe", json={"event": "x"}, headers=auth("agent")
    )
    assert r.status_code == 422
