"""The workflow list's search-attribute field, in a real Chromium against a real
``statewright serve`` (issue 28, item 4): ``customer=ada`` lists the payments of that
customer only (the server matches them), the bulk panel's filter takes the search, and an
undeclared name shows the server's error."""

from __future__ import annotations

import httpx
from playwright.sync_api import BrowserContext, expect

from tests.browser.conftest import BROWSER_GROUP, Server
from tests.browser.test_dashboard import _start, dashboard

pytestmark = BROWSER_GROUP


def test_the_list_filters_by_a_search_attribute(
    open_server: Server, profile: BrowserContext
) -> None:
    server = open_server
    with httpx.Client(base_url=server.url, timeout=10.0) as api:
        _start(api, "search-ada-1", "payment", {"customer": "ada-s"}, who=None)
        _start(api, "search-ada-2", "payment", {"customer": "ada-s"}, who=None)
        _start(api, "search-bob", "payment", {"customer": "bob-s"}, who=None)
        with dashboard(profile, server, None) as w:
            page = w.page
            rows = page.locator("#workflows tbody tr.wf-row")
            expect(page.locator('#workflows tr[data-id="search-bob"]')).to_have_count(1)
            field = page.locator("#search-attributes")
            field.fill("customer=ada-s")
            field.press("Enter")
            expect(page).to_have_url(f"{server.url}/ui/#/?where=customer%3Dada-s")
            expect(rows).to_have_count(2)
            expect(page.locator('#workflows tr[data-id="search-ada-1"]')).to_have_count(1)
            expect(page.locator('#workflows tr[data-id="search-bob"]')).to_have_count(0)
            assert any("where=customer%3Dada-s" in u for u in w.urls)
            # the filter is kept in the URL: a reload lists the same
            page.reload()
            expect(page.locator("#search-attributes")).to_have_value("customer=ada-s")
            expect(rows).to_have_count(2)
            # the bulk panel takes the search: a dry run counts that customer's payments only
            page.locator("#bulk-panel summary").click()
            expect(page.locator("#bulk-where")).to_have_value("customer=ada-s")
            page.select_option("#bulk-type", "payment")
            page.fill("#bulk-reason", "the customer asked")
            page.click("#bulk-dry-run")
            expect(page.locator("#bulk-summary")).to_contain_text("2 workflow(s) match")
            links = page.locator("#bulk-sample a.wf-link")
            assert sorted(links.all_text_contents()) == ["search-ada-1", "search-ada-2"]
            # a name no type declares: the server's error, in the banner
            field = page.locator("#search-attributes")
            field.fill("colour=red")
            field.press("Enter")
            expect(page.locator("#banner")).to_contain_text("unknown search attribute 'colour'")
            # cleared, the list is whole again (and no request is refused any more)
            field.fill("")
            field.press("Enter")
            expect(page.locator('#workflows tr[data-id="search-bob"]')).to_have_count(1)
            expect(page.locator("#banner")).to_be_hidden()
            # (the refused requests, logged by the browser: the errors this test made)
            w.errors[:] = [e for e in w.errors if "status of 404" not in e]
