"""Search attributes over HTTP on both stores (issue 28, item 4): ``GET /v1/workflows?where=
name=value`` (repeatable) lists by them, an unknown name is 404 (like an unknown state), a
malformed filter 422, the workflow view shows them, and ``POST /v1/bulk`` takes
``filter.search``."""

from __future__ import annotations

import httpx

from statewright import Engine, MachineBuilder, WorkflowType
from tests.http.conftest import auth


def register(engine: Engine) -> None:
    machine = (
        MachineBuilder("parcel")
        .state("new", initial=True)
        .state("done", terminal=True)
        .state("cancelled", terminal=True)
        .event("finish")
        .event("cancel")
        .transition("finish", "new", "done")
        .transition("cancel", "new", "cancelled")
        .build()
    )
    engine.register(WorkflowType(machine, search_attributes=("order_number", "customer_id")))


async def test_list_by_search_attributes(client: httpx.AsyncClient, engine: Engine) -> None:
    register(engine)
    for i, customer in enumerate([7, 7, 8]):
        data = {"order_number": f"A-{i}", "customer_id": customer}
        body = {"type": "parcel", "id": f"p{i}", "input": data}
        r = await client.post("/v1/workflows", json=body, headers=auth("agent"))
        assert r.status_code == 201, r.text

    def ids(r: httpx.Response) -> list[str]:
        assert r.status_code == 200, r.text
        return [w["id"] for w in r.json()["items"]]

    get = client.get
    r = await get("/v1/workflows", params={"where": "customer_id=7"}, headers=auth("agent"))
    assert sorted(ids(r)) == ["p0", "p1"]
    pairs: list[tuple[str, str | int | float | bool | None]] = [
        ("where", "customer_id=7"),
        ("where", "order_number=A-1"),
        ("type", "parcel"),
    ]
    assert ids(await get("/v1/workflows", params=pairs, headers=auth("agent"))) == ["p1"]
    r = await get("/v1/workflows", params={"where": "customer_id=9"}, headers=auth("agent"))
    assert ids(r) == []
    # another tenant sees none of them
    r = await get("/v1/workflows", params={"where": "customer_id=7"}, headers=auth("other"))
    assert ids(r) == []

    r = await get("/v1/workflows", params={"where": "colour=red"}, headers=auth("agent"))
    assert r.status_code == 404, r.text  # like an unknown state: schema-valid, never 422
    error = r.json()["error"]
    assert error["code"] == "unknown_search_attribute"
    assert "unknown search attribute 'colour'" in error["message"]
    r = await get("/v1/workflows", params={"where": "no-equals-sign"}, headers=auth("agent"))
    assert r.status_code == 422, r.text

    typed = (await get("/v1/types/parcel", headers=auth("agent"))).json()
    assert typed["search_attributes"] == ["order_number", "customer_id"]
    shown = (await get("/v1/workflows/p2", headers=auth("agent"))).json()
    assert shown["search_attributes"] == {"customer_id": "8", "order_number": "A-2"}

    body = {
        "action": "cancel",
        "filter": {"type": "parcel", "search": {"customer_id": 7}},
        "reason": "customer 7 asked",
    }
    dry = await client.post("/v1/bulk", json=body | {"dry_run": True}, headers=auth("boss"))
    assert dry.status_code == 200, dry.text
    assert sorted(dry.json()["sample"]) == ["p0", "p1"]
    done = (await client.post("/v1/bulk", json=body, headers=auth("boss"))).json()
    assert (done["matched"], done["applied"]) == (2, 2), done
    assert (await engine.get("p0")).state == "cancelled"
    assert (await engine.get("p2")).state == "new"
    bad = body | {"filter": {"search": {"colour": "red"}}}
    r = await client.post("/v1/bulk", json=bad, headers=auth("boss"))
    assert r.status_code == 404, r.text
    bad = body | {"filter": {"search": {"not a name": "red"}}}
    r = await client.post("/v1/bulk", json=bad, headers=auth("boss"))
    assert r.status_code == 422, r.text
