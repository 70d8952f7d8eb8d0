"""A type's ``input_schema`` over HTTP on both stores: ``GET /v1/types/{name}`` shows it; a
start that fails it is 422 ``input_not_accepted`` listing the schema's errors and writes nothing;
an unknown type's 404 names the known ones."""

from __future__ import annotations

import httpx

from statewright import Engine, MachineBuilder, WorkflowType
from tests.http.conftest import auth

SCHEMA = {
    "type": "object",
    "properties": {"order_number": {"type": "string"}, "amount": {"type": "number"}},
    "required": ["order_number"],
}


def register(engine: Engine) -> None:
    b = MachineBuilder("parcel").state("new", initial=True).state("done", terminal=True)
    machine = b.event("finish").transition("finish", "new", "done").build()
    engine.register(WorkflowType(machine, input_schema=SCHEMA))


async def test_a_start_that_fails_the_schema_is_422_and_writes_nothing(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    register(engine)
    shown = (await client.get("/v1/types/parcel", headers=auth("agent"))).json()
    assert shown["input_schema"] == SCHEMA
    listed = (await client.get("/v1/types", headers=auth("agent"))).json()
    assert {t["name"]: t["input_schema"] for t in listed}["agent_task"] is None

    body = {"type": "parcel", "id": "p1", "input": {"amount": "ten"}}
    r = await client.post("/v1/workflows", json=body, headers=auth("agent"))
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["code"] == "input_not_accepted"
    assert error["workflow_type"] == "parcel"
    assert sorted(error["errors"], key=lambda e: e["path"]) == [
        {"path": "", "message": "'order_number' is a required property"},
        {"path": "amount", "message": "'ten' is not of type 'number'"},
    ]
    assert error["message"].startswith("input of workflow type 'parcel' is invalid")
    r = await client.get("/v1/workflows/p1", headers=auth("agent"))
    assert r.status_code == 404
    assert await engine.store.history("p1") == []

    body["input"] = {"order_number": "A-1", "amount": 10}
    r = await client.post("/v1/workflows", json=body, headers=auth("agent"))
    assert r.status_code == 201, r.text


async def test_an_unknown_type_names_the_known_ones(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/workflows", json={"type": "ordr"}, headers=auth("agent"))
    assert r.status_code == 404
    assert r.json()["error"]["message"] == (
        "unknown workflow type 'ordr' (known: agent_task, order_fulfilment, refund_approval)"
    )
