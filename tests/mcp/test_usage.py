"""MCP ``get_workflow_state`` carries a workflow's agents' usage (total, by state, by model)
when they called a model, on both stores: from the steps the view reads anyway, or, for a
workflow with more steps than it shows, from a read of its model steps alone."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from mcp import Client

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
