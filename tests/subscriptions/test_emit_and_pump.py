"""Messages commit with the transition, and a webhook subscription's pump enqueues the
matching log entries into the outbox alerts use, once, in order per workflow, with stable
keys; on both stores."""

from __future__ import annotations

from pathlib import Path

import pytest

from statewright import Engine, InvalidInput, ManualClock, Worker
from statewright.engine import subscriptions as subs
from statewright.observability.delivery import AlertDelivery, Backoff
from statewright.store.subscriptions import Subscription, SubscriptionFilter
from tests.alerting.receiver import receiver


async def _order(engine: Engine, wid: str, *, fail: bool = False) -> None:
    await engine.start("shop_order", {"items": 2}, workflow_id=wid)
    await engine.send(wid, "fail" if fail else "pack")


async def test_emitted_messages_are_stored_with_the_transition(engine: Engine) -> None:
    await _order(engine, "o1")
    await Worker(engine).run_until_idle()
    log = await engine.history("o1")
    assert [t.event for t in log] == ["$start", "pack", "packed"]
    assert log[0].messages is None and log[1].messages is None  # NULL when none
    assert log[2].messages == [
        {"topic": "order.packed", "body": {"order": "o1", "items": 2}},
        {"topic": "audit", "body": {"who": "packer"}},
    ]
    await engine.check("o1")  # replay ignores them


async def test_emit_checks_its_input(engine: Engine) -> None:
    from statewright.engine.emit import message
    from statewright.jsonvalue import Limits

    with pytest.raises(InvalidInput, match="topic"):
        message(Limits(), "bad topic!", {}, 0)
    with pytest.raises(InvalidInput, match="at most"):
        message(Limits(), "t", {}, 100)
    assert message(Limits(), "a.b", [1], 0) == {"topic": "a.b", "body": [1]}


async def test_pump_enqueues_matching_entries_once_with_cas(engine: Engine) -> None:
    store = engine.store
    sub = Subscription("failures", SubscriptionFilter(states=("failed",)), url="http://r/x")
    rec = await store.put_subscription(sub, engine.clock.now())
    await _order(engine, "old", fail=True)  # before the subscription? no: cursor is at the end
    assert rec.cursor >= 0
    await _order(engine, "a", fail=True)
    await _order(engine, "b")
    await Worker(engine).run_until_idle()
    read, made = await subs.pump(store, rec, registry=engine.runtime.registry)
    assert read >= 5 and made == 2
    # The same cursor again (a second pump that raced): the compare-and-swap refuses.
    assert await subs.pump(store, rec, registry=engine.runtime.registry) == (0, 0)
    fresh = await store.get_subscription("failures")
    assert fresh is not None and fresh.cursor > rec.cursor
    assert await subs.pump(store, fresh) == (0, 0)  # caught up
    rows = [r for r in await store.alert_notifications() if r.kind == "transition"]
    assert sorted(r.order_key or "" for r in rows) == ["a", "old"]
    by_wf = {r.order_key: r for r in rows}
    assert by_wf["a"].idempotency_key == "failures:a:2"
    body = dict(by_wf["a"].alert)
    assert body["to_state"] == "failed" and body["terminal"] is True
    assert body["type"] == "shop_order" and body["event"] == "fail"
    assert body["subscription"] == "failures" and body["version"] == 2


async def test_a_new_subscription_starts_at_the_end_of_the_log(engine: Engine) -> None:
    await _order(engine, "before", fail=True)
    rec = await engine.store.put_subscription(
        Subscription("late", url="http://r/late"), engine.clock.now()
    )
    assert await subs.pump(engine.store, rec) == (0, 0)
    whole = await engine.store.put_subscription(
        Subscription("all", url="http://r/all"), engine.clock.now(), cursor=0
    )
    read, made = await subs.pump(engine.store, whole)
    assert read == made == 2


