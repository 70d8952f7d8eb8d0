"""The store contract for dynamic and recurring timers (every backend, unchanged)."""

from __future__ import annotations

import pytest

from statewright.errors import VersionConflict, WorkflowNotFound
from statewright.store import Store
from statewright.types import TimerSpec
from tests.store.contract.writes import T0, defer, move, new


async def _visit(store: Store, wid: str = "w1") -> tuple[str, float]:
    row = await store.get_workflow(wid)
    assert row is not None
    return row.state, row.state_entered_at


async def test_schedule_arms_a_keyed_timer_and_moves_next_due_earlier(store: Store) -> None:
    await store.create_workflow(new(timers=(TimerSpec(T0 + 100, "late"),)))
    state, entered = await _visit(store)
    rec = await store.schedule_timer(
        "w1",
        TimerSpec(T0 + 10, "ping", {"n": 1}, key="k", keep=True),
        state=state,
        entered_at=entered,
        at=T0,
    )
    assert rec is not None
    assert (rec.key, rec.due_at, rec.event, rec.payload, rec.keep, rec.every) == (
        "k",
        T0 + 10,
        "ping",
        {"n": 1},
        True,
        None,
    )
    row = await store.get_workflow("w1")
    assert row is not None and row.next_due_at == T0 + 10
    assert row.version == 1  # scheduling is not a transition
    assert [t.key for t in await store.timers("w1")] == ["k", None]


async def test_schedule_same_key_replaces_and_later_due_is_taken(store: Store) -> None:
    await store.create_workflow(new())
    state, entered = await _visit(store)
    first = await store.schedule_timer(
        "w1", TimerSpec(T0 + 10, "ping", key="k"), state=state, entered_at=entered, at=T0
    )
    second = await store.schedule_timer(
        "w1", TimerSpec(T0 + 50, "pong", key="k"), state=state, entered_at=entered, at=T0 + 1
    )
    assert first is not None and second is not None and first.id != second.id
    [only] = await store.timers("w1")
    assert (only.id, only.event, only.due_at) == (second.id, "pong", T0 + 50)
    row = await store.get_workflow("w1")
    assert row is not None and row.next_due_at == T0 + 50  # the deadline was extended


async def test_schedule_refuses_another_visit_and_a_missing_workflow(store: Store) -> None:
    await store.create_workflow(new())
    state, entered = await _visit(store)
    await store.apply_transition(move("w1", 1))
    spec = TimerSpec(T0 + 10, "ping", key="k")
    assert await store.schedule_timer("w1", spec, state=state, entered_at=entered, at=T0) is None
    assert await store.timers("w1") == []
    with pytest.raises(WorkflowNotFound):
        await store.schedule_timer("nope", spec, state="a", entered_at=T0, at=T0)


async def test_schedule_refuses_a_terminal_workflow(store: Store) -> None:
    await store.create_workflow(new())
    await store.apply_transition(move("w1", 1, to="done", terminal=True))
    state, entered = await _visit(store)
    spec = TimerSpec(T0 + 10, "ping", key="k")
    assert await store.schedule_timer("w1", spec, state=state, entered_at=entered, at=T0) is None


async def test_cancel_timer_removes_it_and_recomputes_next_due(store: Store) -> None:
    await store.create_workflow(new())
    state, entered = await _visit(store)
    for key, due in (("a", T0 + 10), ("b", T0 + 20)):
        spec = TimerSpec(due, "ping", key=key)
        assert await store.schedule_timer("w1", spec, state=state, entered_at=entered, at=T0)
    assert await store.cancel_timer("w1", "a", at=T0)
    assert not await store.cancel_timer("w1", "a", at=T0)
    row = await store.get_workflow("w1")
    assert row is not None and row.next_due_at == T0 + 20
    assert await store.cancel_timer("w1", "b", at=T0)
    row = await store.get_workflow("w1")
    assert row is not None and row.next_due_at is None and await store.timers("w1") == []
    with pytest.raises(WorkflowNotFound):
        await store.cancel_timer("nope", "a", at=T0)


async def test_cancel_keeps_a_pending_handler_run(store: Store) -> None:
    await store.create_workflow(new(run_at=T0))  # a handler is due at T0
    state, entered = await _visit(store)
    spec = TimerSpec(T0 + 10, "ping", key="k")
    await store.schedule_timer("w1", spec, state=state, entered_at=entered, at=T0)
    assert await store.cancel_timer("w1", "k", at=T0)
    row = await store.get_workflow("w1")
    assert row is not None and row.next_due_at == T0


async def test_leaving_a_state_clears_all_but_kept_timers(store: Store) -> None:
    await store.create_workflow(new(timers=(TimerSpec(T0 + 100, "own"),)))
    state, entered = await _visit(store)
    for key, keep in (("gone", False), ("kept", True)):
        spec = TimerSpec(T0 + 50, "ping", key=key, keep=keep)
        await store.schedule_timer("w1", spec, state=state, entered_at=entered, at=T0)
    row = await store.apply_transition(move("w1", 1))
    assert [t.key for t in await store.timers("w1")] == ["kept"]
    assert row.next_due_at == T0 + 50  # the kept timer still counts
    row = await store.apply_transition(move("w1", 2, to="done", terminal=True))
    assert await store.timers("w1") == [] and row.next_due_at is None


