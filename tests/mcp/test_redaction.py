"""Shaped views for agents over a real (in-memory) MCP client session: the type's summary,
and the keys the type redacts never in any tool result (context, step results and errors,
payloads of the recent transitions, the last error, error results), whatever the roles."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client

from statewright import Engine, SQLiteStore, Worker
from statewright.access import Principal
from statewright.mcp_server import create_server
from tests.mcp.conftest import TOKENS, data, tool_error
from tests.mcp.redact_app import (
    CARD,
    DECLINED_CARD,
    HIDDEN,
    SECRET_REF,
    SECRETS,
    context,
)
from tests.mcp.redact_app import TYPES as PAYMENT_TYPES


def principal(who: str) -> Principal:
    _, actor, roles, tenant = TOKENS[who]
    return Principal(actor, frozenset(roles), tenant)


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[Engine]:
    async with Engine(SQLiteStore(tmp_path / "sw.db"), PAYMENT_TYPES) as eng:
        yield eng


def connect(engine: Engine) -> Callable[[str], Client]:
    return lambda who: Client(create_server(engine, principal(who), poll_interval=0.05))


@asynccontextmanager
async def worker(engine: Engine) -> AsyncIterator[None]:
    w = Worker(engine, poll_interval=0.05)
    task = asyncio.create_task(w.run())
    try:
        yield
    finally:
        w.stop(5.0)
        await task


def assert_clean(result: types.CallToolResult) -> None:
    """No secret value, and no redacted key, anywhere in the result."""
    texts = [c.text for c in result.content if isinstance(c, types.TextContent)]
    texts.append(json.dumps(result.structured_content))
    for text in texts:
        for secret in SECRETS:
            assert secret not in text, text
        assert "stripe_secret_ref" not in text, text


async def test_agents_see_the_summary_and_never_a_redacted_key(engine: Engine) -> None:
    await engine.start("payment", context(), workflow_id="p-ok", actor="t", tenant="acme")
    await engine.start(
        "payment", context(DECLINED_CARD), workflow_id="p-bad", actor="t", tenant="acme"
    )
    results: list[types.CallToolResult] = []
    # The operator role does not open the secrets to an agent session: "ops" has it.
    for who in ("agent", "ops"):
        async with connect(engine)(who) as c, worker(engine):

            async def call(name: str, args: dict[str, Any]) -> types.CallToolResult:
                result = await c.call_tool(name, args)
                results.append(result)
                return result

            ok = data(
                await call(
                    "wait_for_state",
                    {"workflow_id": "p-ok", "states": ["awaiting_warehouse"], "timeout": 20},
                )
            )
            assert ok["state"] == "awaiting_warehouse"
            bad = data(
                await call(
                    "wait_for_state",
                    {"workflow_id": "p-bad", "states": ["declined"], "timeout": 20},
                )
            )
            assert bad["state"] == "declined"

            state = data(await call("get_workflow_state", {"workflow_id": "p-ok"}))
            assert state["summary_text"] == (
                "Payment of 149.99 EUR captured; waiting for the warehouse"
            )
            # The hook saw the context without the card number.
            assert state["summary"] == {"amount": 149.99, "card_seen": False}
            [step] = state["completed_steps"]
            assert step["result"] == {"charge_id": "ch_1", "echo": "charged [redacted]"}
            captured = state["recent_transitions"][-1]
            assert captured["event"] == "captured"
            assert captured["payload"] == {"amount": 149.99, "memo": "ref [redacted]"}

            declined = data(await call("get_workflow_state", {"workflow_id": "p-bad"}))
            assert "[redacted]" in declined["last_error"]
            [failed] = declined["unfinished_steps"]
            assert failed["error"].endswith("card [redacted] was declined")
            fatal = declined["recent_transitions"][-1]
            assert fatal["event"] == "fatal_error" and "[redacted]" in fatal["payload"]["error"]

            data(await call("list_workflows", {}))
            # An error result whose message quotes a secret.
            err = tool_error(
                await call("wait_for_state", {"workflow_id": "p-ok", "states": [CARD]})
            )
            assert err["code"] == "invalid_input" and "[redacted]" in err["message"]
            tool_error(await call("payment__retry_charge", {"workflow_id": "p-ok"}))
            started = data(
                await call(
                    "start_workflow",
                    {"type": "payment_plain", "input": context(), "id": f"plain-{who}"},
                )
            )
            # The default summary: no redacted keys, no keys starting with "_".
            assert set(started["summary"]) == {"amount", "currency", "customer"}
            assert HIDDEN not in json.dumps(started["summary"])
            assert "summary_text" not in started
            # (No handler would read it: refused, the card in its payload not repeated.)
            refused = tool_error(
                await call(
                    "post_input",
                    {"workflow_id": "p-ok", "name": "note", "payload": {"card": CARD}},
                )
            )
            assert refused["code"] == "input_not_expected"
            assert refused["workflow_id"] == "p-ok" and "'p-ok'" in refused["message"]
            if who == "ops":
                shipped = data(await call("payment__ship", {"workflow_id": "p-ok"}))
                assert shipped["state"] == "shipped"
                late = data(
                    await call("payment__ship", {"workflow_id": "p-ok", "if_allowed": True})
                )
                assert late["applied"] is False
    assert len(results) == 20
    for result in results:
        assert_clean(result)
    # The store keeps everything: redaction is a view.
    row = await engine.get("p-ok")
    assert row.context["stripe_secret_ref"] == SECRET_REF


async def test_a_summary_hook_that_raises_falls_back_to_the_default(engine: Engine) -> None:
    await engine.start("payment_broken", context(), workflow_id="b-1", actor="t", tenant="acme")
    async with connect(engine)("agent") as c:
        result = await c.call_tool("get_workflow_state", {"workflow_id": "b-1"})
        state = data(result)
    assert "summary_text" not in state
    assert set(state["summary"]) == {"amount", "currency", "customer"}
    assert_clean(result)
