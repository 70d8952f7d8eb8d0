"""A workflow's model usage on its dashboard page, in a real Chromium against a real
``statewright serve --worker`` (issue 27): the tokens, calls and cost of its agents' model
calls, by state and by model; a workflow without agents shows none."""

from __future__ import annotations

import httpx
from playwright.sync_api import BrowserContext, expect

from tests.agents_app import CARD
from tests.browser.conftest import BROWSER_GROUP, Server
from tests.browser.test_dashboard import _start, _until, _workflow, dashboard

pytestmark = BROWSER_GROUP


def test_the_workflow_page_shows_the_usage(open_server: Server, profile: BrowserContext) -> None:
    server = open_server
    with httpx.Client(base_url=server.url, timeout=10.0) as api:
        _start(api, "usage-1", "triage", {"card": CARD}, who=None)
        _until("the worker ran the agent", lambda: _workflow(api, "usage-1", None)["terminal"])
        with dashboard(profile, server, None) as w:
            page = w.page
            page.goto(f"{server.url}/ui/#/workflows/usage-1")
            expect(page.locator("#wf-id")).to_have_text("usage-1")
            usage = page.locator("#wf-usage")
            expect(usage).to_contain_text("200 tokens (160 in, 40 out), 2 model calls, $0.0040")
            expect(usage).to_have_attribute("data-calls", "2")
            expect(page.locator("#wf-usage-states")).to_have_text(
                "By state: reading: 200 tokens, 2 calls"
            )
            expect(page.locator("#wf-usage-models")).to_have_text("By model: big: 150; small: 50")
            expect(page.locator("#facts")).to_contain_text("Model usage")

            _start(api, "usage-plain", "parcel", {}, who=None)
            page.goto(f"{server.url}/ui/#/workflows/usage-plain")
            expect(page.locator("#wf-id")).to_have_text("usage-plain")
            expect(page.locator("#wf-usage")).to_have_count(0)
