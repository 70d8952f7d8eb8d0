"""Records of alert delivery's tables (``alert_states`` and ``alert_outbox``), shared by the
stores and :mod:`statewright.observability.delivery` (the stores' part that keeps them:
:mod:`statewright.store.outbox`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

AlertStatus = Literal["firing", "resolved"]


@dataclass(frozen=True)
class AlertChange:
    """An alert that starts firing or is resolved, with the notification to send."""

    fingerprint: str
    status: AlertStatus
    rule: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    starts_at: float
    """When it started firing (a resolution names the firing it ends)."""
    alert: Mapping[str, Any]
    """The alert as notifications carry it (Alertmanager's webhook shape)."""
    idempotency_key: str


@dataclass(frozen=True)
class AlertStateRecord:
    """An alert firing now (a row of ``alert_states``)."""

    fingerprint: str
    rule: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    starts_at: float


@dataclass(frozen=True)
class OutboxRecord:
    """One notification for one receiver (a row of ``alert_outbox``)."""

    id: int
    receiver: str
    fingerprint: str
    status: str
    """An alert's ``firing`` or ``resolved``; a subscription's ``transition`` or ``message``."""
    idempotency_key: str
    alert: Mapping[str, Any]
    created_at: float
    attempts: int
    """Failed sends so far."""
    next_at: float | None
    """Due at (while claimed: the claim's end); None once delivered or dead."""
    claim: str | None
    delivered_at: float | None
    dead_at: float | None
    last_error: str | None
    kind: str = "alert"
    """``alert``, or ``transition`` (a subscription's: ``alert`` holds its body and
    ``receiver`` its URL)."""
    subscription: str | None = None
    order_key: str | None = None
    """A transition notification's workflow: sent after the earlier ones of its subscription
    and workflow are delivered or dead."""


def enqueue_params(
    ch: AlertChange, receiver: str, at: float, dumps: Callable[[Any], str]
) -> dict[str, Any]:
    """The parameters of ``alert_enqueue`` for one change and one receiver."""
    return {
        "receiver": receiver,
        "fingerprint": ch.fingerprint,
        "status": ch.status,
        "key": ch.idempotency_key,
        "alert": dumps(dict(ch.alert)),
        "at": at,
    }


def state_write(ch: AlertChange, dumps: Callable[[Any], str]) -> tuple[str, dict[str, Any]]:
    """The query (``alert_fire`` or ``alert_resolve``) and parameters recording one change."""
    key = {"fingerprint": ch.fingerprint, "starts_at": ch.starts_at}
    if ch.status == "resolved":
        return "alert_resolve", key
    labels, notes = dumps(dict(ch.labels)), dumps(dict(ch.annotations))
    return "alert_fire", {**key, "rule": ch.rule, "labels": labels, "annotations": notes}


def finish_query(delivered: bool, retry_at: float | None) -> str:
    """The query recording one send: delivered, failed (due again), or dead-lettered."""
    return "alert_delivered" if delivered else "alert_dead" if retry_at is None else "alert_retry"


__all__ = [
    "AlertChange",
    "AlertStateRecord",
    "AlertStatus",
    "OutboxRecord",
    "enqueue_params",
    "finish_query",
    "state_write",
]
