"""Workflows on a machine version this server does not register (an old version after an
upgrade) never break a read, on both stores: the list, the workflow, its context and history,
health and stuck answer, show the workflow as such, and offer no event on it; MCP's state view
too (issue 14, first list)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from mcp import Client

from statewright import Engine, Machine, MachineBuilder, ManualClock, SQLiteStore
from statewright.access import Principal
from statewright.http import create_app
from statewright.mcp_server import create_server
from statewright.store.postgres import PostgresStore
from statewright.store.protocol import FullStore as Store
from tests.http.conftest import auth, registry
from tests.mcp.conftest import data


def order(version: int, first: str) -> Machine:
    """v1 starts in "new"; v2 renamed it to "received"."""
    return (
        MachineBuilder("order", version=version)
        .state(first, initial=True, stuck_after=60)
        .state("done", terminal=True)
        .event("finish")
        .transition("finish", first, "done")
        .build()
    )


@pytest.fixture(params=["sqlite", "postgres"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> object:
    if request.param == "sqlite":
        return lambda: SQLiteStore(tmp_path / "versions.db")
    dsn = request.getfixturevalue("pg_dsn")
    return lambda: PostgresStore(dsn)


@pytest.fixture
async def upgraded(make_store: object) -> AsyncIterator[Engine]:
    """A store with a v1 workflow (an old one, stuck) and a v2 one; an engine that registers
    only v2."""
    clock = ManualClock(1_800_000_000.0)
    new_store: object = make_store
    async with Engine(new_store(), [order(1, "new")], clock=clock) as old:  # type: ignore[operator]
        await old.start("order", {"n": 1}, workflow_id="o-old")
    clock.advance(2 * 86400)  # past the default threshold (v1 is not registered later)
    store: Store = new_store()  # type: ignore[operator]
    async with Engine(store, [order(2, "received")], clock=clock) as engine:
        await engine.start("order", {"n": 2}, workflow_id="o-new")
        yield engine


async def test_a_stale_version_never_breaks_the_http_reads(upgraded: Engine) -> None:
    app = create_app(upgraded, registry(), manage_engine=False)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://sw") as client:
        r = await client.get("/v1/workflows", headers=auth("agent"))
        assert r.status_code == 200, r.text
        items = {w["id"]: w for w in r.json()["items"]}
        assert items["o-old"]["version_registered"] is False
        assert items["o-old"]["allowed_events"] == []
        assert items["o-new"]["version_registered"] is True
        assert items["o-new"]["allowed_events"] == ["finish"]
        for path in (
            "/v1/workflows/o-old",
            "/v1/workflows/o-old/context",
            "/v1/workflows/o-old/history",
            "/v1/workflows/o-old/steps",
            "/v1/stuck",
            "/health/workflows",
        ):
            r = await client.get(path, headers=auth("admin"))
            assert r.status_code == 200, (path, r.text)
        assert (await client.get("/v1/workflows/o-old", headers=auth("agent"))).json()[
            "state"
        ] == "new"
        health = (await client.get("/health/workflows")).json()
        assert health["unregistered"] == 1
        assert health["unregistered_by_version"] == [
            {"type": "order", "machine_version": 1, "count": 1}
        ]


async def test_a_stale_version_never_breaks_stuck_or_the_mcp_state_view(
    upgraded: Engine,
) -> None:
    assert upgraded.is_stuck(await upgraded.get("o-old"))  # the default threshold applies
    await upgraded.stuck()  # answers (v1's states are not registered here)
    server = create_server(upgraded, Principal("agent-7", frozenset({"agent"}), "default"))
    async with Client(server) as c:
        view = data(await c.call_tool("get_workflow_state", {"workflow_id": "o-old"}))
        assert (view["state"], view["machine_version"], view["allowed_actions"]) == (
            "new",
            1,
            [],
        )
        assert "not registered" in view["waiting_for"]
        listed = data(await c.call_tool("list_workflows", {}))
        assert {w["workflow_id"] for w in listed["workflows"]} >= {"o-old", "o-new"}
