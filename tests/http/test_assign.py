"""Data into a running workflow over HTTP, on both stores: a webhook's payload reaches the
context through the event's ``assign`` action (never through a caller's ``context``), and an
explicit context patch is an operator's logged transition."""

from __future__ import annotations

import httpx

from statewright import Engine, ManualClock
from statewright.types import DeferWrite
from tests.http.conftest import auth
from tests.http.test_api import error_of, unchanged

ORDER = {"sku": "BOOK-42", "quantity": 1, "amount_cents": 2599}
TO_WAREHOUSE = [
    ("reserve_inventory", {"reservation_id": "r-1"}),
    ("authorize_payment", {"authorization_id": "a-1"}),
    ("capture_payment", {"charge_id": "ch-1"}),
    ("trigger_fulfillment", {"fulfilment_id": "f-1"}),
]


async def at_the_warehouse(engine: Engine, wid: str) -> None:
    await engine.start("order_fulfilment", ORDER, workflow_id=wid)
    for event, payload in TO_WAREHOUSE:
        await engine.send(wid, event, payload, actor="billing-service")


async def test_a_webhook_payload_lands_in_the_context_through_the_events_action(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    await at_the_warehouse(engine, "o-1")
    r = await client.post(
        "/v1/workflows/o-1/events",
        json={"event": "ship", "payload": {"tracking_number": "TRK-1"}},
        headers=auth("system"),
    )
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "shipped"
    r = await client.get("/v1/workflows/o-1/context", headers=auth("boss"))
    assert r.json()["tracking_number"] == "TRK-1"
    last = (await engine.history("o-1"))[-1]
    assert (last.event, last.context_patch) == ("ship", {"tracking_number": "TRK-1"})
    await engine.check("o-1")  # replay = row after actions


async def test_an_event_cannot_carry_a_context_patch(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    await at_the_warehouse(engine, "o-2")
    async with unchanged(engine):
        r = await client.post(
            "/v1/workflows/o-2/events",
            json={"event": "ship", "payload": {"tracking_number": "T"}, "context": {"x": 1}},
            headers=auth("admin"),
        )
        assert r.status_code == 422


async def test_operators_patch_the_context_as_a_logged_transition(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    await at_the_warehouse(engine, "o-3")
    before = await engine.get("o-3")
    body = {"patch": {"gift_note": "Happy birthday"}, "reason": "customer called"}
    async with unchanged(engine):
        for who in ("agent", "system", "viewer"):
            r = await client.patch("/v1/workflows/o-3/context", json=body, headers=auth(who))
            error_of(r, 403, "forbidden")
        error_of(
            await client.patch("/v1/workflows/o-3/context", json=body, headers=auth("other")),
            404,
            "workflow_not_found",
        )
        for bad in (
            {"patch": {}, "reason": "r"},
            {"patch": {"a": 1}},
            {"patch": [1], "reason": "r"},
            {"patch": {"a": 1}, "reason": ""},
        ):
            r = await client.patch("/v1/workflows/o-3/context", json=bad, headers=auth("boss"))
            assert r.status_code == 422, r.text
        stale = {**body, "expected_version": before.version - 1}
        error_of(
            await client.patch("/v1/workflows/o-3/context", json=stale, headers=auth("boss")),
            409,
            "version_conflict",
        )
    headers = {**auth("boss"), "Idempotency-Key": "patch-1"}
    r = await client.patch("/v1/workflows/o-3/context", json=body, headers=headers)
    assert r.status_code == 200, r.text
    assert (r.json()["state"], r.json()["version"]) == (before.state, before.version + 1)
    again = await client.patch("/v1/workflows/o-3/context", json=body, headers=headers)
    assert again.status_code == 200, again.text
    assert (await engine.get("o-3")).version == before.version + 1
    last = (await engine.history("o-3"))[-1]
    assert (last.event, last.actor, last.payload, last.context_patch) == (
        "$patch_context",
        "alice",
        {"reason": "customer called"},
        {"gift_note": "Happy birthday"},
    )
    r = await client.patch("/v1/workflows/o-3/context", json=body, headers=auth("admin"))
    assert r.status_code == 200
    await engine.check("o-3")


async def test_only_admins_move_a_workflow_by_hand(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    await at_the_warehouse(engine, "o-4")
    url = "/v1/workflows/o-4/move"
    body = {"state": "shipped", "reason": "the carrier lost the webhook"}
    async with unchanged(engine):
        for who in ("agent", "system", "viewer", "boss"):  # boss is an operator, not admin
            error_of(await client.post(url, json=body, headers=auth(who)), 403, "forbidden")
        bad = {"state": "nowhere", "reason": "r"}
        error_of(await client.post(url, json=bad, headers=auth("admin")), 404, "unknown_state")
        error_of(
            await client.post(url, json={"state": "shipped"}, headers=auth("admin")),
            422,
            "invalid_input",
        )
    r = await client.post(url, json=body, headers=auth("admin"))
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "shipped"
    last = (await engine.history("o-4"))[-1]
    assert (last.event, last.actor, last.payload["reason"]) == (
        "$move",
        "root",
        "the carrier lost the webhook",
    )
    await engine.check("o-4")


async def test_operators_fork_a_workflow_in_their_tenant(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    await at_the_warehouse(engine, "o-5")
    url = "/v1/workflows/o-5/fork"
    async with unchanged(engine):
        for who in ("agent", "viewer"):
            r = await client.post(url, json={"reason": "r"}, headers=auth(who))
            error_of(r, 403, "forbidden")
        error_of(
            await client.post(url, json={"reason": "r"}, headers=auth("other")),
            404,
            "workflow_not_found",
        )
        error_of(
            await client.post(url, json={"reason": "r", "version": 99}, headers=auth("boss")),
            404,
            "version_not_found",
        )
    body = {"reason": "start the warehouse part again", "version": 3, "id": "o-5b"}
    r = await client.post(url, json=body, headers=auth("boss"))
    assert r.status_code == 201, r.text
    assert (r.json()["id"], r.json()["state"]) == ("o-5b", "payment_authorized")
    first = (await engine.history("o-5b"))[0]
    assert (first.event, first.actor, first.payload["forked_from"]) == ("$fork", "alice", "o-5")
    await engine.check("o-5b")
    again = await client.post(url, json=body, headers=auth("boss"))
    assert again.status_code == 201 and again.json()["version"] == r.json()["version"]


async def test_a_fork_that_would_call_a_step_again_is_refused_until_said_or_resolved(
    client: httpx.AsyncClient, engine: Engine, clock: ManualClock
) -> None:
    """Issue 22, item 3, over HTTP: 409 while a worker holds the workflow, while a step of it
    has an unknown outcome (named, with the way out), and from a version after which steps
    were done unless ``rerun_steps`` says so; nothing is created by a refusal."""
    await at_the_warehouse(engine, "o-6")
    url = "/v1/workflows/o-6/fork"
    store = engine.store
    row = await engine.get("o-6")
    now = clock.now()
    await store.defer(DeferWrite("o-6", row.version, now, row.attempts, next_due_at=now))
    [claimed] = await store.claim_due("w-1", now, 30.0, 10)
    async with unchanged(engine):
        r = await client.post(url, json={"reason": "r"}, headers=auth("boss"))
        assert "a worker holds workflow 'o-6'" in error_of(r, 409, "workflow_busy")["message"]
    assert claimed.lease is not None
    await store.step_begin("o-6:label", "o-6", "label", now, claimed.lease)
    await store.release_lease("o-6", claimed.lease)  # the worker died in the call
    async with unchanged(engine):
        r = await client.post(url, json={"reason": "r"}, headers=auth("boss"))
        error = error_of(r, 409, "step_unresolved")
        assert error["steps"] == ["label"] and "resolve-step o-6 label" in error["message"]
    clock.advance(1)
    r = await client.post(
        "/v1/workflows/o-6/steps/label/resolve",
        json={"verdict": "applied", "result": {"label": "L-1"}, "reason": "printed"},
        headers=auth("boss"),
    )
    assert r.status_code == 200, r.text
    async with unchanged(engine):
        body = {"reason": "again", "version": 3}
        r = await client.post(url, json=body, headers=auth("boss"))
        error = error_of(r, 409, "steps_would_rerun")
        assert (error["steps"], error["version"]) == (["label"], 3)
    r = await client.post(url, json={**body, "rerun_steps": True}, headers=auth("boss"))
    assert r.status_code == 201, r.text
    assert (await engine.history(r.json()["id"]))[0].payload["rerun_steps"] == ["label"]
    r = await client.post(url, json={"reason": "a copy"}, headers=auth("boss"))
    assert r.status_code == 201, r.text  # the latest version: nothing to rerun, no flag
    [copied] = await store.steps(r.json()["id"])
    assert (copied.step, copied.result) == ("label", {"label": "L-1"})
