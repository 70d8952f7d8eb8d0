"""Tokens, roles and tenants over HTTP (PRODUCT §7), on both stores: who may do what, what a
refusal looks like (401/403/404 JSON, nothing changed), and who the log says did it."""

from __future__ import annotations

from typing import Any

import httpx

from statewright import Engine
from statewright.access import TokenRegistry
from statewright.http import create_app
from tests.http.conftest import TOKENS, auth
from tests.http.test_api import error_of, in_state, start, unchanged

# Every operation under /v1, with a body that would be valid for the paused workflow "t-1".
OPERATIONS: list[tuple[str, str, dict[str, Any] | None]] = [
    ("GET", "/v1/types", None),
    ("GET", "/v1/types/agent_task", None),
    ("GET", "/v1/types/agent_task/diagram", None),
    ("POST", "/v1/workflows", {"type": "agent_task", "id": "new-1"}),
    ("GET", "/v1/workflows", None),
    ("GET", "/v1/workflows/t-1", None),
    ("GET", "/v1/workflows/t-1/context", None),
    ("POST", "/v1/workflows/t-1/events", {"event": "approval_reminder"}),
    ("GET", "/v1/workflows/t-1/history", None),
    ("GET", "/v1/workflows/t-1/steps", None),
    ("GET", "/v1/workflows/t-1/children", None),
    ("POST", "/v1/workflows/t-1/cancel", {"reason": "x"}),
    ("POST", "/v1/workflows/t-1/inputs", {"name": "doc"}),
    ("POST", "/v1/approvals", {"workflow_id": "t-1", "decision": "approve"}),
    ("GET", "/v1/stuck", None),
    ("GET", "/v1/transitions", None),
    ("GET", "/v1/stream?limit=1", None),
]
WRITES = [op for op in OPERATIONS if op[0] == "POST"]


