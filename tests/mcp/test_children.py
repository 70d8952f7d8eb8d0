"""MCP ``get_workflow_state`` of a parent and of a child (issue 25), in-process through the
SDK's in-memory client over both stores: a parent says what it waits for ("2 of 3 children
done"), a child names its parent, both as the caller's tenant knows them; another tenant's
caller finds neither, and the child events stay the system's (no agent tool fires them)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from mcp import Client

from statewright import Engine, SQLiteStore, Worker
from statewright.access import LOCAL_AGENT
from statewright.mcp_server import build_catalogue, create_server
from statewright.store.postgres import PostgresStore
from statewright.store.protocol import FullStore as Store
from tests.family_app import TYPES
from tests.mcp.conftest import data, tool_error
from tests.mcp.test_server import principal


@pytest.fixture(params=["sqlite", "postgres"])
async def engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Engine]:
    if request.param == "sqlite":
        store: Store = SQLiteStore(tmp_path / "sw.db")
    else:
        store = PostgresStore(request.getfixturevalue("pg_dsn"))
    async with Engine(store, TYPES) as eng:
        yield eng


async def test_a_parent_says_what_it_waits_for_and_a_child_names_its_parent(
    engine: Engine,
) -> None:
    tools = {t.name for t in build_catalogue(engine, principal("agent")).tools()}
    assert {"parcel__ship", "shipment__cancel"} <= tools
    assert not {"shipment__child_done", "shipment__child_failed"} & tools
    async with Client(create_server(engine, principal("agent"))) as c:
        started = data(
            await c.call_tool(
                "start_workflow",
                {"type": "shipment", "id": "s1", "input": {"parcels": ["a", "b", "c"]}},
            )
        )
        assert "children" not in started and "parent" not in started
        await Worker(engine).run_until_idle()  # the parent starts its children
        view = data(await c.call_tool("get_workflow_state", {"workflow_id": "s1"}))
        assert view["children"] == {
            "total": 3, "live": 3, "ended": 0, "failed": 0, "more": False,
            "text": "0 of 3 children done",
        }  # fmt: skip
        assert view["waiting_for"].startswith("its children to end (0 of 3 children done)")
        assert "parent" not in view

        assert data(await c.call_tool("parcel__ship", {"workflow_id": "s1.0"}))["parent"] == {
            "workflow_id": "s1",
            "key": "0",
        }
        data(await c.call_tool("parcel__lose", {"workflow_id": "s1.1"}))
        await Worker(engine).run_until_idle()  # the parent hears both ends
        view = data(await c.call_tool("get_workflow_state", {"workflow_id": "s1"}))
        assert (view["state"], view["children"]["text"]) == (
            "fanning",
            "2 of 3 children done (1 failed)",
        )
        assert (view["children"]["live"], view["children"]["ended"]) == (1, 2)
        assert "its children to end (2 of 3 children done (1 failed))" in view["waiting_for"]

        child = data(await c.call_tool("get_workflow_state", {"workflow_id": "s1.2"}))
        assert child["parent"] == {"workflow_id": "s1", "key": "2"}
        assert child["recent_transitions"][0]["actor"] == "workflow s1"  # not acme:s1
        heard = {(t["event"], t["actor"]) for t in view["recent_transitions"][-2:]}
        assert heard == {
            ("child_done", "timer for child s1.0"),
            ("child_failed", "timer for child s1.1"),
        }
        assert "children" not in child
        listed = data(await c.call_tool("list_workflows", {"type": "parcel"}))
        assert {w["workflow_id"] for w in listed["workflows"]} == {"s1.0", "s1.1", "s1.2"}

        data(await c.call_tool("parcel__ship", {"workflow_id": "s1.2"}))
        await Worker(engine).run_until_idle()
        view = data(await c.call_tool("get_workflow_state", {"workflow_id": "s1"}))
        assert (view["state"], view["children"]["text"]) == (
            "done",
            "3 of 3 children done (1 failed)",
        )
        assert view["waiting_for"] == "nothing: the workflow is finished"
    # The store keeps the tenant's ids qualified; the agent never saw them.
    assert (await engine.get("acme:s1.2")).parent == "acme:s1"

    # Another tenant's agent: neither the parent nor a child exists.
    async with Client(create_server(engine, principal("other"))) as c:
        for wid in ("s1", "s1.0", "acme:s1"):
            err = tool_error(await c.call_tool("get_workflow_state", {"workflow_id": wid}))
            assert err["code"] == "workflow_not_found"
            assert "acme:" not in str(err) or wid == "acme:s1"
    # The default (least-privilege) caller of stdio MCP is in the default tenant: the same.
    async with Client(create_server(engine, LOCAL_AGENT)) as c:
        err = tool_error(await c.call_tool("get_workflow_state", {"workflow_id": "s1"}))
        assert err["code"] == "workflow_not_found"
