"""``statewright mcp`` as a real subprocess, driven by the SDK's stdio client."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import pytest
from typer.testing import CliRunner

from statewright.access import Principal
from statewright.cli import app
from statewright.definition.formats.document import to_dict
from tests.mcp.conftest import (
    APPS,
    FIXED_TOOLS,
    ORDER,
    TOKENS,
    Progress,
    approval_tools,
    data,
    history,
    stdio_session,
    tool_error,
    write_tokens,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

from order_fulfilment import order_machine
from refund_approval import refund_machine


@pytest.fixture
def errlog(tmp_path: Path) -> Iterator[TextIO]:
    """Where the server subprocesses' stderr goes (printed, so a failing test shows it)."""
    with (tmp_path / "server.log").open("w+") as log:
        yield log
        log.seek(0)
        print(log.read())


async def _tools(db: Path, tokens: Path, who: str, errlog: TextIO) -> set[str]:
    async with stdio_session(db, tokens, who, errlog) as session:
        return {t.name for t in (await session.list_tools()).tools}


async def test_an_agent_gets_no_approval_tool_and_an_approver_does(
    tmp_path: Path, errlog: TextIO
) -> None:
    tokens = write_tokens(tmp_path / "tokens.yaml")
    db = tmp_path / "sw.db"
    agent, boss = await asyncio.gather(
        _tools(db, tokens, "agent", errlog), _tools(db, tokens, "boss", errlog)
    )
    assert FIXED_TOOLS <= agent
    # Exactly the events the machines let the agent role fire, one tool each.
    role = Principal("a", frozenset({"agent"}))
    for machine in (order_machine(), refund_machine()):
        mine = {f"{machine.name}__{e.name}" for e in machine.events.values() if role.may_fire(e)}
        assert mine == {n for n in agent if n.startswith(f"{machine.name}__")}
    assert {"order_fulfilment__cancel", "order_fulfilment__refund"} <= agent
    assert "order_fulfilment__ship" not in agent  # the warehouse's, not the agent's
    assert approval_tools(agent) == set()
    assert {
        "refund_approval__approval_granted",
        "refund_approval__approval_denied",
        "agent_task__approval_granted",
    } <= approval_tools(boss)


