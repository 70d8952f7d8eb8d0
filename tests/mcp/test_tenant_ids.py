"""Callers bound to a tenant name workflows by their ids in it (statewright.ids): every tool
takes those ids for a workflow started through MCP (kept as ``acme:<id>``), and no answer,
error or not, names the tenant-qualified store id."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, MCPError

from statewright import Engine, SQLiteStore
from statewright.access import Principal
from statewright.engine.builtin import agent_task_type
from statewright.mcp_server import create_server
from statewright.store.postgres import PostgresStore
from statewright.store.protocol import FullStore as Store
from tests.mcp.conftest import ORDER, TOKENS, data, tool_error

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

from order_fulfilment import order_type
from refund_approval import refund_type

REFUND = {"order_id": "order-1003", "amount_cents": 8_900, "customer": "ada@example.com"}
POLICY = {"amount_cents": 8_900, "auto_approve_under_cents": 5_000, "hard_limit_cents": 100_000}


@pytest.fixture(params=["sqlite", "postgres"])
async def engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Engine]:
    if request.param == "sqlite":
        store: Store = SQLiteStore(tmp_path / "sw.db")
    else:
        store = PostgresStore(request.getfixturevalue("pg_dsn"))
    async with Engine(store, [agent_task_type(), order_type(), refund_type()]) as eng:
        yield eng


def connect(engine: Engine) -> Callable[[str], Client]:
    def client(who: str) -> Client:
        _, actor, roles, tenant = TOKENS[who]
        principal = Principal(actor, frozenset(roles), tenant)
        return Client(create_server(engine, principal, poll_interval=0.05))

    return client


async def test_every_tool_takes_the_callers_id_of_a_workflow_it_started(engine: Engine) -> None:
    """The cancel tool used to pass the store id (``acme:order-1``) back in as a caller's id
    and answer workflow_not_found; the HTTP cancel of the same workflow worked."""
    as_ = connect(engine)
    async with as_("agent") as agent:
        started = data(
            await agent.call_tool(
                "start_workflow", {"type": "order_fulfilment", "input": ORDER, "id": "order-1"}
            )
        )
        assert started["workflow_id"] == "order-1"
        assert (await engine.get("acme:order-1")).state == "created"  # kept tenant-qualified
        state = data(await agent.call_tool("get_workflow_state", {"workflow_id": "order-1"}))
        assert [a["tool"] for a in state["allowed_actions"]] == ["order_fulfilment__cancel"]
        listed = data(await agent.call_tool("list_workflows", {"type": "order_fulfilment"}))
        assert [w["workflow_id"] for w in listed["workflows"]] == ["order-1"]
        waited = data(
            await agent.call_tool("wait_for_state", {"workflow_id": "order-1", "timeout": 0})
        )
        assert waited["workflow_id"] == "order-1"
        posted = data(
            await agent.call_tool(
                "post_input", {"workflow_id": "order-1", "name": "note", "payload": {"a": 1}}
            )
        )
        assert posted["workflow_id"] == "order-1"
        diagram = await agent.read_resource("statewright://workflows/order-1/diagram")
        assert "class created current" in diagram.contents[0].text  # type: ignore[union-attr]
        cancelled = data(
            await agent.call_tool(
                "order_fulfilment__cancel",
                {"workflow_id": "order-1", "payload": {"reason": "changed my mind"}},
            )
        )
        assert (cancelled["workflow_id"], cancelled["state"]) == ("order-1", "cancelled")
        assert cancelled["done"] == "cancel: created -> cancelled"
    last = (await engine.history("acme:order-1"))[-1]
    assert (last.event, last.actor, last.payload) == (
        "cancel",
        "agent-7",
        {"reason": "changed my mind"},
    )

    # An event tool and an approval tool, by the ids the callers know.
    async with as_("ops") as ops:
        data(
            await ops.call_tool(
                "start_workflow", {"type": "refund_approval", "input": REFUND, "id": "refund-1"}
            )
        )
        data(await ops.call_tool("refund_approval__validated", {"workflow_id": "refund-1"}))
        paused = data(
            await ops.call_tool(
                "refund_approval__policy_checked", {"workflow_id": "refund-1", "payload": POLICY}
            )
        )
        assert paused["state"] == "awaiting_approval"
    async with as_("boss") as boss:
        approved = data(
            await boss.call_tool(
                "refund_approval__approval_granted",
                {"workflow_id": "refund-1", "expected_version": paused["version"]},
            )
        )
        assert (approved["workflow_id"], approved["state"]) == ("refund-1", "paying_out")
    decision = (await engine.history("acme:refund-1"))[-1]
    assert (decision.event, decision.actor) == ("approval_granted", "alice")


async def test_the_cancel_tool_takes_if_allowed(engine: Engine) -> None:
    """The README says the event tools take if_allowed; the cancel tool refused it."""
    async with connect(engine)("agent") as agent:
        tools = {t.name: t for t in (await agent.list_tools()).tools}
        schema = tools["order_fulfilment__cancel"].input_schema
        assert schema["properties"]["if_allowed"]["type"] == "boolean"
        data(
            await agent.call_tool(
                "start_workflow", {"type": "order_fulfilment", "input": ORDER, "id": "order-1"}
            )
        )
        args = {"workflow_id": "order-1", "payload": {"reason": "no"}}
        done = data(
            await agent.call_tool("order_fulfilment__cancel", {**args, "if_allowed": True})
        )
        assert (done["applied"], done["state"]) == (True, "cancelled")
        log = await engine.history("acme:order-1")

        late = data(
            await agent.call_tool(
                "order_fulfilment__cancel", {**args, "if_allowed": True, "idempotency_key": "k2"}
            )
        )
        assert (late["applied"], late["replayed"], late["reason"]) == (
            False,
            False,
            "terminal state",
        )
        assert (late["workflow_id"], late["state"]) == ("order-1", "cancelled")
        assert "not applied" in late["done"]
        assert await engine.history("acme:order-1") == log
        assert await engine.store.rejections(0.0) == []

        # Without it: refused, as before; a bad value or payload is refused either way.
        err = tool_error(await agent.call_tool("order_fulfilment__cancel", args))
        assert (err["code"], err["workflow_id"]) == ("illegal_transition", "order-1")
        err = tool_error(
            await agent.call_tool("order_fulfilment__cancel", {**args, "if_allowed": "yes"})
        )
        assert err["code"] == "invalid_input"
        err = tool_error(
            await agent.call_tool(
                "order_fulfilment__cancel",
                {"workflow_id": "order-1", "payload": {"reason": 7}, "if_allowed": True},
            )
        )
        assert err["code"] == "invalid_payload"
    assert await engine.history("acme:order-1") == log


async def test_no_error_names_the_tenant_qualified_id(engine: Engine) -> None:
    """Every refusal a tenant's caller can provoke words the workflow by the caller's id."""
    errors: list[dict[str, Any]] = []
    async with connect(engine)("agent") as agent:

        async def refused(tool: str, args: dict[str, Any], code: str) -> None:
            err = tool_error(await agent.call_tool(tool, args))
            assert err["code"] == code, (tool, args, err)
            errors.append(err)

        start = {"type": "order_fulfilment", "input": ORDER, "id": "order-1"}
        data(await agent.call_tool("start_workflow", start))
        await refused("start_workflow", {**start, "type": "refund_approval"}, "workflow_exists")
        cancel = {"workflow_id": "order-1", "payload": {"reason": "no"}}
        await refused(
            "order_fulfilment__cancel", {**cancel, "expected_version": 9}, "version_conflict"
        )
        await refused("order_fulfilment__refund", {"workflow_id": "order-1"}, "illegal_transition")
        note = {"workflow_id": "order-1", "name": "note", "idempotency_key": "k1"}
        data(await agent.call_tool("post_input", {**note, "payload": {"a": 1}}))
        await refused("post_input", {**note, "payload": {"a": 2}}, "idempotency_key_reused")
        data(
            await agent.call_tool("order_fulfilment__cancel", {**cancel, "idempotency_key": "c1"})
        )
        await refused(
            "order_fulfilment__cancel",
            {"workflow_id": "order-1", "payload": {"reason": "other"}, "idempotency_key": "c1"},
            "idempotency_key_reused",
        )
        await refused(
            "post_input",
            {"workflow_id": "order-1", "name": "n", "payload": {}},
            "workflow_finished",
        )
        await refused("get_workflow_state", {"workflow_id": "acme:order-1"}, "workflow_not_found")
        with pytest.raises(MCPError) as raised:
            await agent.read_resource("statewright://workflows/nope/diagram")
        assert "'nope'" in str(raised.value)
    for err in errors:
        text = json.dumps(err)
        if err["code"] != "workflow_not_found":  # (that one echoes the id it was given)
            assert "acme:" not in text, err
            assert "order-1" in err["message"] or err["code"] == "illegal_transition", err
        assert err.get("workflow_id") in (None, "order-1", "acme:order-1"), err
