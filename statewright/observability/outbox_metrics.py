"""``/metrics`` of the outbox alerts and subscriptions share (issue 26).

- ``statewright_outbox_sends_total{kind, outcome}``: sends this process's deliverers made
  (``kind`` ``alert`` or ``transition``; ``outcome`` ``delivered``, ``failed``, ``dead``: a
  dead letter also counts as failed);
- ``statewright_outbox_pending{kind}`` and ``statewright_outbox_oldest_pending_seconds{kind}``:
  notifications still due or claimed, and the age of the oldest, read from the store at
  scrape time (every process's);
- ``statewright_subscription_lag{subscription}``: log entries after a subscription's cursor
  (not yet enqueued, for a webhook; not yet acknowledged, for a consumer), and
  ``statewright_subscription_paused{subscription}``.

Label values: the two kinds and three outcomes are fixed; subscription names are those the
store holds, declared by operators (never from a request's data).
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from statewright.clock import Clock
from statewright.store.protocol import FullStore

KINDS = ("alert", "transition")
OUTCOMES = ("delivered", "failed", "dead")


class OutboxMetrics(Collector):
    """The outbox's collectors of one store, on one registry (see the module docstring)."""

    def __init__(self, store: FullStore, clock: Clock, registry: CollectorRegistry) -> None:
        self.store, self.clock = store, clock
        self.sends = Counter(
            "statewright_outbox_sends",
            "Notification sends by this process, by kind (alert, transition) and outcome "
            "(delivered, failed, dead: a dead letter also counts as failed).",
            ["kind", "outcome"],
            registry=registry,
        )
        self._pending: dict[str, tuple[int, float | None]] = {}
        self._lag: list[tuple[str, int, bool]] = []
        self._now = 0.0
        registry.register(self)

    def count(self, kind: str, outcome: str) -> None:
        self.sends.labels(kind if kind in KINDS else "alert", outcome).inc()

    async def refresh(self) -> None:
        """Read the pending notifications and the subscriptions' lag (left empty when the
        store cannot answer: ``statewright_store_up`` tells)."""
        self._pending, self._lag = {}, []
        with contextlib.suppress(Exception):
            self._now = self.clock.now()
            self._pending = await self.store.outbox_pending()
            subs = await self.store.list_subscriptions()
            if subs:
                head = await self.store.log_head()
                self._lag = [
                    (r.name, max(0, head - r.cursor), r.subscription.paused) for r in subs
                ]

    def collect(self) -> Iterable[Metric]:
        pending = GaugeMetricFamily(
            "statewright_outbox_pending",
            "Notifications still due or claimed (not yet delivered nor dead), by kind.",
            labels=["kind"],
        )
        oldest = GaugeMetricFamily(
            "statewright_outbox_oldest_pending_seconds",
            "Age of the oldest notification still due or claimed, by kind.",
            labels=["kind"],
        )
        for kind in KINDS:
            n, first = self._pending.get(kind, (0, None))
            pending.add_metric([kind], n)
            oldest.add_metric([kind], 0.0 if first is None else max(0.0, self._now - first))
        lag = GaugeMetricFamily(
            "statewright_subscription_lag",
            "Log entries after a subscription's cursor (not yet handed on).",
            labels=["subscription"],
        )
        paused = GaugeMetricFamily(
            "statewright_subscription_paused", "1 while a subscription is paused.",
            labels=["subscription"],
        )  # fmt: skip
        for name, behind, is_paused in self._lag:
            lag.add_metric([name], behind)
            paused.add_metric([name], 1.0 if is_paused else 0.0)
        return [pending, oldest, lag, paused]

    def describe(self) -> Iterable[Metric]:
        return []


_attached: weakref.WeakKeyDictionary[Any, OutboxMetrics] = weakref.WeakKeyDictionary()


def outbox_metrics(engine: Any) -> OutboxMetrics:
    """The engine's outbox metrics, on its :func:`~statewright.observability.metrics.
    attach_metrics` registry (made on the first call)."""
    from statewright.observability.metrics import attach_metrics

    found = _attached.get(engine)
    if found is None:
        registry = attach_metrics(engine).registry
        found = _attached[engine] = OutboxMetrics(engine.store, engine.clock, registry)
    return found


__all__ = ["OutboxMetrics", "outbox_metrics"]
