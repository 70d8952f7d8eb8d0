"""Bulk actions in the dashboard (issue 28, item 3), in a real Chromium against a real
``statewright serve --worker``.

The operator (maria) filters the list to the open desk orders, dry-runs a bulk cancel (the
count and a sample linked to their pages, nothing changed), confirms Apply: each of them is
cancelled once, a row of its history under her name with her reason, under the operation id
of the dry run; Apply again (a double click, a retry) cancels nothing twice; a refused request
is shown, not swallowed. An agent and a viewer see no bulk panel and the API refuses them; an
admin gets "move" too, and a bulk fork applied twice forks each workflow once (no fork of a
fork).
"""

from __future__ import annotations

from typing import Any

import httpx
from playwright.sync_api import BrowserContext, Dialog, expect

from tests.browser.conftest import ADMIN, AGENT, APPROVER, BROWSER_GROUP, VIEWER, Server
from tests.browser.test_dashboard import _start, _workflow, dashboard, history_row

pytestmark = BROWSER_GROUP

ORDERS = [f"bulk-order-{i}" for i in range(5)]
SHIPPED = "bulk-order-shipped"
TICKET = "bulk-ticket-1"
ORDER_INPUT = {"customer": "ada", "quantity": 1}
REASON = "incident 42: the warehouse burned down"


def _history(api: httpx.Client, wid: str) -> list[dict[str, Any]]:
    page = api.get(f"/v1/workflows/{wid}/history", headers=APPROVER.headers).json()
    items: list[dict[str, Any]] = page["items"]
    return items


def _setup(api: httpx.Client) -> None:
    for wid in ORDERS:
        _start(api, wid, "desk_order", ORDER_INPUT)
    _start(api, SHIPPED, "desk_order", ORDER_INPUT)
    shipped = api.post(
        f"/v1/workflows/{SHIPPED}/events",
        json={"event": "ship", "payload": {"carrier": "ups", "tracking": "1Z999"}},
        headers=APPROVER.headers,
    )
    assert shipped.status_code == 200, shipped.text
    _start(api, TICKET, "support_ticket", {"title": "open, but not an order"})


def test_operator_dry_runs_then_cancels_the_filtered_workflows_once(
    ops_server: Server, profile: BrowserContext
) -> None:
    server = ops_server
    with httpx.Client(base_url=server.url, timeout=10.0) as api:
        with dashboard(profile, server, APPROVER) as w:
            page = w.page
            # Nothing is listed yet: the panel is there, from what GET /v1/me says of her.
            page.goto(f"{server.url}/ui/#/?type=desk_order&state=open")
            panel = page.locator("#bulk-panel")
            expect(panel).to_be_visible()
            assert any(u.endswith("/v1/me") for u in w.urls), w.urls
            _setup(api)
            page.reload()
            expect(page.locator(f'tr.wf-row[data-id="{ORDERS[0]}"]')).to_be_visible()
            expect(panel).to_be_visible()
            panel.locator("summary").click()
            # The list's filter is the panel's; move is for admins only.
            expect(page.locator("#bulk-type")).to_have_value("desk_order")
            expect(page.locator("#bulk-state")).to_have_value("open")
            expect(page.locator('#bulk-action-kind option[value="move"]')).to_have_count(0)
            expect(page.locator("#bulk-apply")).to_be_disabled()

            page.click("#bulk-dry-run")  # no reason: nothing is sent
            expect(page.locator("#bulk-status")).to_contain_text("Give a reason")

            # A refusal of the API (a state name over 200 characters: 422) is shown.
            page.fill("#bulk-reason", REASON)
            page.fill("#bulk-state", "x" * 300)
            page.click("#bulk-dry-run")
            expect(page.locator("#bulk-status")).to_contain_text("invalid")
            expect(page.locator("#banner")).to_be_visible()
            w.errors[:] = [e for e in w.errors if "status of 422" not in e]
            expect(page.locator("#bulk-apply")).to_be_disabled()

            page.fill("#bulk-state", "open")
            page.select_option("#bulk-action-kind", "cancel")
            page.click("#bulk-dry-run")
            expect(page.locator("#bulk-summary")).to_contain_text("5 workflow(s) match")
            expect(page.locator("#bulk-summary")).to_have_attribute("data-dry-run", "1")
            links = page.locator("#bulk-sample a.wf-link")
            expect(links).to_have_count(len(ORDERS))
            assert sorted(links.all_text_contents()) == ORDERS
            assert links.first.get_attribute("href", timeout=1000) is not None
            operation = page.locator("#bulk-operation").text_content()
            assert operation and operation.startswith("operation ui-")
            for wid in ORDERS:
                assert _workflow(api, wid)["state"] == "open"  # a dry run changes nothing

            # Editing a field forgets the dry run; the same fields again need a new one.
            page.fill("#bulk-reason", REASON + " ")
            expect(page.locator("#bulk-apply")).to_be_disabled()
            page.fill("#bulk-reason", REASON)
            page.click("#bulk-dry-run")
            expect(page.locator("#bulk-summary")).to_contain_text("5 workflow(s) match")
            operation = page.locator("#bulk-operation").text_content()

            # Apply asks first: dismissed, nothing is done.
            page.once("dialog", lambda d: d.dismiss())
            page.click("#bulk-apply")
            expect(page.locator("#bulk-summary")).to_have_attribute("data-dry-run", "1")
            assert _workflow(api, ORDERS[0])["state"] == "open"

            confirmed: list[str] = []

            def accept(dialog: Dialog) -> None:
                confirmed.append(dialog.message)
                dialog.accept()

            page.on("dialog", accept)
            page.click("#bulk-apply")
            expect(page.locator("#bulk-summary")).to_have_attribute("data-dry-run", "0")
            expect(page.locator("#bulk-applied")).to_have_attribute("data-count", "5")
            expect(page.locator("#bulk-operation")).to_have_text(operation or "")
            expect(page.locator("#banner")).to_contain_text("5 applied")
            assert "5 workflow(s)" in confirmed[0] and REASON in confirmed[0]

            # Apply again (a double click, a retry): the same operation, nothing twice.
            page.click("#bulk-apply")
            expect(page.locator("#bulk-operation")).to_have_text(operation or "")
            expect(page.locator("#bulk-applied")).to_have_attribute("data-count", "0")
            assert len(confirmed) == 2

            page.goto(f"{server.url}/ui/#/workflows/{ORDERS[0]}")
            expect(page.locator("#wf-state")).to_have_text("cancelled")
            expect(history_row(page, "cancel", "maria")).to_contain_text(REASON)

        for wid in ORDERS:
            assert _workflow(api, wid)["state"] == "cancelled"
            cancels = [t for t in _history(api, wid) if t["event"] == "cancel"]
            assert len(cancels) == 1, cancels
            assert (cancels[0]["actor"], cancels[0]["payload"]) == ("maria", {"reason": REASON})
        assert _workflow(api, SHIPPED)["state"] == "shipped"
        assert _workflow(api, TICKET)["state"] == "open"  # another type: untouched


