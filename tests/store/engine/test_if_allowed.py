"""``Engine.send(..., if_allowed=True)`` on every store: an event the state does not allow *now*
(a late webhook, a duplicate callback) returns the workflow unchanged and is counted apart
from refusals (not in the rejections log the invalid-transition alert reads, not in
``statewright_rejected_transitions``); everything else is still refused."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pytest

from statewright import Engine, MachineBuilder, ManualClock, WorkflowType
from statewright.errors import (
    IdempotencyKeyReused,
    IllegalTransition,
    InvalidPayload,
    VersionConflict,
    WorkflowNotFound,
)
from statewright.observability.metrics import attach_metrics
from statewright.store.protocol import FullStore as Store

T0 = 1_800_000_000.0


def ready(ctx: Mapping[str, Any], payload: Mapping[str, Any]) -> bool:
    return bool(ctx.get("ready"))


MACHINE = (
    MachineBuilder("webhook", 1, "Wait for a payment webhook.")
    .state("pending", initial=True)
    .state("paid")
    .state("shipped")
    .state("cancelled", terminal=True)
    .event(
        "payment_captured",
        payload_schema={
            "type": "object",
            "properties": {"charge_id": {"type": "string"}},
            "required": ["charge_id"],
        },
    )
    .event("ship")
    .event("cancel")
    .transition("payment_captured", "pending", "paid")
    .transition("ship", "paid", "shipped", guard=ready)
    .transition("cancel", ["pending", "paid", "shipped"], "cancelled")
    .build()
)


@pytest.fixture
async def engine(store: Store) -> Engine:
    return Engine(store, [WorkflowType(MACHINE)], clock=ManualClock(T0))


def not_applied(engine: Engine, event: str) -> float:
    value = attach_metrics(engine).registry.get_sample_value(
        "statewright_events_not_applied_total", {"machine": "webhook", "event": event}
    )
    return value or 0.0


def rejected(engine: Engine, event: str) -> float:
    value = attach_metrics(engine).registry.get_sample_value(
        "statewright_rejected_transitions_total",
        {"machine": "webhook", "event": event, "code": "illegal_transition"},
    )
    return value or 0.0


async def test_a_late_webhook_is_not_applied_and_not_a_rejection(
    engine: Engine, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    attach_metrics(engine)
    await engine.start("webhook", {}, workflow_id="w1")
    await engine.send("w1", "payment_captured", {"charge_id": "ch_1"})
    await engine.send("w1", "cancel")
    before = await engine.get("w1")
    log = await engine.history("w1")

    late = {"charge_id": "ch_1"}
    with caplog.at_level(logging.INFO, logger="statewright.transitions"):
        row = (await engine.send("w1", "payment_captured", late, if_allowed=True)).row
    assert row == before
    sent = await engine.send("w1", "payment_captured", late, if_allowed=True)
    assert (sent.applied, sent.replayed, sent.row) == (False, False, before)
    assert sent.refusal is not None
    assert (sent.refusal.state, sent.refusal.reason, sent.refusal.allowed) == (
        "cancelled",
        "terminal state",
        [],
    )
    # Nothing changed; nothing was logged as a rejection; counted apart.
    assert await engine.get("w1") == before
    assert await engine.history("w1") == log
    assert await store.rejections(0.0) == []
    assert await store.count_rejections(0.0) == []
    assert not_applied(engine, "payment_captured") == 2
    assert rejected(engine, "payment_captured") == 0
    [line] = [r for r in caplog.records if getattr(r, "action", None) == "event_not_applied"]
    fields = [getattr(line, k) for k in ("workflow_id", "event", "state")]
    assert fields == ["w1", "payment_captured", "cancelled"]

    # Without if_allowed it is still a refusal, logged as one.
    with pytest.raises(IllegalTransition):
        await engine.send("w1", "payment_captured", late)
    assert [(r.event, r.code) for r in await store.rejections(0.0)] == [
        ("payment_captured", "illegal_transition")
    ]
    assert rejected(engine, "payment_captured") == 1


async def test_no_edge_and_no_guard_passed_are_not_applied_either(engine: Engine) -> None:
    await engine.start("webhook", {}, workflow_id="w1")
    sent = await engine.send("w1", "ship", if_allowed=True)  # no edge from pending
    assert not sent.applied and sent.refusal is not None and sent.refusal.reason is None
    assert sent.refusal.allowed == ["payment_captured", "cancel"]
    await engine.send("w1", "payment_captured", {"charge_id": "ch_1"})
    sent = await engine.send("w1", "ship", if_allowed=True)  # the guard says no
    assert not sent.applied and sent.refusal is not None
    assert sent.refusal.reason is not None and sent.refusal.reason.startswith("no guard passed")
    assert sent.row.state == "paid" and sent.row.version == 2
    # Allowed: applied as usual.
    sent = await engine.send("w1", "cancel", if_allowed=True)
    assert sent.applied and sent.refusal is None and sent.row.state == "cancelled"


async def test_what_is_wrong_whatever_the_state_is_still_refused(
    engine: Engine, store: Store
) -> None:
    await engine.start("webhook", {}, workflow_id="w1")
    await engine.send("w1", "cancel")
    with pytest.raises(IllegalTransition) as unknown:
        await engine.send("w1", "no_such_event", if_allowed=True)
    assert unknown.value.reason == "unknown event"
    # An invalid payload, even for an event the state would refuse anyway.
    with pytest.raises(InvalidPayload):
        await engine.send("w1", "payment_captured", {"charge_id": 7}, if_allowed=True)
    with pytest.raises(VersionConflict):
        await engine.send("w1", "payment_captured", {}, expected_version=1, if_allowed=True)
    with pytest.raises(WorkflowNotFound):
        await engine.send("nope", "payment_captured", {"charge_id": "x"}, if_allowed=True)
    # (A version conflict is a lost race, never in the rejections log.)
    codes = sorted(r.code for r in await store.rejections(0.0))
    assert codes == ["illegal_transition", "invalid_payload"]


async def test_idempotency_keys_keep_working_with_it(engine: Engine) -> None:
    await engine.start("webhook", {}, workflow_id="w1")
    first = await engine.send(
        "w1", "payment_captured", {"charge_id": "ch_1"}, idempotency_key="k1", if_allowed=True
    )
    assert first.applied and not first.replayed and first.row.version == 2
    # The webhook's retry: a replay (applied before), not "not applied".
    again = await engine.send(
        "w1", "payment_captured", {"charge_id": "ch_1"}, idempotency_key="k1", if_allowed=True
    )
    assert again.applied and again.replayed and again.applied_version == 2
    with pytest.raises(IdempotencyKeyReused):
        await engine.send(
            "w1", "payment_captured", {"charge_id": "ch_2"}, idempotency_key="k1", if_allowed=True
        )
    # A new key for an event not allowed now: not applied, and the key stays unused.
    late = await engine.send(
        "w1", "payment_captured", {"charge_id": "ch_2"}, idempotency_key="k2", if_allowed=True
    )
    assert not late.applied and late.row.version == 2
    assert [r.idempotency_key for r in await engine.history("w1")] == [None, "k1"]


async def test_a_stale_cached_row_is_confirmed_on_a_fresh_read(
    engine: Engine, store: Store
) -> None:
    """Another process moved the workflow since this engine cached it: the event is allowed
    on the row as it is, so it is applied, not refused on the stale one."""
    await engine.start("webhook", {"ready": True}, workflow_id="w1")
    other = Engine(store, [WorkflowType(MACHINE)], clock=ManualClock(T0))
    await other.send("w1", "payment_captured", {"charge_id": "ch_1"})
    # This engine's cache still has w1 in pending, where "ship" has no edge.
    cached = engine.transitions.rows.get("w1")
    assert cached is not None and cached.state == "pending"
    sent = await engine.send("w1", "ship", if_allowed=True)
    assert sent.applied and sent.row.state == "shipped"
    # And the other way round: other's cache says paid, the workflow has moved on.
    await engine.send("w1", "cancel")
    stale = await other.send("w1", "ship", if_allowed=True)
    assert not stale.applied and stale.row.state == "cancelled"
