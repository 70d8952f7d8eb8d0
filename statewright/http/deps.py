"""Request dependencies: the caller (from its bearer token) and its view of the engine."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from statewright.access import LOCAL, Access, Principal, TokenRegistry
from statewright.engine.core import Engine

bearer = HTTPBearer(auto_error=False, description="An API token from the tokens file.")


def engine_of(request: Request) -> Engine:
    engine: Engine = request.app.state.engine
    return engine


def principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Principal:
    tokens: TokenRegistry | None = request.app.state.tokens
    if tokens is None:
        return LOCAL  # open mode: no tokens configured (serve only binds locally then)
    token = credentials.credentials if credentials else None
    if token is None:
        # EventSource cannot send headers: the stream also takes ?access_token=.
        token = request.query_params.get("access_token")
    return tokens.authenticate(token)


def access(request: Request, caller: Annotated[Principal, Depends(principal)]) -> Access:
    return Access(engine_of(request), caller)


AccessDep = Annotated[Access, Depends(access)]
EngineDep = Annotated[Engine, Depends(engine_of)]