async def test_topics_deliver_each_message(engine: Engine) -> None:
    f = SubscriptionFilter(topics=("order.packed",), types=("shop_order",))
    rec = await engine.store.put_subscription(
        Subscription("packed", f, url="http://r/p"), engine.clock.now()
    )
    await _order(engine, "m1")
    await Worker(engine).run_until_idle()
    _, made = await subs.pump(engine.store, rec, registry=engine.runtime.registry)
    assert made == 1
    [row] = [r for r in await engine.store.alert_notifications() if r.kind == "transition"]
    assert row.idempotency_key == "packed:m1:3:0"
    assert row.alert["kind"] == "message"
    assert row.alert["message"] == {"topic": "order.packed", "body": {"order": "m1", "items": 2}}


async def test_claims_keep_order_per_workflow(engine: Engine, clock: ManualClock) -> None:
    store = engine.store
    rec = await store.put_subscription(Subscription("all", url="http://r/all"), clock.now())
    for wid in ("w1", "w2"):
        await _order(engine, wid)
    await Worker(engine).run_until_idle()
    await subs.pump(store, rec)
    now = clock.now()
    # Only each workflow's first notification is handed out while it is pending.
    first = await store.claim_alert_notifications("c1", now, now + 60, 100)
    assert sorted((r.order_key, r.alert["version"]) for r in first) == [("w1", 1), ("w2", 1)]
    assert await store.claim_alert_notifications("c2", now, now + 60, 100) == []
    w1 = next(r for r in first if r.order_key == "w1")
    w2 = next(r for r in first if r.order_key == "w2")
    # A failure due later holds its workflow back; a delivery lets the next one out.
    assert await store.finish_alert_notification(
        w1.id, "c1", at=now, delivered=False, retry_at=now + 30
    )
    assert await store.finish_alert_notification(w2.id, "c1", at=now, delivered=True)
    [nxt] = await store.claim_alert_notifications("c3", now, now + 60, 100)
    assert (nxt.order_key, nxt.alert["version"]) == ("w2", 2)
    # A dead letter does not block its workflow for good.
    clock.advance(31)
    [again] = await store.claim_alert_notifications("c4", clock.now(), clock.now() + 60, 100)
    assert again.id == w1.id
    assert await store.finish_alert_notification(again.id, "c4", at=clock.now(), delivered=False)
    [after] = await store.claim_alert_notifications("c5", clock.now(), clock.now() + 60, 100)
    assert (after.order_key, after.alert["version"]) == ("w1", 2)


async def test_delivery_sends_transitions_and_alerts_alike(engine: Engine) -> None:
    with receiver() as rec:
        await engine.store.put_subscription(
            Subscription("hook", url=rec.url, headers={"X-Team": "ops"}, secret="s3"),
            engine.clock.now(),
        )
        await _order(engine, "d1")
        await Worker(engine).run_until_idle()
        d = AlertDelivery(engine, alerts=False)
        assert await d.pump() == 3
        for _ in range(3):
            report = await d.deliver()
            assert len(report.delivered) == 1  # each waits for the one before
        assert [r.key for r in rec.requests] == ["hook:d1:1", "hook:d1:2", "hook:d1:3"]
        assert [b["to_state"] for b in rec.bodies()] == ["placed", "packing", "shipped"]
        assert rec.bodies()[2]["messages"][0]["topic"] == "order.packed"
        assert d.counts["transition"]["delivered"] == 3
        assert await engine.store.outbox_pending() == {}


async def test_subscription_validation() -> None:
    with pytest.raises(InvalidInput):
        Subscription("x", url="ftp://nope")
    with pytest.raises(InvalidInput):
        Subscription("x")  # neither url nor consumer
    with pytest.raises(InvalidInput):
        Subscription("bad name", url="http://r")
    with pytest.raises(InvalidInput):
        SubscriptionFilter.from_json({"colour": ["red"]})
    with pytest.raises(InvalidInput):
        SubscriptionFilter(states="failed")  # type: ignore[arg-type]
    f = SubscriptionFilter.from_json({"states": ["failed"], "terminal": True})
    assert SubscriptionFilter.from_json(f.to_json()) == f


