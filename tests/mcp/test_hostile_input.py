"""Hostile input over MCP, on both stores: the same id validator and input policy as REST,
another tenant's id is a free id, and deep stored values read back through the tools."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from statewright import Engine, SQLiteStore, ids
from statewright.engine.builtin import agent_task_type
from statewright.jsonvalue import NO_LIMITS
from statewright.store.postgres import PostgresStore
from statewright.store.protocol import FullStore as Store
from tests.mcp.conftest import data, tool_error
from tests.mcp.test_idempotency import client, order_type


@pytest.fixture(params=["sqlite", "postgres"])
async def engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Engine]:
    if request.param == "sqlite":
        store: Store = SQLiteStore(tmp_path / "sw.db")
    else:
        store = PostgresStore(request.getfixturevalue("pg_dsn"))
    async with Engine(store, [agent_task_type(), order_type()]) as eng:
        yield eng


def nested(levels: int) -> Any:
    value: Any = "deep"
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize(
    "bad",
    [
        *("t-1\n", "t-1\r\n", " t-1", "t:1", "", "x" * 201),
        # The forms of the ids schedules and forks make (issue 22): never a caller's.
        *("nightly.20270115T020000Z", "t-1.fork-2"),
    ],
)
async def test_an_id_rest_refuses_is_refused_here_too(engine: Engine, bad: str) -> None:
    async with client(engine, "agent") as c:
        args = {"type": "agent_task", "input": {}, "id": bad}
        assert tool_error(await c.call_tool("start_workflow", args))["code"] == "invalid_input"
    assert await engine.list_workflows() == []


# (The SDK's client cannot even send a value deeper than 255 levels: pydantic stops there.)
@pytest.mark.parametrize("levels", [65, 200])
async def test_deep_values_are_refused_and_change_nothing(engine: Engine, levels: int) -> None:
    async with client(engine, "agent") as c:
        made = data(await c.call_tool("start_workflow", {"type": "agent_task", "id": "t-1"}))
        assert made["workflow_id"] == "t-1"
        args = {"type": "agent_task", "input": {"x": nested(levels)}, "id": "t-2"}
        err = tool_error(await c.call_tool("start_workflow", args))
        assert (err["code"], err["limit"], err["max"]) == ("value_too_deep", "max_depth", 64)
        args = {"workflow_id": "t-1", "name": "note", "payload": {"x": nested(levels)}}
        err = tool_error(await c.call_tool("post_input", args))
        assert (err["code"], err["limit"], err["max"]) == ("value_too_deep", "max_depth", 64)
    assert [r.id for r in await engine.list_workflows()] == [ids.qualify("acme", "t-1")]
    assert len(await engine.history(ids.qualify("acme", "t-1"))) == 1


async def test_another_tenants_id_is_a_free_id(engine: Engine) -> None:
    async with client(engine, "agent") as c:
        mine = data(await c.call_tool("start_workflow", {"type": "agent_task", "id": "t-1"}))
    async with client(engine, "other") as c:
        theirs = data(
            await c.call_tool("start_workflow", {"type": "order_fulfilment", "id": "t-1"})
        )
        assert (theirs["created"], theirs["workflow_id"]) == (True, "t-1")
        state = data(await c.call_tool("get_workflow_state", {"workflow_id": "t-1"}))
        assert state["type"] == "order_fulfilment"
    assert (mine["type"], mine["workflow_id"]) == ("agent_task", "t-1")
    assert {r.id for r in await engine.list_workflows()} == {"acme:t-1", "globex:t-1"}


async def test_deep_values_once_stored_read_back_through_the_tools(engine: Engine) -> None:
    # Written by an engine with no limits on the same store: as a store written before the
    # policy existed holds.
    lax = Engine(engine.store, engine.types, clock=engine.clock, limits=NO_LIMITS)
    deep = nested(1_000)
    await lax.start("agent_task", {"deep": deep}, workflow_id="t-1", tenant="acme")
    await lax.send("t-1", "start", {"deep": deep})
    await engine.store.record_progress("t-1", {"deep": deep}, 0.0, None)
    async with client(engine, "agent") as c:
        state = data(await c.call_tool("get_workflow_state", {"workflow_id": "t-1"}))
        assert state["state"] == "running" and "deep" in state["summary"]
        listed = data(await c.call_tool("list_workflows", {}))
        assert [w["workflow_id"] for w in listed["workflows"]] == ["t-1"]