async def test_transition_arms_keyed_timers_replacing_and_cancelling(store: Store) -> None:
    await store.create_workflow(new())
    state, entered = await _visit(store)
    for key in ("x", "y"):
        spec = TimerSpec(T0 + 5, "ping", key=key, keep=True)
        await store.schedule_timer("w1", spec, state=state, entered_at=entered, at=T0)
    row = await store.apply_transition(
        move(
            "w1",
            1,
            add_timers=(TimerSpec(T0 + 30, "pong", key="x"), TimerSpec(T0 + 40, "tick")),
            cancel_timer_keys=("y",),
        )
    )
    timers = await store.timers("w1")
    assert [(t.key, t.event, t.keep) for t in timers] == [
        ("x", "pong", False),
        (None, "tick", False),
    ]
    assert row.next_due_at == T0 + 30


async def test_fired_timer_rearmed_in_the_same_write_and_stale_fire_refused(store: Store) -> None:
    await store.create_workflow(new(timers=(TimerSpec(T0 + 10, "tick", every=10.0),)))
    [timer] = await store.timers("w1")
    assert timer.every == 10.0
    row = await store.apply_transition(
        move(
            "w1",
            1,
            to="a",
            clear_timers=False,
            fired_timer_id=timer.id,
            add_timers=(TimerSpec(T0 + 20, "tick", every=10.0),),
        )
    )
    [again] = await store.timers("w1")
    assert (again.due_at, again.every) == (T0 + 20, 10.0) and row.next_due_at == T0 + 20
    # The consumed timer cannot be fired again: the write is refused, nothing changes.
    with pytest.raises(VersionConflict):
        await store.apply_transition(
            move("w1", 2, to="a", clear_timers=False, fired_timer_id=timer.id)
        )
    assert (await store.timers("w1")) == [again]


async def test_defer_consumes_and_rearms_a_timer_and_arms_schedules(store: Store) -> None:
    await store.create_workflow(new(timers=(TimerSpec(T0 + 10, "tick", every=10.0),)))
    [timer] = await store.timers("w1")
    row = await store.defer(
        defer(
            "w1",
            1,
            fired_timer_id=timer.id,
            add_timers=(
                TimerSpec(T0 + 20, "tick", every=10.0),
                TimerSpec(T0 + 15, "ping", key="p"),
            ),
        )
    )
    assert [(t.event, t.due_at) for t in await store.timers("w1")] == [
        ("ping", T0 + 15),
        ("tick", T0 + 20),
    ]
    assert row.next_due_at == T0 + 15 and row.version == 1
    row = await store.defer(defer("w1", 1, cancel_timer_keys=("p",)))
    assert row.next_due_at == T0 + 20
    with pytest.raises(VersionConflict):
        await store.defer(defer("w1", 1, fired_timer_id=timer.id))


async def test_a_scheduled_timer_keeps_who_scheduled_it_and_timers_page(store: Store) -> None:
    await store.create_workflow(new(timers=(TimerSpec(T0 + 20, "own"),)))
    state, entered = await _visit(store)
    for i, due in enumerate((T0 + 10, T0 + 20, T0 + 20, T0 + 30)):
        rec = await store.schedule_timer(
            "w1",
            TimerSpec(due, "ping", key=f"k{i}"),
            state=state,
            entered_at=entered,
            at=T0,
            scheduled_by="alice" if i else None,
        )
        assert rec is not None and rec.scheduled_by == ("alice" if i else None)
    whole = await store.timers("w1")
    assert [(t.key, t.scheduled_by) for t in whole] == [
        ("k0", None),
        (None, None),  # the state's own: the system's
        ("k1", "alice"),
        ("k2", "alice"),
        ("k3", "alice"),
    ]
    assert whole[1].due_at == whole[2].due_at == T0 + 20  # ties: by id
    first = await store.timers("w1", limit=2)
    rest = await store.timers("w1", after=(first[-1].due_at, first[-1].id), limit=10)
    assert first + rest == whole
    middle = await store.timers("w1", after=(whole[2].due_at, whole[2].id), limit=1)
    assert middle == [whole[3]]


async def test_a_kept_timer_that_fires_a_move_to_another_state_is_consumed(store: Store) -> None:
    """Kept timers outlive the state that armed them, but the one that fires is consumed by
    the transition it fires, also when that transition leaves the state (clears timers)."""
    await store.create_workflow(new())
    state, entered = await _visit(store)
    spec = TimerSpec(T0 + 5, "deadline", key="d", keep=True)
    await store.schedule_timer("w1", spec, state=state, entered_at=entered, at=T0)
    [timer] = await store.timers("w1")
    row = await store.apply_transition(move("w1", 1, fired_timer_id=timer.id))
    assert await store.timers("w1") == []
    assert row.next_due_at is None
