"""The server in-process, through the SDK's in-memory client: over both stores (the same
drive as over the transports, on PostgreSQL too) and the finer points of the tools."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, MCPError

from statewright import Engine, SQLiteStore, Worker, ids
from statewright.access import LOCAL, Principal
from statewright.engine.builtin import agent_task_type
from statewright.mcp_server import build_catalogue, create_server
from statewright.store.postgres import PostgresStore
from statewright.store.protocol import FullStore as Store
from tests.mcp.conftest import ORDER, TOKENS, Progress, data, tool_error
from tests.mcp.report_app import TYPES as REPORT_TYPES

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

from order_fulfilment import order_type
from refund_approval import refund_type


def principal(who: str) -> Principal:
    _, actor, roles, tenant = TOKENS[who]
    return Principal(actor, frozenset(roles), tenant)


@pytest.fixture(params=["sqlite", "postgres"])
async def any_engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Engine]:
    if request.param == "sqlite":
        store: Store = SQLiteStore(tmp_path / "sw.db")
    else:
        store = PostgresStore(request.getfixturevalue("pg_dsn"))
    engine = Engine(store, [agent_task_type(), order_type(), refund_type(), *REPORT_TYPES])
    async with engine:
        yield engine


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[Engine]:
    types = [agent_task_type(), order_type(), refund_type(), *REPORT_TYPES]
    async with Engine(SQLiteStore(tmp_path / "sw.db"), types) as eng:
        yield eng


def connect(engine: Engine) -> Callable[[str], Client]:
    """An in-memory client of a server for ``who`` (a fresh server each time)."""
    return lambda who: Client(create_server(engine, principal(who), poll_interval=0.05))


@asynccontextmanager
async def worker(engine: Engine) -> AsyncIterator[Worker]:
    w = Worker(engine, poll_interval=0.05)
    task = asyncio.create_task(w.run())
    try:
        yield w
    finally:
        w.stop(5.0)
        await task


async def test_drive_an_order_to_delivered_over_either_store(any_engine: Engine) -> None:
    engine = any_engine
    async with connect(engine)("ops") as c, worker(engine):
        wid = data(
            await c.call_tool(
                "start_workflow", {"type": "order_fulfilment", "input": ORDER, "id": "o-7"}
            )
        )["workflow_id"]
        progress = Progress()
        ready = data(
            await c.call_tool(
                "wait_for_state",
                {"workflow_id": wid, "states": ["fulfillment_triggered"], "timeout": 20},
                progress_callback=progress,
            )
        )
        assert ready["state"] == "fulfillment_triggered" and progress.seen
        logged = await engine.history(ids.qualify("acme", wid))  # store id (ids)
        err = tool_error(
            await c.call_tool(
                "order_fulfilment__close", {"workflow_id": wid, "expected_version": 5}
            )
        )
        assert (err["code"], err["state"]) == ("illegal_transition", "fulfillment_triggered")
        assert err["allowed_actions"] == ["order_fulfilment__ship"]
        assert await engine.history(ids.qualify("acme", wid)) == logged
        ship = {"workflow_id": wid, "payload": {"tracking_number": "T-7"}}
        assert data(await c.call_tool("order_fulfilment__ship", ship))["state"] == "shipped"
        # The webhook's data reached the context through the event's assign action.
        shipped = await engine.get(ids.qualify("acme", wid))
        assert shipped.context["tracking_number"] == "T-7"
        done = data(await c.call_tool("order_fulfilment__deliver", {"workflow_id": wid}))
        assert done["state"] == "delivered"
        assert [s["step"] for s in done["completed_steps"]] == [
            "reserve",
            "authorize",
            "capture",
            "fulfil",
        ]
    assert (await engine.get(ids.qualify("acme", wid))).state == "delivered"
    await engine.check(ids.qualify("acme", wid))  # the log replays to the row


async def test_event_tools_carry_the_events_schema_and_where_they_fire(engine: Engine) -> None:
    tools = {t.name: t for t in build_catalogue(engine, principal("ops")).tools()}
    ship = tools["order_fulfilment__ship"]
    schema = ship.input_schema
    assert schema["required"] == ["workflow_id", "payload"]
    assert schema["additionalProperties"] is False
    assert schema["properties"]["payload"]["required"] == ["tracking_number"]
    assert "expected_version" in schema["properties"]
    assert ship.description is not None
    assert "The parcel left the warehouse" in ship.description
    assert "fulfillment_triggered -> shipped" in ship.description
    # An event without a payload schema takes an optional, empty payload.
    assert tools["order_fulfilment__deliver"].input_schema["required"] == ["workflow_id"]
    # Guarded edges say when each applies.
    policy = build_catalogue(engine, LOCAL).events["refund_approval__policy_checked"]
    assert policy.tool.description is not None
    assert "checking_policy -> rejected if payload.amount_cents >" in policy.tool.description
    # The approver's decision tools take a comment, never the approver's name.
    grant = build_catalogue(engine, principal("boss")).events["refund_approval__approval_granted"]
    assert set(grant.tool.input_schema["properties"]) == {
        "workflow_id",
        "comment",
        "expected_version",
        "idempotency_key",
    }


async def test_a_viewer_only_reads(engine: Engine) -> None:
    names = {t.name for t in build_catalogue(engine, principal("viewer")).tools()}
    assert names == {"get_workflow_state", "list_workflows", "wait_for_state"}
    async with connect(engine)("viewer") as c:
        err = tool_error(await c.call_tool("start_workflow", {"type": "report"}))
        assert err["code"] == "unknown_tool"


async def test_the_ops_role_only_reads(engine: Engine) -> None:
    """``ops`` (the /metrics scraper's role) reads like viewer: no tool that writes."""
    await engine.start("order_fulfilment", ORDER, workflow_id="o-1", actor="t", tenant="acme")
    ops = Principal("scraper", frozenset({"ops"}), "acme")
    names = {t.name for t in build_catalogue(engine, ops).tools()}
    assert names == {"get_workflow_state", "list_workflows", "wait_for_state"}
    before = await engine.history("o-1")
    async with Client(create_server(engine, ops)) as c:
        assert data(await c.call_tool("get_workflow_state", {"workflow_id": "o-1"}))["state"] == (
            "created"
        )
        for tool, args in (
            ("start_workflow", {"type": "report"}),
            ("post_input", {"workflow_id": "o-1", "name": "n", "payload": {}}),
        ):
            assert tool_error(await c.call_tool(tool, args))["code"] == "unknown_tool"
        err = tool_error(await c.call_tool("order_fulfilment__cancel", {"workflow_id": "o-1"}))
        assert err["code"] == "forbidden"
    assert await engine.history("o-1") == before
    assert await engine.store.next_input("o-1") is None


async def test_refusals_are_structured_and_change_nothing(engine: Engine) -> None:
    await engine.start("order_fulfilment", ORDER, workflow_id="o-1", actor="t", tenant="acme")
    await engine.start("report", {}, workflow_id="r-1", actor="t", tenant="acme")
    before = await engine.history("o-1")
    async with connect(engine)("agent") as c:
        cases: list[tuple[str, dict[str, Any], str]] = [
            ("order_fulfilment__ship", {"workflow_id": "o-1"}, "forbidden"),
            ("refund_approval__approval_granted", {"workflow_id": "o-1"}, "forbidden"),
            ("no_such_tool", {"workflow_id": "o-1"}, "unknown_tool"),
            ("order_fulfilment__cancel", {"workflow_id": "o-1", "reason": "x"}, "invalid_input"),
            ("order_fulfilment__cancel", {"workflow_id": "o-1", "payload": []}, "invalid_input"),
            ("order_fulfilment__cancel", {"workflow_id": "o-1", "payload": {}}, "invalid_payload"),
            ("order_fulfilment__cancel", {"payload": {"reason": "x"}}, "invalid_input"),
            (
                "order_fulfilment__cancel",
                {"workflow_id": "o-1", "payload": {"reason": "x"}, "expected_version": 7},
                "version_conflict",
            ),
            (
                "order_fulfilment__cancel",
                {"workflow_id": "o-1", "payload": {"reason": "x"}, "expected_version": True},
                "invalid_input",
            ),
            ("order_fulfilment__cancel", {"workflow_id": "nope"}, "workflow_not_found"),
            ("wait_for_state", {"workflow_id": "o-1", "states": ["nowhere"]}, "invalid_input"),
            ("wait_for_state", {"workflow_id": "o-1", "timeout": 301}, "invalid_input"),
            ("list_workflows", {"limit": 0}, "invalid_input"),
            ("start_workflow", {"type": "no_such_type"}, "unknown_workflow_type"),
            ("start_workflow", {"type": "report", "id": "bad id!"}, "invalid_input"),
        ]
        for name, args, code in cases:
            err = tool_error(await c.call_tool(name, args))
            assert err["code"] == code, (name, args, err)
            assert "Nothing was changed" in err["hint"]
        # A tool of another machine names the workflow's state and the caller's actions.
        err = tool_error(
            await c.call_tool(
                "order_fulfilment__cancel", {"workflow_id": "r-1", "payload": {"reason": "x"}}
            )
        )
        assert (err["code"], err["state"], err["allowed_actions"]) == (
            "invalid_input",
            "working",
            [],
        )
    assert await engine.history("o-1") == before
    assert [r.id for r in await engine.list_workflows()] == ["o-1", "r-1"]


async def test_cancel_goes_through_the_engine(engine: Engine) -> None:
    await engine.start("order_fulfilment", ORDER, workflow_id="o-1", actor="t", tenant="acme")
    async with connect(engine)("agent") as c:
        state = data(await c.call_tool("get_workflow_state", {"workflow_id": "o-1"}))
        assert [a["tool"] for a in state["allowed_actions"]] == ["order_fulfilment__cancel"]
        done = data(
            await c.call_tool(
                "order_fulfilment__cancel",
                {
                    "workflow_id": "o-1",
                    "payload": {"reason": "changed my mind"},
                    "expected_version": 1,
                },
            )
        )
    assert done["state"] == "cancelled" and done["terminal"] is True
    last = (await engine.history("o-1"))[-1]
    assert (last.event, last.actor, last.payload) == (
        "cancel",
        "agent-7",
        {"reason": "changed my mind"},
    )


async def test_a_fresh_context_continues_from_the_state_alone(engine: Engine) -> None:
    """After a restart, one call tells a new model what is done and what it may do."""
    await engine.start("order_fulfilment", ORDER, workflow_id="o-1", actor="t", tenant="acme")
    await Worker(engine).run_until_idle()
    async with connect(engine)("ops") as c:  # a new server and client: no memory at all
        state = data(await c.call_tool("get_workflow_state", {"workflow_id": "o-1"}))
    assert state["state"] == "fulfillment_triggered"
    assert state["waiting_for"] == "you: one of allowed_actions"
    assert [a["tool"] for a in state["allowed_actions"]] == ["order_fulfilment__ship"]
    steps = {s["step"]: s["result"] for s in state["completed_steps"]}
    assert set(steps) == {"reserve", "authorize", "capture", "fulfil"}
    assert steps["capture"]["charge_id"] == state["summary"]["charge_id"]
    assert [t["to"] for t in state["recent_transitions"]] == [
        "created",
        "inventory_reserved",
        "payment_authorized",
        "payment_captured",
        "fulfillment_triggered",
    ]


async def test_waiting_without_a_worker_times_out_and_changes_nothing(engine: Engine) -> None:
    await engine.start("report", {}, workflow_id="r-1", actor="t", tenant="acme")
    async with connect(engine)("ops") as c:
        state = data(await c.call_tool("get_workflow_state", {"workflow_id": "r-1"}))
        assert "runs automatically" in state["waiting_for"]
        waited = data(await c.call_tool("wait_for_state", {"workflow_id": "r-1", "timeout": 0.2}))
    assert (waited["reached"], waited["timed_out"], waited["state"]) == (False, True, "working")
    assert (await engine.get("r-1")).version == 1


async def test_resources(engine: Engine) -> None:
    await engine.start("report", {}, workflow_id="r-1", actor="t", tenant="acme")
    async with connect(engine)("other") as c:
        listed = (await c.list_resources()).resources
        assert len(listed) == 2 * len(engine.types)
        diagram = await c.read_resource("statewright://machines/report/diagram")
        assert diagram.contents[0].mime_type == "text/vnd.mermaid"
        templates = (await c.list_resource_templates()).resource_templates
        assert templates[0].uri_template == "statewright://workflows/{workflow_id}/diagram"
        # Another tenant's workflow does not exist for this caller.
        with pytest.raises(MCPError, match="no workflow with id 'r-1'"):
            await c.read_resource("statewright://workflows/r-1/diagram")
        with pytest.raises(MCPError, match="no resource"):
            await c.read_resource("statewright://machines/report/nothing")
