"""A workflow's children and its parent over HTTP (issue 25): ``GET /v1/workflows/{id}`` names
the parent and counts the children from one page of them, ``GET .../children`` lists them a
page at a time, both scoped to the caller's tenant and naming workflows by the caller's ids;
a bad id or cursor is a clear error that changes nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from statewright import Engine, SQLiteStore, Worker, paging
from statewright.engine.builtin import agent_task_type
from statewright.http import create_app
from statewright.store.postgres import PostgresStore
from statewright.store.protocol import FullStore as Store
from tests.family_app import TYPES
from tests.http.conftest import auth, registry
from tests.http.test_api import error_of, unchanged

GINA = {"Authorization": "Bearer gina-token-1"}
"""agent and system in tenant globex."""


@pytest.fixture(params=["sqlite", "postgres"])
async def engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Engine]:
    if request.param == "sqlite":
        store: Store = SQLiteStore(tmp_path / "http.db")
    else:
        store = PostgresStore(request.getfixturevalue("pg_dsn"))
    async with Engine(store, [agent_task_type(), *TYPES]) as eng:
        yield eng


@pytest.fixture
async def client(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    tokens = registry()
    tokens.add("gina-token-1", "gina", ["agent", "system"], "globex")
    app = create_app(engine, tokens, manage_engine=False)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://statewright") as c:
        yield c


async def ok(
    client: httpx.AsyncClient, method: str, path: str, headers: dict[str, str], body: Any = None
) -> dict[str, Any]:
    r = await client.request(method, path, json=body, headers=headers)
    assert r.status_code in (200, 201), r.text
    out: dict[str, Any] = r.json()
    return out


async def shipment(
    engine: Engine, client: httpx.AsyncClient, wid: str, n: int, headers: dict[str, str]
) -> None:
    """A shipment of ``n`` parcels, its first children started (3 at most at once)."""
    body = {"type": "shipment", "id": wid, "input": {"parcels": list(range(n))}}
    await ok(client, "POST", "/v1/workflows", headers, body)
    await Worker(engine).run_until_idle()


async def test_a_parent_counts_and_lists_its_children_and_each_names_its_parent(
    engine: Engine, client: httpx.AsyncClient
) -> None:
    agent = auth("agent")
    await shipment(engine, client, "s1", 3, agent)
    parent = await ok(client, "GET", "/v1/workflows/s1", agent)
    assert (parent["parent"], parent["parent_key"]) == (None, None)
    assert parent["children"] == {
        "total": 3, "live": 3, "ended": 0, "failed": 0, "more": False,
        "text": "0 of 3 children done",
    }  # fmt: skip

    await ok(client, "POST", "/v1/workflows/s1.0/events", agent, {"event": "ship"})
    await ok(client, "POST", "/v1/workflows/s1.1/events", agent, {"event": "lose"})
    await Worker(engine).run_until_idle()  # the parent hears both ends
    parent = await ok(client, "GET", "/v1/workflows/s1", agent)
    assert parent["state"] == "fanning"
    assert parent["children"] == {
        "total": 3, "live": 1, "ended": 2, "failed": 1, "more": False,
        "text": "2 of 3 children done (1 failed)",
    }  # fmt: skip

    page = await ok(client, "GET", "/v1/workflows/s1/children", agent)
    assert page["next_cursor"] is None
    assert page["counts"] == parent["children"]
    assert [
        (c["id"], c["key"], c["type"], c["state"], c["terminal"], c["succeeded"])
        for c in page["items"]
    ] == [
        ("s1.0", "0", "parcel", "shipped", True, True),
        ("s1.1", "1", "parcel", "failed", True, False),
        ("s1.2", "2", "parcel", "shipping", False, None),
    ]

    child = await ok(client, "GET", "/v1/workflows/s1.2", agent)
    assert (child["parent"], child["parent_key"], child["children"]["total"]) == ("s1", "2", 0)
    # Every view carries the parent, not only the read of one workflow.
    listed = await ok(client, "GET", "/v1/workflows?type=parcel", agent)
    assert {w["id"]: w["parent"] for w in listed["items"]} == {f"s1.{i}": "s1" for i in range(3)}
    sent = await ok(client, "POST", "/v1/workflows/s1.2/events", agent, {"event": "ship"})
    assert (sent["parent"], sent["parent_key"]) == ("s1", "2")
    await Worker(engine).run_until_idle()
    done = await ok(client, "GET", "/v1/workflows/s1", agent)
    assert done["state"] == "done"
    assert done["children"]["text"] == "3 of 3 children done (1 failed)"


async def test_children_page_by_key_and_a_long_family_is_counted_from_one_page(
    engine: Engine, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = auth("agent")
    await shipment(engine, client, "s1", 3, agent)
    seen, cursor = [], None
    for _ in range(5):
        query = "?limit=1" + ("" if cursor is None else f"&cursor={cursor}")
        page = await ok(client, "GET", f"/v1/workflows/s1/children{query}", agent)
        seen += [c["id"] for c in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == ["s1.0", "s1.1", "s1.2"]
    assert cursor is None
    # The cursor holds the key, the same for every caller.
    assert paging.child_after(paging.child_cursor("1")) == "1"

    # More children than one page: counted over the first page only, and said so.
    monkeypatch.setattr("statewright.access.reads.CHILDREN_COUNTED", 2)
    counts = (await ok(client, "GET", "/v1/workflows/s1", agent))["children"]
    assert counts == {
        "total": 2, "live": 2, "ended": 0, "failed": 0, "more": True,
        "text": "0 of the first 2 children done; more children, not counted",
    }  # fmt: skip
    page = await ok(client, "GET", "/v1/workflows/s1/children", agent)
    assert (len(page["items"]), page["counts"]) == (3, counts)


async def test_children_are_scoped_to_the_callers_tenant_and_named_by_its_ids(
    engine: Engine, client: httpx.AsyncClient
) -> None:
    await shipment(engine, client, "g1", 2, GINA)
    assert {r.id for r in await engine.list_workflows() if r.type == "parcel"} == {
        "globex:g1.0",
        "globex:g1.1",
    }
    page = await ok(client, "GET", "/v1/workflows/g1/children", GINA)
    assert [c["id"] for c in page["items"]] == ["g1.0", "g1.1"]
    child = await ok(client, "GET", "/v1/workflows/g1.0", GINA)
    assert (child["id"], child["parent"], child["tenant"]) == ("g1.0", "g1", "globex")
    # The engine's actors name the parent and the child as the caller does too.
    await ok(client, "POST", "/v1/workflows/g1.0/events", GINA, {"event": "ship"})
    await Worker(engine).run_until_idle()
    started = await ok(client, "GET", "/v1/workflows/g1.0/history", GINA)
    assert started["items"][0]["actor"] == "workflow g1"
    heard = await ok(client, "GET", "/v1/workflows/g1/history", GINA)
    assert heard["items"][-1]["actor"] == "timer for child g1.0"
    # A caller that sees every tenant names them by their store ids.
    admin = auth("admin")
    page = await ok(client, "GET", "/v1/workflows/globex:g1/children", admin)
    assert [c["id"] for c in page["items"]] == ["globex:g1.0", "globex:g1.1"]
    heard = await ok(client, "GET", "/v1/workflows/globex:g1/history", admin)
    assert heard["items"][-1]["actor"] == "timer for child globex:g1.0"
    child = await ok(client, "GET", "/v1/workflows/globex:g1.1", admin)
    assert child["parent"] == "globex:g1"
    # Another tenant's caller: the parent and its children do not exist, by either id.
    async with unchanged(engine):
        for wid in ("g1", "globex:g1"):
            r = await client.get(f"/v1/workflows/{wid}/children", headers=auth("agent"))
            assert error_of(r, 404, "workflow_not_found")["message"].count(wid)
            assert "globex:g1." not in r.text
        r = await client.get("/v1/workflows/g1.0", headers=auth("agent"))
        error_of(r, 404, "workflow_not_found")


async def test_bad_ids_and_cursors_are_clear_errors_that_change_nothing(
    engine: Engine, client: httpx.AsyncClient
) -> None:
    agent = auth("agent")
    await shipment(engine, client, "s1", 2, agent)
    forged = paging.encode("no.such")  # a well-formed cursor no page returned
    async with unchanged(engine):
        error_of(await client.get("/v1/workflows/nope/children", headers=agent), 404,
                 "workflow_not_found")  # fmt: skip
        for path, status, code in [
            ("/v1/workflows/bad%20id/children", 422, "invalid_input"),
            ("/v1/workflows/s1/children?cursor=not%20base64", 422, "invalid_input"),
            ("/v1/workflows/s1/children?cursor=" + forged, 409, "invalid_cursor"),
            ("/v1/workflows/s1/children?cursor=" + paging.encode(3), 409, "invalid_cursor"),
            ("/v1/workflows/s1/children?limit=0", 422, "invalid_input"),
            ("/v1/workflows/s1/children?limit=1001", 422, "invalid_input"),
            ("/v1/workflows/s1/children?after=s1.0", 422, "invalid_input"),
        ]:
            r = await client.get(path, headers=agent)
            error = error_of(r, status, code)
            if code == "invalid_cursor":
                assert "next_cursor" in error["message"]
        # No token: 401 before anything is read.
        error_of(await client.get("/v1/workflows/s1/children"), 401, "unauthorized")
    # A viewer reads them as anyone of the tenant does.
    page = await ok(client, "GET", "/v1/workflows/s1/children", auth("viewer"))
    assert len(page["items"]) == 2
