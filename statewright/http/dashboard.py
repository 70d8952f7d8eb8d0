"""The operator dashboard: static HTML, CSS and plain JavaScript served at ``/ui/`` (``/``
redirects there) by the same app as the API.

The page is only a client of the REST API under ``/v1``: it sends the token the operator
entered (kept in the tab's ``sessionStorage``) as ``Authorization: Bearer``, so it can do
exactly what the API allows that token and nothing more. It shows no approve/deny buttons
to a caller whose roles may not fire the type's approval events, and the API refuses such a
request anyway; likewise the workflow list's bulk action panel (``static/bulk.js``, a client
of ``POST /v1/bulk``) is shown only to a caller the API offers operator actions. Everything
it needs ships in the package (the Mermaid renderer is vendored under ``static/vendor/``):
no CDN, no build step, works offline.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.responses import RedirectResponse
from starlette.responses import Response
from starlette.staticfiles import StaticFiles

from statewright.http.routes import add_routes

__all__ = ["STATIC_DIR", "UI_PATH", "install", "router"]

STATIC_DIR = Path(__file__).resolve().with_name("static")
UI_PATH = "/ui"

SECURITY_HEADERS = {
    # Scripts only from these files; Mermaid writes style attributes into its SVG.
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; connect-src 'self'; font-src 'self'; object-src 'none'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    # Revalidate (ETag) so an upgraded package is picked up at once.
    "Cache-Control": "no-cache",
}

router = APIRouter(include_in_schema=False)


@router.get("/")
async def root() -> RedirectResponse:
    return RedirectResponse(f"{UI_PATH}/", status_code=307)


class DashboardFiles(StaticFiles):
    """The static files, with the security headers above on every response."""

    def file_response(self, *args: Any, **kwargs: Any) -> Response:
        response = super().file_response(*args, **kwargs)
        response.headers.update(SECURITY_HEADERS)
        return response


def install(app: FastAPI) -> None:
    """Serve the dashboard from ``app``: ``/`` redirects to ``/ui/``."""
    add_routes(app, router)
    app.mount(UI_PATH, DashboardFiles(directory=STATIC_DIR, html=True), name="dashboard")
