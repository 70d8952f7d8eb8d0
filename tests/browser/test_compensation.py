"""A compensating transition in the dashboard's history, in a real Chromium against a real
``statewright serve`` (issue 26, item 3): the steps it undid, newest first, are shown as such
rather than as raw payload. (The payload is what a worker logs when it ran the undos:
``{"compensated": [...]}``; here it is sent with an event, which the page renders the same.)"""

from __future__ import annotations

import httpx
from playwright.sync_api import BrowserContext, expect

from tests.browser.conftest import BROWSER_GROUP, Server
from tests.browser.test_dashboard import _start, dashboard

pytestmark = BROWSER_GROUP

WID = "pay-compensated"


def test_the_history_shows_what_a_compensating_transition_undid(
    open_server: Server, profile: BrowserContext
) -> None:
    server = open_server
    with httpx.Client(base_url=server.url, timeout=10.0) as api:
        _start(api, WID, "payment", {"amount_cents": 4200}, who=None)
        body = {"event": "charged", "payload": {"compensated": ["charge", "reserve"], "n": 1}}
        resp = api.post(f"/v1/workflows/{WID}/events", json=body)
        assert resp.status_code == 200, resp.text
        with dashboard(profile, server, None) as w:
            page = w.page
            page.goto(f"{server.url}/ui/#/workflows/{WID}")
            row = page.locator('#history tr.history-row[data-event="charged"]')
            expect(row.locator(".compensated")).to_have_text("compensated: charge, reserve")
            # What else the payload holds is shown as before, without the list.
            expect(row.locator(".payload")).to_have_text('{"n":1}')
