"""Idempotency keys over HTTP, and the operator routes (resolve a step, resume), on both stores.

For every POST that changes a workflow: a retry with the same ``Idempotency-Key`` applies
nothing twice and answers 200 with ``Idempotent-Replayed: true``; the same key with another
request is a 409 ``idempotency_key_reused`` that changes nothing; a malformed key is a 422.
A write whose outcome the store cannot tell (``OutcomeUnknown``) is a 503 telling the client
to retry with the same key, and that retry is then answered from the first application.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from statewright import Engine
from statewright.errors import OutcomeUnknown
from statewright.types import DeferWrite, StepFinish, TransitionWrite, WorkflowRow
from tests.http.conftest import auth
from tests.http.test_api import error_of, in_state, unchanged

REPLAYED = "Idempotent-Replayed"


def key(value: str, who: str = "agent") -> dict[str, str]:
    return {**auth(who), "Idempotency-Key": value}


def first(r: httpx.Response, status: int) -> dict[str, Any]:
    """A first application: its usual status, no replay header."""
    assert r.status_code == status, r.text
    assert REPLAYED not in r.headers
    body: dict[str, Any] = r.json()
    return body


def replayed(r: httpx.Response) -> dict[str, Any]:
    """A retry answered from the first application."""
    assert r.status_code == 200, r.text
    assert r.headers[REPLAYED] == "true"
    body: dict[str, Any] = r.json()
    return body


# -- events -------------------------------------------------------------------------------------


async def test_an_event_retried_with_its_key_is_applied_once(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    await in_state(engine, client, "t-1", "planned")
    url = "/v1/workflows/t-1/events"
    body = {"event": "start", "payload": {}, "expected_version": 1}
    once = first(await client.post(url, json=body, headers=key("k-1")), 200)
    assert (once["state"], once["version"]) == ("running", 2)
    async with unchanged(engine):
        # The retry carries the stale expected_version of the first try: the key wins.
        again = replayed(await client.post(url, json=body, headers=key("k-1")))
        assert again == once
    [_, applied] = await engine.history("t-1")
    assert (applied.event, applied.idempotency_key) == ("start", "k-1")

    # The same key for another event, or the same event with another payload: refused.
    async with unchanged(engine):
        r = await client.post(url, json={"event": "complete"}, headers=key("k-1"))
        assert error_of(r, 409, "idempotency_key_reused")["idempotency_key"] == "k-1"
        r = await client.post(
            url, json={"event": "start", "payload": {"x": 1}}, headers=key("k-1")
        )
        error_of(r, 409, "idempotency_key_reused")
    # A new key is a new request (here an illegal one: the task runs already).
    async with unchanged(engine):
        r = await client.post(url, json={"event": "start"}, headers=key("k-2"))
        error_of(r, 409, "illegal_transition")


async def test_keys_belong_to_one_workflow(client: httpx.AsyncClient, engine: Engine) -> None:
    await in_state(engine, client, "t-1", "planned")
    await in_state(engine, client, "t-2", "planned")
    for wid in ("t-1", "t-2"):
        r = await client.post(
            f"/v1/workflows/{wid}/events", json={"event": "start"}, headers=key("same")
        )
        first(r, 200)
    assert [len(await engine.history(w)) for w in ("t-1", "t-2")] == [2, 2]


# -- start --------------------------------------------------------------------------------------


async def test_a_start_without_an_id_retried_with_its_key_makes_one_workflow(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    body = {"type": "agent_task", "input": {"goal": "ship"}}
    made = first(await client.post("/v1/workflows", json=body, headers=key("start-1")), 201)
    async with unchanged(engine):
        again = replayed(await client.post("/v1/workflows", json=body, headers=key("start-1")))
    assert again["id"] == made["id"] and again["version"] == 1
    assert [r.id for r in await engine.list_workflows()] == [made["id"]]
    [created] = await engine.history(made["id"])
    assert created.idempotency_key == "start-1"

    # The same key with another input, or another type: refused, nothing created.
    async with unchanged(engine):
        r = await client.post(
            "/v1/workflows",
            json={"type": "agent_task", "input": {"goal": "other"}},
            headers=key("start-1"),
        )
        error_of(r, 409, "idempotency_key_reused")
        r = await client.post(
            "/v1/workflows", json={"type": "order_fulfilment"}, headers=key("start-1")
        )
        error_of(r, 409, "workflow_exists")
    # Another tenant's caller with the same key starts a workflow of its own.
    theirs = first(
        await client.post("/v1/workflows", json=body, headers=key("start-1", "other")), 201
    )
    assert theirs["id"] != made["id"] and theirs["tenant"] == "globex"


async def test_a_start_with_an_id_and_a_key(client: httpx.AsyncClient, engine: Engine) -> None:
    body = {"type": "agent_task", "input": {"goal": "ship"}, "id": "t-1"}
    first(await client.post("/v1/workflows", json=body, headers=key("s")), 201)
    async with unchanged(engine):
        replayed(await client.post("/v1/workflows", json=body, headers=key("s")))
        # Without a key an existing id is still a 200, but not a replay of a keyed request.
        r = await client.post("/v1/workflows", json=body, headers=auth("agent"))
        assert r.status_code == 200 and REPLAYED not in r.headers


# -- cancel -------------------------------------------------------------------------------------


async def test_a_cancel_retried_with_its_key_is_applied_once(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    await in_state(engine, client, "t-1", "running")
    url = "/v1/workflows/t-1/cancel"
    done = first(await client.post(url, json={"reason": "stop"}, headers=key("c", "boss")), 200)
    assert (done["state"], done["terminal"]) == ("failed", True)
    async with unchanged(engine):
        replayed(await client.post(url, json={"reason": "stop"}, headers=key("c", "boss")))
        r = await client.post(url, json={"reason": "other"}, headers=key("c", "boss"))
        error_of(r, 409, "idempotency_key_reused")
    assert [t.event for t in await engine.history("t-1")].count("cancel") == 1


async def test_a_cancel_handed_to_a_worker_is_a_replay_on_retry(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    await in_state(engine, client, "t-1", "running")
    await claim(engine, "t-1")
    url = "/v1/workflows/t-1/cancel"
    pending = first(await client.post(url, json={"reason": "stop"}, headers=key("c", "boss")), 200)
    assert (pending["state"], pending["cancel_requested"]) == ("running", True)
    async with unchanged(engine):
        again = replayed(await client.post(url, json={"reason": "stop"}, headers=key("c", "boss")))
        assert again["cancel_requested"] is True
        r = await client.post(url, json={"reason": "other"}, headers=key("c", "boss"))
        error_of(r, 409, "idempotency_key_reused")


# -- inputs -------------------------------------------------------------------------------------


async def test_an_input_retried_with_its_key_is_posted_once(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    await in_state(engine, client, "t-1", "running")
    url = "/v1/workflows/t-1/inputs"
    body = {"name": "document", "payload": {"pages": 3}}
    posted = first(await client.post(url, json=body, headers=key("in-1")), 201)
    async with unchanged(engine):
        assert replayed(await client.post(url, json=body, headers=key("in-1"))) == posted
        r = await client.post(
            url, json={"name": "document", "payload": {"pages": 4}}, headers=key("in-1")
        )
        error_of(r, 409, "idempotency_key_reused")
        r = await client.post(url, json={"name": "note"}, headers=key("in-1"))
        error_of(r, 409, "idempotency_key_reused")
    item = await engine.store.next_input("t-1")
    assert item is not None and (item.id, item.idempotency_key) == (posted["id"], "in-1")
    assert await engine.store.next_input("t-1", skip=[item.id]) is None  # only one

    # Once the workflow has finished it takes no inputs; a retry of one posted before still
    # answers from the first post.
    await engine.send("t-1", "complete", actor="setup")
    async with unchanged(engine):
        r = await client.post(url, json={"name": "late"}, headers=auth("agent"))
        assert error_of(r, 409, "workflow_finished")["state"] == "done"
        assert replayed(await client.post(url, json=body, headers=key("in-1"))) == posted


async def test_a_key_used_for_an_event_is_refused_for_an_input_and_back(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    # The README: "the same key with another event, payload or input is 409".
    await in_state(engine, client, "t-1", "planned")
    events, inputs = "/v1/workflows/t-1/events", "/v1/workflows/t-1/inputs"
    first(await client.post(events, json={"event": "start"}, headers=key("k-1")), 200)
    async with unchanged(engine):
        r = await client.post(inputs, json={"name": "document"}, headers=key("k-1"))
        assert "event 'start'" in error_of(r, 409, "idempotency_key_reused")["message"]
    assert await engine.store.next_input("t-1") is None
    first(await client.post(inputs, json={"name": "document"}, headers=key("k-2")), 201)
    async with unchanged(engine):
        for body in ({"event": "request_approval"}, {"event": "complete"}):
            r = await client.post(events, json=body, headers=key("k-2"))
            assert "input 'document'" in error_of(r, 409, "idempotency_key_reused")["message"]
        r = await client.post(
            "/v1/workflows/t-1/cancel", json={"reason": "no"}, headers=key("k-2", "boss")
        )
        error_of(r, 409, "idempotency_key_reused")
    assert (await engine.get("t-1")).state == "running"


# -- approvals ----------------------------------------------------------------------------------


async def test_an_approval_retried_with_its_key_is_applied_once(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    await in_state(engine, client, "r-1", "awaiting_approval", who="system")
    body = {"workflow_id": "r-1", "decision": "approve", "comment": "ok"}
    done = first(await client.post("/v1/approvals", json=body, headers=key("a", "boss")), 200)
    assert done["state"] != "awaiting_approval"
    async with unchanged(engine):
        again = replayed(await client.post("/v1/approvals", json=body, headers=key("a", "boss")))
        assert again["version"] == done["version"]
        deny = {**body, "decision": "deny"}
        r = await client.post("/v1/approvals", json=deny, headers=key("a", "boss"))
        error_of(r, 409, "idempotency_key_reused")


# -- malformed keys -----------------------------------------------------------------------------

POSTS: list[tuple[str, dict[str, Any]]] = [
    ("/v1/workflows", {"type": "agent_task", "id": "t-2"}),
    ("/v1/workflows/t-1/events", {"event": "start"}),
    ("/v1/workflows/t-1/cancel", {"reason": "x"}),
    ("/v1/workflows/t-1/inputs", {"name": "doc"}),
    ("/v1/approvals", {"workflow_id": "t-1", "decision": "approve"}),
]


@pytest.mark.parametrize(
    "bad", [b"", b"has space", b"x" * 256, "caf\u00e9".encode("latin-1"), b"tab\there"]
)
async def test_a_malformed_key_is_422_on_every_post(
    client: httpx.AsyncClient, engine: Engine, bad: bytes
) -> None:
    await in_state(engine, client, "t-1", "planned")
    async with unchanged(engine):
        for url, body in POSTS:
            headers = [
                (b"authorization", auth("admin")["Authorization"].encode()),
                (b"idempotency-key", bad),
            ]
            r = await client.post(url, json=body, headers=headers)
            error = error_of(r, 422, "invalid_input")
            assert "Idempotency-Key" in error["message"], (url, error)


# -- outcome unknown ----------------------------------------------------------------------------


def lose_connection(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, *, applied: bool
) -> Callable[[], None]:
    """Make the store's next transitions fail as if the connection broke after the write was
    sent, having applied it (``applied``) or not. Returns the undo."""
    real: Callable[[TransitionWrite], Awaitable[WorkflowRow]] = engine.store.apply_transition

    async def broken(write: TransitionWrite) -> WorkflowRow:
        if applied:
            await real(write)
        raise OutcomeUnknown(
            "lost the connection to the store during a write; it may or may not have been "
            "applied: connection reset"
        )

    monkeypatch.setattr(engine.store, "apply_transition", broken)
    return lambda: monkeypatch.setattr(engine.store, "apply_transition", real)


@pytest.mark.parametrize("applied", [True, False])
async def test_an_unknown_outcome_is_503_and_the_retry_with_the_key_settles_it(
    client: httpx.AsyncClient, engine: Engine, monkeypatch: pytest.MonkeyPatch, applied: bool
) -> None:
    await in_state(engine, client, "t-1", "planned")
    url = "/v1/workflows/t-1/events"
    restore = lose_connection(engine, monkeypatch, applied=applied)
    r = await client.post(url, json={"event": "start"}, headers=key("k"))
    error = error_of(r, 503, "outcome_unknown")
    assert "Retry the request with the same Idempotency-Key header" in error["message"]
    assert "may or may not have been applied" in error["message"]
    if not applied:  # without a key the client is told to look before retrying
        r = await client.post(url, json={"event": "start"}, headers=auth("agent"))
        message = error_of(r, 503, "outcome_unknown")["message"]
        assert "Read the workflow before retrying" in message
    restore()

    r = await client.post(url, json={"event": "start"}, headers=key("k"))
    body = replayed(r) if applied else first(r, 200)
    assert (body["state"], body["version"]) == ("running", 2)
    assert [t.event for t in await engine.history("t-1")] == ["$start", "start"]


# -- operators: resolve a step, resume a workflow -----------------------------------------------


async def claim(engine: Engine, wid: str) -> None:
    """A worker (``w-1``) holds the workflow."""
    row = await engine.get(wid)
    now = engine.clock.now()
    await engine.store.defer(DeferWrite(wid, row.version, now, row.attempts, next_due_at=now))
    [claimed] = await engine.store.claim_due("w-1", now, 30.0, 10)
    assert claimed.id == wid


async def park_with_unknown_step(engine: Engine, wid: str, step: str = "charge") -> None:
    """What a worker leaves after a step whose outcome it could not establish."""
    now = engine.clock.now()
    key_ = f"{wid}:{step}"
    await engine.store.step_begin(key_, wid, step, now)
    await engine.store.step_finish(
        StepFinish(key_, 1, "failed", error="TimeoutError", outcome="unknown", at=now)
    )
    row = await engine.get(wid)
    await engine.store.defer(
        DeferWrite(
            wid,
            row.version,
            now,
            row.attempts + 1,
            total_attempts=row.total_attempts + 1,
            last_error=f"step {key_!r}: outcome unknown",
            parked="step_outcome_unknown",
        )
    )


async def test_the_views_show_parking_and_step_outcomes(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    await in_state(engine, client, "t-1", "running")
    await park_with_unknown_step(engine, "t-1")
    wf = (await client.get("/v1/workflows/t-1", headers=auth("agent"))).json()
    assert (wf["parked"], wf["total_attempts"], wf["attempts"]) == ("step_outcome_unknown", 1, 1)
    [step] = (await client.get("/v1/workflows/t-1/steps", headers=auth("agent"))).json()["items"]
    assert (step["step"], step["status"], step["outcome"]) == ("charge", "failed", "unknown")


@pytest.mark.parametrize(
    ("body", "status", "result"),
    [
        ({"verdict": "applied", "result": {"charge_id": "ch_1"}, "reason": "in the PSP"},
         "done", {"charge_id": "ch_1"}),
        ({"verdict": "not_applied", "reason": "no such charge"}, "failed", None),
    ],
)  # fmt: skip
async def test_an_operator_resolves_an_unknown_step_and_the_workflow_resumes(
    client: httpx.AsyncClient,
    engine: Engine,
    body: dict[str, Any],
    status: str,
    result: Any,
) -> None:
    await in_state(engine, client, "t-1", "running")
    await park_with_unknown_step(engine, "t-1")
    url = "/v1/workflows/t-1/steps/charge/resolve"
    r = await client.post(url, json=body, headers=auth("boss"))
    assert r.status_code == 200, r.text
    step = r.json()
    assert (step["key"], step["status"], step["result"]) == ("t-1:charge", status, result)
    assert step["outcome"] == (None if status == "done" else "not_applied")
    assert "alice" in step["error"] and body["reason"] in step["error"]
    row = await engine.get("t-1")
    assert (row.parked, row.next_due_at, row.state) == (None, engine.clock.now(), "running")


async def test_resolve_refusals_change_nothing(client: httpx.AsyncClient, engine: Engine) -> None:
    await in_state(engine, client, "t-1", "running")
    await park_with_unknown_step(engine, "t-1")
    url = "/v1/workflows/t-1/steps/charge/resolve"
    ok = {"verdict": "applied", "result": 1, "reason": "seen"}
    async with unchanged(engine):
        for who in ("agent", "viewer", "system"):
            error_of(await client.post(url, json=ok, headers=auth(who)), 403, "forbidden")
        # Another tenant's workflow does not exist for the caller, operator or not.
        error_of(await client.post(url, json=ok, headers=auth("other")), 404, "workflow_not_found")
        r = await client.post(
            "/v1/workflows/t-1/steps/nope/resolve", json=ok, headers=auth("boss")
        )
        error_of(r, 404, "step_not_found")
        for bad in (
            {"verdict": "not_applied", "result": 1, "reason": "x"},  # a result needs applied
            {"verdict": "maybe", "reason": "x"},
            {"verdict": "applied", "reason": ""},
            {"verdict": "applied"},
        ):
            r = await client.post(url, json=bad, headers=auth("boss"))
            error_of(r, 422, "invalid_input")
    await claim(engine, "t-1")
    async with unchanged(engine):
        r = await client.post(url, json=ok, headers=auth("admin"))
        error_of(r, 409, "workflow_busy")
    await engine.store.break_leases("w-1")
    assert (await client.post(url, json=ok, headers=auth("admin"))).status_code == 200
    async with unchanged(engine):
        r = await client.post(url, json=ok, headers=auth("boss"))
        error_of(r, 409, "step_done")


async def test_an_operator_resumes_a_parked_workflow(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    await in_state(engine, client, "t-1", "running")
    row = await engine.get("t-1")
    now = engine.clock.now()
    await engine.store.defer(
        DeferWrite("t-1", row.version, now, 0, last_error="boom", parked="fatal_error")
    )
    url = "/v1/workflows/t-1/resume"
    async with unchanged(engine):
        for who in ("agent", "viewer"):
            r = await client.post(url, json={"reason": "fixed"}, headers=auth(who))
            error_of(r, 403, "forbidden")
        r = await client.post(url, json={"reason": "fixed"}, headers=auth("other"))
        error_of(r, 404, "workflow_not_found")
        error_of(await client.post(url, json={}, headers=auth("boss")), 422, "invalid_input")
    r = await client.post(url, json={"reason": "the gateway is back"}, headers=auth("boss"))
    assert r.status_code == 200, r.text
    wf = r.json()
    assert (wf["parked"], wf["state"], wf["next_due_at"]) == (None, "running", now)
    last = (await engine.history("t-1"))[-1]  # audited: who resumed it, and why
    assert (last.event, last.actor, last.payload, last.from_state, last.to_state) == (
        "$resume",
        "alice",
        {"reason": "the gateway is back"},
        "running",
        "running",
    )
    await engine.check("t-1")  # replay understands it

    await claim(engine, "t-1")
    async with unchanged(engine):
        r = await client.post(url, json={"reason": "again"}, headers=auth("admin"))
        error_of(r, 409, "workflow_busy")
    await engine.store.break_leases("w-1")
    await engine.send("t-1", "complete", actor="setup")
    async with unchanged(engine):
        r = await client.post(url, json={"reason": "again"}, headers=auth("admin"))
        error_of(r, 409, "workflow_finished")
