"""Every error leaves the API as JSON ``{"error": {"code", "message", ...}}`` with a status
derived from its stable code; nothing else (no HTML, no bare 500 page)."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from statewright.errors import StatewrightError

log = logging.getLogger("statewright.http")

STATUS = {
    "unauthorized": 401,
    "forbidden": 403,
    "workflow_not_found": 404,
    "unknown_workflow_type": 404,
    "illegal_transition": 409,
    "version_conflict": 409,
    "workflow_exists": 409,
    "invalid_payload": 422,
    "invalid_input": 422,
    "definition_invalid": 422,
    "store_error": 503,
}
_HTTP_CODES = {
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    413: "payload_too_large",
    415: "unsupported_media_type",
}


def error_response(code: str, message: str, status: int, **details: object) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    body = {"error": {"code": code, "message": message, **details}}
    return JSONResponse(body, status_code=status, headers=headers)


def install(app: FastAPI) -> None:
    @app.exception_handler(StatewrightError)
    async def statewright_error(request: Request, exc: StatewrightError) -> JSONResponse:
        status = STATUS.get(exc.code, 500)
        if status >= 500:
            log.error("request failed", extra={"code": exc.code, "error": exc.message})
        return error_response(exc.code, exc.message, status, **_jsonable(exc.details))

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = [
            {
                "where": ".".join(str(p) for p in err.get("loc", ())),
                "message": str(err.get("msg", "")),
            }
            for err in exc.errors()
        ]
        summary = "; ".join(f"{p['where']}: {p['message']}" for p in problems[:5])
        return error_response("invalid_input", f"invalid request: {summary}", 422, errors=problems)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(exc.status_code, f"http_{exc.status_code}")
        return error_response(code, str(exc.detail), exc.status_code)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error", extra={"path": request.url.path})
        return error_response("internal_error", "internal error; see the server log", 500)


def _jsonable(details: dict[str, object]) -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in details.items():
        out[k] = v if isinstance(v, str | int | float | bool | list | dict | None) else str(v)
    return out
