"""``GET /metrics`` (Prometheus text exposition) and ``GET /v1/alerts`` (the alert rules, for
the caller's tenant).

``/metrics`` takes no token by default: scrapers call it, and its labels are only names the
machines declare (never ids or contexts). With ``create_app(metrics_auth=True)`` (``serve
--metrics-auth``) it wants a bearer token whose caller has the :data:`OPS` or ``admin`` role,
for services whose workflow counts are nobody else's business.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, FastAPI, Request, Response
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from pydantic import BaseModel, Field

from statewright.access import ADMIN, LOCAL, OPS, Access, Principal, TokenRegistry
from statewright.engine.core import Engine
from statewright.errors import Forbidden
from statewright.http.deps import AccessDep, bearer
from statewright.http.routes import add_routes
from statewright.http.schemas import ErrorOut
from statewright.observability.alerts import Alert, AlertThresholds
from statewright.observability.metrics import EngineMetrics, attach_metrics
from statewright.observability.outbox_metrics import outbox_metrics
from statewright.observability.tracing import TraceContextMiddleware, attach_tracing

router = APIRouter(tags=["observability"])
alerts_router = APIRouter(prefix="/v1", tags=["observability"])
_TEXT = CONTENT_TYPE_PLAIN_0_0_4
"""What ``generate_latest`` writes (the classic text format every Prometheus reads)."""
_JSON_ERROR = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}}


class AlertOut(BaseModel):
    rule: str = Field(
        description="running_too_long, retry_flapping, paused_abandoned, "
        "blocked_too_long, failure_ratio, invalid_transition_spike or workflow_parked."
    )
    severity: Literal["warning", "critical"]
    message: str
    type: str = Field(description="The workflow type (machine) concerned.")
    state: str | None = Field(description="The state concerned; null for the whole type.")
    count: int = Field(description="Workflows (or refused events) concerned.")
    sample_ids: list[str] = Field(description="Some of the workflows concerned.")
    value: float = Field(description="What was measured: oldest age (s), share, or count.")
    threshold: float


class AlertsOut(BaseModel):
    status: Literal["ok", "firing"]
    alerts: list[AlertOut]


def _alert_out(a: Alert, access: Access) -> AlertOut:
    return AlertOut(
        rule=a.rule,
        severity=a.severity,
        message=a.message,
        type=a.type,
        state=a.state,
        count=a.count,
        sample_ids=[access.public_id(i) for i in a.sample_ids],  # the ids the caller knows
        value=a.value,
        threshold=a.threshold,
    )


@router.get(
    "/metrics",
    summary="Prometheus metrics (text exposition format)",
    response_class=Response,
    responses={
        200: {
            "content": {"text/plain": {"schema": {"type": "string"}}},
            "description": "The metrics, in the Prometheus text format 0.0.4.",
        },
        401: {
            "content": _JSON_ERROR,
            "description": "No or unknown API token, when the service wants one for metrics "
            "(serve --metrics-auth).",
        },
        403: {
            "content": _JSON_ERROR,
            "description": "The caller has neither the ops nor the admin role, when the "
            "service wants a token for metrics (serve --metrics-auth).",
        },
    },
)
async def metrics(request: Request) -> Response:
    if request.app.state.metrics_auth:
        await _check_ops(request)
    collected: EngineMetrics = request.app.state.metrics
    await request.app.state.outbox_metrics.refresh()
    return Response(await collected.render(), media_type=_TEXT)


async def _check_ops(request: Request) -> None:
    # Read here, not as a route dependency: the document must not say /metrics always needs
    # a token, since by default it does not.
    credentials = await bearer(request)
    tokens: TokenRegistry | None = request.app.state.tokens
    caller: Principal = (
        LOCAL  # open mode: the local admin, as everywhere else
        if tokens is None
        else tokens.authenticate(credentials.credentials if credentials else None)
    )
    if not caller.roles & {OPS, ADMIN}:
        raise Forbidden(f"{caller.actor!r} may not read metrics (needs the ops or admin role)")


@alerts_router.get(
    "/alerts",
    summary="Alert rules evaluated from the store, for the caller's tenant",
    responses={
        401: {"model": ErrorOut, "description": "No or unknown API token."},
        503: {"model": ErrorOut, "description": "The store is unavailable."},
    },
)
async def alerts(access: AccessDep, request: Request) -> AlertsOut:
    thresholds: AlertThresholds = request.app.state.alert_thresholds
    found = await access.alerts(thresholds)
    alerts = [_alert_out(a, access) for a in found]
    return AlertsOut(status="firing" if found else "ok", alerts=alerts)


def install(app: FastAPI, engine: Engine, thresholds: AlertThresholds | None = None) -> None:
    """Attach the engine's metrics and transition tracing, and add both routes; a request's
    ``traceparent`` header is stored with the workflows it starts or moves."""
    app.state.metrics = attach_metrics(engine)
    app.state.outbox_metrics = outbox_metrics(engine)
    app.state.alert_thresholds = thresholds or AlertThresholds()
    attach_tracing(engine)
    app.add_middleware(TraceContextMiddleware)
    add_routes(app, router)
    add_routes(app, alerts_router)
