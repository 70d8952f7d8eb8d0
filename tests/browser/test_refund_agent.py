"""The refund agent example (``examples/refund_agent.py``, issue 27) in a real
``statewright serve --worker`` and a real Chromium: the PydanticAI agent in the service's
worker reads the order, checks the policy and asks for approval (the only event it is
offered); a person approves on the dashboard; the payout step runs once and the task is done.
"""

from __future__ import annotations

import httpx
from playwright.sync_api import BrowserContext, expect

from tests.browser.conftest import BROWSER_GROUP, Server
from tests.browser.test_dashboard import _start, _until, _workflow, dashboard, history_row

pytestmark = BROWSER_GROUP

REFUND = "refund-agent-dashboard"


def test_a_person_approves_the_agents_request_on_the_dashboard(
    open_server: Server, profile: BrowserContext
) -> None:
    server = open_server
    request = {"order_id": "order-1003", "reason": "arrived damaged"}
    with httpx.Client(base_url=server.url, timeout=10.0) as api:
        _start(api, REFUND, "refund_agent", request, who=None)
        _until(
            "the agent asked for approval",
            lambda: _workflow(api, REFUND, None)["state"] == "paused",
        )
        with dashboard(profile, server, None) as w:
            page = w.page
            page.goto(f"{server.url}/ui/#/workflows/{REFUND}")
            expect(page.locator("#wf-state")).to_have_text("paused")
            asked = page.locator('#history tr.history-row[data-event="request_approval"]')
            expect(asked).to_contain_text("running → paused")
            expect(page.locator("#wf-usage")).to_contain_text("4 model calls")
            page.fill("#decision-comment", "damaged in transit")
            page.click("#approve")
            expect(page.locator("#banner")).to_contain_text("Approved")
            expect(page.locator("#wf-state")).to_have_text("done")
            history_row(page, "approval_granted", "local")
            expect(page.locator('#history tr.history-row[data-event="complete"]')).to_have_count(1)
        steps = api.get(f"/v1/workflows/{REFUND}/steps").json()
        steps = steps.get("items", steps) if isinstance(steps, dict) else steps
        payout = [s for s in steps if s["step"] == "payout"]
        assert [(s["status"], s["attempts"]) for s in payout] == [("done", 1)]
        events = [t["event"] for t in api.get(f"/v1/workflows/{REFUND}/history").json()["items"]]
        assert events == ["$start", "start", "request_approval", "approval_granted", "complete"]
