"""MCP ``get_workflow_state`` carries a workflow's agents' usage (total, by state, by model)
when they called a model, on both stores: from the steps the view reads anyway, or, for a
workflow with more steps than it shows, from a read of its model steps alone."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from statewright import Engine, SQLiteStore, Worker
from statewright.mcp_server import create_server, state
from statewright.store.postgres import PostgresStore
from statewright.store.protocol import FullStore as Store
from tests.agents_app import CARD, TYPES
from tests.mcp.conftest import data
from tests.mcp.test_server import principal


@pytest.fixture(params=["sqlite", "postgres"])
async def engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Engine]:
    if request.param == "sqlite":
        store: Store = SQLiteStore(tmp_path / "sw.db")
    else:
        store = PostgresStore(request.getfixturevalue("pg_dsn"))
    async with Engine(store, TYPES) as eng:
        yield eng


@pytest.mark.parametrize("shown", [state.STEPS_SHOWN, 1])
async def test_the_state_view_has_the_usage(
    engine: Engine, shown: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(state, "STEPS_SHOWN", shown)
    async with Client(create_server(engine, principal("agent"))) as c:
        started = data(
            await c.call_tool(
                "start_workflow", {"type": "triage", "id": "t1", "input": {"card": CARD}}
            )
        )
        assert "usage" not in started  # no model call yet
        await Worker(engine).run_until_idle()
        view = data(await c.call_tool("get_workflow_state", {"workflow_id": "t1"}))
    assert view["state"] == "done"
    assert view["usage"]["total"] == {
        "input_tokens": 160,
        "output_tokens": 40,
        "tokens": 200,
        "cost": 0.004,
        "model_calls": 2,
    }
    assert set(view["usage"]["by_model"]) == {"big", "small"}
    assert ("more_steps" in view) == (shown == 1)


async def test_the_conversation_resource_is_redacted_for_agents(engine: Engine) -> None:
    async with Client(create_server(engine, principal("agent"))) as c:
        await c.call_tool(
            "start_workflow", {"type": "triage", "id": "t1", "input": {"card": CARD}}
        )
        await Worker(engine).run_until_idle()
        templates = (await c.list_resource_templates()).resource_templates
        uri = "statewright://workflows/{workflow_id}/conversation"
        assert uri in [t.uri_template for t in templates]
        read = await c.read_resource("statewright://workflows/t1/conversation")
        content = read.contents[0]
        assert content.mime_type == "application/json"
        text = getattr(content, "text", "")
        body = json.loads(text)
        assert body["workflow_id"] == "t1"
        assert [(m["role"], m["step"]) for m in body["messages"]] == [
            ("user", "triage.v1.model.0"),
            ("assistant", "triage.v1.model.0"),
            ("user", "triage.v1.model.1"),
            ("assistant", "triage.v1.model.1"),
        ]
        assert CARD not in text  # an agent never sees what the type redacts
        with pytest.raises(MCPError, match="no workflow with id 'nope'"):
            await c.read_resource("statewright://workflows/nope/conversation")
