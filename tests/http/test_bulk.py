"""POST /v1/bulk (issue 28, item 3): operators and admins only; a dry run changes nothing;
a real run cancels each match once, in the caller's tenant only; the same operation id again
replays."""

from __future__ import annotations

import httpx

from statewright import Engine, ManualClock
from tests.http.conftest import auth


async def test_bulk_cancel_over_http(client: httpx.AsyncClient, engine: Engine) -> None:
    for i in range(3):
        await engine.start("agent_task", {"goal": "g"}, workflow_id=f"b{i}")
    await engine.start("agent_task", {"goal": "g"}, workflow_id="g1", tenant="globex")
    body = {
        "action": "cancel",
        "filter": {"type": "agent_task"},
        "reason": "incident 42",
        "dry_run": True,
    }
    for who in ("agent", "viewer", "other"):
        r = await client.post("/v1/bulk", json=body, headers=auth(who))
        assert r.status_code == 403, (who, r.text)
    r = await client.post("/v1/bulk", json=body | {"bogus": 1}, headers=auth("boss"))
    assert r.status_code == 422
    r = await client.post("/v1/bulk", json=body, headers=auth("boss"))
    assert r.status_code == 200, r.text
    dry = r.json()
    assert (dry["matched"], dry["applied"], dry["dry_run"]) == (3, 0, True)  # its tenant only
    assert sorted(dry["sample"]) == ["b0", "b1", "b2"]
    assert (await engine.get("b0")).state != "cancelled"

    real = body | {"dry_run": False, "operation_id": "op-1"}
    done = (await client.post("/v1/bulk", json=real, headers=auth("boss"))).json()
    assert (done["matched"], done["applied"], done["failed"]) == (3, 3, 0), done
    assert (await engine.get("b1")).terminal
    last = (await engine.history("b1"))[-1]
    assert (last.actor, last.payload, last.idempotency_key) == (
        "alice",
        {"reason": "incident 42"},
        "bulk:op-1:cancel",
    )
    assert not (await engine.get("g1")).terminal  # another tenant's: untouched
    r = await client.post(
        "/v1/bulk", json=real | {"action": "move", "to_state": "done"}, headers=auth("boss")
    )
    assert r.status_code == 403  # moving by hand is for admins


async def test_a_bulk_fork_rerun_with_entered_before_forks_no_fork(
    client: httpx.AsyncClient, engine: Engine, clock: ManualClock
) -> None:
    for i in range(2):
        await engine.start("agent_task", {"goal": "g"}, workflow_id=f"f{i}")
    where = {"type": "agent_task", "state": "planned"}
    body = {
        "action": "fork",
        "filter": where,
        "reason": "try again",
        "dry_run": True,
    }
    dry = (await client.post("/v1/bulk", json=body, headers=auth("boss"))).json()
    assert dry["matched"] == 2
    clock.advance(1)  # the real run is later
    cutoff = {"filter": where | {"entered_before": dry["entered_before"]}}
    real = body | cutoff | {"dry_run": False, "operation_id": "fork-1"}
    done = (await client.post("/v1/bulk", json=real, headers=auth("boss"))).json()
    assert (done["matched"], done["applied"]) == (2, 2), done
    # The forks are in the same state, made after the cutoff: a re-run does not match them.
    again = (await client.post("/v1/bulk", json=real, headers=auth("boss"))).json()
    assert (again["matched"], again["applied"], again["replayed"]) == (2, 0, 2), again
    without = (await client.post("/v1/bulk", json=body, headers=auth("boss"))).json()
    assert without["matched"] == 4  # what the cutoff leaves out
    for bad in ("soon", "NaN"):
        r = await client.post(
            "/v1/bulk", json=body | {"filter": {"entered_before": bad}}, headers=auth("boss")
        )
        assert r.status_code == 422, (bad, r.text)


async def test_terminal_chooses_live_finished_or_both(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    """Live workflows by default; ``terminal: true`` the finished ones only (a bulk fork of
    the cancelled ones, say); ``null`` both; anything else is refused and changes nothing."""
    for i in range(3):
        await engine.start("agent_task", {"goal": "g"}, workflow_id=f"t{i}")
    await engine.cancel("t0", reason="gone", actor="test")
    base = {"action": "fork", "reason": "again", "dry_run": True}

    async def matched(**f: object) -> list[str]:
        body = base | {"filter": {"type": "agent_task", **f}, "sample": 10}
        r = await client.post("/v1/bulk", json=body, headers=auth("boss"))
        assert r.status_code == 200, r.text
        return sorted(r.json()["sample"])

    assert await matched() == ["t1", "t2"]
    assert await matched(terminal=False) == ["t1", "t2"]
    assert await matched(terminal=True) == ["t0"]
    assert await matched(terminal=None) == ["t0", "t1", "t2"]
    bad = base | {"filter": {"terminal": "maybe"}}
    assert (await client.post("/v1/bulk", json=bad, headers=auth("boss"))).status_code == 422
    real = base | {"filter": {"type": "agent_task", "terminal": True}, "dry_run": False}
    done = (await client.post("/v1/bulk", json=real, headers=auth("boss"))).json()
    assert (done["matched"], done["applied"]) == (1, 1), done
    assert len(await matched(terminal=None)) == 4  # t0's fork too
