"""Idempotency keys and ``post_input`` over MCP, through the SDK's in-memory client.

Every writing tool takes an optional ``idempotency_key``: a retry with the same key does
nothing twice and says ``"replayed": true``; the same key with another request is a
structured ``idempotency_key_reused`` error; an unknown outcome (the store connection broke
after the write left) is an ``outcome_unknown`` error whose hint says to retry with the key.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from statewright import Engine, SQLiteStore, Worker, ids
from statewright.access import Principal
from statewright.engine.builtin import agent_task_type
from statewright.errors import OutcomeUnknown
from statewright.mcp_server import build_catalogue, create_server
from statewright.store.postgres import PostgresStore
from statewright.store.protocol import FullStore as Store
from statewright.types import DeferWrite, StepFinish, TransitionWrite, WorkflowRow
from tests.mcp.conftest import ORDER, TOKENS, data, tool_error

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

from order_fulfilment import order_type as order_type  # re-exported (test_hostile_input)
from refund_approval import refund_type

POLICY = {"amount_cents": 9_000, "auto_approve_under_cents": 5_000, "hard_limit_cents": 100_000}
RETRY_DOC = "pass the same key when retrying after an error whose outcome is unknown"


def principal(who: str) -> Principal:
    _, actor, roles, tenant = TOKENS[who]
    return Principal(actor, frozenset(roles), tenant)


def client(engine: Engine, who: str) -> Client:
    return Client(create_server(engine, principal(who), poll_interval=0.05))


@pytest.fixture(params=["sqlite", "postgres"])
async def engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Engine]:
    if request.param == "sqlite":
        store: Store = SQLiteStore(tmp_path / "sw.db")
    else:
        store = PostgresStore(request.getfixturevalue("pg_dsn"))
    async with Engine(store, [agent_task_type(), order_type(), refund_type()]) as eng:
        yield eng


@pytest.fixture
async def sqlite_engine(tmp_path: Path) -> AsyncIterator[Engine]:
    types = [agent_task_type(), order_type(), refund_type()]
    async with Engine(SQLiteStore(tmp_path / "sw.db"), types) as eng:
        yield eng


async def order_ready_to_ship(engine: Engine, wid: str = "o-1") -> None:
    await engine.start("order_fulfilment", ORDER, workflow_id=wid, actor="t", tenant="acme")
    await Worker(engine).run_until_idle()  # the automatic states, up to the warehouse
    assert (await engine.get(wid)).state == "fulfillment_triggered"


# -- the tools ----------------------------------------------------------------------------------


@pytest.mark.parametrize("who", ["agent", "ops", "boss"])
async def test_every_writing_tool_takes_an_idempotency_key(
    sqlite_engine: Engine, who: str
) -> None:
    catalogue = build_catalogue(sqlite_engine, principal(who))
    tools = {t.name: t for t in catalogue.tools()}
    writing = [*catalogue.events, "start_workflow", "post_input"]
    if who == "boss":
        assert "refund_approval__approval_granted" in writing
    for name in writing:
        schema = tools[name].input_schema
        prop = schema["properties"]["idempotency_key"]
        assert prop["type"] == "string" and "idempotency_key" not in schema["required"]
        assert RETRY_DOC in prop["description"].lower(), name
        assert RETRY_DOC in (tools[name].description or "").lower(), name
    for name in ("get_workflow_state", "list_workflows", "wait_for_state"):
        assert "idempotency_key" not in tools[name].input_schema["properties"]
    post = tools["post_input"].input_schema
    assert post["required"] == ["workflow_id", "name", "payload"]


async def test_a_viewer_gets_no_post_input(sqlite_engine: Engine) -> None:
    names = {t.name for t in build_catalogue(sqlite_engine, principal("viewer")).tools()}
    assert "post_input" not in names
    await sqlite_engine.start("agent_task", workflow_id="t-1", actor="t", tenant="acme")
    async with client(sqlite_engine, "viewer") as c:
        args = {"workflow_id": "t-1", "name": "doc", "payload": {}}
        assert tool_error(await c.call_tool("post_input", args))["code"] == "unknown_tool"
    assert await sqlite_engine.store.next_input("t-1") is None


# -- event tools --------------------------------------------------------------------------------


async def test_an_event_tool_retried_with_its_key_does_nothing_twice(engine: Engine) -> None:
    await order_ready_to_ship(engine)
    args = {
        "workflow_id": "o-1",
        "payload": {"tracking_number": "T-1"},
        "expected_version": 5,
        "idempotency_key": "ship-1",
    }
    async with client(engine, "ops") as c:
        once = data(await c.call_tool("order_fulfilment__ship", args))
        assert (once["replayed"], once["state"], once["version"]) == (False, "shipped", 6)
        logged = await engine.history("o-1")
        # The retry carries the version its first try read: the key decides, not the version.
        again = data(await c.call_tool("order_fulfilment__ship", args))
        assert (again["replayed"], again["state"], again["version"]) == (True, "shipped", 6)
        assert "nothing was done again" in again["done"]
        other = {**args, "payload": {"tracking_number": "T-2"}}
        err = tool_error(await c.call_tool("order_fulfilment__ship", other))
        assert (err["code"], err["state"]) == ("idempotency_key_reused", "shipped")
        assert "new key" in err["hint"]
        err = tool_error(
            await c.call_tool(
                "order_fulfilment__deliver", {"workflow_id": "o-1", "idempotency_key": "a b"}
            )
        )
        assert err["code"] == "invalid_input" and "idempotency key" in err["message"]
        assert await engine.history("o-1") == logged
        # Without a key nothing changes either: a plain call that fired is just done.
        done = data(await c.call_tool("order_fulfilment__deliver", {"workflow_id": "o-1"}))
        assert (done["replayed"], done["state"]) == (False, "delivered")
    [ship] = [t for t in await engine.history("o-1") if t.event == "ship"]
    assert ship.idempotency_key == "ship-1"


async def test_a_cancel_tool_retried_with_its_key_is_a_replay(sqlite_engine: Engine) -> None:
    engine = sqlite_engine
    await engine.start("order_fulfilment", ORDER, workflow_id="o-1", actor="t", tenant="acme")
    args = {
        "workflow_id": "o-1",
        "payload": {"reason": "changed my mind"},
        "expected_version": 1,
        "idempotency_key": "c-1",
    }
    async with client(engine, "agent") as c:
        once = data(await c.call_tool("order_fulfilment__cancel", args))
        assert (once["replayed"], once["state"]) == (False, "cancelled")
        again = data(await c.call_tool("order_fulfilment__cancel", args))
        assert (again["replayed"], again["state"]) == (True, "cancelled")
        other = {**args, "payload": {"reason": "other"}}
        err = tool_error(await c.call_tool("order_fulfilment__cancel", other))
        assert err["code"] == "idempotency_key_reused"
    assert [t.event for t in await engine.history("o-1")] == ["$start", "cancel"]


async def test_an_approval_tool_retried_with_its_key_is_a_replay(sqlite_engine: Engine) -> None:
    engine = sqlite_engine
    await engine.start("refund_approval", {}, workflow_id="r-1", actor="t", tenant="acme")
    await engine.send("r-1", "validated", actor="t")
    await engine.send("r-1", "policy_checked", POLICY, actor="t")
    args = {"workflow_id": "r-1", "comment": "fine", "idempotency_key": "ok-1"}
    async with client(engine, "boss") as c:
        once = data(await c.call_tool("refund_approval__approval_granted", args))
        assert (once["replayed"], once["state"]) == (False, "paying_out")
        again = data(await c.call_tool("refund_approval__approval_granted", args))
        assert (again["replayed"], again["version"]) == (True, once["version"])
        err = tool_error(await c.call_tool("refund_approval__approval_denied", args))
        assert err["code"] == "idempotency_key_reused"
    assert [t.event for t in await engine.history("r-1")].count("approval_granted") == 1


async def test_start_without_an_id_retried_with_its_key_makes_one_workflow(
    sqlite_engine: Engine,
) -> None:
    args = {"type": "order_fulfilment", "input": ORDER, "idempotency_key": "order-for-cart-9"}
    async with client(sqlite_engine, "ops") as c:
        once = data(await c.call_tool("start_workflow", args))
        again = data(await c.call_tool("start_workflow", args))
        assert (once["created"], once["replayed"]) == (True, False)
        assert (again["created"], again["replayed"]) == (False, True)
        assert again["workflow_id"] == once["workflow_id"]
        other = {**args, "input": {**ORDER, "quantity": 2}}
        err = tool_error(await c.call_tool("start_workflow", other))
        assert err["code"] == "idempotency_key_reused"
    stored = [r.id for r in await sqlite_engine.list_workflows()]
    assert stored == [ids.qualify("acme", once["workflow_id"])]  # its store id (ids)


# -- post_input ---------------------------------------------------------------------------------


async def test_a_key_used_for_an_event_is_refused_for_an_input_and_back(engine: Engine) -> None:
    # As over HTTP (the README): a key names one request, an event's or an input's.
    await engine.start("agent_task", workflow_id="t-1", actor="t", tenant="acme")
    async with client(engine, "agent") as c:
        fired = {"workflow_id": "t-1", "idempotency_key": "k-1"}
        assert data(await c.call_tool("agent_task__start", fired))["state"] == "running"
        posted = {"workflow_id": "t-1", "name": "doc", "payload": {}, "idempotency_key": "k-1"}
        err = tool_error(await c.call_tool("post_input", posted))
        assert err["code"] == "idempotency_key_reused" and "event 'start'" in err["message"]
        assert await engine.store.next_input("t-1") is None
        data(await c.call_tool("post_input", {**posted, "idempotency_key": "k-2"}))
        err = tool_error(
            await c.call_tool(
                "agent_task__complete", {"workflow_id": "t-1", "idempotency_key": "k-2"}
            )
        )
        assert err["code"] == "idempotency_key_reused" and "input 'doc'" in err["message"]
    assert (await engine.get("t-1")).state == "running"


async def test_post_input_posts_once_per_key_and_refuses_cleanly(engine: Engine) -> None:
    await engine.start("agent_task", workflow_id="t-1", actor="t", tenant="acme")
    await engine.send("t-1", "start", actor="t")
    await engine.start("agent_task", workflow_id="g-1", actor="t", tenant="globex")
    await engine.start("agent_task", workflow_id="t-2", actor="t", tenant="acme")
    await engine.send("t-2", "start", actor="t")
    await engine.send("t-2", "complete", actor="t")
    args = {
        "workflow_id": "t-1",
        "name": "document",
        "payload": {"pages": 3},
        "idempotency_key": "doc-1",
    }
    async with client(engine, "agent") as c:
        once = data(await c.call_tool("post_input", args))
        assert (once["replayed"], once["state"], once["workflow_id"]) == (False, "running", "t-1")
        again = data(await c.call_tool("post_input", args))
        assert (again["replayed"], again["input_id"]) == (True, once["input_id"])
        assert "nothing was posted again" in again["done"]
        unkeyed = {k: v for k, v in args.items() if k != "idempotency_key"}
        plain = data(await c.call_tool("post_input", unkeyed))
        assert plain["input_id"] != once["input_id"]

        refusals: list[tuple[dict[str, Any], str]] = [
            ({**args, "payload": {"pages": 4}}, "idempotency_key_reused"),
            ({**args, "workflow_id": "nope"}, "workflow_not_found"),
            ({**args, "workflow_id": "g-1"}, "workflow_not_found"),  # another tenant's
            ({**args, "workflow_id": "t-2", "idempotency_key": "x"}, "workflow_finished"),
            ({**args, "name": "bad name!"}, "invalid_input"),
            ({**args, "payload": [1]}, "invalid_input"),
            ({"workflow_id": "t-1", "name": "doc"}, "invalid_input"),
            ({**args, "idempotency_key": ""}, "invalid_input"),
            ({**args, "extra": 1}, "invalid_input"),
        ]
        for call, code in refusals:
            err = tool_error(await c.call_tool("post_input", call))
            assert err["code"] == code, (call, err)
            assert "Nothing was changed" in err["hint"]
        finished = tool_error(
            await c.call_tool("post_input", {**args, "workflow_id": "t-2", "idempotency_key": "y"})
        )
        assert (finished["state"], finished["terminal"]) == ("done", True)
    first = await engine.store.next_input("t-1")
    assert first is not None and (first.id, first.idempotency_key) == (once["input_id"], "doc-1")
    second = await engine.store.next_input("t-1", skip=[first.id])
    assert second is not None and second.id == plain["input_id"]
    assert await engine.store.next_input("t-1", skip=[first.id, second.id]) is None
    assert await engine.store.next_input("g-1") is None
    assert await engine.store.next_input("t-2") is None


# -- unknown outcomes and parked workflows ------------------------------------------------------


async def test_an_unknown_outcome_says_to_retry_with_the_key(
    sqlite_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = sqlite_engine
    await order_ready_to_ship(engine)
    real: Callable[[TransitionWrite], Awaitable[WorkflowRow]] = engine.store.apply_transition

    async def applied_then_lost(write: TransitionWrite) -> WorkflowRow:
        await real(write)
        raise OutcomeUnknown("lost the connection during a write; it may have been applied")

    args = {"workflow_id": "o-1", "payload": {"tracking_number": "T"}, "idempotency_key": "s"}
    async with client(engine, "ops") as c:
        monkeypatch.setattr(engine.store, "apply_transition", applied_then_lost)
        err = tool_error(await c.call_tool("order_fulfilment__ship", args))
        assert err["code"] == "outcome_unknown"
        assert "same idempotency_key" in err["hint"] and "Nothing was changed" not in err["hint"]
        monkeypatch.setattr(engine.store, "apply_transition", real)
        again = data(await c.call_tool("order_fulfilment__ship", args))
        assert (again["replayed"], again["state"]) == (True, "shipped")
    assert [t.event for t in await engine.history("o-1")].count("ship") == 1


async def test_the_state_shows_a_parked_workflow_and_its_unknown_step(
    sqlite_engine: Engine,
) -> None:
    engine = sqlite_engine
    await engine.start("agent_task", workflow_id="t-1", actor="t", tenant="acme")
    await engine.send("t-1", "start", actor="t")
    now = engine.clock.now()
    await engine.store.step_begin("t-1:charge", "t-1", "charge", now)
    await engine.store.step_finish(
        StepFinish("t-1:charge", 1, "failed", error="TimeoutError", outcome="unknown", at=now)
    )
    row = await engine.get("t-1")
    await engine.store.defer(
        DeferWrite(
            "t-1", row.version, now, 1, last_error="outcome unknown", parked="step_outcome_unknown"
        )
    )
    async with client(engine, "agent") as c:
        state = data(await c.call_tool("get_workflow_state", {"workflow_id": "t-1"}))
        listed = data(await c.call_tool("list_workflows", {}))
    assert state["parked"] == "step_outcome_unknown"
    assert state["waiting_for"].startswith("an operator: the workflow is parked")
    assert "operator" in state["next"]
    [step] = state["unfinished_steps"]
    assert (step["step"], step["status"], step["outcome"]) == ("charge", "failed", "unknown")
    assert listed["workflows"][0]["parked"] == "step_outcome_unknown"
