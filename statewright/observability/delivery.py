"""Alert delivery: the alert rules, evaluated periodically, notify webhooks through a durable
outbox.

One evaluation (:meth:`AlertDelivery.evaluate`) compares the alerts firing now with the ones
the store records as firing (``alert_states``): an alert that appears is recorded and gets a
FIRING notification, one that went away is forgotten and gets a RESOLVED notification, both in
the transaction that records the change, one outbox row per receiver. So a restart neither
fires an alert again nor forgets to resolve it, and two evaluators (two ``serve`` processes)
record each change once: the insert or delete of the state row decides, and only the one that
made it writes notifications.

The deliverer (:meth:`AlertDelivery.deliver`) claims due outbox rows for a while (a lease: the
row's ``next_at`` moves to the lease's end, so a deliverer that dies leaves it to another one
then; PostgreSQL claims with ``FOR UPDATE SKIP LOCKED``, so several deliverers get disjoint
rows), POSTs each to its webhook, and marks it delivered, or due again after an exponential
backoff with jitter, or dead-lettered after ``max_attempts`` failures (an error log line says
so).

Delivery is at least once: a deliverer killed after the receiver took a request but before the
row was marked delivered leaves the row to be sent again. Every request of one notification
carries the same ``Idempotency-Key`` header (``<fingerprint>:<status>:<startsAt in ms>``), so
receivers dedupe by it (equivalently, by fingerprint + status + startsAt of the alert).

The body is Alertmanager's webhook payload (``version`` "4"), one alert per request, so
receivers written for Alertmanager take it as is.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import hashlib
import json
import logging
import random
import ssl
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from statewright._version import __version__
from statewright.engine import subscriptions as subs
from statewright.engine.core import Engine
from statewright.engine.retry import backoff
from statewright.errors import InvalidInput
from statewright.observability import webhooks as hooks
from statewright.observability.alerts import RULES, Alert, AlertThresholds, evaluate_alerts
from statewright.observability.outbox_metrics import outbox_metrics
from statewright.store.alert_outbox import AlertChange, AlertStateRecord, OutboxRecord
from statewright.store.subscriptions import Subscription

log = logging.getLogger("statewright.alerts")

NO_END = "0001-01-01T00:00:00Z"
"""Alertmanager's ``endsAt`` of an alert still firing."""
IDEMPOTENCY_HEADER = "Idempotency-Key"
RETRY_STATUSES = frozenset({408, 425, 429})
"""4xx answers worth another try (besides every 5xx); any other 4xx dead-letters at once."""


@dataclass(frozen=True)
class Backoff:
    """Seconds before the n-th retry: ``initial * factor**(n-1)``, at most ``maximum``, times
    a random factor in ``[1 - jitter, 1 + jitter]`` (so receivers that fail together are not
    retried together): :func:`statewright.engine.retry.backoff`, the workflows' backoff."""

    initial: float = 1.0
    factor: float = 2.0
    maximum: float = 300.0
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if self.initial <= 0 or self.factor < 1 or self.maximum < self.initial:
            raise InvalidInput("backoff: initial > 0, factor >= 1 and maximum >= initial")
        if not 0 <= self.jitter < 1:
            raise InvalidInput("backoff: jitter is a share below 1")

    def delay(self, failures: int, rng: random.Random | None = None) -> float:
        return backoff(
            failures,
            initial=self.initial,
            factor=self.factor,
            maximum=self.maximum,
            jitter=self.jitter,
            rng=rng,
            around=True,
        )


def _rfc3339(at: float) -> str:
    stamp = datetime.datetime.fromtimestamp(at, datetime.UTC)
    return stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def alert_labels(alert: Alert, tenant: str | None = None) -> dict[str, str]:
    """The labels that identify an alert: rule (``alertname``), severity, machine, state."""
    labels = {"alertname": alert.rule, "severity": alert.severity, "machine": alert.type}
    if alert.state is not None:
        labels["state"] = alert.state
    if tenant is not None:
        labels["tenant"] = tenant
    return labels


