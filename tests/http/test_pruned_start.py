"""A start retried with its Idempotency-Key after its workflow was pruned (issue 22, item 9):
409 ``workflow_pruned``, named by the id the caller knows, and nothing is created."""

from __future__ import annotations

import httpx

from statewright import Engine, ManualClock
from tests.http.conftest import auth
from tests.http.test_api import error_of, unchanged


async def test_a_start_retried_after_its_workflow_was_pruned_is_refused(
    client: httpx.AsyncClient, engine: Engine, clock: ManualClock
) -> None:
    body = {"type": "agent_task", "input": {"goal": "ship"}}
    headers = {**auth("other"), "Idempotency-Key": "start-9"}  # a tenant-bound caller
    r = await client.post("/v1/workflows", json=body, headers=headers)
    assert r.status_code == 201, r.text
    wid = r.json()["id"]
    store_id = f"globex:{wid}"
    for event in ("start", "complete"):
        await engine.send(store_id, event, {})
    clock.advance(3600)
    assert (await engine.prune(60)).workflows == 1
    async with unchanged(engine):
        r = await client.post("/v1/workflows", json=body, headers=headers)
        error = error_of(r, 409, "workflow_pruned")
    assert error["workflow_id"] == wid and "globex" not in error["message"]
    assert error["idempotency_key"] == "start-9"
    assert await engine.store.get_workflow(store_id) is None
