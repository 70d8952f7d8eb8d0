"""The event tools' ``if_allowed``: told, not refused, when the state does not allow the event
now; nothing changes, and no rejection is logged."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from mcp import Client

from statewright import Engine, SQLiteStore
from statewright.access import Principal
from statewright.engine.builtin import agent_task_type
from statewright.mcp_server import build_catalogue, create_server
from tests.mcp.conftest import TOKENS, data, tool_error


def principal(who: str) -> Principal:
    _, actor, roles, tenant = TOKENS[who]
    return Principal(actor, frozenset(roles), tenant)


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[Engine]:
    async with Engine(SQLiteStore(tmp_path / "sw.db"), [agent_task_type()]) as eng:
        yield eng


async def test_only_the_send_tools_take_it(engine: Engine) -> None:
    catalogue = build_catalogue(engine, principal("boss"))
    complete = catalogue.events["agent_task__complete"].tool.input_schema
    assert complete["properties"]["if_allowed"]["type"] == "boolean"
    assert "if_allowed" not in complete["required"]
    grant = catalogue.events["agent_task__approval_granted"].tool.input_schema
    assert "if_allowed" not in grant["properties"]


async def test_a_late_call_is_not_applied_and_changes_nothing(engine: Engine) -> None:
    await engine.start("agent_task", {}, workflow_id="t1", actor="t", tenant="acme")
    async with Client(create_server(engine, principal("agent"))) as c:
        started = data(await c.call_tool("agent_task__start", {"workflow_id": "t1"}))
        assert started["applied"] is True and started["state"] == "running"
        done = data(await c.call_tool("agent_task__complete", {"workflow_id": "t1"}))
        assert done["state"] == "done"
        log = await engine.history("t1")

        late = data(
            await c.call_tool(
                "agent_task__complete",
                {"workflow_id": "t1", "if_allowed": True, "idempotency_key": "late-1"},
            )
        )
        assert (late["applied"], late["replayed"], late["reason"]) == (
            False,
            False,
            "terminal state",
        )
        assert late["state"] == "done" and late["version"] == done["version"]
        assert "not applied" in late["done"]
        assert await engine.history("t1") == log
        assert await engine.store.rejections(0.0) == []

        # Without it: an error result, as before.
        err = tool_error(await c.call_tool("agent_task__complete", {"workflow_id": "t1"}))
        assert err["code"] == "illegal_transition"
        err = tool_error(
            await c.call_tool("agent_task__complete", {"workflow_id": "t1", "if_allowed": "yes"})
        )
        assert err["code"] == "invalid_input"
        err = tool_error(
            await c.call_tool("agent_task__complete", {"workflow_id": "nope", "if_allowed": True})
        )
        assert err["code"] == "workflow_not_found"
