"""The MCP server mounted in ``statewright serve --worker`` (a real process, forked by the
``cli_forks`` fixture: tests/mcp/conftest.py), over streamable HTTP with the SDK's clients: the
initialize-handshake session (2025-11-25) and the high-level ``Client`` (which negotiates the
per-request protocol, 2026-07-28). Each request is authenticated by its own bearer token."""

from __future__ import annotations

import httpx
import pytest

from tests.mcp.conftest import (
    FIXED_TOOLS,
    ORDER,
    TIMEOUT,
    TOKENS,
    WRITING_TOOLS,
    Progress,
    Served,
    approval_tools,
    data,
    history,
    http_client,
    http_session,
    tool_error,
)

pytestmark = pytest.mark.one_worker  # one `serve` per module, not one per worker

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    },
}
HEADERS = {"Accept": "application/json, text/event-stream"}


def test_a_request_without_a_valid_token_is_refused(served: Served) -> None:
    for headers in ({}, {"Authorization": "Bearer nope-nope-nope"}, {"Authorization": "Basic x"}):
        r = httpx.post(served.mcp, json=INIT, headers={**HEADERS, **headers}, timeout=TIMEOUT)
        assert r.status_code == 401, r.text
        assert r.headers["www-authenticate"].startswith("Bearer")
        assert r.json()["error"]["code"] == "unauthorized"
    # The first request with a token imports the MCP server (lazily, as at its first use in
    # production): seconds on a busy machine, more than httpx's default 5 s timeout.
    ok = httpx.post(
        served.mcp,
        json=INIT,
        headers={**HEADERS, "Authorization": f"Bearer {TOKENS['agent'][0]}"},
        timeout=TIMEOUT,
    )
    assert ok.status_code == 200, ok.text


async def test_tools_follow_the_callers_roles(served: Served) -> None:
    async with http_session(served, "agent") as s:
        agent = {t.name for t in (await s.list_tools()).tools}
    async with http_session(served, "boss") as s:
        boss = {t.name for t in (await s.list_tools()).tools}
    async with http_session(served, "viewer") as s:
        viewer = {t.name for t in (await s.list_tools()).tools}
    assert FIXED_TOOLS <= agent and approval_tools(agent) == set()
    assert "order_fulfilment__cancel" in agent and "order_fulfilment__ship" not in agent
    assert {"refund_approval__approval_granted", "refund_approval__approval_denied"} <= boss
    assert viewer == FIXED_TOOLS - WRITING_TOOLS  # read-only: nothing that writes


async def test_drive_an_order_from_created_to_delivered(served: Served) -> None:
    async with http_session(served, "ops") as s:
        wid = data(
            await s.call_tool("start_workflow", {"type": "order_fulfilment", "input": ORDER})
        )["workflow_id"]
        progress = Progress()
        ready = data(
            await s.call_tool(
                "wait_for_state",
                {"workflow_id": wid, "timeout": 20},
                progress_callback=progress,
            )
        )
        assert ready["state"] == "fulfillment_triggered" and ready["reached"] is True
        assert progress.seen
        version = ready["version"]
        logged = len(await history(served.db, wid))

        err = tool_error(await s.call_tool("order_fulfilment__deliver", {"workflow_id": wid}))
        assert err["code"] == "illegal_transition"
        assert (err["state"], err["allowed_actions"]) == (
            "fulfillment_triggered",
            ["order_fulfilment__ship"],
        )
        stale = {"tracking_number": "TRK-9"}
        err = tool_error(
            await s.call_tool(
                "order_fulfilment__ship",
                {"workflow_id": wid, "payload": stale, "expected_version": version - 2},
            )
        )
        assert (err["code"], err["version"]) == ("version_conflict", version)
        assert len(await history(served.db, wid)) == logged

        data(
            await s.call_tool(
                "order_fulfilment__ship",
                {"workflow_id": wid, "payload": {"tracking_number": "TRK-9"}},
            )
        )
        done = data(await s.call_tool("order_fulfilment__deliver", {"workflow_id": wid}))
        assert done["state"] == "delivered" and done["version"] == version + 2
        # Delivered: no more shipping, and nothing the warehouse may do but close it.
        err = tool_error(
            await s.call_tool(
                "order_fulfilment__ship",
                {"workflow_id": wid, "payload": {"tracking_number": "TRK-10"}},
            )
        )
        assert (err["code"], err["state"]) == ("illegal_transition", "delivered")
        assert set(err["allowed_actions"]) == {
            "order_fulfilment__refund",
            "order_fulfilment__close",
        }
    assert [r.event for r in await history(served.db, wid)][-2:] == ["ship", "deliver"]


