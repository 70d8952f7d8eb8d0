"""The REST API on both stores: every happy path, and every refusal answered with the stable
JSON error and a store left exactly as it was.

Workflows are driven into states through the engine directly (no worker runs here); what the
API itself does goes through HTTP with the tokens of ``conftest.TOKENS``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from statewright import Engine, ManualClock
from statewright.types import StepFinish, WorkflowFilter
from tests.http.conftest import auth

POLICY = {"amount_cents": 9_000, "auto_approve_under_cents": 5_000, "hard_limit_cents": 100_000}


# -- helpers (shared by the other HTTP test modules) ------------------------------------------


async def snapshot(engine: Engine) -> dict[str, Any]:
    """Everything a request could change: every row, the whole log, and per workflow its
    history, steps, timers and unconsumed inputs."""
    store = engine.store
    rows = await store.list_workflows(WorkflowFilter(limit=10_000))
    return {
        "rows": {r.id: r for r in rows},
        "log": await store.transitions_since(0, 100_000),
        "per_workflow": {
            r.id: (
                await store.history(r.id),
                await store.steps(r.id),
                await store.timers(r.id),
                await store.next_input(r.id),
            )
            for r in rows
        },
    }


@asynccontextmanager
async def unchanged(engine: Engine) -> AsyncIterator[None]:
    """Asserts that the block leaves the store exactly as it found it."""
    before = await snapshot(engine)
    yield
    after = await snapshot(engine)
    assert after == before, "the store changed"


def error_of(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """The error object of a refusal, after checking its status, JSON and stable code."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    error: dict[str, Any] = r.json()["error"]
    assert error["code"] == code, error
    assert isinstance(error["message"], str) and error["message"]
    return error


