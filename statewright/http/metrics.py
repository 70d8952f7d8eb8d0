"""``GET /metrics`` (Prometheus text exposition, no token: scrapers call it) and
``GET /v1/alerts`` (the alert rules, for the caller's tenant)."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, FastAPI, Request, Response
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from pydantic import BaseModel, Field

from statewright.engine.core import Engine
from statewright.http.deps import AccessDep
from statewright.http.schemas import ErrorOut
from statewright.observability.alerts import Alert, AlertThresholds, evaluate_alerts
from statewright.observability.metrics import EngineMetrics, attach_metrics
from statewright.observability.tracing import attach_tracing

router = APIRouter(tags=["observability"])
alerts_router = APIRouter(prefix="/v1", tags=["observability"])
_TEXT = CONTENT_TYPE_PLAIN_0_0_4
"""What ``generate_latest`` writes (the classic text format every Prometheus reads)."""


class AlertOut(BaseModel):
    rule: str = Field(
        description="running_too_long, retry_flapping, paused_abandoned, "
        "blocked_too_long, failure_ratio or invalid_transition_spike."
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


def _alert_out(a: Alert) -> AlertOut:
    return AlertOut(
        rule=a.rule,
        severity=a.severity,
        message=a.message,
        type=a.type,
        state=a.state,
        count=a.count,
        sample_ids=list(a.sample_ids),
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
        }
    },
)
async def metrics(request: Request) -> Response:
    collected: EngineMetrics = request.app.state.metrics
    return Response(await collected.render(), media_type=_TEXT)


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
    found = await evaluate_alerts(access.engine, thresholds, tenant=access.principal.scope)
    return AlertsOut(status="firing" if found else "ok", alerts=[_alert_out(a) for a in found])


def install(app: FastAPI, engine: Engine, thresholds: AlertThresholds | None = None) -> None:
    """Attach the engine's metrics and transition tracing, and add both routes."""
    app.state.metrics = attach_metrics(engine)
    app.state.alert_thresholds = thresholds or AlertThresholds()
    attach_tracing(engine)
    app.include_router(router)
    app.include_router(alerts_router)
