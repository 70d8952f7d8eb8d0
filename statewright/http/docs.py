"""``/docs`` (Swagger UI) and ``/redoc`` (Redoc), from files shipped in the package.

FastAPI's own pages load their scripts, styles, favicon and (Redoc) fonts from CDNs: on a
service without Internet access they are blank. These are the same pages with every asset
served by the app itself from ``static/vendor/`` (under the dashboard's ``/ui/`` mount), and
with Swagger UI's validator badge off (it would send the document to validator.swagger.io).
The app must be created with ``docs_url=None, redoc_url=None``.

A Content-Security-Policy keeps both pages on the service whatever the bundles try: Redoc 2
always shows its vendor's logo from cdn.redoc.ly (the browser refuses it, and Redoc hides the
broken image), and "Try it out" can only call this service.
"""

from __future__ import annotations

import base64
import hashlib
import re

from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse

from statewright.http.dashboard import UI_PATH
from statewright.http.routes import add_routes

__all__ = ["ASSETS", "install"]

VENDOR = f"{UI_PATH}/vendor"
SWAGGER_JS = f"{VENDOR}/swagger-ui/swagger-ui-bundle.js"
SWAGGER_CSS = f"{VENDOR}/swagger-ui/swagger-ui.css"
REDOC_JS = f"{VENDOR}/redoc/redoc.standalone.js"
FAVICON = f"{UI_PATH}/favicon.svg"
ASSETS = (SWAGGER_JS, SWAGGER_CSS, REDOC_JS, FAVICON)
"""Every URL the two pages load (all served by the dashboard's static files)."""
POLICY = (
    "default-src 'self'; script-src 'self'{scripts}; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; worker-src 'self' blob:; "
    "object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
"""Styles inline: both UIs write style attributes. Redoc runs its search in a blob: worker."""

router = APIRouter(include_in_schema=False)


def _openapi_url(request: Request) -> str:
    root: str = request.scope.get("root_path", "")
    url: str = request.app.openapi_url
    return root + url


@router.get("/docs")
async def swagger_ui(request: Request) -> HTMLResponse:
    page = get_swagger_ui_html(
        openapi_url=_openapi_url(request),
        title=f"{request.app.title} - Swagger UI",
        swagger_js_url=SWAGGER_JS,
        swagger_css_url=SWAGGER_CSS,
        swagger_favicon_url=FAVICON,
        oauth2_redirect_url=None,  # bearer tokens only: no OAuth2 flow to come back from
        swagger_ui_parameters={"validatorUrl": None},
    )
    return _secured(page)


@router.get("/redoc")
async def redoc(request: Request) -> HTMLResponse:
    page = get_redoc_html(
        openapi_url=_openapi_url(request),
        title=f"{request.app.title} - ReDoc",
        redoc_js_url=REDOC_JS,
        redoc_favicon_url=FAVICON,
        with_google_fonts=False,
    )
    return _secured(page)


def _secured(page: HTMLResponse) -> HTMLResponse:
    """The page with its security headers; its inline scripts (Swagger UI's start-up code)
    allowed by their hashes, no other inline script."""
    html = bytes(page.body).decode()
    hashes = "".join(
        f" 'sha256-{base64.b64encode(hashlib.sha256(code.encode()).digest()).decode()}'"
        for code in re.findall(r"<script>(.*?)</script>", html, re.DOTALL)
    )
    page.headers.update(
        {
            "Content-Security-Policy": POLICY.format(scripts=hashes),
            "X-Content-Type-Options": "nosniff",
            "X-Frame-Options": "DENY",
            "Referrer-Policy": "no-referrer",
        }
    )
    return page


def install(app: FastAPI) -> None:
    """Serve ``/docs`` and ``/redoc`` (the dashboard's static files serve their assets)."""
    add_routes(app, router)