async def test_metrics_show_sends_pending_and_lag(engine: Engine) -> None:
    import httpx

    from statewright.http import create_app

    with receiver() as rec:
        rec.statuses = [503]
        await engine.subscribe(Subscription("hook", url=rec.url))
        await engine.subscribe(Subscription("feed", consumer=True))
        await _order(engine, "m1")
        d = AlertDelivery(engine, alerts=False, backoff=Backoff(initial=0.01, maximum=0.01))
        await d.pump()
        await d.deliver()  # 503: failed, due again
        app = create_app(engine, None, manage_engine=False)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://sw") as c:
            text = (await c.get("/metrics")).text
    assert 'statewright_outbox_sends_total{kind="transition",outcome="failed"} 1.0' in text
    assert 'statewright_outbox_pending{kind="transition"} 2.0' in text
    assert 'statewright_outbox_pending{kind="alert"} 0.0' in text
    assert 'statewright_subscription_lag{subscription="feed"} 2.0' in text
    assert 'statewright_subscription_lag{subscription="hook"} 0.0' in text
    assert 'statewright_subscription_paused{subscription="hook"} 0.0' in text


async def test_messages_survive_archive_and_import(
    engine: Engine, clock: ManualClock, tmp_path: Path
) -> None:
    await _order(engine, "arch")
    await Worker(engine).run_until_idle()
    before = await engine.history("arch")
    clock.advance(3 * 86400)
    archive = tmp_path / "old.jsonl.gz"
    report = await engine.prune(86400, archive=archive)
    assert report.workflows == 1
    done = await engine.import_archive(archive)
    assert done.imported == ["arch"]
    after = await engine.history("arch")
    assert [t.messages for t in after] == [t.messages for t in before]
    assert after[-1].messages and after[-1].messages[0]["topic"] == "order.packed"
    await engine.check("arch")


async def test_terminal_filter_without_the_type_registered(engine: Engine) -> None:
    """A pump in a process that does not know the type (``serve`` without the app) tells a
    terminal entry by the row: the row's last entry, on a terminal row."""
    rec = await engine.subscribe(
        Subscription("ends", SubscriptionFilter(terminal=True), url="http://r/e")
    )
    await _order(engine, "t1")
    await _order(engine, "t2", fail=True)
    await Worker(engine).run_until_idle()
    _, made = await subs.pump(engine.store, rec, registry=None)
    assert made == 2
    rows = [r for r in await engine.store.alert_notifications() if r.kind == "transition"]
    assert sorted((r.order_key, r.alert["to_state"]) for r in rows) == [
        ("t1", "shipped"),
        ("t2", "failed"),
    ]


async def test_a_sync_handler_emits_too(tmp_path: Path) -> None:
    from statewright import MachineBuilder, Next, SQLiteStore, WorkflowType

    machine = (
        MachineBuilder("sync_emit")
        .state("a", initial=True)
        .state("b", terminal=True)
        .event("go")
        .transition("go", "a", "b")
        .build()
    )

    def handler(run):  # type: ignore[no-untyped-def]
        run.emit("sync.topic", {"n": 1})
        return Next("go")

    wtype = WorkflowType(machine, handlers={"a": handler})
    async with Engine(SQLiteStore(tmp_path / "sync.db"), [wtype]) as engine:
        await engine.start("sync_emit", workflow_id="s1")
        await Worker(engine).run_until_idle()
        [_, entry] = await engine.history("s1")
        assert entry.messages == [{"topic": "sync.topic", "body": {"n": 1}}]


async def test_a_deleted_subscription_dead_letters_what_it_queued(engine: Engine) -> None:
    with receiver() as rec:
        await engine.subscribe(Subscription("gone", url=rec.url))
        await _order(engine, "g1", fail=True)
        d = AlertDelivery(engine, alerts=False)
        assert await d.pump() == 2
        await engine.unsubscribe("gone")
        d._subs.clear()  # as the next round's pump finds it
        report = await d.deliver()
        assert len(report.dead) == 1 and rec.requests == []
        rows = [r for r in await engine.store.alert_notifications() if r.kind == "transition"]
        assert [r.last_error for r in rows if r.dead_at is not None] == ["subscription deleted"]
