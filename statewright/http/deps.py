"""Request dependencies: the caller (from its bearer token) and its view of the engine."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query, Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from statewright.access import LOCAL, Access, Principal, TokenRegistry
from statewright.engine.core import Engine
from statewright.errors import InvalidInput
from statewright.http.inputs import not_null

bearer = HTTPBearer(auto_error=False, description="An API token from the tokens file.")


async def engine_of(request: Request) -> Engine:
    engine: Engine = request.app.state.engine
    return engine


def _authenticate(request: Request, token: str | None) -> Principal:
    tokens: TokenRegistry | None = request.app.state.tokens
    if tokens is None:
        found = LOCAL  # open mode: no tokens configured (serve only binds locally then)
    else:
        found = tokens.authenticate(token)
    # The error handler words a refusal for this caller (its ids, not the store's).
    request.state.principal = found
    return found


async def principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Principal:
    # Every dependency here is ``async def``: FastAPI runs a plain ``def`` dependency in its
    # thread pool, and three thread hops per request cost more than the whole read.
    return _authenticate(request, credentials.credentials if credentials else None)


async def stream_principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    access_token: Annotated[
        str | None,
        Query(
            max_length=1000,
            description="The API token, for EventSource (which cannot send headers); "
            "the Authorization header wins.",
            json_schema_extra=not_null,
        ),
    ] = None,
) -> Principal:
    # Only the stream takes a token in the URL (URLs end up in logs): EventSource cannot
    # send an Authorization header.
    return _authenticate(request, credentials.credentials if credentials else access_token)


async def access(request: Request, caller: Annotated[Principal, Depends(principal)]) -> Access:
    return Access(request.app.state.engine, caller)


async def stream_access(
    request: Request, caller: Annotated[Principal, Depends(stream_principal)]
) -> Access:
    return Access(request.app.state.engine, caller)


def _query_names(dependant: Dependant) -> set[str]:
    names = {p.alias for p in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names


async def known_query(request: Request) -> None:
    """Refuse query parameters the operation does not take: a typo (``?stat=paused``) is a
    422, not a silently ignored filter."""
    route = request.scope.get("route")
    if not isinstance(route, APIRoute):
        return
    unknown = sorted(set(request.query_params) - _query_names(route.dependant))
    if unknown and route.openapi_extra:
        # Parameters the operation reads itself (documented in its ``openapi_extra``).
        extra = route.openapi_extra.get("parameters", ())
        unknown = [u for u in unknown if not any(p.get("name") == u for p in extra)]
    if unknown:
        raise InvalidInput(
            f"unknown query parameter(s): {', '.join(repr(u[:100]) for u in unknown[:5])}",
            unknown=[u[:100] for u in unknown[:20]],
        )


AccessDep = Annotated[Access, Depends(access)]
StreamAccessDep = Annotated[Access, Depends(stream_access)]
EngineDep = Annotated[Engine, Depends(engine_of)]
KnownQuery = Depends(known_query)
"""Add to a router's ``dependencies``."""
