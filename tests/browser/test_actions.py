"""Dashboard actions in a real Chromium against a real ``statewright serve``: start a workflow
from its type's input schema, fire an event from its payload schema, cancel.

The agent (no operator role) starts a ``desk_order``: a missing required field is caught by
the form, a quantity the input schema refuses comes back as the API's 422 with the schema's
errors listed next to the form, a good one opens the new workflow. There it sees a button
for ``note`` (no roles) only: neither ``ship`` nor Cancel (operators), and the API refuses its
``ship`` with 403 all the same. The operator fires ``ship`` from the payload form (an
invalid payload shown, then a good one) and cancels another order with a reason; each is a
row of the history under the caller's name. A viewer (read-only) gets no start panel and no
actions, and the API refuses its start and its ``note`` with 403.
"""

from __future__ import annotations

import re

import httpx
from playwright.sync_api import BrowserContext, expect

from tests.browser.conftest import AGENT, APPROVER, BROWSER_GROUP, ROOT, VIEWER, Server
from tests.browser.test_dashboard import _start, _workflow, dashboard, history_row

pytestmark = BROWSER_GROUP

SCREENSHOT = ROOT / "artifacts" / "dashboard-actions.png"


def test_start_fire_and_cancel_with_the_callers_roles(
    ops_server: Server, profile: BrowserContext
) -> None:
    server = ops_server
    with httpx.Client(base_url=server.url, timeout=10.0) as api:
        with dashboard(profile, server, AGENT) as w:
            page = w.page
            page.click("#start-panel summary")
            page.select_option("#start-type", "desk_order")
            page.fill("#start-id", "desk-1")
            page.fill("#start-f-customer", "<b>ada</b>")
            page.click("#start-send")
            expect(page.locator("#start-errors")).to_contain_text("quantity is required")
            page.fill("#start-f-quantity", "0")
            page.click("#start-send")
            errors = page.locator("#start-errors")
            expect(errors).to_contain_text("input_not_accepted")
            expect(errors.locator("li")).not_to_have_count(0)
            expect(errors).to_contain_text("quantity")
            assert api.get("/v1/workflows/desk-1", headers=AGENT.headers).status_code == 404
            page.fill("#start-f-quantity", "2")
            page.click("#start-send")
            expect(page).to_have_url(re.compile(r"#/workflows/desk-1$"))
            expect(page.locator("#banner")).to_contain_text("Started desk-1")
            expect(page.locator("#wf-state")).to_have_text("open")
            history_row(page, "$start", "agent-7")
            # The agent may fire note (no roles), not ship nor cancel (operators).
            expect(page.locator("#fire-note")).to_be_visible()
            expect(page.locator("#fire-ship")).to_have_count(0)
            expect(page.locator("#cancel")).to_have_count(0)
            page.click("#fire-note")
            page.fill("#event-json", '{"text": "<i>call first</i>"}')
            page.click("#event-send")
            expect(page.locator("#banner")).to_contain_text("Fired note")
            row = history_row(page, "note", "agent-7")
            expect(row).to_contain_text("<i>call first</i>")  # as text, never as HTML
            expect(page.locator("#history i")).to_have_count(0)
            w.errors[:] = [e for e in w.errors if "status of 422" not in e]
        refused = api.post(
            "/v1/workflows/desk-1/events",
            json={"event": "ship", "payload": {"carrier": "ups", "tracking": "1Z9"}},
            headers=AGENT.headers,
        )
        assert refused.status_code == 403, refused.text
        refused = api.post(
            "/v1/workflows/desk-1/cancel", json={"reason": "me"}, headers=AGENT.headers
        )
        assert refused.status_code == 403, refused.text
        assert _workflow(api, "desk-1")["state"] == "open"

        _start(api, "desk-2", "desk_order", {"customer": "bo", "quantity": 1})
        with dashboard(profile, server, APPROVER) as w:
            page = w.page
            page.goto(f"{server.url}/ui/#/workflows/desk-1")
            expect(page.locator("#wf-state")).to_have_text("open")
            page.click("#fire-ship")
            page.select_option("#event-f-carrier", label="dhl")
            page.fill("#event-f-tracking", "x")
            page.click("#event-send")
            expect(page.locator("#event-errors")).to_contain_text("invalid_payload")
            SCREENSHOT.parent.mkdir(exist_ok=True)
            page.screenshot(path=str(SCREENSHOT), full_page=False)
            assert _workflow(api, "desk-1")["state"] == "open"
            page.fill("#event-f-tracking", "JD0001")
            page.click("#event-send")
            expect(page.locator("#wf-state")).to_have_text("shipped")
            expect(page.locator("#banner")).to_contain_text("Fired ship")
            expect(history_row(page, "ship", "maria")).to_contain_text("JD0001")
            expect(page.locator("#workflow-actions")).to_have_count(0)  # finished

            page.goto(f"{server.url}/ui/#/workflows/desk-2")
            expect(page.locator("#wf-id")).to_have_text("desk-2")
            page.fill("#cancel-reason", "customer called")
            page.click("#cancel")
            expect(page.locator("#wf-state")).to_have_text("cancelled")
            expect(history_row(page, "cancel", "maria")).to_contain_text("customer called")
            w.errors[:] = [e for e in w.errors if "status of 422" not in e]
        assert _workflow(api, "desk-2")["state"] == "cancelled"

        _start(api, "desk-3", "desk_order", {"customer": "cy", "quantity": 3})
        with dashboard(profile, server, VIEWER) as w:
            page = w.page
            expect(page.locator("#whoami")).to_contain_text("read-only")
            expect(page.locator("#state-counts")).not_to_be_empty()
            expect(page.locator("#start-panel")).to_have_count(0)
            page.goto(f"{server.url}/ui/#/workflows/desk-3")
            expect(page.locator("#wf-state")).to_have_text("open")
            expect(page.locator("#facts")).to_contain_text("You may firenothing")
            expect(page.locator("#workflow-actions")).to_have_count(0)
        refused = api.post(
            "/v1/workflows",
            json={"type": "desk_order", "input": {"customer": "vic", "quantity": 1}},
            headers=VIEWER.headers,
        )
        assert refused.status_code == 403, refused.text
        refused = api.post(
            "/v1/workflows/desk-3/events", json={"event": "note"}, headers=VIEWER.headers
        )
        assert refused.status_code == 403, refused.text
        assert _workflow(api, "desk-3")["version"] == 1
