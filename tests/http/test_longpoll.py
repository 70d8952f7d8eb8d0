"""The long-poll of ``GET /v1/workflows/{id}`` on both stores: a wait ended by a state reached
from another task, by a version change, by the timeout (the workflow as it is, never an
error), the server's cap, bad parameters, another tenant's id, and a client that goes away.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from statewright import Engine
from statewright.http import create_app
from tests.http.conftest import auth, registry
from tests.http.test_api import error_of, start, unchanged
from tests.http.test_stream import Stream

CAP = 2.0
WAIT_FIELDS = ("reached", "timed_out", "waited")


@pytest.fixture
def app(engine: Engine) -> FastAPI:
    served = create_app(engine, registry(), manage_engine=False, max_wait=CAP)
    served.state.wait_poll_interval = 0.02
    served.state.wait_max_poll_interval = 0.05
    return served


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://statewright") as c:
        yield c


def without_wait(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k not in WAIT_FIELDS}


async def soon(
    client: httpx.AsyncClient, url: str, who: str = "agent"
) -> asyncio.Task[httpx.Response]:
    """The GET under way in a task (checked to be still waiting)."""
    task = asyncio.create_task(client.get(url, headers=auth(who)))
    await asyncio.sleep(0.2)
    assert not task.done(), task.result().text
    return task


async def test_a_state_reached_from_another_task_ends_the_wait(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    await start(client, wid="t-1")
    task = await soon(client, "/v1/workflows/t-1?wait_for_state=running,done&timeout=10")
    await engine.send("t-1", "start", actor="setup")
    r = await asyncio.wait_for(task, 5)
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["state"], body["version"]) == ("running", 2)
    assert (body["reached"], body["timed_out"]) == (True, False)
    # It waited for the send, 0.2 s after the request left; the server's clock starts once
    # the request is read and the row checked, some milliseconds later (0.194 s was seen).
    assert 0.1 <= body["waited"] < 5
    # The rest is the plain GET's answer, for the same caller.
    plain = await client.get("/v1/workflows/t-1", headers=auth("agent"))
    assert without_wait(body) == plain.json()
    assert not set(WAIT_FIELDS) & set(plain.json())


async def test_a_state_already_reached_answers_at_once(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    await start(client, wid="t-1")
    r = await client.get("/v1/workflows/t-1?wait_for_state=planned", headers=auth("agent"))
    body = r.json()
    assert (body["reached"], body["timed_out"], body["state"]) == (True, False, "planned")
    assert body["waited"] < 1


async def test_a_version_change_ends_the_wait(client: httpx.AsyncClient, engine: Engine) -> None:
    await start(client, wid="t-1")
    task = await soon(client, "/v1/workflows/t-1?after_version=1&timeout=10")
    await engine.send("t-1", "start", actor="setup")
    body = (await asyncio.wait_for(task, 5)).json()
    assert (body["version"], body["reached"], body["timed_out"]) == (2, True, False)
    # A version already passed: at once.
    r = await client.get("/v1/workflows/t-1?after_version=1", headers=auth("agent"))
    assert (r.json()["version"], r.json()["reached"]) == (2, True)
    assert r.json()["waited"] < 1
    # Either condition ends it: the state named, or the version moving.
    task = await soon(client, "/v1/workflows/t-1?after_version=2&wait_for_state=done")
    await engine.send("t-1", "request_approval", actor="setup")
    body = (await asyncio.wait_for(task, 5)).json()
    assert (body["state"], body["reached"]) == ("paused", True)


async def test_the_timeout_returns_the_current_state_never_an_error(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    await start(client, wid="t-1")
    async with unchanged(engine):
        r = await client.get(
            "/v1/workflows/t-1?wait_for_state=done&timeout=0.3", headers=auth("agent")
        )
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["state"], body["reached"], body["timed_out"]) == ("planned", False, True)
    assert 0.3 <= body["waited"] < 2
    r = await client.get("/v1/workflows/t-1?after_version=1&timeout=0", headers=auth("agent"))
    assert (r.json()["reached"], r.json()["timed_out"]) == (False, True)
    assert r.json()["waited"] < 0.5


async def test_a_finished_workflow_ends_the_wait_without_a_timeout(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    await start(client, wid="t-1")
    task = await soon(client, "/v1/workflows/t-1?wait_for_state=paused&timeout=10")
    await engine.send("t-1", "start", actor="setup")
    await engine.send("t-1", "complete", actor="setup")
    body = (await asyncio.wait_for(task, 5)).json()
    # It will never be paused now: not reached, not timed out.
    assert (body["state"], body["terminal"]) == ("done", True)
    assert (body["reached"], body["timed_out"]) == (False, False)


async def test_the_server_caps_the_timeout(client: httpx.AsyncClient, engine: Engine) -> None:
    await start(client, wid="t-1")
    loop = asyncio.get_running_loop()
    for query in ("wait_for_state=done&timeout=86400", "after_version=1"):  # default: the cap
        began = loop.time()
        r = await client.get(f"/v1/workflows/t-1?{query}", headers=auth("agent"))
        took = loop.time() - began
        assert r.status_code == 200, r.text
        assert (r.json()["timed_out"], r.json()["state"]) == (True, "planned")
        assert CAP <= took < CAP + 2 and CAP <= r.json()["waited"] < CAP + 1


async def test_bad_parameters_are_refused_and_change_nothing(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    await start(client, wid="t-1")
    async with unchanged(engine):
        for query in (
            "wait_for_state=,,",
            "wait_for_state=",
            "wait_for_state=running,",
            "wait_for_state=running, done",
            "after_version=-1",
            "after_version=x",
            "wait_for_state=done&timeout=-1",
            "wait_for_state=done&timeout=abc",
            "wait_for_state=done&timeout=86401",
            "wait_for_state=done&wait=1",
            "after_version=1.5",
            "after_version=4611686018427387905",
            "timeout=nan",
            "timeout=inf",
            "timeout=",
        ):
            r = await client.get(f"/v1/workflows/t-1?{query}", headers=auth("agent"))
            error_of(r, 422, "invalid_input")
        # A state the machine lacks: as the diagram's ?current= (the query's shape is fine).
        for query in ("wait_for_state=nowhere", "wait_for_state=planned,nowhere&timeout=10"):
            r = await client.get(f"/v1/workflows/t-1?{query}", headers=auth("agent"))
            assert "nowhere" in error_of(r, 404, "unknown_state")["message"]


async def test_a_timeout_alone_waits_for_the_next_move(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    await start(client, wid="t-1")
    task = await soon(client, "/v1/workflows/t-1?timeout=10")
    await engine.send("t-1", "start", actor="setup")
    body = (await asyncio.wait_for(task, 5)).json()
    assert (body["version"], body["reached"], body["timed_out"]) == (2, True, False)
    r = await client.get("/v1/workflows/t-1?timeout=0.2", headers=auth("agent"))
    assert (r.json()["version"], r.json()["reached"], r.json()["timed_out"]) == (2, False, True)


async def test_another_tenants_workflow_is_not_found_without_waiting(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    await start(client, wid="t-1")
    loop = asyncio.get_running_loop()
    began = loop.time()
    for query in ("wait_for_state=running&timeout=10", "after_version=0&timeout=10"):
        r = await client.get(f"/v1/workflows/t-1?{query}", headers=auth("other"))
        error_of(r, 404, "workflow_not_found")
    assert loop.time() - began < 1
    # Its own workflow of the same id is another one; the admin names each by its tenant.
    await start(client, who="other", wid="t-1")
    task = await soon(client, "/v1/workflows/t-1?wait_for_state=running&timeout=10", "other")
    await engine.send("t-1", "start", actor="setup")  # the default tenant's, not globex's
    await asyncio.sleep(0.3)
    assert not task.done()
    await engine.send("globex:t-1", "start", actor="setup")
    body = (await asyncio.wait_for(task, 5)).json()
    assert (body["id"], body["state"], body["reached"]) == ("t-1", "running", True)
    r = await client.get(
        "/v1/workflows/globex:t-1?after_version=1&timeout=0", headers=auth("admin")
    )
    assert (r.json()["id"], r.json()["version"]) == ("globex:t-1", 2)


async def test_each_caller_gets_the_plain_gets_view(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    # (Redaction of a type's secrets in a long-poll's answer: tests/http/test_redaction.py.)
    await start(client, wid="t-1", input={"goal": "ship"})
    for who in ("agent", "viewer", "admin"):
        plain = (await client.get("/v1/workflows/t-1", headers=auth(who))).json()
        r = await client.get("/v1/workflows/t-1?wait_for_state=done&timeout=0", headers=auth(who))
        assert without_wait(r.json()) == plain


async def test_a_client_that_goes_away_ends_the_wait(
    app: FastAPI, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    await engine.start("agent_task", workflow_id="t-1", tenant="default")
    reads = 0
    read = engine.store.get_workflow

    async def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal reads
        reads += 1
        return await read(*args, **kwargs)

    monkeypatch.setattr(engine.store, "get_workflow", counted)
    url = "/v1/workflows/t-1?wait_for_state=done&timeout=30"
    async with Stream(app, url, auth("agent")) as request:
        await asyncio.sleep(0.3)
        assert reads > 2 and not request.task.done()  # waiting: reading now and then
        request.gone.set()  # the client goes away
        await asyncio.wait_for(request.task, CAP / 2)  # long before the (capped) timeout
    assert request.task.exception() is None
    after = reads
    await asyncio.sleep(0.3)  # many poll intervals
    assert reads == after, "the wait went on after the client left"


async def test_the_parameters_are_documented(client: httpx.AsyncClient) -> None:
    doc = (await client.get("/openapi.json")).json()
    operation = doc["paths"]["/v1/workflows/{workflow_id}"]["get"]
    params = {p["name"]: p for p in operation["parameters"] if p["in"] == "query"}
    assert set(params) == {"wait_for_state", "after_version", "timeout"}
    assert params["timeout"]["schema"] == {"type": "number", "minimum": 0, "maximum": 86400.0}
    for name in ("reached", "timed_out", "waited"):
        assert name in doc["components"]["schemas"]["WorkflowOut"]["properties"]
