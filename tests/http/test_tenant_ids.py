"""A caller bound to a tenant knows its workflows by their ids in it (statewright.ids); the
store keeps them as ``globex:<id>``. No error response a tenant's caller can provoke names
that store id: each names the workflow as the caller does. And the ``ops`` role (meant for
scraping ``/metrics``) only reads."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

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


async def test_no_error_names_the_tenant_qualified_store_id(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    async def ok(method: str, path: str, body: Any = None, **headers: str) -> dict[str, Any]:
        r = await client.request(method, path, json=body, headers={**GINA, **headers})
        assert r.status_code in (200, 201), r.text
        out: dict[str, Any] = r.json()
        return out

    await ok("POST", "/v1/workflows", {"type": "agent_task", "id": "t-1"})
    await ok("POST", "/v1/workflows", {"type": "agent_task", "id": "t-2"})
    await ok("POST", "/v1/workflows", {"type": "agent_task", "id": "t-3"})
    assert {r.id for r in await engine.list_workflows()} >= {"globex:t-1", "globex:t-2"}
    await ok("POST", "/v1/workflows/t-1/events", {"event": "start"}, **{"Idempotency-Key": "e1"})
    await ok("POST", "/v1/workflows/t-3/cancel", {"reason": "x"}, **{"Idempotency-Key": "c1"})

    # (method, path, body, headers, status, code): every refusal that carries an id.
    cases: list[tuple[str, str, Any, dict[str, str], int, str]] = [
        ("POST", "/v1/workflows", {"type": "refund_approval", "id": "t-1"}, {}, 409,
         "workflow_exists"),
        ("POST", "/v1/workflows/t-1/events", {"event": "complete", "expected_version": 1}, {},
         409, "version_conflict"),
        ("POST", "/v1/workflows/t-1/events", {"event": "complete"}, {"Idempotency-Key": "e1"},
         409, "idempotency_key_reused"),
        ("POST", "/v1/workflows/t-1/events", {"event": "start"}, {}, 409, "illegal_transition"),
        ("POST", "/v1/approvals", {"workflow_id": "t-1", "decision": "approve"}, {}, 409,
         "illegal_transition"),
        ("PATCH", "/v1/workflows/t-1/context", {"patch": {"a": 1}, "reason": "r",
         "expected_version": 1}, {}, 409, "version_conflict"),
        ("POST", "/v1/workflows/t-1/fork", {"reason": "r", "version": 9}, {}, 404,
         "version_not_found"),
        ("POST", "/v1/workflows/t-1/fork", {"reason": "r", "id": "t-2"}, {}, 409,
         "workflow_exists"),
        ("POST", "/v1/workflows/t-1/steps/nope/resolve", {"verdict": "not_applied",
         "reason": "r"}, {}, 404, "step_not_found"),
        ("DELETE", "/v1/workflows/t-1/timers/nokey", None, {}, 404, "timer_not_found"),
        ("POST", "/v1/workflows/t-3/cancel", {"reason": "other"}, {"Idempotency-Key": "c1"},
         409, "idempotency_key_reused"),
        ("POST", "/v1/workflows/t-3/inputs", {"name": "note"}, {}, 409, "workflow_finished"),
        ("POST", "/v1/workflows/t-3/resume", {"reason": "r"}, {}, 409, "workflow_finished"),
        ("POST", "/v1/workflows/t-3/events", {"event": "start"}, {}, 409, "illegal_transition"),
    ]  # fmt: skip
    async with unchanged(engine):
        for method, path, body, headers, status, code in cases:
            r = await client.request(method, path, json=body, headers={**GINA, **headers})
            error = error_of(r, status, code)
            assert "globex:" not in r.text, (path, r.text)
            assert any(f"t-{n}" in r.text for n in (1, 2, 3)), (path, r.text)
            assert error.get("workflow_id") in (None, "t-1", "t-2", "t-3"), (path, error)
        # A role that may not fire the event: refused naming the caller's id.
        r = await client.post(
            "/v1/workflows/t-1/events", json={"event": "approval_timeout"}, headers=auth("other")
        )
        assert error_of(r, 403, "forbidden")["workflow_id"] == "t-1", r.text
        assert "globex:" not in r.text
        # An id the caller gives tenant-qualified names nothing: said with the id it gave.
        r = await client.get("/v1/workflows/globex:t-1", headers=GINA)
        assert error_of(r, 404, "workflow_not_found")["message"] == (
            "no workflow with id 'globex:t-1'"
        )
    # Callers that see every tenant see (and give) store ids, as before.
    r = await client.post(
        "/v1/workflows/globex:t-1/events",
        json={"event": "complete", "expected_version": 1},
        headers=auth("admin"),
    )
    assert "'globex:t-1'" in error_of(r, 409, "version_conflict")["message"]


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
