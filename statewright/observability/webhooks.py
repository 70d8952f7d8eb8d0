"""Transition webhooks (issue 26): the requests of a subscription's notifications, which the
alerts' deliverer (:class:`~statewright.observability.delivery.AlertDelivery`) claims, sends,
retries and dead-letters with the alerts' own (one outbox, one deliverer).

A notification's body is the JSON :func:`statewright.engine.subscriptions.body` made when it
was enqueued, sent as is to the subscription's URL with its ``Idempotency-Key``, the
subscription's extra headers, and, when it has a secret, ``X-Statewright-Signature:
sha256=<hex HMAC-SHA256 of the body under the secret>`` so the receiver can tell the request
is ours. The subscription is read when the notification is sent: one deleted since has its
notifications dead-lettered; one paused only stops enqueueing (those queued still go).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from typing import Any

from statewright.store.alert_outbox import OutboxRecord
from statewright.store.subscriptions import Subscription

SIGNATURE_HEADER = "X-Statewright-Signature"
RESERVED = frozenset({"idempotency-key", "content-type", "content-length", "host"})
"""Headers a subscription's own may not replace."""


def signature(secret: str, content: bytes) -> str:
    """The signature header's value of a body."""
    return "sha256=" + hmac.new(secret.encode(), content, hashlib.sha256).hexdigest()


def transition_request(
    row: OutboxRecord, sub: Subscription, base: Mapping[str, str]
) -> tuple[bytes, dict[str, str]]:
    """``(content, headers)`` of one transition notification's request."""
    content = json.dumps(dict(row.alert), separators=(",", ":"), ensure_ascii=False).encode()
    headers = {k: v for k, v in sub.headers.items() if k.lower() not in RESERVED}
    headers.update(base)
    headers["Content-Type"] = "application/json"
    if sub.secret:
        headers[SIGNATURE_HEADER] = signature(sub.secret, content)
    return content, headers


def counts() -> dict[str, dict[str, int]]:
    """Fresh per-kind counters of a deliverer (delivered, failed, dead)."""
    return {kind: {"delivered": 0, "failed": 0, "dead": 0} for kind in ("alert", "transition")}


def count(counters: dict[str, dict[str, int]], row: OutboxRecord, outcome: str) -> None:
    kind = row.kind if row.kind in counters else "alert"
    counters[kind][outcome] += 1


def describe(row: OutboxRecord) -> dict[str, Any]:
    """A notification's log fields."""
    return {"kind": row.kind, "subscription": row.subscription, "workflow_id": row.order_key}


__all__ = ["SIGNATURE_HEADER", "count", "counts", "describe", "signature", "transition_request"]
