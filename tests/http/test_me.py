"""``GET /v1/me``: the caller as the service sees it (actor, roles, tenant) and the bulk
actions it may take, the same rule ``POST /v1/bulk`` enforces: each caller that the answer
says may not take an action is refused it, and each that it says may is not refused."""

from __future__ import annotations

import httpx

from tests.http.conftest import TOKENS, auth


async def test_each_caller_learns_who_it_is_and_what_it_may_do_in_bulk(
    client: httpx.AsyncClient,
) -> None:
    expected = {
        "agent": [],
        "system": [],
        "viewer": [],
        "other": [],
        "boss": ["cancel", "resume", "retry", "fork"],
        "admin": ["cancel", "resume", "retry", "move", "fork"],
    }
    for who, (_, actor, roles, tenant) in TOKENS.items():
        r = await client.get("/v1/me", headers=auth(who))
        assert r.status_code == 200, r.text
        me = r.json()
        assert (me["actor"], me["roles"], me["tenant"]) == (actor, sorted(roles), tenant)
        assert me["all_tenants"] is (tenant == "*")
        assert me["read_only"] is (who == "viewer")
        assert sorted(me["bulk_actions"]) == sorted(expected[who]), who
        for action in ("cancel", "move"):
            body: dict[str, object] = {
                "action": action,
                "filter": {},
                "reason": "r",
                "dry_run": True,
            }
            if action == "move":
                body["to_state"] = "done"
            r = await client.post("/v1/bulk", json=body, headers=auth(who))
            refused = r.status_code == 403
            assert refused is (action not in me["bulk_actions"]), (who, action, r.text)


async def test_without_a_token_the_caller_is_refused(client: httpx.AsyncClient) -> None:
    r = await client.get("/v1/me")
    assert r.status_code == 401, r.text
