"""The list tool pages with a cursor (every workflow once, in order), caps offset, and refuses
malformed cursors; a workflow's state view carries at most STEPS_SHOWN steps."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from mcp import Client

from statewright import Engine, SQLiteStore
from statewright.access import LOCAL
from statewright.engine.builtin import agent_task_type
from statewright.mcp_server import create_server
from statewright.mcp_server.state import STEPS_SHOWN
from tests.mcp.conftest import data, tool_error
from tests.store import bulk

T0 = 1_800_000_000.0


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[Engine]:
    async with Engine(SQLiteStore(tmp_path / "sw.db"), [agent_task_type()]) as eng:
        yield eng


async def test_the_list_tool_pages_with_a_cursor(engine: Engine) -> None:
    rows = [
        bulk.workflow(f"w-{i:03d}"[::-1], "agent_task", "planned", T0 + i % 7) for i in range(45)
    ]
    await bulk.insert(engine.store, "workflows", bulk.WORKFLOW_COLUMNS, rows)
    expected = [r[0] for r in sorted(rows, key=lambda r: (r[10], r[0]))]
    async with Client(create_server(engine, LOCAL)) as c:
        seen: list[str] = []
        args: dict[str, object] = {"limit": 20}
        for _ in range(10):
            page = data(await c.call_tool("list_workflows", args))
            seen += [w["workflow_id"] for w in page["workflows"]]
            if page["next_cursor"] is None:
                break
            args = {"limit": 20, "cursor": page["next_cursor"]}
        assert seen == expected
        cursor = data(await c.call_tool("list_workflows", {"limit": 5}))["next_cursor"]
        page = data(
            await c.call_tool("list_workflows", {"limit": 5, "cursor": cursor, "offset": 5})
        )
        assert [w["workflow_id"] for w in page["workflows"]] == expected[10:15]
        for bad, code in (
            ({"offset": 10_001}, "invalid_input"),
            ({"cursor": "garbage"}, "invalid_cursor"),  # (an InvalidInput)
            ({"cursor": 7}, "invalid_input"),
        ):
            assert tool_error(await c.call_tool("list_workflows", bad))["code"] == code


async def test_the_state_view_carries_a_bounded_number_of_steps(engine: Engine) -> None:
    row = (await engine.start("agent_task", workflow_id="t-1", actor="setup")).row
    await bulk.insert(
        engine.store,
        "steps",
        bulk.STEP_COLUMNS,
        ((f"t-1:s{i:04d}", "t-1", f"s{i}", "done", 1, row.created_at + i) for i in range(250)),
    )
    async with Client(create_server(engine, LOCAL)) as c:
        view = data(await c.call_tool("get_workflow_state", {"workflow_id": "t-1"}))
    assert len(view["completed_steps"]) == STEPS_SHOWN
    assert "more_steps" in view
