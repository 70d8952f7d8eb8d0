"""Alert delivery's outbox state machine on SQLite and PostgreSQL, against a real local
webhook receiver: FIRING when an alert appears, RESOLVED when it goes away, once each (a
restart and a second evaluator record nothing again), retries with exponential backoff on
5xx, dead-letters after max_attempts with an error log line, disjoint claims that expire."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from statewright import Engine, ManualClock
from statewright.errors import InvalidInput
from statewright.observability.delivery import (
    IDEMPOTENCY_HEADER,
    AlertDelivery,
    Backoff,
    fingerprint,
    idempotency_key,
)
from tests.alerting.receiver import receiver
from tests.integration.conftest import Cli

HOUR = 3600.0
T0 = 1_800_000_000.0


async def running(engine: Engine, wid: str) -> None:
    await engine.start("agent_task", workflow_id=wid)
    await engine.send(wid, "start")


async def test_firing_then_resolved_once_each_across_restarts(
    engine: Engine, clock: ManualClock
) -> None:
    with receiver() as rec, receiver() as other:
        d = AlertDelivery(engine, [rec.url, other.url], external_url="http://sw.example/")
        await running(engine, "t1")
        assert await d.evaluate() == []
        clock.advance(HOUR + 1)
        [fired] = await d.evaluate()
        labels = {"alertname": "running_too_long", "severity": "warning",
                  "machine": "agent_task", "state": "running"}  # fmt: skip
        assert fired.status == "firing" and dict(fired.labels) == labels
        assert fired.fingerprint == fingerprint(labels) and len(fired.fingerprint) == 16
        # Evaluating again, or from a new process (a restart), records nothing new.
        assert await d.evaluate() == []
        assert await AlertDelivery(engine, [rec.url, other.url]).evaluate() == []
        # A second evaluator that raced to the same change: the store takes it once.
        assert await engine.store.record_alert_changes([fired], [rec.url], clock.now()) == []
        rows = await engine.store.alert_notifications()
        assert sorted(r.receiver for r in rows) == sorted([rec.url, other.url])

        report = await d.deliver()
        assert len(report.delivered) == 2 and not report.retried
        assert (await d.deliver()).claimed == 0  # nothing twice
        [body] = rec.bodies()
        assert [r.key for r in rec.requests] == [fired.idempotency_key]
        assert fired.idempotency_key == idempotency_key(fired.fingerprint, "firing", T0 + HOUR + 1)
        assert body["version"] == "4" and body["status"] == "firing"
        assert body["receiver"] == "statewright" and body["truncatedAlerts"] == 0
        assert body["externalURL"] == "http://sw.example"
        assert body["commonLabels"] == body["groupLabels"] == labels
        assert body["groupKey"].startswith('{}:{alertname="running_too_long"')
        [alert] = body["alerts"]
        assert alert["status"] == "firing" and alert["labels"] == labels
        assert alert["fingerprint"] == fired.fingerprint
        assert alert["startsAt"] == "2027-01-15T09:00:01.000Z"
        assert alert["endsAt"] == "0001-01-01T00:00:00Z"
        assert alert["generatorURL"] == "http://sw.example/v1/alerts"
        assert "t1" in alert["annotations"]["workflows"]
        assert "more than 1h" in alert["annotations"]["summary"]

        # It goes away: RESOLVED, same fingerprint and startsAt, its own key.
        await engine.send("t1", "complete")
        clock.advance(60)
        [resolved] = await AlertDelivery(engine, [rec.url, other.url]).evaluate()
        assert resolved.status == "resolved" and resolved.fingerprint == fired.fingerprint
        assert await d.evaluate() == []
        assert len((await d.deliver()).delivered) == 2
        last = rec.bodies()[-1]
        assert last["status"] == "resolved"
        assert last["alerts"][0]["startsAt"] == alert["startsAt"]
        assert last["alerts"][0]["endsAt"] == "2027-01-15T09:01:01.000Z"
        assert rec.keys() == {fired.idempotency_key: 1, resolved.idempotency_key: 1}
        assert other.keys() == rec.keys()
        assert await engine.store.alert_states() == []
        # Firing again later is a new notification (a new startsAt, a new key).
        await running(engine, "t2")
        clock.advance(HOUR + 1)
        [again] = await d.evaluate()
        assert again.fingerprint == fired.fingerprint
        assert again.idempotency_key not in (fired.idempotency_key, resolved.idempotency_key)


async def test_retries_with_exponential_backoff_then_dead_letters(
    engine: Engine, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    with receiver() as rec:
        rec.statuses = [500, 503, 502, 500]
        backoff = Backoff(initial=10, factor=3, maximum=1000, jitter=0)
        d = AlertDelivery(engine, [rec.url], max_attempts=3, backoff=backoff, timeout=2)
        await running(engine, "t1")
        clock.advance(HOUR + 1)
        await d.evaluate()
        now = clock.now()
        assert len((await d.deliver()).retried) == 1
        [row] = await engine.store.alert_notifications()
        assert (row.attempts, row.next_at, row.delivered_at) == (1, now + 10, None)
        assert row.last_error is not None and row.last_error.startswith("HTTP 500")
        assert (await d.deliver()).claimed == 0  # not due before its backoff
        clock.advance(10)
        assert len((await d.deliver()).retried) == 1
        [row] = await engine.store.alert_notifications()
        assert (row.attempts, row.next_at) == (2, clock.now() + 30)  # 10 * 3
        clock.advance(30)
        with caplog.at_level(logging.ERROR, logger="statewright.alerts"):
            assert len((await d.deliver()).dead) == 1
        [row] = await engine.store.alert_notifications()
        assert (row.attempts, row.next_at, row.delivered_at) == (3, None, None)
        assert row.dead_at == clock.now()
        [line] = [r for r in caplog.records if getattr(r, "action", "") == "alert_dead_letter"]
        assert "dead-lettered after 3 attempt(s)" in line.getMessage()
        assert "HTTP 502" in line.getMessage()
        clock.advance(10_000)
        assert (await d.deliver()).claimed == 0  # never tried again
        assert len(rec.requests) == 3
        assert len(set(rec.keys())) == 1  # every try carried the same key


async def test_a_failure_then_success_is_delivered(engine: Engine, clock: ManualClock) -> None:
    with receiver() as rec:
        rec.statuses = [503]
        d = AlertDelivery(engine, [rec.url], backoff=Backoff(initial=5, jitter=0.5))
        await running(engine, "t1")
        clock.advance(HOUR + 1)
        await d.evaluate()
        await d.deliver()
        [row] = await engine.store.alert_notifications()
        assert row.next_at is not None and 2.5 <= row.next_at - clock.now() <= 7.5  # jitter
        clock.advance(8)
        assert len((await d.deliver()).delivered) == 1
        assert list(rec.keys().values()) == [2]


async def test_a_client_error_is_dead_lettered_at_once(engine: Engine, clock: ManualClock) -> None:
    with receiver() as rec:
        rec.statuses = [404]
        d = AlertDelivery(engine, [rec.url], max_attempts=5)
        await running(engine, "t1")
        clock.advance(HOUR + 1)
        await d.evaluate()
        assert len((await d.deliver()).dead) == 1


async def test_an_unreachable_receiver_is_retried(engine: Engine, clock: ManualClock) -> None:
    with receiver() as rec:
        gone = rec.url
    d = AlertDelivery(engine, [gone], timeout=2)
    await running(engine, "t1")
    clock.advance(HOUR + 1)
    await d.evaluate()
    report = await d.deliver()
    assert len(report.retried) == 1
    [row] = await engine.store.alert_notifications()
    assert row.last_error and "Connect" in row.last_error


async def test_claims_are_disjoint_and_expire(engine: Engine, clock: ManualClock) -> None:
    with receiver() as rec:
        d = AlertDelivery(engine, [rec.url], timeout=1, claim_seconds=30)
        await running(engine, "t1")
        clock.advance(HOUR + 1)
        await d.evaluate()
        store, now = engine.store, clock.now()
        [held] = await store.claim_alert_notifications("a", now, now + 30, 10)
        assert await store.claim_alert_notifications("b", now, now + 30, 10) == []
        clock.advance(31)  # the claimer died: another one takes it after the claim
        [taken] = await store.claim_alert_notifications("b", clock.now(), clock.now() + 30, 10)
        assert taken.id == held.id and taken.claim == "b"
        # The first claimer's late answer changes nothing.
        assert not await store.finish_alert_notification(held.id, "a", at=now, delivered=True)
        assert await store.finish_alert_notification(taken.id, "b", at=now, delivered=True)
        [row] = await store.alert_notifications()
        assert row.delivered_at == now and row.next_at is None


async def test_bad_options_are_refused(engine: Engine) -> None:
    for bad in ("ftp://x/", "not a url", "http://"):
        with pytest.raises(InvalidInput):
            AlertDelivery(engine, [bad])
    with pytest.raises(InvalidInput):
        AlertDelivery(engine, ["http://x/"], timeout=10, claim_seconds=5)
    with pytest.raises(InvalidInput):
        AlertDelivery(engine, ["http://x/"], rules=["nope"])
    with pytest.raises(InvalidInput):
        Backoff(initial=0)
    assert IDEMPOTENCY_HEADER == "Idempotency-Key"


def test_cli_refuses_bad_delivery_options(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "cli.db")
    for args in (
        ["alerts", "--deliver"],
        ["alerts", "--deliver", "--alert-webhook", "ftp://x/"],
        ["alerts", "--deliver", "--alert-webhook", "http://x/", "--alert-interval", "soon"],
        ["alerts", "--deliver", "--alert-webhook", "http://x/", "--alert-claim", "1s"],
    ):
        result = cli(*args, code=2)
        assert "error" in result.stderr.lower()
