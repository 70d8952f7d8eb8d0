"""A parent and its children in the dashboard, in a real Chromium against a real ``statewright
serve --worker`` (issue 25): the parent's page counts its children and lists them with their
states and outcomes, each a link; a child's page links back to its parent."""

from __future__ import annotations

import httpx
from playwright.sync_api import BrowserContext, expect

from tests.browser.conftest import BROWSER_GROUP, Server
from tests.browser.test_dashboard import _start, _until, _workflow, dashboard

pytestmark = BROWSER_GROUP

PARENT = "ship-1"


def test_a_parent_lists_its_children_and_a_child_links_back(
    open_server: Server, profile: BrowserContext
) -> None:
    server = open_server
    with httpx.Client(base_url=server.url, timeout=10.0) as api:
        _start(api, PARENT, "shipment", {"parcels": ["a", "b", "c"]}, who=None)
        _until(
            "the worker started the children",
            lambda: (_workflow(api, PARENT, None)["children"] or {}).get("total") == 3,
        )
        r = api.post(f"/v1/workflows/{PARENT}.0/events", json={"event": "ship"})
        assert r.status_code == 200, r.text
        r = api.post(f"/v1/workflows/{PARENT}.1/events", json={"event": "lose"})
        assert r.status_code == 200, r.text
        _until(
            "the parent heard of two ends",
            lambda: _workflow(api, PARENT, None)["children"]["ended"] == 2,
        )
        with dashboard(profile, server, None) as w:
            page = w.page
            page.locator(f'tr.wf-row[data-id="{PARENT}"] a.wf-link').click()
            expect(page.locator("#wf-id")).to_have_text(PARENT)
            expect(page.locator("#children-counts")).to_have_text(
                "2 of 3 children done (1 failed)"
            )
            rows = page.locator("#children tr.child-row")
            expect(rows).to_have_count(3)
            expect(rows.nth(0)).to_contain_text("succeeded")
            expect(rows.nth(1)).to_contain_text("failed")
            expect(rows.nth(2)).to_have_attribute("data-state", "shipping")
            expect(page.locator("#wf-parent")).to_have_count(0)  # nothing started the parent

            rows.nth(2).locator("a.child-link").click()
            expect(page).to_have_url(f"{server.url}/ui/#/workflows/{PARENT}.2")
            expect(page.locator("#wf-id")).to_have_text(f"{PARENT}.2")
            expect(page.locator("#wf-state")).to_have_text("shipping")
            expect(page.locator("#facts")).to_contain_text("(child key 2)")
            expect(page.locator("#children-panel")).to_be_hidden()  # a child without children

            page.locator("#wf-parent").click()
            expect(page.locator("#wf-id")).to_have_text(PARENT)
            expect(page.locator("#children tr.child-row")).to_have_count(3)
