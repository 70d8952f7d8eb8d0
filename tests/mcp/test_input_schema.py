"""A type's ``input_schema`` through MCP on both stores: the start tool's description shows
it; a start that fails it is a tool error listing the schema's errors, and writes nothing;
an unknown type is refused naming the known ones."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from mcp import Client

from statewright import Engine, MachineBuilder, SQLiteStore, WorkflowType
from statewright.access import Principal
from statewright.engine.builtin import agent_task_type
from statewright.mcp_server import create_server
from statewright.store.postgres import PostgresStore
from statewright.store.protocol import FullStore as Store
from tests.mcp.conftest import TOKENS, data, tool_error

SCHEMA = {
    "type": "object",
    "properties": {"order_number": {"type": "string"}},
    "required": ["order_number"],
}


@pytest.fixture(params=["sqlite", "postgres"])
async def engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Engine]:
    if request.param == "sqlite":
        store: Store = SQLiteStore(tmp_path / "sw.db")
    else:
        store = PostgresStore(request.getfixturevalue("pg_dsn"))
    b = MachineBuilder("parcel", description="A parcel.").state("new", initial=True)
    machine = b.state("done", terminal=True).event("go").transition("go", "new", "done").build()
    async with Engine(store, [agent_task_type(), WorkflowType(machine, input_schema=SCHEMA)]) as e:
        yield e


def client(engine: Engine) -> Client:
    _, actor, roles, tenant = TOKENS["agent"]
    return Client(create_server(engine, Principal(actor, frozenset(roles), tenant)))


async def test_a_start_that_fails_the_schema_is_a_tool_error(engine: Engine) -> None:
    async with client(engine) as c:
        [start] = [t for t in (await c.list_tools()).tools if t.name == "start_workflow"]
        assert (
            '- parcel: A parcel. Input schema: {"properties":{"order_number":{"type":"string"}},'
            '"required":["order_number"],"type":"object"}' in (start.description or "")
        )
        args = {"type": "parcel", "id": "p1", "input": {"order_number": 7}}
        error = tool_error(await c.call_tool("start_workflow", args))
        assert error["code"] == "input_not_accepted"
        assert error["errors"] == [
            {"path": "order_number", "message": "7 is not of type 'string'"}
        ]
        assert await engine.store.get_workflow("acme:p1") is None
        assert await engine.store.get_workflow("p1") is None

        error = tool_error(await c.call_tool("start_workflow", {"type": "parcel", "id": "p1"}))
        assert error["errors"][0]["message"] == "'order_number' is a required property"

        args["input"] = {"order_number": "A-7"}
        assert data(await c.call_tool("start_workflow", args))["state"] == "new"
