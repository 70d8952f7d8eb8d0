"""Heavy readers over HTTP, on both stores: over 10,000 stuck workflows are counted exactly by
/health/workflows and read a page at a time by /v1/stuck; listings, a workflow's history and
its steps page with cursors; malformed cursors and deep offsets are refused (422 for what
the document's schema refuses; 409 invalid_cursor for base64url that no page returned)."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import httpx
import pytest

from statewright import Engine, ManualClock
from statewright.types import StepFinish
from tests.http.conftest import TOKENS, auth
from tests.store import bulk

STUCK = 10_200
"""Past every cap a count or a listing could hide behind: each state's count is over 1,000
(the cap stuck counts once had; the smallest, ``retrying``, a tenth of them: 1,020), the whole
listing over 10,000 (MAX_OFFSET: only a cursor reaches past it) in 11 pages; a tenant's
2,551 (a quarter) in 4. (It was 20,000, then 12,000 with half of them the tenant's: the same,
in more time, the test's cost being one workflow view per row read.)"""
FRESH = 1_000
PARKED = 500
MINE = TOKENS["agent"][3]
"""The agent token's tenant."""


def _cursor(value: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


async def _all_pages(
    client: httpx.AsyncClient, path: str, params: dict[str, Any], who: str = "admin"
) -> list[list[dict[str, Any]]]:
    pages: list[list[dict[str, Any]]] = []
    for _ in range(1000):
        r = await client.get(path, params=params, headers=auth(who))
        assert r.status_code == 200, r.text
        body = r.json()
        pages.append(body["items"])
        if body["next_cursor"] is None:
            return pages
        assert len(body["items"]) == params.get("limit", 100)
        params = {**params, "cursor": body["next_cursor"]}
    raise AssertionError("paging never ended")


async def test_over_ten_thousand_stuck_workflows_are_counted_and_paged(
    client: httpx.AsyncClient, engine: Engine, clock: ManualClock
) -> None:
    now = clock.now()
    states = [("running", 3600.0), ("paused", 86400.0), ("blocked", 86400.0)]
    rows = []
    for i in range(STUCK):
        state, threshold = states[i % 3] if i % 10 else ("retrying", 3600.0)
        rows.append(
            bulk.workflow(
                f"stuck-{i:05d}",
                "agent_task",
                state,
                now - threshold - 1 - i % 7,  # ties: seven times for 10,200 workflows
                tenant=MINE if i % 4 == 1 else "globex",
                parked="fatal_error" if i < PARKED else None,
            )
        )
    for i in range(FRESH):  # in their state for less than its threshold: not stuck
        rows.append(bulk.workflow(f"fresh-{i:04d}", "agent_task", "running", now - 10))
    # parked just now: stuck from the moment it parks
    rows.append(bulk.workflow("parked-fresh", "agent_task", "running", now, parked="x"))
    rows.append(bulk.workflow("ended", "agent_task", "done", now - 10**6, terminal=True))
    await bulk.insert(engine.store, "workflows", bulk.WORKFLOW_COLUMNS, rows)

    r = await client.get("/health/workflows")
    assert r.status_code == 503, r.text
    health = r.json()
    assert health["status"] == "stuck" and health["stuck"] == STUCK + 1  # the true count
    by_state = {(g["type"], g["state"]): g for g in health["by_state"]}
    assert {k: g["count"] for k, g in by_state.items()} == {
        ("agent_task", "running"): 3061,
        ("agent_task", "paused"): 3060,
        ("agent_task", "blocked"): 3060,
        ("agent_task", "retrying"): 1020,
    }
    assert by_state[("agent_task", "running")]["oldest_age"] == 3600 + 1 + 6
    assert health["parked"] == PARKED + 1
    assert [(p["state"], p["reason"], p["count"]) for p in health["parked_by_state"]] == [
        ("blocked", "fatal_error", 150),
        ("paused", "fatal_error", 150),
        ("retrying", "fatal_error", 50),
        ("running", "fatal_error", 150),
        ("running", "x", 1),
    ]

    pages = await _all_pages(client, "/v1/stuck", {"limit": 1000})
    assert len(pages) == STUCK // 1000 + 1
    items = [s for page in pages for s in page]
    keys = [
        (s["workflow"]["type"], s["workflow"]["state"], s["workflow"]["state_entered_at"])
        for s in items
    ]
    assert len({s["workflow"]["id"] for s in items}) == STUCK + 1
    assert keys == sorted(keys)  # by type, state, time entered (then id)
    assert all(s["workflow"]["stuck"] and s["age"] > s["threshold"] for s in items[:-1])
    [fresh] = [s for s in items if s["age"] <= s["threshold"]]  # the last of running
    assert (fresh["workflow"]["id"], fresh["parked"], fresh["action"]) == (
        "parked-fresh",
        "x",
        "resume",
    )
    # A tenant's caller pages through its own only.
    mine = [
        s for page in await _all_pages(client, "/v1/stuck", {"limit": 700}, "agent") for s in page
    ]
    assert len(mine) == STUCK // 4 + 1  # parked-fresh is the default tenant's


async def test_listings_page_with_a_cursor(
    client: httpx.AsyncClient, engine: Engine, clock: ManualClock
) -> None:
    now = clock.now()
    rows = [
        bulk.workflow(
            f"w-{i:04d}"[::-1],
            "agent_task",
            ["planned", "running", "done"][i % 3],
            now - i % 50,  # ties
            terminal=i % 3 == 2,
        )
        for i in range(2500)
    ]
    await bulk.insert(engine.store, "workflows", bulk.WORKFLOW_COLUMNS, rows)

    def order(keep: Any) -> list[str]:
        chosen = [r for r in rows if keep(r)]
        return [r[0] for r in sorted(chosen, key=lambda r: (r[10], r[0]))]

    for params, keep in (
        ({}, lambda r: True),
        ({"terminal": "false"}, lambda r: not r[7]),
        ({"state": "running"}, lambda r: r[3] == "running"),
        ({"type": "agent_task", "state": "planned"}, lambda r: r[3] == "planned"),
        ({"older_than": 25}, lambda r: r[10] < now - 25),
    ):
        for limit in (1000, 333):
            pages = await _all_pages(client, "/v1/workflows", {**params, "limit": limit})
            assert [w["id"] for page in pages for w in page] == order(keep), (params, limit)

    r = await client.get("/v1/workflows", params={"limit": 10}, headers=auth("admin"))
    assert r.json()["next_cursor"] is not None and r.json()["offset"] == 0
    cursor = r.json()["next_cursor"]
    r = await client.get(
        "/v1/workflows", params={"limit": 10, "offset": 10}, headers=auth("admin")
    )
    assert [w["id"] for w in r.json()["items"]] == order(lambda r: True)[10:20]
    r = await client.get(
        "/v1/workflows", params={"limit": 10, "offset": 5, "cursor": cursor}, headers=auth("admin")
    )
    assert [w["id"] for w in r.json()["items"]] == order(lambda r: True)[15:25]  # after it
    for bad in (
        {"offset": 10_001},
        {"cursor": ""},
        {"cursor": "not a cursor"},
        {"cursor": "bm90IGpzb24"},  # base64 of "not json"
        {"cursor": _cursor([1.5])},
        {"cursor": _cursor(["x", "y"])},
        {"cursor": _cursor([True, "y"])},
        {"cursor": _cursor([1e400, "y"])},
        {"cursor": _cursor([1.5, "nul\x00"])},
        {"cursor": _cursor({"at": 1})},
        {"cursor": "A" * 2001},
        {"cursor": _cursor(["agent_task", "running", 1.0, "x"])},  # a stuck cursor
    ):
        r = await client.get("/v1/workflows", params=bad, headers=auth("admin"))
        # The schema admits any 1-2000 base64url characters: those that name no page are
        # refused as such, not as a request the schema refuses.
        admitted = re.fullmatch(r"[A-Za-z0-9_-]{1,2000}", str(bad.get("cursor", ""))) is not None
        status, code = (409, "invalid_cursor") if admitted else (422, "invalid_input")
        assert r.status_code == status, (bad, r.text)
        assert r.json()["error"]["code"] == code, bad
    for path in ("/v1/stuck", "/v1/workflows/w-1/steps"):
        r = await client.get(path, params={"cursor": _cursor([1])}, headers=auth("admin"))
        assert r.status_code == 409 and r.json()["error"]["code"] == "invalid_cursor", path


@pytest.mark.parametrize("limit", [1000, 100])
async def test_a_long_history_and_many_steps_are_read_in_pages(
    client: httpx.AsyncClient, engine: Engine, limit: int
) -> None:
    row = (await engine.start("agent_task", workflow_id="long-one", actor="setup")).row
    await bulk.insert(
        engine.store,
        "transitions",
        bulk.TRANSITION_COLUMNS,
        (
            ("long-one", v, "planned", "planned", "noted", "{}", "setup", row.created_at + v)
            for v in range(2, 2501)
        ),
    )
    at = row.created_at
    await bulk.insert(  # as step_begin writes them (250 commits, 250 fsyncs on SQLite)
        engine.store,
        "steps",
        bulk.STEP_COLUMNS,
        (
            (f"long-one:s{i:03d}", "long-one", f"s{i}", "executing", 1, at + i // 4)
            for i in range(250)
        ),
    )
    await engine.store.step_finish(StepFinish("long-one:s000", 1, "done", {"n": 1}, at=at))

    versions: list[int] = []
    after = 0
    for _ in range(100):
        r = await client.get(
            "/v1/workflows/long-one/history",
            params={"after": after, "limit": limit},
            headers=auth("admin"),
        )
        assert r.status_code == 200, r.text
        versions += [t["version"] for t in r.json()["items"]]
        if r.json()["next_cursor"] is None:
            break
        after = int(r.json()["next_cursor"])
        assert after == versions[-1]
    assert versions == list(range(1, 2501))
    r = await client.get("/v1/workflows/long-one/history", headers=auth("admin"))
    assert len(r.json()["items"]) == 100 and r.json()["next_cursor"] == "100"  # the default

    pages = await _all_pages(client, "/v1/workflows/long-one/steps", {"limit": min(limit, 100)})
    keys = [s["key"] for page in pages for s in page]
    assert keys == [f"long-one:s{i:03d}" for i in range(250)]
    assert pages[0][0]["status"] == "done" and pages[0][0]["result"] == {"n": 1}

    for query in ("after=-1", "limit=0", "limit=1001", f"after={2**31}"):
        r = await client.get(f"/v1/workflows/long-one/history?{query}", headers=auth("admin"))
        assert r.status_code == 422, query
    r = await client.get("/v1/workflows/long-one/steps?limit=1001", headers=auth("admin"))
    assert r.status_code == 422
