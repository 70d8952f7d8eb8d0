"""The ``ops`` role (meant for scraping ``/metrics``) only reads."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from statewright import Engine
from statewright.http import create_app
from tests.http.conftest import auth, registry
from tests.http.test_api import error_of, unchanged
from tests.http.test_auth import OPERATIONS

GINA = {"Authorization": "Bearer gina-token-1"}
"""agent, approver, operator and system in tenant globex."""
OPS = {"Authorization": "Bearer ops-token-1"}
"""ops (the /metrics scraper's role) in the default tenant."""


@pytest.fixture
async def client(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    tokens = registry()
    tokens.add("gina-token-1", "gina", ["agent", "approver", "operator", "system"], "globex")
    tokens.add("ops-token-1", "scraper", ["ops"], "default")
    app = create_app(engine, tokens, manage_engine=False)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://statewright") as c:
        yield c


async def test_the_ops_role_only_reads(client: httpx.AsyncClient, engine: Engine) -> None:
    """``ops`` exists to scrape /metrics: it may read, like viewer, and writes nothing."""
    r = await client.post("/v1/workflows", json={"type": "agent_task", "id": "t-1"},
                          headers=auth("agent"))  # fmt: skip
    assert r.status_code == 201
    r = await client.post(
        "/v1/workflows/t-1/events", json={"event": "start"}, headers=auth("agent")
    )
    r = await client.post("/v1/workflows/t-1/events", json={"event": "request_approval"},
                          headers=auth("agent"))  # fmt: skip
    assert (await engine.get("t-1")).state == "paused"
    async with unchanged(engine):
        for method, path, body in OPERATIONS:
            r = await client.request(method, path, json=body, headers=OPS)
            if method == "GET":
                assert r.status_code == 200, (path, r.text)
            else:
                error_of(r, 403, "forbidden")
        r = await client.get("/v1/workflows/t-1", headers=OPS)
        assert r.json()["allowed_events"] == []
