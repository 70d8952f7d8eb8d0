"""Every error leaves the API as JSON ``{"error": {"code", "message", ...}}`` with a status
derived from its stable code; nothing else (no HTML, no bare 500 page)."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match, Mount

from statewright.access import Principal, public_error
from statewright.errors import OutcomeUnknown, StatewrightError

log = logging.getLogger("statewright.http")

STATUS = {
    "unauthorized": 401,
    "forbidden": 403,
    "workflow_not_found": 404,
    "unknown_workflow_type": 404,
    "unknown_state": 404,
    "unknown_search_attribute": 404,
    "version_not_found": 404,
    "illegal_transition": 409,
    "version_conflict": 409,
    "workflow_exists": 409,
    "workflow_finished": 409,
    "idempotency_key_reused": 409,
    # A worker's write lost its lease: internal to workers, but never a 500 if one surfaces.
    "lease_lost": 409,
    "workflow_busy": 409,
    "step_done": 409,
    # A fork that would call a step again: resolve it first, or say the rerun is meant.
    "step_unresolved": 409,
    "steps_would_rerun": 409,
    # A start of the id of a workflow pruned since: its steps must not run again.
    "workflow_pruned": 409,
    # An input to a state with no handler to take it (it would never be read).
    "input_not_expected": 409,
    "invalid_payload": 422,
    "action_failed": 422,
    "invalid_input": 422,
    "input_not_accepted": 422,  # a start's input fails its type's input_schema
    "value_too_deep": 422,
    "value_too_large": 413,
    "payload_too_large": 413,
    "headers_too_large": 431,
    "definition_invalid": 422,
    "step_not_found": 404,
    "timer_not_found": 404,
    "schedule_not_found": 404,
    "subscription_not_found": 404,
    # A cron line (or zone) the schema's pattern admits but whose values do not hold: the
    # schedule cannot be declared as asked (schema-valid requests are never answered 422).
    "invalid_schedule": 409,
    "invalid_subscription": 409,
    # Likewise a cursor of the documented characters that no page returned (forged, cut).
    "invalid_cursor": 409,
    "store_error": 503,
    "outcome_unknown": 503,
}
IDEMPOTENCY_KEY = "Idempotency-Key"
"""The request header that makes a POST safe to retry."""
REPLAYED = "Idempotent-Replayed"
"""The response header (``true``) of a retry answered from the first application."""
_HTTP_CODES = {
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    413: "payload_too_large",
    415: "unsupported_media_type",
    431: "headers_too_large",
}


def error_response(
    code: str,
    message: str,
    status: int,
    *,
    headers: Mapping[str, str] | None = None,
    details: Mapping[str, object] | None = None,
) -> JSONResponse:
    extra = dict(headers or {})
    if status == 401:
        extra.setdefault("WWW-Authenticate", "Bearer")
    body = {"error": {"code": code, "message": message, **(details or {})}}
    return JSONResponse(body, status_code=status, headers=extra or None)


def install(app: FastAPI) -> None:
    @app.exception_handler(StatewrightError)
    async def statewright_error(request: Request, exc: StatewrightError) -> JSONResponse:
        status = STATUS.get(exc.code, 500)
        if status >= 500:
            log.error("request failed", extra={"code": exc.code, "error": exc.message})
        # A caller bound to a tenant reads its workflows' ids as it knows them: the engine's
        # messages name the store's (``acme:order-1``).
        caller = getattr(request.state, "principal", None)
        body = exc.to_dict() if not isinstance(caller, Principal) else public_error(exc, caller)
        code, message = body.pop("code"), body.pop("message")
        if isinstance(exc, OutcomeUnknown):
            message = _outcome_unknown(request, exc)
        return error_response(code, message, status, details=_jsonable(body))

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
        return error_response(
            "invalid_input", f"invalid request: {summary}", 422, details={"errors": problems}
        )

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400:
            if isinstance(exc.__cause__, RecursionError):
                # Nested past what json.loads recurses through (about 1,000 levels): the
                # engine would refuse it for its depth anyway (value_too_deep, 64 levels).
                return error_response(
                    "value_too_deep", "the request body nests too deep to be parsed", 422
                )
            # FastAPI's "There was an error parsing the body" (e.g. not UTF-8): the same
            # invalid_input as a body that is not JSON at all.
            return error_response("invalid_input", f"invalid request: {exc.detail}", 422)
        code = _HTTP_CODES.get(exc.status_code, f"http_{exc.status_code}")
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            # Starlette names only the methods of the first route on the path; RFC 9110 wants
            # every method the resource supports.
            methods = _methods_on_path(request)
            if methods:
                headers["Allow"] = ", ".join(methods)
        return error_response(code, str(exc.detail), exc.status_code, headers=headers)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error", extra={"path": request.url.path})
        # The server closes the connection after an unhandled error (what the request left
        # unread, or half done, is not worth trusting): say so, so the client does not reuse it.
        return error_response(
            "internal_error",
            "internal error; see the server log",
            500,
            headers={"Connection": "close"},
        )


def _outcome_unknown(request: Request, exc: OutcomeUnknown) -> str:
    """The error's own message (whitespace folded: the default is a docstring) and what the
    client must do now, since the request may have been applied."""
    what = " ".join(exc.message.split()).rstrip(".")
    if request.headers.get(IDEMPOTENCY_KEY):
        return (
            f"{what}. Retry the request with the same {IDEMPOTENCY_KEY} header: if it was "
            f"applied, the retry changes nothing and answers with {REPLAYED}: true."
        )
    return (
        f"{what}. Read the workflow before retrying; send an {IDEMPOTENCY_KEY} header to make "
        "retries safe."
    )


_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def _methods_on_path(request: Request) -> list[str]:
    """Every method some route serves on the request's path (the router is asked for each)."""
    found: set[str] = set()
    for method in _METHODS:
        scope = {
            "type": "http",
            "method": method,
            "path": request.scope["path"],
            "root_path": request.scope.get("root_path", ""),
            "headers": [],
            "query_string": b"",
        }
        # A Mount matches every method: what its app serves is its own business.
        routes = (r for r in request.app.router.routes if not isinstance(r, Mount))
        if any(r.matches(scope)[0] is Match.FULL for r in routes):
            found.add(method)
    if "GET" in found:
        found.add("HEAD")
    return sorted(found)


def _jsonable(details: dict[str, object]) -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in details.items():
        out[k] = v if isinstance(v, str | int | float | bool | list | dict | None) else str(v)
    return out
