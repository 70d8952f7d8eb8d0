"""``/docs`` (Swagger UI) and ``/redoc`` in a real Chromium against a real ``statewright
serve``, with every request to anything but the service aborted: both render every operation
of the OpenAPI document from the vendored files alone, send nothing outside the service and
log no error, but for the one thing their Content-Security-Policy refuses on purpose (Redoc's
vendor logo from cdn.redoc.ly)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import httpx
from playwright.sync_api import BrowserContext, ConsoleMessage, Page, Route, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from tests.browser.conftest import BROWSER_GROUP, Server
from tests.browser.test_dashboard import TIMEOUT

pytestmark = BROWSER_GROUP


@dataclass
class Offline:
    """A page whose requests outside the service are aborted (and recorded)."""

    page: Page
    foreign: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    """What the page's Content-Security-Policy refused (before any request was made)."""

    def console_error(self, text: str) -> None:
        (self.refused if "Content Security Policy" in text else self.errors).append(text)


@contextmanager
def offline_page(profile: BrowserContext, server: Server) -> Iterator[Offline]:
    page = profile.new_page()
    page.set_default_timeout(TIMEOUT * 1000)
    watched = Offline(page)

    def only_the_service(route: Route) -> None:
        url = route.request.url
        if url.startswith(f"{server.url}/") or url.startswith(("data:", "blob:")):
            route.continue_()
        else:
            watched.foreign.append(url)
            route.abort()

    profile.route("**/*", only_the_service)  # on the profile: its pages' workers too

    def console(msg: ConsoleMessage) -> None:
        if msg.type == "error":
            watched.console_error(msg.text)

    page.on("console", console)
    page.on("pageerror", lambda exc: watched.errors.append(f"uncaught: {exc}"))
    try:
        yield watched
        assert not watched.foreign, f"requests outside the service: {watched.foreign}"
        assert not watched.errors, f"errors in the page: {watched.errors}"
    finally:
        page.close()
        profile.unroute("**/*", only_the_service)


def operations(server: Server) -> list[str]:
    """The summaries of the document's operations."""
    document = httpx.get(f"{server.url}/openapi.json", timeout=10.0).json()
    return [
        op["summary"]
        for item in document["paths"].values()
        for method, op in item.items()
        if method in ("get", "post", "put", "patch", "delete")
    ]


MISSING = """([selector, wanted]) => {
  const norm = (text) => text.replace(/\\s+/g, " ").trim().toLowerCase();
  const texts = Array.from(document.querySelectorAll(selector), (el) => norm(el.textContent));
  return wanted.filter((w) => !texts.some((text) => text.includes(norm(w))));
}"""
"""The texts that no element matching the selector contains."""


def expect_each_attached(page: Page, selector: str, texts: list[str]) -> None:
    """For each text, an element matching ``selector`` that contains it (as ``has_text``
    matches: a substring, case and runs of whitespace aside) is attached: waited for in the
    page, all at once, instead of one ``expect`` round trip per text."""
    try:
        page.wait_for_function(
            f"args => ({MISSING})(args).length === 0", arg=[selector, texts], polling=100
        )
    except PlaywrightTimeoutError:
        pass  # the assertion below names the missing ones
    missing = page.evaluate(MISSING, [selector, texts])
    assert not missing, f"no {selector} with these texts: {missing}"


def test_swagger_ui_and_redoc_render_every_operation_offline(
    open_server: Server, profile: BrowserContext
) -> None:
    summaries = operations(open_server)
    assert len(summaries) > 10
    with offline_page(profile, open_server) as w:
        w.page.goto(f"{open_server.url}/docs")
        expect(w.page.locator(".swagger-ui .info .title")).to_contain_text("statewright")
        expect(w.page.locator(".opblock")).to_have_count(len(summaries))
        expect_each_attached(w.page, ".opblock-summary-description", summaries)
        assert not w.refused, w.refused
    with offline_page(profile, open_server) as w:
        w.page.goto(f"{open_server.url}/redoc")
        expect(w.page.locator("h1").first).to_contain_text("statewright")
        expect_each_attached(w.page, "h2", summaries)
        expect(w.page.get_by_alt_text("redocly logo")).to_have_count(0)  # hidden, refused
        assert all("https://cdn.redoc.ly/" in r for r in w.refused), w.refused
