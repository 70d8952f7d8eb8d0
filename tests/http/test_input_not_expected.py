"""``POST /v1/workflows/{id}/inputs`` on both stores: an input no handler would ever read (no
handler in the workflow's state nor after it) is 409 ``input_not_expected`` naming the state,
and nothing is written; one a handler ahead will read is taken."""

from __future__ import annotations

from typing import Any

import httpx

from statewright import Engine, MachineBuilder, WorkflowType
from tests.http.conftest import auth


async def reading(run: Any) -> None:
    await run.next_input("note")


def register(engine: Engine) -> None:
    b = (
        MachineBuilder("slip")
        .state("new", initial=True)
        .state("sent")
        .state("done", terminal=True)
    )
    b.event("send").event("finish").transition("send", "new", "sent")
    machine = b.transition("finish", "sent", "done").build()
    engine.register(WorkflowType(machine, {"new": reading}))


async def test_an_input_nothing_would_read_is_409(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    register(engine)
    r = await client.post(
        "/v1/workflows", json={"type": "slip", "id": "s1"}, headers=auth("agent")
    )
    assert r.status_code == 201, r.text
    url = "/v1/workflows/s1/inputs"
    r = await client.post(url, json={"name": "note", "payload": {}}, headers=auth("agent"))
    assert r.status_code == 201, r.text
    r = await client.post("/v1/workflows/s1/events", json={"event": "send"}, headers=auth("agent"))
    assert r.status_code == 200, r.text
    before = await engine.store.next_input("s1")
    r = await client.post(url, json={"name": "note", "payload": {"n": 2}}, headers=auth("agent"))
    assert r.status_code == 409, r.text
    error = r.json()["error"]
    assert (error["code"], error["state"], error["input"]) == (
        "input_not_expected",
        "sent",
        "note",
    )
    assert error["workflow_id"] == "s1"
    assert await engine.store.next_input("s1") == before  # nothing new
