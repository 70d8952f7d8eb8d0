"""The alert outbox on every store: finished notifications are pruned, pending ones kept."""

from __future__ import annotations

import pytest

from statewright import InvalidInput, ManualClock
from statewright.observability.delivery import fingerprint, idempotency_key
from statewright.store.alert_outbox import AlertChange
from statewright.store.protocol import FullStore as Store
from tests.store.contract.retention.test_retention import DAY, engine_on, id_of


async def test_prune_deletes_finished_alert_notifications_and_keeps_pending_ones(
    store: Store,
) -> None:
    """Delivered and dead-lettered notifications past the cutoff go; one still due to be
    retried stays, and so do the alerts' recorded states (nothing fires again)."""
    engine = engine_on(store)
    assert isinstance(engine.clock, ManualClock)
    t0 = engine.clock.now()

    def change(i: int) -> AlertChange:
        labels = {"alertname": "stuck_workflows", "machine": f"m{i}"}
        fp = fingerprint(labels)
        return AlertChange(
            fingerprint=fp,
            status="firing",
            rule="stuck_workflows",
            labels=labels,
            annotations={},
            starts_at=t0,
            alert={"labels": labels},
            idempotency_key=idempotency_key(fp, "firing", t0),
        )

    took = await store.record_alert_changes([change(i) for i in range(3)], ["http://r"], t0)
    assert len(took) == 3
    claimed = sorted(await store.claim_alert_notifications("d1", t0, t0 + 60, 10), key=id_of)
    assert len(claimed) == 3
    delivered, dead, retrying = claimed
    assert await store.finish_alert_notification(delivered.id, "d1", at=t0, delivered=True)
    assert await store.finish_alert_notification(dead.id, "d1", at=t0, delivered=False)
    assert await store.finish_alert_notification(
        retrying.id, "d1", at=t0, delivered=False, retry_at=t0 + 10
    )
    engine.clock.advance(2 * DAY)
    # Not old enough yet: nothing goes.
    assert (await engine.prune(365 * DAY, alerts_older_than=3 * DAY)).alert_notifications == 0
    dry = await engine.prune(365 * DAY, alerts_older_than=DAY, dry_run=True)
    assert dry.alert_notifications == 2
    assert len(await store.alert_notifications()) == 3
    report = await engine.prune(365 * DAY, alerts_older_than=DAY)
    assert report.alert_notifications == 2
    left = await store.alert_notifications()
    assert [r.id for r in left] == [retrying.id]
    assert left[0].delivered_at is None and left[0].dead_at is None
    assert len(await store.alert_states()) == 3  # still firing: no new notification
    with pytest.raises(InvalidInput, match="per tenant"):
        await engine.prune(0, alerts_older_than=DAY, tenant="acme")
    with pytest.raises(InvalidInput):
        await engine.prune(0, alerts_older_than=-1)
    assert len(await store.alert_notifications()) == 1
