"""Store contract for the rejections log and the other reads the alert rules make (counts by
state within a time range, age and retry-counter filters, events of live workflows), on
SQLite (file and memory) and PostgreSQL."""

from __future__ import annotations

from statewright.store.protocol import FullStore as Store
from statewright.types import DeferWrite, WorkflowFilter
from tests.store.contract.writes import T0, move, new


async def _reject(
    store: Store, wid: str, at: float, *, tenant: str = "acme", type: str = "t", code: str = "c"
) -> None:
    await store.record_rejection(
        workflow_id=wid,
        type=type,
        tenant=tenant,
        state="a",
        event="nope",
        code=code,
        actor="agent-7",
        message=f"refused {wid}",
        at=at,
    )


async def test_rejections_are_logged_counted_and_listed_by_window_and_tenant(
    store: Store,
) -> None:
    assert await store.count_rejections(0.0) == []
    assert await store.rejections(0.0) == []
    await _reject(store, "w1", T0, code="illegal_transition")
    await _reject(store, "w1", T0 + 10, code="illegal_transition")
    await _reject(store, "w2", T0 + 20, code="invalid_payload")
    await _reject(store, "w3", T0 + 30, type="u", code="illegal_transition")
    await _reject(store, "x1", T0 + 40, tenant="globex", code="illegal_transition")

    assert await store.count_rejections(T0) == [
        ("t", "illegal_transition", 3),
        ("t", "invalid_payload", 1),
        ("u", "illegal_transition", 1),
    ]
    # The window starts at `since` inclusive; a tenant sees only its own.
    assert await store.count_rejections(T0 + 10, tenant="acme") == [
        ("t", "illegal_transition", 1),
        ("t", "invalid_payload", 1),
        ("u", "illegal_transition", 1),
    ]
    assert await store.count_rejections(T0 + 41) == []

    latest = await store.rejections(T0 + 10, tenant="acme")
    assert [(r.workflow_id, r.at) for r in latest] == [
        ("w3", T0 + 30),
        ("w2", T0 + 20),
        ("w1", T0 + 10),
    ]
    first = latest[-1]
    assert (first.type, first.tenant, first.state, first.event, first.code, first.actor) == (
        "t",
        "acme",
        "a",
        "nope",
        "illegal_transition",
        "agent-7",
    )
    assert first.message == "refused w1" and first.seq > 0
    assert [r.workflow_id for r in await store.rejections(0.0, limit=2)] == ["x1", "w3"]


async def test_rejections_leave_workflows_and_their_log_alone(store: Store) -> None:
    row, _ = await store.create_workflow(new("w1"))
    await _reject(store, "w1", T0 + 1)
    assert await store.get_workflow("w1") == row
    assert len(await store.history("w1")) == 1


async def test_count_by_state_within_a_time_range(store: Store) -> None:
    for i in range(4):
        await store.create_workflow(new(f"w{i}", at=T0 + i, tenant="acme" if i else "globex"))
    await store.apply_transition(move("w3", 1, to="b", at=T0 + 10, terminal=True))
    assert await store.count_by_state(entered_before=T0 + 2) == [("t", "a", 2)]
    assert await store.count_by_state(entered_after=T0 + 2) == [("t", "a", 1), ("t", "b", 1)]
    assert await store.count_by_state(entered_after=T0 + 1, entered_before=T0 + 3) == [
        ("t", "a", 2)
    ]
    assert await store.count_by_state(terminal=True, entered_after=T0 + 10) == [("t", "b", 1)]
    assert await store.count_by_state(tenant="acme", entered_before=T0 + 2) == [("t", "a", 1)]


async def test_list_workflows_by_entered_after_and_retry_counter(store: Store) -> None:
    for i in range(3):
        await store.create_workflow(new(f"w{i}", at=T0 + i))
    await store.defer(DeferWrite("w2", 1, T0 + 5, attempts=3, last_error="boom"))
    await store.defer(DeferWrite("w1", 1, T0 + 5, attempts=1, last_error="boom"))
    assert [r.id for r in await store.list_workflows(WorkflowFilter(entered_after=T0 + 1))] == [
        "w1",
        "w2",
    ]
    assert [r.id for r in await store.list_workflows(WorkflowFilter(min_attempts=1))] == [
        "w1",
        "w2",
    ]
    assert [r.id for r in await store.list_workflows(WorkflowFilter(min_attempts=2))] == ["w2"]
    assert await store.list_workflows(WorkflowFilter(min_attempts=2, tenant="other")) == []


async def test_live_event_counts_counts_recent_events_of_live_workflows(store: Store) -> None:
    await store.create_workflow(new("w1", tenant="acme"))
    await store.create_workflow(new("w2", tenant="globex"))
    await store.create_workflow(new("w3", tenant="acme"))
    # w1: a -> b (go, at T0+1) -> a (err, T0+2) -> b (err, T0+3) -> a (go, T0+4)
    await store.apply_transition(move("w1", 1, to="b", at=T0 + 1))
    await store.apply_transition(move("w1", 2, to="a", from_state="b", event="err", at=T0 + 2))
    await store.apply_transition(move("w1", 3, to="b", from_state="a", event="err", at=T0 + 3))
    await store.apply_transition(move("w1", 4, to="a", from_state="b", at=T0 + 4))
    await store.apply_transition(move("w2", 1, to="b", event="err", at=T0 + 3))
    # w3 took err but has ended: not live any more.
    await store.apply_transition(move("w3", 1, to="b", event="err", at=T0 + 3, terminal=True))

    assert await store.live_event_counts(T0, ["err", "go"]) == [
        ("w1", "t", "err", 2),
        ("w1", "t", "go", 2),
        ("w2", "t", "err", 1),
    ]
    assert await store.live_event_counts(T0 + 3, ["err"]) == [
        ("w1", "t", "err", 1),
        ("w2", "t", "err", 1),
    ]
    assert await store.live_event_counts(T0, ["err"], tenant="acme") == [("w1", "t", "err", 2)]
    assert await store.live_event_counts(T0, ["other"]) == []