async def test_drive_an_order_from_created_to_delivered(tmp_path: Path, errlog: TextIO) -> None:
    tokens = write_tokens(tmp_path / "tokens.yaml")
    db = tmp_path / "sw.db"
    async with stdio_session(db, tokens, "ops", errlog, worker=True) as s:
        started = data(
            await s.call_tool(
                "start_workflow", {"type": "order_fulfilment", "input": ORDER, "id": "order-1"}
            )
        )
        assert (started["created"], started["state"], started["version"]) == (True, "created", 1)
        again = data(
            await s.call_tool(
                "start_workflow", {"type": "order_fulfilment", "input": ORDER, "id": "order-1"}
            )
        )
        assert again["created"] is False  # a retried start is safe

        # The worker runs the automatic states; the wait relays them as progress.
        progress = Progress()
        ready = data(
            await s.call_tool(
                "wait_for_state",
                {"workflow_id": "order-1", "states": ["fulfillment_triggered"], "timeout": 20},
                progress_callback=progress,
            )
        )
        assert ready["reached"] is True and ready["state"] == "fulfillment_triggered"
        assert progress.seen and progress.messages[-1].startswith("fulfillment_triggered")
        assert [p for p, _, _ in progress.seen] == sorted({p for p, _, _ in progress.seen})
        assert [st["step"] for st in ready["completed_steps"]] == [
            "reserve",
            "authorize",
            "capture",
            "fulfil",
        ]
        assert [a["tool"] for a in ready["allowed_actions"]] == ["order_fulfilment__ship"]
        assert ready["allowed_actions"][0]["payload_required"] == ["tracking_number"]
        version = ready["version"]
        logged = len(await history(db, "order-1"))

        # Refused: illegal now, a payload that breaks the schema, a stale version.
        err = tool_error(
            await s.call_tool("order_fulfilment__deliver", {"workflow_id": "order-1"})
        )
        assert err["code"] == "illegal_transition"
        assert (err["state"], err["version"]) == ("fulfillment_triggered", version)
        assert err["allowed_actions"] == ["order_fulfilment__ship"]
        err = tool_error(
            await s.call_tool("order_fulfilment__ship", {"workflow_id": "order-1", "payload": {}})
        )
        assert err["code"] == "invalid_payload" and "tracking_number" in err["message"]
        err = tool_error(
            await s.call_tool(
                "order_fulfilment__ship",
                {
                    "workflow_id": "order-1",
                    "payload": {"tracking_number": "TRK-1"},
                    "expected_version": version - 1,
                },
            )
        )
        assert err["code"] == "version_conflict" and err["state"] == "fulfillment_triggered"
        assert len(await history(db, "order-1")) == logged  # nothing changed

        shipped = data(
            await s.call_tool(
                "order_fulfilment__ship",
                {
                    "workflow_id": "order-1",
                    "payload": {"tracking_number": "TRK-1"},
                    "expected_version": version,
                },
            )
        )
        assert shipped["done"] == "ship: fulfillment_triggered -> shipped"
        delivered = data(
            await s.call_tool("order_fulfilment__deliver", {"workflow_id": "order-1"})
        )
        assert delivered["state"] == "delivered"

        state = data(await s.call_tool("get_workflow_state", {"workflow_id": "order-1"}))
        assert state["state"] == "delivered"
        assert [(t["event"], t["actor"]) for t in state["recent_transitions"][-2:]] == [
            ("ship", "warehouse"),
            ("deliver", "warehouse"),
        ]
        listed = data(await s.call_tool("list_workflows", {"type": "order_fulfilment"}))
        assert [(w["workflow_id"], w["state"]) for w in listed["workflows"]] == [
            ("order-1", "delivered")
        ]

        # Resources: each machine's definition and diagram.
        uris = {str(r.uri) for r in (await s.list_resources()).resources}
        assert {
            "statewright://machines/order_fulfilment/definition",
            "statewright://machines/order_fulfilment/diagram",
            "statewright://machines/refund_approval/diagram",
        } <= uris
        read = await s.read_resource("statewright://machines/order_fulfilment/definition")
        assert json.loads(read.contents[0].text) == to_dict(order_machine())  # type: ignore[union-attr]
        read = await s.read_resource("statewright://workflows/order-1/diagram")
        diagram = read.contents[0].text  # type: ignore[union-attr]
        assert diagram.startswith("stateDiagram-v2") and "class delivered current" in diagram

    records = await history(db, "order-1")
    assert [r.to_state for r in records] == [
        "created",
        "inventory_reserved",
        "payment_authorized",
        "payment_captured",
        "fulfillment_triggered",
        "shipped",
        "delivered",
    ]


def test_a_token_is_checked_before_serving(tmp_path: Path) -> None:
    tokens = write_tokens(tmp_path / "tokens.yaml")
    runner = CliRunner()
    base = ["--db", str(tmp_path / "sw.db"), "--app", APPS, "mcp"]
    env: dict[str, str | None] = {
        name: None for name in ("STATEWRIGHT_TOKEN", "STATEWRIGHT_TOKENS_FILE", "STATEWRIGHT_JSON")
    }

    result = runner.invoke(app, [*base, "--tokens", str(tokens), "--token", "nope"], env=env)
    assert result.exit_code == 1 and "error[unauthorized]: unknown API token" in result.stderr
    result = runner.invoke(app, [*base, "--tokens", str(tokens)], env=env)
    assert result.exit_code == 1 and "error[unauthorized]" in result.stderr
    result = runner.invoke(app, [*base, "--token", TOKENS["agent"][0]], env=env)
    assert result.exit_code == 2 and "--token needs --tokens" in result.stderr


REFUND = {"order_id": "order-1003", "amount_cents": 8_900, "customer": "ada@example.com"}