def fingerprint(labels: Mapping[str, str]) -> str:
    """A stable id of an alert: 16 hex digits of the sha256 of its sorted labels (as long as
    Alertmanager's fingerprints)."""
    text = json.dumps(sorted(labels.items()), separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def idempotency_key(fp: str, status: str, starts_at: float) -> str:
    """The same for every send of one notification, different for each notification."""
    return f"{fp}:{status}:{round(starts_at * 1000)}"


def _annotations(alert: Alert) -> dict[str, str]:
    notes = {
        "summary": alert.message,
        "count": str(alert.count),
        "value": f"{alert.value:g}",
        "threshold": f"{alert.threshold:g}",
    }
    if alert.sample_ids:
        notes["workflows"] = ", ".join(alert.sample_ids)
    return notes


def group_key(labels: Mapping[str, str]) -> str:
    """Alertmanager's ``groupKey`` form, each alert its own group."""
    inner = ", ".join(f"{k}={json.dumps(v)}" for k, v in sorted(labels.items()))
    return "{}:{" + inner + "}"


def webhook_payload(
    row: OutboxRecord, *, receiver: str = "statewright", external_url: str = ""
) -> dict[str, Any]:
    """Alertmanager's webhook body (version "4") for one outbox row."""
    alert = dict(row.alert)
    labels = dict(alert.get("labels", {}))
    return {
        "version": "4",
        "groupKey": group_key(labels),
        "truncatedAlerts": 0,
        "status": row.status,
        "receiver": receiver,
        "groupLabels": labels,
        "commonLabels": labels,
        "commonAnnotations": dict(alert.get("annotations", {})),
        "externalURL": external_url,
        "alerts": [alert],
    }


@dataclass
class DeliveryReport:
    """What one :meth:`AlertDelivery.deliver` round did."""

    delivered: list[OutboxRecord] = field(default_factory=list)
    retried: list[OutboxRecord] = field(default_factory=list)
    dead: list[OutboxRecord] = field(default_factory=list)
    lost_claims: int = 0
    """Rows whose claim had run out (and been taken) before their send was recorded."""

    @property
    def claimed(self) -> int:
        return len(self.delivered) + len(self.retried) + len(self.dead) + self.lost_claims


class AlertDelivery:
    """Evaluate the alert rules and deliver their notifications to webhooks.

    Args:
        engine: whose store holds the workflows, the alert states and the outbox.
        webhooks: receiver URLs; each notification is sent to every one of them.
        thresholds / tenant / rules: as :func:`~statewright.observability.alerts.evaluate_alerts`.
        interval: seconds between two evaluations in :meth:`run`.
        max_attempts: failed sends after which a notification is dead-lettered.
        backoff: delays between retries.
        timeout: seconds one request may take in all (connecting included).
        claim_seconds: how long a claim on notifications lasts (default ``2 * timeout + 5``):
            a deliverer that dies leaves them to another one then. Longer than ``timeout``.
        receiver: the payload's ``receiver`` name.
        external_url: the payload's ``externalURL`` (this service's address), and the base of
            each alert's ``generatorURL``.
        poll: seconds between two looks at the outbox in :meth:`run` when it had nothing due.
        batch: rows claimed (and sent concurrently) at once.
        alerts: evaluate the alert rules in :meth:`run` (False: deliver only).
        subscriptions: pump the webhook subscriptions into the outbox in :meth:`run`, and
            deliver their notifications with the alerts' (:mod:`.webhooks`).
        metrics: count the sends in the engine's ``/metrics`` (:mod:`.outbox_metrics`).
    """

    def __init__(
        self,
        engine: Engine,
        webhooks: Sequence[str] = (),
        *,
        thresholds: AlertThresholds | None = None,
        tenant: str | None = None,
        rules: Iterable[str] = RULES,
        interval: float = 30.0,
        max_attempts: int = 10,
        backoff: Backoff | None = None,
        timeout: float = 10.0,
        claim_seconds: float | None = None,
        receiver: str = "statewright",
        external_url: str = "",
        poll: float = 1.0,
        batch: int = 10,
        alerts: bool = True,
        subscriptions: bool = True,
        metrics: bool = True,
    ) -> None:
        for url in webhooks:
            parsed = httpx.URL(url) if isinstance(url, str) else None
            if parsed is None or parsed.scheme not in ("http", "https") or not parsed.host:
                raise InvalidInput(f"alert webhook {url!r}: expected an http(s):// URL")
        if interval <= 0 or timeout <= 0 or poll <= 0:
            raise InvalidInput("alert delivery: interval, timeout and poll must be positive")
        if max_attempts < 1 or batch < 1:
            raise InvalidInput("alert delivery: max_attempts and batch must be at least 1")
        self.rules = tuple(rules)
        unknown = set(self.rules) - set(RULES)
        if unknown:
            raise InvalidInput(f"unknown alert rule(s): {', '.join(sorted(unknown))}")
        self.engine = engine
        self.webhooks = tuple(dict.fromkeys(webhooks))
        self.thresholds = thresholds or AlertThresholds()
        self.tenant = tenant
        self.interval = interval
        self.max_attempts = max_attempts
        self.backoff = backoff or Backoff()
        self.timeout = timeout
        self.lease = 2 * timeout + 5 if claim_seconds is None else claim_seconds
        if self.lease <= timeout:
            raise InvalidInput("alert delivery: a claim must last longer than the timeout")
        self.receiver = receiver
        self.external_url = external_url.rstrip("/")
        self.poll = poll
        self.batch = batch
        self.owner = f"alerts-{uuid.uuid4().hex[:12]}"
        self._stop = asyncio.Event()
        self._rng = random.Random()
        self._tls: ssl.SSLContext | None = None
        self.alerts = alerts
        self.subscriptions = subscriptions
        self._subs: dict[str, Subscription] = {}
        self.metrics = outbox_metrics(engine) if metrics else None
        """This process's ``/metrics`` of the outbox (:mod:`.outbox_metrics`)."""
        self.counts = hooks.counts()
        """Sends this deliverer made, per kind and outcome (``/metrics`` shows them)."""

    # -- evaluation ------------------------------------------------------------------------

    def _mine(self, state: AlertStateRecord) -> bool:
        """Whether a recorded alert is one this evaluator judges (its tenant and rules)."""
        return state.rule in self.rules and state.labels.get("tenant") == self.tenant

    def _notification(
        self,
        status: str,
        labels: Mapping[str, str],
        annotations: Mapping[str, str],
        starts_at: float,
        now: float,
    ) -> dict[str, Any]:
        fp = fingerprint(labels)
        return {
            "status": status,
            "labels": dict(labels),
            "annotations": dict(annotations),
            "startsAt": _rfc3339(starts_at),
            "endsAt": NO_END if status == "firing" else _rfc3339(now),
            "generatorURL": f"{self.external_url}/v1/alerts" if self.external_url else "",
            "fingerprint": fp,
        }

    async def evaluate(self, now: float | None = None) -> list[AlertChange]:
        """Evaluate the rules once and record what changed (with its notifications); returns
        the changes this call recorded.

        Raises:
            StoreError: the store could not be read or written (nothing was recorded).
        """
        now = self.engine.clock.now() if now is None else now
        found = await evaluate_alerts(
            self.engine, self.thresholds, tenant=self.tenant, now=now, rules=self.rules
        )
        firing: dict[str, tuple[Alert, dict[str, str]]] = {}
        for a in found:
            labels = alert_labels(a, self.tenant)
            firing[fingerprint(labels)] = (a, labels)
        recorded = {s.fingerprint: s for s in await self.engine.store.alert_states()}
        changes = []
        for fp, (a, labels) in firing.items():
            if fp not in recorded:
                notes = _annotations(a)
                changes.append(
                    AlertChange(
                        fingerprint=fp,
                        status="firing",
                        rule=a.rule,
                        labels=labels,
                        annotations=notes,
                        starts_at=now,
                        alert=self._notification("firing", labels, notes, now, now),
                        idempotency_key=idempotency_key(fp, "firing", now),
                    )
                )
        for fp, s in recorded.items():
            if fp not in firing and self._mine(s):
                changes.append(
                    AlertChange(
                        fingerprint=fp,
                        status="resolved",
                        rule=s.rule,
                        labels=s.labels,
                        annotations=s.annotations,
                        starts_at=s.starts_at,
                        alert=self._notification(
                            "resolved", s.labels, s.annotations, s.starts_at, now
                        ),
                        idempotency_key=idempotency_key(fp, "resolved", s.starts_at),
                    )
                )
        if not changes:
            return []
        took = await self.engine.store.record_alert_changes(changes, self.webhooks, now)
        for ch in took:
            log.info(
                "alert %s: %s %s",
                ch.status,
                ch.rule,
                ch.annotations.get("summary", ""),
                extra={
                    "action": f"alert_{ch.status}",
                    "fingerprint": ch.fingerprint,
                    "labels": dict(ch.labels),
                },
            )
        return took

    # -- delivery --------------------------------------------------------------------------

    async def _send(
        self, client: httpx.AsyncClient, row: OutboxRecord
    ) -> tuple[bool, str | None, bool]:
        """``(delivered, error, worth a retry)``."""
        headers = {
            IDEMPOTENCY_HEADER: row.idempotency_key,
            "User-Agent": f"statewright/{__version__}",
        }
        content: bytes | None = None
        body: dict[str, Any] | None = None
        if row.kind == "transition":
            sub = await self._subscription(row.subscription)
            if sub is None or sub.url is None:
                return False, "subscription deleted", False
            content, headers = hooks.transition_request(row, sub, headers)
        else:
            body = webhook_payload(row, receiver=self.receiver, external_url=self.external_url)
        try:
            async with asyncio.timeout(self.timeout):
                resp = await client.post(row.receiver, json=body, content=content, headers=headers)
        except TimeoutError:
            return False, f"no answer within {self.timeout:g}s", True
        except httpx.HTTPError as exc:
            return False, f"{type(exc).__name__}: {exc}", True
        if resp.is_success:
            return True, None, False
        error = f"HTTP {resp.status_code}: {resp.text[:200]}"
        return False, error, resp.status_code >= 500 or resp.status_code in RETRY_STATUSES

    async def _subscription(self, name: str | None) -> Subscription | None:
        if name is not None and name not in self._subs:
            found = await self.engine.store.get_subscription(name)
            if found is not None:
                self._subs[name] = found.subscription
        return None if name is None else self._subs.get(name)

    async def pump(self) -> int:
        """Hand the webhook subscriptions' new log entries to the outbox
        (:func:`statewright.engine.subscriptions.pump_all`); returns how many were queued."""
        store = self.engine.store
        self._subs = {r.name: r.subscription for r in await store.list_subscriptions()}
        if not any(s.url is not None for s in self._subs.values()):
            return 0
        rt = self.engine.runtime
        return await subs.pump_all(store, registry=rt.registry, clock=rt.clock)

    async def deliver(self, now: float | None = None) -> DeliveryReport:
        """Claim the due notifications (up to ``batch``), send them concurrently, record each
        outcome as soon as it is known (so a kill leaves as few sent-but-unmarked as can be).
        """
        store, clock = self.engine.store, self.engine.clock
        now = clock.now() if now is None else now
        claim = f"{self.owner}:{uuid.uuid4().hex[:12]}"
        rows = await store.claim_alert_notifications(claim, now, now + self.lease, self.batch)
        report = DeliveryReport()
        if not rows:
            return report
        # One TLS context for every round: httpx loads the CA bundle into a new one for each
        # client it makes (about 30 ms of CPU), which a round with work paid every time.
        if self._tls is None:
            self._tls = httpx.create_ssl_context()
        async with httpx.AsyncClient(timeout=self.timeout, verify=self._tls) as client:
            done = await asyncio.gather(
                *(self._one(client, row, claim, report) for row in rows), return_exceptions=True
            )
        # A send whose outcome could not be recorded stays claimed, and is sent again when its
        # claim runs out (at least once); the first such error is raised once all are done.
        for outcome in done:
            if isinstance(outcome, BaseException):
                raise outcome
        return report

    async def _one(
        self, client: httpx.AsyncClient, row: OutboxRecord, claim: str, report: DeliveryReport
    ) -> None:
        store, clock = self.engine.store, self.engine.clock
        ok, error, retry = await self._send(client, row)
        at = clock.now()
        failures = row.attempts + 1
        retry_at = None
        if retry and failures < self.max_attempts:
            retry_at = at + self.backoff.delay(failures, self._rng)
        held = await store.finish_alert_notification(
            row.id, claim, at=at, delivered=ok, retry_at=retry_at, error=error
        )
        extra = {
            "fingerprint": row.fingerprint,
            "status": row.status,
            "receiver": row.receiver,
            "idempotency_key": row.idempotency_key,
            "attempts": row.attempts + (0 if ok else 1),
            "deliverer": self.owner,
            **hooks.describe(row),
        }
        if held:
            outcomes = (
                ["delivered"] if ok else ["failed"] if retry_at is not None else ["failed", "dead"]
            )
            for outcome in outcomes:
                hooks.count(self.counts, row, outcome)
                if self.metrics is not None:
                    self.metrics.count(row.kind, outcome)
        if not held:
            report.lost_claims += 1
            log.warning(
                "alert notification %s: the claim ran out before its send was recorded; "
                "another deliverer may send it again",
                row.idempotency_key,
                extra={"action": "alert_claim_lost", **extra},
            )
        elif ok:
            report.delivered.append(row)
            log.info(
                "alert notification %s delivered to %s",
                row.idempotency_key,
                row.receiver,
                extra={"action": "alert_delivered", **extra},
            )
        elif retry_at is not None:
            report.retried.append(row)
            log.warning(
                "alert notification %s to %s failed (attempt %d of %d), retry in %.1fs: %s",
                row.idempotency_key,
                row.receiver,
                failures,
                self.max_attempts,
                retry_at - at,
                error,
                extra={"action": "alert_delivery_failed", "error": error, **extra},
            )
        else:
            report.dead.append(row)
            log.error(
                "alert notification %s to %s dead-lettered after %d attempt(s): %s",
                row.idempotency_key,
                row.receiver,
                failures,
                error,
                extra={"action": "alert_dead_letter", "error": error, **extra},
            )

    # -- the loop --------------------------------------------------------------------------

    def stop(self) -> None:
        """Make :meth:`run` return after the round in progress."""
        self._stop.set()

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)

    async def run(self) -> None:
        """Evaluate every ``interval`` and deliver what is due, until :meth:`stop`. A failed
        evaluation or round is logged and tried again later (a store outage stops nothing)."""
        loop = asyncio.get_running_loop()
        next_eval = loop.time()
        while not self._stop.is_set():
            if self.subscriptions:
                try:
                    await self.pump()
                except Exception as exc:
                    log.error(
                        "subscription pump failed: %s",
                        exc,
                        extra={"action": "subscription_pump_failed", "error": repr(exc)},
                    )
            if self.alerts and loop.time() >= next_eval:
                next_eval = loop.time() + self.interval
                try:
                    await self.evaluate()
                except Exception as exc:
                    log.error(
                        "alert evaluation failed: %s",
                        exc,
                        extra={"action": "alert_evaluation_failed", "error": repr(exc)},
                    )
            busy = False
            try:
                busy = (await self.deliver()).claimed > 0
            except Exception as exc:
                log.error(
                    "alert delivery round failed: %s",
                    exc,
                    extra={"action": "alert_delivery_round_failed", "error": repr(exc)},
                )
            if not busy:
                left = next_eval - loop.time() if self.alerts else self.poll
                await self._pause(max(0.0, min(self.poll, left)))


def run_with_app(app: Any, delivery: AlertDelivery) -> None:
    """Run ``delivery`` for as long as a Starlette/FastAPI app runs (``serve
    --alert-webhook``): started after the app's own start-up (which opens the engine), stopped
    before its shut-down."""
    inner = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(a: Any) -> AsyncIterator[Any]:
        async with inner(a) as state:
            task = asyncio.create_task(delivery.run(), name="statewright-alert-delivery")
            try:
                yield state
            finally:
                delivery.stop()
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await task

    app.router.lifespan_context = lifespan


__all__ = [
    "IDEMPOTENCY_HEADER",
    "AlertDelivery",
    "Backoff",
    "DeliveryReport",
    "alert_labels",
    "fingerprint",
    "group_key",
    "idempotency_key",
    "run_with_app",
    "webhook_payload",
]
