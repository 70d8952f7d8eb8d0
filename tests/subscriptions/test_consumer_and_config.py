"""A Python consumer reads its subscription from a durable cursor, at least once; the
Python API, the type's file and the signature of webhook bodies; on both stores."""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

import pytest

from statewright import Engine, InvalidInput, Worker
from statewright.engine.subscription_ops import in_file
from statewright.engine.subscriptions import Consumer, SubscriptionGone
from statewright.errors import DefinitionError, SubscriptionNotFound
from statewright.observability.webhooks import SIGNATURE_HEADER, transition_request
from statewright.store.alert_outbox import OutboxRecord
from statewright.store.subscriptions import Subscription, SubscriptionFilter


async def _orders(engine: Engine, *ids: str) -> None:
    for wid in ids:
        await engine.start("shop_order", {"items": 1}, workflow_id=wid)
        await engine.send(wid, "pack")
    await Worker(engine).run_until_idle()


async def test_consumer_reads_from_its_cursor_and_acks(engine: Engine) -> None:
    f = SubscriptionFilter(states=("shipped",))
    c = await Consumer(engine.store, "feed", f, batch=2).open()
    await _orders(engine, "c1", "c2", "c3")
    got = await c.batch()
    first = [d.idempotency_key for d in got.deliveries]
    assert first and len(first) <= 2 and all(k.startswith("feed:c") for k in first)
    # Nothing acknowledged: a new consumer of the same name (a restart) reads it again.
    again = await Consumer(engine.store, "feed", f, batch=2).open()
    assert [d.idempotency_key for d in (await again.batch()).deliveries] == first
    await c.ack(got.upto)
    rest = [d.idempotency_key async for d in _until_empty(c)]
    assert sorted(first + rest) == ["feed:c1:3", "feed:c2:3", "feed:c3:3"]
    restarted = await Consumer(engine.store, "feed", f).open()
    assert (await restarted.batch()).deliveries == []  # acknowledged: not again
    record = await engine.subscription("feed")
    assert record.subscription.consumer and record.cursor == restarted.cursor
    await engine.unsubscribe("feed")
    with pytest.raises(SubscriptionGone):
        await c.ack(c.cursor + 1 if c.cursor is not None else 1)


async def _until_empty(c: Consumer):  # type: ignore[no-untyped-def]
    while True:
        got = await c.batch()
        if not got.deliveries:
            await c.ack(got.upto)
            return
        for d in got.deliveries:
            yield d
        await c.ack(got.upto)


async def test_consumer_async_for_acknowledges_each_batch(engine: Engine) -> None:
    c = Consumer(engine.store, "loop", SubscriptionFilter(events=("packed",)), poll=0.01)
    await c.open()
    await _orders(engine, "l1", "l2")
    seen = []
    async for d in c:
        seen.append(d.body["workflow_id"])
        if len(seen) == 2:
            c.stop()
    assert sorted(seen) == ["l1", "l2"]
    # Stopped inside the batch: not acknowledged, so handed out again (at least once).
    again = (await Consumer(engine.store, "loop").batch()).deliveries
    assert sorted(d.body["workflow_id"] for d in again) == ["l1", "l2"]


async def test_engine_api(engine: Engine) -> None:
    made = await engine.subscribe(Subscription("hook", url="http://r.example/x"))
    assert made.cursor == 0 and not made.subscription.paused
    assert (await engine.pause_subscription("hook")).subscription.paused
    assert not (await engine.resume_subscription("hook")).subscription.paused
    assert [r.name for r in await engine.subscriptions()] == ["hook"]
    # Changed in place: the cursor is kept.
    changed = await engine.subscribe(Subscription("hook", url="http://r.example/y"), start=5)
    assert changed.subscription.url == "http://r.example/y" and changed.cursor == 0
    with pytest.raises(InvalidInput):
        await engine.subscribe(Subscription("neg", url="http://r.example/x"), start=-1)
    await engine.unsubscribe("hook")
    with pytest.raises(SubscriptionNotFound):
        await engine.unsubscribe("hook")
    with pytest.raises(SubscriptionNotFound):
        await engine.subscription("hook")


TYPE_FILE = """
name: shop
states:
  - {name: placed, initial: true}
  - {name: failed, terminal: true}
events:
  - {name: fail}
transitions:
  - {event: fail, source: placed, target: failed}
subscriptions:
  - name: shop-failures
    url: https://hooks.example.com/shop
    secret_env: SHOP_HOOK_SECRET
    headers: {X-Team: ops}
    filter: {states: [failed]}
  - name: shop-feed
    consumer: true
"""


def test_subscriptions_in_a_type_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "shop.yaml"
    path.write_text(TYPE_FILE)
    monkeypatch.setenv("SHOP_HOOK_SECRET", "s3")
    hook, feed = in_file(path)
    assert hook.url == "https://hooks.example.com/shop" and hook.secret == "s3"
    assert hook.filter == SubscriptionFilter(types=("shop",), states=("failed",))
    assert feed.consumer and feed.filter.types == ("shop",)
    monkeypatch.delenv("SHOP_HOOK_SECRET")
    with pytest.raises(InvalidInput, match="SHOP_HOOK_SECRET"):
        in_file(path)
    path.write_text(TYPE_FILE.replace("secret_env", "secretenv"))
    with pytest.raises(DefinitionError):
        in_file(path)


def test_signed_bodies() -> None:
    sub = Subscription(
        "s", url="http://r", secret="k", headers={"X-Team": "ops", "Idempotency-Key": "no"}
    )
    row = OutboxRecord(
        1, "http://r", "w", "transition", "s:w:1", {"a": 1}, 0.0, 0, 0.0, None, None, None, None,
        kind="transition", subscription="s", order_key="w",
    )  # fmt: skip
    content, headers = transition_request(row, sub, {"Idempotency-Key": "s:w:1"})
    assert content == b'{"a":1}' and headers["Idempotency-Key"] == "s:w:1"
    assert headers["X-Team"] == "ops"
    digest = hmac.new(b"k", content, hashlib.sha256).hexdigest()
    assert headers[SIGNATURE_HEADER] == f"sha256={digest}"