async def test_a_long_step_reports_progress_to_the_client(served: Served) -> None:
    async with http_client(served, "ops") as c:
        started = data(await c.call_tool("start_workflow", {"type": "report", "input": {}}))
        progress = Progress()
        done = data(
            await c.call_tool(
                "wait_for_state",
                {"workflow_id": started["workflow_id"], "timeout": 20},
                progress_callback=progress,
            )
        )
    assert done["state"] == "done" and done["reached"] is True
    assert done["completed_steps"][0]["step"] == "count_words"
    assert done["completed_steps"][0]["result"] == 750
    assert done["summary"]["words"] == 750
    # The handler's reports (done/of, message) reached the client as MCP progress.
    reports = [m for m in progress.messages if m.startswith("working")]
    assert any("0/3 writing part 1" in m for m in reports), progress.messages
    assert any("2/3 writing part 3" in m for m in reports), progress.messages
    assert progress.messages[-1].startswith("done")
    assert [p for p, _, _ in progress.seen] == sorted({p for p, _, _ in progress.seen})


async def test_only_an_approver_can_approve(served: Served) -> None:
    refund = {"order_id": "order-1003", "amount_cents": 8_900, "customer": "ada@example.com"}
    async with http_client(served, "agent") as agent:
        wid = data(
            await agent.call_tool("start_workflow", {"type": "refund_approval", "input": refund})
        )["workflow_id"]
        paused = data(await agent.call_tool("wait_for_state", {"workflow_id": wid}))
        assert paused["state"] == "awaiting_approval"
        assert paused["allowed_actions"] == []
        assert {o["event"] for o in paused["others_may_fire"]} >= {
            "approval_granted",
            "approval_denied",
        }
        tools = {t.name for t in (await agent.list_tools()).tools}
        assert approval_tools(tools) == set()
        # Calling it anyway: refused, nothing changes.
        err = tool_error(
            await agent.call_tool("refund_approval__approval_granted", {"workflow_id": wid})
        )
        assert (err["code"], err["state"]) == ("forbidden", "awaiting_approval")
        err = tool_error(await agent.call_tool("refund_approval__paid_out", {"workflow_id": wid}))
        assert err["code"] == "forbidden"
    logged = len(await history(served.db, wid))
    assert logged == paused["version"]

    async with http_client(served, "boss") as boss:
        approved = data(
            await boss.call_tool(
                "refund_approval__approval_granted",
                {"workflow_id": wid, "comment": "damaged", "expected_version": logged},
            )
        )
        assert approved["done"] == "approval_granted: awaiting_approval -> paying_out"
        finished = data(await boss.call_tool("wait_for_state", {"workflow_id": wid}))
        assert finished["state"] == "done"
    decision = (await history(served.db, wid))[logged]
    assert (decision.event, decision.actor) == ("approval_granted", "alice")
    assert decision.payload == {"approver": "alice", "comment": "damaged"}


async def test_another_tenant_sees_nothing(served: Served) -> None:
    async with http_client(served, "ops") as ops:
        started = {"type": "order_fulfilment", "input": ORDER}
        wid = data(await ops.call_tool("start_workflow", started))["workflow_id"]
    async with http_client(served, "other") as other:
        err = tool_error(await other.call_tool("get_workflow_state", {"workflow_id": wid}))
        assert err["code"] == "workflow_not_found" and "state" not in err
        err = tool_error(await other.call_tool("order_fulfilment__cancel", {"workflow_id": wid}))
        assert err["code"] == "workflow_not_found"
        listed = data(await other.call_tool("list_workflows", {}))
        assert wid not in {w["workflow_id"] for w in listed["workflows"]}


async def test_in_open_mode_mcp_callers_are_agents(served_open: Served) -> None:
    """No tokens: the API and dashboard's caller is the local admin, but whatever connects to
    /mcp (a model) has the agent role only: no approval tool, approving refused."""
    refund = {"order_id": "order-1003", "amount_cents": 8_900, "customer": "ada@example.com"}
    async with http_client(served_open, None) as model:
        tools = {t.name for t in (await model.list_tools()).tools}
        assert FIXED_TOOLS <= tools and approval_tools(tools) == set()
        assert "order_fulfilment__ship" not in tools  # (admin could fire it)
        wid = data(
            await model.call_tool("start_workflow", {"type": "refund_approval", "input": refund})
        )["workflow_id"]
        paused = data(await model.call_tool("wait_for_state", {"workflow_id": wid}))
        assert paused["state"] == "awaiting_approval"
        err = tool_error(
            await model.call_tool("refund_approval__approval_granted", {"workflow_id": wid})
        )
        assert (err["code"], err["state"]) == ("forbidden", "awaiting_approval")
    records = await history(served_open.db, wid, tenant="default")
    assert len(records) == paused["version"] and records[0].actor == "local-agent"
    # The API itself is still open to the local admin (the dashboard's approve button).
    r = httpx.get(f"{served_open.url}/v1/workflows/{wid}", timeout=TIMEOUT)
    assert r.status_code == 200 and "approval_granted" in r.json()["allowed_events"]