async def test_without_credentials_the_model_is_an_agent(tmp_path: Path, errlog: TextIO) -> None:
    """No --tokens: the caller on stdio (the model) has the agent role only. It drives its
    workflows but gets no approval tool, and calling one anyway is refused."""
    db = tmp_path / "sw.db"
    async with stdio_session(db, None, None, errlog, worker=True) as s:
        tools = {t.name for t in (await s.list_tools()).tools}
        assert FIXED_TOOLS <= tools
        assert approval_tools(tools) == set()
        assert "order_fulfilment__cancel" in tools and "order_fulfilment__ship" not in tools
        # It starts and reads its workflows (the default tenant: bare ids)...
        started = data(
            await s.call_tool(
                "start_workflow", {"type": "refund_approval", "input": REFUND, "id": "r-1"}
            )
        )
        assert started["workflow_id"] == "r-1"
        paused = data(await s.call_tool("wait_for_state", {"workflow_id": "r-1", "timeout": 20}))
        assert paused["state"] == "awaiting_approval" and paused["allowed_actions"] == []
        # ...but cannot approve: refused, nothing changes.
        for tool in ("refund_approval__approval_granted", "agent_task__approval_granted"):
            err = tool_error(await s.call_tool(tool, {"workflow_id": "r-1"}))
            assert err["code"] == "forbidden", err
        again = data(await s.call_tool("get_workflow_state", {"workflow_id": "r-1"}))
        assert (again["state"], again["version"]) == ("awaiting_approval", paused["version"])
    records = await history(db, "r-1", tenant="default")
    assert records[0].actor == "local-agent"
    assert "approval_granted" not in {r.event for r in records}
    errlog.seek(0)
    assert "warning" not in errlog.read()


async def test_role_approver_is_an_explicit_grant_with_a_warning(
    tmp_path: Path, errlog: TextIO
) -> None:
    db = tmp_path / "sw.db"
    async with stdio_session(db, None, None, errlog, worker=True, roles=("approver",)) as s:
        tools = {t.name for t in (await s.list_tools()).tools}
        assert {
            "refund_approval__approval_granted",
            "refund_approval__approval_denied",
            "agent_task__approval_granted",
        } <= approval_tools(tools)
        assert "order_fulfilment__cancel" in tools  # the agent's tools stay
        await s.call_tool(
            "start_workflow", {"type": "refund_approval", "input": REFUND, "id": "r-1"}
        )
        paused = data(await s.call_tool("wait_for_state", {"workflow_id": "r-1", "timeout": 20}))
        assert paused["state"] == "awaiting_approval"
        approved = data(
            await s.call_tool("refund_approval__approval_granted", {"workflow_id": "r-1"})
        )
        assert approved["done"] == "approval_granted: awaiting_approval -> paying_out"
    decision = (await history(db, "r-1", tenant="default"))[paused["version"]]
    assert (decision.event, decision.actor) == ("approval_granted", "local-agent")
    errlog.seek(0)
    warning = errlog.read()
    assert "warning: --role approver" in warning and "approval" in warning, warning


def test_role_is_for_a_caller_without_a_token(tmp_path: Path) -> None:
    tokens = write_tokens(tmp_path / "tokens.yaml")
    runner = CliRunner()
    base = ["--db", str(tmp_path / "sw.db"), "--app", APPS, "mcp"]
    env: dict[str, str | None] = {
        name: None for name in ("STATEWRIGHT_TOKEN", "STATEWRIGHT_TOKENS_FILE", "STATEWRIGHT_JSON")
    }
    result = runner.invoke(
        app,
        [*base, "--tokens", str(tokens), "--token", TOKENS["agent"][0], "--role", "approver"],
        env=env,
    )
    assert result.exit_code == 2 and "with --tokens, the token's roles apply" in result.stderr
    result = runner.invoke(app, [*base, "--role", " "], env=env)
    assert result.exit_code == 2 and "--role needs a role name" in result.stderr
