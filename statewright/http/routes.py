"""Adding a module's routes to an app."""

from __future__ import annotations

from fastapi import APIRouter, FastAPI


def add_routes(app: FastAPI, router: APIRouter) -> None:
    """Add ``router``'s routes to ``app`` as they are.

    Not ``app.include_router``: FastAPI 0.16x builds, for each app, a copy of every included
    route (its fields, dependencies and validators) on the first request, about 170 ms of CPU
    per app here, paid by every ``serve`` start-up and every test's fresh app. A router's own
    prefix, tags and dependencies are in its routes already (``add_api_route`` puts them
    there); an include without arguments adds nothing to them, so the routes built once at
    import are the ones an include would build again. (Nothing here uses
    ``app.dependency_overrides``, which only reaches included routes.)
    """
    app.router.routes.extend(router.routes)