def test_agents_and_viewers_get_no_bulk_panel_and_admins_may_move(
    ops_server: Server, profile: BrowserContext
) -> None:
    server = ops_server
    body = {"action": "cancel", "filter": {"type": "desk_order"}, "reason": "let me"}
    with httpx.Client(base_url=server.url, timeout=10.0) as api:
        _setup(api)
        for who in (AGENT, VIEWER):
            with dashboard(profile, server, who) as w:
                page = w.page
                page.goto(f"{server.url}/ui/#/?type=desk_order")
                expect(page.locator(f'tr.wf-row[data-id="{ORDERS[0]}"]')).to_be_visible()
                expect(page.locator("#bulk-panel")).to_have_count(0)
            for dry_run in (True, False):
                refused = api.post(
                    "/v1/bulk", json=body | {"dry_run": dry_run}, headers=who.headers
                )
                assert refused.status_code == 403, refused.text
                assert refused.json()["error"]["code"] == "forbidden"
        for wid in ORDERS:
            assert _workflow(api, wid)["state"] == "open"

        with dashboard(profile, server, ADMIN) as w:
            page = w.page
            page.goto(f"{server.url}/ui/#/?type=desk_order")
            page.locator("#bulk-panel summary").click()
            expect(page.locator('#bulk-action-kind option[value="move"]')).to_have_count(1)
            expect(page.locator("#bulk-to-state")).to_be_hidden()
            page.select_option("#bulk-action-kind", "move")
            expect(page.locator("#bulk-to-state")).to_be_visible()
            page.fill("#bulk-reason", "closing the desk")
            page.fill("#bulk-state", "open")
            page.fill("#bulk-to-state", "shipped")
            page.click("#bulk-dry-run")
            expect(page.locator("#bulk-summary")).to_contain_text("5 workflow(s) match")
            # Finished workflows only: the shipped order, which the live ones leave out.
            page.fill("#bulk-state", "")
            page.select_option("#bulk-include", "finished")
            page.click("#bulk-dry-run")
            expect(page.locator("#bulk-summary")).to_contain_text("1 workflow(s) match")
            expect(page.locator("#bulk-sample a.wf-link")).to_have_text([SHIPPED])
            page.select_option("#bulk-include", "")
            page.fill("#bulk-state", "open")

            # A fork, applied twice: the second is the same operation and forks no fork
            # (Apply sends the dry run's cutoff: the forks entered their state after it).
            page.select_option("#bulk-action-kind", "fork")
            expect(page.locator("#bulk-to-state")).to_be_hidden()
            page.click("#bulk-dry-run")
            expect(page.locator("#bulk-summary")).to_contain_text("5 workflow(s) match")
            page.on("dialog", lambda d: d.accept())
            page.click("#bulk-apply")
            expect(page.locator("#bulk-applied")).to_have_attribute("data-count", "5")
            page.click("#bulk-apply")
            expect(page.locator("#bulk-replayed")).to_have_attribute("data-count", "5")
            expect(page.locator("#bulk-applied")).to_have_attribute("data-count", "0")
        listed = api.get(
            "/v1/workflows?type=desk_order&state=open&limit=100", headers=ADMIN.headers
        ).json()["items"]
        assert sorted(w["id"] for w in listed) == sorted(
            ORDERS + [f"{wid}.fork-1" for wid in ORDERS]
        )
