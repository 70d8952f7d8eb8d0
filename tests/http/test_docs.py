"""``/docs`` and ``/redoc`` load nothing from outside the app: every script, style, icon and
the OpenAPI document they reference is served by the app itself (from the vendored files),
with the right content type. That they render offline in a real browser is
tests/browser/test_docs.py."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import httpx
import pytest

from statewright.http.dashboard import STATIC_DIR
from statewright.http.docs import ASSETS

CONTENT_TYPES = {
    ".js": "text/javascript",
    ".css": "text/css",
    ".svg": "image/svg+xml",
    ".json": "application/json",
}


class References(HTMLParser):
    """Every URL a page makes the browser load: src, href, Redoc's spec-url."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("src", "href", "spec-url") and value:
                self.urls.append(value)


def references(html: str) -> list[str]:
    parser = References()
    parser.feed(html)
    # Swagger UI gets the document's URL in its inline script.
    parser.urls += re.findall(r"\burl: '([^']*)'", html)
    return parser.urls


@pytest.mark.parametrize("engine", ["sqlite"], indirect=True)
@pytest.mark.parametrize("page", ["/docs", "/redoc"])
async def test_the_docs_pages_load_only_what_the_app_serves(
    client: httpx.AsyncClient, page: str
) -> None:
    r = await client.get(page)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "text/html; charset=utf-8"
    assert r.headers["x-content-type-options"] == "nosniff"
    policy = r.headers["content-security-policy"]  # the browser stays on the service too
    for directive in ("default-src 'self'", "connect-src 'self'", "img-src 'self' data:"):
        assert directive in policy, policy
    html = r.text
    assert not re.search(r"https?://|//cdn|fonts\.googleapis", html), html
    urls = references(html)
    assert "/openapi.json" in urls
    assert len(urls) >= 3  # the document, a script, the icon (and Swagger UI's stylesheet)
    for url in urls:
        assert url.startswith("/") and not url.startswith("//"), url
        asset = await client.get(url)
        assert asset.status_code == 200, url
        wanted = CONTENT_TYPES[Path(url).suffix]
        assert asset.headers["content-type"].split(";")[0] == wanted, url
        assert asset.content, url


def test_the_vendored_assets_ship_with_their_licenses() -> None:
    for url in ASSETS:
        assert url.startswith("/ui/"), url
        assert (STATIC_DIR / url.removeprefix("/ui/")).is_file(), url
    for package in ("swagger-ui", "redoc"):
        folder = STATIC_DIR / "vendor" / package
        assert (folder / "LICENSE").is_file()
        assert "npm pack" in (folder / "README.md").read_text()