async def test_every_operation_needs_a_known_token(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    await in_state(engine, client, "t-1", "paused")
    bad_headers: list[dict[str, str]] = [
        {},
        {"Authorization": "Bearer not-a-token"},
        {"Authorization": "Bearer "},
        {"Authorization": f"Basic {TOKENS['admin'][0]}"},  # right token, wrong scheme
        {"Authorization": TOKENS["admin"][0]},
    ]
    async with unchanged(engine):
        for method, path, body in OPERATIONS:
            for headers in bad_headers:
                r = await client.request(method, path, json=body, headers=headers)
                error_of(r, 401, "unauthorized")
                assert r.headers["www-authenticate"] == "Bearer", (path, headers)
        # A token in the URL is only for the stream (EventSource cannot send headers).
        r = await client.get(f"/v1/workflows?access_token={TOKENS['admin'][0]}")
        error_of(r, 422, "invalid_input")


async def test_viewer_reads_but_every_write_is_403(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    await in_state(engine, client, "t-1", "paused")
    async with unchanged(engine):
        for method, path, body in OPERATIONS:
            r = await client.request(method, path, json=body, headers=auth("viewer"))
            if method == "GET":
                assert r.status_code == 200, (path, r.text)
            else:
                error_of(r, 403, "forbidden")
        # Even an event the machine does not know: read-only comes first.
        r = await client.post(
            "/v1/workflows/t-1/events", json={"event": "no_such_event"}, headers=auth("viewer")
        )
        error_of(r, 403, "forbidden")


async def test_agent_cannot_approve_and_the_task_stays_paused(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    await in_state(engine, client, "t-1", "paused")
    async with unchanged(engine):
        for decision in ("approve", "deny"):
            r = await client.post(
                "/v1/approvals",
                json={"workflow_id": "t-1", "decision": decision},
                headers=auth("agent"),
            )
            error = error_of(r, 403, "forbidden")
            assert error["state"] == "paused" and error["allowed"] == []
        for event in ("approval_granted", "approval_denied"):
            r = await client.post(
                "/v1/workflows/t-1/events",
                json={"event": event, "payload": {"approver": "agent-7"}},
                headers=auth("agent"),
            )
            error = error_of(r, 403, "forbidden")
            assert (error["event"], error["state"]) == (event, "paused")
            assert "approver" in error["message"]
    assert (await engine.get("t-1")).state == "paused"
    r = await client.get("/v1/workflows/t-1", headers=auth("agent"))
    assert r.json()["state"] == "paused" and r.json()["allowed_events"] == []


async def test_roles_per_event(client: httpx.AsyncClient, engine: Engine) -> None:
    await in_state(engine, client, "t-1", "running")
    await start(client, "system", "refund_approval", "r-1")
    async with unchanged(engine):
        # cancel is for operators and systems; validated is the system's (refund machine).
        r = await client.post(
            "/v1/workflows/t-1/cancel", json={"reason": "mine"}, headers=auth("agent")
        )
        error_of(r, 403, "forbidden")
        r = await client.post(
            "/v1/workflows/r-1/events", json={"event": "validated"}, headers=auth("agent")
        )
        assert error_of(r, 403, "forbidden")["allowed"] == []
        # A system is not an agent (nor an operator): it may not do the agent's work.
        r = await client.post(
            "/v1/workflows/t-1/events", json={"event": "complete"}, headers=auth("system")
        )
        error_of(r, 403, "forbidden")
    # Admin fires any event that is not an approval.
    r = await client.post(
        "/v1/workflows/r-1/events", json={"event": "validated"}, headers=auth("admin")
    )
    assert r.status_code == 200 and r.json()["state"] == "checking_policy"


async def test_every_transition_records_the_callers_actor(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    await start(client, "agent", wid="t-1")
    for who, event in (("agent", "start"), ("agent", "request_approval")):
        r = await client.post("/v1/workflows/t-1/events", json={"event": event}, headers=auth(who))
        assert r.status_code == 200, r.text
    r = await client.post(
        "/v1/approvals",
        json={"workflow_id": "t-1", "decision": "approve", "comment": "ok"},
        headers=auth("boss"),
    )
    assert r.status_code == 200, r.text
    r = await client.post("/v1/workflows/t-1/cancel", json={"reason": "x"}, headers=auth("admin"))
    assert r.status_code == 200, r.text
    history = [(t.event, t.actor, t.payload) for t in await engine.history("t-1")]
    assert history == [
        ("$start", "agent-7", {}),
        ("start", "agent-7", {}),
        ("request_approval", "agent-7", {}),
        ("approval_granted", "alice", {"approver": "alice", "comment": "ok"}),
        ("cancel", "root", {"reason": "x"}),
    ]
    r = await client.get("/v1/workflows/t-1/history", headers=auth("agent"))
    assert [h["actor"] for h in r.json()["items"]] == [a for _, a, _ in history]


async def test_a_tenant_never_sees_another_tenants_workflow(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    await in_state(engine, client, "t-1", "paused")  # acme
    async with unchanged(engine):
        for method, path, body in OPERATIONS:
            if "t-1" not in path and not (body and body.get("workflow_id") == "t-1"):
                continue
            # mallory (globex) is an agent and an approver: roles would allow most of it.
            r = await client.request(method, path, json=body, headers=auth("other"))
            assert error_of(r, 404, "workflow_not_found")["workflow_id"] == "t-1", path
        r = await client.get("/v1/workflows", headers=auth("other"))
        assert r.json()["items"] == []
        r = await client.get("/v1/workflows?tenant=default", headers=auth("other"))
        error_of(r, 403, "forbidden")
        r = await client.get("/v1/transitions", headers=auth("other"))
        assert r.json()["items"] == []
        r = await client.get("/v1/stuck", headers=auth("other"))
        assert r.json() == {"items": [], "next_cursor": None}
    # Its stream has only its own tenant's transitions.
    await start(client, "other", wid="g-1")
    r = await client.get("/v1/stream?limit=1", headers=auth("other"))
    assert r.status_code == 200 and '"workflow_id":"g-1"' in r.text and "t-1" not in r.text
    # And the default side cannot see globex either, while admin sees both (by store ids).
    r = await client.get("/v1/workflows/g-1", headers=auth("boss"))
    error_of(r, 404, "workflow_not_found")
    r = await client.get("/v1/workflows", headers=auth("admin"))
    assert {w["id"] for w in r.json()["items"]} == {"t-1", "globex:g-1"}


async def test_open_mode_caller_is_a_local_admin(engine: Engine) -> None:
    """No tokens configured (serve on localhost only): every call is allowed, as ``local``."""
    app = create_app(engine, None, manage_engine=False)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://local") as client:
        await in_state(engine, client, "t-1", "paused")
        for method, path, body in sorted(WRITES, key=lambda op: op[1].endswith("/cancel")):
            r = await client.request(method, path, json=body)
            assert r.status_code in (200, 201), (path, r.text)
    assert {t.actor for t in await engine.history("new-1")} == {"local"}
    assert [(t.event, t.actor) for t in await engine.history("t-1")][-3:] == [
        ("approval_reminder", "local"),
        ("approval_granted", "local"),
        ("cancel", "local"),
    ]


def test_token_registry_keeps_only_digests() -> None:
    registry = TokenRegistry.from_data(
        {"tokens": [{"token": "s3cret-token", "actor": "a", "roles": ["agent"], "tenant": "t"}]}
    )
    assert "s3cret-token" not in repr(registry.entries)
    assert registry.authenticate("s3cret-token").tenant == "t"
