"""``wait_for_state`` through the SDK's client on both stores: the wait HTTP's long-poll makes
(:mod:`statewright.access.waits`), with the same fields (``reached``, ``timed_out``,
``waited``), ``after_version``, and the state as it is at the timeout, never an error."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from statewright import Engine, SQLiteStore
from statewright.engine.builtin import agent_task_type
from statewright.mcp_server import create_server
from statewright.store.postgres import PostgresStore
from statewright.store.protocol import FullStore as Store
from tests.mcp.conftest import data, tool_error
from tests.mcp.test_server import principal

WAIT_FIELDS = {"reached", "timed_out", "waited"}
"""What a long-polling GET adds to the workflow (tests/http/test_longpoll.py)."""


@pytest.fixture(params=["sqlite", "postgres"])
async def engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Engine]:
    if request.param == "sqlite":
        store: Store = SQLiteStore(tmp_path / "sw.db")
    else:
        store = PostgresStore(request.getfixturevalue("pg_dsn"))
    async with Engine(store, [agent_task_type()]) as eng:
        await eng.start("agent_task", workflow_id="t-1", actor="t", tenant="acme")
        yield eng


@pytest.fixture
def connect(engine: Engine) -> Callable[[str], Client]:
    return lambda who: Client(create_server(engine, principal(who), poll_interval=0.02))


async def call(c: Client, args: dict[str, Any]) -> dict[str, Any]:
    return data(await c.call_tool("wait_for_state", args))


async def test_the_timeout_answers_the_state_as_it_is(connect: Callable[[str], Client]) -> None:
    async with connect("agent") as c:
        for args in (
            {"states": ["done"], "timeout": 0.3},
            {"after_version": 1, "timeout": 0.3},
        ):
            waited = await call(c, {"workflow_id": "t-1", **args})
            assert WAIT_FIELDS <= set(waited)
            assert (waited["reached"], waited["timed_out"]) == (False, True)
            assert (waited["state"], waited["version"]) == ("planned", 1)
            assert 0.3 <= waited["waited"] < 2
            state = data(await c.call_tool("get_workflow_state", {"workflow_id": "t-1"}))
            assert {k: v for k, v in waited.items() if k not in WAIT_FIELDS} == state


async def test_after_version_returns_once_it_moves(
    engine: Engine, connect: Callable[[str], Client]
) -> None:
    async with connect("agent") as c:
        task = asyncio.create_task(
            call(c, {"workflow_id": "t-1", "after_version": 1, "timeout": 10})
        )
        await asyncio.sleep(0.2)
        assert not task.done()
        await engine.send("t-1", "start", actor="setup")
        waited = await asyncio.wait_for(task, 5)
        assert (waited["reached"], waited["timed_out"], waited["version"]) == (True, False, 2)
        assert waited["state"] == "running"
        # Either of states and after_version ends it.
        waited = await call(
            c, {"workflow_id": "t-1", "states": ["done"], "after_version": 1, "timeout": 10}
        )
        assert (waited["reached"], waited["waited"] < 1) == (True, True)


async def test_a_state_reached_or_a_finished_workflow(
    engine: Engine, connect: Callable[[str], Client]
) -> None:
    async with connect("agent") as c:
        task = asyncio.create_task(
            call(c, {"workflow_id": "t-1", "states": ["paused"], "timeout": 10})
        )
        await asyncio.sleep(0.2)
        await engine.send("t-1", "start", actor="setup")
        await engine.send("t-1", "complete", actor="setup")
        waited = await asyncio.wait_for(task, 5)
        # Finished: it will never be paused; neither reached nor timed out.
        assert (waited["state"], waited["terminal"]) == ("done", True)
        assert (waited["reached"], waited["timed_out"]) == (False, False)


async def test_bad_arguments_and_another_tenants_id(connect: Callable[[str], Client]) -> None:
    async with connect("agent") as c:
        for args, code in (
            ({"after_version": -1}, "invalid_input"),
            ({"after_version": "2"}, "invalid_input"),
            ({"after_version": True}, "invalid_input"),
            ({"states": ["nowhere"]}, "invalid_input"),
            ({"timeout": 301}, "invalid_input"),
        ):
            result = await c.call_tool("wait_for_state", {"workflow_id": "t-1", **args})
            assert tool_error(result)["code"] == code, args
    async with connect("other") as c:
        result = await c.call_tool(
            "wait_for_state", {"workflow_id": "t-1", "after_version": 0, "timeout": 10}
        )
        assert tool_error(result)["code"] == "workflow_not_found"
