"""The ids the system makes are the system's (issue 22), on both stores: a schedule's tick
(``<schedule>.<UTC tick>``) and a fork's default id (``<id>.fork-<version>``) are predictable,
so no caller may start a workflow under an id of those forms (nor fork to one); the workflow
the system makes there is then its own. Workflows already kept under such ids stay readable."""

from __future__ import annotations

import httpx
import pytest

from statewright import Engine
from tests.http.conftest import auth
from tests.http.test_api import error_of, in_state, start


@pytest.mark.parametrize(
    ("who", "wid"),
    [
        ("agent", "t-1.fork-2"),
        ("agent", "nightly.20270115T020000Z"),
        ("agent", "x.fork-10"),
        ("other", "t-1.fork-2"),  # a tenant's (its fork of its t-1 would be that id)
        ("admin", "t-1.fork-2"),  # a caller of every tenant
        ("boss", "report.99991231T235959Z"),
    ],
)
async def test_a_caller_cannot_start_an_id_the_system_makes(
    client: httpx.AsyncClient, engine: Engine, who: str, wid: str
) -> None:
    body = {"type": "agent_task", "id": wid, "input": {"goal": "mine"}}
    r = await client.post("/v1/workflows", json=body, headers=auth(who))
    assert "schedules and forks" in error_of(r, 422, "invalid_input")["message"]
    assert await engine.list_workflows() == []


async def test_a_squatted_fork_id_is_refused_and_the_fork_gets_its_own(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    await in_state(engine, client, "t-1", "running")
    # An agent predicts the operator's fork of t-1 at its latest version...
    body = {"type": "agent_task", "id": "t-1.fork-2", "input": {"goal": "the agent's"}}
    error_of(
        await client.post("/v1/workflows", json=body, headers=auth("agent")), 422, "invalid_input"
    )
    # ... and an operator may not name a fork with that form either.
    r = await client.post(
        "/v1/workflows/t-1/fork",
        json={"reason": "retry", "id": "t-9.fork-1"},
        headers=auth("boss"),
    )
    error_of(r, 422, "invalid_input")
    r = await client.post("/v1/workflows/t-1/fork", json={"reason": "retry"}, headers=auth("boss"))
    assert r.status_code == 201, r.text
    assert r.json()["id"] == "t-1.fork-2"
    [first] = await engine.history("t-1.fork-2", limit=1)
    assert (first.event, first.actor) == ("$fork", "alice")
    # A fork to an id the operator chooses (of the usual form) still works.
    r = await client.post(
        "/v1/workflows/t-1/fork", json={"reason": "again", "id": "t-1-b"}, headers=auth("boss")
    )
    assert r.status_code == 201 and r.json()["id"] == "t-1-b"


async def test_workflows_kept_under_such_ids_stay_readable(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    # Made before the rule (or by the trusted Python API): read, acted on as any other.
    await engine.start("agent_task", {"goal": "old"}, workflow_id="old.20260101T000000Z")
    await engine.start("agent_task", {"goal": "old"}, workflow_id="old.fork-1")
    for wid in ("old.20260101T000000Z", "old.fork-1"):
        r = await client.get(f"/v1/workflows/{wid}", headers=auth("viewer"))
        assert r.status_code == 200 and r.json()["id"] == wid, r.text
        r = await client.post(
            f"/v1/workflows/{wid}/events", json={"event": "start"}, headers=auth("agent")
        )
        assert r.status_code == 200 and r.json()["state"] == "running", r.text
    # Starting one of them again is refused too: it is not a caller's start to retry.
    body = {"type": "agent_task", "id": "old.fork-1", "input": {"goal": "old"}}
    error_of(
        await client.post("/v1/workflows", json=body, headers=auth("agent")), 422, "invalid_input"
    )
    await start(client, "agent", wid="old-fork-1")  # the usual ids are as they were