async def start(
    client: httpx.AsyncClient,
    who: str = "agent",
    type_: str = "agent_task",
    wid: str | None = None,
    input: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {"type": type_, "input": input or {}, **extra}
    if wid is not None:
        body["id"] = wid
    r = await client.post("/v1/workflows", json=body, headers=auth(who))
    assert r.status_code == 201, r.text
    out: dict[str, Any] = r.json()
    return out


async def in_state(
    engine: Engine, client: httpx.AsyncClient, wid: str, state: str, who: str = "agent"
) -> None:
    """Start an agent task (or a refund for ``awaiting_approval``) and move it to ``state``."""
    paths: dict[str, list[tuple[str, dict[str, Any]]]] = {
        "planned": [],
        "running": [("start", {})],
        "paused": [("start", {}), ("request_approval", {})],
        "done": [("start", {}), ("complete", {})],
        "awaiting_approval": [("validated", {}), ("policy_checked", POLICY)],
    }
    type_ = "refund_approval" if state == "awaiting_approval" else "agent_task"
    await start(client, who, type_, wid)
    for event, payload in paths[state]:
        await engine.send(wid, event, payload, actor="setup")
    assert (await engine.get(wid)).state == state


# -- start --------------------------------------------------------------------------------------


async def test_start_creates_then_restart_is_idempotent(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    r = await client.post(
        "/v1/workflows",
        json={"type": "agent_task", "input": {"goal": "ship"}, "id": "t-1"},
        headers=auth("agent"),
    )
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["id"] == "t-1" and body["type"] == "agent_task" and body["tenant"] == "default"
    assert (body["state"], body["version"], body["terminal"]) == ("planned", 1, False)
    assert body["summary"] == {"goal": "ship"}
    assert body["allowed_events"] == ["start"]  # cancel needs operator/system
    assert body["stuck"] is False and body["created_at"] == engine.clock.now()

    async with unchanged(engine):
        again = await client.post(
            "/v1/workflows",
            json={"type": "agent_task", "input": {"goal": "other"}, "id": "t-1"},
            headers=auth("agent"),
        )
    assert again.status_code == 200, again.text
    assert again.json() == body  # the existing workflow, input ignored

    generated = await start(client, input={"goal": "no id"})
    assert len(generated["id"]) == 32


async def test_admin_starts_in_any_tenant_others_only_in_their_own(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    row = await start(client, "admin", wid="g-1", tenant="globex")
    assert row["tenant"] == "globex"
    assert (await start(client, "admin", wid="d-1"))["tenant"] == "default"
    assert (await start(client, "agent", wid="a-1", tenant="default"))["tenant"] == "default"
    async with unchanged(engine):
        r = await client.post(
            "/v1/workflows",
            json={"type": "agent_task", "id": "a-2", "tenant": "globex"},
            headers=auth("agent"),
        )
        error_of(r, 403, "forbidden")


# -- reads --------------------------------------------------------------------------------------


async def test_get_shows_state_summary_and_the_events_this_caller_may_fire(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    long_text = "x" * 500
    await start(client, wid="t-1", input={"doc": long_text, "n": 1})
    await engine.send("t-1", "start", actor="setup")
    await engine.send("t-1", "request_approval", actor="setup")
    expected = {
        "agent": set(),
        "viewer": set(),
        "system": {"approval_timeout", "approval_reminder", "cancel"},
        "boss": {
            "approval_granted",
            "approval_denied",
            "approval_timeout",
            "approval_reminder",
            "cancel",
        },
        "admin": {
            "approval_granted",
            "approval_denied",
            "approval_timeout",
            "approval_reminder",
            "cancel",
        },
    }
    for who, events in expected.items():
        r = await client.get("/v1/workflows/t-1", headers=auth(who))
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["state"] == "paused" and body["version"] == 3
        assert set(body["allowed_events"]) == events, who
    assert body["summary"]["n"] == 1
    assert (
        body["summary"]["doc"].startswith("x" * 200)
        and "300 more characters" in body["summary"]["doc"]
    )
    r = await client.get("/v1/workflows/t-1/context", headers=auth("viewer"))
    assert r.status_code == 200 and r.json() == {"doc": long_text, "n": 1}


async def test_list_filters_by_type_state_terminal_age_and_pages(
    client: httpx.AsyncClient, engine: Engine, clock: ManualClock
) -> None:
    await in_state(engine, client, "old-running", "running")
    clock.advance(1000)
    await in_state(engine, client, "planned-1", "planned")
    await in_state(engine, client, "done-1", "done")
    await in_state(engine, client, "refund-1", "awaiting_approval", who="system")
    await start(client, "other", wid="globex-1")
    clock.advance(10)

    async def ids(who: str = "agent", **params: Any) -> list[str]:
        r = await client.get("/v1/workflows", params=params, headers=auth(who))
        assert r.status_code == 200, r.text
        return [w["id"] for w in r.json()["items"]]

    acme = {"old-running", "planned-1", "done-1", "refund-1"}
    assert set(await ids()) == acme  # not globex-1
    assert (await ids())[0] == "old-running"  # oldest in its state first
    assert set(await ids(type="agent_task")) == acme - {"refund-1"}
    assert await ids(type="refund_approval") == ["refund-1"]
    assert await ids(state="planned") == ["planned-1"]
    assert await ids(terminal="true") == ["done-1"]
    assert set(await ids(terminal="false")) == acme - {"done-1"}
    assert await ids(older_than=500) == ["old-running"]
    assert await ids(type="agent_task", state="running", terminal="false") == ["old-running"]
    assert await ids(state="nowhere") == []
    first = await ids(limit=2)
    second = await ids(limit=2, offset=2)
    assert len(first) == 2 and set(first + second) == acme
    r = await client.get("/v1/workflows", params={"limit": 2, "offset": 2}, headers=auth("agent"))
    assert (r.json()["limit"], r.json()["offset"]) == (2, 2)
    # Tenants: admin sees all, may narrow; others only their own.
    assert set(await ids("admin")) == acme | {"globex:globex-1"}  # store ids
    assert await ids("admin", tenant="globex") == ["globex:globex-1"]
    assert set(await ids("agent", tenant="default")) == acme
    async with unchanged(engine):
        r = await client.get("/v1/workflows", params={"tenant": "globex"}, headers=auth("agent"))
        error_of(r, 403, "forbidden")


async def test_history_steps_and_types(client: httpx.AsyncClient, engine: Engine) -> None:
    await in_state(engine, client, "t-1", "running")
    r = await client.get("/v1/workflows/t-1/history", headers=auth("viewer"))
    assert r.status_code == 200, r.text
    assert r.json()["next_cursor"] is None
    rows = r.json()["items"]
    assert [(h["version"], h["from_state"], h["to_state"], h["event"]) for h in rows] == [
        (1, None, "planned", "$start"),
        (2, "planned", "running", "start"),
    ]
    assert [h["actor"] for h in rows] == ["agent-7", "setup"]
    assert rows[0]["seq"] < rows[1]["seq"] and rows[0]["workflow_id"] == "t-1"

    at = engine.clock.now()
    await engine.store.step_begin("t-1:fetch", "t-1", "fetch", at)
    await engine.store.step_finish(StepFinish("t-1:fetch", 1, "done", {"pages": 3}, at=at + 1))
    await engine.store.step_begin("t-1:parse", "t-1", "parse", at + 2)
    r = await client.get("/v1/workflows/t-1/steps", headers=auth("viewer"))
    assert r.status_code == 200, r.text
    assert r.json()["next_cursor"] is None
    steps = {s["step"]: s for s in r.json()["items"]}
    assert steps["fetch"]["status"] == "done" and steps["fetch"]["result"] == {"pages": 3}
    assert steps["parse"]["status"] == "executing" and steps["parse"]["finished_at"] is None

    r = await client.get("/v1/types", headers=auth("agent"))
    assert {t["name"] for t in r.json()} == {"agent_task", "order_fulfilment", "refund_approval"}
    r = await client.get("/v1/types/agent_task", headers=auth("agent"))
    events = {e["name"]: e for e in r.json()["events"]}
    assert events["start"]["may_fire"] and not events["approval_granted"]["may_fire"]
    assert events["approval_granted"]["approval"] and events["approval_granted"]["roles"] == [
        "approver"
    ]
    r = await client.get("/v1/types/agent_task/diagram?current=paused", headers=auth("viewer"))
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    assert "stateDiagram" in r.text and "paused" in r.text


# -- writes -------------------------------------------------------------------------------------


async def test_send_event_moves_the_workflow_as_the_caller(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    await start(client, wid="t-1")
    r = await client.post(
        "/v1/workflows/t-1/events",
        json={"event": "start", "expected_version": 1},
        headers=auth("agent"),
    )
    assert r.status_code == 200, r.text
    assert (r.json()["state"], r.json()["version"]) == ("running", 2)
    assert set(r.json()["allowed_events"]) >= {"complete", "request_approval", "block"}
    r = await client.post(
        "/v1/workflows/t-1/events",
        json={"event": "error_transient", "payload": {"attempt": 1, "max_attempts": 3}},
        headers=auth("agent"),
    )
    assert r.status_code == 200 and r.json()["state"] == "retrying"
    last = (await engine.history("t-1"))[-1]
    assert (last.event, last.actor, last.payload) == (
        "error_transient",
        "agent-7",
        {"attempt": 1, "max_attempts": 3},
    )


async def test_cancel(client: httpx.AsyncClient, engine: Engine) -> None:
    await in_state(engine, client, "t-1", "running")
    r = await client.post(
        "/v1/workflows/t-1/cancel", json={"reason": "not needed"}, headers=auth("boss")
    )
    assert r.status_code == 200, r.text
    assert (r.json()["state"], r.json()["terminal"]) == ("failed", True)
    last = (await engine.history("t-1"))[-1]
    assert (last.event, last.actor, last.payload) == ("cancel", "alice", {"reason": "not needed"})
    # Cancelling again, from a terminal state: illegal, nothing changes.
    async with unchanged(engine):
        r = await client.post(
            "/v1/workflows/t-1/cancel", json={"reason": "again"}, headers=auth("boss")
        )
        assert error_of(r, 409, "illegal_transition")["state"] == "failed"
    # A type whose machine has no cancel event.
    await in_state(engine, client, "r-1", "awaiting_approval", who="system")
    async with unchanged(engine):
        r = await client.post(
            "/v1/workflows/r-1/cancel", json={"reason": "stop"}, headers=auth("admin")
        )
        assert error_of(r, 409, "illegal_transition")["state"] == "awaiting_approval"


async def test_post_input(client: httpx.AsyncClient, engine: Engine) -> None:
    await in_state(engine, client, "t-1", "running")
    r = await client.post(
        "/v1/workflows/t-1/inputs",
        json={"name": "document", "payload": {"pages": 3}},
        headers=auth("agent"),
    )
    assert r.status_code == 201, r.text
    item = await engine.store.next_input("t-1")
    assert item is not None and item.id == r.json()["id"]
    assert (item.name, item.payload) == ("document", {"pages": 3})


@pytest.mark.parametrize(
    ("decision", "state", "event"),
    [("approve", "running", "approval_granted"), ("deny", "failed", "approval_denied")],
)
async def test_approval_callback(
    client: httpx.AsyncClient, engine: Engine, decision: str, state: str, event: str
) -> None:
    await in_state(engine, client, "t-1", "paused")
    r = await client.post(
        "/v1/approvals",
        json={"workflow_id": "t-1", "decision": decision, "comment": "checked"},
        headers=auth("boss"),
    )
    assert r.status_code == 200, r.text
    assert r.json()["state"] == state
    last = (await engine.history("t-1"))[-1]
    assert (last.event, last.actor) == (event, "alice")
    assert last.payload == {"approver": "alice", "comment": "checked"}

    # A service relaying a person's decision: the person is the approver, the caller the actor.
    await in_state(engine, client, "r-1", "awaiting_approval", who="system")
    r = await client.post(
        "/v1/approvals",
        json={"workflow_id": "r-1", "decision": decision, "approver": "grace"},
        headers=auth("boss"),
    )
    assert r.status_code == 200, r.text
    assert r.json()["state"] == ("paying_out" if decision == "approve" else "rejected")
    last = (await engine.history("r-1"))[-1]
    assert (last.event, last.actor, last.payload) == (event, "alice", {"approver": "grace"})


async def test_approval_refusals_change_nothing(client: httpx.AsyncClient, engine: Engine) -> None:
    await in_state(engine, client, "t-1", "paused")
    await in_state(engine, client, "t-2", "running")
    async with unchanged(engine):
        r = await client.post(
            "/v1/approvals",
            json={"workflow_id": "t-2", "decision": "approve"},
            headers=auth("boss"),
        )
        error = error_of(r, 409, "illegal_transition")
        assert (error["state"], error["event"]) == ("running", "approval_granted")
        r = await client.post(
            "/v1/approvals",
            json={"workflow_id": "t-1", "decision": "approve", "expected_version": 2},
            headers=auth("boss"),
        )
        assert error_of(r, 409, "version_conflict")["actual"] == 3
        r = await client.post(
            "/v1/approvals",
            json={"workflow_id": "nope", "decision": "approve"},
            headers=auth("boss"),
        )
        error_of(r, 404, "workflow_not_found")
        for body in (
            {"workflow_id": "t-1", "decision": "maybe"},
            {"workflow_id": "t-1"},
            {"workflow_id": "t-1", "decision": "approve", "approver": ""},
            {"workflow_id": "t-1", "decision": "approve", "extra": 1},
            {"workflow_id": "bad id", "decision": "approve"},
        ):
            r = await client.post("/v1/approvals", json=body, headers=auth("boss"))
            error_of(r, 422, "invalid_input")


async def test_stuck_lists_workflows_past_their_threshold(
    client: httpx.AsyncClient, engine: Engine, clock: ManualClock
) -> None:
    await in_state(engine, client, "t-1", "running")  # stuck after 3600 s
    await in_state(engine, client, "t-2", "planned")  # default: a day
    await start(client, "other", wid="g-1")
    await engine.send("globex:g-1", "start", actor="setup")  # its store id (ids)
    r = await client.get("/v1/stuck", headers=auth("agent"))
    assert r.status_code == 200 and r.json() == {"items": [], "next_cursor": None}
    clock.advance(3601)
    r = await client.get("/v1/stuck", headers=auth("agent"))
    assert [(s["workflow"]["id"], s["age"], s["threshold"]) for s in r.json()["items"]] == [
        ("t-1", 3601, 3600)
    ]
    assert r.json()["items"][0]["workflow"]["stuck"] is True
    r = await client.get("/v1/workflows/t-2", headers=auth("agent"))
    assert r.json()["stuck"] is False
    r = await client.get("/v1/stuck", headers=auth("admin"))
    assert {s["workflow"]["id"] for s in r.json()["items"]} == {"t-1", "globex:g-1"}


async def test_transitions_page_after_a_cursor(client: httpx.AsyncClient, engine: Engine) -> None:
    await in_state(engine, client, "t-1", "done")  # 3 transitions
    await start(client, "other", wid="g-1")  # globex: never shown to acme
    await in_state(engine, client, "t-2", "running")  # 2 more
    seen: list[tuple[str, int]] = []
    after = 0
    for _ in range(10):
        r = await client.get(
            "/v1/transitions", params={"after": after, "limit": 2}, headers=auth("agent")
        )
        assert r.status_code == 200, r.text
        page = r.json()
        if not page["items"]:
            assert page["cursor"] == after
            break
        assert len(page["items"]) <= 2 and page["cursor"] == page["items"][-1]["seq"]
        seen += [(t["workflow_id"], t["version"]) for t in page["items"]]
        after = page["cursor"]
    assert seen == [("t-1", 1), ("t-1", 2), ("t-1", 3), ("t-2", 1), ("t-2", 2)]
    r = await client.get("/v1/transitions", params={"limit": 1000}, headers=auth("admin"))
    assert len(r.json()["items"]) == 6


# -- refusals -------------------------------------------------------------------------------------


async def test_unknown_workflow_is_404_everywhere(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    await in_state(engine, client, "t-1", "paused")
    calls = [
        ("GET", "/v1/workflows/nope", None),
        ("GET", "/v1/workflows/nope/context", None),
        ("GET", "/v1/workflows/nope/history", None),
        ("GET", "/v1/workflows/nope/steps", None),
        ("POST", "/v1/workflows/nope/events", {"event": "start"}),
        ("POST", "/v1/workflows/nope/cancel", {"reason": "x"}),
        ("POST", "/v1/workflows/nope/inputs", {"name": "doc"}),
        ("POST", "/v1/approvals", {"workflow_id": "nope", "decision": "deny"}),
    ]
    async with unchanged(engine):
        for method, path, body in calls:
            r = await client.request(method, path, json=body, headers=auth("admin"))
            assert error_of(r, 404, "workflow_not_found")["workflow_id"] == "nope", path


async def test_unknown_type(client: httpx.AsyncClient, engine: Engine) -> None:
    async with unchanged(engine):
        r = await client.post("/v1/workflows", json={"type": "nope"}, headers=auth("agent"))
        assert error_of(r, 404, "unknown_workflow_type")["name"] == "nope"
        r = await client.get("/v1/types/nope", headers=auth("agent"))
        error_of(r, 404, "unknown_workflow_type")
        r = await client.get("/v1/types/agent_task?version=7", headers=auth("agent"))
        error_of(r, 404, "unknown_workflow_type")
        r = await client.get("/v1/types/agent_task/diagram?current=nowhere", headers=auth("agent"))
        assert error_of(r, 404, "unknown_state")["state"] == "nowhere"


async def test_id_taken_by_another_type_or_tenant(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    await start(client, wid="t-1")
    async with unchanged(engine):
        r = await client.post(
            "/v1/workflows", json={"type": "order_fulfilment", "id": "t-1"}, headers=auth("system")
        )
        assert error_of(r, 409, "workflow_exists")["existing_type"] == "agent_task"
    # Another tenant's id is, for the caller, a free id: ids are scoped per tenant.
    r = await client.post(
        "/v1/workflows", json={"type": "order_fulfilment", "id": "t-1"}, headers=auth("other")
    )
    assert r.status_code == 201 and r.json()["id"] == "t-1" and r.json()["tenant"] == "globex"
    assert (await engine.get("globex:t-1")).type == "order_fulfilment"
    assert (await engine.get("t-1")).type == "agent_task"


async def test_illegal_transition_names_state_and_allowed_events(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    await start(client, wid="t-1")
    async with unchanged(engine):
        for event in ("complete", "no_such_event"):
            r = await client.post(
                "/v1/workflows/t-1/events", json={"event": event}, headers=auth("admin")
            )
            error = error_of(r, 409, "illegal_transition")
            assert (error["state"], error["event"], error["workflow_id"]) == (
                "planned",
                event,
                "t-1",
            )
            assert set(error["allowed"]) == {"start", "cancel"}


async def test_stale_expected_version(client: httpx.AsyncClient, engine: Engine) -> None:
    await in_state(engine, client, "t-1", "running")
    async with unchanged(engine):
        r = await client.post(
            "/v1/workflows/t-1/events",
            json={"event": "complete", "expected_version": 1},
            headers=auth("agent"),
        )
        error = error_of(r, 409, "version_conflict")
        assert (error["expected"], error["actual"]) == (1, 2)


async def test_payload_against_the_event_schema(client: httpx.AsyncClient, engine: Engine) -> None:
    await in_state(engine, client, "t-1", "running")
    await in_state(engine, client, "r-1", "awaiting_approval", who="system")
    await start(client, "system", "refund_approval", "r-2")
    await engine.send("r-2", "validated", actor="setup")
    async with unchanged(engine):
        r = await client.post(
            "/v1/workflows/t-1/events",
            json={"event": "error_transient", "payload": {"attempt": "first", "max_attempts": 3}},
            headers=auth("agent"),
        )
        error = error_of(r, 422, "invalid_payload")
        assert error["event"] == "error_transient" and "attempt" in error["path"]
        r = await client.post(
            "/v1/workflows/r-2/events",
            json={"event": "policy_checked", "payload": {"amount_cents": 5}},
            headers=auth("system"),
        )
        error_of(r, 422, "invalid_payload")
        r = await client.post(
            "/v1/workflows/r-1/events",
            json={"event": "approval_granted", "payload": {"approver": ""}},
            headers=auth("boss"),
        )
        error_of(r, 422, "invalid_payload")


async def test_malformed_requests_are_422_invalid_input(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    await in_state(engine, client, "t-1", "running")
    json_type = {**auth("admin"), "content-type": "application/json"}
    raw_bodies = [
        ("/v1/workflows", b'{"type": "agent_task",'),  # cut short
        ("/v1/workflows/t-1/events", b"not json"),
        ("/v1/workflows/t-1/events", b'{"event": "complete"'),
        ("/v1/workflows/t-1/events", b"\xff\xfe\x00garbage"),  # not even UTF-8
        ("/v1/workflows/t-1/events", b""),
        ("/v1/workflows/t-1/cancel", b"[1, 2]"),
        # Lone surrogates: JSON can spell them, UTF-8 cannot hold them (nor any response).
        ("/v1/workflows", b'{"type": "agent_task", "input": {"note": "\\ud800"}}'),
        ("/v1/workflows/t-1/events", b'{"event": "complete", "payload": {"\\udc00": 1}}'),
    ]
    typed_bodies = [
        ("/v1/workflows", {"type": 5}),
        ("/v1/workflows", {"type": "agent_task", "input": [1, 2]}),
        ("/v1/workflows", {"type": "agent_task", "input": "text"}),
        ("/v1/workflows", {"type": ""}),
        ("/v1/workflows", {}),
        ("/v1/workflows/t-1/events", {"event": 7}),
        ("/v1/workflows/t-1/events", {"event": "complete", "payload": "x"}),
        ("/v1/workflows/t-1/events", {"event": "complete", "payload": [1]}),
        ("/v1/workflows/t-1/events", {"event": "complete", "expected_version": "two"}),
        ("/v1/workflows/t-1/events", {"event": "complete", "expected_version": 0}),
        ("/v1/workflows/t-1/events", {"event": "has space"}),
        ("/v1/workflows/t-1/events", {"payload": {}}),
        ("/v1/workflows/t-1/cancel", {"reason": ""}),
        ("/v1/workflows/t-1/cancel", {}),
        ("/v1/workflows/t-1/inputs", {"name": "doc", "payload": 3}),
        ("/v1/workflows/t-1/inputs", {"name": "bad name!"}),
        # Unknown fields: a typo is refused, never silently ignored.
        ("/v1/workflows", {"type": "agent_task", "inputs": {"goal": "x"}}),
        ("/v1/workflows/t-1/events", {"event": "complete", "expected": 2}),
        ("/v1/workflows/t-1/cancel", {"reason": "x", "force": True}),
        ("/v1/workflows/t-1/inputs", {"name": "doc", "payload": {}, "when": "now"}),
    ]
    async with unchanged(engine):
        for path, raw in raw_bodies:
            r = await client.post(path, content=raw, headers=json_type)
            error_of(r, 422, "invalid_input")
        for path, body in typed_bodies:
            r = await client.post(path, json=body, headers=auth("admin"))
            error = error_of(r, 422, "invalid_input")
            assert error["errors"] and all("where" in e for e in error["errors"]), body


async def test_bad_ids_and_query_parameters(client: httpx.AsyncClient, engine: Engine) -> None:
    await in_state(engine, client, "t-1", "running")
    long_id = "a" * 201
    async with unchanged(engine):
        for path in (
            "/v1/workflows/bad%20id",
            "/v1/workflows/-leading-dash",
            f"/v1/workflows/{long_id}",
            "/v1/workflows/%C3%A9t%C3%A9/history",
        ):
            r = await client.get(path, headers=auth("admin"))
            error_of(r, 422, "invalid_input")
        r = await client.post(
            "/v1/workflows/bad%20id/events", json={"event": "start"}, headers=auth("admin")
        )
        error_of(r, 422, "invalid_input")
        for wid in ("bad id", long_id, "", "x/y"):
            r = await client.post(
                "/v1/workflows", json={"type": "agent_task", "id": wid}, headers=auth("admin")
            )
            error_of(r, 422, "invalid_input")
        for query in (
            "limit=0",
            "limit=1001",
            "limit=ten",
            "offset=-1",
            "terminal=perhaps",
            "older_than=-5",
            "older_than=nan",
            "tenant=bad%20tenant",
            "stat=running",  # a typo of state: refused, not ignored
        ):
            r = await client.get(f"/v1/workflows?{query}", headers=auth("admin"))
            error_of(r, 422, "invalid_input")
        r = await client.get("/v1/transitions?after=-1", headers=auth("admin"))
        error_of(r, 422, "invalid_input")
        r = await client.get("/v1/workflows/t-1?verbose=1", headers=auth("admin"))
        assert error_of(r, 422, "invalid_input")["unknown"] == ["verbose"]


async def test_unsupported_methods_are_405_with_allow(client: httpx.AsyncClient) -> None:
    r = await client.delete("/v1/workflows", headers=auth("admin"))
    error_of(r, 405, "method_not_allowed")
    assert r.headers["allow"] == "GET, HEAD, POST"
    r = await client.put("/v1/workflows/t-1/events", headers=auth("admin"))
    error_of(r, 405, "method_not_allowed")
    assert r.headers["allow"] == "POST"
    r = await client.get("/v1/no-such-path", headers=auth("admin"))
    error_of(r, 404, "not_found")


async def test_an_illegal_transition_names_only_the_events_the_caller_may_fire(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    await in_state(engine, client, "t-1", "paused")
    for who in ("agent", "system", "boss"):
        shown = (await client.get("/v1/workflows/t-1", headers=auth(who))).json()
        async with unchanged(engine):
            r = await client.post(
                "/v1/workflows/t-1/events", json={"event": "no_such_event"}, headers=auth(who)
            )
        error = error_of(r, 409, "illegal_transition")
        # As GET shows it: an agent is not told of the approval events it may not fire.
        assert error["allowed"] == shown["allowed_events"], who
        assert "approval_granted" not in error["message"] or who == "boss"
    agent = (await client.get("/v1/workflows/t-1", headers=auth("agent"))).json()
    assert "approval_granted" not in agent["allowed_events"]
