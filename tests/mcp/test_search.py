"""Search attributes through MCP on both stores (issue 28, item 4): ``list_workflows`` takes
``search: {name: value}`` (its schema names the declared attributes), an unknown name is a
tool error, and the listing and ``get_workflow_state`` show a workflow's attributes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from mcp import Client

from statewright import Engine, MachineBuilder, SQLiteStore, WorkflowType
from statewright.access import Principal
from statewright.mcp_server import create_server
from statewright.store.postgres import PostgresStore
from statewright.store.protocol import FullStore as Store
from tests.mcp.conftest import TOKENS, data, tool_error


@pytest.fixture(params=["sqlite", "postgres"])
async def engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Engine]:
    if request.param == "sqlite":
        store: Store = SQLiteStore(tmp_path / "sw.db")
    else:
        store = PostgresStore(request.getfixturevalue("pg_dsn"))
    b = MachineBuilder("parcel", description="A parcel.").state("new", initial=True)
    machine = b.state("done", terminal=True).event("go").transition("go", "new", "done").build()
    wtype = WorkflowType(machine, search_attributes=("order_number", "vip"))
    async with Engine(store, [wtype]) as e:
        yield e


def client(engine: Engine) -> Client:
    _, actor, roles, tenant = TOKENS["agent"]
    return Client(create_server(engine, Principal(actor, frozenset(roles), tenant)))


async def test_list_workflows_by_search_attributes(engine: Engine) -> None:
    async with client(engine) as c:
        [listing] = [t for t in (await c.list_tools()).tools if t.name == "list_workflows"]
        assert (
            "Declared: order_number, vip."
            in listing.input_schema["properties"]["search"]["description"]
        )
        for i, vip in enumerate([True, False]):
            data_in = {"order_number": f"A-{i}", "vip": vip}
            args = {"type": "parcel", "id": f"p{i}", "input": data_in}
            data(await c.call_tool("start_workflow", args))
        found = data(await c.call_tool("list_workflows", {"search": {"vip": True}}))
        assert [w["workflow_id"] for w in found["workflows"]] == ["p0"]
        assert found["workflows"][0]["search_attributes"] == {
            "order_number": "A-0",
            "vip": "true",
        }
        found = data(
            await c.call_tool("list_workflows", {"search": {"order_number": "A-1", "vip": False}})
        )
        assert [w["workflow_id"] for w in found["workflows"]] == ["p1"]
        error = tool_error(await c.call_tool("list_workflows", {"search": {"colour": "red"}}))
        assert error["code"] == "unknown_search_attribute"
        assert "unknown search attribute 'colour'" in error["message"]
        state = data(await c.call_tool("get_workflow_state", {"workflow_id": "p1"}))
        assert state["search_attributes"] == {"order_number": "A-1", "vip": "false"}
